# -*- coding: utf-8 -*-
"""Burn-in assembly: per-node passive checks from GPU facts, DCGM diag and
all-reduce verdicts, and the run's summary -- the logic behind
library/kiln_burnin.py (which only passes Ansible data in and out).

Standard library only; importable as ``kiln_burnin`` and as
``ansible.module_utils.kiln_burnin``.
"""

from __future__ import annotations

import os
import re
import statistics
from typing import Any, Dict, List, Mapping, Optional, Sequence

try:
    from ansible.module_utils import kiln_baseline, kiln_health, kiln_isolate, kiln_nccl, kiln_report, kiln_verdict
except ImportError:  # imported as a top-level module (unit tests)
    import kiln_baseline  # type: ignore[no-redef]
    import kiln_health  # type: ignore[no-redef]
    import kiln_isolate  # type: ignore[no-redef]
    import kiln_nccl  # type: ignore[no-redef]
    import kiln_report  # type: ignore[no-redef]
    import kiln_verdict  # type: ignore[no-redef]

PASS, WARN, FAIL, INCOMPLETE, SKIP = "PASS", "WARN", "FAIL", "INCOMPLETE", "SKIP"

#: XIDs that fail a node (GPU or NVLink hardware, memory, fallen off the bus);
#: any other XID is a WARN. Anchors: NVIDIA XID catalog, Azure NHC azure_gpu_xid, Meta GCM.
CRITICAL_XIDS = frozenset({48, 61, 62, 63, 64, 69, 74, 79, 92, 94, 95, 119, 120, 140})
#: Clock event reasons that mean hardware trouble (prefix stripped, as kiln_gpu_facts reports them).
BAD_THROTTLE = frozenset({"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"})
PASSIVE_CHECKS = ("gpu.count", "pcie.link", "nvlink.status", "xid.kernel_log", "clocks.throttle")
_XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),?(.*)$")
DCGM_LEVELS = {"quick": 1, "default": 2, "acceptance": 3}


def check(check_id: str, status: str, detail: str = "", **fields: Any) -> Dict[str, Any]:
    return kiln_verdict.make_check(check_id, status, detail=detail, **fields)


def parse_xids(text: str) -> List[Dict[str, Any]]:
    """``NVRM: Xid (PCI:0000:18:00): 79, pid=...`` lines of a kernel log."""
    found = []
    for line in (text or "").splitlines():
        match = _XID_RE.search(line)
        if match:
            found.append({"pci": match.group(1), "xid": int(match.group(2)), "line": line.strip()})
    return found


def expected_gpu_count(inventory: Any = None, history: Any = None) -> Optional[int]:
    """GPUs a node should have, from intent: the inventory's ``kiln_burnin_expected_gpus``
    first, else the most GPUs a passing burn-in of this node ever saw (history).
    None when neither says (then the node's own PCI count is the expectation)."""
    for value in (inventory, history):
        if value is None or value == "" or isinstance(value, bool):
            continue
        try:
            count = int(str(value).strip())
        except (TypeError, ValueError):
            raise kiln_verdict.KilnConfigError(
                f"kiln_burnin_expected_gpus must be a whole number of GPUs, got {str(value)[:40]!r}") from None
        if count < 0 or count > 4096:
            raise kiln_verdict.KilnConfigError(f"kiln_burnin_expected_gpus must be 0-4096, got {count}")
        return count
    return None


def passive_checks(gpu: Optional[Mapping[str, Any]], expected_gpus: Optional[int] = None,
                   xid_log: str = "") -> List[Dict[str, Any]]:
    """Checks from ansible_facts['kiln_gpu'] (and the kernel log since the last run).

    A node with no GPU on PCI is SKIPPED only when no GPU is expected of it
    (inventory or history); a node that should have GPUs and shows none FAILs
    gpu.count, and its other GPU checks are INCOMPLETE, never SKIP.
    """
    gpu = gpu or {}
    try:
        pci_count = max(int(gpu.get("pci_gpu_count") or 0), 0)
    except (TypeError, ValueError):
        pci_count = 0
    if pci_count == 0 and not expected_gpus:
        return [check(cid, SKIP, "no NVIDIA GPU on this node, and none expected") for cid in PASSIVE_CHECKS]
    checks = []
    gpus = list(gpu.get("gpus") or [])
    smi = bool(gpu.get("driver_loaded")) and gpu.get("source") == "nvidia-smi"
    no_smi = "no nvidia-smi data (driver not loaded or not queried)"

    expected = int(expected_gpus) if expected_gpus else pci_count
    seen = int(gpu.get("smi_gpu_count") or 0) if smi else pci_count
    if pci_count == 0:
        checks.append(check("gpu.count", FAIL, f"0 GPUs on PCI, {expected} expected (inventory or the node's "
                            "burn-in history): GPUs lost or fallen off the bus", metric="gpus", value=0,
                            floor=expected, unit="GPUs"))
        checks += [check(cid, INCOMPLETE, "no GPU to check: " + str(expected) + " expected, 0 on PCI")
                   for cid in PASSIVE_CHECKS if cid != "gpu.count"]
        return checks
    status = PASS if seen >= expected and pci_count >= expected else FAIL
    checks.append(check("gpu.count", status, f"{seen} GPUs visible ({'nvidia-smi' if smi else 'PCI'}), "
                        f"{pci_count} on PCI, {expected} expected", metric="gpus", value=seen,
                        floor=expected, unit="GPUs"))

    def per_gpu(key: str) -> List[Mapping[str, Any]]:
        return [g for g in gpus if isinstance(g.get(key), Mapping)]

    # PCIe: width below max fails; a lower generation is normal at idle (down-training), noted only.
    links = [g for g in per_gpu("pcie") if g["pcie"].get("width_max")]
    if not smi or not links:
        checks.append(check("pcie.link", SKIP, no_smi))
    else:
        narrow = [f"GPU{g.get('index')} x{g['pcie'].get('width_current')}/x{g['pcie'].get('width_max')}"
                  for g in links if (g["pcie"].get("width_current") or 0) < g["pcie"]["width_max"]]
        slow = [f"GPU{g.get('index')} gen{g['pcie'].get('gen_current')}/{g['pcie'].get('gen_max')}"
                for g in links if (g["pcie"].get("gen_current") or 0) < (g["pcie"].get("gen_max") or 0)]
        detail = ("width below max: " + ", ".join(narrow)) if narrow else "every link at max width"
        if slow:
            detail += "; below max generation (normal at idle): " + ", ".join(slow)
        checks.append(check("pcie.link", FAIL if narrow else PASS, detail))

    nvl = [g for g in per_gpu("nvlink") if g["nvlink"].get("links")]
    if not smi:
        checks.append(check("nvlink.status", SKIP, no_smi))
    elif not nvl:
        checks.append(check("nvlink.status", SKIP, "no NVLink on this board"))
    else:
        bad = [f"GPU{g.get('index')} {g['nvlink'].get('inactive')}/{g['nvlink']['links']} links inactive"
               for g in nvl if g["nvlink"].get("inactive")]
        checks.append(check("nvlink.status", FAIL if bad else PASS, "; ".join(bad) or "every NVLink active",
                            metric="inactive_links", value=sum(int(g["nvlink"].get("inactive") or 0) for g in nvl),
                            unit="links"))

    xids = parse_xids(xid_log)
    critical = [x for x in xids if x["xid"] in CRITICAL_XIDS]
    xstatus = FAIL if critical else (WARN if xids else PASS)
    xdetail = ("XIDs since the last run: " + ", ".join(f"{x['xid']} ({x['pci']})" for x in xids)) if xids \
        else "no XID in the kernel log since the last run"
    checks.append(check("xid.kernel_log", xstatus, xdetail, metric="xids", value=len(xids), unit="events"))

    if not smi:
        checks.append(check("clocks.throttle", SKIP, no_smi))
    else:
        bad = [f"GPU{g.get('index')} {r}" for g in gpus for r in (g.get("clock_event_reasons_active") or [])
               if r in BAD_THROTTLE]
        checks.append(check("clocks.throttle", FAIL if bad else PASS,
                            ("throttled: " + ", ".join(bad)) if bad else "no hardware or thermal throttling"))
    return checks


def tools_check(tools: Mapping[str, Any]) -> Dict[str, Any]:
    """Preflight: the burn-in tools this node needs (``{tool: path or ""}``; "required" lists the needed ones)."""
    required = list(tools.get("required") or [])
    found = {k: v for k, v in tools.items() if k != "required"}
    missing = [t for t in required if not found.get(t)]
    detail = ", ".join(f"{t}: {found[t] or 'missing'}" for t in sorted(found))
    return check("tools.present", INCOMPLETE if missing else PASS,
                 ("missing " + ", ".join(missing) + "; " if missing else "") + detail)


def nccl_check(check_id: str, run: Mapping[str, Any], floor: Mapping[str, Any],
               artifact: Optional[str] = None) -> Dict[str, Any]:
    """Judge one all-reduce run ``{text, rc, timed_out}`` against a floor from kiln_verdict.lookup_floor."""
    text = run.get("text") or ""
    parsed = kiln_nccl.parse(text) if text.strip() else None
    rc = run.get("rc")
    timed_out = bool(run.get("timed_out")) or rc == 124
    result = kiln_verdict.judge_nccl([{"parsed": parsed, "exit_code": rc, "timed_out": timed_out}], floor,
                                     check_id=check_id, artifact=artifact)
    result["floor_key"] = floor.get("key")
    return result


def _write(results_dir: str, relpath: str, text: str) -> str:
    path = os.path.join(results_dir, relpath)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text or "")
    return relpath


def node_sku(floors: Mapping[str, Any], node: Mapping[str, Any]) -> Optional[str]:
    if node.get("sku"):
        return str(node["sku"])
    gpu = node.get("kiln_gpu") or {}
    names = [node.get("gpu_name")] + [g.get("name") or g.get("model") for g in gpu.get("gpus") or []]
    for name in names + list(gpu.get("models") or []):
        if name:
            sku = kiln_verdict.sku_from_gpu_name(floors, str(name))
            if sku:
                return sku
    return None


def _band(value: Any) -> float:
    """The pair band as a finite fraction in (0, 1) (0.10 when unset)."""
    if value is None:
        return 0.10
    band = kiln_verdict.finite_number(value, "kiln_burnin_pair_band")
    if not 0.0 < band < 1.0:
        raise kiln_verdict.KilnConfigError(f"kiln_burnin_pair_band must be between 0 and 1, got {band:g}")
    return band


def health_checks(gpu: Optional[Mapping[str, Any]], health: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """Memory health counters (ECC, row remap, retired pages) judged against data/burnin_health.yml."""
    gpu = gpu or {}
    smi = bool(gpu.get("driver_loaded")) and gpu.get("source") == "nvidia-smi"
    return kiln_health.memory_checks(gpu, health, smi)


def dcgm_diag_check(level: int, result: Optional[Mapping[str, Any]], gpu_node: bool, mode: str,
                    health: Optional[Mapping[str, Any]], artifact: Optional[str] = None) -> Dict[str, Any]:
    """``dcgmi diag -r <level> -j`` judged per test (acceptance requires its stress tests to have run)."""
    return kiln_health.dcgm_check(level, result, gpu_node, require_stress=(mode == "acceptance"),
                                  artifact=artifact, health=health)


#: Checks every node must have, by what the node is and what the mode runs.
def required_checks(mode: str, gpu_node: bool, engine: str, pair_phase: bool, level: int,
                    swap_target: bool = True) -> List[str]:
    """The check ids a node's PASS needs in *mode* (docs/burnin.md, "What PASS means")."""
    required: List[str] = []
    if gpu_node:
        required += ["gpu.count", "xid.kernel_log", f"dcgm.diag.r{level}"]
        if engine == "nccl-tests":
            required.append("nccl.single_node.all_reduce")
    if pair_phase and swap_target:
        required.append(PAIR_CHECK)
    return required


def _failed_before_pairs(checks: Sequence[Mapping[str, Any]]) -> bool:
    return any(c.get("status") in (FAIL, INCOMPLETE) for c in checks)


def enforce_checks(checks: List[Dict[str, Any]], required: Sequence[str], mode: str) -> List[Dict[str, Any]]:
    """The invariant, per node: every required check present and judged (not SKIP), and no
    PASS/WARN check with a non-finite value or floor. What is missing is added as INCOMPLETE."""
    out = []
    for item in checks:
        item = dict(item)
        for key in ("value", "floor"):
            number = item.get(key)
            if item.get("status") in (PASS, WARN) and number is not None and not kiln_verdict.is_finite(number):
                item["status"] = INCOMPLETE
                item["detail"] = f"{key} {str(number)[:40]} is not a finite number: not judged; " + str(
                    item.get("detail") or "")
        out.append(item)
    have = {c["id"]: c for c in out}
    for cid in required:
        found = have.get(cid)
        if found is None:
            if any(c.get("status") == FAIL for c in out):
                continue  # already failed: the missing later check cannot turn it into PASS
            out.append(check(cid, INCOMPLETE, f"required in {mode} mode but never ran"))
        elif found["status"] == SKIP:
            found["status"] = INCOMPLETE
            found["detail"] = f"required in {mode} mode but skipped: {found.get('detail') or ''}"
    return out


def relative_single_node(nodes: Mapping[str, Dict[str, Any]], baselines: Mapping[str, Any], band: float) -> None:
    """Single-node checks of GPU models without an absolute floor: FAIL more than *band*
    below the median of the same model's nodes in this run, or below the node's own
    baseline; otherwise they stay WARN (no absolute floor exists)."""
    by_sku: Dict[str, List[float]] = {}
    for record in nodes.values():
        for item in record.get("checks") or []:
            if item.get("id") == "nccl.single_node.all_reduce" and item.get("relative_only") \
                    and kiln_verdict.is_finite(item.get("value")) and item.get("status") == WARN:
                by_sku.setdefault(str(record.get("gpu_sku")), []).append(float(item["value"]))
    for name, record in nodes.items():
        changed = False
        for item in record.get("checks") or []:
            if not (item.get("id") == "nccl.single_node.all_reduce" and item.get("relative_only")
                    and item.get("status") == WARN and kiln_verdict.is_finite(item.get("value"))):
                continue
            fleet = by_sku.get(str(record.get("gpu_sku"))) or []
            ref = statistics.median(fleet) if len(fleet) >= 3 else None
            base = (baselines.get(name) or {}).get("value") if isinstance(baselines.get(name), Mapping) else None
            notes = []
            if ref and item["value"] < ref * (1.0 - band):
                notes.append(f"{item['value']:g} is more than {band:.0%} below the fleet median {ref:g}")
            if kiln_verdict.is_finite(base) and base > 0 and item["value"] < float(base) * (1.0 - band):
                notes.append(f"{item['value']:g} is more than {band:.0%} below its own baseline {float(base):g}")
            if notes:
                item["status"] = FAIL
                item["detail"] = "; ".join(notes) + " (no absolute floor for this GPU model)"
                changed = True
            else:
                item["detail"] = (str(item.get("detail") or "") + f"; fleet median {ref:g}" if ref else
                                  str(item.get("detail") or "") + "; fewer than 3 nodes of this model to compare")
        if changed:
            record.update(kiln_verdict.aggregate_node(record["checks"]))


def assemble(nodes: Mapping[str, Mapping[str, Any]], fabric: Sequence[Mapping[str, Any]] = (), *,
             mode: str = "default", floors: Optional[Mapping[str, Any]] = None,
             overrides: Optional[Mapping[str, Any]] = None, results_dir: Optional[str] = None,
             fabric_name: str = "tcp", pairs: Optional[Mapping[str, Any]] = None,
             baseline_band: float = 0.10, expected: Optional[Sequence[str]] = None,
             health: Optional[Mapping[str, Any]] = None, final: bool = True) -> Dict[str, Any]:
    """Per-node checks and fabric checks from the raw data the playbook collected.

    *nodes*: ``{name: {kiln_gpu, gpu_present, expected_gpus, history_gpus, engine, xid_log,
    dcgm: {present, rc, stdout}, nccl: {text, rc, timed_out, engine}, sku, excluded: "why"}}``
    (every key optional).
    *fabric*: ``[{id, nodes, ranks, text, rc, timed_out, engine, sku, reference}]``.
    *pairs*: the pair phase (``{results, nodes, baselines, excluded, confirm, band}`` from
    pair_start/pair_round); adds each node's pair and baseline checks.
    *expected*: every node the inventory's burn-in group names for this run;
    one that sent no data (unreachable, failed before preflight) is INCOMPLETE.
    *final*: the run's verdict (every check the mode requires must be there);
    False between phases (passive, active), where later checks are still to come.
    Raw outputs are written under *results_dir* when given (artifacts).
    """
    pairs = dict(pairs or {})
    pair_results = list(pairs.get("results") or [])
    pair_outcomes: Dict[str, Any] = {}
    band = _band(pairs.get("band"))
    if pair_results or pairs.get("participants"):
        pair_outcomes = kiln_isolate.finish(pairs.get("participants") or [], pair_results,
                                            confirm=bool(pairs.get("confirm", True)), band=band)
    pair_artifacts: Dict[str, str] = {}
    for entry in pair_results:
        if results_dir:
            rel = _write(results_dir, f"pairs/r{entry.get('round')}-{entry['pair'][0]}-{entry['pair'][1]}.txt",
                         entry.get("text") or "")
            for member in entry["pair"]:
                pair_artifacts.setdefault(member, os.path.dirname(rel) + "/")
    floors = floors if floors is not None else kiln_verdict.load_floors()
    level = DCGM_LEVELS.get(mode, 2)
    health = health if health is not None else kiln_health.load_health()
    nodes = {str(k): (v if isinstance(v, Mapping) else {}) for k, v in (nodes or {}).items()}
    expected_nodes = sorted({str(n) for n in (expected or [])} | set(nodes))
    out_nodes: Dict[str, Dict[str, Any]] = {}
    pair_phase = mode in kiln_isolate.MODES and len(expected_nodes) > 1
    for name in expected_nodes:
        if name not in nodes:
            checks = [check("burnin.reached", INCOMPLETE, "no burn-in data from this node: unreachable, or it "
                            "failed before the preflight finished (see the play output); an expected node is "
                            "never left out of the verdict")]
            out_nodes[name] = {"checks": checks, **kiln_verdict.aggregate_node(checks)}
            continue
        node = nodes[name]
        gpu_present = bool(node.get("gpu_present"))
        want_gpus = expected_gpu_count(node.get("expected_gpus"), node.get("history_gpus"))
        gpu_node = gpu_present or bool(want_gpus)
        engine = node.get("engine") or ("nccl-tests" if gpu_node else "cpu")
        checks = []
        if "tools" in node:
            checks.append(tools_check(node["tools"] or {}))
        checks += passive_checks(node.get("kiln_gpu"), want_gpus, node.get("xid_log") or "")
        if gpu_node:
            checks += health_checks(node.get("kiln_gpu"), health)
        if "dcgm" in node:
            artifact = None
            if results_dir and (node["dcgm"] or {}).get("stdout"):
                artifact = _write(results_dir, f"{name}/dcgm_r{level}.txt", node["dcgm"]["stdout"])
            checks.append(dcgm_diag_check(level, node["dcgm"], gpu_node, mode, health, artifact))
        if "nccl" in node:
            run = node["nccl"] or {}
            if not run.get("ran"):
                why = run.get("why") or "no NVIDIA GPU on this node"
                wanted = gpu_node and engine == "nccl-tests" and not node.get("excluded")
                checks.append(check("nccl.single_node.all_reduce", INCOMPLETE if wanted else SKIP, why))
            elif not gpu_present:
                checks.append(check("nccl.single_node.all_reduce", INCOMPLETE,
                                    "contradictory: an all-reduce result from a node with no GPU on PCI; not judged"))
            else:
                sku = node_sku(floors, node)
                if not sku:
                    raise kiln_verdict.KilnConfigError(
                        f"{name}: cannot map its GPU ({node.get('gpu_name') or 'unknown model'}) to a SKU in "
                        "data/burnin_floors.yml; set kiln_burnin_sku for this host or add the model")
                spec = kiln_verdict.lookup_floor(floors, sku, "any", "single_node", overrides=overrides)
                artifact = _write(results_dir, f"{name}/nccl_node.txt", run.get("text", "")) if results_dir else None
                checks.append(nccl_check("nccl.single_node.all_reduce", run, spec, artifact))
        if node.get("excluded"):
            checks.append(check("burnin.scope", SKIP, str(node["excluded"])))
        if name in (pairs.get("excluded") or {}):
            out = pairs["excluded"][name]
            checks.append(check("burnin.scope", out.get("status") or SKIP, out.get("why") or "left out"))
        elif name in pair_outcomes and pair_outcomes[name]["state"] != kiln_isolate.UNTESTED:
            checks += pair_checks(name, pair_outcomes[name], pair_results,
                                  (pairs.get("baselines") or {}).get(name), baseline_band,
                                  pair_artifacts.get(name))
        required = required_checks(mode, gpu_node, engine, pair_phase and not _failed_before_pairs(checks),
                                   level, swap_target=name in (pairs.get("targets") or []) or mode != "swap")
        checks = enforce_checks(checks, required if final else [], mode)
        out_nodes[name] = {"checks": checks, **kiln_verdict.aggregate_node(checks)}
        if node.get("sku") or gpu_node:
            out_nodes[name]["gpu_sku"] = node_sku(floors, node)
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


def iperf_reference(results: Sequence[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """Lowest iperf3 rate (Gbit/s) of the node pairs: the raw link the all-reduce is compared with."""
    rates = [r for r in results if r.get("gbps")]
    if not rates:
        return None
    low = min(rates, key=lambda r: r["gbps"])
    return {"metric": "iperf3", "value": round(float(low["gbps"]), 3), "unit": "Gbit/s",
            "pair": f"{low.get('client')}->{low.get('server')}",
            "pairs": [{"pair": f"{r.get('client')}->{r.get('server')}", "gbps": round(float(r["gbps"]), 3)}
                      for r in rates]}


def report(run_id: str, mode: str, assembled: Mapping[str, Any], results_dir: str,
           fingerprint: Optional[Mapping[str, Any]] = None, write: bool = True,
           actions: Optional[Mapping[str, Any]] = None, state_dir: Optional[str] = None,
           node_versions: Optional[Mapping[str, Any]] = None, **extra: Any) -> Dict[str, Any]:
    """Build, validate and (with *write*) write the summary; plan the scheduler
    actions (*actions*: ``{backend, drained_before, resumed, slurm_names}``) and
    append each node's history record under *state_dir*."""
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
                               bool(actions.get("override_operator_drain")))
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


# ---------------------------------------------------------------------------
# Swap mode, pair phase, baselines and actions (burn-in II)
# ---------------------------------------------------------------------------

#: A drain reason that starts with this was set by the burn-in (and only those are resumed).
REASON_PREFIX = "BURNIN:"
MODES = ("quick", "default", "acceptance", "swap")
PAIR_CHECK = "nccl.pair.all_reduce"
BASELINE_CHECK = "baseline.pair_busbw"


def parse_sinfo(lines: Sequence[str]) -> Dict[str, Dict[str, str]]:
    """``sinfo --noheader --Node --format '%N|%T|%E'`` -> ``{node: {state, reason}}``."""
    out: Dict[str, Dict[str, str]] = {}
    for line in lines or []:
        parts = str(line).split("|", 2)
        if len(parts) == 3 and parts[0].strip():
            reason = parts[2].strip()
            out.setdefault(parts[0].strip(), {"state": parts[1].strip().lower(),
                                               "reason": "" if reason == "none" else reason})
    return out


def _drained(state: str) -> bool:
    return bool(re.search(r"drain|fail", state or ""))


def _down(state: str) -> bool:
    return bool(re.search(r"down|not_responding|unknown|future|power", state or ""))


def swap_targets(value: Any, nodes: Sequence[str]) -> List[str]:
    """kiln_burnin_swap_nodes as a list (comma string or list), each an inventory host."""
    if value is None or value == "":
        return []
    names = [v.strip() for v in (value.split(",") if isinstance(value, str) else value) if str(v).strip()]
    unknown = [n for n in names if n not in nodes]
    if unknown:
        raise kiln_verdict.KilnConfigError(
            f"kiln_burnin_swap_nodes names {', '.join(unknown)}, not in kiln_burnin_targets "
            f"({len(nodes)} hosts); use inventory host names of the nodes that were repaired")
    return sorted(set(names))


def pair_scope(nodes: Sequence[str], mode: str, swap_nodes: Any,
               histories: Mapping[str, Sequence[Mapping[str, Any]]], partners: int = 4) -> Dict[str, Any]:
    """The hosts a run touches. swap: the named nodes plus up to *partners*
    known-good nodes (last burn-in passed, with a pair result); else every node."""
    if mode not in MODES:
        raise kiln_verdict.KilnConfigError(f"kiln_burnin_mode must be one of {', '.join(MODES)}, not {mode!r}")
    nodes = sorted(nodes)
    if mode != "swap":
        if swap_nodes:
            raise kiln_verdict.KilnConfigError(
                "kiln_burnin_swap_nodes is set but kiln_burnin_mode is not swap; add -e kiln_burnin_mode=swap")
        return {"hosts": nodes, "targets": nodes, "partners": [], "notes": [],
                "history_gpus": {n: history_gpus(histories.get(n) or []) for n in nodes}}
    targets = swap_targets(swap_nodes, nodes)
    if not targets:
        raise kiln_verdict.KilnConfigError(
            "kiln_burnin_mode=swap needs kiln_burnin_swap_nodes: the node(s) whose part was swapped, "
            "e.g. -e kiln_burnin_swap_nodes=gpu07")
    good = [n for n in kiln_baseline.known_good({n: histories.get(n) or [] for n in nodes}, test="pair")
            if n not in targets]
    notes = []
    chosen = good[: max(int(partners), 1)]
    if len(chosen) < 2:
        extra = [n for n in nodes if n not in targets and n not in chosen][: max(int(partners), 2) - len(chosen)]
        if extra:
            notes.append("fewer than 2 known-good partners in the burn-in history; also pairing with "
                         + ", ".join(extra) + " (not proven by an earlier burn-in)")
        chosen += extra
    hosts = sorted(set(targets) | set(chosen))
    return {"hosts": hosts, "targets": targets, "partners": chosen, "known_good": good, "notes": notes,
            "history_gpus": {n: history_gpus(histories.get(n) or []) for n in hosts}}


def pair_start(nodes: Sequence[str], mode: str, targets: Sequence[str], partners: Sequence[str],
               histories: Mapping[str, Sequence[Mapping[str, Any]]], versions: Mapping[str, Any],
               slurm: Optional[Mapping[str, Mapping[str, str]]] = None,
               slurm_names: Optional[Mapping[str, str]] = None, window: int = 5,
               override_operator_drain: bool = False,
               fabric_ports: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Who takes part in the pair phase, what Slurm state to work around, and round 1.

    *nodes*: the hosts that passed the per-node phases. With *slurm*
    (parse_sinfo of the participants): a down node is out (INCOMPLETE). A
    drained swap target whose drain a burn-in set (``BURNIN:``) is resumed
    inside the burn-in's maintenance reservation for the test; one a person
    drained is held (INCOMPLETE, "held by operator: <reason>") unless
    *override_operator_drain*. Any other drained node is left out (SKIP).
    """
    slurm_names = dict(slurm_names or {})
    excluded: Dict[str, Dict[str, str]] = {}
    resume: List[str] = []
    drained_before: Dict[str, str] = {}
    for node in sorted(nodes):
        row = (slurm or {}).get(slurm_names.get(node, node))
        if slurm is None:
            continue
        if row is None:
            excluded[node] = {"status": INCOMPLETE, "why": "Slurm does not list this node"}
        elif _down(row["state"]):
            excluded[node] = {"status": INCOMPLETE, "why": f"{row['state']} in Slurm ({row['reason'] or 'no reason'})"}
        elif _drained(row["state"]):
            drained_before[node] = row["reason"]
            by_person = not str(row["reason"]).startswith(REASON_PREFIX)
            if mode == "swap" and node in targets and (not by_person or override_operator_drain):
                resume.append(node)
            elif mode == "swap" and node in targets:
                excluded[node] = {"status": INCOMPLETE, "why": (
                    f"held by operator: {row['reason'] or 'no reason'}; not tested -- a person's drain is never "
                    f"lifted by kiln; resume it yourself, or re-run with -e kiln_burnin_override_operator_drain=true "
                    f"to test it (its drain is restored unless it passes)")}
            else:
                excluded[node] = {"status": SKIP, "why": (
                    f"drained in Slurm ({row['reason'] or 'no reason'}): not tested; after the repair run "
                    f"kiln_burnin_mode=swap kiln_burnin_swap_nodes={node}")}
    participants = [n for n in sorted(nodes) if n not in excluded]
    fingerprints = {n: kiln_baseline.fingerprint_id(versions.get(n)) for n in participants}
    baselines = {n: kiln_baseline.baseline(histories.get(n) or [], "pair", fingerprints[n], window)
                 for n in participants}
    single = {n: kiln_baseline.baseline(histories.get(n) or [], "single_node", fingerprints[n], window)
              for n in participants}
    good = [p for p in partners if p in participants]
    if mode == "swap":
        first = kiln_isolate.first_round(participants, "swap", [t for t in targets if t in participants], good)
    else:
        first = kiln_isolate.first_round(participants, mode)
    return {"participants": participants, "excluded": excluded, "resume": resume,
            "drained_before": drained_before, "baselines": baselines, "single_baselines": single,
            "known_good": good, "pairs": first, "targets": list(targets),
            "fabric_key": fabric_key(fabric_ports or {})["key"], "fabric_why": fabric_key(fabric_ports or {})["why"]}


#: Port rate (Gb/s, as /sys/class/infiniband/*/ports/*/rate reports it) -> InfiniBand generation.
IB_RATES = ((800, "xdr"), (400, "ndr"), (200, "hdr"), (100, "edr"))


def fabric_key(ports: Mapping[str, Any]) -> Dict[str, Any]:
    """The floors' fabric key from the nodes' RDMA ports (``{node: [{port, link_layer, state, rate}]}``).

    Every node with an ACTIVE InfiniBand port -> ``ib_<gen>`` of the slowest
    node's fastest port; every node with an ACTIVE Ethernet (RoCE) port ->
    ``roce<rate>``; anything else (no port, a node without one, mixed link
    layers) -> ``tcp``, the socket transport NCCL falls back to.
    """
    best: Dict[str, Any] = {}
    for node, node_ports in (ports or {}).items():
        active = [p for p in node_ports or [] if isinstance(p, Mapping) and "ACTIVE" in str(p.get("state")).upper()]
        rates = []
        for port in active:
            match = re.match(r"\s*(\d+(?:\.\d+)?)", str(port.get("rate") or ""))
            if match:
                rates.append((str(port.get("link_layer") or ""), float(match.group(1))))
        best[node] = max(rates, key=lambda r: r[1]) if rates else None
    if not best or any(v is None for v in best.values()):
        return {"key": "tcp", "why": "no active RDMA port on " + (", ".join(
            sorted(n for n, v in best.items() if v is None)) or "any node")}
    layers = {v[0] for v in best.values()}
    slowest = min(v[1] for v in best.values())
    if layers == {"InfiniBand"}:
        gen = next((name for rate, name in IB_RATES if slowest >= rate), None)
        if gen:
            return {"key": f"ib_{gen}", "why": f"InfiniBand on every node, slowest port {slowest:g} Gb/s"}
        return {"key": "tcp", "why": f"InfiniBand at {slowest:g} Gb/s has no floors"}
    if layers == {"Ethernet"}:
        return {"key": f"roce{int(slowest)}", "why": f"RoCE on every node, slowest port {slowest:g} Gb/s"}
    return {"key": "tcp", "why": "mixed link layers " + ", ".join(sorted(layers))}


def history_gpus(records: Sequence[Mapping[str, Any]]) -> Optional[int]:
    """Most GPUs a passing burn-in of the node recorded (None when no record has a count)."""
    counts = []
    for record in records or []:
        value = record.get("gpus") if isinstance(record, Mapping) else None
        if record.get("status") in kiln_baseline.PASSING and isinstance(value, int) \
                and not isinstance(value, bool) and 0 < value <= 4096:
            counts.append(value)
    return max(counts) if counts else None


def pair_records(items: Sequence[Mapping[str, Any]], round_no: int) -> List[Dict[str, Any]]:
    """Raw pair runs from the playbook's registered loop results (command or async_status).

    An async job that never finished, or a run killed by ``timeout`` (rc 124),
    is a timeout; the verdict decides FAIL (rows printed) or INCOMPLETE (none).
    """
    out = []
    for item in items:
        pair = item.get("__pair") or (item.get("__job") or {}).get("__pair")
        if not pair or len(pair) != 2:
            raise kiln_verdict.KilnConfigError(f"pair run without its pair: {sorted(item)}")
        rc = item.get("rc")
        unfinished = "finished" in item and not item.get("finished")
        out.append({"pair": [str(pair[0]), str(pair[1])], "round": int(round_no), "text": item.get("stdout") or "",
                    "rc": rc, "timed_out": rc == 124 or unfinished})
    return out


def pair_round(state: Mapping[str, Any], results: Sequence[Mapping[str, Any]], *, mode: str,
               floors: Mapping[str, Any], overrides: Optional[Mapping[str, Any]], sku: str, fabric: str,
               band: float = 0.10, confirm: bool = True, round_no: int = 1, max_rounds: int = 4,
               targets: Sequence[str] = ()) -> Dict[str, Any]:
    """Judge the pairs measured so far and name the next round's pairs.

    *results*: ``[{pair, round, text, rc, timed_out[, verdict, value]}]``;
    raw ones are judged against the two-node floor (kiln_verdict), then every
    pair against the run's reference (kiln_isolate.rejudge).
    """
    spec = kiln_verdict.lookup_floor(floors, sku, fabric, "two_node_ring", overrides=overrides)
    judged: List[Dict[str, Any]] = []
    for raw in results:
        entry = dict(raw)
        if "verdict" not in entry:
            verdict = nccl_check(PAIR_CHECK, entry, spec)
            entry = {"pair": list(entry["pair"]), "round": entry.get("round"), "verdict": verdict["status"],
                     "value": verdict.get("value"), "detail": verdict.get("detail"), "rc": entry.get("rc"),
                     "floor": verdict.get("floor"), "series": verdict.get("series"),
                     "text": entry.get("text", "")}
        judged.append(entry)
    band = _band(band)
    base = {n: (b or {}).get("value") for n, b in (state.get("baselines") or {}).items()}
    kiln_isolate.rejudge(judged, base, band)
    participants = list(state.get("participants") or [])
    subjects = list(targets) if mode == "swap" else participants
    following: List[Any] = []
    if round_no < max_rounds:
        following = kiln_isolate.next_round(participants, judged, state.get("known_good") or [],
                                            subjects, confirm=confirm)
    states = (kiln_isolate.classify(participants, judged, confirm=confirm) if following else
              kiln_isolate.finish(participants, judged, confirm=confirm, band=band))
    return {"results": judged, "pairs": [list(p) for p in following], "nodes": states,
            "noise": kiln_isolate.noise(judged, band, [n for n, o in states.items()
                                                      if o.get("state") == kiln_isolate.BLAMED])}


def pair_checks(node: str, outcome: Mapping[str, Any], results: Sequence[Mapping[str, Any]],
                baseline: Optional[Mapping[str, Any]], baseline_band: float,
                artifact: Optional[str] = None) -> List[Dict[str, Any]]:
    """The node's pair check (isolation outcome) and baseline check."""
    mine = [r for r in results if node in r["pair"]]

    def describe(r: Mapping[str, Any]) -> str:
        partner = r["pair"][1] if r["pair"][0] == node else r["pair"][0]
        value = "no result" if r.get("value") is None else f"{r['value']:g} GB/s"
        return f"r{r.get('round')} {partner}: {value} {r.get('status')}"

    passing = [float(r["value"]) for r in mine if r.get("status") == kiln_isolate.PAIR_PASS]
    failing = [float(r["value"]) for r in mine if r.get("value") is not None
               and r.get("status") in (kiln_isolate.PAIR_SLOW, kiln_isolate.PAIR_FAIL, kiln_isolate.PAIR_MARGINAL)]
    state = outcome.get("state")
    value = statistics.median(passing) if passing else (statistics.median(failing) if failing else None)
    refs = [r["reference"]["value"] for r in mine if r.get("reference")]
    floor = next((r.get("floor") for r in mine if r.get("floor")), None)
    pairs_text = "; ".join(describe(r) for r in mine)
    status = {kiln_isolate.CLEARED: PASS, kiln_isolate.BLAMED: FAIL, kiln_isolate.INCONSISTENT: WARN}.get(
        state, INCOMPLETE)
    lead = {
        kiln_isolate.CLEARED: ("passed with " + ", ".join(outcome.get("passed_with") or [])
                               if outcome.get("passed_with") else
                               "failed only with blamed " + ", ".join(outcome.get("explained_by") or [])),
        kiln_isolate.BLAMED: "blamed: failed with " + ", ".join(outcome.get("failed_with") or []),
        kiln_isolate.INCONSISTENT: "inconsistent: " + str(outcome.get("why") or ""),
    }.get(state, outcome.get("why") or "no result with two partners")
    checks = [check(PAIR_CHECK, status, f"{lead} ({pairs_text})", metric="busbw_pair", unit="GB/s",
                    value=round(value, 4) if value is not None else None, floor=floor,
                    reference=round(statistics.median(refs), 4) if refs else None, artifact=artifact,
                    partners=[r["pair"][1] if r["pair"][0] == node else r["pair"][0] for r in mine])]
    base = dict(baseline or {})
    if status not in (PASS, WARN) or not passing:
        checks.append(check(BASELINE_CHECK, SKIP, "no passing pair result to compare"))
    elif base.get("value") is None:
        checks.append(check(BASELINE_CHECK, SKIP, base.get("note") or "no baseline yet: this run creates it",
                            value=round(statistics.median(passing), 4), unit="GB/s", metric="busbw_pair"))
    else:
        mine_value = statistics.median(passing)
        limit = float(base["value"]) * (1.0 - baseline_band)
        below = 1.0 - mine_value / float(base["value"])
        checks.append(check(BASELINE_CHECK, WARN if mine_value < limit else PASS,
                            f"{mine_value:g} GB/s vs its baseline {base['value']:g} ({base.get('runs')} runs; "
                            f"{below:+.0%} below; WARN beyond {baseline_band:.0%})".replace("+-", "-"),
                            metric="busbw_pair", value=round(mine_value, 4), floor=floor, unit="GB/s",
                            baseline=base["value"]))
    return checks


def plan_actions(nodes: Mapping[str, Mapping[str, Any]], mode: str, drained_before: Mapping[str, str],
                 resumed: Sequence[str], slurm_names: Optional[Mapping[str, str]] = None,
                 backend: str = "slurm", override_operator_drain: bool = False) -> List[Dict[str, Any]]:
    """What the burn-in does to each judged node in the scheduler.

    FAIL: drain with ``BURNIN: <failed checks>`` -- except a node a person
    drained, whose drain is restored untouched. A node the run resumed for the
    test (swap target that was drained): PASS/WARN in swap mode with a
    burn-in drain stays resumed (a person's drain only with
    *override_operator_drain*, which is what let the run test it); anything
    else gets its old drain back.
    Backends: ``slurm`` (scontrol), ``none`` (report only); a Kubernetes
    cordon/taint backend plugs in here.
    """
    if backend not in ("slurm", "none"):
        raise kiln_verdict.KilnConfigError(f"kiln_burnin_actions must be slurm or none, not {backend!r}")
    names = dict(slurm_names or {})
    actions: List[Dict[str, Any]] = []
    for node in sorted(nodes):
        record = nodes[node]
        status = record.get("status")
        before = drained_before.get(node)
        by_person = before is not None and not before.startswith(REASON_PREFIX)
        failed = [c["id"] for c in record.get("checks") or [] if c.get("status") == FAIL]
        if status == FAIL and not by_person:
            first = next((c for c in record.get("checks") or [] if c.get("status") == FAIL), {})
            reason = f"{REASON_PREFIX} {', '.join(failed)}: {first.get('detail') or ''}"
            action = {"action": "drain", "reason": reason[:200].rstrip(),
                      "why": "failed " + ", ".join(failed)}
        elif node in resumed and mode == "swap" and status in (PASS, WARN) and (
                not by_person or override_operator_drain):
            action = {"action": "resume", "reason": None,
                      "why": f"passed in swap mode; drained before ({before})"
                      + ("; a person's drain, lifted by kiln_burnin_override_operator_drain" if by_person else "")}
        elif node in resumed or (status == FAIL and by_person):
            action = {"action": "restore", "reason": before,
                      "why": ("drained by a person: kiln never resumes it" if by_person else
                              f"{status} in {mode} mode: a burn-in drain is lifted only by a passing swap run")
                      + (f"; failed {', '.join(failed)}" if failed else "")}
        else:
            continue
        action.update({"node": node, "slurm_node": names.get(node, node), "backend": backend,
                       "applied": backend != "none"})
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
        count = next((c for c in record.get("checks") or [] if c.get("id") == "gpu.count"), None)
        if count and count.get("status") == PASS and kiln_verdict.is_finite(count.get("value")):
            out[node]["gpus"] = int(count["value"])
    return out
