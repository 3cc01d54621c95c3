#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: judge a burn-in's collected data and write its reports (logic in module_utils)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kiln_burnin
short_description: Judge kiln burn-in data against floors and write the reports
description:
  - Runs on the Ansible controller (C(localhost)). Takes what the burn-in playbook collected per node
    (GPU facts, kernel-log XIDs, tool paths, C(dcgmi diag) and single-node all-reduce outputs) and for the
    fabric (all-reduce output, iperf3 link rates), judges it with C(module_utils/kiln/burnin/assemble.py),
    C(module_utils/kiln/verdict.py) and the floors in C(data/burnin_floors.yml), and returns per-node verdicts.
  - With O(write=true) it also writes C(summary.json), C(summary.md), C(junit.xml), Prometheus textfiles and
    SVG plots (C(module_utils/kiln/burnin/report.py)) plus the raw outputs into O(results_dir).
version_added: "0.1.0"
author:
  - kiln contributors
options:
  run_id:
    description: Run identifier (also the results directory's name).
    type: str
    required: true
  mode:
    description: Burn-in mode.
    type: str
    choices: [quick, default, acceptance, swap]
    required: true
  nodes:
    description:
      - Per-node data, C({name: {kiln_gpu, gpu_present, expected_gpus, kernel_log, tools, dcgm, nccl, sku, fabric, fabric_after, rdma}}).
      - C(kernel_log) comes from module kiln_kernel_log; C(xid_log), kernel-log text already read, is used when it is absent.
      - C(fabric_after) (C({facts, why}), filter kiln_fabric_reread) is the fabric read again after the run's traffic; with
        O(write) it is judged as fabric.counters.during_run, required for a node with expected RDMA ports.
    type: dict
    required: true
  fabric:
    description:
      - Fabric runs, C([{id, ran, nodes, text, rc, timed_out, engine, sku, fabric, test, iperf, link_expected}]).
      - C(iperf) is each node's link result (filter kiln_iperf_link); C(link_expected) the nodes that were to measure
        one (a fabric node without a rate leaves the check INCOMPLETE).
    type: list
    elements: dict
    default: []
  fabric_name:
    description: Fabric key of the floors (C(tcp), C(ib_ndr), ...).
    type: str
    default: tcp
  floors_path:
    description: Floors file (kiln_burnin_floors_file, by default the project's C(data/burnin_floors.yml)).
    type: path
    required: true
  floor_overrides:
    description: Floor overrides in the floors file's shape or as C(sku/fabric/test) short keys.
    type: dict
    required: true
  fingerprint:
    description: Versions of the stack (driver, cuda, nccl, nccl_tests, dcgm, ofed, env_sha256).
    type: dict
    default: {}
  results_dir:
    description: Directory for this run's reports and artifacts (created).
    type: path
    required: true
  write:
    description: Write the reports (V(false) only judges, between phases).
    type: bool
    default: false
  extra:
    description: Extra top-level summary keys (engine, started, scope, nccl_env, ...).
    type: dict
    default: {}
  pairs:
    description: The pair phase (C(kiln_burnin_pairs) state plus C(results) and C(confirm)); adds pair and baseline checks.
    type: dict
    default: {}
  baseline_band:
    description: A node's pair busbw more than this fraction below its own baseline is WARN.
    type: float
    required: true
  actions:
    description: >-
      Scheduler action planning, C({backend, drained_before, resumed, slurm_names, override_operator_drain,
      resume_on, sinfo}); C(sinfo) - the nodes' C(sinfo --noheader --Node --format '%N|%T|%E') lines read just
      before judging (a node someone else drained meanwhile gets the action C(hold), "held by operator: <reason>").
      Omitted, no actions are planned.
    type: dict
  state_dir:
    description:
      - Per-node history directory; with O(write=true) each judged node gets one record appended.
      - Read in every phase for each node's NVLink counter baseline (the snapshot of its last run that passed
        C(nvlink.errors)); without it every node records a first baseline.
    type: path
  versions:
    description: Per-node version fingerprint (history records).
    type: dict
    default: {}
  expected:
    description: >-
      Every node the run is expected to judge (the inventory's burn-in targets in scope); a node without data
      is INCOMPLETE, never left out.
    type: list
    elements: str
    default: []
  health_path:
    description: GPU health thresholds (kiln_burnin_health_file, by default the project's C(data/burnin_health.yml)).
    type: path
    required: true
  allow_mixed_versions:
    description:
      - Let a fabric check spanning nodes with different driver, NCCL or DOCA versions pass (a rolling upgrade).
        Without it such a check is INCOMPLETE, and each node whose versions differ from the others' WARNs.
    type: bool
    required: true
  fabric_path:
    description: >-
      Fabric rules (error-counter thresholds, ib_write_bw floors): kiln_burnin_fabric_file, by default the project's
      C(data/burnin_fabric.yml).
      Read only when a node carries O(nodes) C(fabric) data.
    type: path
    required: true
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
notes:
  - Never changes a managed node; writes only under O(results_dir) on the controller, and not in check mode.
"""

EXAMPLES = r"""
- name: Judge and report
  kiln_burnin:
    run_id: "{{ kiln_burnin_run_id }}"
    mode: default
    nodes: "{{ __nodes }}"
    fabric: "{{ __fabric }}"
    results_dir: "results/burnin/{{ kiln_burnin_run_id }}"
    write: true
  delegate_to: localhost
"""

RETURN = r"""
nodes:
  description: Per-node record with status, exit and checks.
  returned: always
  type: dict
passed:
  description: Nodes whose status is PASS or WARN (they take part in later phases).
  returned: always
  type: list
  elements: str
overall:
  description: Overall status and exit code (only when write is true or the summary could be built).
  returned: always
  type: dict
markdown:
  description: summary.md text.
  returned: always
  type: str
written:
  description: Report files written, logical name to path.
  returned: always
  type: dict
"""

import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kiln.burnin.assemble import assemble, nvlink_history, report
from ansible.module_utils.kiln.burnin.iperf import iperf_reference
from ansible.module_utils.kiln.health.rules import load_health
from ansible.module_utils.kiln.verdict import KilnConfigError, load_floors


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "run_id": {"type": "str", "required": True},
            "mode": {"type": "str", "choices": ["quick", "default", "acceptance", "swap"], "required": True},
            "nodes": {"type": "dict", "required": True},
            "fabric": {"type": "list", "elements": "dict", "default": []},
            "fabric_name": {"type": "str", "default": "tcp"},
            "floors_path": {"type": "path", "required": True},
            "floor_overrides": {"type": "dict", "required": True},
            "fingerprint": {"type": "dict", "default": {}},
            "results_dir": {"type": "path", "required": True},
            "write": {"type": "bool", "default": False},
            "extra": {"type": "dict", "default": {}},
            "pairs": {"type": "dict", "default": {}},
            "baseline_band": {"type": "float", "required": True},
            "actions": {"type": "dict"},
            "state_dir": {"type": "path"},
            "versions": {"type": "dict", "default": {}},
            "expected": {"type": "list", "elements": "str", "default": []},
            "health_path": {"type": "path", "required": True},
            "fabric_path": {"type": "path", "required": True},
            "allow_mixed_versions": {"type": "bool", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    write = params["write"] and not module.check_mode
    fabric = []
    for entry in params["fabric"]:
        entry = dict(entry)
        if (entry.get("iperf") or entry.get("link_expected")) and not entry.get("reference"):
            entry["reference"] = iperf_reference(entry.get("iperf") or [], entry.get("link_expected") or [])
        fabric.append(entry)
    try:
        floors = load_floors(params["floors_path"])
        assembled = assemble(params["nodes"], fabric, mode=params["mode"], floors=floors,
                             overrides=params["floor_overrides"], fabric_name=params["fabric_name"],
                             results_dir=params["results_dir"] if write else None, pairs=params["pairs"],
                             baseline_band=params["baseline_band"], expected=params["expected"],
                             health=load_health(params["health_path"]), final=params["write"],
                             fabric_path=params["fabric_path"], allow_mixed=params["allow_mixed_versions"],
                             nvlink_previous=nvlink_history(params["state_dir"],
                                                            sorted(set(params["nodes"]) | set(params["expected"]))))
        result = report(params["run_id"], params["mode"], assembled, params["results_dir"],
                        params["fingerprint"], write=write, actions=params["actions"],
                        state_dir=params["state_dir"], node_versions=params["versions"], **params["extra"])
    except KilnConfigError as exc:
        module.fail_json(msg=f"burn-in configuration error: {exc}", exit_code=4)
    except (OSError, ValueError, TypeError, KeyError, RecursionError) as exc:
        module.fail_json(msg=f"burn-in report failed: {type(exc).__name__}: {exc}",
                         exception=traceback.format_exc(), exit_code=4)
    summary = result["summary"]
    module.exit_json(changed=bool(result["written"]), nodes=summary["nodes"], fabric=summary["fabric"],
                     actions=summary.get("actions") or [],
                     passed=assembled["passed"], overall=summary["overall"], markdown=result["markdown"],
                     written=result["written"], results_dir=params["results_dir"])


if __name__ == "__main__":
    main()
