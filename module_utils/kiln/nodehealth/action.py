# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln-health's drain and resume decision: streaks over runs, then the one drain rule
(kiln.slurm.node_state.decide) applied to the node's Slurm row read just before acting.

A FAIL drains with ``HEALTH: <check>: <detail>``; a check UNKNOWN for ``unknown_drain_after``
consecutive runs drains with ``HEALTH: unknown: <check>: <why>``; a node kiln-health drained is
resumed after ``resume_after_clean`` consecutive clean periodic runs (no FAIL, no UNKNOWN). A
person's drain, and the burn-in's and the upgrade's, are never replaced or lifted.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ..slurm.node_state import CHANGE, DRAIN, HEALTH_REASON_PREFIX, RESUME, decide

REASON_MAX = 200
HEALTH_ONLY = (HEALTH_REASON_PREFIX,)


def streaks(state: Optional[Mapping[str, Any]], result: Mapping[str, Any]) -> Dict[str, Any]:
    """``{unknown_runs: {check: n}, clean_runs: n}`` after this run.

    Only the periodic check counts a clean run (the prolog and epilog run subsets); any hook's FAIL
    or UNKNOWN ends a clean streak. A check's UNKNOWN streak ends when it is judged again.
    """
    state = state if isinstance(state, Mapping) else {}
    before = state.get("unknown_runs") if isinstance(state.get("unknown_runs"), Mapping) else {}
    unknown: Dict[str, int] = {}
    for item in result.get("checks") or []:
        cid = str(item.get("id"))
        old = before.get(cid)
        old = old if isinstance(old, int) and not isinstance(old, bool) and old >= 0 else 0
        if item.get("status") == "UNKNOWN":
            unknown[cid] = old + 1
        elif result.get("hook") != "check" and old:
            unknown[cid] = old  # a subset run judged it; the periodic run decides the streak
    for cid, old in before.items():
        if cid not in {str(c.get("id")) for c in result.get("checks") or []} and isinstance(old, int) and old > 0:
            unknown[str(cid)] = old
    clean = state.get("clean_runs")
    clean = clean if isinstance(clean, int) and not isinstance(clean, bool) and clean >= 0 else 0
    bad = result.get("status") in ("FAIL", "UNKNOWN")
    if bad:
        clean = 0
    elif result.get("hook") == "check":
        clean += 1
    return {"unknown_runs": unknown, "clean_runs": clean}


def _reason(text: str) -> str:
    one_line = " ".join(str(text).split())
    return one_line[:REASON_MAX].rstrip()


def wanted_action(result: Mapping[str, Any], streak: Mapping[str, Any], config: Mapping[str, Any]) -> Dict[str, Any]:
    """What this run asks for: ``{action: drain|resume|none, reason, key, why}`` (before Slurm is read)."""
    checks = list(result.get("checks") or [])
    failed = [c for c in checks if c.get("status") == "FAIL"]
    if failed:
        first = failed[0]
        return {"action": DRAIN, "key": f"{HEALTH_REASON_PREFIX} {first['id']}:",
                "reason": _reason(f"{HEALTH_REASON_PREFIX} {first['id']}: {first.get('detail') or 'FAIL'}"),
                "why": "FAIL: " + ", ".join(str(c["id"]) for c in failed)}
    limit = int(config["unknown_drain_after"])
    long_unknown = [c for c in checks if c.get("status") == "UNKNOWN"
                    and int((streak.get("unknown_runs") or {}).get(c["id"], 0)) >= limit]
    if long_unknown:
        first = long_unknown[0]
        return {"action": DRAIN, "key": f"{HEALTH_REASON_PREFIX} unknown: {first['id']}:",
                "reason": _reason(f"{HEALTH_REASON_PREFIX} unknown: {first['id']}: {first.get('detail') or 'not judged'}"),
                "why": f"UNKNOWN for {limit} consecutive runs: " + ", ".join(str(c["id"]) for c in long_unknown)}
    need = int(config["resume_after_clean"])
    if result.get("hook") == "check" and need > 0 and int(streak.get("clean_runs") or 0) >= need:
        return {"action": RESUME, "key": HEALTH_REASON_PREFIX, "reason": "",
                "why": f"{streak.get('clean_runs')} consecutive clean runs (resume after {need})"}
    return {"action": "none", "key": "", "reason": "", "why": "nothing to do"}


def decide_action(wanted: Mapping[str, Any], row: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The wanted action against the node's Slurm row read just now: ``{apply: bool, outcome, why}``.

    kiln-health acts only on its own drains (``HEALTH:``): a person's, the burn-in's (``BURNIN:``)
    or the upgrade's (``UPGRADE:``) reason is held. A node already drained by kiln-health for the
    same check keeps its reason (no churn as the detail's numbers move).
    """
    action = wanted.get("action")
    if action not in (DRAIN, RESUME):
        return {"apply": False, "outcome": "none", "why": str(wanted.get("why") or "")}
    if action == DRAIN and row is not None and str(row.get("reason") or "").startswith(str(wanted.get("key"))) \
            and "drain" in str(row.get("state") or ""):
        return {"apply": False, "outcome": "unchanged", "why": f"drained for {wanted['key'].rstrip(':')} already"}
    try:
        outcome, why = decide(row, action, wanted.get("reason") or "", HEALTH_REASON_PREFIX if action == RESUME else "",
                              prefixes=HEALTH_ONLY)
    except ValueError as exc:
        return {"apply": False, "outcome": "unknown", "why": str(exc)}
    return {"apply": outcome == CHANGE, "outcome": outcome, "why": why}


def scontrol_argv(node: str, wanted: Mapping[str, Any]) -> List[str]:
    """The scontrol command of an applied decision (argv: nothing passes through a shell)."""
    if wanted.get("action") == DRAIN:
        return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={wanted['reason']}"]
    return ["scontrol", "update", f"NodeName={node}", "State=RESUME"]
