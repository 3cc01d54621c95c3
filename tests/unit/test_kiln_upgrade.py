"""The rolling upgrade's decisions: module_utils/kiln_upgrade.py and filter_plugins/kiln_upgrade_filters.py."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln_upgrade as ku

STACK_OLD = {"driver": "580.95.05", "cuda": "12.8", "nccl": "2.27.3"}
STACK_NEW = {"driver": "580.173.02", "cuda": "12.8", "nccl": "2.27.3"}
FP_OLD = ku.stack_fingerprint(STACK_OLD)
FP_NEW = ku.stack_fingerprint(STACK_NEW)
NODES = ["c1", "c2", "c3"]


def info(applied: dict, reachable: dict | None = None, intended: str = FP_NEW) -> dict:
    reach = reachable or {}
    return {n: {"reachable": reach.get(n, True), "intended": intended,
                "applied": None if applied.get(n) is None else {"fingerprint": applied[n]}} for n in NODES}


def sinfo(rows: dict) -> dict:
    return {n: {"state": s, "reason": r} for n, (s, r) in rows.items()}


IDLE = {n: ("idle", "") for n in NODES}


# --- fingerprint -------------------------------------------------------------------------------

def test_fingerprint_ignores_key_order_and_sees_every_value():
    assert ku.stack_fingerprint(dict(reversed(list(STACK_OLD.items())))) == FP_OLD
    assert FP_OLD != FP_NEW
    assert len(FP_OLD) == 12 and int(FP_OLD, 16) >= 0


@pytest.mark.parametrize("bad", [None, {}, [], "580.95.05", 580.95])
def test_fingerprint_refuses_what_is_not_a_stack(bad):
    with pytest.raises(ku.UpgradeConfigError, match="non-empty mapping"):
        ku.stack_fingerprint(bad)


# --- batch size --------------------------------------------------------------------------------

@pytest.mark.parametrize("value,total,want", [(1, 10, 1), (3, 2, 3), ("2", 10, 2), ("10%", 10, 1),
                                              ("25%", 10, 3), ("100%", 7, 7), ("1%", 2000, 20), ("50%", 0, 1)])
def test_batch_size(value, total, want):
    assert ku.batch_size(value, total) == want


@pytest.mark.parametrize("bad", [0, -1, 0.1, 1.0, True, None, "0%", "101%", "ten", "10 %x", [], "1e3"])
def test_batch_size_refuses_with_the_variable_named(bad):
    with pytest.raises(ku.UpgradeConfigError, match="kiln_upgrade_batch"):
        ku.batch_size(bad, 10)


def test_batch_size_says_a_yaml_float_is_not_a_percentage():
    with pytest.raises(ku.UpgradeConfigError, match="write '10%'"):
        ku.batch_size(0.1, 10)


@given(pct=st.integers(min_value=1, max_value=100), total=st.integers(min_value=0, max_value=5000))
def test_batch_size_percentage_properties(pct, total):
    size = ku.batch_size(f"{pct}%", total)
    assert 1 <= size <= max(total, 1)
    assert size == max(1, math.ceil(pct * total / 100))


# --- plan --------------------------------------------------------------------------------------

def test_plan_fresh_rollout_is_every_node_in_inventory_order_in_batches_of_one():
    p = ku.plan(NODES, info({"c1": FP_OLD, "c2": FP_OLD, "c3": FP_OLD}), sinfo(IDLE), batch=1)
    assert p["todo"] == NODES and p["done"] == [] and p["batches"] == [["c1"], ["c2"], ["c3"]]


def test_plan_resumes_kiln_drained_nodes_first_and_skips_the_done():
    rows = dict(IDLE, c3=("drained", "UPGRADE: to stack abc (kiln run r1)"))
    p = ku.plan(NODES, info({"c1": FP_NEW, "c2": FP_OLD, "c3": FP_NEW}), sinfo(rows), batch=1)
    # c3 already carries the new stack but kiln drained it: its batch did not finish (burn-in, resume).
    assert p["done"] == ["c1"] and p["todo"] == ["c3", "c2"]
    assert "continued first" in p["why"]["c3"]


def test_plan_leaves_a_persons_drain_alone():
    rows = dict(IDLE, c2=("drained", "bad DIMM, ticket 4711"))
    p = ku.plan(NODES, info({"c1": FP_OLD, "c2": FP_OLD, "c3": FP_OLD}), sinfo(rows))
    assert p["held"] == ["c2"] and "c2" not in p["todo"]
    assert "ticket 4711" in p["why"]["c2"] and "left alone" in p["why"]["c2"]


def test_plan_a_burnin_drain_is_kilns_too():
    rows = dict(IDLE, c1=("drained", "BURNIN: FAIL pair c1-c2"))
    p = ku.plan(NODES, info({"c1": FP_OLD, "c2": FP_OLD, "c3": FP_OLD}), sinfo(rows))
    assert p["todo"][0] == "c1" and p["held"] == []


@pytest.mark.parametrize("state", ["down", "down*", "idle*", "future", "weird_state", ""])
def test_plan_down_unknown_or_missing_in_slurm_is_not_upgraded(state):
    rows = dict(IDLE, c2=(state, "not responding"))
    p = ku.plan(NODES, info({"c1": FP_OLD, "c2": FP_OLD, "c3": FP_OLD}), sinfo(rows))
    assert p["unreachable"] == ["c2"] and "c2" not in p["todo"] + p["done"]


def test_plan_node_slurm_does_not_list():
    rows = {"c1": ("idle", ""), "c2": ("idle", "")}
    p = ku.plan(NODES, info({"c1": FP_OLD, "c2": FP_OLD, "c3": FP_OLD}), sinfo(rows))
    assert p["unreachable"] == ["c3"] and "does not list" in p["why"]["c3"]


def test_plan_unreachable_host_and_unrecorded_stack():
    p = ku.plan(NODES, info({"c1": None, "c2": FP_OLD, "c3": FP_OLD}, reachable={"c3": False}), None)
    assert p["unreachable"] == ["c3"] and p["todo"] == ["c1", "c2"]
    assert "not recorded" in p["why"]["c1"]


def test_plan_uses_the_slurm_names():
    rows = {"node-1": ("idle", ""), "node-2": ("drained", "rma"), "node-3": ("idle", "")}
    names = {"c1": "node-1", "c2": "node-2", "c3": "node-3"}
    p = ku.plan(NODES, info({"c1": FP_OLD, "c2": FP_OLD, "c3": FP_NEW}), sinfo(rows), names)
    assert p["todo"] == ["c1"] and p["held"] == ["c2"] and p["done"] == ["c3"]


def test_plan_rollback_is_the_same_plan_towards_the_previous_stack():
    p = ku.plan(NODES, info({"c1": FP_NEW, "c2": FP_NEW, "c3": FP_OLD}, intended=FP_OLD), sinfo(IDLE))
    assert p["todo"] == ["c1", "c2"] and p["done"] == ["c3"]


def test_plan_refuses_a_bad_batch():
    with pytest.raises(ku.UpgradeConfigError, match="kiln_upgrade_batch"):
        ku.plan(NODES, info({}), None, batch=0.5)


_states = st.sampled_from(["idle", "mixed", "allocated", "drained", "draining", "down", "idle*", "bogus"])
_reasons = st.sampled_from(["", "UPGRADE: to stack x (kiln run y)", "BURNIN: FAIL", "ops: fan"])


@settings(max_examples=200)
@given(rows=st.fixed_dictionaries({n: st.tuples(_states, _reasons) for n in NODES}),
       applied=st.fixed_dictionaries({n: st.sampled_from([FP_OLD, FP_NEW, None]) for n in NODES}),
       reach=st.fixed_dictionaries({n: st.booleans() for n in NODES}),
       batch=st.integers(min_value=1, max_value=4))
def test_plan_properties(rows, applied, reach, batch):
    p = ku.plan(NODES, info(applied, reach), sinfo(rows), batch=batch)
    buckets = p["done"] + p["todo"] + p["held"] + p["unreachable"]
    # every node lands in exactly one bucket, with a reason
    assert sorted(buckets) == sorted(NODES) and set(p["why"]) == set(NODES)
    # batches are the todo list cut in order, none larger than the batch size
    assert [n for b in p["batches"] for n in b] == p["todo"]
    assert all(1 <= len(b) <= batch for b in p["batches"])
    for n in NODES:
        state, reason = rows[n]
        operator_drain = state in ("drained", "draining") and not reason.startswith(("UPGRADE:", "BURNIN:"))
        if not reach[n] or state in ("down", "idle*", "bogus"):
            assert n in p["unreachable"]
        elif operator_drain:
            assert n in p["held"]  # a person's drain is never touched
        elif n in p["done"]:
            assert applied[n] == FP_NEW and state not in ("drained", "draining")


# --- verdicts ----------------------------------------------------------------------------------

def summary(**nodes):
    return {"verdict": "x", "nodes": {n: {"status": s, "checks": [{"id": "pair c1-c2", "status": s}]}
                                      for n, s in nodes.items()}}


def test_verdicts_pass_and_fail():
    v = ku.batch_verdicts(["c1", "c2"], summary(c1="PASS", c2="FAIL"))
    assert v["c1"]["status"] == "PASS" and v["c2"]["status"] == "FAIL"
    assert "pair c1-c2 FAIL" in v["c2"]["why"]


@pytest.mark.parametrize("bad", [None, {}, [], "PASS", {"nodes": []}, {"nodes": {"c1": "PASS"}},
                                 {"nodes": {"c1": {"status": "pass"}}}, {"nodes": {"c1": {"status": None}}}])
def test_verdicts_missing_or_unreadable_is_incomplete_never_pass(bad):
    assert ku.batch_verdicts(["c1"], bad)["c1"]["status"] == "INCOMPLETE"


def test_verdicts_node_not_in_the_summary_is_incomplete():
    v = ku.batch_verdicts(["c1", "c2"], summary(c1="PASS"))
    assert v["c2"]["status"] == "INCOMPLETE"


def test_verdicts_name_the_slurm_action():
    s = summary(c1="FAIL")
    s["nodes"]["c1"]["action"] = {"action": "drain", "reason": "BURNIN: FAIL pair"}
    assert "Slurm: drain (BURNIN: FAIL pair)" in ku.batch_verdicts(["c1"], s)["c1"]["why"]


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                    max_leaves=12))
def test_verdicts_never_pass_garbage(garbage):
    out = ku.batch_verdicts(["c1"], {"nodes": {"c1": garbage}})
    assert out["c1"]["status"] in ("INCOMPLETE", "PASS", "WARN", "FAIL", "SKIP")
    if not (isinstance(garbage, dict) and garbage.get("status") == "PASS"):
        assert out["c1"]["status"] != "PASS"


# --- reason and report -------------------------------------------------------------------------

def test_drain_reason_is_a_kiln_drain():
    import kiln_burnin_pair_phase as kbp

    reason = ku.drain_reason(FP_NEW, "20261203T000000Z")
    assert reason.startswith("UPGRADE:") and FP_NEW in reason and kbp.kiln_drain(reason)
    assert len(ku.drain_reason("x" * 500, "y")) <= 200


def test_summary_names_every_node_and_is_complete_only_when_all_upgraded():
    rows = dict(IDLE, c3=("drained", "ops: fan"))
    p = ku.plan(NODES, info({"c1": FP_NEW, "c2": FP_OLD, "c3": FP_OLD}), sinfo(rows))
    s = ku.summary(p, {"c2": {"state": "upgraded", "why": "burn-in PASS"}}, "r1")
    assert s["complete"] and s["nodes"]["c1"]["state"] == "done" and s["nodes"]["c3"]["state"] == "held"
    assert s["lines"][1] == "c2: UPGRADED -- burn-in PASS" and s["run_id"] == "r1"
    p = ku.plan(NODES, info({"c1": FP_OLD, "c2": FP_OLD, "c3": FP_OLD}), sinfo(IDLE))
    s = ku.summary(p, {"c1": {"state": "upgraded", "why": "PASS"}, "c2": {"state": "failed", "why": "FAIL"}})
    assert not s["complete"] and s["nodes"]["c3"]["state"] == "not started"
    assert s["counts"] == {"upgraded": 1, "failed": 1, "not started": 1}
    assert ku.summary(p, {"c1": "garbage", "c2": None, "c3": {}})["nodes"]["c1"]["state"] == "not started"
    assert s["headline"] == "failed 1, not started 1, upgraded 1"


def test_summary_is_not_complete_with_an_unreachable_node():
    p = ku.plan(NODES, info({"c1": FP_NEW, "c2": FP_NEW, "c3": FP_OLD}, reachable={"c3": False}), None)
    s = ku.summary(p, {})
    assert p["todo"] == [] and not s["complete"] and s["nodes"]["c3"]["state"] == "not upgraded"


# --- the filter wrappers -----------------------------------------------------------------------

def test_filters_wrap_config_errors_and_parse_sinfo_lines():
    from ansible.errors import AnsibleFilterError

    import kiln_upgrade as ku_filters_core  # same module the filters wrap
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "kiln_upgrade_filters", Path(__file__).resolve().parents[2] / "filter_plugins/kiln_upgrade_filters.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    f = mod.FilterModule().filters()
    with pytest.raises(AnsibleFilterError, match="kiln_upgrade_batch"):
        f["kiln_upgrade_plan"](NODES, info({}), None, None, "0%")
    p = f["kiln_upgrade_plan"](NODES, info({"c1": FP_OLD, "c2": FP_OLD, "c3": FP_NEW}),
                               ["c1|idle|none", "c2|drained|ops", "c3|idle|none"], None, 1)
    assert p["todo"] == ["c1"] and p["held"] == ["c2"] and p["done"] == ["c3"]
    assert f["kiln_stack_fingerprint"](STACK_NEW) == ku_filters_core.stack_fingerprint(STACK_NEW)
    hv = {"c1": {"kiln_upgrade_status": {"state": "upgraded", "why": "PASS"}}, "c2": {}}
    s = f["kiln_upgrade_summary"](p, hv, "r")
    assert s["nodes"]["c1"]["state"] == "upgraded" and s["nodes"]["c3"]["state"] == "done"


# --- records and node info ---------------------------------------------------------------------

@pytest.mark.parametrize("text", ["", "   ", "not json", "[1, 2]", '"a string"', "{", None, 42, b"\xff\xfe"])
def test_read_record_gives_none_for_what_is_not_an_object(text):
    assert ku.read_record(text) is None


def test_read_record_reads_an_object():
    assert ku.read_record('{"fingerprint": "abc"}') == {"fingerprint": "abc"}
    assert ku.read_record({"fingerprint": "abc"}) == {"fingerprint": "abc"}


@given(st.text(max_size=40))
def test_read_record_never_raises(text):
    out = ku.read_record(text)
    assert out is None or isinstance(out, dict)


def test_node_info_defaults_to_unreachable_and_unrecorded():
    assert ku.node_info({}) == {"reachable": False, "intended": None, "applied": None}
    hv = {"__upgrade_reachable": True, "__upgrade_intended": FP_NEW, "__upgrade_applied": {"fingerprint": FP_OLD}}
    assert ku.node_info(hv) == {"reachable": True, "intended": FP_NEW, "applied": {"fingerprint": FP_OLD}}
