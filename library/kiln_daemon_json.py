#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: merge kiln's settings into Docker's daemon.json, the operator's keys winning."""
from __future__ import annotations

DOCUMENTATION = r"""
module: kiln_daemon_json
short_description: Merge kiln's settings into Docker's daemon.json; the file's own keys win unless set explicitly
description:
  - Reads the file (an absent or empty file is C({})), adds O(defaults) only where the file lacks the
    top-level key, sets O(explicit) over it, then O(owned) (mappings merged key by key, so an
    operator's other C(runtimes) stay; lists and scalars replaced; C(exec-opts) merged by option
    name; a key set to null removed). The logic is C(module_utils/kiln/packages/daemon_json.py).
  - The merged object is compared with the file's parsed content (type-strict); key order and
    whitespace are no change. Only a real change is written, in nvidia-ctk's layout (4-space indent,
    sorted keys), checked by O(validate) first, atomically (a temporary file beside the target,
    renamed over it) with the old file's owner, group, mode and SELinux context.
  - A symlink is followed and its target written; the link itself is never replaced. A dangling
    link, a link loop, or a target that is not a regular file is refused, and so is a file that is
    not a JSON object (invalid JSON, duplicate keys, an array): kiln never overwrites what it cannot
    read. Every refusal names the host, the path and the fix.
  - Returns the keys it left alone (the file's value kept over kiln's default), added and set.
    Check mode reads and compares only; C(--diff) shows the change.
options:
  path: {description: daemon.json's path (absolute)., type: path, required: true}
  defaults: {description: kiln's defaults by top-level key (added only where the file lacks the key)., type: dict, default: {}}
  explicit: {description: What the inventory set on purpose; goes over the file., type: dict, default: {}}
  owned: {description: What kiln must set for the stack (CDI); goes over everything., type: dict, default: {}}
  validate:
    description: argv of a check of the candidate before it replaces the file; C(%s) is the candidate.
    type: list
    elements: str
  host: {description: The host's name in messages (inventory_hostname)., type: str}
  mode: {description: Mode of a file kiln creates (an existing file keeps its own)., type: str, default: "0644"}
author: kiln
"""

EXAMPLES = r"""
- name: Merge daemon.json
  kiln_daemon_json:
    path: /etc/docker/daemon.json
    defaults: {live-restore: true, log-opts: {max-size: 100m, max-file: "3"}}
    explicit: {data-root: /raid/docker}
    owned: {features: {cdi: true}}
    validate: [dockerd, --validate, "--config-file=%s"]
    host: "{{ inventory_hostname }}"
  notify: Restart the Docker engine
"""

RETURN = r"""
target: {description: The file written (a symlink's target)., returned: always, type: str}
via_link: {description: Whether the path is (or passes through) a symlink that was followed., returned: always, type: bool}
left_alone: {description: Keys whose file value was kept over kiln's default., returned: always, type: list}
left_alone_lines: {description: One line per left-alone key, the file's value and kiln's default., returned: always, type: list}
added: {description: Defaults added (the file lacked them)., returned: always, type: list}
set: {description: Explicit or owned keys whose value changed (dotted paths)., returned: always, type: list}
removed: {description: Keys removed by a null., returned: always, type: list}
content: {description: The merged content., returned: always, type: dict}
"""

import os
import re
import socket
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kiln.packages.daemon_json import DaemonJsonError, merge, read, render, resolve, summary

_MODE = re.compile(r"^0[0-7]{3,4}$")


def _write(module: AnsibleModule, target: Any, text: str, host: str) -> None:
    """Candidate beside the target (same owner, group, mode), validated, then renamed over it."""
    directory = os.path.dirname(target.real)
    if not os.path.isdir(directory):
        module.fail_json(msg=f"{target.path} on {host}: its directory {directory} does not exist; create it first.")
    old = os.stat(target.real) if target.exists else None
    fd, tmp = tempfile.mkstemp(prefix=".kiln-daemon-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if old is not None:
            os.chown(tmp, old.st_uid, old.st_gid)
            os.chmod(tmp, old.st_mode & 0o7777)
        else:
            os.chmod(tmp, int(module.params["mode"], 8))
        if module.params["validate"]:
            argv = [arg.replace("%s", tmp) for arg in module.params["validate"]]
            rc, out, err = module.run_command(argv)
            if rc != 0:
                module.fail_json(msg=f"{target.path} on {host}: the merged content failed its check "
                                     f"({' '.join(module.params['validate'])}), rc {rc}: {(err or out).strip()[-2000:]}; "
                                     "the file is unchanged. Fix the key dockerd names (inventory or file), then re-run.")
        if module.selinux_enabled():
            context = module.selinux_context(target.real) if old is not None else module.selinux_default_context(target.real)
            module.set_context_if_different(tmp, context, False)
        os.replace(tmp, target.real)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "defaults": {"type": "dict", "default": {}},
            "explicit": {"type": "dict", "default": {}},
            "owned": {"type": "dict", "default": {}},
            "validate": {"type": "list", "elements": "str"},
            "host": {"type": "str"},
            "mode": {"type": "str", "default": "0644"},
        },
        supports_check_mode=True,
    )
    params = module.params
    host = params["host"] or socket.gethostname()
    if not _MODE.match(params["mode"]):
        module.fail_json(msg=f"mode {params['mode']!r} is not an octal string such as \"0644\"")
    if params["validate"] is not None and not any("%s" in arg for arg in params["validate"]):
        module.fail_json(msg="validate must name the file to check as %s")
    try:
        target = resolve(params["path"], host)
        before, current = read(target, host)
    except DaemonJsonError as exc:
        module.fail_json(msg=str(exc))
    done = merge(current, defaults=params["defaults"], explicit=params["explicit"], owned=params["owned"])
    result: dict[str, Any] = {
        "changed": done.changed, "target": target.real, "via_link": target.via_link,
        "left_alone": done.left_alone, "left_alone_lines": summary(done, current, params["defaults"]),
        "added": done.added, "set": done.set_keys, "removed": done.removed, "content": done.content,
    }
    if done.changed:
        after = render(done.content)
        if module._diff:
            result["diff"] = {"before_header": target.real, "after_header": target.real,
                              "before": before or "", "after": after}
        if not module.check_mode:
            _write(module, target, after, host)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
