# -*- coding: utf-8 -*-
"""Burn-in per-node checks: passive checks from GPU facts and the kernel log, the tools
preflight, memory health, GPU state (persistence mode, Fabric Manager and fabric registration,
NVLink error growth) and DCGM diag, all-reduce verdicts, and the invariant that a
node's PASS has every check its mode requires (docs/burnin.md, "What PASS means").

Standard library only; importable as ``kiln.burnin.checks`` and as
``ansible.module_utils.kiln.burnin.checks``.
"""

from __future__ import annotations

import re
import statistics
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..health import dcgm as kiln_health_dcgm
from ..health import gpu_state as kiln_gpu_state
from ..health import memory as kiln_health_memory
from ..health import kernel_log as kiln_kernel_log
from ..nccl import parse as kiln_nccl
from .. import verdict as kiln_verdict

PASS, WARN, FAIL, INCOMPLETE, SKIP = "PASS", "WARN", "FAIL", "INCOMPLETE", "SKIP"

#: XIDs that fail a node (GPU or NVLink hardware, memory, fallen off the bus);
#: any other XID is a WARN. Anchors: NVIDIA XID catalog, Azure NHC azure_gpu_xid, Meta GCM.
CRITICAL_XIDS = frozenset({48, 61, 62, 63, 64, 69, 74, 79, 92, 94, 95, 119, 120, 140})
#: Clock event reasons that mean hardware trouble (prefix stripped, as kiln_gpu_facts reports them).
BAD_THROTTLE = frozenset({"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"})
PASSIVE_CHECKS = ("gpu.count", "pcie.link", "nvlink.status", "xid.kernel_log", "clocks.throttle")
_XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),?(.*)$")
DCGM_LEVELS = {"quick": 1, "default": 2, "acceptance": 3}
PAIR_CHECK = "nccl.pair.all_reduce"
BASELINE_CHECK = "baseline.pair_busbw"


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


def xid_check(xid_log: str = "", kernel_log: Any = None) -> Dict[str, Any]:
    """``xid.kernel_log``: critical XIDs FAIL, others WARN, none PASS -- only from a log that was read.

    *kernel_log*: what module kiln_kernel_log read (``{readable, source, since, note, xid_lines,
    problems}``; the playbook's input). A log no source could read is INCOMPLETE: "no XID" is
    never concluded from nothing. Without *kernel_log*, *xid_log* is text already read.
    """
    context = ""
    if kernel_log is not None:
        if not isinstance(kernel_log, Mapping):
            return check("xid.kernel_log", INCOMPLETE, "kernel-log read result is not a mapping: not judged",
                         metric="xids", unit="events")
        span, sources = kiln_kernel_log.describe(kernel_log)
        if not kernel_log.get("readable"):
            return check("xid.kernel_log", INCOMPLETE, f"kernel log unreadable, XIDs {span} unknown: {sources}",
                         metric="xids", unit="events")
        note = kernel_log.get("note")
        context = f" ({span}, {sources}{'; ' + str(note) if note else ''})"
        xid_log = "\n".join(str(line) for line in kernel_log.get("xid_lines") or [])
    xids = parse_xids(xid_log)
    critical = [x for x in xids if x["xid"] in CRITICAL_XIDS]
    status = FAIL if critical else (WARN if xids else PASS)
    detail = ("XIDs since the last run: " + ", ".join(f"{x['xid']} ({x['pci']})" for x in xids)) if xids \
        else "no XID in the kernel log since the last run"
    return check("xid.kernel_log", status, detail + context, metric="xids", value=len(xids), unit="events")


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
                   xid_log: str = "", kernel_log: Any = None) -> List[Dict[str, Any]]:
    """Checks from ansible_facts['kiln_gpu'] (and the kernel log since the last run: xid_check).

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

    checks.append(xid_check(xid_log, kernel_log))

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


def pair_band(value: Any) -> float:
    """The pair band (kiln_burnin_pair_band) as a finite fraction in (0, 1); no default of its own."""
    band = kiln_verdict.finite_number(value, "kiln_burnin_pair_band")
    if not 0.0 < band < 1.0:
        raise kiln_verdict.KilnConfigError(f"kiln_burnin_pair_band must be between 0 and 1, got {band:g}")
    return band


def health_checks(gpu: Optional[Mapping[str, Any]], health: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """Memory health counters (ECC, row remap, retired pages) judged against data/burnin_health.yml."""
    gpu = gpu or {}
    smi = bool(gpu.get("driver_loaded")) and gpu.get("source") == "nvidia-smi"
    return kiln_health_memory.memory_checks(gpu, health, smi)


GPU_STATE_CHECKS = (kiln_gpu_state.CHECK_PERSISTENCE, kiln_gpu_state.CHECK_FABRIC, kiln_gpu_state.CHECK_NVLINK_ERRORS)


def gpu_state_checks(gpu: Optional[Mapping[str, Any]], health: Mapping[str, Any], previous: Any = None,
                     expected_gpus: Optional[int] = None) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """``gpu.persistence_mode``, ``gpu.fabric`` and ``nvlink.errors`` (kiln.health.gpu_state: the judges
    kiln-health calls too) and the NVLink counter snapshot read now. *previous*: the snapshot of the
    node's last passing burn-in (its history record's ``nvlink.counters``); None: first run, the
    baseline is recorded. A node that should have GPUs (*expected_gpus*) and shows none on PCI gets
    the three INCOMPLETE, never SKIP (as passive_checks)."""
    gpu = gpu or {}
    try:
        pci_count = max(int(gpu.get("pci_gpu_count") or 0), 0)
    except (TypeError, ValueError):
        pci_count = 0
    if pci_count == 0 and expected_gpus:
        why = f"no GPU to check: {expected_gpus} expected, 0 on PCI"
        return [check(cid, INCOMPLETE, why) for cid in GPU_STATE_CHECKS], {}
    smi = bool(gpu.get("driver_loaded")) and gpu.get("source") == "nvidia-smi"
    checks = [kiln_gpu_state.persistence_check(gpu, health, smi), kiln_gpu_state.fabric_check(gpu, health, smi)]
    nvlink, snapshot = kiln_gpu_state.nvlink_errors_check(gpu, previous, health, smi)
    checks.append(nvlink)
    return checks, snapshot


def dcgm_diag_check(level: int, result: Optional[Mapping[str, Any]], gpu_node: bool, mode: str,
                    health: Optional[Mapping[str, Any]], artifact: Optional[str] = None) -> Dict[str, Any]:
    """``dcgmi diag -r <level> -j`` judged per test (acceptance requires its stress tests to have run)."""
    return kiln_health_dcgm.dcgm_check(level, result, gpu_node, require_stress=(mode == "acceptance"),
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


def failed_before_pairs(checks: Sequence[Mapping[str, Any]]) -> bool:
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
