"""Fail-closed burn-in (issue 11): expected nodes, expected GPUs, operator drains, the lock, quick
mode, non-finite numbers, relative-only floors, the fabric key and decisiveness under noise.

Each test names the issue item it guards (items 1-13 of "Why")."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest

from kiln_paths import REPO
import kiln_data
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.burnin import assemble as kb  # noqa: E402
from kiln.burnin import checks as kbc  # noqa: E402
from kiln.burnin import pair_phase as kbp  # noqa: E402
from kiln.burnin import lock as kl  # noqa: E402
from kiln.burnin import isolate as ki  # noqa: E402
from kiln import verdict as kv  # noqa: E402

FIX = REPO / "tests" / "fixtures" / "nccl-tests"
H100_TEXT = (FIX / "nccl-tests-2.13-h100-16rank-2node.txt").read_text()


def gpu_facts(count: int = 8) -> dict:
    return {"pci_gpu_count": count, "smi_gpu_count": 0, "driver_loaded": False, "source": "sysfs",
            "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(count)]}


def gpu_node(count: int = 8, **extra) -> dict:
    node = {"kiln_gpu": gpu_facts(count), "gpu_present": count > 0, "gpu_name": "NVIDIA H100 80GB HBM3",
            "sku": "h100-sxm", "xid_log": "", "engine": "nccl-tests",
            "dcgm": {"present": True, "rc": 0, "stdout": "", "stderr": ""},
            "nccl": {"ran": True, "text": H100_TEXT, "rc": 0, "timed_out": False}}
    node.update(extra)
    return node


OVERRIDES = {"h100-sxm/any/single_node": 300}


def by_id(record):
    return {c["id"]: c for c in record["checks"]}


# -- item 1: quick mode has no pair phase ------------------------------------------------------------

def test_quick_mode_plans_no_pairs():
    assert ki.first_round(["a", "b", "c", "d"], "quick") == []
    state = kiln_data.pair_start(["a", "b"], "quick", ["a", "b"], [], {}, {})
    assert state["pairs"] == []
    assert kiln_data.pair_scope(["a", "b"], "quick", None, {})["hosts"] == ["a", "b"]


# -- item 2: an expected node that sent nothing is INCOMPLETE ---------------------------------------

def test_expected_node_without_data_is_incomplete():
    out = kiln_data.assemble({"a": {"kiln_gpu": {"pci_gpu_count": 0}, "engine": "cpu"}}, mode="quick",
                      expected=["a", "gone"])
    assert out["nodes"]["gone"]["status"] == "INCOMPLETE"
    assert out["nodes"]["gone"]["checks"][0]["id"] == "burnin.reached"
    summary = kb.report("r", "quick", out, "/nonexistent", write=False)["summary"]
    assert summary["overall"]["status"] == "INCOMPLETE"
    assert summary["scope"]["expected"] == ["a", "gone"]


# -- item 3: GPUs gone -> FAIL, never the CPU engine's floor -----------------------------------------

@pytest.mark.parametrize("inventory,history", [(8, None), (None, 8), ("8", 4)])
def test_node_that_lost_its_gpus_fails(inventory, history):
    node = {"kiln_gpu": gpu_facts(0), "gpu_present": False, "expected_gpus": inventory, "history_gpus": history,
            "xid_log": "", "engine": "nccl-tests", "nccl": {"ran": False, "why": "no NVIDIA GPU on this node"}}
    out = kiln_data.assemble({"n": node}, mode="quick")
    checks = by_id(out["nodes"]["n"])
    assert out["nodes"]["n"]["status"] == "FAIL"
    assert checks["gpu.count"]["status"] == "FAIL" and checks["gpu.count"]["value"] == 0
    assert "SKIP" not in {c["status"] for c in out["nodes"]["n"]["checks"] if not c["id"].startswith("memory.")}


def test_history_gpus_and_bad_expected_values():
    assert kbp.history_gpus([{"status": "PASS", "gpus": 8}, {"status": "FAIL", "gpus": 0}]) == 8
    assert kbp.history_gpus([{"status": "PASS", "gpus": "8"}, {"status": "PASS", "gpus": True}]) is None
    for bad in ("eight", -1, 10 ** 9, 1.5e400):
        with pytest.raises(kv.KilnConfigError, match="kiln_burnin_expected_gpus"):
            kbc.expected_gpu_count(bad)


def test_no_gpu_expected_is_skipped_not_failed():
    checks = kbc.passive_checks({"pci_gpu_count": 0}, None)
    assert {c["status"] for c in checks} == {"SKIP"}


# -- item 4: a person's drain is held; the journal and the lock --------------------------------------

SINFO = {"t1": {"state": "drained", "reason": "RMA ticket 42"}, "t2": {"state": "drained", "reason": "BURNIN: x"},
         "g": {"state": "idle", "reason": ""}}


def test_person_drained_swap_target_is_held():
    state = kiln_data.pair_start(["g", "t1", "t2"], "swap", ["t1", "t2"], ["g"], {}, {}, SINFO)
    assert state["resume"] == ["t2"]
    assert state["excluded"]["t1"]["status"] == "INCOMPLETE"
    assert state["excluded"]["t1"]["why"].startswith("held by operator: RMA ticket 42")
    over = kiln_data.pair_start(["g", "t1", "t2"], "swap", ["t1", "t2"], ["g"], {}, {}, SINFO,
                         override_operator_drain=True)
    assert over["resume"] == ["t1", "t2"]


def test_actions_never_lift_a_person_drain_without_override():
    nodes = {"t1": {"status": "PASS", "checks": []}, "t2": {"status": "PASS", "checks": []}}
    before = {"t1": "RMA ticket 42", "t2": "BURNIN: x"}
    acts = {a["node"]: a for a in kb.plan_actions(nodes, "swap", before, ["t1", "t2"])}
    assert acts["t1"]["action"] == "restore" and acts["t1"]["reason"] == "RMA ticket 42"
    assert acts["t2"]["action"] == "resume"
    acts = {a["node"]: a for a in kb.plan_actions(nodes, "swap", before, ["t1", "t2"],
                                                  override_operator_drain=True)}
    assert acts["t1"]["action"] == "resume"


def test_lock_judge():
    # The lock is this run's by its run id and its invocation's token (op=identity), never by run id alone.
    me = {"host": "ops1", "pid": 10, "start": 5, "token": "t-old"}
    lock = kl.new_lock("old", {"host": "ops1", "pid": 10, "start": 5, "token": "t-old"}, now=1000, minutes=10)
    assert kiln_data.lock_judge(None, None, me, "new", 1001, None)["state"] == kl.FREE
    assert kiln_data.lock_judge(lock, None, me, "old", 1001, True)["state"] == kl.MINE
    held = kiln_data.lock_judge(lock, None, me, "new", 1001, True)
    assert held["state"] == kl.HELD and "burn-in old" in held["message"] and "pid 10" in held["message"]
    assert kiln_data.lock_judge(lock, None, me, "new", 1001, False)["state"] == kl.STALE
    assert kiln_data.lock_judge(lock, None, {"host": "ops2"}, "new", 1001, None)["state"] == kl.HELD
    assert kiln_data.lock_judge(lock, None, {"host": "ops2"}, "new", 1000 + 601, None)["state"] == kl.STALE
    assert kiln_data.lock_judge(lock, None, me, "new", 1001, True, break_lock=True)["state"] == kl.STALE
    assert kiln_data.lock_judge(None, "lock file is not JSON", me, "new", 1001, None)["state"] == kl.STALE


def test_lock_refuses_a_second_run_with_the_same_run_id():
    first = {"host": "ops1", "pid": 10, "start": 5, "user": "ops", "token": "aaaa1111"}
    second = dict(first, pid=11, start=6, token="bbbb2222")
    lock, _ = kl.parse(json.dumps(kl.new_lock("20260101T000000Z-default", first, now=1000, minutes=10)))
    assert kl.holds(lock, "20260101T000000Z-default", first)
    assert not kl.holds(lock, "20260101T000000Z-default", second)
    assert not kl.holds(lock, "20260101T000000Z-default", dict(first, token=""))  # no token: never the holder
    assert not kl.holds(lock, "other", first)
    held = kiln_data.lock_judge(lock, None, dict(second, host="ops1"), "20260101T000000Z-default", 1001, True)
    assert held["state"] == kl.HELD and "the same run id as this run" in held["message"]
    assert "since 1970-01-01T00:16:40Z" in held["message"]  # the start, in UTC
    # a lock written without a token (an older kiln) is nobody's: its owner process decides
    legacy, _ = kl.parse(json.dumps(kl.new_lock("x", {"host": "ops1", "pid": 10, "start": 5}, now=1000, minutes=10)))
    assert kiln_data.lock_judge(legacy, None, dict(first, host="ops1"), "x", 1001, True)["state"] == kl.HELD
    assert kiln_data.lock_judge(legacy, None, dict(first, host="ops1"), "x", 1001, False)["state"] == kl.STALE
    assert kl.same_holder(legacy, dict(legacy)) and not kl.same_holder(lock, legacy)


@pytest.mark.parametrize("text", ["", "{", "[]", '{"run_id": 5}', "x" * (2 << 20), '[' * 100000, b"\xff\xfe"])
def test_lock_parse_never_raises(text):
    lock, problem = kl.parse(text)
    assert lock is None and problem


def test_lock_journal_and_reservations():
    lock, _ = kl.parse(json.dumps({"run_id": "a", "restore": {"n1": "BURNIN: x", "n2": "RMA"}, "settled": ["n2"],
                                   "owner": {"host": "h", "pid": "12"}}))
    assert kl.unsettled(lock) == {"n1": "BURNIN: x"}
    assert lock["owner"]["pid"] == 12
    show = ("ReservationName=kiln-burnin-a StartTime=now Nodes=n1\nReservationName=maint Nodes=x\n"
            "ReservationName=kiln-burnin-b Nodes=n2\n")
    assert kl.stale_reservations(show, keep="kiln-burnin-b") == ["kiln-burnin-a"]


def test_playbook_process_walks_to_the_main_process(tmp_path):
    # fake /proc: 50 (bash) -> 40 (ansible-playbook main) -> 30 (worker, same cmdline) -> 20 (module)
    tree = {20: (30, ["python3", "/tmp/AnsiballZ_x.py"]), 30: (40, ["python3", "/v/bin/ansible-playbook", "x.yml"]),
            40: (50, ["python3", "/v/bin/ansible-playbook", "x.yml"]), 50: (1, ["bash"])}
    for pid, (ppid, argv) in tree.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (x y) S {ppid} " + " ".join(["0"] * 17) + " 777 0\n")
    assert kl.playbook_process(20, str(tmp_path)) == 40
    assert kl.proc_start(40, str(tmp_path)) == 777
    assert kl.proc_start(99, str(tmp_path)) is None


# -- item 5: non-finite numbers ----------------------------------------------------------------------

@pytest.mark.parametrize("value", [math.inf, math.nan, -1.0, "inf", None])
def test_non_finite_pair_value_is_incomplete(value):
    results = [{"pair": ["a", "b"], "verdict": "PASS", "value": value},
               {"pair": ["c", "d"], "verdict": "PASS", "value": 1.0}]
    ki.rejudge(results, {}, 0.1)
    assert results[0]["status"] == ki.PAIR_INCOMPLETE
    assert results[1]["status"] == ki.PAIR_PASS


def test_non_finite_baseline_does_not_poison_the_reference():
    ref = ki.pair_reference(["a", "b"], [{"pair": ["c", "d"], "value": 1.0, "status": "PASS"}],
                            {"a": math.inf, "b": math.nan})
    assert ref["value"] == 1.0 and ref["baselines"] == 0


@pytest.mark.parametrize("floor", [math.nan, math.inf, -5, "nan"])
def test_non_finite_floor_override_is_a_config_error(floor):
    with pytest.raises(kv.KilnConfigError):
        kv.lookup_floor(kiln_data.floors(), "cpu", "tcp", "two_node_ring", overrides={"cpu/tcp/two_node_ring": floor})


def test_enforce_checks_demotes_non_finite_pass():
    checks = kbc.enforce_checks([kv.make_check("x", "PASS", value=math.inf)], [], "default")
    assert checks[0]["status"] == "INCOMPLETE"
    checks = kbc.enforce_checks([kv.make_check("gpu.count", "SKIP")], ["gpu.count", "nccl.pair.all_reduce"],
                               "default")
    assert [c["status"] for c in checks] == ["INCOMPLETE", "INCOMPLETE"]


# -- item 13: relative-only floors for every GPU model kiln knows --------------------------------------

def test_every_known_gpu_model_has_a_floor_or_a_relative_rule():
    import yaml

    compat = yaml.safe_load((REPO / "data" / "compat.yml").read_text())
    floors = kiln_data.floors()
    missing = []
    for model, spec in compat["gpus"].items():
        for pci, variant in (spec.get("variants") or {}).items():
            name = variant.get("name") or model
            if kv.sku_from_gpu_name(floors, name) is None:
                missing.append(f"{model} {pci} {name}")
    assert not missing, "GPU models without a floors SKU (add a floor or relative_only): " + ", ".join(missing)


def test_relative_only_sku_warns_and_fails_below_the_fleet():
    floors = kiln_data.floors()
    spec = kv.lookup_floor(floors, "l40s", "any", "single_node")
    assert spec["relative_only"] and spec["value"] is None
    node = gpu_node(sku="l40s", gpu_name="NVIDIA L40S")
    out = kiln_data.assemble({"a": node}, mode="quick", floors=floors)
    single = by_id(out["nodes"]["a"])["nccl.single_node.all_reduce"]
    assert single["status"] == "WARN" and "no absolute floor" in single["detail"]
    assert single["relative_only"] is True and math.isfinite(single["value"])

    def record(value):
        item = kv.make_check("nccl.single_node.all_reduce", "WARN", value=value, relative_only=True, detail="x")
        return {"checks": [item], "gpu_sku": "l40s", **kv.aggregate_node([item])}

    nodes = {"a": record(300.0), "b": record(301.0), "c": record(299.0), "d": record(150.0), "e": record(290.0)}
    kbc.relative_single_node(nodes, {"e": {"value": 400.0}}, 0.10)
    assert nodes["d"]["status"] == "FAIL" and "fleet median" in nodes["d"]["checks"][0]["detail"]
    assert nodes["e"]["status"] == "FAIL" and "own baseline" in nodes["e"]["checks"][0]["detail"]
    assert nodes["a"]["status"] == "WARN"


# -- item 13: fabric key from facts --------------------------------------------------------------------

def test_fabric_key_from_rdma_ports():
    ib = [{"port": "mlx5_0/1", "link_layer": "InfiniBand", "state": "4: ACTIVE", "rate": "400 Gb/sec (4X NDR)"}]
    roce = [{"port": "mlx5_0/1", "link_layer": "Ethernet", "state": "4: ACTIVE", "rate": "400 Gb/sec (4X)"}]
    down = [{"port": "mlx5_0/1", "link_layer": "InfiniBand", "state": "1: DOWN", "rate": "10 Gb/sec"}]
    assert kbp.fabric_key({"a": ib, "b": ib})["key"] == "ib_ndr"
    assert kbp.fabric_key({"a": roce, "b": roce})["key"] == "roce400"
    assert kbp.fabric_key({"a": ib, "b": down})["key"] == "tcp"
    assert kbp.fabric_key({"a": ib, "b": roce})["key"] == "tcp"
    assert kbp.fabric_key({})["key"] == "tcp"
    assert kbp.fabric_key({"a": [{"rate": "junk", "state": "ACTIVE"}], "b": None})["key"] == "tcp"


# -- item 12: decisive under noise ------------------------------------------------------------------

def test_noise_is_measured_and_reported():
    results = [{"pair": [f"n{i}", f"m{i}"], "status": "PASS", "value": v} for i, v in
               enumerate([1.0, 1.02, 0.98, 1.01, 0.99])]
    low = ki.noise(results, 0.10)
    assert low["sigma"] < 0.05 and low["separable"] is True and low["fix"] is None
    results = [{"pair": [f"n{i}", f"m{i}"], "status": "PASS", "value": v} for i, v in
               enumerate([1.0, 1.3, 0.7, 1.2, 0.8])]
    high = ki.noise(results, 0.10)
    assert high["separable"] is False and "kiln_burnin_pair_band" in high["fix"]


def test_undecided_node_resolved_by_more_evidence():
    # a: one SLOW pair and one MARGINAL pair, but its median ratio is close to the reference
    results = [{"pair": ["a", "b"], "status": ki.PAIR_SLOW, "value": 0.88, "reference": {"value": 1.0}},
               {"pair": ["a", "c"], "status": ki.PAIR_PASS, "value": 1.0, "reference": {"value": 1.0}},
               {"pair": ["a", "d"], "status": ki.PAIR_MARGINAL, "value": 0.97, "reference": {"value": 1.0}},
               {"pair": ["b", "c"], "status": ki.PAIR_PASS, "value": 1.0, "reference": {"value": 1.0}},
               {"pair": ["b", "d"], "status": ki.PAIR_PASS, "value": 1.0, "reference": {"value": 1.0}},
               {"pair": ["c", "d"], "status": ki.PAIR_PASS, "value": 1.0, "reference": {"value": 1.0}}]
    out = ki.finish(["a", "b", "c", "d"], results, band=0.10)
    assert out["a"]["state"] == ki.CLEARED and out["a"]["decided_by"] == "median"
    # a bad node stays far below: never cleared by the median rule
    bad = [dict(r, value=0.6, status=ki.PAIR_SLOW) if "a" in r["pair"] else r for r in results]
    bad[1]["status"] = ki.PAIR_PASS
    out = ki.finish(["a", "b", "c", "d"], bad, band=0.10)
    assert out["a"]["state"] != ki.CLEARED


def test_small_cluster_repeats_a_pair_for_more_evidence():
    results = [{"pair": ["a", "b"], "status": ki.PAIR_MARGINAL, "value": 0.93},
               {"pair": ["a", "c"], "status": ki.PAIR_MARGINAL, "value": 0.93},
               {"pair": ["a", "d"], "status": ki.PAIR_MARGINAL, "value": 0.93},
               {"pair": ["b", "c"], "status": ki.PAIR_PASS, "value": 1.0},
               {"pair": ["b", "d"], "status": ki.PAIR_PASS, "value": 1.0},
               {"pair": ["c", "d"], "status": ki.PAIR_PASS, "value": 1.0}]
    nxt = ki.next_round(["a", "b", "c", "d"], results)
    assert any("a" in p for p in nxt), nxt


# -- item 13: no predictable /tmp path, private directory --------------------------------------------

def test_no_predictable_tmp_paths_in_the_burnin_playbooks():
    paths = [REPO / "playbooks" / "burnin.yml", *sorted((REPO / "roles" / "burnin" / "tasks").glob("*.yml"))]
    assert len(paths) == 14
    for path in paths:
        text = path.read_text()
        assert not re.search(r"(^|[\s'\"=\[,])/tmp/", text, re.MULTILINE), path
    assert "/var/lib/kiln/burnin/tmp" in (REPO / "roles" / "burnin" / "tasks" / "preflight.yml").read_text()


# -- item 5: hostile all_reduce outputs never PASS (verdict level; the parser's own tests are in
#    test_kiln_nccl.py) -------------------------------------------------------------------------------

def _judge(text: str) -> dict:
    floor = kv.lookup_floor(kiln_data.floors(), "h100-sxm", "any", "single_node", overrides=OVERRIDES)
    return kbc.nccl_check("nccl.single_node.all_reduce", {"text": text, "rc": 0}, floor)


def _rows(text: str) -> list:
    return [i for i, line in enumerate(text.splitlines()) if line.strip()[:1].isdigit()]


def test_healthy_output_passes():
    assert _judge(H100_TEXT)["status"] == "PASS"


@pytest.mark.parametrize("token", ["inf", "1e999", "nan", "-338.31", "Infinity"])
def test_non_finite_busbw_never_passes(token):
    lines = H100_TEXT.splitlines()
    last = _rows(H100_TEXT)[-1]
    tokens = lines[last].split()
    tokens[7] = token  # out-of-place busbw of the largest size
    lines[last] = "  ".join(tokens)
    check = _judge("\n".join(lines) + "\n")
    assert check["status"] in ("INCOMPLETE", "FAIL"), check
    assert check["value"] is None or math.isfinite(check["value"])


def test_data_check_off_is_incomplete():
    lines = H100_TEXT.splitlines()
    for i in _rows(H100_TEXT):
        tokens = lines[i].split()
        tokens[8] = tokens[12] = "N/A"  # #wrong, out-of-place and in-place
        lines[i] = "  ".join(tokens)
    check = _judge("\n".join(lines) + "\n")
    assert check["status"] == "INCOMPLETE" and "data check disabled" in check["detail"]


def test_rows_and_footer_without_header_are_incomplete():
    lines = H100_TEXT.splitlines()
    rows = [lines[i] for i in _rows(H100_TEXT)[-3:]]
    footer = [line for line in lines if "Out of bounds" in line or "Avg bus bandwidth" in line]
    check = _judge("\n".join(rows + footer) + "\n")
    assert check["status"] == "INCOMPLETE", check


def test_complete_run_followed_by_a_cut_off_run_is_incomplete():
    check = _judge(H100_TEXT + H100_TEXT[: len(H100_TEXT) // 2])
    assert check["status"] == "INCOMPLETE", check


def test_all_reduce_result_from_a_node_without_gpus_is_contradictory():
    """Found by the property test: 0 GPUs on PCI, none expected, yet a passing single-node result."""
    node = gpu_node(0, expected_gpus=0)
    node["nccl"] = {"ran": True, "text": H100_TEXT, "rc": 0}
    out = kiln_data.assemble({"n": node}, mode="quick", overrides=OVERRIDES)
    assert by_id(out["nodes"]["n"])["nccl.single_node.all_reduce"]["status"] == "INCOMPLETE"
    assert out["nodes"]["n"]["status"] == "INCOMPLETE"


def test_noise_leaves_out_the_blamed_nodes_pairs():
    healthy = [{"pair": [f"n{i}", f"m{i}"], "status": "PASS", "value": v} for i, v in
               enumerate([1.0, 1.02, 0.98, 1.01])]
    faulty = [{"pair": ["bad", f"m{i}"], "status": "SLOW", "value": 0.4} for i in range(3)]
    assert ki.noise(healthy + faulty, 0.2)["pairs"] == 7
    kept = ki.noise(healthy + faulty, 0.2, exclude=["bad"])
    assert kept["pairs"] == 4 and kept["separable"] is True and kept["sigma"] < 0.05
