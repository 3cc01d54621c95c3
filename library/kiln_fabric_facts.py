#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible fact module: InfiniBand / RoCE HCAs, ports, counters and the GPUDirect path."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kiln_fabric_facts
short_description: Gather InfiniBand / RoCE fabric facts (HCAs, ports, counters, GPUDirect)
description:
  - Reads every HCA and port under C(<sysfs_root>/class/infiniband) (the primary source) with
    firmware, board id, GUIDs, port state, physical state, rate, width, speed, link layer, LID, SM LID,
    GID 0, netdev mapping, NUMA node and the port counters in C(ports/<n>/counters/).
  - Reads the GPUDirect RDMA path; loaded modules from C(<sysfs_root>/module/<name>), the driver flavour
    from C(<proc_root>/driver/nvidia/version) and whether the running kernel has DMA-BUF (5.12 or later).
  - When O(ibstat) / O(perfquery) are set and found, runs them (argv form, read only) and merges their
    parsed output as a second source. A value that disagrees with sysfs is reported in
    RV(ansible_facts.kiln_fabric.problems) naming both values; sysfs's value is kept.
  - Never fails on what it finds; missing, unparseable or contradictory data goes into
    RV(ansible_facts.kiln_fabric.problems), which a caller must treat as not PASS.
  - Reads only; never changes the host.
version_added: "0.1.0"
author:
  - kiln contributors
options:
  sysfs_root:
    description: Root of the sysfs tree to read. Test nodes point this at the fixture tree.
    type: path
    default: /sys
  proc_root:
    description: Root of the proc tree to read (C(driver/nvidia/version)).
    type: path
    default: /proc
  kernel:
    description: Kernel release to judge DMA-BUF support by; defaults to the running kernel (C(uname -r)).
    type: str
  ibstat:
    description:
      - Path or name of C(ibstat). When set and found, C(ibstat) is run and merged as a second source.
        When set but not found, a problem says so.
    type: str
  perfquery:
    description:
      - Path or name of C(perfquery). When set and found, C(perfquery -x -C <hca> -P <port>) is run for every
        ACTIVE InfiniBand port and merged (error counters compared, missing counters filled in).
    type: str
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
notes:
  - Counter values are cumulative; judge them as deltas against a baseline of the same port (GUID), and on their
    absolute value when that baseline is not provably this port's (module_utils/kiln/fabric/counters.py).
  - A netdev name that may not reach a path or a unit name (module_utils/kiln/facts/netdev.py) is kept and reported in
    RV(ansible_facts.kiln_fabric.problems).
  - RoCE (Ethernet link layer) ports have no LID, so perfquery is not run for them.
"""

EXAMPLES = r"""
- name: Gather fabric facts from sysfs only
  kiln_fabric_facts:

- name: Gather fabric facts with ibstat and perfquery as second sources
  kiln_fabric_facts:
    ibstat: ibstat
    perfquery: perfquery

- name: Read an emulated node (test bed)
  kiln_fabric_facts:
    sysfs_root: /var/lib/kiln-fixture/sysfs
    proc_root: /var/lib/kiln-fixture/proc
    ibstat: /usr/local/sbin/ibstat

- name: No problem may be left for a PASS
  ansible.builtin.assert:
    that: ansible_facts.kiln_fabric.problems | length == 0
    fail_msg: "{{ ansible_facts.kiln_fabric.problems }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    kiln_fabric:
      description: The fabric of the host (schema C(kiln.fabric/v1)).
      returned: always
      type: dict
      contains:
        schema:
          description: Format version.
          type: str
          sample: kiln.fabric/v1
        sysfs_root:
          description: The sysfs root that was read.
          type: str
          sample: /sys
        hcas:
          description:
            - One entry per HCA with name, hca_type, model (HCA generation or null), fw_ver, board_id, node_guid,
              sys_image_guid, node_type, pci_address, numa_node and ports.
            - Each port has port, state, state_code, phys_state, phys_state_code, rate, rate_gbps, width, speed,
              link_layer, lid, sm_lid, gid0, netdevs and counters (sysfs counter names; only those present),
              and hw_counters and counter_sources where there are any.
          type: list
          elements: dict
          sample:
            - name: mlx5_0
              hca_type: MT4129
              model: ConnectX-7
              ports: [{port: 1, state: ACTIVE, phys_state: LinkUp, rate_gbps: 400.0, width: 4X, speed: NDR,
                       link_layer: InfiniBand, netdevs: [ibp26s0], counters: {symbol_error: 0, link_downed: 0}}]
        gpudirect:
          description: kernel, nvidia_loaded, open_modules (null when unknown), peermem_loaded, dma_buf_kernel.
          type: dict
          sample: {kernel: 6.1.0-28-amd64, nvidia_loaded: true, open_modules: true, peermem_loaded: false,
                   dma_buf_kernel: true}
        problems:
          description: Everything missing, unparseable or contradictory, one sentence each.
          type: list
          elements: str
          sample: ["mlx5_3 port 1: state: sysfs says 'DOWN', ibstat says 'ACTIVE'"]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kiln.facts.fabric import gpudirect_facts, merge_sources, read_sysfs
from ansible.module_utils.kiln.facts.fabric_text import parse_ibstat, parse_perfquery


def find_tool(module, name):
    """Path of the tool named by an option (a path or a name on PATH), or None."""
    if os.path.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    return module.get_bin_path(name, required=False, opt_dirs=["/usr/local/sbin", "/usr/sbin", "/sbin"])


def run_ibstat(module, path, problems):
    rc, out, err = module.run_command([path])
    if rc != 0:
        problems.append(f"ibstat ({path}) exited {rc}: {(err or out).strip()[:200]}")
        if not out.strip():
            return None
    return parse_ibstat(out)


def run_perfquery(module, path, sysfs, problems):
    merged = {"ports": [], "problems": []}
    for hca in sysfs["hcas"]:
        for port in hca["ports"]:
            if port.get("link_layer") != "InfiniBand" or port.get("state") != "ACTIVE":
                continue
            rc, out, err = module.run_command([path, "-x", "-C", hca["name"], "-P", str(port["port"])])
            if rc != 0:
                problems.append(f"{hca['name']} port {port['port']}: perfquery exited {rc}: {(err or out).strip()[:200]}")
                continue
            parsed = parse_perfquery(out)
            merged["ports"].extend(parsed["ports"])
            merged["problems"].extend(parsed["problems"])
    return merged


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/sys"),
            proc_root=dict(type="path", default="/proc"),
            kernel=dict(type="str"),
            ibstat=dict(type="str"),
            perfquery=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    sysfs = read_sysfs(params["sysfs_root"])
    kernel = params["kernel"] or os.uname().release
    gpudirect = gpudirect_facts(params["sysfs_root"], params["proc_root"], kernel)
    problems = []
    ibstat = perfquery = None
    for option in ("ibstat", "perfquery"):
        if not params[option]:
            continue
        path = find_tool(module, params[option])
        if path is None:
            problems.append(f"{option}: {params[option]!r} was asked for but not found; install it or unset the option")
        elif option == "ibstat":
            ibstat = run_ibstat(module, path, problems)
        else:
            perfquery = run_perfquery(module, path, sysfs, problems)
    facts = merge_sources(sysfs, ibstat=ibstat, perfquery=perfquery, gpudirect=gpudirect)
    facts["problems"] = problems + facts["problems"]
    module.exit_json(changed=False, ansible_facts={"kiln_fabric": facts})


if __name__ == "__main__":
    main()
