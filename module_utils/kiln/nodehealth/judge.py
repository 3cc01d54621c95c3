# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""One kiln-health run judged: the burn-in's passive judges on what the program collected (docs/health.md).

:func:`judge` takes the snapshot ``kiln-health`` collected (GPU facts, kernel log, fabric facts, DCGM,
mounts), the validated configuration, the rules (data/burnin_health.yml, data/burnin_fabric.yml) and
the node's state from its previous runs; it returns the checks of the hook and the state to keep.

Statuses are the burn-in's, except that a check that could not be judged (the burn-in's INCOMPLETE) is
``UNKNOWN`` here: never PASS from a source that was not read.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import verdict as kiln_verdict
from ..burnin import checks as burnin_checks
from ..burnin import fabric_checks
from ..fabric.counters import counter_snapshot
from ..health import dcgm_health, gpu_state

PASS, WARN, FAIL, SKIP, INCOMPLETE = "PASS", "WARN", "FAIL", "SKIP", "INCOMPLETE"
UNKNOWN = "UNKNOWN"
STATUSES = (PASS, WARN, FAIL, UNKNOWN, SKIP)
_ORDER = {SKIP: 0, PASS: 1, WARN: 2, UNKNOWN: 3, FAIL: 4}
MOUNTS_CHECK = "filesystems.mounts"


def worst(statuses: List[str]) -> str:
    """The node's status of one run: its worst judged check; nothing judged is UNKNOWN."""
    judged = [s for s in statuses if s != SKIP]
    return max(judged, key=lambda s: _ORDER[s]) if judged else UNKNOWN


def _as_health(item: Mapping[str, Any]) -> Dict[str, Any]:
    out = dict(item)
    if out.get("status") == INCOMPLETE:
        out["status"] = UNKNOWN
    if out.get("status") not in STATUSES:
        out.update(status=UNKNOWN, detail=f"judge returned status {str(item.get('status'))[:20]!r}: not judged")
    return out


def mounts_check(wanted: List[Mapping[str, Any]], seen: Any) -> Dict[str, Any]:
    """``filesystems.mounts``: every filesystem the site names is mounted (with its type) and answers.

    *seen*: one entry per wanted path ``{path, mounted, fstype, responds, error}`` from the program
    (``mounted``/``responds`` None: could not tell). Nothing named: SKIP.
    """
    if not wanted:
        return kiln_verdict.make_check(MOUNTS_CHECK, SKIP, detail="no filesystem named (node_health_mounts)")
    by_path = {str(m.get("path")): m for m in (seen if isinstance(seen, list) else []) if isinstance(m, Mapping)}
    bad, unknown = [], []
    for want in wanted:
        path = want["path"]
        got = by_path.get(path)
        if got is None or got.get("mounted") is None:
            unknown.append(f"{path}: {str((got or {}).get('error') or 'not read')[:120]}")
        elif not got["mounted"]:
            bad.append(f"{path} not mounted")
        elif want.get("fstype") and got.get("fstype") != want["fstype"]:
            bad.append(f"{path} is {str(got.get('fstype'))[:32]}, expected {want['fstype']}")
        elif got.get("responds") is None:
            unknown.append(f"{path}: {str(got.get('error') or 'did not say whether it answers')[:120]}")
        elif not got["responds"]:
            bad.append(f"{path} does not answer ({str(got.get('error') or 'stat timed out')[:120]})")
    status = FAIL if bad else (INCOMPLETE if unknown else PASS)
    detail = "; ".join(bad + unknown) if bad or unknown else f"{len(wanted)} filesystem(s) mounted and answering"
    return kiln_verdict.make_check(MOUNTS_CHECK, status, detail=detail, metric="mounts_ok",
                                   value=len(wanted) - len(bad) - len(unknown), floor=len(wanted), unit="mounts")


def _gpu_checks(hook: str, snap: Mapping[str, Any], config: Mapping[str, Any], rules: Mapping[str, Any],
                state: Mapping[str, Any]) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    gpu = snap.get("gpu") if isinstance(snap.get("gpu"), Mapping) else {}
    keep: Dict[str, Any] = {}
    expected = burnin_checks.expected_gpu_count(config.get("expected_gpus"), state.get("history_gpus"))
    kernel_log = snap.get("kernel_log")
    if kernel_log is None:  # the burn-in's None means "text given"; here it means nothing was read
        kernel_log = {"readable": False, "problems": ["the kernel log was not read"]}
    out = burnin_checks.passive_checks(gpu, expected, kernel_log=kernel_log)
    smi = bool(gpu.get("driver_loaded")) and gpu.get("source") == "nvidia-smi"
    out += burnin_checks.health_checks(gpu, rules)
    out.append(gpu_state.persistence_check(gpu, rules, smi))
    out.append(gpu_state.fabric_check(gpu, rules, smi))
    nvlink, snapshot = gpu_state.nvlink_errors_check(gpu, state.get("nvlink_errors"), rules, smi)
    out.append(nvlink)
    if smi and snapshot:
        keep["nvlink_errors"] = snapshot
    count = next((c for c in out if c["id"] == "gpu.count"), None)
    if hook == "check" and count and count["status"] == PASS and kiln_verdict.is_finite(count.get("value")):
        keep["history_gpus"] = max(int(count["value"]), int(state.get("history_gpus") or 0))
    dcgm = snap.get("dcgm") if isinstance(snap.get("dcgm"), Mapping) else {}
    out.append(dcgm_health.dcgm_health_check(dcgm.get("run"), bool(dcgm.get("present"))))
    return out, keep


def _fabric_checks(hook: str, snap: Mapping[str, Any], config: Mapping[str, Any], fabric_rules: Mapping[str, Any],
                   state: Mapping[str, Any], previous: Any) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    facts = snap.get("fabric")
    keep: Dict[str, Any] = {}
    gpu = snap.get("gpu") if isinstance(snap.get("gpu"), Mapping) else {}
    gpu_node = bool(gpu.get("pci_gpu_count")) or bool(config.get("expected_gpus"))
    expected = fabric_checks.expected_ports(facts, config.get("fabric_expect"), state.get("fabric_history"),
                                            host=str(config.get("node")))
    out = fabric_checks.passive_fabric_checks(facts, expected, previous, fabric_rules,
                                              gpudirect=config.get("gpudirect"), gpu_node=gpu_node)
    if config.get("gpudirect") is None:
        out = [kiln_verdict.make_check("fabric.gpudirect", SKIP, detail="no GPUDirect plan configured "
                                       "(node_health_gpudirect)") if c["id"] == "fabric.gpudirect" else c for c in out]
    if isinstance(facts, Mapping) and isinstance(facts.get("hcas"), list):
        keep["fabric_counters"] = counter_snapshot(facts)
        statuses = {c["id"]: c["status"] for c in out}
        if hook == "check" and statuses.get("fabric.ports") == PASS and statuses.get("fabric.rate") == PASS \
                and expected.get("ports"):
            keep["fabric_history"] = [{"status": PASS, "run_id": f"kiln-health check at {snap.get('at') or '?'}",
                                       "fabric": fabric_checks.history_fabric(facts, expected)}]
    return out, keep


def _whole(value: Any, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high


def sanitize_state(state: Any) -> Dict[str, Any]:
    """The node's state file as the judge may trust it: every entry of the wrong shape dropped (a corrupt
    or hand-edited file restarts that comparison, it never raises or passes a check)."""
    if not isinstance(state, Mapping):
        return {}
    out: Dict[str, Any] = {}
    if _whole(state.get("history_gpus"), 4096):
        out["history_gpus"] = state["history_gpus"]
    if _whole(state.get("clean_runs"), 10 ** 9):
        out["clean_runs"] = state["clean_runs"]
    if _whole(state.get("kernel_since"), 2 ** 40):
        out["kernel_since"] = state["kernel_since"]
    runs = state.get("unknown_runs")
    if isinstance(runs, Mapping):
        out["unknown_runs"] = {str(k): v for k, v in runs.items() if _whole(v, 10 ** 9)}
    counters = state.get("fabric_counters")
    if isinstance(counters, Mapping) and all(isinstance(v, Mapping) for v in counters.values()):
        out["fabric_counters"] = dict(counters)
    if gpu_state.nvlink_snapshot_ok(state.get("nvlink_errors")):
        out["nvlink_errors"] = state["nvlink_errors"]
    if isinstance(state.get("last"), Mapping):
        out["last"] = dict(state["last"])
    history = state.get("fabric_history")
    if isinstance(history, list) and all(isinstance(r, Mapping) for r in history):
        out["fabric_history"] = list(history)
    return out


def _no_smi_unknown(hook: str, snap: Mapping[str, Any], config: Mapping[str, Any],
                    checks: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """A GPU node whose nvidia-smi was asked and gave nothing: its nvidia-smi checks are UNKNOWN, not SKIP
    (the burn-in's SKIP means "not applicable"; here the source could not be read)."""
    gpu = snap.get("gpu") if isinstance(snap.get("gpu"), Mapping) else {}
    gpu_node = bool(gpu.get("pci_gpu_count")) or bool(config.get("expected_gpus"))
    smi = bool(gpu.get("driver_loaded")) and gpu.get("source") == "nvidia-smi"
    if hook == "prolog" or not config.get("query_smi") or not gpu_node or smi:
        return checks
    why = f"nvidia-smi gave no data: {str(gpu.get('smi_error') or 'not read')[:200]}"
    out = []
    for item in checks:
        if item.get("status") == SKIP and item["id"] not in ("dcgm.health", "fabric.gpudirect", MOUNTS_CHECK) \
                and not item["id"].startswith("fabric."):
            item = dict(item, status=INCOMPLETE, detail=f"{why} ({item.get('detail') or 'skipped'})")
        out.append(item)
    return out


def judge(hook: str, snap: Mapping[str, Any], config: Mapping[str, Any], rules: Mapping[str, Any],
          fabric_rules: Mapping[str, Any], state: Optional[Mapping[str, Any]],
          wanted: Mapping[str, Any], counters_since: Any = None) -> Dict[str, Any]:
    """``{hook, status, checks, keep}`` for one run.

    *wanted*: the catalogue (:func:`kiln.health.catalogue.catalogue`); only checks whose hooks name
    *hook* are returned. *counters_since*: the error counters to compare with (the job's start for the
    epilog; default the previous run's). *keep*: state the next run compares with. Raises
    KilnConfigError only for bad rules; hostile facts give UNKNOWN, never PASS.
    """
    state = sanitize_state(state)
    previous = counters_since if counters_since is not None else state.get("fabric_counters")
    checks, keep = _gpu_checks(hook, snap, config, rules, state)
    more, kept = _fabric_checks(hook, snap, config, fabric_rules, state, previous)
    checks += more
    keep.update(kept)
    checks.append(mounts_check(config.get("mounts") or [], snap.get("mounts")))
    checks = _no_smi_unknown(hook, snap, config, checks)
    selected = [_as_health(c) for c in checks if hook in (wanted.get(c["id"]) or {}).get("hooks", ())]
    missing = [cid for cid, spec in wanted.items() if hook in spec.get("hooks", ())
               and cid not in {c["id"] for c in selected}]
    selected += [dict(kiln_verdict.make_check(cid, SKIP, detail="never ran"), status=UNKNOWN) for cid in missing]
    return {"hook": hook, "status": worst([c["status"] for c in selected]), "checks": selected, "keep": keep}
