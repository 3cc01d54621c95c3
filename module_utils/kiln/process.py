# -*- coding: utf-8 -*-
"""Run a program (argv, never a shell) and keep *all* of its output: :func:`run_argv`.

``AnsibleModule.run_command`` -- behind ``ansible.builtin.command`` -- reads the child's pipes in a
loop of ``select(timeout=1)``. When a select times out with nothing to read and the child has exited
by the time the loop checks ``poll()``, the loop ends *without reading the pipes again*: whatever the
child wrote in between is lost, and the task reports rc 0 with an empty stdout (ansible/ansible#51393,
open in ansible-core 2.19). A measurement program that is silent for whole seconds and prints its result
as it exits -- ``iperf3 -J -t N``, ``dcgmi diag -j``, an all-reduce under ``timeout`` -- lands in that
window often: on kiln's test bed ``sh -c 'sleep 2; echo x'`` came back empty in 10 of 30 runs, and
``iperf3 -J -t 2`` in 8 of 25 (bench/run_command_race.py measures it). The burn-in then lost a
link rate and failed the node's task while its verdict said PASS.

:func:`run_argv` reads with ``Popen.communicate``: it reads both pipes until end-of-file and only then
reaps the child, so nothing written before the child exits is lost. Module ``kiln_command`` wraps it
for the tasks whose output kiln parses.

Standard library only; importable as ``kiln.process`` and as ``ansible.module_utils.kiln.process``.
"""

from __future__ import annotations

import datetime
import subprocess
from typing import Any, Dict, Optional, Sequence

__all__ = ["run_argv"]


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def run_argv(argv: Sequence[str], *, stdin: Optional[str] = None) -> Dict[str, Any]:
    """Run *argv* (no shell) to its end; the result has ansible.builtin.command's keys.

    ``{cmd, rc, stdout, stderr, stdout_lines, stderr_lines, start, end, delta}``; stdout and stderr
    are whole (decoded as UTF-8, undecodable bytes replaced) with trailing newlines removed, as
    ansible.builtin.command does. A program that cannot be started gives rc 127 (not found) or 126
    (not executable) and the reason in stderr -- the shell's codes -- never an exception. *stdin* is
    sent and closed; without it the child reads /dev/null (the environment is this process's, which a
    task's ``environment:`` sets). ``start`` and ``end`` are UTC (``2026-12-06 22:14:06.010177+00:00``; kiln records no
    local time).
    """
    args = [str(a) for a in argv]
    if not args:
        raise ValueError("run_argv: an empty argv runs nothing")
    started = datetime.datetime.now(datetime.timezone.utc)
    try:
        proc = subprocess.Popen(args, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError as exc:
        rc, out, err = 127, b"", f"{args[0]}: not found ({exc.strerror})".encode()
    except PermissionError as exc:
        rc, out, err = 126, b"", f"{args[0]}: cannot run ({exc.strerror})".encode()
    else:
        out, err = proc.communicate(stdin.encode() if stdin is not None else None)
        rc = proc.returncode
    ended = datetime.datetime.now(datetime.timezone.utc)
    stdout = _text(out).rstrip("\r\n")
    stderr = _text(err).rstrip("\r\n")
    return {"cmd": args, "rc": rc, "stdout": stdout, "stderr": stderr,
            "stdout_lines": stdout.splitlines(), "stderr_lines": stderr.splitlines(),
            "start": str(started), "end": str(ended), "delta": str(ended - started)}
