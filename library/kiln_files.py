#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: write a role's managed files (and their directories) in one task."""
from __future__ import annotations

DOCUMENTATION = r"""
module: kiln_files
short_description: Write several managed files and directories in one task (one module run per host)
description:
  - Each entry of O(files) is a directory (O(files[].state=directory)) or a file with its whole
    O(files[].content), rendered on the controller (C(lookup('ansible.builtin.template', ...)) for a
    template). Entries are handled in order, so a directory listed first exists before its files.
  - A file is rewritten only when its content differs; it is written to a temporary file beside the
    destination, given its owner, group and mode, checked by O(files[].validate) when given, and then
    renamed over the old one (atomic; the new file has its owner, mode and SELinux context -- the old
    file's, else the policy default -- before it is visible). Owner, group and mode are corrected
    in place when only they differ.
  - Replaces one C(template)/C(copy)/C(file) task per file (two or three module runs each on a
    no-op) with one module run. The result lists the paths that changed, so a handler can run only
    for the file it depends on (C(when) on O(changed_paths)).
  - Every entry is checked first (absolute path, octal mode string, content for a file, C(%s) in
    O(files[].validate)): a bad one fails the task, naming its path, before any entry is written.
  - Check mode reads and compares, changes nothing; C(--diff) shows each file's change.
options:
  files:
    description: The files and directories, in order.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path of the file or directory.
        type: path
        required: true
      state:
        description: C(file) writes O(files[].content); C(directory) makes the directory (parents too).
        type: str
        choices: [file, directory]
        default: file
      content:
        description: The file's whole content (required for a file).
        type: str
      owner:
        description: Owner name.
        type: str
        default: root
      group:
        description: Group name.
        type: str
        default: root
      mode:
        description: Octal mode as a string (C("0644")); anything else is refused before a file is written.
        type: str
        required: true
      wanted:
        description: C(false) leaves the entry out (a role's optional file, without a C(when) per file); nothing is removed.
        type: bool
        default: true
      validate:
        description: argv of a check run on the new content before it replaces the old one; C(%s) is the temporary file.
        type: list
        elements: str
author: kiln
"""

EXAMPLES = r"""
- name: Write the chrony configuration and the nouveau blacklist
  kiln_files:
    files:
      - path: /etc/chrony/chrony.conf
        content: "{{ lookup('ansible.builtin.template', 'chrony.conf.j2') }}"
        mode: "0644"
        validate: [chronyd, -p, -f, "%s"]
      - path: /etc/modprobe.d/kiln-blacklist-nouveau.conf
        content: "blacklist nouveau\n"
        mode: "0644"
  register: common_files
  notify: Restart time sync   # the handler runs when: "'/etc/chrony/chrony.conf' in common_files.changed_paths"
"""

RETURN = r"""
changed_paths: {description: The paths created or changed (content or attributes)., returned: always, type: list}
content_changed: {description: The files whose content was (or would be) rewritten., returned: always, type: list}
"""

import os
import re
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native


_MODE = re.compile(r"^0[0-7]{3,4}$")


def problems(entries: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the entries, one line each naming the path; checked before anything is written."""
    out: list[str] = []
    for entry in entries:
        path = entry["path"]
        if not entry["wanted"]:
            continue
        if not os.path.isabs(path):
            out.append(f"{path}: the path must be absolute")
        if not _MODE.match(entry["mode"]):
            out.append(f"{path}: mode {entry['mode']!r} is not an octal string such as \"0644\" "
                       "(quote it in YAML: an unquoted 0644 is the integer 420)")
        if entry["state"] == "file" and entry.get("content") is None:
            out.append(f"{path}: a file entry needs content")
        if entry.get("validate") is not None and not any("%s" in arg for arg in entry["validate"]):
            out.append(f"{path}: validate must name the file to check as %s")
    return out


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _attrs(module: AnsibleModule, entry: dict[str, Any], path: str) -> dict[str, Any]:
    params = {"mode": entry["mode"], "owner": entry["owner"], "group": entry["group"], "seuser": None,
              "serole": None, "setype": None, "selevel": None, "attributes": None, "unsafe_writes": False}
    return module.load_file_common_arguments(params, path=path)


def _directory(module: AnsibleModule, entry: dict[str, Any], diffs: list[dict[str, Any]]) -> bool:
    path = entry["path"]
    changed = False
    if not os.path.isdir(path):
        if os.path.lexists(path):
            module.fail_json(msg=f"{path} exists and is not a directory; move it away or fix the role's path")
        changed = True
        diffs.append({"before_header": path, "after_header": path, "before": "absent\n", "after": "directory\n"})
        if module.check_mode:
            return True
        os.makedirs(path, exist_ok=True)
    return module.set_fs_attributes_if_different(_attrs(module, entry, path), changed)


def _file(module: AnsibleModule, entry: dict[str, Any], diffs: list[dict[str, Any]]) -> tuple[bool, bool]:
    """Write one file; returns (changed, content_changed)."""
    path = entry["path"]
    want = to_bytes(entry["content"], errors="surrogate_or_strict")
    real = os.path.realpath(path)
    if os.path.isdir(real):
        module.fail_json(msg=f"{path} is a directory; a file was expected there")
    parent = os.path.dirname(real)
    if not os.path.isdir(parent) and not module.check_mode:
        module.fail_json(msg=f"{path}: directory {parent} does not exist (list it first with state: directory)")
    have = _read(real)
    if have == want:
        return (module.set_fs_attributes_if_different(_attrs(module, entry, real), False), False)
    if module._diff:
        diffs.append({"before_header": path, "after_header": path,
                      "before": "" if have is None else to_native(have, errors="surrogate_or_replace"),
                      "after": to_native(want, errors="surrogate_or_replace")})
    if module.check_mode:
        return (True, True)
    fd, tmp = tempfile.mkstemp(prefix=".kiln-", dir=parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(want)
        module.set_fs_attributes_if_different(_attrs(module, entry, tmp), True)
        if entry.get("validate"):
            argv = [arg.replace("%s", tmp) for arg in entry["validate"]]
            rc, out, err = module.run_command(argv)
            if rc != 0:
                module.fail_json(msg=f"{path}: the new content failed its check ({' '.join(entry['validate'])}), "
                                     f"rc {rc}: {(err or out).strip()[-2000:]}; the old file is unchanged")
        if module.selinux_enabled():
            # what atomic_move does: keep the old file's context, else the policy's default for the path
            context = module.selinux_context(real) if have is not None else module.selinux_default_context(real)
            module.set_context_if_different(tmp, context, False)
        # same directory: the rename is atomic, and the file never has other attributes than its own
        os.replace(tmp, real)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return (True, True)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "required": True, "options": {
                "path": {"type": "path", "required": True},
                "state": {"type": "str", "choices": ["file", "directory"], "default": "file"},
                "content": {"type": "str"},
                "owner": {"type": "str", "default": "root"},
                "group": {"type": "str", "default": "root"},
                "mode": {"type": "str", "required": True},
                "validate": {"type": "list", "elements": "str"},
                "wanted": {"type": "bool", "default": True},
            }},
        },
        supports_check_mode=True,
    )
    changed_paths: list[str] = []
    content_changed: list[str] = []
    diffs: list[dict[str, Any]] = []
    bad = problems(module.params["files"])
    if bad:
        module.fail_json(msg="kiln_files: nothing written; " + "; ".join(bad))
    for entry in module.params["files"]:
        if not entry["wanted"]:
            continue
        if entry["state"] == "directory":
            if _directory(module, entry, diffs):
                changed_paths.append(entry["path"])
            continue
        changed, rewritten = _file(module, entry, diffs)
        if changed:
            changed_paths.append(entry["path"])
        if rewritten:
            content_changed.append(entry["path"])
    result: dict[str, Any] = {"changed": bool(changed_paths), "changed_paths": changed_paths,
                              "content_changed": content_changed}
    if module._diff and diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
