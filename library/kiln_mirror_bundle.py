#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: verify an air-gapped mirror bundle on the mirror host, then unpack it into a release."""
from __future__ import annotations

DOCUMENTATION = r"""
module: kiln_mirror_bundle
short_description: Verify a signed mirror bundle and serve it as the mirror's current release
description:
  - Checks the bundle O(bundle) (C(<id>.tar), with C(<id>.manifest.json) and C(<id>.manifest.json.asc) beside it) and
    collects every problem before anything changes (C(kiln.mirror.bundle.verify) in
    C(module_utils/kiln/mirror/bundle.py)) -- the manifest's signature by exactly the key O(fingerprint) (O(key_file) must
    hold that key and no other; C(gpgv) checks the signature), the manifest's schema, the archive's size and sha256, each
    member (exactly the manifest's files, each at its size and sha256; no link, directory, absolute path, C(..) or
    duplicate), the stacks O(expected_stacks) among those the bundle was built for, and, for an incremental bundle, that
    O(dest) serves its base with every inherited file at its sha256.
  - A refused bundle fails the task with every problem listed in C(msg) and C(problems); nothing is changed.
  - With O(state=unpacked) the bundle is unpacked into C(<dest>/releases/<id>/) (inherited files hard-linked from the
    current release) and the symlink C(<dest>/current) is switched to it atomically; the previous release is kept for a
    rollback (C(ln -sfn releases/<previous> <dest>/current)), older ones are removed. A bundle already current is not
    unpacked again (changed false).
  - Check mode verifies and reports whether the unpack would change anything; it writes nothing.
  - Needs C(gpgv) on the host (Debian/Ubuntu C(gpgv), EL C(gnupg2)).
options:
  bundle:
    description: Path of the bundle's C(.tar) on the host; its manifest and signature are found beside it by name.
    type: path
    required: true
  key_file:
    description: The site's public key file on the host (armored or binary), holding exactly the pinned key.
    type: path
    required: true
  fingerprint:
    description: The pinned full fingerprint (40 hex digits; spaces ignored) of the site key.
    type: str
    required: true
  dest:
    description: The mirror root, C(<dest>/current) being what is served; also where an incremental bundle's base is checked.
    type: path
    required: true
  expected_stacks:
    description: Stack fingerprints this site needs; each must be among the bundle's stacks.
    type: list
    elements: str
    default: []
  state:
    description: C(verified) checks only; C(unpacked) checks, then unpacks and switches C(current).
    type: str
    choices: [verified, unpacked]
    default: unpacked
author: kiln
"""

EXAMPLES = r"""
- name: Verify the bundle and serve it
  kiln_mirror_bundle:
    bundle: /var/lib/kiln/mirror-incoming/site-2026-12.tar
    key_file: /var/lib/kiln/mirror-incoming/site-key.asc
    fingerprint: 5E82D0AA9393ABE487D41B343A47900A2F3E2A58
    dest: /srv/kiln-mirror
    expected_stacks: ["{{ kiln_stack_fingerprint }}"]
  register: mirror_bundle
"""

RETURN = r"""
bundle_id:
  description: The bundle's id (its manifest's C(id)); null when the manifest is unreadable.
  returned: always
  type: str
release_dir:
  description: C(<dest>/releases/<id>), the release directory of the bundle.
  returned: when the manifest names an id
  type: str
problems:
  description: Every reason the bundle is refused (empty when it is accepted).
  returned: always
  type: list
  elements: str
files:
  description: Number of files the bundle's tar carries.
  returned: always
  type: int
bytes:
  description: Total size of the files the bundle's tar carries.
  returned: always
  type: int
inherited:
  description: Number of files an incremental bundle takes from its base.
  returned: always
  type: int
stacks:
  description: Fingerprints of the stacks the bundle was built for.
  returned: when the manifest is readable
  type: list
  elements: str
notes:
  description: What was not checked and why (an incremental bundle's base is always checked here, against O(dest)).
  returned: always
  type: list
  elements: str
previous:
  description: The release C(current) pointed at before the switch (kept for a rollback), or null.
  returned: when unpacked
  type: str
pruned:
  description: Releases removed (older than the previous one).
  returned: when unpacked
  type: list
  elements: str
"""

import os
from typing import Any, Callable, Dict, Mapping, Optional

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kiln.mirror.bundle import BundleError, bundle_paths, unpack, verify, would_change

#: Problems shown in msg (all of them are in problems).
MSG_PROBLEMS = 20


def run_bundle(params: Mapping[str, Any], check_mode: bool,
               gpg: Optional[Callable[..., Mapping[str, Any]]] = None) -> Dict[str, Any]:
    """The module's result for *params* (its options); ``failed`` with ``msg`` when the bundle is refused."""
    result: Dict[str, Any] = {"changed": False, "bundle_id": None, "problems": [], "notes": [], "files": 0,
                              "bytes": 0, "inherited": 0}
    dest = params["dest"]
    try:
        manifest_path, sig_path = bundle_paths(params["bundle"])
    except BundleError as exc:
        return dict(result, failed=True, problems=[str(exc)], msg=str(exc))
    report = verify(params["bundle"], manifest_path, sig_path, params["fingerprint"], key_file=params["key_file"],
                    expected_stacks=params["expected_stacks"] or [], base_dir=dest, gpg=gpg)
    result.update(bundle_id=report["id"], problems=report["problems"], notes=report["notes"], files=report["files"],
                  bytes=report["bytes"], inherited=report["inherited"], stacks=report["stacks"])
    if report["id"]:
        result["release_dir"] = os.path.join(dest, "releases", report["id"])
    if not report["ok"]:
        shown = report["problems"][:MSG_PROBLEMS]
        more = len(report["problems"]) - len(shown)
        return dict(result, failed=True,
                    msg=(f"bundle {params['bundle']} refused, nothing changed; {len(report['problems'])} problem(s): "
                         + " | ".join(shown) + (f" | and {more} more (see problems)" if more else "")))
    try:
        if params["state"] == "verified":
            return dict(result, msg=f"bundle {report['id']} verified")
        if check_mode:
            changed = would_change(manifest_path, dest)
            return dict(result, changed=changed,
                        msg=f"would serve bundle {report['id']}" if changed else f"bundle {report['id']} is served")
        done = unpack(params["bundle"], manifest_path, dest)
    except (BundleError, OSError) as exc:
        return dict(result, failed=True, msg=f"bundle {params['bundle']}: {exc}")
    return dict(result, changed=done["changed"], previous=done["previous"], pruned=done["pruned"],
                msg=(f"serving bundle {report['id']} (previous {done['previous'] or 'none'})" if done["changed"]
                     else f"bundle {report['id']} is served"))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "bundle": {"type": "path", "required": True},
            "key_file": {"type": "path", "required": True},
            "fingerprint": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "expected_stacks": {"type": "list", "elements": "str", "default": []},
            "state": {"type": "str", "choices": ["verified", "unpacked"], "default": "unpacked"},
        },
        supports_check_mode=True,
    )
    result = run_bundle(module.params, module.check_mode)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
