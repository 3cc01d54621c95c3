#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible fact module: NVIDIA GPUs, NVSwitches and InfiniBand/RoCE HCAs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kiln_gpu_facts
short_description: Gather NVIDIA GPU, NVSwitch and InfiniBand/RoCE HCA facts
description:
  - Reads NVIDIA GPUs and NVSwitch bridges from PCI sysfs, whether or not a driver is loaded,
    and maps PCI IDs to models through O(pci_models) (the compatibility data).
  - When C(nvidia-smi) is installed and the driver answers, adds driver and CUDA versions and, per GPU,
    UUID, serial, VBIOS, PCIe generation and width (current and max), ECC and remapped-row counters,
    persistence mode, NVLink fabric registration (state, status, clique, cluster UUID, health summary),
    active clock event (throttle) reasons, temperature and power, from C(nvidia-smi -q -x), NVLink link
    states from C(nvidia-smi nvlink -s) and, where a GPU has NVLinks, the NVLink error counters (replay,
    recovery, CRC) from C(nvidia-smi nvlink -e).
  - Reports whether the C(nvidia-fabricmanager) service (NVSwitch systems) is installed and what
    C(systemctl is-active) says of it.
  - Reads InfiniBand/RoCE HCAs and their ports (state, rate, link layer) from C(/sys/class/infiniband).
  - Returns empty lists, not errors, where nothing is found. A driver that is installed but not loaded
    (C(nvidia-smi) exit code 9) gives RV(ansible_facts.kiln_gpu.driver_loaded=false), not a failure.
  - A C(nvidia-smi nvlink -e) or C(systemctl) that fails is listed in RV(ansible_facts.kiln_gpu.problems)
    and leaves its values null (not read); it never fails the module.
  - Reads only; never changes the host.
version_added: "0.1.0"
author:
  - kiln contributors
options:
  sysfs_root:
    description:
      - Root of the sysfs tree to read. Tests point this at a fake tree.
    type: path
    default: /sys
  nvidia_smi:
    description:
      - Path to C(nvidia-smi). Defaults to the one found on E(PATH); when there is none, only sysfs is read.
    type: path
  pci_models:
    description:
      - Map of PCI ID (C(10de:2330)) to C({model, architecture, nvswitch}). C(name) and C(arch) are
        accepted as aliases of C(model) and C(architecture), as in C(data/compat.yml) variants.
    type: dict
    default: {}
  query_smi:
    description:
      - Whether to run C(nvidia-smi) at all. Set to V(false) to read sysfs only.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
notes:
  - C(nvidia-smi -q -x) does not report NVLink link states or error counters; they come from
    C(nvidia-smi nvlink -s) and C(nvidia-smi nvlink -e). The error counters are read only when
    C(nvlink -s) shows at least one NVLink.
  - The Fabric Manager unit counts as installed when C(nvidia-fabricmanager.service) is in one of the
    systemd unit directories (C(/etc/systemd/system), C(/run/systemd/system), C(/usr/local/lib/systemd/system),
    C(/usr/lib/systemd/system), C(/lib/systemd/system)); C(systemctl is-active) is asked only then.
  - Clock event reasons are read from C(clocks_event_reasons) (driver 535 and later) or
    C(clocks_throttle_reasons) (older drivers); the field used is reported per GPU.
"""

EXAMPLES = r"""
- name: Gather GPU facts
  kiln_gpu_facts:
    pci_models: "{{ kiln_gpu_pci_models }}"

- name: Fail when nvidia-smi sees fewer GPUs than the PCI bus
  ansible.builtin.assert:
    that:
      - ansible_facts.kiln_gpu.gpu_count == ansible_facts.kiln_gpu.pci_gpu_count
    fail_msg: "nvidia-smi sees {{ ansible_facts.kiln_gpu.gpu_count }} GPUs, PCI shows {{ ansible_facts.kiln_gpu.pci_gpu_count }}"
  when: ansible_facts.kiln_gpu.driver_loaded

- name: Read an emulated machine (test nodes)
  kiln_gpu_facts:
    sysfs_root: /var/lib/kiln-fixture/sysfs
    query_smi: false
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    kiln_gpu:
      description: GPU, NVSwitch and HCA inventory of the host.
      returned: always
      type: dict
      contains:
        gpus:
          description:
            - One entry per GPU, from nvidia-smi when the driver answers, else from PCI sysfs
              (then only index, PCI and model keys are set, the others are null).
            - Keys are index, minor_number, name, model, architecture, uuid, serial, vbios, pci_bus_id,
              pci_device_id, pci_subsystem_id, numa_node,
              pcie (gen_current, gen_max, width_current, width_max, replay_count),
              persistence_mode, ecc_mode,
              ecc (volatile_correctable, volatile_uncorrectable, aggregate_correctable, aggregate_uncorrectable,
              volatile_sram_uncorrectable, volatile_dram_uncorrectable, aggregate_sram_uncorrectable,
              aggregate_dram_uncorrectable), memory_repair (row_remap, page_retirement or null),
              remapped_rows (supported, correctable, uncorrectable, pending, failure),
              retired_pages (single_bit, double_bit, pending), nvlink (links, active, inactive),
              nvlink_errors (per link number, as a string, the counters of C(nvidia-smi nvlink -e) -
              replay, recovery and crc, plus any other counter the driver prints under its
              lower-case name, e.g. link_recovery_failed_events; null when not read),
              fabric (state, status, clique_id, cluster_uuid, health_summary; null values when N/A),
              clock_event_reasons_active, clock_event_reasons_field,
              performance_state, temperature_c, power_draw_w, power_limit_w, memory_total_mib, mig_mode.
          type: list
          elements: dict
          sample:
            - index: 0
              name: NVIDIA H100 80GB HBM3
              model: H100-SXM5-80GB
              pci_device_id: "10de:2330"
              nvlink: {links: 18, active: 18, inactive: 0}
              nvlink_errors: {"0": {replay: 0, recovery: 0, crc: 0}}
              persistence_mode: true
              fabric: {state: Completed, status: Success, clique_id: 0, cluster_uuid: null, health_summary: null}
        gpu_count:
          description: Number of entries in RV(ansible_facts.kiln_gpu.gpus).
          type: int
          sample: 8
        pci_gpu_count:
          description: NVIDIA display/3D controllers on the PCI bus (what lspci shows).
          type: int
          sample: 8
        smi_gpu_count:
          description: GPUs reported by nvidia-smi; null when it was not run or did not answer.
          type: int
          sample: 8
        driver_loaded:
          description: Whether nvidia-smi could talk to a loaded driver.
          type: bool
          sample: true
        driver_version:
          description: Loaded driver version from nvidia-smi; null without a loaded driver.
          type: str
          sample: "580.95.05"
        cuda_version:
          description: Highest CUDA version the loaded driver supports; null without a loaded driver.
          type: str
          sample: "13.0"
        nvswitch_count:
          description: NVSwitch bridge devices (vendor 0x10de, class 0x0680) on the PCI bus.
          type: int
          sample: 4
        nvswitch_board:
          description: True when NVSwitches are on the PCI bus or the GPU model is an NVSwitch (SXM) board.
          type: bool
          sample: true
        models:
          description: Distinct GPU models (from pci_models, else the nvidia-smi product name).
          type: list
          elements: str
          sample: [H100-SXM5-80GB]
        architecture:
          description: The GPU architecture, lower case, when all GPUs share one; null otherwise.
          type: str
          sample: hopper
        architectures:
          description: Distinct GPU architectures, lower case.
          type: list
          elements: str
          sample: [hopper]
        unknown_pci_ids:
          description: GPU PCI IDs that pci_models does not know.
          type: list
          elements: str
          sample: []
        hcas:
          description:
            - InfiniBand/RoCE HCAs with name, fw_ver, board_id, node_guid, hca_type, pci_address and
              ports (port, state, state_code, phys_state, phys_state_code, rate, rate_gbps, link_layer).
          type: list
          elements: dict
        hca_count:
          description: Number of HCAs.
          type: int
          sample: 8
        source:
          description: Where RV(ansible_facts.kiln_gpu.gpus) came from.
          type: str
          choices: [nvidia-smi, sysfs, none]
          sample: nvidia-smi
        smi_error:
          description: Why nvidia-smi gave no data (not installed, driver not loaded, no devices); null when it did.
          type: str
          sample: null
        fabric_manager:
          description:
            - The C(nvidia-fabricmanager) service. C(present) - its unit file is installed; C(active) - what
              C(systemctl is-active) printed (active, inactive, failed, activating, ...), null when it was not
              asked (unit not installed) or could not answer (no systemd, no systemctl; see problems).
          type: dict
          sample: {present: true, active: active}
        problems:
          description: Reads that failed without failing the module (C(nvidia-smi nvlink -e), C(systemctl)).
          type: list
          elements: str
          sample: []
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kiln.facts.hardware import (
    parse_nvidia_smi_xml,
    parse_nvlink_errors,
    parse_nvlink_status,
    scan_infiniband_sysfs,
    scan_pci_sysfs,
    summarize,
)

# nvidia-smi exit codes (nvidia-smi(1), RETURN VALUE).
RC_NO_DEVICES = 6
RC_DRIVER_NOT_LOADED = 9
DRIVER_MESSAGES = ("couldn't communicate with the nvidia driver", "driver/library version mismatch")
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
             "/usr/lib/systemd/system", "/lib/systemd/system")
#: What `systemctl is-active` prints (systemd's unit active states).
ACTIVE_STATES = ("active", "reloading", "inactive", "failed", "activating", "deactivating", "maintenance",
                 "refreshing", "unknown")


def query_nvlink_errors(module, smi_path, problems):
    """``nvidia-smi nvlink -e`` parsed, or None (recorded in *problems*) when it fails."""
    try:
        rc, out, err = module.run_command([smi_path, "nvlink", "-e"])
    except OSError as exc:  # run_command raises only with handle_exceptions=False; be safe anyway
        problems.append(f"nvidia-smi nvlink -e could not run: {exc}")
        return None
    if rc != 0:
        problems.append(f"nvidia-smi nvlink -e exited {rc}: {(err or out or '').strip()[:200]}")
        return None
    return parse_nvlink_errors(out)


def fabric_manager(module, problems):
    """``{present, active}`` of nvidia-fabricmanager; systemctl is asked only when the unit is installed."""
    present = any(os.path.exists(os.path.join(d, FABRIC_MANAGER_UNIT)) for d in UNIT_DIRS)
    if not present:
        return {"present": False, "active": None}
    systemctl = module.get_bin_path("systemctl", required=False)
    if not systemctl:
        problems.append(f"{FABRIC_MANAGER_UNIT} is installed but systemctl is not on PATH: state unknown")
        return {"present": True, "active": None}
    try:
        rc, out, err = module.run_command([systemctl, "is-active", FABRIC_MANAGER_UNIT])
    except OSError as exc:
        problems.append(f"systemctl is-active {FABRIC_MANAGER_UNIT} could not run: {exc}")
        return {"present": True, "active": None}
    word = (out or "").strip().splitlines()[0].strip() if (out or "").strip() else ""
    if word in ACTIVE_STATES:
        return {"present": True, "active": word}
    problems.append(f"systemctl is-active {FABRIC_MANAGER_UNIT} exited {rc} without a state: "
                    f"{(err or out or '').strip()[:200]}")
    return {"present": True, "active": None}


def query_smi(module, smi_path, problems=None):
    """Run nvidia-smi. Returns (smi dict or None, nvlink dict or None, driver_loaded, error, nvlink errors or None)."""
    problems = [] if problems is None else problems
    rc, out, err = module.run_command([smi_path, "-q", "-x"])
    text = f"{out}\n{err}".lower()
    if rc == RC_DRIVER_NOT_LOADED or any(msg in text for msg in DRIVER_MESSAGES):
        return None, None, False, f"driver not loaded (nvidia-smi rc={rc}): {(out or err).strip()[:200]}", None
    if rc == RC_NO_DEVICES or "no devices were found" in text:
        return ({"driver_version": None, "cuda_version": None, "gpus": []}, None, True,
                "nvidia-smi: no devices were found", None)
    if rc != 0:
        module.fail_json(msg=f"nvidia-smi -q -x failed with rc={rc}", rc=rc, stdout=out, stderr=err)
    try:
        smi = parse_nvidia_smi_xml(out)
    except ValueError as exc:
        module.fail_json(msg=f"cannot parse nvidia-smi -q -x output: {exc}", stdout=out[:2000])
    nvlink = None  # unknown unless `nvlink -s` answers (PCIe cards print nothing, rc 0)
    nv_rc, nv_out, _nv_err = module.run_command([smi_path, "nvlink", "-s"])
    if nv_rc == 0:
        nvlink = parse_nvlink_status(nv_out)
    errors = None  # not read: no NVLink, or `nvlink -s` did not answer
    if nvlink and any(entry.get("links") for entry in nvlink.values()):
        errors = query_nvlink_errors(module, smi_path, problems)
    return smi, nvlink, True, None, errors


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/sys"),
            nvidia_smi=dict(type="path"),
            pci_models=dict(type="dict", default={}),
            query_smi=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    pci = scan_pci_sysfs(params["sysfs_root"])
    hcas = scan_infiniband_sysfs(params["sysfs_root"])

    smi = nvlink = errors = None
    driver_loaded = False
    error = None
    problems = []
    if params["query_smi"]:
        smi_path = params["nvidia_smi"] or module.get_bin_path("nvidia-smi", required=False)
        if smi_path and os.path.isfile(smi_path) and os.access(smi_path, os.X_OK):
            smi, nvlink, driver_loaded, error, errors = query_smi(module, smi_path, problems)
        else:
            error = "nvidia-smi not found"
    else:
        error = "nvidia-smi not queried (query_smi=false)"

    facts = summarize(pci, smi=smi, hcas=hcas, pci_models=params["pci_models"],
                      nvlink=nvlink, driver_loaded=driver_loaded, nvlink_errors=errors,
                      fabric_manager=fabric_manager(module, problems))
    facts["smi_error"] = error
    facts["problems"] = problems
    module.exit_json(changed=False, ansible_facts={"kiln_gpu": facts})


if __name__ == "__main__":
    main()
