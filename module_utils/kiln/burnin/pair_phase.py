# -*- coding: utf-8 -*-
"""Burn-in II: swap mode, the pair phase (who takes part, what Slurm state to work
around, each round's pairs and their verdicts), the fabric key and the pair and baseline
checks of each node.

Standard library only; importable as ``kiln.burnin.pair_phase`` and as
``ansible.module_utils.kiln.burnin.pair_phase`` (library/kiln_burnin_pairs.py).
"""

from __future__ import annotations

import re
import statistics
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import baseline as kiln_baseline
from ..fabric import counters as kiln_fabric_counters
from . import isolate as kiln_isolate
from .. import verdict as kiln_verdict
from .checks import (
    BASELINE_CHECK, FAIL, INCOMPLETE, PAIR_CHECK, PASS, SKIP, WARN, check, nccl_check, pair_band,
)
from ..slurm.node_state import CHANGE, KILN_REASON_PREFIXES, RESUME, decide
from ..slurm.sinfo import DOWN, DRAINED, UNRECOGNISED, condition

MODES = ("quick", "default", "acceptance", "swap")


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
               histories: Mapping[str, Sequence[Mapping[str, Any]]], partners: int) -> Dict[str, Any]:
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
                "history_gpus": {n: history_gpus(histories.get(n) or []) for n in nodes},
                "history_fabric": {n: fabric_history(histories.get(n) or []) for n in nodes}}
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
            "history_gpus": {n: history_gpus(histories.get(n) or []) for n in hosts},
            "history_fabric": {n: fabric_history(histories.get(n) or []) for n in hosts}}


def pair_start(nodes: Sequence[str], mode: str, targets: Sequence[str], partners: Sequence[str],
               histories: Mapping[str, Sequence[Mapping[str, Any]]], versions: Mapping[str, Any],
               slurm: Optional[Mapping[str, Mapping[str, str]]], slurm_names: Optional[Mapping[str, str]],
               window: int, override_operator_drain: bool, band: Any, confirm: Any,
               fabric_ports: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Who takes part in the pair phase, what Slurm state to work around, and round 1.

    *band* and *confirm* (kiln_burnin_pair_band, kiln_burnin_pair_confirm) are checked here and
    travel in the state: every round and the final verdict read them from it (one route).

    *nodes*: the hosts that passed the per-node phases. With *slurm*
    (kiln_sinfo.parse_sinfo of the participants): a down node, or one in a state
    kiln_sinfo does not know, is out (INCOMPLETE). A
    drained swap target is resumed inside the burn-in's maintenance reservation for the test
    when ``kiln_node_state.decide`` says so: its drain is kiln's (``BURNIN:`` or ``UPGRADE:``),
    or a person's under *override_operator_drain* (its exact reason is journalled and put
    back unless it passes); otherwise it is held (INCOMPLETE, "held by operator: <reason>").
    Any other drained node is left out (SKIP). The playbook decides again, from sinfo read
    right before the resume.
    """
    band = pair_band(band)
    if not isinstance(confirm, bool):
        raise kiln_verdict.KilnConfigError(f"kiln_burnin_pair_confirm must be true or false, not {confirm!r}")
    slurm_names = dict(slurm_names or {})
    excluded: Dict[str, Dict[str, str]] = {}
    resume: List[str] = []
    drained_before: Dict[str, str] = {}
    for node in sorted(nodes):
        row = (slurm or {}).get(slurm_names.get(node, node))
        if slurm is None:
            continue
        state = condition(row["state"]) if row is not None else None
        if row is None:
            excluded[node] = {"status": INCOMPLETE, "why": "Slurm does not list this node"}
        elif state == DOWN:
            excluded[node] = {"status": INCOMPLETE, "why": f"{row['state']} in Slurm ({row['reason'] or 'no reason'})"}
        elif state == UNRECOGNISED:
            excluded[node] = {"status": INCOMPLETE, "why": (
                f"{row['state'] or 'no state'} in Slurm ({row['reason'] or 'no reason'}): a state kiln does not know; "
                "not tested (an unknown state is never taken for idle)")}
        elif state == DRAINED:
            drained_before[node] = row["reason"]
            outcome, why = (decide(row, RESUME, operator_reason=row["reason"] if override_operator_drain else None)
                            if mode == "swap" and node in targets else (None, ""))
            if outcome == CHANGE:
                resume.append(node)
            elif mode == "swap" and node in targets:
                excluded[node] = {"status": INCOMPLETE, "why": (
                    f"{why}; not tested -- a person's drain is never "
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
            "known_good": good, "pairs": first, "targets": list(targets), "band": band, "confirm": confirm,
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


def fabric_history(records: Sequence[Mapping[str, Any]], keep: int = 5) -> Dict[str, Any]:
    """What the fabric checks need of a node's history: the newest records that carry a ``fabric``
    entry (for the expected ports of its last PASS) and the counter baseline
    (kiln_fabric_counters.counter_baseline: the snapshot and port GUIDs of the newest run that
    passed; a failing run's counters are never the next baseline)."""
    with_fabric = [r for r in records or [] if isinstance(r, Mapping) and isinstance(r.get("fabric"), Mapping)]
    baseline = kiln_fabric_counters.counter_baseline(with_fabric)
    return {"records": [{"status": r.get("status"), "run_id": r.get("run_id"), "fabric": r["fabric"]}
                        for r in with_fabric[-keep:]],
            "counters": baseline, "counters_run": baseline.get("run_id")}


def pair_records(items: Sequence[Mapping[str, Any]], round_no: int,
                 lost: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """Raw pair runs from the playbook's registered loop results (command or async_status).

    An async job that never finished, or a run killed by ``timeout`` (rc 124),
    is a timeout; the verdict decides FAIL (rows printed) or INCOMPLETE (none).
    *lost*: the nodes the playbook's probe found unreachable after this round;
    each record names those of its own pair whose run failed (``lost``) --
    a node in a pair that succeeded was reachable for it.
    """
    gone = {str(n) for n in lost or []}
    out = []
    for item in items:
        pair = item.get("__pair") or (item.get("__job") or {}).get("__pair")
        if not pair or len(pair) != 2:
            raise kiln_verdict.KilnConfigError(f"pair run without its pair: {sorted(item)}")
        rc = item.get("rc")
        unfinished = "finished" in item and not item.get("finished")
        members = [str(pair[0]), str(pair[1])]
        failed = rc != 0 or unfinished
        out.append({"pair": members, "round": int(round_no), "text": item.get("stdout") or "",
                    "rc": rc, "timed_out": rc == 124 or unfinished,
                    "lost": [m for m in members if m in gone] if failed else []})
    return out


def state_band(state: Mapping[str, Any]) -> Tuple[float, bool]:
    """The pair band and confirmation rule a pair state carries (from :func:`pair_start`)."""
    if not isinstance(state, Mapping) or "band" not in state or not isinstance(state.get("confirm"), bool):
        raise kiln_verdict.KilnConfigError("the pair state carries no band/confirm: it must come from pair_start")
    return pair_band(state["band"]), state["confirm"]


def pair_round(state: Mapping[str, Any], results: Sequence[Mapping[str, Any]], *, mode: str,
               floors: Mapping[str, Any], overrides: Optional[Mapping[str, Any]], sku: str, fabric: str,
               max_rounds: int, round_no: int = 1, targets: Sequence[str] = ()) -> Dict[str, Any]:
    """Judge the pairs measured so far and name the next round's pairs.

    The band and the confirmation rule come from *state* (:func:`pair_start` put them there).

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
                     "text": entry.get("text", ""), "lost": list(entry.get("lost") or [])}
        judged.append(entry)
    band, confirm = state_band(state)
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
                            f"{abs(below):.0%} {'below' if below > 0 else 'above'}; "
                            f"WARN beyond {baseline_band:.0%} below)",
                            metric="busbw_pair", value=round(mine_value, 4), floor=floor, unit="GB/s",
                            baseline=base["value"]))
    return checks
