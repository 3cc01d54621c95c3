# -*- coding: utf-8 -*-
"""The burn-in's cluster lock and restore journal (pure logic; I/O in library/kiln_burnin_lock.py).

One burn-in at a time per cluster: the lock is a JSON file on the launcher
(the Slurm controller), created atomically (O_EXCL) by the run that takes it::

  {"schema": "kiln.burnin.lock/v1", "run_id": "...", "started": 1767225600,
   "expires": 1767240000, "owner": {"host": "ops1", "pid": 4242, "start": 98765, "user": "ops",
   "token": "9c1f..."}, "reservation": "kiln-burnin-...", "restore": {"gpu07": "BURNIN: nccl.pair ..."},
   "settled": []}

The lock belongs to one invocation, not to a run id: ``owner.token`` is drawn afresh by each
ansible-playbook run (module op=identity), and a run holds the lock only when both its run id
and its token match (``holds``). Two runs given the same run id (``-e kiln_burnin_run_id=x``
twice, or an id to the second) never both hold it: the second is refused like any other.

The same file is the run's restore journal: before the run resumes a
drained node it writes the node's old drain reason here, and it marks a node
settled only after the verdict's action for it was applied. A run that dies
(signal, crash, lost controller) leaves the file behind; the next run finds
it stale -- its owner process is gone on the same Ansible controller, or it
has expired -- and, before anything else, drains every unsettled node again
with its recorded reason and deletes the dead run's reservation. Whether a node
is drained again is decided by ``kiln_node_state`` from sinfo read just before
(library/kiln_burnin_lock.py): a node someone else's reason holds is left alone. A lock
whose owner is alive is never broken without ``kiln_burnin_break_lock``.

Standard library only; importable as ``kiln.burnin.lock`` and as
``ansible.module_utils.kiln.burnin.lock``.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

SCHEMA = "kiln.burnin.lock/v1"
FREE, MINE, HELD, STALE = "free", "mine", "held", "stale"
RESERVATION_PREFIX = "kiln-burnin-"
MAX_LOCK_BYTES = 1 << 20
_RESERVATION_RE = re.compile(r"ReservationName=(\S+)")


def proc_start(pid: int, proc: str = "/proc") -> Optional[int]:
    """Start time (clock ticks since boot, field 22 of /proc/<pid>/stat) or None when gone."""
    try:
        with open(os.path.join(proc, str(int(pid)), "stat"), encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except (OSError, ValueError):
        return None
    try:
        return int(text[text.rindex(")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


def _cmdline(pid: int, proc: str) -> List[str]:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
            return [part.decode("utf-8", "replace") for part in handle.read().split(b"\0") if part]
    except OSError:
        return []


def _ppid(pid: int, proc: str) -> Optional[int]:
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        return int(text[text.rindex(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def playbook_process(pid: Optional[int] = None, proc: str = "/proc") -> Optional[int]:
    """The ansible-playbook process this module runs under, or None.

    Walks up from *pid*: the first ansible-playbook ancestor is a worker
    (forked per task, same command line); its ansible-playbook parents are
    followed to the main process, which lives as long as the run.
    """
    current = os.getpid() if pid is None else pid
    found: Optional[int] = None
    for _ in range(64):
        if current is None or current <= 1:
            break
        argv = _cmdline(current, proc)
        if any(os.path.basename(a) == "ansible-playbook" for a in argv[:2]):
            found = current
        elif found is not None:
            break
        current = _ppid(current, proc)
    return found


def parse(text: Any) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(lock, problem): the lock file's content, or None and why it is unusable (never raises)."""
    if text is None:
        return None, None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if len(text) > MAX_LOCK_BYTES:
        return None, "lock file larger than 1 MiB"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, f"lock file is not JSON ({str(exc)[:80]})"
    if not isinstance(data, dict) or not isinstance(data.get("run_id"), str):
        return None, "lock file has no run_id"
    owner = data.get("owner") if isinstance(data.get("owner"), dict) else {}
    restore = data.get("restore") if isinstance(data.get("restore"), dict) else {}
    settled = data.get("settled") if isinstance(data.get("settled"), list) else []
    return {
        "schema": data.get("schema"),
        "run_id": data["run_id"],
        "started": _int(data.get("started")),
        "expires": _int(data.get("expires")),
        "owner": {"host": str(owner.get("host") or ""), "pid": _int(owner.get("pid")),
                  "start": _int(owner.get("start")), "user": str(owner.get("user") or ""),
                  "token": str(owner.get("token") or "")},
        "reservation": data.get("reservation") if isinstance(data.get("reservation"), str) else None,
        "restore": {str(k): str(v) for k, v in restore.items()},
        "settled": [str(n) for n in settled],
    }, None


def _int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if 0 <= number < 1 << 62 else None


def _utc(epoch: Optional[int]) -> str:
    if epoch is None:
        return "?"
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_lock(run_id: str, owner: Mapping[str, Any], now: int, minutes: int,
             reservation: Optional[str] = None) -> Dict[str, Any]:
    return {"schema": SCHEMA, "run_id": run_id, "started": int(now), "expires": int(now) + 60 * int(minutes),
            "owner": dict(owner), "reservation": reservation, "restore": {}, "settled": []}


def holds(lock: Optional[Mapping[str, Any]], run_id: Optional[str], owner: Optional[Mapping[str, Any]]) -> bool:
    """Whether *lock* is this invocation's: the same run id and the same owner token (never a run id alone)."""
    if not isinstance(lock, Mapping) or not isinstance(owner, Mapping) or not run_id:
        return False
    token = str(owner.get("token") or "")
    held = lock.get("owner") if isinstance(lock.get("owner"), Mapping) else {}
    return lock.get("run_id") == run_id and bool(token) and str(held.get("token") or "") == token


def same_holder(a: Optional[Mapping[str, Any]], b: Optional[Mapping[str, Any]]) -> bool:
    """Whether two lock contents name the same holder (run id and owner token, an empty token included)."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return False

    def token(lock: Mapping[str, Any]) -> str:
        return str((lock.get("owner") if isinstance(lock.get("owner"), Mapping) else {}).get("token") or "")
    return a.get("run_id") == b.get("run_id") and token(a) == token(b)


def judge(lock: Optional[Mapping[str, Any]], problem: Optional[str], me: Mapping[str, Any], run_id: str,
          now: int, alive: Optional[bool], break_lock: bool) -> Dict[str, Any]:
    """Is the cluster's lock free, ours, held by a live run, or stale?

    *me*: this run's owner identity (op=identity: host, pid, start, user, token); the lock is
    ours only when its run id and token are ours (``holds``). *alive*: whether the owner's
    process still runs, when the owner is on this Ansible controller (None when it is
    elsewhere: then only the expiry decides). A corrupt lock file is stale.
    """
    if lock is None and problem is None:
        return {"state": FREE, "message": "no burn-in holds the cluster"}
    if lock is None:
        return {"state": STALE, "message": f"unusable lock file ({problem}): taken over"}
    if holds(lock, run_id, me):
        return {"state": MINE, "message": "this run holds the lock"}
    owner = lock["owner"]
    holder = (f"burn-in {lock['run_id']} (ansible-playbook pid {owner.get('pid')} on {owner.get('host') or '?'}"
              f"{', user ' + owner['user'] if owner.get('user') else ''}, since {_utc(lock.get('started'))}"
              f"{'; the same run id as this run' if lock['run_id'] == run_id else ''})")
    if break_lock:
        return {"state": STALE, "message": f"{holder}: lock broken by kiln_burnin_break_lock"}
    same_host = bool(owner.get("host")) and owner.get("host") == me.get("host")
    if same_host and alive is False:
        return {"state": STALE, "message": f"{holder}: its process is gone (interrupted): recovering"}
    expires = lock.get("expires")
    if expires is not None and now > expires:
        return {"state": STALE, "message": f"{holder}: expired at {expires}: recovering"}
    fix = ("wait for it to finish" if same_host else
           "wait for it, or if it died on its controller, re-run with -e kiln_burnin_break_lock=true")
    return {"state": HELD, "message": f"another burn-in holds this cluster: {holder}; {fix}"}


def unsettled(lock: Mapping[str, Any]) -> Dict[str, str]:
    """Nodes a run resumed whose verdict action was never applied: {slurm node: old reason}."""
    settled = set(lock.get("settled") or [])
    return {node: reason for node, reason in (lock.get("restore") or {}).items() if node not in settled}


def stale_reservations(show_reservation: str, keep: Optional[str] = None) -> List[str]:
    """kiln burn-in reservations in ``scontrol show reservation --oneliner`` output, except *keep*."""
    names = []
    for match in _RESERVATION_RE.finditer(show_reservation or ""):
        name = match.group(1)
        if name.startswith(RESERVATION_PREFIX) and name != keep:
            names.append(name)
    return sorted(set(names))
