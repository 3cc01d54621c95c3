#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: run an argv and return all of its output (ansible.builtin.command's result)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: kiln_command
short_description: Run a program from an argv and return its whole output, even what it wrote as it exited
description:
  - Runs O(argv) (no shell) and returns the keys of M(ansible.builtin.command) (C(cmd), C(rc), C(stdout),
    C(stderr), C(stdout_lines), C(stderr_lines), C(start), C(end), C(delta)); a non-zero rc fails the task
    unless the task's C(failed_when) says otherwise, as M(ansible.builtin.command) does.
  - Why it exists. M(ansible.builtin.command) reads the program's pipes in a loop of one-second selects and
    stops, without reading again, when a select timed out and the program has exited meanwhile; what the
    program wrote in between is lost and the task says rc 0 with an empty stdout (ansible/ansible#51393).
    A program that is silent for whole seconds and prints its result as it exits (C(iperf3 -J -t N),
    C(dcgmi diag -j), an all-reduce) lands there often. kiln runs every measurement whose output it parses
    through this module (C(module_utils/kiln/process.py) reads the pipes to their end before it reaps the
    child).
  - Not for a program that leaves a daemon holding its stdout or stderr (the task would wait for the
    daemon); start those with M(ansible.builtin.command) and their own output redirection.
  - Check mode runs nothing (the task is skipped), as M(ansible.builtin.command) without C(creates); a read-only
    task sets C(check_mode: false).
options:
  argv:
    description: The program and its arguments, one list element each; never passed to a shell.
    type: list
    elements: str
    required: true
  stdin:
    description:
      - Text sent to the program's standard input (closed after it); without it the program reads /dev/null.
      - Shown in the result's invocation as M(ansible.builtin.command) shows its O(stdin): a task that pipes a secret sets
        C(no_log). (A no_log option would make Ansible mask every occurrence of the value in stdout too.)
    type: str
author: kiln
"""

EXAMPLES = r"""
- name: Measure the link to the next node
  kiln_command:
    argv: [iperf3, -J, -t, "3", -c, "{{ peer_address }}"]
  register: link
  changed_when: false
  failed_when: false
"""

RETURN = r"""
rc:
  description: The program's exit status (127 not found, 126 not executable, as a shell says).
  returned: always
  type: int
stdout:
  description: Everything the program wrote to standard output, trailing newlines removed.
  returned: always
  type: str
stderr:
  description: Everything the program wrote to standard error, trailing newlines removed.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kiln.process import run_argv


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "argv": {"type": "list", "elements": "str", "required": True},
            "stdin": {"type": "str"},
        },
        supports_check_mode=False,
    )
    if not module.params["argv"]:
        module.fail_json(msg="argv is empty: name the program to run", rc=256)
    result = run_argv(module.params["argv"], stdin=module.params["stdin"])
    if result["rc"] != 0:
        module.fail_json(msg="non-zero return code", changed=True, **result)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
