# -*- coding: utf-8 -*-
"""Bad-node isolation by 2-node all-reduce pairs -- the pair phase of the burn-in.

Pure functions, standard library only; importable as ``kiln.burnin.isolate`` and as
``ansible.module_utils.kiln.burnin.isolate``. The burn-in playbook and the scale
simulation (bench/isolation_sim.py) run the same code.

A full-fabric all-reduce that comes out slow says that something is wrong,
not what. The pair phase finds the node:

* Round 1 pairs the nodes. ``swap`` mode pairs every target with a distinct
  known-good partner (a node whose last burn-in passed); ``default`` and
  ``acceptance`` pair every node once (node *i* with node *i + N/2* of the
  sorted list, so each pair crosses the list's halves), all pairs at once.
* A pair is judged against the floor and against a reference: the median of
  the other pairs of the same run (the fleet), with the stored baselines of
  the pair's two nodes added as samples (they decide small runs, where two
  pairs alone could not outvote each other). A pair below the reference by
  more than *band* is SLOW; SLOW and FAIL both count against both nodes. A
  pair between half the band and the band is MARGINAL: it neither clears nor
  condemns, both nodes get another partner (a bad node's lucky run cannot
  clear it, a healthy pair's unlucky run costs one more pair).
* With p partners it passed with and f partners it failed with, a node is
  CLEARED when p > f (its earlier failure was its partner's), or when every
  failure is with a node that ends blamed (explained away). A node that is
  neither is a suspect: the next round pairs it with a cleared node it has
  not met (suspects pair among themselves when no cleared node is left).
  A node is blamed only when it failed with two different partners -- with
  *confirm* (default) with a third as well: f >= 2 and f - p >= 3. (A node
  that fails alone, in a per-node check, never reaches the pair phase.)
* A node whose pairs never produced a result (launch error, timeout before
  any row, node gone) is INCOMPLETE after two partners, never PASS. A node
  found unreachable after a pair that failed (the result's ``lost`` list,
  from the playbook's reachability probe) is INCOMPLETE at once -- whatever
  it passed before, it is gone now -- and never paired again, so a dead node
  costs one pair timeout, not one per round; its partner gets another. Nodes
  still undecided when the rounds run out are INCONSISTENT (WARN: both
  passes and failures, or only MARGINAL pairs) or INCOMPLETE.

Statuses of a pair: PASS, MARGINAL, SLOW, FAIL (integrity, exit, floor), INCOMPLETE.
Statuses of a node: PASS (cleared), FAIL (blamed), WARN (inconsistent),
INCOMPLETE (no result with two partners, or no partner left), UNTESTED.
"""

from __future__ import annotations

import bisect
import math
import statistics
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

PAIR_PASS, PAIR_MARGINAL, PAIR_SLOW, PAIR_FAIL, PAIR_INCOMPLETE = "PASS", "MARGINAL", "SLOW", "FAIL", "INCOMPLETE"
CLEARED, BLAMED, INCONSISTENT, INCOMPLETE, SUSPECT, UNTESTED = (
    "CLEARED", "BLAMED", "INCONSISTENT", "INCOMPLETE", "SUSPECT", "UNTESTED")
#: Modes with a pair phase; ``quick`` has none (first_round returns no pair).
MODES = ("swap", "default", "acceptance")
ALL_MODES = ("quick",) + MODES

Pair = Tuple[str, str]


def first_round(nodes: Sequence[str], mode: str, targets: Sequence[str] = (),
                known_good: Iterable[str] = ()) -> List[Pair]:
    """Pairs of round 1 (disjoint, so they can run at once).

    swap: each target with a distinct known-good non-target partner, in
    sorted order; targets left without one wait for a cleared node in round
    2. With no known-good partner at all the targets pair among themselves.
    default/acceptance: node *i* with node *i + ceil(N/2)* of the sorted
    nodes; with an odd count the last node waits for round 2.
    """
    if mode not in ALL_MODES:
        raise ValueError(f"mode must be one of {', '.join(ALL_MODES)}, not {mode!r}")
    if mode == "quick":
        return []
    nodes = sorted(set(nodes))
    if mode == "swap":
        wanted = [t for t in sorted(set(targets)) if t in nodes]
        good = [n for n in nodes if n in set(known_good) and n not in wanted]
        if not good:
            return _half_shift(wanted)
        return list(zip(wanted, good))
    return _half_shift(nodes)


def _half_shift(nodes: Sequence[str]) -> List[Pair]:
    half = (len(nodes) + 1) // 2
    return [(nodes[i], nodes[i + half]) for i in range(len(nodes) - half)]


def finite(value: Any) -> Optional[float]:
    """*value* as a float when it is a finite, non-negative number, else None (never raises)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def median_or_none(values: Sequence[float]) -> Optional[float]:
    kept = [v for v in (finite(x) for x in values) if v is not None]
    return statistics.median(kept) if kept else None


def pair_reference(pair: Sequence[str], results: Sequence[Mapping[str, Any]],
                   baselines: Optional[Mapping[str, Optional[float]]] = None,
                   exclude_index: Optional[int] = None,
                   _fleet: Optional[List[float]] = None) -> Optional[Dict[str, Any]]:
    """Reference busbw for *pair*: the median of the run's other measured pairs
    plus the stored baselines of the pair's two nodes. None when nothing to compare with."""
    if _fleet is None:
        _fleet = sorted(_measured(results))
    fleet = list(_fleet)
    if exclude_index is not None:
        own_value = finite(results[exclude_index].get("value"))
        if own_value is not None and results[exclude_index].get("status") != PAIR_INCOMPLETE:
            del fleet[bisect.bisect_left(fleet, own_value)]
    own = [v for v in (finite(baselines.get(n)) for n in pair) if v] if baselines else []
    for value in own:
        bisect.insort(fleet, value)
    if not fleet:
        return None
    return {"value": round(statistics.median(fleet), 4), "pairs": len(fleet) - len(own), "baselines": len(own)}


def _measured(results: Sequence[Mapping[str, Any]]) -> List[float]:
    return [v for v in (finite(r.get("value")) for r in results if r.get("status") != PAIR_INCOMPLETE)
            if v is not None]


def judge_pair(status: str, value: Optional[float], reference: Optional[Mapping[str, Any]],
               band: float) -> Tuple[str, str]:
    """Pair status from the all-reduce verdict (PASS/WARN/FAIL/INCOMPLETE) and the reference."""
    if status == "FAIL":
        return PAIR_FAIL, "failed its own checks (integrity, exit code or floor)"
    value = finite(value)
    if status not in ("PASS", "WARN") or value is None:
        return PAIR_INCOMPLETE, "no result" if status == "INCOMPLETE" else "no finite measurement"
    if reference and reference.get("value"):
        below = 1.0 - float(value) / float(reference["value"])
        where = (f"busbw {value:g} is {below:.0%} below the reference {reference['value']:g} "
                 f"({reference['pairs']} pairs, {reference['baselines']} baselines; band {band:.0%})")
        if below > band:
            return PAIR_SLOW, where
        if below > band / 2.0:
            return PAIR_MARGINAL, where + ": neither node is cleared by it; both get another partner"
    return PAIR_PASS, "at the reference" if reference else "no reference: judged against the floor only"


def rejudge(results: List[Dict[str, Any]], baselines: Optional[Mapping[str, Optional[float]]],
            band: float) -> List[Dict[str, Any]]:
    """(Re)judge every pair against the references of the whole run so far.

    Each result needs ``pair``, ``verdict`` (the all-reduce check's status) and
    ``value``; ``status``, ``reference`` and ``why`` are (re)written.
    """
    for result in results:  # the verdict decides which values count, before the reference
        if result.get("verdict") not in ("PASS", "WARN", "FAIL") or finite(result.get("value")) is None:
            result["status"] = PAIR_INCOMPLETE
        else:
            result["status"] = None
    fleet = sorted(_measured(results))
    for index, result in enumerate(results):
        ref = pair_reference(result["pair"], results, baselines, exclude_index=index, _fleet=fleet)
        result["reference"] = ref
        result["status"], result["why"] = judge_pair(result.get("verdict") or "INCOMPLETE",
                                                     result.get("value"), ref, band)
    return results


def lost_nodes(results: Sequence[Mapping[str, Any]]) -> Dict[str, int]:
    """node -> the first round after which it was found unreachable (a result's ``lost``
    names members of that pair only; anything else in it is ignored)."""
    lost: Dict[str, int] = {}
    for result in results:
        members = set(result["pair"])
        names = result.get("lost") or []
        if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
            continue
        for name in names:
            if isinstance(name, str) and name in members:
                rnd = result.get("round")
                rnd = rnd if isinstance(rnd, int) and not isinstance(rnd, bool) else 0
                lost[name] = min(lost.get(name, rnd), rnd)
    return lost


def _index(results: Sequence[Mapping[str, Any]]) -> Dict[str, List[Tuple[str, Any]]]:
    """node -> [(partner, pair status)] of every pair it was in."""
    index: Dict[str, List[Tuple[str, Any]]] = {}
    for result in results:
        a, b = result["pair"]
        index.setdefault(a, []).append((b, result.get("status")))
        index.setdefault(b, []).append((a, result.get("status")))
    return index


def _tally(pairs: Sequence[Tuple[str, Any]], ignore: Set[str]) -> Dict[str, List[str]]:
    passed: Set[str] = set()
    failed: Set[str] = set()
    explained: Set[str] = set()
    marginal: Set[str] = set()
    incomplete: Set[str] = set()
    for partner, status in pairs:
        if status in (PAIR_SLOW, PAIR_FAIL):
            (explained if partner in ignore else failed).add(partner)  # explained by a blamed partner
        elif status == PAIR_PASS:
            passed.add(partner)
        elif status == PAIR_MARGINAL:
            marginal.add(partner)
        else:
            incomplete.add(partner)
    decided = passed | failed | explained
    return {"passed": sorted(passed), "failed": sorted(failed), "explained": sorted(explained),
            "marginal": sorted(marginal - decided), "incomplete": sorted(incomplete - decided - marginal)}


def _state(tally: Mapping[str, List[str]], need: int) -> str:
    p, f, n = len(tally["passed"]), len(tally["failed"]), len(tally["incomplete"])
    if f >= 2 and f - p >= need:
        return BLAMED
    if p > f or (p == 0 and f == 0 and tally["explained"] and not tally["marginal"]):
        return CLEARED
    if p == 0 and f == 0 and not tally["marginal"]:
        return INCOMPLETE if n >= 2 else (SUSPECT if n else UNTESTED)
    return SUSPECT


def classify(nodes: Sequence[str], results: Sequence[Mapping[str, Any]],
             confirm: bool = True) -> Dict[str, Dict[str, Any]]:
    """Per-node outcome of the pair results so far (every node in *nodes* or in a pair).

    With p partners passed and f partners failed with: BLAMED when f >= 2 and
    f - p >= 3 with *confirm* (2 without); CLEARED when p > f (or when every
    failure is explained by a blamed partner); a node with
    neither yet is a SUSPECT (UNTESTED with no pair, INCOMPLETE with no result
    from two partners). A failure with a partner that ends BLAMED is explained
    by that partner and not counted against the node.
    """
    need = 3 if confirm else 2
    everyone = sorted(set(nodes) | {n for r in results for n in r["pair"]})
    index = _index(results)
    blamed: Set[str] = set()
    out: Dict[str, Dict[str, Any]] = {}
    for _ in range(4):  # explain-away converges in a couple of passes
        out = {}
        for node in everyone:
            tally = _tally(index.get(node, []), set() if node in blamed else blamed)
            out[node] = {"state": _state(tally, need), "passed_with": tally["passed"],
                         "failed_with": tally["failed"], "incomplete_with": tally["incomplete"],
                         "explained_by": tally["explained"], "marginal_with": tally["marginal"],
                         "pairs": len(index.get(node, []))}
        now = {n for n, rec in out.items() if rec["state"] == BLAMED}
        if now == blamed:
            break
        blamed = now
    for node, rnd in lost_nodes(results).items():
        record = out[node]
        record["lost"] = True
        if record["state"] != BLAMED:  # blamed before it vanished: the failures stand
            record["state"] = INCOMPLETE
            record["why"] = (f"unreachable after its pair in round {rnd}: not paired again (whatever it passed "
                             "before, it is gone now); bring it back and run the burn-in in swap mode")
    return out


def next_round(nodes: Sequence[str], results: Sequence[Mapping[str, Any]], known_good: Iterable[str] = (),
               subjects: Optional[Iterable[str]] = None,
               confirm: bool = True, max_partners: int = 4) -> List[Pair]:
    """Disjoint pairs for the next round, [] when done.

    Waiting: every suspect (a subject or a partner that failed) and every
    untested subject (*subjects* defaults to *nodes*). Each gets a cleared
    node it has not met yet, or a known-good node not yet used; the least
    used partner first, so the load spreads. Waiting nodes left without one
    pair among themselves (new partners only).
    """
    subjects = set(nodes if subjects is None else subjects)
    states = classify(nodes, results, confirm)
    gone = {n for n, rec in states.items() if rec.get("lost")}
    known_good = set(known_good) - subjects - gone
    index = _index(results)
    met: Dict[str, Set[str]] = {n: {p for p, _ in index.get(n, [])} for n in states}
    used: Dict[str, int] = {n: len(index.get(n, [])) for n in states}
    waiting = [n for n in sorted(states) if used[n] < max_partners and n not in gone and
               (states[n]["state"] == SUSPECT or (states[n]["state"] == UNTESTED and n in subjects))]
    pool = [n for n in sorted(set(nodes) | set(states))
            if states.get(n, {}).get("state") == CLEARED
            or (n in known_good and states.get(n, {}).get("state", UNTESTED) == UNTESTED)]
    pool.sort(key=lambda p: (used.get(p, 0), p))
    busy: Set[str] = set()
    pairs: List[Pair] = []
    for node in waiting:
        if node in busy:
            continue
        partner = None
        for cand in pool:  # pool is sorted by (uses, name): first fit is the least used
            if cand != node and cand not in busy and cand not in met.get(node, set()):
                partner = cand
                break
        if partner is None:
            continue
        pairs.append((node, partner))
        busy.update((node, partner))
    # Every cleared node already met (small clusters): measure again with the
    # least used cleared partner -- more evidence for the median rule of
    # finish(), bounded by max_partners pairs per node.
    for node in waiting:
        if node in busy or used.get(node, 0) >= max_partners:
            continue
        partner = next((c for c in pool if c != node and c not in busy
                        and states.get(c, {}).get("state") == CLEARED), None)
        if partner is not None:
            pairs.append((node, partner))
            busy.update((node, partner))
    # No cleared node left for some (e.g. every pair of round 1 failed or was
    # marginal): pair those among themselves, each with a node it has not met.
    left = [n for n in waiting if n not in busy]
    for node in left:
        if node in busy:
            continue
        partner = next((c for c in left if c != node and c not in busy and c not in met.get(node, set())), None)
        if partner is not None:
            pairs.append((node, partner))
            busy.update((node, partner))
    return pairs


def noise(results: Sequence[Mapping[str, Any]], band: float, exclude: Iterable[str] = ()) -> Dict[str, Any]:
    """Repeatability of this run's pair measurements and whether *band* can separate a bad node.

    sigma is the robust relative spread (1.4826 x MAD / median) of the finite
    pair values that passed their own checks (PASS, MARGINAL, SLOW): on a
    healthy fabric every pair measures the same link, so the spread is the
    measurement noise. ``separable`` is False when sigma exceeds half the band
    (a healthy pair then falls out of the band in more than ~7 % of runs);
    ``fix`` says what to change. None when fewer than three values exist.
    Pairs with a node in *exclude* (the blamed ones) measure the fault, not the noise: left out.
    """
    skip = set(exclude)
    values = [v for v in (finite(r.get("value")) for r in results
                          if r.get("status") in (PAIR_PASS, PAIR_MARGINAL, PAIR_SLOW) and not skip & set(r["pair"]))
              if v is not None]
    out: Dict[str, Any] = {"sigma": None, "pairs": len(values), "band": band, "separable": None, "fix": None}
    if len(values) < 3:
        return out
    middle = statistics.median(values)
    if middle <= 0:
        return out
    mad = statistics.median([abs(v - middle) for v in values])
    sigma = round(1.4826 * mad / middle, 4)
    out["sigma"] = sigma
    out["separable"] = sigma <= band / 2.0
    if not out["separable"]:
        out["fix"] = (f"pair noise sigma {sigma:.1%} exceeds half the band {band:.0%}: widen the band "
                      f"(kiln_burnin_pair_band >= {2 * sigma:.2f}) or measure longer pairs (more iterations "
                      f"in kiln_burnin_pair_args, -n)")
    return out


def ratio_median(node: str, results: Sequence[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """Median of value / reference over the node's measured pairs (None when none has both)."""
    ratios = []
    for result in results:
        if node not in result["pair"] or result.get("status") not in (PAIR_PASS, PAIR_MARGINAL, PAIR_SLOW):
            continue
        value = finite(result.get("value"))
        ref = finite((result.get("reference") or {}).get("value"))
        if value is not None and ref:
            ratios.append(value / ref)
    if not ratios:
        return None
    return {"ratio": round(statistics.median(ratios), 4), "pairs": len(ratios)}


def finish(nodes: Sequence[str], results: Sequence[Mapping[str, Any]],
           confirm: bool = True, band: Optional[float] = None) -> Dict[str, Dict[str, Any]]:
    """Final node outcomes. A suspect left when the rounds run out is decided by
    more evidence, never by one pair: with *band*, a node whose median pair
    ratio (value / reference) over at least two measured pairs is within half
    the band is CLEARED (its slow or marginal pair was noise); a node with too
    few results is INCOMPLETE; anything else is INCONSISTENT (WARN), whose
    ``why`` carries the noise figures and the fix. Blame needs the rule in
    :func:`classify` (never decided here)."""
    states = classify(nodes, results, confirm)
    spread = noise(results, band, [n for n, r in states.items() if r["state"] == BLAMED]) if band else None
    for node, record in states.items():
        if record["state"] != SUSPECT:
            continue
        evidence = ratio_median(node, results) if band else None
        if evidence and evidence["pairs"] >= 2 and evidence["ratio"] >= 1.0 - band / 2.0:
            record["state"] = CLEARED
            record["why"] = (f"cleared by the median of its {evidence['pairs']} measured pairs: "
                             f"{evidence['ratio']:.0%} of the reference (within half the band {band:.0%})")
            record["decided_by"] = "median"
        elif (len(record["failed_with"]) >= 2 and record["passed_with"]) or record["marginal_with"]:
            record["state"] = INCONSISTENT
            record["why"] = "; ".join(f"{label} " + ", ".join(record[key]) for key, label in (
                ("failed_with", "failed with"), ("marginal_with", "marginal with"), ("passed_with", "passed with"))
                if record[key])
            if evidence:
                record["why"] += f"; median pair ratio {evidence['ratio']:.0%} of the reference"
            if spread and spread.get("fix"):
                record["why"] += "; " + spread["fix"]
            elif spread and spread.get("sigma") is not None:
                record["why"] += (f"; pair noise sigma {spread['sigma']:.1%} with band {band:.0%}: re-run, or "
                                  "run longer pairs to decide")
        else:
            record["state"] = INCOMPLETE
            record["why"] = ("failed with " + ", ".join(record["failed_with"]) + " only; no further partner "
                             "in the rounds allowed") if record["failed_with"] else "no result"
    return states


def isolate(nodes: Sequence[str], run_pair, *, mode: str = "default", targets: Sequence[str] = (),
            known_good: Iterable[str] = (), baselines: Optional[Mapping[str, Optional[float]]] = None,
            band: float = 0.10, confirm: bool = True, max_rounds: int = 4) -> Dict[str, Any]:
    """Whole pair phase with a callable ``run_pair(a, b, round) -> {verdict, value}``
    (the simulation's entry point; the playbook drives the same steps one round per play)."""
    known_good = set(known_good)
    subjects = list(targets) if mode == "swap" else list(nodes)
    results: List[Dict[str, Any]] = []
    pairs = first_round(nodes, mode, targets, known_good)
    rounds = 0
    while pairs and rounds < max_rounds:
        rounds += 1
        for a, b in pairs:
            measured = dict(run_pair(a, b, rounds))
            results.append({"pair": [a, b], "round": rounds, **measured})
        rejudge(results, baselines, band)
        pairs = next_round(nodes, results, known_good, subjects, confirm)
    outcome = finish(nodes, results, confirm, band)
    return {"rounds": rounds, "results": results, "nodes": outcome,
            "noise": noise(results, band, [n for n, r in outcome.items() if r["state"] == BLAMED])}
