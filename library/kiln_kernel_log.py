#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: a node's kernel log for NVIDIA XIDs since its last burn-in (logic in module_utils/kiln/health/kernel_log.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kiln_kernel_log
short_description: NVIDIA XID lines of the kernel log since the last burn-in, and whether it was readable
description:
  - Reads the epoch seconds (UTC, the node's own clock) of the last read from O(stamp_path); a missing, malformed or
    future stamp (an older kiln wrote the controller's local time) reads the whole boot and says so.
  - Reads this boot's kernel messages since then with C(journalctl -k) when the journal holds kernel messages at all,
    else C(dmesg); returns the C(NVRM: Xid) lines of that window.
  - When no source is readable, C(kernel_log.readable) is false and C(kernel_log.problems) says why for each source; the
    burn-in judges that C(xid.kernel_log) INCOMPLETE, never "no XID".
  - Changes nothing; the burn-in writes C(kernel_log.now) to O(stamp_path) afterwards, so the next read starts where this
    one began.
version_added: "0.3.0"
author:
  - kiln contributors
options:
  stamp_path:
    description: The node's last-read stamp.
    type: path
    default: /var/lib/kiln/burnin/last_run
  journalctl:
    description: The journalctl command (name or path).
    type: str
    default: journalctl
  dmesg:
    description: The dmesg command (name or path).
    type: str
    default: dmesg
  proc_root:
    description: Where C(uptime) is read (places C(dmesg)'s seconds since boot on the epoch).
    type: path
    default: /proc
attributes:
  check_mode:
    support: full
    details: Reads only.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Read the kernel log since the last burn-in (NVIDIA XIDs)
  kiln_kernel_log:
  register: __burnin_xids
"""

RETURN = r"""
kernel_log:
  description: >-
    readable, source (journalctl, dmesg or null), since (epoch seconds read from; 0 the whole boot), note (why the whole
    boot), now (the node's epoch seconds when the read began), xid_lines, problems (why a source was not used).
  returned: always
  type: dict
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kiln.health.kernel_log import DMESG, JOURNAL_PROBE, journal_argv, journal_problem, result, window


def _stamp(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(64), None
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"


def _uptime(proc_root):
    try:
        with open(os.path.join(proc_root, "uptime"), encoding="utf-8") as handle:
            return float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _run(module, command, argv):
    path = command if os.path.isabs(command) else module.get_bin_path(command)
    full = [command] + list(argv[1:])
    if not path or not os.access(path, os.X_OK):
        return {"argv": full, "rc": None, "stdout": "", "stderr": f"{command} not found"}
    rc, out, err = module.run_command([path] + list(argv[1:]), environ_update={"LC_ALL": "C", "SYSTEMD_COLORS": "0"})
    return {"argv": full, "rc": rc, "stdout": out, "stderr": err}


def main():
    module = AnsibleModule(
        argument_spec={
            "stamp_path": {"type": "path", "default": "/var/lib/kiln/burnin/last_run"},
            "journalctl": {"type": "str", "default": "journalctl"},
            "dmesg": {"type": "str", "default": "dmesg"},
            "proc_root": {"type": "path", "default": "/proc"},
        },
        supports_check_mode=True,
    )
    p = module.params
    now = time.time()  # epoch seconds: UTC whatever the node's zone; taken before the read (no gap to the next)
    stamp, problem = _stamp(p["stamp_path"])
    win = window(stamp, now, problem)
    probe = _run(module, p["journalctl"], JOURNAL_PROBE)
    read = _run(module, p["journalctl"], journal_argv(win["since"])) if journal_problem(probe) is None else None
    need_dmesg = read is None or read.get("rc") != 0
    dmesg = _run(module, p["dmesg"], DMESG) if need_dmesg else None
    module.exit_json(changed=False, kernel_log=result(win, now, _uptime(p["proc_root"]), probe, read, dmesg))


if __name__ == "__main__":
    main()
