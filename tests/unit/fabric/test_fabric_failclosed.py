"""Fabric verdicts fail closed (issue 31, the fabric part: defects 3, 4, 5 and parts of 11).

Counters judged by port identity and direction; a failing run never writes the next baseline; the
counters read again after the run's own traffic and judged in the same run; ib_write_bw rails that
never shift and never go unmeasured silently; acceptance mode needs an expectation; netdev names
refused before they reach a path. Each test names the defect it guards."""

from __future__ import annotations

import copy
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln.burnin import baseline as kiln_baseline
from kiln.burnin import assemble as kb
from kiln.burnin import pair_phase as pp
from kiln.facts import fabric as kiln_fabric
from kiln.burnin import fabric_checks as fc
from kiln.burnin import rdma as ff  # the RDMA pair filters (registry: filter_plugins/kiln_fabric_filters.py)
from kiln.facts import netdev as kiln_netdev
from kiln.burnin import fabric_pairs as fp
from kiln_loader import load_source
from kiln_playbook import ANSIBLE_PLAYBOOK, run_playbook

from kiln_paths import REPO
import kiln_data
RDMA = REPO / "tests" / "fixtures" / "rdma"
RULES = kiln_data.fabric_rules()
EXPECT = {"ports": 8, "rate_gbps": 400, "width": "4X", "link_layer": "InfiniBand", "exclude": ["mlx5_8"]}
FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOOLS = {"kiln-cpu-allreduce": "/usr/local/bin/kiln-cpu-allreduce", "mpirun": "/usr/bin/mpirun",
         "iperf3": "/usr/bin/iperf3", "required": ["kiln-cpu-allreduce", "mpirun", "iperf3"]}


def guid(index: int, machine: int = 0) -> str:
    return f"a088:c203:{machine:02x}{index:02x}:{0x1000 + index:04x}"


def facts(counters: dict[int, dict[str, int]] | None = None, down: tuple[int, ...] = (), machine: int = 0,
          guids: dict[int, str] | None = None, fw: str = "28.39.1002") -> dict[str, Any]:
    """8 x NDR + storage mlx5_8, each port with its own GUID (GID 0 carries it, as sysfs does)."""
    hcas = []
    for index in range(9):
        values = {c: 0 for c in fc.ERROR_COUNTERS}
        values.update((counters or {}).get(index, {}))
        g = (guids or {}).get(index) or guid(index, machine)
        state, phys = ("DOWN", "Polling") if index in down else ("ACTIVE", "LinkUp")
        rate, speed, layer = (200.0, "HDR", "Ethernet") if index == 8 else (400.0, "NDR", "InfiniBand")
        port = {"port": 1, "state": state, "state_code": 1 if index in down else 4, "phys_state": phys,
                "phys_state_code": 2 if index in down else 5, "rate": f"{rate:g} Gb/sec (4X {speed})",
                "rate_gbps": rate, "width": "4X", "speed": speed, "link_layer": layer, "lid": 1, "sm_lid": 1,
                "gid0": f"fe80:0000:0000:0000:{g}", "netdevs": [f"ibp{index}s0"], "counters": values}
        hcas.append({"name": f"mlx5_{index}", "hca_type": "MT4129", "model": "ConnectX-7", "fw_ver": fw,
                     "board_id": "MT_0000000838", "node_guid": g, "sys_image_guid": g, "ports": [port]})
    return {"schema": "kiln.fabric/v1", "sysfs_root": "/sys", "hcas": hcas, "problems": [],
            "gpudirect": {"kernel": "6.1.0-28-amd64", "nvidia_loaded": True, "open_modules": True,
                          "peermem_loaded": False, "dma_buf_kernel": True}}


def baseline_record(node_facts: dict[str, Any], status: str = "PASS", run_id: str = "r0") -> dict[str, Any]:
    """A history record as kiln writes a passing run's: counter snapshot and port identity."""
    record = kiln_baseline.record(run_id, "2026-01-01T00:00:00Z", "default", status, {}, {})
    record["fabric"] = {"counters": fc.counter_snapshot(node_facts), "identity": fc.counter_identity(node_facts),
                        "ports": fc.history_fabric(node_facts, fc.expected_ports(node_facts, EXPECT))["ports"]}
    return record


def counters_check(now: dict[str, Any], previous: Any) -> dict[str, Any]:
    expected = fc.expected_ports(now, EXPECT, host="gpu01")
    checks = {c["id"]: c for c in fc.passive_fabric_checks(now, expected, previous, RULES, {"method": "dma_buf"}, True)}
    return checks["fabric.counters"]


def node(fab: dict[str, Any], history: dict[str, Any] | None = None, after: Any = "same",
         expect: Any = EXPECT) -> dict[str, Any]:
    data = {"tools": TOOLS, "kiln_gpu": {"pci_gpu_count": 0}, "nccl": {"ran": False},
            "fabric": {"facts": fab, "expect": expect, "history": history or {}, "gpudirect": {"method": "dma_buf"},
                       "socket_ifname": "eth0"}}
    if after is not None:
        data["fabric_after"] = {"facts": copy.deepcopy(fab) if after == "same" else after}
    return data


def run(state: Path, run_id: str, fab: dict[str, Any], after: Any = "same", mode: str = "quick",
        **extra: Any) -> dict[str, Any]:
    """One burn-in of node c1 through assemble + report, history in *state* (as the playbook does)."""
    history = pp.fabric_history(kiln_baseline.load(str(state), "c1"))
    data = node(fab, history, after)
    data.update(extra)
    out = kiln_data.assemble({"c1": data}, [], mode=mode)
    kb.report(run_id, mode, out, str(state.parent / run_id), state_dir=str(state))
    return out["nodes"]["c1"]


def check_of(record: dict[str, Any], cid: str) -> dict[str, Any]:
    return next(c for c in record["checks"] if c["id"] == cid)


# -- defect 3: a lower counter, a changed GUID, another port's history -----------------------------


def test_lower_counters_than_the_history_are_judged_on_absolute_values():
    """The exact reproduction: previous link_downed=200, symbol_error=5000; now 150/4000."""
    before = facts({1: {"link_downed": 200, "symbol_error": 5000}})
    now = facts({1: {"link_downed": 150, "symbol_error": 4000}})
    fresh = counters_check(now, None)
    assert fresh["status"] == "FAIL"
    for history in (lambda: fc.counter_snapshot(before), lambda: pp.fabric_history([baseline_record(before)])["counters"]):
        got = counters_check(now, history())
        assert got["status"] == "FAIL", got["detail"]
        assert "mlx5_1/1 link_downed 150 < 200 before" in got["detail"] and "(fail >= 3)" in got["detail"]
        assert "symbol_error 4000 < 5000 before" in got["detail"]


def test_lower_counters_through_the_burnin_history(tmp_path: Path):
    state = tmp_path / "history"
    kiln_baseline.append(str(state), "c1", baseline_record(facts({1: {"link_downed": 200, "symbol_error": 5000}})))
    record = run(state, "r1", facts({1: {"link_downed": 150, "symbol_error": 4000}}))
    assert record["status"] == "FAIL" and check_of(record, "fabric.counters")["status"] == "FAIL"


def test_a_changed_guid_is_a_baseline_reset():
    before = facts({1: {"symbol_error": 5000}})
    swapped = facts({1: {"symbol_error": 5005}}, guids={1: "b0b0:c203:0001:2001"})
    got = counters_check(swapped, pp.fabric_history([baseline_record(before)])["counters"])
    assert got["status"] == "FAIL", got["detail"]
    assert "mlx5_1/1: GUID a088:c203:0001:1001 in the baseline, b0b0:c203:0001:2001 now" in got["detail"]
    assert "mlx5_1/1 symbol_error 5005 since the counters were cleared (baseline reset) (fail >= 100)" in got["detail"]
    assert got["baseline_reset"] == ["mlx5_1/1"]
    same = counters_check(facts({1: {"symbol_error": 5005}}), pp.fabric_history([baseline_record(before)])["counters"])
    assert same["status"] == "PASS" and same["baseline_reset"] == []


def test_a_history_from_another_port_or_machine_is_a_baseline_reset():
    # mlx5_1's baseline entry carries mlx5_2's GUID (and the reverse): not this port's history
    crossed = facts({1: {"symbol_error": 5000}, 2: {"symbol_error": 5000}}, guids={1: guid(2), 2: guid(1)})
    now = facts({1: {"symbol_error": 5005}, 2: {"symbol_error": 5005}})
    record = baseline_record(crossed)
    record["fabric"]["counters"]["mlx5_2/1"]["symbol_error"] = 0  # so the GUID match, not the name, decides
    got = counters_check(now, pp.fabric_history([record])["counters"])
    # mlx5_1 (GUID 1) is matched with the entry named mlx5_2/1 (GUID 1, 0 errors): +5005 since it
    assert got["status"] == "FAIL" and "mlx5_1/1 symbol_error +5005 since run r0" in got["detail"]
    other = facts({1: {"symbol_error": 5000}}, machine=7)  # another machine under this host name
    got = counters_check(now, pp.fabric_history([baseline_record(other)])["counters"])
    assert got["status"] == "FAIL" and "another machine" in got["detail"]
    assert sorted(got["baseline_reset"]) == [f"mlx5_{i}/1" for i in range(8)]


def test_a_renamed_port_keeps_its_baseline_by_guid():
    before = facts({7: {"symbol_error": 5000}}, guids={7: guid(1), 1: guid(7)})
    now = facts({1: {"symbol_error": 5005}})
    got = counters_check(now, pp.fabric_history([baseline_record(before)])["counters"])
    assert got["status"] == "PASS" and "same GUID as mlx5_7/1 in the baseline (renamed)" in got["detail"]


def test_firmware_change_or_no_guid_or_an_old_history_is_judged_absolute():
    before = facts({1: {"symbol_error": 5000}})
    flashed = facts({1: {"symbol_error": 5005}}, fw="28.40.1000")
    got = counters_check(flashed, pp.fabric_history([baseline_record(before)])["counters"])
    assert got["status"] == "FAIL" and "fw_ver 28.39.1002 -> 28.40.1000" in got["detail"]
    legacy = baseline_record(before)
    del legacy["fabric"]["identity"]  # written by kiln before it kept GUIDs
    got = counters_check(facts({1: {"symbol_error": 5005}}), pp.fabric_history([legacy])["counters"])
    assert got["status"] == "FAIL" and "no port GUIDs" in got["detail"]
    blind = facts({1: {"symbol_error": 5005}})
    for hca in blind["hcas"]:
        hca["node_guid"], hca["ports"][0]["gid0"] = None, None
    got = counters_check(blind, pp.fabric_history([baseline_record(before)])["counters"])
    assert got["status"] == "FAIL" and "no port GUID in the facts" in got["detail"]


@FAST
@given(st.dictionaries(st.sampled_from(fc.ERROR_COUNTERS), st.tuples(st.integers(0, 10 ** 6), st.integers(0, 10 ** 6)),
                       min_size=1, max_size=6),
       st.booleans())
def test_a_decrease_is_never_passed_through_a_delta(values, identified):
    """Property: a counter lower than its baseline is judged on its absolute value, never on a delta."""
    before = facts({3: {name: old for name, (old, _) in values.items()}})
    now = facts({3: {name: new for name, (_, new) in values.items()}})
    previous = pp.fabric_history([baseline_record(before)])["counters"] if identified else fc.counter_snapshot(before)
    got = counters_check(now, previous)
    for name, (old, new) in values.items():
        rule = RULES["counters"][name]
        judged = new if new < old else new - old
        if rule["fail"] is not None and judged >= rule["fail"]:
            assert got["status"] == "FAIL", (name, old, new, got["detail"])
        elif judged >= rule["warn"] or (new < old and new >= rule["warn"]):
            assert got["status"] != "PASS", (name, old, new, got["detail"])
    if got["status"] == "PASS":
        assert all((new if new < old else new - old) < RULES["counters"][n]["warn"] for n, (old, new) in values.items())


# -- defect 4: a FAIL or INCOMPLETE run never writes a baseline -----------------------------------


def test_a_failing_run_never_becomes_the_next_baseline(tmp_path: Path):
    state = tmp_path / "history"
    assert run(state, "r1", facts())["status"] == "PASS"
    bad = facts({1: {"symbol_error": 150}})
    first = run(state, "r2", bad)
    assert first["status"] == "FAIL" and "+150" in check_of(first, "fabric.counters")["detail"]
    again = run(state, "r3", bad)  # the immediate swap re-run, nothing repaired
    assert again["status"] == "FAIL", check_of(again, "fabric.counters")
    assert "mlx5_1/1 symbol_error +150 since run r1" in check_of(again, "fabric.counters")["detail"]
    records = kiln_baseline.load(str(state), "c1")
    assert records[0]["fabric"]["counters"]["mlx5_1/1"]["symbol_error"] == 0 and records[0]["fabric"]["identity"]
    for failed in records[1:]:
        assert "counters" not in failed["fabric"]
        assert "never writes a counter baseline" in failed["fabric"]["baseline_kept"]


def test_an_incomplete_run_never_becomes_the_next_baseline(tmp_path: Path):
    state = tmp_path / "history"
    assert run(state, "r1", facts())["status"] == "PASS"
    # counters below warn, but the node INCOMPLETE (its counters were never read after the traffic)
    incomplete = run(state, "r2", facts({1: {"symbol_error": 5}}), after=None)
    later = run(state, "r3", facts({1: {"symbol_error": 12}}))
    counters = check_of(later, "fabric.counters")
    assert counters["status"] == "WARN" and "mlx5_1/1 symbol_error +12 since run r1" in counters["detail"]
    assert incomplete["status"] == "INCOMPLETE"
    assert "counters" not in kiln_baseline.load(str(state), "c1")[1]["fabric"]


def test_old_failing_records_with_counters_are_not_a_baseline():
    """History written by kiln before this change kept every run's counters, FAIL included."""
    good = baseline_record(facts(), "PASS", "r1")
    failed = baseline_record(facts({1: {"symbol_error": 150}}), "FAIL", "r2")
    got = pp.fabric_history([good, failed])["counters"]
    assert got["run_id"] == "r1" and got["counters"]["mlx5_1/1"]["symbol_error"] == 0


# -- defect 5: counters read again after the run's traffic, growth judged in the same run -----------


def test_growth_during_the_run_is_judged_in_the_same_run(tmp_path: Path):
    state = tmp_path / "history"
    record = run(state, "r1", facts(), after=facts({2: {"symbol_error": 40}}))
    assert record["status"] == "FAIL"
    during = check_of(record, "fabric.counters.during_run")
    assert during["status"] == "FAIL"
    assert "mlx5_2/1 symbol_error +40 during this run (fail >= 10)" in during["detail"]
    assert check_of(record, "fabric.counters")["status"] == "PASS"  # the read before the traffic was clean
    assert "counters" not in kiln_baseline.load(str(state), "c1")[-1]["fabric"]
    downed = run(state, "r2", facts(), after=facts({4: {"link_downed": 1}}))
    assert check_of(downed, fc.DURING_RUN_CHECK)["status"] == "FAIL"  # burnin.md 6.3: LinkDowned > 0 in the soak


def test_during_the_run_a_lost_or_unread_port_never_passes(tmp_path: Path):
    state = tmp_path / "history"
    gone = facts()
    del gone["hcas"][3]
    assert check_of(run(state, "r1", facts(), after=gone), fc.DURING_RUN_CHECK)["status"] == "FAIL"
    flapped = check_of(run(state, "r2", facts(), after=facts(down=(6,))), fc.DURING_RUN_CHECK)
    assert flapped["status"] == "FAIL" and "mlx5_6/1 DOWN (Polling) after the run's traffic" in flapped["detail"]
    unread = run(state, "r3", facts(), after=None)
    assert check_of(unread, fc.DURING_RUN_CHECK)["status"] == "INCOMPLETE" and unread["status"] == "INCOMPLETE"
    cleared = check_of(run(state, "r4", facts({1: {"symbol_error": 9}}), after=facts()), fc.DURING_RUN_CHECK)
    assert cleared["status"] == "INCOMPLETE" and "cleared or reset during the run" in cleared["detail"]


def test_the_reread_filter_names_what_was_not_read():
    results = [{"__reread_node": "c1", "ansible_loop_var": "__reread_node", "ansible_facts": {"kiln_fabric": facts()}},
               {"__reread_node": "c2", "ansible_loop_var": "__reread_node", "unreachable": True, "msg": "gone"}]
    assert ff.kiln_fabric_reread("c1", results)["fabric_after"]["facts"]["schema"] == "kiln.fabric/v1"
    assert "unreachable" in ff.kiln_fabric_reread("c2", results)["fabric_after"]["why"]
    assert ff.kiln_fabric_reread("c3", results)["fabric_after"] == {"facts": None, "why": "c3 was not read after the "
                                                                                         "run's traffic"}


# -- defect 11: rail pairing with a down port --------------------------------------------------------


def _plan_and_judge(node_facts: dict[str, dict[str, Any]]) -> tuple[list, dict]:
    data = {n: {"facts": f, "expect": EXPECT, "history": {}} for n, f in node_facts.items()}
    plan = ff.kiln_rdma_pair_plan(data, 18515)
    results = [None if e.get("unmeasured") else {"ok": True, "problems": [], "device": e["client_hca"],
                                                 "bw_avg_gbps": 392.0, "rc": 0, "timed_out": False} for e in plan]
    return plan, fp.judge_rdma_bw(plan, results, RULES)


def test_two_nodes_with_a_down_port_never_both_pass_with_a_rail_unmeasured():
    plan, out = _plan_and_judge({"c1": facts(down=(1,)), "c2": facts()})
    assert not (out["c1"][0]["status"] == "PASS" and out["c2"][0]["status"] == "PASS")
    pairs = [e for e in plan if not e.get("unmeasured")]
    assert all(e["client_hca"] == e["server_hca"] for e in pairs), "rails shifted by the down port"
    assert sorted(e["client_hca"] for e in pairs) == [f"mlx5_{i}" for i in range(8) if i != 1]
    assert out["c2"][0]["status"] == "INCOMPLETE"
    assert "mlx5_1 (rail 1) not measured: no other node has rail 1 ACTIVE (c1 mlx5_1 not ACTIVE)" in out["c2"][0]["detail"]
    assert "mlx5_1 (rail 1) not measured: its port mlx5_1/1 is DOWN (Polling) (fabric.ports)" in out["c1"][0]["detail"]
    # the down port is the node's own finding
    checks = {c["id"]: c for c in fc.passive_fabric_checks(facts(down=(1,)), fc.expected_ports(facts(down=(1,)), EXPECT),
                                                           None, RULES, {"method": "dma_buf"}, True)}
    assert checks["fabric.ports"]["status"] == "FAIL" and "mlx5_1/1 DOWN" in checks["fabric.ports"]["detail"]


def test_three_nodes_measure_the_rail_of_a_down_port_between_the_others():
    plan, out = _plan_and_judge({"c1": facts(down=(1,)), "c2": facts(), "c3": facts()})
    assert out["c2"][0]["status"] == out["c3"][0]["status"] == "PASS"
    rail1 = [e for e in plan if e["rail"] == 1 and not e.get("unmeasured")]
    assert [(e["client"], e["server"]) for e in rail1] == [("c2", "c3")]
    assert out["c2"][0]["status"] == out["c3"][0]["status"] == "PASS"
    assert out["c1"][0]["status"] == "INCOMPLETE"


def test_a_node_with_every_port_down_leaves_its_partner_incomplete():
    all_down = facts(down=tuple(range(8)))
    plan, out = _plan_and_judge({"c1": all_down, "c2": facts()})
    assert out["c2"][0]["status"] == "INCOMPLETE"
    assert [e for e in plan if not e.get("unmeasured")] == []


@FAST
@given(st.integers(2, 5), st.lists(st.sets(st.integers(0, 7), max_size=3), min_size=5, max_size=5))
def test_a_passing_rdma_check_measured_every_expected_port(count, downs):
    """Property: rdma.write_bw PASS implies every expected port of the node was measured, rail-matched."""
    names = [f"c{i}" for i in range(count)]
    plan, out = _plan_and_judge({n: facts(down=tuple(downs[i])) for i, n in enumerate(names)})
    pairs = [e for e in plan if not e.get("unmeasured")]
    assert all(e["client_hca"] == e["server_hca"] == f"mlx5_{e['rail']}" for e in pairs)
    for index, name in enumerate(names):
        measured = {e["client_hca"] for e in pairs if e["client"] == name} | {
            e["server_hca"] for e in pairs if e["server"] == name}
        if out[name][0]["status"] == "PASS":
            assert measured == {f"mlx5_{i}" for i in range(8)}, (name, downs, out[name][0]["detail"])
        assert measured == {f"mlx5_{i}" for i in range(8)} - {f"mlx5_{i}" for i in downs[index]} or \
            out[name][0]["status"] != "PASS"


# -- defect 11: acceptance mode needs an expectation -------------------------------------------------


def test_acceptance_without_an_expectation_is_incomplete_naming_the_variable():
    vanished = facts()
    del vanished["hcas"][5]  # an HCA gone: the node's own ports cannot show it
    for fab in (facts(), vanished):
        out = kiln_data.assemble({"c1": node(fab, expect=None)}, [], mode="acceptance")["nodes"]["c1"]
        assert out["status"] == "INCOMPLETE"
        for cid in ("fabric.ports", "fabric.rate", "fabric.counters", "fabric.counters.during_run"):
            got = check_of(out, cid)
            assert got["status"] == "INCOMPLETE" and "kiln_burnin_fabric_expect" in got["detail"], (cid, got)
        assert out["status"] == "INCOMPLETE"
    half = facts()
    for hca in half["hcas"][:8]:  # a fleet-wide half-rate link
        hca["ports"][0].update(rate_gbps=200.0, rate="200 Gb/sec (4X HDR)", speed="HDR")
    out = kiln_data.assemble({"c1": node(half, expect=None)}, [], mode="acceptance")["nodes"]["c1"]
    assert out["status"] == "INCOMPLETE" and "kiln_burnin_fabric_expect" in check_of(out, "fabric.rate")["detail"]
    no_hca = dict(facts(), hcas=[])
    out = kiln_data.assemble({"c1": node(no_hca, expect=None)}, [], mode="acceptance")["nodes"]["c1"]
    assert check_of(out, "fabric.ports")["status"] == "INCOMPLETE"


def test_acceptance_with_an_expectation_from_inventory_or_history_is_judged():
    assert kiln_data.assemble({"c1": node(facts())}, [], mode="acceptance")["nodes"]["c1"]["fabric"]["expected_source"] == \
        "inventory"
    history = pp.fabric_history([baseline_record(facts())])
    out = kiln_data.assemble({"c1": node(facts(), history, expect=None)}, [], mode="acceptance")["nodes"]["c1"]
    assert check_of(out, "fabric.ports")["status"] == "PASS" and out["fabric"]["expected_source"] == "history"
    none = kiln_data.assemble({"c1": node(dict(facts(), hcas=[]), expect={"ports": 0})}, [], mode="acceptance")["nodes"]["c1"]
    assert check_of(none, "fabric.ports")["status"] == "SKIP"
    # outside acceptance the node's own expectation still judges (weaker, as documented)
    assert check_of(kiln_data.assemble({"c1": node(facts(), expect=None)}, [], mode="default")["nodes"]["c1"],
                    "fabric.ports")["status"] == "PASS"


# -- defect 11: netdev names validated before use -----------------------------------------------------

HOSTILE_NETDEVS = ["-rf", "--help", "a" * 16, "eth0 x", "eth0\nx", "eth\t0", "../etc", "a/b", "x\\y", ".", "..",
                   ".hidden", "", "eth0;reboot", "eth0$(id)", "é0", None, 5, ["eth0"]]


@pytest.mark.parametrize("name", HOSTILE_NETDEVS, ids=repr)
def test_hostile_netdev_names_are_refused_naming_host_and_name(name):
    problems = kiln_netdev.kiln_netdev_problems([name], "gpu07")
    assert len(problems) == 1 and problems[0].startswith("gpu07: netdev name ")
    if isinstance(name, str) and name:
        assert repr(name)[:20] in problems[0]


@pytest.mark.parametrize("name", ["eth0", "ib0", "enp26s0f0np0", "ibp26s0", "bond0.100", "a" * 15, "mlx5_ib0"])
def test_real_netdev_names_pass(name):
    assert kiln_netdev.kiln_netdev_problems([name], "gpu07") == []


def test_hostile_netdev_in_sysfs_is_a_fact_problem():
    files = {"class/infiniband/mlx5_0/hca_type": "MT4129", "class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE",
             "class/infiniband/mlx5_0/ports/1/phys_state": "5: LinkUp",
             "class/infiniband/mlx5_0/ports/1/rate": "400 Gb/sec (4X NDR)",
             "class/infiniband/mlx5_0/ports/1/link_layer": "Ethernet",
             "class/infiniband/mlx5_0/device/net/-rf/dev_port": "0",
             "class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0": "averyveryverylongname0"}
    parsed = kiln_fabric.parse_sysfs_files(files)
    port = parsed["hcas"][0]["ports"][0]
    assert "-rf" in port["netdevs"] and "averyveryverylongname0" in port["netdevs"]  # kept, so a consumer names it
    assert any("'-rf' starts with '-'" in p for p in parsed["problems"])
    assert any("IFNAMSIZ" in p for p in parsed["problems"])


@pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")
def test_rdma_node_refuses_a_hostile_netdev_from_the_fabric_facts(tmp_path: Path):
    make = load_source("kiln_make_rdma_sysfs_31", RDMA / "make-rdma-sysfs.py")
    profile = make.load_profile("roce8")
    profile["overrides"] = {"mlx5_2": {"netdev": "-evil0"}}
    make.build(profile, str(tmp_path / "sysfs"), str(tmp_path / "proc"))
    book = tmp_path / "validate.yml"
    book.write_text(textwrap.dedent(f"""\
        ---
        - name: Read an emulated node's fabric, then validate rdma_node's inputs
          hosts: all
          gather_facts: false
          vars:
            fabric_facts_sysfs_root: {tmp_path / 'sysfs'}
            fabric_facts_proc_root: {tmp_path / 'proc'}
            fabric_facts_query_tools: false
          tasks:
            - name: Fabric facts
              ansible.builtin.include_role:
                name: fabric_facts
            - name: Validate
              ansible.builtin.include_role:
                name: rdma_node
                tasks_from: validate
            - name: Reached only when every name was accepted
              ansible.builtin.debug:
                msg: NAMES ACCEPTED
        """))
    res = run_playbook(str(book), "-i", "gpu07,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                       tmp_path=tmp_path, timeout=240)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-3000:]
    assert "NAMES ACCEPTED" not in out
    assert "refusing RoCE QoS on gpu07" in out and "'-evil0' starts with '-'" in out, out[-3000:]
