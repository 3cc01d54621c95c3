"""The rolling upgrade's decisions: module_utils/kiln/upgrade/rollout.py and filter_plugins/kiln_upgrade_filters.py."""

from __future__ import annotations

import json
import math
import shutil

import kiln_playbook
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.upgrade import rollout as ku

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


def test_plan_holds_a_kiln_health_drain_a_fault_is_not_upgraded_and_resumed():
    rows = dict(IDLE, c2=("drained", "HEALTH: memory.remapped_rows: GPU1 row remap pending"))
    p = ku.plan(NODES, info({"c1": FP_OLD, "c2": FP_OLD, "c3": FP_OLD}), sinfo(rows))
    assert p["held"] == ["c2"] and "c2" not in p["todo"]
    assert "kiln-health" in p["why"]["c2"] and "swap" in p["why"]["c2"]


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
_reasons = st.sampled_from(["", "UPGRADE: to stack x (kiln run y)", "BURNIN: FAIL", "ops: fan", "HEALTH: gpu.count: 7"])


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
            assert n in p["held"]  # a person's drain is never touched, nor kiln-health's (a fault)
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
    from kiln.slurm import node_state as kns

    reason = ku.drain_reason(FP_NEW, "20261203T000000Z")
    assert reason.startswith("UPGRADE:") and FP_NEW in reason and kns.kiln_reason(reason)
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

    from kiln.upgrade import rollout as ku_filters_core  # same module the filters wrap
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "kiln_upgrade_filters", kiln_playbook.REPO / "filter_plugins/kiln_upgrade_filters.py")
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
    assert ku.node_info({}) == {"reachable": False, "intended": None, "applied": None, "previous": None}
    hv = {"__upgrade_reachable": True, "__upgrade_intended": FP_NEW, "__upgrade_applied": {"fingerprint": FP_OLD},
          "__upgrade_previous": {"fingerprint": FP_NEW}}
    assert ku.node_info(hv) == {"reachable": True, "intended": FP_NEW, "applied": {"fingerprint": FP_OLD},
                                "previous": {"fingerprint": FP_NEW}}


# --- rollback: keyed on the rollback's target, remembered in the records (issue 31, why 7) --------

def rec(stack: dict, **extra) -> dict:
    return {"fingerprint": ku.stack_fingerprint(stack), "stack": stack, **extra}


def write(old: dict | None, stack: dict, rollback: bool = False) -> tuple[dict, dict | None]:
    """What roles/stack_record leaves on a node: (applied, previous) after writing *stack* over *old*."""
    applied = ku.next_record(rec(stack), old, rollback)
    changed = old is not None and old["fingerprint"] != applied["fingerprint"]
    return applied, (old if changed else None)


def rb_info(records: dict) -> dict:
    """{node: info} from {node: (applied, previous)} as the plan play builds it (no intended in a rollback)."""
    return {n: {"reachable": True, "intended": None, "applied": a, "previous": p} for n, (a, p) in records.items()}


def test_rollback_rerun_after_the_record_was_written_never_re_upgrades():
    # c3 was upgraded old -> new; its rollback installed the old stack and wrote the records
    # (applied=old, previous=new), then the batch stopped (burn-in not passed): c3 is kiln-drained.
    applied, previous = write(rec(STACK_NEW), STACK_OLD, rollback=True)
    assert applied["fingerprint"] == FP_OLD and previous["fingerprint"] == FP_NEW
    records = {"c1": (rec(STACK_NEW), rec(STACK_OLD)), "c2": (rec(STACK_NEW), rec(STACK_OLD)), "c3": (applied, previous)}
    rows = dict(IDLE, c3=("drained", "UPGRADE: to stack x (kiln run r1-rollback)"))
    p = ku.plan(NODES, rb_info(records), sinfo(rows), batch=1, rollback=True)
    # the re-run continues c3 on the stack it rolled back to -- never "old -> new"
    assert p["todo"][0] == "c3"
    assert f"{FP_OLD} -> {FP_OLD}" in p["why"]["c3"] and f"-> {FP_NEW}" not in p["why"]["c3"]
    assert ku.rollback_target(applied, previous)["stack"] == STACK_OLD
    # once resumed, a rollback run again finds it done
    p = ku.plan(NODES, rb_info(records), sinfo(IDLE), batch=1, rollback=True)
    assert p["done"] == ["c3"] and p["todo"] == ["c1", "c2"] and "rolled back" in p["why"]["c3"]


def test_rollback_interrupted_before_the_record_goes_on_to_the_previous_stack():
    records = {n: (rec(STACK_NEW), rec(STACK_OLD)) for n in NODES}
    rows = dict(IDLE, c1=("drained", "UPGRADE: to stack x (kiln run r1-rollback)"))
    p = ku.plan(NODES, rb_info(records), sinfo(rows), batch=1, rollback=True)
    assert p["todo"] == ["c1", "c2", "c3"] and f"{FP_NEW} -> {FP_OLD}" in p["why"]["c1"]
    assert all(ku.rollback_target(a, pr)["fingerprint"] == FP_OLD for a, pr in records.values())


def test_rollback_ignores_the_inventorys_intended_and_refuses_a_node_without_a_target():
    info_ = rb_info({"c1": (rec(STACK_NEW), None), "c2": (rec(STACK_NEW), rec(STACK_OLD)), "c3": (None, None)})
    info_["c2"]["intended"] = FP_NEW  # what the inventory says: not what a rollback goes to
    p = ku.plan(NODES, info_, None, rollback=True)
    assert p["todo"] == ["c2"] and p["unreachable"] == ["c1", "c3"] and p["rollback"]
    assert "nothing to roll back to" in p["why"]["c1"]


def test_next_record_marks_a_rollback_keeps_it_while_the_stack_stays_and_drops_it_on_a_change():
    up, prev = write(rec(STACK_OLD), STACK_NEW)
    assert ku.ROLLED_BACK_FROM not in up and prev["fingerprint"] == FP_OLD
    back, prev = write(up, STACK_OLD, rollback=True)
    assert back[ku.ROLLED_BACK_FROM] == FP_NEW and prev["fingerprint"] == FP_NEW
    # a plain converge of the same stack (gpu.yml, site.yml) or the rollback run again: still marked, unchanged
    again, prev2 = write(back, STACK_OLD)
    assert again == back and prev2 is None
    assert write(back, STACK_OLD, rollback=True)[0] == back
    # the next upgrade drops the mark: a rollback then goes to the stack before it again
    forward, prev = write(back, STACK_NEW)
    assert ku.ROLLED_BACK_FROM not in forward and ku.rollback_target(forward, prev)["fingerprint"] == FP_OLD
    # a first record and a rollback with nothing before it carry no mark
    assert ku.ROLLED_BACK_FROM not in ku.next_record(rec(STACK_OLD), None, True)
    assert ku.next_record(dict(rec(STACK_OLD), rolled_back_from="forged"), None) == rec(STACK_OLD)


@pytest.mark.parametrize("bad", [None, {}, {"stack": STACK_OLD}, {"fingerprint": 12}, "abc"])
def test_next_record_refuses_a_record_without_a_fingerprint(bad):
    with pytest.raises(ku.UpgradeConfigError, match="fingerprint"):
        ku.next_record(bad, rec(STACK_OLD))


@pytest.mark.parametrize("applied,previous,want", [
    (None, None, None), ({"fingerprint": "a"}, None, None), ("garbage", {"fingerprint": "p"}, "p"),
    ({"fingerprint": "a", "rolled_back_from": ""}, {"fingerprint": "p"}, "p"),
    ({"fingerprint": "a", "rolled_back_from": 3}, {"fingerprint": "p"}, "p"),
    ({"fingerprint": "a", "rolled_back_from": "p"}, {"fingerprint": "p"}, "a"),
    ({"rolled_back_from": "p"}, None, None)])
def test_rollback_target(applied, previous, want):
    got = ku.rollback_target(applied, previous)
    assert (got or {}).get("fingerprint") == want


_stacks = st.sampled_from([STACK_OLD, STACK_NEW, dict(STACK_NEW, nccl="2.28.7")])


@settings(max_examples=200)
@given(history=st.lists(st.tuples(_stacks, st.booleans()), min_size=1, max_size=6), reruns=st.integers(1, 3))
def test_a_rollback_run_again_never_moves_a_node_off_the_stack_it_rolled_back_to(history, reruns):
    applied, previous = ku.next_record(rec(STACK_OLD)), None
    for stack, rollback in history:
        applied, changed_from = write(applied, stack, rollback)
        previous = changed_from or previous
    target = ku.rollback_target(applied, previous)
    if target is None:
        return
    # the rollback writes its target (interrupted at any point after that write), then runs again
    applied2, moved = write(applied, target["stack"], rollback=True)
    previous2 = moved or previous
    for _ in range(reruns):
        assert ku.rollback_target(applied2, previous2)["fingerprint"] == target["fingerprint"]
        p = ku.plan(["c1"], rb_info({"c1": (applied2, previous2)}), sinfo({"c1": ("idle", "")}), rollback=True)
        assert p["done"] == ["c1"]
        applied2, again = write(applied2, target["stack"], rollback=True)
        assert again is None


# --- the batch account: a rollout stops on any node it cannot account for (issue 31, why 1) ---------

def batch_plan(batch) -> dict:
    return ku.plan(["c1", "c2", "c3", "c4"], {n: {"reachable": True, "intended": FP_NEW, "applied": {"fingerprint": FP_OLD}}
                                              for n in ["c1", "c2", "c3", "c4"]}, None, batch=batch)


UP = {"state": "upgraded", "batch": 1, "why": "burn-in PASS"}


@pytest.mark.parametrize("batch,dropped,live,number", [
    (2, "c2", ["c3", "c4"], 2),        # batch of 2: c2 dropped out, c1 verified -- batch 2 must not start
    ("50%", "c1", ["c3", "c4"], 2),    # a percentage, the same
    (1, "c1", ["c2"], 2),              # batch of 1
    (1, "c2", ["c4"], 4)])             # an earlier batch than the last one
def test_account_stops_a_batch_after_a_node_dropped_out_of_an_earlier_one(batch, dropped, live, number):
    p = batch_plan(batch)
    statuses = {n: dict(UP) for b in p["batches"][:number - 1] for n in b}
    statuses[dropped] = {"state": "started", "batch": 1 if batch != 1 else p["todo"].index(dropped) + 1, "why": "x"}
    a = ku.account(p, statuses, live)
    assert a["stop"] and a["batch"] == number and list(a["nodes"]) == [dropped]
    assert a["nodes"][dropped].startswith(f"unreachable during batch {statuses[dropped]['batch']}")
    # this batch's nodes record that nothing changed, naming the node
    assert {n: s["state"] for n, s in a["statuses"].items()} == {n: "not started" for n in live}
    assert all(f"{dropped} (unreachable during batch" in s["why"] for s in a["statuses"].values())


def test_account_lets_a_batch_start_when_every_earlier_node_is_verified():
    p = batch_plan(2)
    assert ku.account(p, {}, ["c1", "c2"]) == {"batch": 1, "stop": False, "nodes": {}, "statuses": {}, "lines": []}
    a = ku.account(p, {"c1": UP, "c2": dict(UP, state="would upgrade")}, ["c3", "c4"])
    assert not a["stop"] and a["batch"] == 2


@pytest.mark.parametrize("batch,unreachable", [(["c3", "c4"], ["c3"]), (["c4"], []), (["c4"], ["c3"])])
def test_account_names_a_node_of_this_batch_that_did_not_answer(batch, unreachable):
    a = ku.account(batch_plan(2), {"c1": UP, "c2": UP}, batch, unreachable)
    assert a["stop"] and list(a["nodes"]) == ["c3"] and "did not answer" in a["nodes"]["c3"]
    assert a["statuses"]["c3"]["state"] == "started" and a["statuses"]["c4"]["state"] == "not started"
    # the report then calls it unreachable during batch 2
    s = ku.summary(batch_plan(2), dict({"c1": UP, "c2": UP}, **a["statuses"]))
    assert s["nodes"]["c3"]["state"] == "unreachable" and s["nodes"]["c3"]["why"].startswith("unreachable during batch 2")


def test_account_names_a_whole_batch_that_did_not_answer():
    a = ku.account(batch_plan(1), {"c1": UP}, ["c2"], ["c2"])
    assert a["stop"] and a["batch"] == 2 and list(a["statuses"]) == ["c2"]
    assert a["statuses"]["c2"] == {"state": "started", "batch": 2, "why": a["nodes"]["c2"]}


@pytest.mark.parametrize("status,word", [(None, "no record"), ({}, "no record"), ("garbage", "no record"),
                                         ({"state": "not started"}, "no record"), ({"state": "bogus"}, "no record"),
                                         ({"state": "failed", "why": "burn-in FAIL"}, "failed in batch 1")])
def test_account_never_takes_an_unverified_node_for_verified(status, word):
    a = ku.account(batch_plan(2), {"c1": UP, "c2": status}, ["c3", "c4"])
    assert a["stop"] and word in a["nodes"]["c2"]


def test_account_takes_a_node_a_person_drained_after_the_plan_as_accounted_for():
    """A node the batch's drain held (someone drained it after the plan) is their decision, reported
    HELD: the next batch starts (the two fixes of issue 31 -- held drains and the batch account -- meet here)."""
    held = {"state": "held", "batch": 1, "why": "held by operator: RMA-123; left alone"}
    a = ku.account(batch_plan(2), {"c1": UP, "c2": held}, ["c3", "c4"])
    assert not a["stop"] and a["batch"] == 2
    s = ku.summary(batch_plan(2), {"c1": UP, "c2": held, "c3": UP, "c4": UP})
    assert s["nodes"]["c2"]["state"] == "held" and s["complete"]


def test_account_tolerates_failed_nodes_up_to_max_fail_percentage_but_never_an_unreachable_one():
    failed = {"state": "failed", "batch": 1, "why": "burn-in FAIL"}
    p = batch_plan(2)
    assert not ku.account(p, {"c1": UP, "c2": failed}, ["c3", "c4"], [], 50)["stop"]
    assert ku.account(p, {"c1": failed, "c2": failed}, ["c3", "c4"], [], 50)["stop"]
    assert ku.account(p, {"c1": UP, "c2": failed}, ["c3", "c4"], [], "0")["stop"]
    started = {"state": "started", "batch": 1}
    assert ku.account(p, {"c1": UP, "c2": started}, ["c3", "c4"], [], 100)["stop"]


def test_account_refuses_a_batch_that_is_not_the_plans():
    a = ku.account(batch_plan(2), {}, ["c2", "c3"])
    assert a["stop"] and a["batch"] is None and "not one batch of the plan" in a["lines"][0]
    assert ku.account(batch_plan(2), {}, [])["stop"]


@pytest.mark.parametrize("bad", [-1, 101, "ten", None, [5]])
def test_account_refuses_a_bad_max_fail_percentage(bad):
    with pytest.raises(ku.UpgradeConfigError, match="kiln_upgrade_max_fail_percentage"):
        ku.account(batch_plan(2), {}, ["c1", "c2"], [], bad)


_status = st.one_of(st.none(), st.sampled_from([UP, {"state": "failed", "why": "x"}, {"state": "started", "batch": 1},
                                                {"state": "not started"}, {"state": "would upgrade"}, {},
                                                {"state": "held", "why": "held by operator: x"}]))


@settings(max_examples=300)
@given(batch=st.sampled_from([1, 2, 3, "50%", "75%"]), data=st.data(), limit=st.integers(0, 100))
def test_account_properties(batch, data, limit):
    p = batch_plan(batch)
    number = data.draw(st.integers(1, len(p["batches"])))
    earlier = [n for b in p["batches"][:number - 1] for n in b]
    statuses = {n: data.draw(_status) for n in earlier}
    members = data.draw(st.lists(st.sampled_from(p["batches"][number - 1]), min_size=1, unique=True))
    unreachable = data.draw(st.lists(st.sampled_from(members), unique=True))
    live = [n for n in members if n not in unreachable]
    a = ku.account(p, statuses, members, unreachable, limit)
    unverified = [n for n in earlier
                  if (statuses[n] or {}).get("state") not in ("upgraded", "would upgrade", "failed", "held")]
    missing = [n for n in p["batches"][number - 1] if n not in live]
    if unverified or missing:
        assert a["stop"] and set(unverified + missing) <= set(a["nodes"])
    if not a["stop"]:
        assert a["batch"] == number and not unverified and not missing
    else:
        # nothing of this batch is taken for started except a node that did not answer
        assert {n for n, s in a["statuses"].items() if s["state"] == "started"} == set(missing)


def test_summary_names_a_node_that_dropped_out_unreachable_during_its_batch():
    p = batch_plan(2)
    s = ku.summary(p, {"c1": UP, "c2": {"state": "started", "batch": 1, "why": "batch 1 started; not verified yet"}})
    assert s["nodes"]["c2"]["state"] == "unreachable" and not s["complete"]
    assert s["nodes"]["c2"]["why"].startswith("unreachable during batch 1")
    assert s["lines"][1].startswith("c2: UNREACHABLE -- unreachable during batch 1")
    assert s["nodes"]["c3"] == {"state": "not started", "why": "its batch (2) did not run (the rollout stopped before it)"}


def test_filters_account_reads_the_status_facts():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "kiln_upgrade_filters", kiln_playbook.REPO / "filter_plugins/kiln_upgrade_filters.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    f = mod.FilterModule().filters()
    hv = {"c1": {"kiln_upgrade_status": UP}, "c2": {"kiln_upgrade_status": {"state": "started", "batch": 1}}, "c3": {}}
    a = f["kiln_upgrade_account"](batch_plan(2), hv, ["c3", "c4"], [], 0)
    assert a["stop"] and list(a["nodes"]) == ["c2"]
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="kiln_upgrade_max_fail_percentage"):
        f["kiln_upgrade_account"](batch_plan(2), hv, ["c3", "c4"], [], "x")
    with pytest.raises(AnsibleFilterError, match="plan"):
        f["kiln_upgrade_account"]("not a plan", hv, ["c3"], [], 0)
    applied = f["kiln_upgrade_next_record"](rec(STACK_OLD), rec(STACK_NEW), "true")
    assert applied[ku.ROLLED_BACK_FROM] == FP_NEW
    assert f["kiln_upgrade_rollback_target"](applied, rec(STACK_NEW)) == applied
    assert f["kiln_upgrade_plan"](["c1"], {"c1": {"reachable": True, "applied": applied, "previous": rec(STACK_NEW)}},
                                  None, None, 1, "True")["done"] == ["c1"]


# --- the batch account under real Ansible (tests/playbooks/upgrade_batches.yml) ------------------

@pytest.mark.skipif(kiln_playbook.ANSIBLE_PLAYBOOK is None or shutil.which("ssh") is None,
                    reason="needs ansible-playbook and an ssh client (a node that drops out connects to a closed port)")
@pytest.mark.parametrize("extra,changed,states,why", [
    # a batch of 2: n2 drops out mid-batch, n1 finishes; batch 2 (n3, n4) stops before it changes anything
    ({"kiln_upgrade_batch": 2, "upgrade_test_drops": "n2"}, ["n1"],
     {"n1": "upgraded", "n2": "unreachable", "n3": "not started", "n4": "not started"},
     {"n2": "unreachable during batch 1", "n3": "the rollout stopped before batch 2 changed anything: n2"}),
    # a batch of 1: the whole batch drops out, Ansible ends the run at once; the report on disk names it
    ({"kiln_upgrade_batch": 1, "upgrade_test_drops": "n2"}, ["n1"],
     {"n1": "upgraded", "n2": "unreachable", "n3": "not started", "n4": "not started"},
     {"n2": "unreachable during batch 2"}),
    # a percentage (75% of 4: 3); n4, down since the plan, does not answer batch 2's first contact either
    ({"kiln_upgrade_batch": "75%", "upgrade_test_down": "n4", "upgrade_test_drops": "n1"}, ["n2", "n3"],
     {"n1": "unreachable", "n2": "upgraded", "n3": "upgraded", "n4": "unreachable"},
     {"n1": "unreachable during batch 1", "n4": "unreachable during batch 2: it did not answer at the start"}),
])
def test_playbook_a_node_that_drops_out_stops_the_rollout_before_the_next_batch(tmp_path, extra, changed, states, why):
    out = tmp_path / "out"
    out.mkdir()
    args = ["-i", "tests/playbooks/upgrade_batches_hosts.yml", "tests/playbooks/upgrade_batches.yml",
            "-e", f"upgrade_test_dir={out}"]
    for key, value in extra.items():
        args += ["-e", f"{key}={value}"]
    res = kiln_playbook.run_playbook(*args, tmp_path=tmp_path, timeout=240)
    log = res.stdout[-4000:] + res.stderr[-2000:]
    assert res.returncode != 0, log
    # nothing changed on a node of a later batch, nor on the node that dropped out
    assert sorted(p.name for p in out.glob("changed-*")) == [f"changed-{n}" for n in changed], log
    status = json.loads((out / "test" / "status.json").read_text())
    assert {n: e["state"] for n, e in status["nodes"].items()} == states, status["lines"]
    for node, text in why.items():
        assert status["nodes"][node]["why"].startswith(text), status["lines"]
    assert not status["complete"]


@pytest.mark.skipif(kiln_playbook.ANSIBLE_PLAYBOOK is None, reason="needs ansible-playbook")
def test_playbook_batches_that_all_answer_run_to_the_end(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    res = kiln_playbook.run_playbook("-i", "tests/playbooks/upgrade_batches_hosts.yml", "tests/playbooks/upgrade_batches.yml",
                                     "-e", f"upgrade_test_dir={out}", "-e", "kiln_upgrade_batch=50%",
                                     tmp_path=tmp_path, timeout=240)
    assert res.returncode == 0, res.stdout[-4000:]
    assert len(list(out.glob("changed-*"))) == 4
    status = json.loads((out / "test" / "status.json").read_text())
    assert status["complete"] and status["written"] == "report"


@pytest.mark.skipif(kiln_playbook.ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")
@pytest.mark.parametrize("limit", [[], ["--limit", "gpu01"]])
def test_site_yml_refuses_the_retired_upgrade_switch_before_anything_runs(tmp_path, limit):
    """The rolling upgrade is playbooks/upgrade.yml only: site.yml -e kiln_upgrade=true would converge every
    node to the new stack at once, so it stops in its first play (under a --limit too), naming the entry point."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu01: {ansible_connection: local}\n")
    proc = kiln_playbook.run_playbook("-i", str(inventory), "site.yml", "-e", "kiln_upgrade=true", *limit,
                                      tmp_path=tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "playbooks/upgrade.yml" in out and "kiln_upgrade is set" in out, out
    assert "PLAY [Preflight" not in out, out
