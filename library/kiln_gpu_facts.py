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
    persistence mode, active clock event (throttle) reasons, temperature and power,
    from C(nvidia-smi -q -x), and NVLink link states from C(nvidia-smi nvlink -s).
  - Reads InfiniBand/RoCE HCAs and their ports (state, rate, link layer) from C(/sys/class/infiniband).
  - Returns empty lists, not errors, where nothing is found. A driver that is installed but not loaded
    (C(nvidia-smi) exit code 9) gives RV(ansible_facts.kiln_gpu.driver_loaded=false), not a failure.
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
  - C(nvidia-smi -q -x) does not report NVLink link states; they come from C(nvidia-smi nvlink -s).
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
              fabric (state, status), clock_event_reasons_active, clock_event_reasons_field,
              performance_state, temperature_c, power_draw_w, power_limit_w, memory_total_mib, mig_mode.
          type: list
          elements: dict
          sample:
            - index: 0
              name: NVIDIA H100 80GB HBM3
              model: H100-SXM5-80GB
              pci_device_id: "10de:2330"
              nvlink: {links: 18, active: 18, inactive: 0}
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
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kiln.facts.hardware import (
    parse_nvidia_smi_xml,
    parse_nvlink_status,
    scan_infiniband_sysfs,
    scan_pci_sysfs,
    summarize,
)

# nvidia-smi exit codes (nvidia-smi(1), RETURN VALUE).
RC_NO_DEVICES = 6
RC_DRIVER_NOT_LOADED = 9
DRIVER_MESSAGES = ("couldn't communicate with the nvidia driver", "driver/library version mismatch")


def query_smi(module, smi_path):
    """Run nvidia-smi. Returns (smi dict or None, nvlink dict or None, driver_loaded, error)."""
    rc, out, err = module.run_command([smi_path, "-q", "-x"])
    text = f"{out}\n{err}".lower()
    if rc == RC_DRIVER_NOT_LOADED or any(msg in text for msg in DRIVER_MESSAGES):
        return None, None, False, f"driver not loaded (nvidia-smi rc={rc}): {(out or err).strip()[:200]}"
    if rc == RC_NO_DEVICES or "no devices were found" in text:
        return {"driver_version": None, "cuda_version": None, "gpus": []}, None, True, "nvidia-smi: no devices were found"
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
    return smi, nvlink, True, None


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

    smi = nvlink = None
    driver_loaded = False
    error = None
    if params["query_smi"]:
        smi_path = params["nvidia_smi"] or module.get_bin_path("nvidia-smi", required=False)
        if smi_path and os.path.isfile(smi_path) and os.access(smi_path, os.X_OK):
            smi, nvlink, driver_loaded, error = query_smi(module, smi_path)
        else:
            error = "nvidia-smi not found"
    else:
        error = "nvidia-smi not queried (query_smi=false)"

    facts = summarize(pci, smi=smi, hcas=hcas, pci_models=params["pci_models"],
                      nvlink=nvlink, driver_loaded=driver_loaded)
    facts["smi_error"] = error
    module.exit_json(changed=False, ansible_facts={"kiln_gpu": facts})


if __name__ == "__main__":
    main()
