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
from typing import Any, Dict, List, Mapping, Optional, Sequence

try:
    from ansible.module_utils import kiln_nccl, kiln_report, kiln_verdict
except ImportError:  # imported as a top-level module (unit tests)
    import kiln_nccl  # type: ignore[no-redef]
    import kiln_report  # type: ignore[no-redef]
    import kiln_verdict  # type: ignore[no-redef]

PASS, WARN, FAIL, INCOMPLETE, SKIP = "PASS", "WARN", "FAIL", "INCOMPLETE", "SKIP"

#: XIDs that fail a node (GPU or NVLink hardware, memory, fallen off the bus);
#: any other XID is a WARN. Anchors: NVIDIA XID catalog, Azure NHC azure_gpu_xid, Meta GCM.
CRITICAL_XIDS = frozenset({48, 61, 62, 63, 64, 69, 74, 79, 92, 94, 95, 119, 120, 140})
#: Clock event reasons that mean hardware trouble (prefix stripped, as kiln_gpu_facts reports them).
BAD_THROTTLE = frozenset({"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"})
PASSIVE_CHECKS = ("gpu.count", "pcie.link", "nvlink.status", "xid.kernel_log", "memory.remapped_rows",
                  "clocks.throttle")
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


def passive_checks(gpu: Optional[Mapping[str, Any]], expected_gpus: Optional[int] = None,
                   xid_log: str = "") -> List[Dict[str, Any]]:
    """Checks from ansible_facts['kiln_gpu'] (and the kernel log since the last run)."""
    gpu = gpu or {}
    pci_count = int(gpu.get("pci_gpu_count") or 0)
    if pci_count == 0 and not expected_gpus:
        return [check(cid, SKIP, "no NVIDIA GPU on this node") for cid in PASSIVE_CHECKS]
    checks = []
    gpus = list(gpu.get("gpus") or [])
    smi = bool(gpu.get("driver_loaded")) and gpu.get("source") == "nvidia-smi"
    no_smi = "no nvidia-smi data (driver not loaded or not queried)"

    expected = int(expected_gpus) if expected_gpus else pci_count
    seen = int(gpu.get("smi_gpu_count") or 0) if smi else pci_count
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

    remap = [g for g in per_gpu("remapped_rows") if g["remapped_rows"].get("supported") is not False
             and (g["remapped_rows"].get("pending") is not None or g["remapped_rows"].get("failure") is not None)]
    if not smi or not remap:
        checks.append(check("memory.remapped_rows", SKIP, no_smi if not smi else "row remapping not reported"))
    else:
        bad = [f"GPU{g.get('index')} " + ("pending" if g["remapped_rows"].get("pending") else "failure")
               for g in remap if g["remapped_rows"].get("pending") or g["remapped_rows"].get("failure")]
        checks.append(check("memory.remapped_rows", FAIL if bad else PASS,
                            ("remap " + ", ".join(bad)) if bad else "no remap pending or failed"))

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


def dcgm_check(level: int, result: Optional[Mapping[str, Any]], gpu_present: bool,
               artifact: Optional[str] = None) -> Dict[str, Any]:
    """``dcgmi diag -r <level>``: rc 0 PASS, a test failure (226, 205) FAIL, no tool/host engine INCOMPLETE."""
    cid = f"dcgm.diag.r{level}"
    if not gpu_present:
        return check(cid, SKIP, "no NVIDIA GPU on this node")
    if not result or not result.get("present"):
        return check(cid, INCOMPLETE, "dcgmi not installed")
    rc = result.get("rc")
    out = (result.get("stdout") or "") + (result.get("stderr") or "")
    if rc == 0:
        return check(cid, PASS, f"dcgmi diag -r {level}: every test passed", artifact=artifact)
    if rc in (226, 205):
        fails = sorted(set(re.findall(r"^\|\s*([A-Za-z][^|]*?)\s*\|\s*Fail", out, re.MULTILINE)))
        return check(cid, FAIL, f"dcgmi diag -r {level} rc {rc}: " + (", ".join(fails) or "a test failed"),
                     artifact=artifact)
    return check(cid, INCOMPLETE, f"dcgmi diag -r {level} rc {rc}: no result (host engine unreachable?)",
                 artifact=artifact)


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


def assemble(nodes: Mapping[str, Mapping[str, Any]], fabric: Sequence[Mapping[str, Any]] = (), *,
             mode: str = "default", floors: Optional[Mapping[str, Any]] = None,
             overrides: Optional[Mapping[str, Any]] = None, results_dir: Optional[str] = None,
             fabric_name: str = "tcp") -> Dict[str, Any]:
    """Per-node checks and fabric checks from the raw data the playbook collected.

    *nodes*: ``{name: {kiln_gpu, gpu_present, expected_gpus, xid_log, dcgm: {present, rc, stdout},
    nccl: {text, rc, timed_out, engine}, sku, excluded: "why"}}`` (every key optional).
    *fabric*: ``[{id, nodes, ranks, text, rc, timed_out, engine, sku, reference}]``.
    Raw outputs are written under *results_dir* when given (artifacts).
    """
    floors = floors if floors is not None else kiln_verdict.load_floors()
    level = DCGM_LEVELS.get(mode, 2)
    out_nodes: Dict[str, Dict[str, Any]] = {}
    for name in sorted(nodes):
        node = nodes[name] or {}
        gpu_present = bool(node.get("gpu_present"))
        checks = []
        if "tools" in node:
            checks.append(tools_check(node["tools"] or {}))
        checks += passive_checks(node.get("kiln_gpu"), node.get("expected_gpus"), node.get("xid_log") or "")
        if "dcgm" in node:
            artifact = None
            if results_dir and (node["dcgm"] or {}).get("stdout"):
                artifact = _write(results_dir, f"{name}/dcgm_r{level}.txt", node["dcgm"]["stdout"])
            checks.append(dcgm_check(level, node["dcgm"], gpu_present, artifact))
        if "nccl" in node:
            run = node["nccl"] or {}
            if not run.get("ran"):
                checks.append(check("nccl.single_node.all_reduce", SKIP,
                                    run.get("why") or "no NVIDIA GPU on this node"))
            else:
                sku = node_sku(floors, node)
                if not sku:
                    raise kiln_verdict.KilnConfigError(f"{name}: cannot map its GPU to a SKU in the floors; set sku")
                spec = kiln_verdict.lookup_floor(floors, sku, "any", "single_node", overrides=overrides)
                artifact = _write(results_dir, f"{name}/nccl_node.txt", run.get("text", "")) if results_dir else None
                checks.append(nccl_check("nccl.single_node.all_reduce", run, spec, artifact))
        if node.get("excluded"):
            checks.append(check("burnin.scope", SKIP, str(node["excluded"])))
        out_nodes[name] = {"checks": checks, **kiln_verdict.aggregate_node(checks)}
        if node.get("sku") or gpu_present:
            out_nodes[name]["gpu_sku"] = node_sku(floors, node)

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
    return {"nodes": out_nodes, "fabric": out_fabric, "passed": passed}


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
           fingerprint: Optional[Mapping[str, Any]] = None, write: bool = True, **extra: Any) -> Dict[str, Any]:
    summary = kiln_report.build_summary(run_id, mode, assembled["nodes"], assembled["fabric"], fingerprint, **extra)
    errors = kiln_report.validate_summary(summary)
    if errors:
        raise ValueError("invalid burn-in summary: " + "; ".join(errors))
    written = kiln_report.write_reports(summary, results_dir) if write else {}
    return {"summary": summary, "markdown": kiln_report.render_markdown(summary), "written": written}
