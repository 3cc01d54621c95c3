# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Launch commands of the burn-in's multi-node all-reduces (the pairs and the fabric run).

One function, :func:`launch_argv`, builds the whole argv the launcher host runs --
``timeout SECONDS`` + the launcher + the program -- for a list of member hosts:

- ``srun`` (the cluster has a Slurm controller): one job step named ``kiln-burnin``
  on the members' Slurm node names, ``--ntasks-per-node`` processes each, PMIx,
  the caller's environment exported, inside the run's maintenance reservation
  when there is one;
- ``mpirun`` (no Slurm): Open MPI over TCP on one interface, the environment's
  names forwarded with ``-x``, ``ADDRESS:SLOTS`` per member.

The result is always a list of strings for ``ansible.builtin.command``'s
``argv``: no shell ever parses it, and each host name or address is one
comma-separated element of ``-w``/``--host``, never shell text. Standard
library only (no Ansible import); importable as ``kiln.burnin.launch`` and as
``ansible.module_utils.kiln.burnin.launch``; the Jinja filter ``kiln_launch_argv`` (at the end,
registered by filter_plugins/kiln_launch_filters.py) checks the play's settings and calls it.

What a burn-in mode runs is one table here too, :data:`MODES` (:func:`mode_plan`, filter
``kiln_launch_mode``): the ``dcgmi diag`` level, the all-reduce iterations, and whether the pair
phase, the fabric all-reduce and the iperf3 link check run. :func:`engine_program` (filter
``kiln_launch_program``) is the all-reduce program with its default arguments for an engine and a
mode, or the operator's arguments.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, List, Optional

from ..errors import FilterError

__all__ = ["ENGINES", "JOB_NAME", "LAUNCHERS", "LAUNCH_KEYS", "MODES", "LaunchError", "engine_program", "kiln_launch_mode",
           "kiln_launch_program", "kiln_launch_argv", "launch_argv", "mode_plan"]

#: Slurm job name of every burn-in launch (tests and operators find the jobs by it: squeue --name).
JOB_NAME = "kiln-burnin"
LAUNCHERS = ("srun", "mpirun")
_BAD_NAME = re.compile(r"[\s,]")


class LaunchError(ValueError):
    """A launch that cannot be built; the message names the variable to fix."""


def _whole(value: Any, what: str, minimum: int) -> int:
    """*value* as an int >= *minimum* (ints and digit strings; never bools or fractions)."""
    if isinstance(value, bool):
        raise LaunchError(f"{what} must be a whole number >= {minimum}, got {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    else:
        raise LaunchError(f"{what} must be a whole number >= {minimum}, got {str(value)[:40]!r}")
    if number < minimum:
        raise LaunchError(f"{what} must be a whole number >= {minimum}, got {number}")
    return number


def _names(members: Sequence[str], table: Optional[Mapping[str, Any]], what: str) -> List[str]:
    """The launcher's name for each member (Slurm node name or address), checked."""
    if not isinstance(table, Mapping):
        raise LaunchError(f"{what} must be a mapping of inventory host to name, got {type(table).__name__}")
    out: List[str] = []
    for member in members:
        name = table.get(member)
        if not isinstance(name, str) or not name:
            raise LaunchError(f"member {member!r} has no {what}")
        if _BAD_NAME.search(name):
            raise LaunchError(f"member {member!r}: {what} {name!r} contains a comma or white space")
        out.append(name)
    return out


def _strings(values: Any, what: str) -> List[str]:
    """A list of argv words: strings kept, numbers as text, anything else refused."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise LaunchError(f"{what} must be a list of arguments, got {type(values).__name__}")
    out: List[str] = []
    for value in values:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(str(value))
        else:
            raise LaunchError(f"{what}: each argument must be a string or a number, got {value!r}")
    return out


def launch_argv(launcher: str, members: Sequence[str], *, ppn: Any, program: Sequence[Any], timeout: Any,
                slurm_names: Optional[Mapping[str, Any]] = None, addresses: Optional[Mapping[str, Any]] = None,
                iface: str = "", env_names: Iterable[str] = (), reservation: Optional[str] = None) -> List[str]:
    """The argv that runs *program* on every host of *members* through *launcher*.

    :param launcher: ``srun`` or ``mpirun``.
    :param members: inventory host names, distinct, at least one.
    :param ppn: processes per node, >= 1 (``kiln_burnin_fabric_ranks_per_node``).
    :param program: the program and its arguments (the all-reduce engine first).
    :param timeout: seconds before ``timeout`` stops the launch (0: no limit, as timeout(1) reads it).
    :param slurm_names: srun: inventory host -> Slurm node name.
    :param addresses: mpirun: inventory host -> address.
    :param iface: mpirun: the TCP interface (``kiln_burnin_iface``).
    :param env_names: mpirun: environment variable names forwarded with ``-x``, in order.
    :param reservation: srun: the maintenance reservation to run in; None or empty for none
        (mpirun runs outside Slurm and ignores it).
    :raises LaunchError: on any input the launch cannot honour, naming it.
    """
    if launcher not in LAUNCHERS:
        raise LaunchError(f"launcher must be srun or mpirun (kiln_burnin_use_slurm), got {str(launcher)[:40]!r}")
    if isinstance(members, (str, bytes)) or not isinstance(members, Sequence):
        raise LaunchError(f"members must be a list of inventory hosts, got {type(members).__name__}")
    hosts = list(members)
    if not hosts:
        raise LaunchError("members is empty: no inventory host to launch the all-reduce on")
    if not all(isinstance(h, str) and h for h in hosts):
        raise LaunchError(f"members must be inventory host names, got {hosts!r}"[:200])
    if len(set(hosts)) != len(hosts):
        raise LaunchError(f"members must be distinct, got {', '.join(hosts)}"[:200])
    slots = _whole(ppn, "processes per node (kiln_burnin_fabric_ranks_per_node)", 1)
    seconds = _whole(timeout, "timeout (kiln_burnin_pair_timeout, kiln_burnin_fabric_timeout)", 0)
    command = _strings(program, "program")
    if not command:
        raise LaunchError("program is empty: no all-reduce engine to run")
    argv = ["timeout", str(seconds)]
    if launcher == "srun":
        names = _names(hosts, slurm_names, "Slurm node name (slurm_names)")
        argv += ["srun", f"--job-name={JOB_NAME}", f"--ntasks-per-node={slots}", "--mpi=pmix", "--export=ALL",
                 "-N", str(len(hosts)), "-w", ",".join(names)]
        if reservation:
            if not isinstance(reservation, str) or _BAD_NAME.search(reservation):
                raise LaunchError(f"reservation must be a Slurm reservation name, got {str(reservation)[:40]!r}")
            argv.append(f"--reservation={reservation}")
        return argv + command
    if not isinstance(iface, str) or not iface or _BAD_NAME.search(iface):
        raise LaunchError(f"kiln_burnin_iface must name one network interface, got {str(iface)[:40]!r}")
    names = _names(hosts, addresses, "address (ansible_facts.default_ipv4.address)")
    forwarded = _strings(env_names, "env_names")
    if not all(forwarded):
        raise LaunchError("env_names: an environment variable name is empty")
    argv += ["mpirun", "--allow-run-as-root", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", iface]
    for name in forwarded:
        argv += ["-x", name]
    argv += ["-np", str(len(hosts) * slots), "--host", ",".join(f"{name}:{slots}" for name in names)]
    return argv + command

# --------------------------------------------------------------------------- the filters
# What filter_plugins/kiln_launch_filters.py registers: each input checked (one FilterError naming the
# filter and the input), then the functions above.

#: What each burn-in mode runs (docs/burnin.md "Modes"): dcgmi diag level, all-reduce iterations
#: (-n), and whether the pair phase, the fabric all-reduce and the iperf3 link check run.
MODES: dict[str, dict[str, Any]] = {
    "quick": {"dcgm_level": 1, "iters": 5, "pairs": False, "fabric": False, "link": False},
    "default": {"dcgm_level": 2, "iters": 10, "pairs": True, "fabric": True, "link": True},
    "acceptance": {"dcgm_level": 3, "iters": 50, "pairs": True, "fabric": True, "link": True},
    "swap": {"dcgm_level": 2, "iters": 10, "pairs": True, "fabric": False, "link": True},
}
#: The all-reduce engines and their default arguments before ``-n ITERS`` (kiln-cpu-allreduce: sizes
#: 1M..64M; all_reduce_perf: 1G..16G, one GPU per rank, check results).
ENGINES: dict[str, list[str]] = {
    "cpu": ["-b", "1M", "-e", "64M", "-f", "2", "-n", "{iters}", "-w", "2"],
    "nccl-tests": ["-b", "1G", "-e", "16G", "-f", "2", "-g", "1", "-c", "1", "-n", "{iters}"],
}


def mode_plan(mode: Any) -> dict[str, Any]:
    """What burn-in *mode* runs (a copy of its :data:`MODES` row)."""
    if not isinstance(mode, str) or mode not in MODES:
        raise LaunchError(f"mode must be one of {', '.join(MODES)} (kiln_burnin_mode), got {str(mode)[:40]!r}")
    return dict(MODES[mode])


def engine_program(engine: Any, tool: Any, mode: Any, args: Any = None) -> list[str]:
    """The all-reduce program: *tool* (its path on the nodes) then *args* when given (the operator's
    kiln_burnin_cpu_args / kiln_burnin_fabric_args), else the engine's defaults with the mode's iterations."""
    if not isinstance(engine, str) or engine not in ENGINES:
        raise LaunchError(f"engine must be one of {', '.join(ENGINES)}, got {str(engine)[:40]!r}")
    if not isinstance(tool, str) or not tool:
        raise LaunchError(f"the {engine} engine's program path must be a non-empty string, got {str(tool)[:40]!r}")
    if args is not None:
        return [tool, *_strings(args, f"the {engine} engine's arguments")]
    iters = str(mode_plan(mode)["iters"])
    return [tool, *(iters if a == "{iters}" else a for a in ENGINES[engine])]


def kiln_launch_mode(mode: Any) -> dict[str, Any]:
    """Filter: :func:`mode_plan`, its error a one-line filter error."""
    try:
        return mode_plan(mode)
    except LaunchError as exc:
        raise FilterError(f"kiln_launch_mode: {exc}") from exc


def kiln_launch_program(tool: Any, engine: Any, mode: Any, args: Any = None) -> list[str]:
    """Filter: :func:`engine_program` (``tool | kiln_launch_program(engine, mode, args)``)."""
    try:
        return engine_program(engine, tool, mode, args)
    except LaunchError as exc:
        raise FilterError(f"kiln_launch_program: {exc}") from exc


#: Keys of the filter's ``launch`` mapping.
LAUNCH_KEYS = frozenset({"launcher", "ppn", "iface", "env", "slurm_names", "addresses", "reservation"})


def kiln_launch_argv(members: Any, launch: Any, program: Any, timeout: Any) -> list[str]:
    """argv of one all-reduce on *members* (inventory hosts) with the play's *launch* settings.

    *launch* holds ``launcher`` (srun or mpirun), ``ppn``, ``slurm_names``, ``addresses``,
    ``iface``, ``env`` (the run's environment: its names are forwarded by mpirun) and
    ``reservation`` (srun; empty or None for none).
    """
    if not isinstance(launch, Mapping):
        raise FilterError(f"kiln_launch_argv: launch must be a mapping, got {type(launch).__name__}")
    unknown = sorted(set(launch) - LAUNCH_KEYS)
    if unknown:
        raise FilterError(f"kiln_launch_argv: unknown launch keys {', '.join(map(str, unknown))}; "
                          f"known: {', '.join(sorted(LAUNCH_KEYS))}")
    if "launcher" not in launch or "ppn" not in launch:
        raise FilterError("kiln_launch_argv: launch needs launcher and ppn")
    env = launch.get("env") or {}
    try:
        return launch_argv(
            launch["launcher"], members, ppn=launch["ppn"], program=program, timeout=timeout,
            slurm_names=launch.get("slurm_names"), addresses=launch.get("addresses"),
            iface=launch.get("iface") or "", env_names=list(env) if isinstance(env, Mapping) else env,
            reservation=launch.get("reservation") or None)
    except LaunchError as exc:
        raise FilterError(f"kiln_launch_argv: {exc}") from exc
