# -*- coding: utf-8 -*-
"""Burn-in assembly: every node's checks (kiln_burnin_checks) and pair phase
(kiln_burnin_pair_phase), the fabric verdicts, the run's summary, the scheduler
actions and the history records -- the logic behind library/kiln_burnin.py (which
only passes Ansible data in and out).

Standard library only; importable as ``kiln.burnin.assemble`` and as
``ansible.module_utils.kiln.burnin.assemble``.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

from . import baseline as kiln_baseline
from . import isolate as kiln_isolate
from ..nccl import parse as kiln_nccl
from . import report as kiln_report
from .. import verdict as kiln_verdict
from .checks import (
    DCGM_LEVELS, FAIL, INCOMPLETE, PAIR_CHECK, PASS, SKIP, WARN, check, dcgm_diag_check, enforce_checks,
    expected_gpu_count, failed_before_pairs, gpu_state_checks, health_checks, nccl_check, node_sku, passive_checks,
    relative_single_node, required_checks, tools_check,
)
from ..health import gpu_state as kiln_gpu_state
from .evidence import node_evidence
from .pair_phase import pair_checks, state_band
from . import fabric_checks as kiln_burnin_fabric_checks
from . import fabric_pairs as kiln_burnin_fabric_pairs
from ..packages import drift as kiln_drift
from ..slurm.node_state import BURNIN_REASON_PREFIX, DRAIN, HELD, decide, kiln_reason
from ..slurm.sinfo import parse_sinfo

#: Fabric checks a node's PASS needs when RDMA ports are expected of it (docs/burnin.md).
FABRIC_REQUIRED = ("fabric.facts", "fabric.ports", "fabric.rate", "fabric.counters")
RDMA_CHECK = "rdma.write_bw"
NVLINK_CHECK = kiln_gpu_state.CHECK_NVLINK_ERRORS


def _write(results_dir: str, relpath: str, text: str) -> str:
    path = os.path.join(results_dir, relpath)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text or "")
    return relpath


def node_fabric(name: str, fab: Mapping[str, Any], gpu_node: bool, rules: Mapping[str, Any], mode: str,
                after: Any = None, final: bool = False) -> Dict[str, Any]:
    """A node's passive fabric checks, what its PASS requires of them, and its report entry.

    *fab*: ``{facts, expect, history: {records, counters}, gpudirect, socket_ifname}`` from the
    playbook (facts: ``ansible_facts['kiln_fabric']``; expect: ``kiln_burnin_fabric_expect``;
    history.counters: the counter baseline, kiln_burnin_fabric_checks.counter_baseline).
    *after*: ``{facts, why}``, the counters read again after the run's own traffic (node key
    ``fabric_after``); with *final* (the run's verdict) it adds fabric.counters.during_run, required
    with expected ports. *mode* ``acceptance`` requires an expectation (inventory or history).
    A malformed expectation raises kiln_burnin_fabric_checks.FabricError (a configuration error, exit 4).
    """
    facts = fab.get("facts")
    history = fab.get("history") if isinstance(fab.get("history"), Mapping) else {}
    expected = kiln_burnin_fabric_checks.expected_ports(facts, fab.get("expect"), history.get("records"), host=name)
    acceptance = mode == "acceptance"
    checks = kiln_burnin_fabric_checks.passive_fabric_checks(facts, expected, history.get("counters"), rules,
                                                      fab.get("gpudirect"), gpu_node, require_expectation=acceptance)
    gap = kiln_burnin_fabric_checks.expectation_missing(expected) if acceptance else None
    required: List[str] = []
    if expected.get("count") or gap:
        required += list(FABRIC_REQUIRED) + (["fabric.gpudirect"] if gpu_node else [])
    if final and (expected.get("count") or gap):
        during = kiln_burnin_fabric_checks.during_run_check(facts, after, expected, rules)
        if gap:
            during.update(status=INCOMPLETE, detail=f"{gap} (measured: {during['status']} {during['detail']})"[:600])
        checks.append(during)
        required.append(kiln_burnin_fabric_checks.DURING_RUN_CHECK)
    env = kiln_burnin_fabric_pairs.nccl_env(facts, expected, fab.get("socket_ifname"))
    ports = []
    for hca in (facts or {}).get("hcas") or [] if isinstance(facts, Mapping) else []:
        for port in (hca.get("ports") or []) if isinstance(hca, Mapping) else []:
            if isinstance(port, Mapping):
                ports.append({"port": f"{hca.get('name')}/{port.get('port')}", "model": hca.get("model"),
                              "fw_ver": hca.get("fw_ver"), "link_layer": port.get("link_layer"),
                              "state": port.get("state"), "phys_state": port.get("phys_state"),
                              "rate": port.get("rate"), "netdevs": port.get("netdevs")})
    after_facts = after.get("facts") if isinstance(after, Mapping) else None
    baseline = history.get("counters") if isinstance(history.get("counters"), Mapping) else {}
    entry = {"ports": ports, "expected": expected.get("why"), "expected_source": expected.get("source"),
             "nccl_env": env.get("env"), "nccl_env_why": env.get("why"),
             "gpudirect": (fab.get("gpudirect") or {}).get("method") if isinstance(fab.get("gpudirect"), Mapping) else None,
             "counters": kiln_burnin_fabric_checks.counter_snapshot(facts),
             "identity": kiln_burnin_fabric_checks.counter_identity(facts),
             "counters_after": kiln_burnin_fabric_checks.counter_snapshot(after_facts) if after_facts is not None else None,
             "identity_after": kiln_burnin_fabric_checks.counter_identity(after_facts) if after_facts is not None else None,
             "baseline": {"run_id": baseline.get("run_id"), "note": baseline.get("note")},
             "history": kiln_burnin_fabric_checks.history_fabric(facts, expected)}
    return {"checks": checks, "required": required, "entry": entry}


def assemble(nodes: Mapping[str, Mapping[str, Any]], fabric: Sequence[Mapping[str, Any]] = (), *,
             mode: str, floors: Mapping[str, Any], overrides: Mapping[str, Any], baseline_band: float,
             health: Mapping[str, Any], fabric_path: str, allow_mixed: bool,
             results_dir: Optional[str] = None, fabric_name: str = "tcp", pairs: Optional[Mapping[str, Any]] = None,
             expected: Optional[Sequence[str]] = None, final: bool = True,
             nvlink_previous: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Per-node checks and fabric checks from the raw data the playbook collected.

    *nodes*: ``{name: {kiln_gpu, gpu_present, expected_gpus, history_gpus, engine, kernel_log, xid_log,
    dcgm: {present, rc, stdout}, nccl: {text, rc, timed_out, engine}, sku, excluded: "why", ...}}``
    (every key optional), each read once into a :class:`~.evidence.NodeEvidence` (an unknown key or a
    value of the wrong type is a KilnConfigError naming the node and the key).
    *fabric*: ``[{id, nodes, ranks, text, rc, timed_out, engine, sku, reference}]``.
    *pairs*: the pair phase (``{results, nodes, baselines, excluded, confirm, band}`` from
    pair_start/pair_round; band and confirm travel in that state); adds each node's pair and baseline checks.
    *expected*: every node the inventory's burn-in group names for this run;
    one that sent no data (unreachable, failed before preflight) is INCOMPLETE.
    *final*: the run's verdict (every check the mode requires must be there);
    False between phases (passive, active), where later checks are still to come.
    A node's ``stack`` (``{versions: {driver, nccl, doca, kernel}, as_built, drift: [rows]}``, from
    roles/as_built) adds its ``stack.versions`` check: WARN for packages not at kiln's pins, and for a
    driver/NCCL/DOCA that differs from the other nodes of the run unless *allow_mixed*. A fabric
    check spanning nodes with different driver/NCCL/DOCA versions is never PASS (INCOMPLETE: a
    result across mixed versions proves neither) unless *allow_mixed* (a rolling upgrade).
    *nvlink_previous*: per node, its NVLink counter baseline (:func:`nvlink_baseline` of its history:
    ``{run_id, counters}``); a node without one records its first baseline (nvlink.errors PASS). Each
    node's record gets ``nvlink: {counters, baseline_run}`` (the snapshot read now), which
    :func:`history_records` keeps as the next baseline only from a run that passed nvlink.errors.
    Raw outputs are written under *results_dir* when given (artifacts).
    """
    pairs = dict(pairs or {})
    nvlink_previous = nvlink_previous if isinstance(nvlink_previous, Mapping) else {}
    pair_results = list(pairs.get("results") or [])
    pair_outcomes: Dict[str, Any] = {}
    if pair_results or pairs.get("participants"):
        band, confirm = state_band(pairs)
        pair_outcomes = kiln_isolate.finish(pairs.get("participants") or [], pair_results,
                                            confirm=confirm, band=band)
    pair_artifacts: Dict[str, str] = {}
    for entry in pair_results:
        if results_dir:
            rel = _write(results_dir, f"pairs/r{entry.get('round')}-{entry['pair'][0]}-{entry['pair'][1]}.txt",
                         entry.get("text") or "")
            for member in entry["pair"]:
                pair_artifacts.setdefault(member, os.path.dirname(rel) + "/")
    level = DCGM_LEVELS.get(mode, 2)
    evidence = {str(k): node_evidence(str(k), v if isinstance(v, Mapping) else {}) for k, v in (nodes or {}).items()}
    fabric_rules = kiln_burnin_fabric_checks.load_fabric_thresholds(fabric_path) if any(
        isinstance(ev.fabric, Mapping) for ev in evidence.values()) else {}
    expected_nodes = sorted({str(n) for n in (expected or [])} | set(evidence))
    stack_versions = {name: ev.stack.get("versions") for name, ev in evidence.items() if isinstance(ev.stack, Mapping)}
    out_nodes: Dict[str, Dict[str, Any]] = {}
    pair_phase = mode in kiln_isolate.MODES and len(expected_nodes) > 1
    for name in expected_nodes:
        if name not in evidence:
            checks = [check("burnin.reached", INCOMPLETE, "no burn-in data from this node: unreachable, or it "
                            "failed before the preflight finished (see the play output); an expected node is "
                            "never left out of the verdict")]
            out_nodes[name] = {"checks": checks, **kiln_verdict.aggregate_node(checks)}
            continue
        ev = evidence[name]
        gpu_present = ev.gpu_present
        want_gpus = expected_gpu_count(ev.expected_gpus, ev.history_gpus)
        gpu_node = gpu_present or bool(want_gpus)
        engine = ev.engine or ("nccl-tests" if gpu_node else "cpu")
        checks = []
        if ev.collected("tools"):
            checks.append(tools_check(ev.tools or {}))
        checks += passive_checks(ev.kiln_gpu, want_gpus, ev.xid_log, ev.kernel_log)
        if gpu_node:
            checks += health_checks(ev.kiln_gpu, health)
        base = nvlink_previous.get(name) if isinstance(nvlink_previous.get(name), Mapping) else {}
        state_checks, nvlink_now = gpu_state_checks(ev.kiln_gpu, health, base.get("counters"), want_gpus)
        checks += state_checks
        if ev.collected("dcgm"):
            artifact = None
            if results_dir and (ev.dcgm or {}).get("stdout"):
                artifact = _write(results_dir, f"{name}/dcgm_r{level}.txt", ev.dcgm["stdout"])
            checks.append(dcgm_diag_check(level, ev.dcgm, gpu_node, mode, health, artifact))
        if ev.collected("nccl"):
            run = ev.nccl or {}
            if not run.get("ran"):
                why = run.get("why") or "no NVIDIA GPU on this node"
                wanted = gpu_node and engine == "nccl-tests" and not ev.excluded
                checks.append(check("nccl.single_node.all_reduce", INCOMPLETE if wanted else SKIP, why))
            elif not gpu_present:
                checks.append(check("nccl.single_node.all_reduce", INCOMPLETE,
                                    "contradictory: an all-reduce result from a node with no GPU on PCI; not judged"))
            else:
                sku = node_sku(floors, ev.as_node())
                if not sku:
                    raise kiln_verdict.KilnConfigError(
                        f"{name}: cannot map its GPU ({ev.gpu_name or 'unknown model'}) to a SKU in "
                        "data/burnin_floors.yml; set kiln_burnin_sku for this host or add the model")
                spec = kiln_verdict.lookup_floor(floors, sku, "any", "single_node", overrides=overrides)
                artifact = _write(results_dir, f"{name}/nccl_node.txt", run.get("text", "")) if results_dir else None
                checks.append(nccl_check("nccl.single_node.all_reduce", run, spec, artifact))
        fabric_required: List[str] = []
        fabric_entry = None
        if isinstance(ev.fabric, Mapping):
            fab = node_fabric(name, ev.fabric, gpu_node, fabric_rules, mode, ev.fabric_after, final)
            checks += fab["checks"]
            fabric_required, fabric_entry = fab["required"], fab["entry"]
        if ev.rdma:
            checks += [dict(c) for c in ev.rdma]
            fabric_required.append(RDMA_CHECK)
        if isinstance(ev.stack, Mapping):
            checks.append(stack_check(name, ev.stack, stack_versions, allow_mixed))
        if ev.excluded:
            checks.append(check("burnin.scope", SKIP, ev.excluded))
        if name in (pairs.get("excluded") or {}):
            out = pairs["excluded"][name]
            checks.append(check("burnin.scope", out.get("status") or SKIP, out.get("why") or "left out"))
        elif name in pair_outcomes and pair_outcomes[name]["state"] != kiln_isolate.UNTESTED:
            checks += pair_checks(name, pair_outcomes[name], pair_results,
                                  (pairs.get("baselines") or {}).get(name), baseline_band,
                                  pair_artifacts.get(name))
        required = required_checks(mode, gpu_node, engine, pair_phase and not failed_before_pairs(checks),
                                   level, swap_target=name in (pairs.get("targets") or []) or mode != "swap")
        checks = enforce_checks(checks, (required + fabric_required) if final else [], mode)
        out_nodes[name] = {"checks": checks, **kiln_verdict.aggregate_node(checks)}
        if nvlink_now:
            out_nodes[name]["nvlink"] = {"counters": nvlink_now, "baseline_run": base.get("run_id")}
        if fabric_entry is not None:
            out_nodes[name]["fabric"] = fabric_entry
        if ev.sku or gpu_node:
            out_nodes[name]["gpu_sku"] = node_sku(floors, ev.as_node())
    relative_single_node(out_nodes, (pairs.get("single_baselines") or {}), baseline_band)

    out_fabric = []
    for entry in fabric:
        cid = entry.get("id") or "nccl.fabric.all_reduce"
        members = list(entry.get("nodes") or [])
        if not entry.get("ran"):
            out_fabric.append(check(cid, SKIP if not members else INCOMPLETE,
                                    entry.get("why") or "no node passed the per-node phases", nodes=members))
            continue
        sku = entry.get("sku") or "cpu"
        spec = kiln_verdict.lookup_floor(floors, sku, entry.get("fabric") or fabric_name,
                                         entry.get("test") or "fabric", overrides=overrides)
        artifact = _write(results_dir, f"fabric/{cid}.txt", entry.get("text", "")) if results_dir else None
        if results_dir and (entry.get("stderr") or entry.get("argv")):
            _write(results_dir, f"fabric/{cid}.stderr.txt",
                   "# " + " ".join(str(a) for a in entry.get("argv") or []) + "\n" + (entry.get("stderr") or ""))
        result = nccl_check(cid, entry, spec, artifact)
        result["nodes"] = members
        mixed = kiln_drift.mixed_versions(stack_versions, members) if stack_versions else []
        if mixed:
            result["mixed_versions"] = mixed
            text = kiln_drift.mixed_text(mixed)
            if allow_mixed:
                result["detail"] = f"{result.get('detail') or ''} (mixed versions allowed: {text})".strip()
            elif result["status"] in (PASS, WARN):
                result["status"] = INCOMPLETE
                result["detail"] = (f"not judged: the test spans nodes with different versions ({text}); a result across "
                                 "mixed versions proves neither. Make them equal (playbooks/drift.yml names the "
                                 "nodes) or set kiln_burnin_allow_mixed_versions: true (measured: "
                                 f"{result.get('detail') or ''})")
        parsed = kiln_nccl.parse(entry.get("text") or "") if (entry.get("text") or "").strip() else {}
        result["ranks"] = entry.get("ranks") or parsed.get("nranks")
        result["engine"] = entry.get("engine")
        ref = entry.get("reference")
        if ref and ref.get("value") and result.get("value") is not None:
            ref = dict(ref)
            # busbw (GB/s) over the raw link rate (Gbit/s -> GB/s).
            link_gbs = float(ref["value"]) / 8.0 if ref.get("unit") == "Gbit/s" else float(ref["value"])
            ref["ratio"] = round(float(result["value"]) / link_gbs, 3) if link_gbs > 0 else None
            result["reference"] = ref
        elif ref:
            result["reference"] = dict(ref)
        unmeasured = (ref or {}).get("unmeasured") or []
        if unmeasured and result["status"] in (PASS, WARN):
            # The link phase is part of what the mode measures: a fabric node whose iperf3 rate is missing
            # (an error, unreadable output, or its phase did not finish on it) leaves the run unproven.
            result["status"] = INCOMPLETE
            result["detail"] = ("not judged: the raw link rate (iperf3) was not measured for "
                                + "; ".join(unmeasured) + f" (measured: {result.get('detail') or ''})")
        out_fabric.append(result)
    passed = sorted(n for n, rec in out_nodes.items() if rec["status"] in (PASS, WARN))
    out: Dict[str, Any] = {"nodes": out_nodes, "fabric": out_fabric, "passed": passed}
    if pair_results or pairs.get("participants"):
        out["pairs"] = {
            "rounds": max([int(r.get("round") or 0) for r in pair_results] or [0]),
            "results": [{k: r.get(k) for k in ("round", "pair", "status", "verdict", "value", "why", "reference",
                                                "detail")} for r in pair_results],
            "nodes": {n: {k: v for k, v in o.items()} for n, o in pair_outcomes.items()},
            "baselines": pairs.get("baselines") or {},
            "notes": list(pairs.get("notes") or []),
            "noise": kiln_isolate.noise(pair_results, band, [n for n, o in pair_outcomes.items()
                                                            if o.get("state") == kiln_isolate.BLAMED]),
        }
        if out["pairs"]["noise"].get("fix"):
            out["pairs"]["notes"].append(out["pairs"]["noise"]["fix"])
    return out


def stack_check(name: str, stack: Mapping[str, Any], versions: Mapping[str, Any],
                allow_mixed: bool) -> Dict[str, Any]:
    """``stack.versions`` of one node: its as-built drift (pins) and how its versions compare with the run's nodes."""
    mine = stack.get("versions") if isinstance(stack.get("versions"), Mapping) else {}
    rows = [r for r in stack.get("drift") or [] if isinstance(r, Mapping)]
    problems = [f"{r.get('package') or r.get('component')}: {r.get('actual')} (kiln intends {r.get('intended')})"
                for r in rows]
    differs = []
    for entry in kiln_drift.mixed_versions(versions, sorted(versions)):
        ours = next((v for v, ns in entry["versions"].items() if name in ns), None)
        counts = sorted(((len(ns), v) for v, ns in entry["versions"].items()), reverse=True)
        majority = counts[0][1] if len(counts) == 1 or counts[0][0] > counts[1][0] else None
        if ours is not None and ours != majority:
            others = sorted(v for v in entry["versions"] if v != ours)
            differs.append(f"{entry['component']} {ours} (other nodes: {', '.join(others)})")
    summary = ", ".join(f"{k} {mine.get(k) or 'none'}" for k in kiln_drift.CONSISTENT)
    extra = {"as_built": stack.get("as_built"), "versions": dict(mine), "drift": rows}
    if problems or (differs and not allow_mixed):
        why = "; ".join((["not at kiln's pins: " + ", ".join(problems)] if problems else [])
                        + (["differs from the run's other nodes: " + ", ".join(differs)] if differs else []))
        return check("stack.versions", WARN, f"{why} (playbooks/drift.yml shows every difference)", **extra)
    note = f"; differs from other nodes, allowed: {', '.join(differs)}" if differs else ""
    return check("stack.versions", PASS, f"{summary}; as-built {stack.get('as_built') or 'unknown'}{note}", **extra)


def report(run_id: str, mode: str, assembled: Mapping[str, Any], results_dir: str,
           fingerprint: Optional[Mapping[str, Any]] = None, write: bool = True,
           actions: Optional[Mapping[str, Any]] = None, state_dir: Optional[str] = None,
           node_versions: Optional[Mapping[str, Any]] = None, **extra: Any) -> Dict[str, Any]:
    """Build, validate and (with *write*) write the summary; plan the scheduler
    actions (*actions*: ``{backend, drained_before, resumed, slurm_names, sinfo}``; *sinfo*:
    the nodes' sinfo lines read just before judging, so a node someone else drained meanwhile
    is reported held) and append each node's history record under *state_dir*."""
    if assembled.get("pairs"):
        extra.setdefault("pairs", assembled["pairs"])
    scope = dict(extra.get("scope") or {})
    scope["expected"] = sorted(assembled["nodes"])
    extra["scope"] = scope
    summary = kiln_report.build_summary(run_id, mode, assembled["nodes"], assembled["fabric"], fingerprint, **extra)
    if actions is not None:
        planned = plan_actions(summary["nodes"], mode, actions.get("drained_before") or {},
                               actions.get("resumed") or [], actions.get("slurm_names"),
                               actions.get("backend") or "slurm",
                               bool(actions.get("override_operator_drain")),
                               actions.get("resume_on") or (PASS, WARN),
                               parse_sinfo(actions["sinfo"]) if actions.get("sinfo") is not None else None)
        summary["actions"] = planned
        for entry in planned:
            summary["nodes"][entry["node"]]["action"] = {k: entry[k] for k in ("action", "reason", "why")}
    errors = kiln_report.validate_summary(summary)
    if errors:
        raise ValueError("invalid burn-in summary: " + "; ".join(errors))
    written = kiln_report.write_reports(summary, results_dir) if write else {}
    if write and state_dir:
        finished = str(summary.get("finished") or "")
        for node, entry in history_records(summary, node_versions or {}, finished).items():
            kiln_baseline.append(state_dir, node, entry)
            written[f"history:{node}"] = kiln_baseline.node_file(state_dir, node)
    return {"summary": summary, "markdown": kiln_report.render_markdown(summary), "written": written}


def plan_actions(nodes: Mapping[str, Mapping[str, Any]], mode: str, drained_before: Mapping[str, str],
                 resumed: Sequence[str], slurm_names: Optional[Mapping[str, str]] = None,
                 backend: str = "slurm", override_operator_drain: bool = False,
                 resume_on: Sequence[str] = (PASS, WARN),
                 slurm: Optional[Mapping[str, Mapping[str, str]]] = None) -> List[Dict[str, Any]]:
    """What the burn-in does to each judged node in the scheduler.

    FAIL: drain with ``BURNIN: <failed checks>`` -- except a node a person
    drained, whose drain is restored untouched. A node the run resumed for the
    test (swap target that was drained): PASS/WARN (*resume_on*; the rolling
    upgrade asks for PASS only) in swap mode with a kiln drain stays resumed (a person's drain only with
    *override_operator_drain*, which is what let the run test it); anything
    else gets its old drain back.
    With *slurm* (``kiln_sinfo.parse_sinfo`` of sinfo read just before judging), each of
    these is checked by ``kiln_node_state.decide`` (the rule the scontrol in
    ``roles/slurm_controller/tasks/node_state.yml`` applies again right before acting): a node
    whose reason is now someone else's becomes ``hold`` ("held by operator: <reason>",
    nothing applied) -- kiln never replaces or lifts it.
    Backends: ``slurm`` (scontrol), ``none`` (report only); a Kubernetes
    cordon/taint backend plugs in here.
    """
    if backend not in ("slurm", "none"):
        raise kiln_verdict.KilnConfigError(f"kiln_burnin_actions must be slurm or none, not {backend!r}")
    resume_on = tuple(resume_on)
    if not resume_on or any(s not in (PASS, WARN) for s in resume_on):
        raise kiln_verdict.KilnConfigError(
            f"kiln_burnin_resume_on must list PASS and/or WARN, not {list(resume_on)!r}")
    names = dict(slurm_names or {})
    actions: List[Dict[str, Any]] = []
    for node in sorted(nodes):
        record = nodes[node]
        status = record.get("status")
        before = drained_before.get(node)
        by_person = before is not None and not kiln_reason(before)
        failed = [c["id"] for c in record.get("checks") or [] if c.get("status") == FAIL]
        if status == FAIL and not by_person:
            first = next((c for c in record.get("checks") or [] if c.get("status") == FAIL), {})
            reason = f"{BURNIN_REASON_PREFIX} {', '.join(failed)}: {first.get('detail') or ''}"
            action = {"action": "drain", "reason": reason[:200].rstrip(),
                      "why": "failed " + ", ".join(failed)}
        elif node in resumed and mode == "swap" and status in resume_on and (
                not by_person or override_operator_drain):
            action = {"action": "resume", "reason": None,
                      "why": f"passed in swap mode; drained before ({before})"
                      + ("; a person's drain, lifted by kiln_burnin_override_operator_drain" if by_person else "")}
        elif node in resumed or (status == FAIL and by_person):
            action = {"action": "restore", "reason": before,
                      "why": ("drained by a person: kiln never resumes it" if by_person else
                              f"{status} in {mode} mode: a kiln drain is lifted only by a swap run that ends "
                              + " or ".join(resume_on))
                      + (f"; failed {', '.join(failed)}" if failed else "")}
        else:
            continue
        action.update({"node": node, "slurm_node": names.get(node, node), "backend": backend,
                       "applied": backend != "none"})
        if slurm is not None and backend == "slurm":
            row = slurm.get(action["slurm_node"])
            outcome, held = decide(row, DRAIN, action["reason"] or BURNIN_REASON_PREFIX) if row is not None else ("", "")
            if outcome == HELD:
                action.update({"action": "hold", "reason": row.get("reason") or None, "applied": False,
                               "why": f"{held}; kiln's {action['action']} not applied ({action['why']})"})
        actions.append(action)
    return actions


def history_records(summary: Mapping[str, Any], versions: Mapping[str, Any], finished: str
                    ) -> Dict[str, Dict[str, Any]]:
    """One history record per judged node (appended by kiln_baseline.append)."""
    out = {}
    for node, record in (summary.get("nodes") or {}).items():
        pair = next((c for c in record.get("checks") or [] if c.get("id") == PAIR_CHECK), None)
        single = next((c for c in record.get("checks") or [] if c.get("id") == "nccl.single_node.all_reduce"), None)
        values = {"pair": pair.get("value") if pair and pair.get("status") in (PASS, WARN) else None,
                  "single_node": single.get("value") if single and single.get("status") in (PASS, WARN) else None}
        out[node] = kiln_baseline.record(str(summary.get("run_id")), finished, str(summary.get("mode")),
                                         str(record.get("status")), versions.get(node), values)
        fabric = record.get("fabric") if isinstance(record.get("fabric"), Mapping) else None
        if fabric is not None:
            out[node]["fabric"] = fabric_record(record, fabric)
        nvlink = record.get("nvlink") if isinstance(record.get("nvlink"), Mapping) else None
        if nvlink is not None:
            out[node]["nvlink"] = nvlink_record(record, nvlink)
        count = next((c for c in record.get("checks") or [] if c.get("id") == "gpu.count"), None)
        if count and count.get("status") == PASS and kiln_verdict.is_finite(count.get("value")):
            out[node]["gpus"] = int(count["value"])
    return out


def nvlink_record(record: Mapping[str, Any], nvlink: Mapping[str, Any]) -> Dict[str, Any]:
    """A node's history ``nvlink`` entry: the NVLink counter snapshot read by this run (``counters``),
    the next run's baseline, only from a run that passed for the node (PASS/WARN) with nvlink.errors
    PASS. A FAIL or INCOMPLETE run, or counters that grew to a WARN, keep the old baseline
    (``baseline_kept``: why), so growth keeps showing until the counters are reset or it is dealt with."""
    status = next((c.get("status") for c in record.get("checks") or []
                   if isinstance(c, Mapping) and c.get("id") == NVLINK_CHECK), None)
    if record.get("status") not in kiln_baseline.PASSING:
        return {"baseline_kept": f"node {record.get('status')}: a FAIL or INCOMPLETE run never writes an NVLink "
                                 "counter baseline"}
    if status != PASS:
        return {"baseline_kept": f"{NVLINK_CHECK} {status or 'not judged'}: the baseline stays where it was"}
    counters = nvlink.get("counters")
    if not kiln_gpu_state.nvlink_snapshot_ok(counters) or not counters:
        return {"baseline_kept": "no NVLink counter snapshot in this run"}
    return {"counters": dict(counters)}


def nvlink_baseline(records: Any) -> Dict[str, Any]:
    """The NVLink counter baseline in a node's history (kiln_baseline records, oldest first):
    ``{counters, run_id, note}`` of the newest passing record whose ``nvlink.counters`` is a
    well-formed snapshot; counters None when there is none (the run records the first). Never raises."""
    if not isinstance(records, (list, tuple)):
        return {"counters": None, "run_id": None, "note": "no history"}
    for record in reversed(records):
        nvlink = record.get("nvlink") if isinstance(record, Mapping) else None
        if not isinstance(nvlink, Mapping) or "counters" not in nvlink:
            continue
        if record.get("status") not in kiln_baseline.PASSING:
            continue  # a failing run's snapshot is never the next baseline
        if not kiln_gpu_state.nvlink_snapshot_ok(nvlink["counters"]) or not nvlink["counters"]:
            continue
        return {"counters": dict(nvlink["counters"]), "run_id": str(record.get("run_id") or "?")[:60], "note": None}
    return {"counters": None, "run_id": None, "note": "no NVLink counter baseline in the history"}


def nvlink_history(state_dir: Optional[str], nodes: Sequence[str]) -> Dict[str, Dict[str, Any]]:
    """Per node, :func:`nvlink_baseline` of its history under *state_dir* (``{}`` without one). Never raises."""
    if not state_dir:
        return {}
    return {str(node): nvlink_baseline(kiln_baseline.load(state_dir, str(node))) for node in nodes}


def fabric_record(record: Mapping[str, Any], fabric: Mapping[str, Any]) -> Dict[str, Any]:
    """A node's history ``fabric`` entry. The counter baseline (counters and port identity, the read
    after the run's traffic where there is one) only from a run that passed for the node with
    fabric.counters and fabric.counters.during_run PASS: a FAIL or INCOMPLETE run, or counters at a
    warn level, never move the baseline (the next run is judged against the same one). The expected
    ports only from a PASS/WARN (the expectation of the next runs)."""
    status = {c.get("id"): c.get("status") for c in record.get("checks") or [] if isinstance(c, Mapping)}
    passed = record.get("status") in kiln_baseline.PASSING
    why = None
    if not passed:
        why = f"node {record.get('status')}: a FAIL or INCOMPLETE run never writes a counter baseline"
    elif status.get("fabric.counters") != PASS:
        why = f"fabric.counters {status.get('fabric.counters') or 'not judged'}: the baseline stays where it was"
    elif status.get(kiln_burnin_fabric_checks.DURING_RUN_CHECK, PASS) != PASS:
        why = f"fabric.counters.during_run {status.get(kiln_burnin_fabric_checks.DURING_RUN_CHECK)}: the baseline stays"
    out: Dict[str, Any] = {}
    if why is None:
        counters = dict(fabric.get("counters") or {})
        identity = dict(fabric.get("identity") or {})
        counters.update(fabric.get("counters_after") or {})
        identity.update(fabric.get("identity_after") or {})
        out.update(counters=counters, identity=identity)
    else:
        out["baseline_kept"] = why
    if passed:
        out["ports"] = (fabric.get("history") or {}).get("ports") or []
    return out
