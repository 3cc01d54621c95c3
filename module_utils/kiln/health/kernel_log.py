# -*- coding: utf-8 -*-
"""The kernel log a burn-in reads for NVIDIA XIDs: the window, the source, and what was read.

The node keeps the epoch of its last read in ``/var/lib/kiln/burnin/last_run`` (its own clock,
UTC epoch seconds). The next read takes the kernel messages from there on:

1. ``journalctl -k`` (this boot's kernel messages) when the journal holds kernel messages
   at all (a probe for the latest one): a journal that holds none (journald not reading
   ``/dev/kmsg``) proves nothing;
2. else ``dmesg`` (the kernel ring buffer), its ``[seconds since boot]`` stamps placed on the
   epoch with the boot time from ``/proc/uptime``;
3. else nothing was readable: ``readable`` is false and each source says why. kiln judges
   that ``xid.kernel_log`` INCOMPLETE, never "no XID" (kiln_burnin_checks).

A stamp that is missing, not epoch seconds, or ahead of the node's clock (an older kiln wrote
the controller's *local* time as epoch) reads the whole boot, and says so.
The I/O is in library/kiln_kernel_log.py; this file decides.

Standard library only; importable as ``kiln.health.kernel_log`` and as
``ansible.module_utils.kiln.health.kernel_log``.
"""

from __future__ import annotations

import datetime
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

SCHEMA = "kiln.kernel_log/v1"
XID_MARK = "NVRM: Xid"
DEFAULT_STAMP = "/var/lib/kiln/burnin/last_run"
#: The latest kernel message of this boot: proves the journal holds kernel messages at all.
JOURNAL_PROBE = ["journalctl", "-k", "-q", "--no-pager", "-o", "short-unix", "-n", "1"]
DMESG = ["dmesg"]
_STAMP_RE = re.compile(r"^\d{1,12}$")
_UNIX_RE = re.compile(r"^(\d{9,12}(?:\.\d+)?)\s")
_DMESG_RE = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")
MAX_LINES = 1000


def _utc(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def window(stamp: Optional[str], now: float, problem: Optional[str] = None) -> Dict[str, Any]:
    """``{since, note}``: epoch seconds to read from, and why it is 0 (the whole boot) when it is.

    *stamp*: the text of the last-run file (None: no file); *problem*: why it could not be read.
    """
    whole = "reading the whole boot"
    if problem:
        return {"since": 0, "note": f"cannot read the last-run stamp ({problem}): {whole}"}
    if stamp is None:
        return {"since": 0, "note": f"no earlier burn-in read on this node: {whole}"}
    text = stamp.strip()
    if not _STAMP_RE.match(text):
        return {"since": 0, "note": f"last-run stamp {text[:40]!r} is not epoch seconds: {whole}"}
    since = int(text)
    if since > now:
        hours = (since - now) / 3600.0
        return {"since": 0, "note": f"last-run stamp {since} ({_utc(since)}) is {hours:.1f} h ahead of this "
                                    f"node's clock ({_utc(now)}): written in the controller's local time by an "
                                    f"older kiln, or the clock went back; {whole}"}
    return {"since": since, "note": None}


def journal_argv(since: int) -> List[str]:
    """The read: this boot's kernel messages from *since* (epoch seconds) on."""
    return ["journalctl", "-k", "-q", "--no-pager", "-o", "short-unix", "--since", f"@{int(since)}"]


def run_problem(run: Optional[Mapping[str, Any]]) -> Optional[str]:
    """Why a command's result is no reading (None when it ran and exited 0).

    *run*: ``{argv, rc, stdout, stderr}``; rc None when the command could not be started.
    """
    if not isinstance(run, Mapping):
        return "not run"
    name = (list(run.get("argv") or []) or ["command"])[0]
    err = " ".join(str(run.get("stderr") or "").split())[:200]
    if run.get("rc") is None:
        return f"{name} could not run" + (f": {err}" if err else "")
    if run.get("rc") != 0:
        return f"{name} exited {run.get('rc')}" + (f": {err}" if err else "")
    return None


def _lines(run: Mapping[str, Any]) -> List[str]:
    return [line for line in str(run.get("stdout") or "").splitlines() if line.strip() and not line.startswith("-- ")]


def journal_problem(probe: Optional[Mapping[str, Any]]) -> Optional[str]:
    """Why the journal is no source (None when it holds kernel messages of this boot)."""
    problem = run_problem(probe)
    if problem:
        return problem
    if not _lines(probe or {}):
        return "the journal holds no kernel message of this boot (journald does not read the kernel log here)"
    return None


def journal_xids(run: Mapping[str, Any], since: int) -> List[str]:
    """XID lines of ``journalctl -o short-unix`` output at or after *since* (unstamped: kept)."""
    out = []
    for line in _lines(run):
        if XID_MARK not in line:
            continue
        match = _UNIX_RE.match(line)
        if match and float(match.group(1)) < since:
            continue
        out.append(line.strip())
    return out


def dmesg_xids(run: Mapping[str, Any], since: int, boot: Optional[float]) -> List[str]:
    """XID lines of ``dmesg`` output at or after *since*, placed by *boot* (epoch of boot; None: keep all)."""
    out = []
    for line in _lines(run):
        if XID_MARK not in line:
            continue
        match = _DMESG_RE.match(line)
        if match and boot is not None and boot + float(match.group(1)) < since - 1:
            continue
        out.append(line.strip())
    return out


def result(win: Mapping[str, Any], now: float, uptime: Optional[float], probe: Optional[Mapping[str, Any]],
           read: Optional[Mapping[str, Any]], dmesg: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """What was read: ``{schema, readable, source, since, note, now, xid_lines, problems}``.

    *probe*, *read*: the journal's probe and read (``JOURNAL_PROBE``, ``journal_argv``); *dmesg*:
    ``DMESG``'s run (None when not needed). *now*: the node's epoch when the read began (the next
    read starts there); *uptime*: seconds since boot (None: unknown).
    """
    since = int(win.get("since") or 0)
    boot = now - uptime if uptime is not None else None
    out: Dict[str, Any] = {"schema": SCHEMA, "readable": False, "source": None, "since": since,
                           "note": win.get("note"), "now": int(now), "xid_lines": [], "problems": []}
    problem = journal_problem(probe) or run_problem(read)
    if problem is None and read is not None:
        out.update(readable=True, source="journalctl", xid_lines=journal_xids(read, since)[:MAX_LINES])
        return out
    out["problems"].append(f"journalctl: {problem}")
    problem = run_problem(dmesg)
    if problem is None and dmesg is not None and not _lines(dmesg):
        problem = "the kernel ring buffer is empty (cleared?)"
    if problem is None and dmesg is not None:
        out.update(readable=True, source="dmesg", xid_lines=dmesg_xids(dmesg, since, boot)[:MAX_LINES])
        return out
    out["problems"].append(f"dmesg: {problem}")
    return out


def describe(read: Mapping[str, Any]) -> Tuple[str, str]:
    """(window, sources): ``since 2026-01-01T00:00:00Z`` / ``the whole boot``, and what was read or refused."""
    since = int(read.get("since") or 0)
    span = f"since {_utc(since)}" if since else "this boot"
    source = str(read.get("source") or "none")
    problems = "; ".join(str(p) for p in read.get("problems") or [])
    return span, (f"read with {source}" + (f" ({problems})" if problems else "")) if read.get("readable") \
        else (problems or "no source readable")
