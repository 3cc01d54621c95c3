"""module_utils/kiln/burnin/isolate.py: pairing, references, blame -- and the scale simulation."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_paths import REPO
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.burnin import isolate as ki  # noqa: E402

NODES = [f"n{i}" for i in range(1, 9)]


def fabric(rates, noise=0.0, seed=3):
    rng = random.Random(seed)

    def run_pair(a, b, _round):
        return {"verdict": "PASS", "value": round(min(rates[a], rates[b]) * rng.gauss(1.0, noise) if noise
                                                  else min(rates[a], rates[b]), 4)}
    return run_pair


def states(out):
    return {n: r["state"] for n, r in out["nodes"].items()}


def test_first_round_half_shift_pairs_every_node_once():
    pairs = ki.first_round(NODES, "acceptance")
    assert pairs == [("n1", "n5"), ("n2", "n6"), ("n3", "n7"), ("n4", "n8")]
    flat = [n for p in pairs for n in p]
    assert sorted(flat) == sorted(NODES)


def test_first_round_odd_count_leaves_one_for_round_two():
    pairs = ki.first_round(NODES[:5], "default")
    assert pairs == [("n1", "n4"), ("n2", "n5")]


def test_first_round_swap_uses_distinct_known_good_partners():
    pairs = ki.first_round(NODES, "swap", targets=["n7", "n3"], known_good=["n1", "n2", "n3"])
    assert pairs == [("n3", "n1"), ("n7", "n2")]  # n3 is a target: never its own partner


def test_first_round_rejects_unknown_mode():
    with pytest.raises(ValueError, match="mode must be one of"):
        ki.first_round(NODES, "fast")


def test_healthy_fabric_one_round_nothing_blamed():
    out = ki.isolate(NODES, fabric({n: 1.0 for n in NODES}), mode="acceptance")
    assert out["rounds"] == 1
    assert set(states(out).values()) == {ki.CLEARED}


def test_one_slow_node_blamed_alone_in_two_rounds_plus_confirmation():
    rates = {n: 1.0 for n in NODES}
    rates["n6"] = 0.8
    out = ki.isolate(NODES, fabric(rates), mode="acceptance")
    st = states(out)
    assert st["n6"] == ki.BLAMED
    assert [n for n, s in st.items() if s != ki.CLEARED] == ["n6"]
    assert out["rounds"] == 3
    assert len(out["nodes"]["n6"]["failed_with"]) == 3  # three different partners
    # its round-1 partner n2 failed once, then passed with another node: cleared
    assert out["nodes"]["n2"]["passed_with"]


def test_two_bad_nodes_paired_together_neither_condemns_a_good_partner():
    rates = {n: 1.0 for n in NODES}
    rates["n1"] = rates["n5"] = 0.7  # round 1 pairs n1 with n5
    out = ki.isolate(NODES, fabric(rates), mode="acceptance")
    st = states(out)
    assert {n for n, s in st.items() if s == ki.BLAMED} == {"n1", "n5"}
    assert all(s == ki.CLEARED for n, s in st.items() if n not in ("n1", "n5"))


def test_without_confirmation_two_partners_are_enough():
    rates = {n: 1.0 for n in NODES}
    rates["n6"] = 0.8
    out = ki.isolate(NODES, fabric(rates), mode="acceptance", confirm=False)
    assert states(out)["n6"] == ki.BLAMED and out["rounds"] == 2


def test_one_failure_never_blames():
    results = [{"pair": ["a", "b"], "round": 1, "status": ki.PAIR_SLOW}]
    st = ki.finish(["a", "b", "c"], results)
    assert st["a"]["state"] == st["b"]["state"] == ki.INCOMPLETE  # ran out of rounds: never PASS, never FAIL
    assert "failed with b only" in st["a"]["why"]


def test_swap_mode_target_checked_against_known_good_only():
    rates = {n: 1.0 for n in NODES}
    rates["n8"] = 0.75
    out = ki.isolate(NODES, fabric(rates), mode="swap", targets=["n8"], known_good=NODES[:7],
                     baselines={n: 1.0 for n in NODES})
    st = states(out)
    assert st["n8"] == ki.BLAMED
    assert out["results"][0]["pair"] == ["n8", "n1"]
    # the known-good partners it failed with are explained by n8 and stay good
    assert all(st[p] == ki.CLEARED for p in out["nodes"]["n8"]["failed_with"])


def test_swap_mode_repaired_node_passes_in_one_pair():
    out = ki.isolate(NODES, fabric({n: 1.0 for n in NODES}), mode="swap", targets=["n8"], known_good=NODES[:7],
                     baselines={n: 1.0 for n in NODES})
    assert out["rounds"] == 1 and len(out["results"]) == 1
    assert states(out)["n8"] == ki.CLEARED


def test_dead_node_is_incomplete_and_its_partners_cleared():
    def run_pair(a, b, _round):
        if "n3" in (a, b):
            return {"verdict": "INCOMPLETE", "value": None}
        return {"verdict": "PASS", "value": 1.0}
    out = ki.isolate(NODES, run_pair, mode="default")
    st = states(out)
    assert st["n3"] == ki.INCOMPLETE
    assert all(s == ki.CLEARED for n, s in st.items() if n != "n3")


def test_lost_node_is_never_paired_again_and_costs_one_pair():
    calls = []

    def run_pair(a, b, _round):
        calls.append((a, b))
        if "n3" in (a, b):
            return {"verdict": "INCOMPLETE", "value": None, "lost": ["n3"]}
        return {"verdict": "PASS", "value": 1.0}
    out = ki.isolate(NODES, run_pair, mode="default")
    st = states(out)
    assert st["n3"] == ki.INCOMPLETE and out["nodes"]["n3"]["lost"] is True
    assert sum("n3" in c for c in calls) == 1
    assert all(s == ki.CLEARED for n, s in st.items() if n != "n3")


def test_lost_after_passing_is_incomplete_blamed_stays_blamed():
    results = [{"pair": ["a", "b"], "round": 1, "status": ki.PAIR_PASS, "value": 1.0},
               {"pair": ["a", "c"], "round": 2, "status": ki.PAIR_INCOMPLETE, "lost": ["a"]},
               {"pair": ["d", "b"], "round": 1, "status": ki.PAIR_FAIL},
               {"pair": ["d", "c"], "round": 2, "status": ki.PAIR_FAIL},
               {"pair": ["d", "e"], "round": 3, "status": ki.PAIR_FAIL},
               {"pair": ["d", "f"], "round": 4, "status": ki.PAIR_INCOMPLETE, "lost": ["d", "zz"]}]
    out = ki.classify("abcdef", results, confirm=True)
    assert out["a"]["state"] == ki.INCOMPLETE and out["a"]["lost"]
    assert out["d"]["state"] == ki.BLAMED
    assert "zz" not in out  # a name outside the pair is ignored
    assert ki.lost_nodes(results) == {"a": 2, "d": 4}


def test_reference_uses_baselines_when_the_run_is_small():
    results = [{"pair": ["a", "c"], "value": 0.85, "verdict": "PASS"},
               {"pair": ["b", "d"], "value": 1.0, "verdict": "PASS"}]
    ki.rejudge(results, {n: 1.0 for n in "abcd"}, 0.10)
    assert results[0]["status"] == ki.PAIR_SLOW  # vs median(1.0 other pair, 1.0, 1.0 baselines)
    assert results[1]["status"] == ki.PAIR_PASS
    assert results[0]["reference"] == {"value": 1.0, "pairs": 1, "baselines": 2}


def test_reference_excludes_the_judged_pair_and_incomplete_runs():
    results = [{"pair": ["a", "b"], "value": 0.5, "verdict": "PASS"},
               {"pair": ["c", "d"], "value": None, "verdict": "INCOMPLETE"}]
    ki.rejudge(results, None, 0.10)
    assert results[0]["reference"] is None and results[0]["status"] == ki.PAIR_PASS
    assert "floor only" in results[0]["why"]
    assert results[1]["status"] == ki.PAIR_INCOMPLETE


def test_verdict_fail_is_a_pair_failure_even_above_reference():
    results = [{"pair": ["a", "b"], "value": 1.2, "verdict": "FAIL"},
               {"pair": ["c", "d"], "value": 1.0, "verdict": "PASS"}]
    ki.rejudge(results, None, 0.10)
    assert results[0]["status"] == ki.PAIR_FAIL


def test_next_round_pairs_are_disjoint_and_new():
    results = [{"pair": ["n1", "n5"], "round": 1, "status": ki.PAIR_SLOW},
               {"pair": ["n2", "n6"], "round": 1, "status": ki.PAIR_PASS},
               {"pair": ["n3", "n7"], "round": 1, "status": ki.PAIR_PASS},
               {"pair": ["n4", "n8"], "round": 1, "status": ki.PAIR_SLOW}]
    pairs = ki.next_round(NODES, results)
    flat = [n for p in pairs for n in p]
    assert len(flat) == len(set(flat))
    assert {p[0] for p in pairs} == {"n1", "n4", "n5", "n8"}
    for a, b in pairs:
        assert b in ("n2", "n3", "n6", "n7")


def test_simulation_n1024_isolates_without_false_blame():
    """docs/benchmarks.md's scale figures come from bench/isolation_sim.py; a small run here."""
    out = subprocess.run([sys.executable, str(REPO / "bench/isolation_sim.py"), "--nodes", "1024",
                          "--bad", "1,4", "--trials", "5", "--slowdown", "0.25", "--json"],
                         capture_output=True, text=True, check=True)
    import json
    rows = json.loads(out.stdout)
    for row in rows:
        assert row["isolated_all"] == row["trials"], row
        assert row["false_blame_nodes"] == 0, row
        assert row["rounds_max"] <= 3, row


def test_marginal_pair_neither_clears_nor_condemns():
    results = [{"pair": ["a", "b"], "value": 0.93, "verdict": "PASS"},
               {"pair": ["c", "d"], "value": 1.0, "verdict": "PASS"}]
    ki.rejudge(results, {n: 1.0 for n in "abcd"}, 0.10)
    assert results[0]["status"] == ki.PAIR_MARGINAL and "another partner" in results[0]["why"]
    st = ki.classify("abcd", results)
    assert st["a"]["state"] == st["b"]["state"] == ki.SUSPECT
    assert st["a"]["failed_with"] == [] and st["a"]["marginal_with"] == ["b"]
    assert ki.next_round("abcd", results) == [("a", "c"), ("b", "d")]
    final = ki.finish("abcd", results)
    assert final["a"]["state"] == ki.INCONSISTENT and "marginal with b" in final["a"]["why"]


def test_lucky_run_of_a_bad_node_does_not_clear_it():
    """A slow node whose first pair lands just inside the band is retested, then blamed."""
    rates = {n: 1.0 for n in NODES}
    rates["n3"] = 0.85
    first = {"done": False}

    def run_pair(a, b, _round):
        value = min(rates[a], rates[b])
        if "n3" in (a, b) and not first["done"]:
            first["done"] = True
            value = 0.93  # lucky: 7% below, inside the 10% band
        return {"verdict": "PASS", "value": value}
    out = ki.isolate(NODES, run_pair, mode="acceptance", baselines={n: 1.0 for n in NODES})
    assert states(out)["n3"] == ki.BLAMED
    assert [n for n, s in states(out).items() if s != ki.CLEARED] == ["n3"]


def test_no_cleared_node_suspects_pair_among_themselves():
    results = [{"pair": ["a", "c"], "round": 1, "status": ki.PAIR_SLOW},
               {"pair": ["b", "d"], "round": 1, "status": ki.PAIR_MARGINAL}]
    assert ki.next_round("abcd", results) == [("a", "b"), ("c", "d")]


def test_noisy_small_cluster_still_reaches_a_verdict():
    """4 nodes, bad c, a healthy pair unlucky (marginal) in round 1: c alone is blamed."""
    rates = {"a": 1.0, "b": 1.0, "c": 0.5, "d": 1.0}
    calls = {"n": 0}

    def run_pair(x, y, rnd):
        calls["n"] += 1
        value = min(rates[x], rates[y])
        if (x, y) == ("b", "d") and rnd == 1:
            value = 0.93
        return {"verdict": "PASS", "value": value}
    out = ki.isolate(list("abcd"), run_pair, mode="default", baselines={n: 1.0 for n in "abcd"})
    st = {n: r["state"] for n, r in out["nodes"].items()}
    assert st == {"a": ki.CLEARED, "b": ki.CLEARED, "c": ki.BLAMED, "d": ki.CLEARED}


_STATUSES = [ki.PAIR_PASS, ki.PAIR_MARGINAL, ki.PAIR_SLOW, ki.PAIR_FAIL, ki.PAIR_INCOMPLETE]


@st.composite
def _pair_histories(draw):
    nodes = [f"n{i}" for i in range(draw(st.integers(2, 7)))]
    results = []
    for rnd in range(1, draw(st.integers(1, 5))):
        a, b = draw(st.lists(st.sampled_from(nodes), min_size=2, max_size=2, unique=True))
        status = draw(st.sampled_from(_STATUSES))
        lost = draw(st.lists(st.sampled_from([a, b, "other"]), max_size=2)) if status != ki.PAIR_PASS else []
        results.append({"pair": [a, b], "round": rnd, "status": status, "value": 1.0, "lost": lost})
    return nodes, results


@settings(max_examples=300, deadline=None)
@given(_pair_histories(), st.booleans())
def test_lost_nodes_are_never_cleared_nor_paired_again(history, confirm):
    nodes, results = history
    gone = ki.lost_nodes(results)
    states_now = ki.classify(nodes, results, confirm=confirm)
    final = ki.finish(nodes, results, confirm=confirm, band=0.2)
    pairs = ki.next_round(nodes, results, known_good=nodes[:2], confirm=confirm)
    flat = [n for p in pairs for n in p]
    assert len(flat) == len(set(flat))  # disjoint
    for node in gone:
        assert node in nodes
        assert states_now[node]["state"] in (ki.INCOMPLETE, ki.BLAMED)
        assert final[node]["state"] in (ki.INCOMPLETE, ki.BLAMED)
        assert node not in flat
