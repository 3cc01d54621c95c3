#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: the burn-in's swap scope and pair phase (logic in module_utils/kiln/burnin/pair_phase.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kiln_burnin_pairs
short_description: Plan and judge the burn-in's 2-node pair phase
description:
  - Runs on the Ansible controller (C(localhost)); never changes a managed node. Reads the per-node burn-in
    history under O(state_dir) (C(module_utils/kiln/burnin/baseline.py)).
  - O(op=scope) names the hosts a run touches (swap mode - the repaired nodes plus known-good partners).
  - O(op=start) decides who takes part given the Slurm state (down nodes out; drained swap targets resumed
    inside the burn-in's reservation; other drained nodes left out), loads baselines and plans round 1.
  - O(op=round) judges the pairs measured so far against the two-node floor and the run's reference
    (C(module_utils/kiln/burnin/isolate.py)) and plans the next round.
version_added: "0.2.0"
author:
  - kiln contributors
options:
  op:
    description: Step of the pair phase.
    type: str
    required: true
    choices: [scope, start, round]
  mode:
    description: Burn-in mode.
    type: str
    choices: [quick, default, acceptance, swap]
    required: true
  nodes:
    description: Inventory hosts (scope - every candidate; start - those that passed the per-node phases).
    type: list
    elements: str
    required: true
  swap_nodes:
    description: Swap mode's repaired nodes (list or comma-separated string), O(op=scope).
    type: raw
  partners:
    description: Known-good partners to bring into a swap run, O(op=scope).
    type: int
    # required with op=scope (the knob's value; no default here)
  targets:
    description: Swap targets from O(op=scope) (O(op=start), O(op=round)).
    type: list
    elements: str
    default: []
  known_good:
    description: Partners from O(op=scope) (O(op=start)).
    type: list
    elements: str
    default: []
  state_dir:
    description: Directory of the per-node history files.
    type: path
    required: true
  versions:
    description: Per-node version fingerprint (O(op=start)).
    type: dict
    default: {}
  sinfo:
    description: C(sinfo --noheader --Node --format '%N|%T|%E') lines; omit without Slurm (O(op=start)).
    type: list
    elements: str
  slurm_names:
    description: Inventory host to Slurm node name.
    type: dict
    default: {}
  baseline_window:
    description: Passing runs a baseline is the median of.
    type: int
    # required with op=start (the knob's value; no default here)
  state:
    description: The O(op=start) result (O(op=round)).
    type: dict
    default: {}
  results:
    description: Pairs judged in earlier rounds (the previous O(op=round)'s C(results)).
    type: list
    elements: dict
    default: []
  measured:
    description: >-
      This round's runs as registered by the playbook's loop (C(command) or C(async_status) results with
      C(__pair) or C(__job.__pair), C(rc), C(stdout)).
    type: list
    elements: dict
    default: []
  lost:
    description: >-
      O(op=round) - nodes the playbook found unreachable (Ansible ping) after this round's failed pairs;
      they are INCOMPLETE and never paired again.
    type: list
    elements: str
    default: []
  round:
    description: Number of the round just measured (O(op=round)).
    type: int
    default: 1
  max_rounds:
    description: Rounds allowed in all.
    type: int
    # required with op=round (the knob's value; no default here)
  band:
    description:
      - A pair more than this fraction below the reference is SLOW (O(op=start) only).
      - It travels in the returned state; later rounds and the final verdict read it from there.
    type: float
    # required with op=start (the knob's value; no default here)
  confirm:
    description: Blame only after a confirmation partner (three failing partners; O(op=start) only, kept in the state).
    type: bool
    # required with op=start (the knob's value; no default here)
  sku:
    description: Floors SKU of the pairs (C(cpu) for the CPU engine).
    type: str
    default: cpu
  fabric:
    description: Fabric key of the floors.
    type: str
    default: tcp
  floors_path:
    description: Floors file (kiln_burnin_floors_file, by default the project's C(data/burnin_floors.yml)).
    type: path
    # required with op=round (the knob's value; no default here)
  floor_overrides:
    description: Floor overrides.
    type: dict
    # required with op=round (the knob's value; no default here)
  fabric_ports:
    description: O(op=start) - each node's RDMA ports (port, link_layer, state, rate) from sysfs; names the floors' fabric key.
    type: dict
    default: {}
  override_operator_drain:
    description: >-
      Swap mode (O(op=start)) - test a target a person drained (its drain is restored unless it passes). Without
      it such a target is held: reported "held by operator" and INCOMPLETE.
    type: bool
    # required with op=start (the knob's value; no default here)
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Plan round 1
  kiln_burnin_pairs:
    op: start
    mode: swap
    nodes: [gpu07, gpu01, gpu02]
    targets: [gpu07]
    known_good: [gpu01, gpu02]
    state_dir: results/burnin/history
  register: __pairs
"""

RETURN = r"""
hosts:
  description: O(op=scope) - hosts the run touches.
  returned: op=scope
  type: list
pairs:
  description: The next round's pairs (empty when the phase is done).
  returned: op=start, op=round
  type: list
state:
  description: O(op=start) - participants, excluded, resume, drained_before, baselines, known_good.
  returned: op=start
  type: dict
results:
  description: O(op=round) - every pair judged.
  returned: op=round
  type: list
nodes:
  description: O(op=round) - each node's isolation state so far.
  returned: op=round
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kiln.burnin.baseline import load_with_warnings
from ansible.module_utils.kiln.burnin.pair_phase import pair_records, pair_round, pair_scope, pair_start
from ansible.module_utils.kiln.slurm.sinfo import parse_sinfo
from ansible.module_utils.kiln.verdict import KilnConfigError, load_floors


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "op": {"type": "str", "required": True, "choices": ["scope", "start", "round"]},
            "mode": {"type": "str", "choices": ["quick", "default", "acceptance", "swap"], "required": True},
            "nodes": {"type": "list", "elements": "str", "required": True},
            "swap_nodes": {"type": "raw"},
            "partners": {"type": "int"},
            "targets": {"type": "list", "elements": "str", "default": []},
            "known_good": {"type": "list", "elements": "str", "default": []},
            "state_dir": {"type": "path", "required": True},
            "versions": {"type": "dict", "default": {}},
            "sinfo": {"type": "list", "elements": "str"},
            "slurm_names": {"type": "dict", "default": {}},
            "baseline_window": {"type": "int"},
            "state": {"type": "dict", "default": {}},
            "results": {"type": "list", "elements": "dict", "default": []},
            "measured": {"type": "list", "elements": "dict", "default": []},
            "lost": {"type": "list", "elements": "str", "default": []},
            "round": {"type": "int", "default": 1},
            "max_rounds": {"type": "int"},
            "band": {"type": "float"},
            "confirm": {"type": "bool"},
            "sku": {"type": "str", "default": "cpu"},
            "fabric": {"type": "str", "default": "tcp"},
            "floors_path": {"type": "path"},
            "floor_overrides": {"type": "dict"},
            "override_operator_drain": {"type": "bool"},
            "fabric_ports": {"type": "dict", "default": {}},
        },
        # The parameters fed by kiln_burnin_* knobs are required where used: their defaults live only in
        # roles/burnin_settings.
        required_if=[("op", "scope", ["partners"]),
                     ("op", "start", ["baseline_window", "override_operator_drain", "band", "confirm"]),
                     ("op", "round", ["max_rounds", "floor_overrides", "floors_path"])],
        supports_check_mode=True,
    )
    p = module.params
    damaged = []

    def load(state_dir, node):
        records, warnings = load_with_warnings(state_dir, node)
        damaged.extend(f"history of {node}: {w}" for w in warnings[:5])
        return records

    if p["op"] != "start" and (p["band"] is not None or p["confirm"] is not None):
        module.fail_json(msg="kiln_burnin_pairs: band and confirm are given once, with op=start; "
                             "the rounds read them from the state it returns")
    try:
        if p["op"] == "scope":
            histories = {n: load(p["state_dir"], n) for n in p["nodes"]}
            scope = pair_scope(p["nodes"], p["mode"], p["swap_nodes"], histories, p["partners"])
            scope["notes"] = list(scope.get("notes") or []) + damaged[:20]
            module.exit_json(changed=False, **scope)
        if p["op"] == "start":
            histories = {n: load(p["state_dir"], n) for n in p["nodes"]}
            slurm = parse_sinfo(p["sinfo"]) if p["sinfo"] is not None else None
            state = pair_start(p["nodes"], p["mode"], p["targets"], p["known_good"], histories, p["versions"],
                               slurm, p["slurm_names"], p["baseline_window"], p["override_operator_drain"],
                               p["band"], p["confirm"], p["fabric_ports"])
            module.exit_json(changed=False, state=state, pairs=[list(x) for x in state["pairs"]])
        runs = list(p["results"]) + pair_records(p["measured"], p["round"], p["lost"])
        out = pair_round(p["state"], runs, mode=p["mode"], floors=load_floors(p["floors_path"]),
                         overrides=p["floor_overrides"], sku=p["sku"], fabric=p["fabric"],
                         round_no=p["round"], max_rounds=p["max_rounds"],
                         targets=p["targets"])
        module.exit_json(changed=False, **out)
    except KilnConfigError as exc:
        module.fail_json(msg=f"burn-in configuration error: {exc}", exit_code=4)
    except (OSError, ValueError, TypeError, KeyError, RecursionError) as exc:
        module.fail_json(msg=f"burn-in pair phase failed: {type(exc).__name__}: {exc}", exit_code=4)


if __name__ == "__main__":
    main()
