#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: the burn-in's cluster lock and restore journal (logic in module_utils/kiln/burnin/lock.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kiln_burnin_lock
short_description: One burn-in per cluster, with a crash-safe restore journal
description:
  - O(op=identity) (on the Ansible controller) names this run's ansible-playbook process (host, pid, start time) and
    draws a random token for this invocation; the lock is this run's only when its run id and its token match, so two
    runs given the same run id never both hold it.
  - O(op=acquire) (on the launcher) creates the lock file atomically; when another run holds it, returns its content.
    With O(slurm), a kiln burn-in reservation left by a dead run is deleted once the lock is taken.
  - O(op=judge) (on the Ansible controller) decides whether a held lock is live, or stale (owner process gone on this
    controller, expired, or O(break_lock)).
  - O(op=recover) (on the launcher) takes over a stale lock - drains again every node the dead run resumed and never
    settled, with its recorded reason, deletes the dead run's reservations - and takes the lock for this run.
  - Every drain again is decided by C(module_utils/kiln/slurm/node_state.py) from C(sinfo) read just before it - a node whose
    reason is now someone else's (not C(BURNIN:)/C(UPGRADE:), and not the recorded one) is held, never re-drained
    (C(held)); a node Slurm no longer lists is reported, not drained. When sinfo cannot be read nothing is drained and the
    module fails.
  - O(op=update) (only by the holder) records nodes about to be resumed (O(restore)), nodes whose action was applied
    (O(settled)) and the reservation name, before the state changes.
  - O(op=release) (only by the holder) restores every unsettled node, deletes this run's reservation and removes the
    lock.
version_added: "0.3.0"
author:
  - kiln contributors
options:
  op:
    description: What to do.
    type: str
    required: true
    choices: [identity, acquire, judge, recover, update, release]
  path:
    description: The lock file on the launcher.
    type: path
    # required with op=acquire, recover, update, release (the knob's value; no default here)
  run_id:
    description: This run's id.
    type: str
  owner:
    description: This run's identity (O(op=identity)'s C(owner), with its token); the holder is recognised by it.
    type: dict
    default: {}
  minutes:
    description: Lifetime of the lock (the reservation's duration); a lock past it is stale.
    type: int
    # required with op=acquire, recover (the knob's value; no default here)
  lock:
    description: The lock content returned by O(op=acquire) (O(op=judge), O(op=recover)).
    type: raw
  problem:
    description: Why the lock file was unusable, from O(op=acquire).
    type: str
  break_lock:
    description: Treat a held lock as stale (the operator knows its run is dead).
    type: bool
    # required with op=judge (the knob's value; no default here)
  slurm:
    description: The launcher is a Slurm controller (drains and reservations are handled).
    type: bool
    default: true
  restore:
    description: O(op=update) - Slurm node name to the drain reason to restore if the run dies.
    type: dict
    default: {}
  settled:
    description: O(op=update) - Slurm node names whose verdict action was applied.
    type: list
    elements: str
    default: []
  reservation:
    description: O(op=update) - this run's reservation name.
    type: str
attributes:
  check_mode:
    support: partial
    details: identity and judge run; acquire, recover, update and release change nothing and report the lock as taken.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Take the cluster's burn-in lock
  kiln_burnin_lock:
    op: acquire
    run_id: "{{ __burnin_run_id }}"
    owner: "{{ __burnin_me.owner }}"
  delegate_to: "{{ __burnin_lock_host }}"
  register: __burnin_lock
"""

RETURN = r"""
owner:
  description: O(op=identity) - host, pid, start, user, token.
  returned: op=identity
  type: dict
acquired:
  description: Whether this run holds the lock now.
  returned: op=acquire, op=recover
  type: bool
lock:
  description: The lock content found (another run's, when not acquired).
  returned: op=acquire
  type: dict
state:
  description: O(op=judge) - free, mine, held or stale.
  returned: op=judge
  type: str
message:
  description: What was decided or done, for the play output.
  returned: always
  type: str
restored:
  description: Slurm nodes drained again with their recorded reason.
  returned: op=recover, op=release
  type: dict
held:
  description: Slurm nodes not drained again because someone else's reason holds them (node to that reason).
  returned: op=recover, op=release
  type: dict
reservations_deleted:
  description: Burn-in reservations deleted.
  returned: op=acquire, op=recover, op=release
  type: list
"""

import getpass
import json
import os
import secrets
import socket
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kiln.burnin.lock import (
    STALE, holds, judge, new_lock, parse, playbook_process, proc_start, same_holder, stale_reservations, unsettled,
)
from ansible.module_utils.kiln.slurm.node_state import CHANGE, DRAIN, HELD, decide, held_why
from ansible.module_utils.kiln.slurm.sinfo import parse_sinfo

#: The reason of a journalled node recorded without one.
DEFAULT_REASON = "BURNIN: restored after an interrupted burn-in"


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read(2 << 20)
    except FileNotFoundError:
        return None


def _write_atomic(path, data):
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".lock.", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _create(path, data):
    """O_EXCL create; False when the file exists."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    return True


def _not_drained(held, unknown):
    """The message's part about journalled nodes left alone."""
    text = "".join(f"; {node} {held_why(reason)}" for node, reason in sorted(held.items()))
    return text + (f"; not listed by Slurm (not drained): {', '.join(unknown)}" if unknown else "")


class Slurm:
    def __init__(self, module):
        self.module = module

    def run(self, argv):
        rc, out, err = self.module.run_command(argv)
        return rc, out, err

    def redrain(self, nodes):
        """Drain again, with its recorded reason, every journalled node kiln_node_state says kiln may drain
        (in service, or drained by kiln with another reason), from sinfo read just now: (restored, held, unknown)."""
        if not nodes:
            return {}, {}, []
        rc, out, err = self.run(["sinfo", "--noheader", "--Node", "--format", "%N|%T|%E"])
        if rc != 0:
            self.module.fail_json(msg=f"could not read the Slurm state of {', '.join(sorted(nodes))} (sinfo rc {rc}: "
                                      f"{(err or '').strip()[:200]}): nothing was drained again -- a drain is decided "
                                      "only from the node's reason read just before it")
        rows = parse_sinfo(out.splitlines())
        done, held, unknown = {}, {}, []
        for node, recorded in sorted(nodes.items()):
            reason = recorded or DEFAULT_REASON
            outcome, _why = decide(rows.get(node), DRAIN, reason)
            if outcome == HELD:
                held[node] = rows[node]["reason"]
            elif node not in rows:
                unknown.append(node)
            if outcome != CHANGE:
                continue
            rc, _out, err = self.run(["scontrol", "update", "NodeName=" + node, "State=DRAIN", "Reason=" + reason])
            if rc != 0:
                self.module.fail_json(msg=f"could not drain {node} again with its recorded reason {reason!r}: {err}")
            done[node] = reason
        return done, held, unknown

    def delete_reservations(self, keep=None, also=None):
        rc, out, _err = self.run(["scontrol", "show", "reservation", "--oneliner"])
        names = set(stale_reservations(out if rc == 0 else "", keep))
        if also and also != keep:
            names.add(also)
        deleted = []
        for name in sorted(names):
            # A dead run's pair job may still run inside its reservation: cancel it first.
            self.run(["scancel", "--reservation=" + name])
            for attempt in range(15):
                rc, _out, err = self.run(["scontrol", "delete", "ReservationName=" + name])
                if rc == 0:
                    deleted.append(name)
                    break
                if "not found" in (err or "").lower() or "invalid" in (err or "").lower():
                    break
                if attempt == 14:
                    self.module.fail_json(msg=f"could not delete the burn-in reservation {name}: {err}")
                time.sleep(2)
        return deleted


def main():
    module = AnsibleModule(
        argument_spec={
            "op": {"type": "str", "required": True,
                   "choices": ["identity", "acquire", "judge", "recover", "update", "release"]},
            "path": {"type": "path"},
            "run_id": {"type": "str"},
            "owner": {"type": "dict", "default": {}},
            "minutes": {"type": "int"},
            "lock": {"type": "raw"},
            "problem": {"type": "str"},
            "break_lock": {"type": "bool"},
            "slurm": {"type": "bool", "default": True},
            "restore": {"type": "dict", "default": {}},
            "settled": {"type": "list", "elements": "str", "default": []},
            "reservation": {"type": "str"},
        },
        # path, minutes and break_lock carry kiln_burnin_* knobs: required where used, defaulted only in
        # roles/burnin_settings.
        required_if=[("op", "acquire", ["path", "minutes", "run_id"]), ("op", "judge", ["break_lock", "run_id"]),
                     ("op", "recover", ["path", "minutes", "run_id"]), ("op", "update", ["path", "run_id"]),
                     ("op", "release", ["path", "run_id"])],
        supports_check_mode=True,
    )
    p = module.params
    op, path = p["op"], p["path"]
    slurm = Slurm(module)
    now = int(time.time())

    if op == "identity":
        pid = playbook_process()
        owner = {"host": socket.gethostname(), "pid": pid, "start": proc_start(pid) if pid else None,
                 "user": getpass.getuser(), "token": secrets.token_hex(8)}
        module.exit_json(changed=False, owner=owner, message=f"ansible-playbook pid {pid} on {owner['host']}")

    if op == "judge":
        lock = p["lock"] if isinstance(p["lock"], dict) else None
        owner = (lock or {}).get("owner") or {}
        alive = None
        if lock and owner.get("host") == socket.gethostname() and owner.get("pid"):
            start = proc_start(owner["pid"])
            alive = start is not None and (owner.get("start") is None or start == owner.get("start"))
        verdict = judge(lock, p["problem"], dict(p["owner"], host=socket.gethostname()), p["run_id"], now, alive,
                        p["break_lock"])
        module.exit_json(changed=False, **verdict)

    if module.check_mode:
        module.exit_json(changed=False, acquired=True, lock=None, restored={}, held={}, reservations_deleted=[],
                         message="check mode: the lock is neither taken nor changed")

    if op == "acquire":
        data = new_lock(p["run_id"], p["owner"], now, p["minutes"])
        if _create(path, data):
            deleted = slurm.delete_reservations() if p["slurm"] else []
            module.exit_json(changed=True, acquired=True, lock=data, reservations_deleted=deleted,
                             message="lock taken" + (f"; deleted stale reservations {', '.join(deleted)}"
                                                     if deleted else ""))
        lock, problem = parse(_read(path))
        if holds(lock, p["run_id"], p["owner"]):
            module.exit_json(changed=False, acquired=True, lock=lock, reservations_deleted=[], message="already ours")
        module.exit_json(changed=False, acquired=False, lock=lock, problem=problem, reservations_deleted=[],
                         message="held by " + (lock["run_id"] if lock else f"an unusable lock file ({problem})"))

    if op == "recover":
        expected = p["lock"] if isinstance(p["lock"], dict) else None
        current, problem = parse(_read(path))
        if current and expected and not same_holder(current, expected):
            module.fail_json(msg=f"the lock changed hands while recovering (now {current['run_id']}); re-run")
        restored, held, unknown, deleted = {}, {}, [], []
        if current and p["slurm"]:
            restored, held, unknown = slurm.redrain(unsettled(current))
        if p["slurm"]:
            deleted = slurm.delete_reservations(also=(current or {}).get("reservation"))
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        _write_atomic(path, new_lock(p["run_id"], p["owner"], now, p["minutes"]))
        module.exit_json(changed=True, acquired=True, restored=restored, held=held, reservations_deleted=deleted,
                         message=(f"recovered from {(current or {}).get('run_id') or 'an unusable lock file'}"
                                  f"{' (' + problem + ')' if problem else ''}: drained again "
                                  f"{', '.join(f'{n} ({r})' for n, r in restored.items()) or 'nothing'}"
                                  f"{_not_drained(held, unknown)}; deleted reservations {', '.join(deleted) or 'none'}"))

    current, problem = parse(_read(path))
    if not holds(current, p["run_id"], p["owner"]):
        if op == "release":
            module.exit_json(changed=False, restored={}, held={}, reservations_deleted=[],
                             message="this run does not hold the lock (nothing to release)")
        holder = (current or {}).get("run_id") or problem or "no lock file"
        module.fail_json(msg=f"burn-in {p['run_id']} does not hold the lock (held by {holder}): "
                             "stopping before it changes any node state")

    if op == "update":
        current["restore"].update({str(k): str(v) for k, v in p["restore"].items()})
        current["settled"] = sorted(set(current["settled"]) | set(p["settled"]))
        if p["reservation"]:
            current["reservation"] = p["reservation"]
        current["schema"] = current.get("schema") or "kiln.burnin.lock/v1"
        _write_atomic(path, current)
        module.exit_json(changed=True, message=f"journal: restore {sorted(current['restore'])}, "
                                               f"settled {current['settled']}")

    # release
    restored, held, unknown = slurm.redrain(unsettled(current)) if p["slurm"] else ({}, {}, [])
    deleted = slurm.delete_reservations(also=current.get("reservation")) if p["slurm"] else []
    os.unlink(path)
    module.exit_json(changed=True, restored=restored, held=held, reservations_deleted=deleted,
                     message="lock released" + (f"; drained again {', '.join(restored)}" if restored else "")
                     + _not_drained(held, unknown))


if __name__ == "__main__":
    main()
