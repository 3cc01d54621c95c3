#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: the kernel packages to hold with the driver (logic in module_utils/kiln/packages/kernel_hold.py)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: kiln_kernel_packages
short_description: The running kernel's packages and every installed kernel flavour's meta-packages (changes nothing)
description:
  - Reads the package database (dpkg-query, or rpm) and the owners of the kernel images C(<boot_dir>/vmlinuz-<release>)
    and returns the packages to hold so that no other kernel arrives (C(kernel_hold_names),
    module_utils/kiln/packages/kernel_hold.py) -- found in the database, not from a list of names.
  - A kernel's own packages are the owners of its image and (apt) the installed packages named with its release
    (C(linux-image-<r>), C(linux-headers-<r>), C(linux-modules-extra-<r>), ...), (dnf) those providing its
    C(*-uname-r). The meta-packages are every installed package that depends on one of them, transitively
    (C(linux-image-rt-amd64), C(linux-nvidia), C(linux-aws), C(linux-generic-hwe-24.04), C(kernel-rt), ...).
    apt leaves the other kernels' own packages out (named by release, they never pull a new kernel).
  - A host without kernel packages (a container) gets an empty list.
options:
  kernel:
    description: The running kernel's release (C(ansible_facts['kernel'])).
    type: str
    required: true
  pkg_mgr:
    description: The host's package manager (C(ansible_facts['pkg_mgr'])).
    type: str
    choices: [apt, dnf]
    required: true
  boot_dir:
    description: Where the kernel images C(vmlinuz-<release>) are (tests point it elsewhere).
    type: path
    default: /boot
author: kiln
"""

EXAMPLES = r"""
- name: Find the kernel packages to hold
  kiln_kernel_packages:
    kernel: "{{ ansible_facts['kernel'] }}"
    pkg_mgr: "{{ ansible_facts['pkg_mgr'] }}"
  register: kernel_packages
"""

RETURN = r"""
names: {description: "The packages to hold: the running kernel's own and every installed flavour's meta-packages, sorted.", returned: always, type: list}
releases: {description: "The kernel releases whose images are installed.", returned: always, type: list}
msg: {description: One line saying what was found., returned: always, type: str}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kiln.packages.kernel_hold import (
    DPKG_RELATIONS_FORMAT,
    RPM_OWNER_FORMAT,
    RPM_RELATIONS_FORMAT,
    KernelHoldError,
    kernel_hold_names,
)

ENV = {"LC_ALL": "C", "LANG": "C"}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "kernel": {"type": "str", "required": True},
            "pkg_mgr": {"type": "str", "choices": ["apt", "dnf"], "required": True},
            "boot_dir": {"type": "path", "default": "/boot"},
        },
        supports_check_mode=True,
    )
    running, pkg_mgr, boot_dir = module.params["kernel"], module.params["pkg_mgr"], module.params["boot_dir"]
    try:
        images = sorted(n for n in os.listdir(boot_dir) if n.startswith("vmlinuz-") and len(n) > len("vmlinuz-"))
    except OSError:
        images = []
    releases = [n[len("vmlinuz-"):] for n in images]
    owners = ""
    if pkg_mgr == "apt":
        if images:  # rc 1 when an image is no package's: the others are still listed
            _, owners, _ = module.run_command(["dpkg-query", "-S"] + [os.path.join(boot_dir, n) for n in images],
                                              environ_update=ENV)
        argv = ["dpkg-query", "-W", "-f", DPKG_RELATIONS_FORMAT]
    else:
        for release in sorted(set(releases) | {running}):
            for path in (os.path.join(boot_dir, f"vmlinuz-{release}"), f"/lib/modules/{release}/vmlinuz"):
                if os.path.exists(path):
                    _, out, _ = module.run_command(["rpm", "-qf", "--qf", RPM_OWNER_FORMAT, path], environ_update=ENV)
                    owners += "".join(f"{path}\t{line}\n" for line in out.splitlines() if line.count("\t") == 1)
        argv = ["rpm", "-qa", "--qf", RPM_RELATIONS_FORMAT]
    rc, relations, err = module.run_command(argv, environ_update=ENV)
    if rc != 0:
        module.fail_json(msg=f"reading the packages' relations ({argv[0]}) failed (rc {rc}): {err.strip()}")
    try:
        names = kernel_hold_names(running, pkg_mgr, relations, owners, releases)
    except KernelHoldError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, names=names, releases=releases,
                     msg=f"kernel {running}: {len(names)} packages to hold" if names
                     else f"kernel {running}: no package of an installed kernel found")


if __name__ == "__main__":
    main()
