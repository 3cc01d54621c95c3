"""Burn-in II: module_utils/kiln/burnin/pair_phase.py (swap scope, pair phase, baselines) and the
actions and history of module_utils/kiln/burnin/assemble.py."""

from __future__ import annotations

import json
import re
import sys

import pytest

from kiln_paths import REPO
import kiln_data
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.burnin import baseline as kiln_baseline  # noqa: E402
from kiln.burnin import assemble as kb  # noqa: E402
from kiln.burnin import pair_phase as kbp  # noqa: E402
from kiln.slurm import node_state as kns  # noqa: E402
from kiln.slurm import sinfo as ksi  # noqa: E402
from kiln.burnin import report as kiln_report  # noqa: E402
from kiln import verdict as kiln_verdict  # noqa: E402

CPU = (REPO / "tests/fixtures/nccl-tests/derived-kiln-cpu-engine-3node-example.txt").read_text()
NODES = ["c1", "c2", "c3", "c4"]
VERSIONS = {n: {"driver": "580.95.05"} for n in NODES}


def scaled(factor: float, text: str = CPU) -> str:
    """The recorded CPU-engine output with every busbw/algbw scaled (as a slower link would)."""
    out = []
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            cols = line.split()
            for i in (6, 7, 10, 11):
                cols[i] = f"{float(cols[i]) * factor:.2f}"
            line = " ".join(cols)
        out.append(line)
    return "\n".join(out) + "\n"


def history(status="PASS", pair=0.49, versions=None):
    return [kiln_baseline.record("old", "2026-11-28T00:00:00Z", "default", status,
                                 versions or {"driver": "580.95.05"}, {"pair": pair})]


def run_round(state, raw, round_no, mode="default", targets=()):
    return kbp.pair_round(state, raw, mode=mode, floors=kiln_data.floors(), overrides={}, sku="cpu",
                         fabric="tcp", max_rounds=4, round_no=round_no, targets=targets)


def slow_c3_phase(state):
    """Every round of a pair phase on NODES where c3's link runs at 60 %, from the recorded output."""
    rate = {"c1": 1.0, "c2": 1.0, "c3": 0.6, "c4": 1.0}
    raw, pairs, out = [], state["pairs"], {}
    for round_no in (1, 2, 3, 4):
        raw = raw + [{"pair": list(p), "round": round_no, "text": scaled(min(rate[p[0]], rate[p[1]])), "rc": 0}
                     for p in pairs]
        out = run_round(state, raw, round_no)
        raw, pairs = out["results"], out["pairs"]
        if not pairs:
            break
    return out


def test_swap_scope_adds_known_good_partners_only():
    histories = {"c1": history(), "c2": history("FAIL", None), "c3": history(), "c4": history()}
    scope = kiln_data.pair_scope(NODES, "swap", "c4", histories, partners=4)
    assert scope["targets"] == ["c4"] and scope["partners"] == ["c1", "c3"]
    assert scope["hosts"] == ["c1", "c3", "c4"]


def test_swap_scope_without_history_says_partners_are_unproven():
    scope = kiln_data.pair_scope(NODES, "swap", ["c2"], {}, partners=2)
    assert scope["partners"] == ["c1", "c3"]
    assert "not proven" in scope["notes"][0]


@pytest.mark.parametrize("mode,swap,match", [
    ("swap", None, "needs kiln_burnin_swap_nodes"),
    ("swap", "c9", "names c9, not in kiln_burnin_targets"),
    ("default", "c1", "kiln_burnin_mode is not swap"),
    ("fast", None, "kiln_burnin_mode must be one of"),
])
def test_scope_errors_name_the_variable(mode, swap, match):
    with pytest.raises(kiln_verdict.KilnConfigError, match=match):
        kiln_data.pair_scope(NODES, mode, swap, {})


def test_start_leaves_out_down_and_drained_nodes_outside_swap():
    sinfo = ksi.parse_sinfo(["c1|idle|none", "c2|drained|fan swap (person)", "c3|down|Not responding", "c4|idle|none"])
    state = kiln_data.pair_start(NODES, "default", [], [], {}, VERSIONS, sinfo)
    assert state["participants"] == ["c1", "c4"]
    assert state["excluded"]["c2"]["status"] == "SKIP" and "kiln_burnin_swap_nodes=c2" in state["excluded"]["c2"]["why"]
    assert state["excluded"]["c3"]["status"] == "INCOMPLETE"
    assert state["resume"] == [] and state["drained_before"] == {"c2": "fan swap (person)"}
    assert state["pairs"] == [("c1", "c4")]


def test_start_swap_resumes_drained_targets_inside_the_reservation():
    sinfo = ksi.parse_sinfo(["c1|idle|none", "c2|idle|none", "c4|drained|BURNIN: x"])
    state = kiln_data.pair_start(["c1", "c2", "c4"], "swap", ["c4"], ["c1", "c2"],
                          {"c1": history(), "c2": history()}, VERSIONS, sinfo)
    assert state["resume"] == ["c4"] and state["pairs"] == [("c4", "c1")]
    assert state["baselines"]["c1"]["value"] == 0.49
    assert state["baselines"]["c4"]["value"] is None


def test_pair_rounds_blame_the_slow_node_from_real_output():
    state = kiln_data.pair_start(NODES, "default", [], [], {n: history() for n in NODES}, VERSIONS, None)
    assert state["pairs"] == [("c1", "c3"), ("c2", "c4")]
    out = slow_c3_phase(state)
    assert out["nodes"]["c3"]["state"] == "BLAMED"
    assert {n for n, r in out["nodes"].items() if r["state"] == "CLEARED"} == {"c1", "c2", "c4"}
    slow = [r for r in out["results"] if "c3" in r["pair"]]
    assert all(r["status"] == "SLOW" and "below the reference" in r["why"] for r in slow)


def test_pair_with_wrong_results_fails_and_timeout_without_rows_is_incomplete():
    wrong = re.sub(r"(\s)0(\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+\s+)0$", r"\g<1>5\g<2>0", CPU, flags=re.MULTILINE)
    assert wrong != CPU
    state = kiln_data.pair_start(["a", "b", "c", "d"], "default", [], [], {}, {}, None)
    raw = [{"pair": ["a", "c"], "round": 1, "text": wrong, "rc": 7},
           {"pair": ["b", "d"], "round": 1, "text": "", "rc": 124, "timed_out": True}]
    out = run_round(state, raw, 1)
    by_pair = {tuple(r["pair"]): r for r in out["results"]}
    assert by_pair[("a", "c")]["status"] == "FAIL" and "#wrong" in by_pair[("a", "c")]["detail"]
    assert by_pair[("b", "d")]["status"] == "INCOMPLETE"


def test_pair_records_from_sync_and_async_loop_results():
    sync = [{"__pair": ["a", "b"], "rc": 0, "stdout": "x"}]
    asyn = [{"__job": {"__pair": ["c", "d"]}, "finished": 0}]
    out = kbp.pair_records(sync + asyn, 2)
    assert out[0] == {"pair": ["a", "b"], "round": 2, "text": "x", "rc": 0, "timed_out": False, "lost": []}
    assert out[1]["timed_out"] is True and out[1]["rc"] is None


def test_pair_records_name_a_lost_node_only_in_its_own_failed_pair():
    items = [{"__pair": ["a", "b"], "rc": 0, "stdout": "x"}, {"__pair": ["c", "d"], "rc": 124, "stdout": ""},
             {"__job": {"__pair": ["e", "f"]}, "finished": 0}]
    out = kbp.pair_records(items, 1, lost=["a", "d", "f", "zz"])
    assert [r["lost"] for r in out] == [[], ["d"], ["f"]]  # a's pair succeeded: a answered for it


def test_round_never_pairs_a_lost_node_again_and_keeps_it_incomplete():
    state = kiln_data.pair_start(["a", "b", "c", "d"], "default", [], [], {}, {}, None)
    raw = [{"pair": ["a", "c"], "round": 1, "text": CPU, "rc": 0},
           {"pair": ["b", "d"], "round": 1, "text": "", "rc": 124, "timed_out": True, "lost": ["d"]}]
    out = run_round(state, raw, 1)
    assert out["nodes"]["d"]["state"] == "INCOMPLETE" and out["nodes"]["d"]["lost"] is True
    assert "unreachable after its pair in round 1" in out["nodes"]["d"]["why"]
    assert out["pairs"] and all("d" not in p for p in out["pairs"])
    assert any("b" in p for p in out["pairs"])  # its partner gets another
    final = run_round(state, out["results"], 4)
    assert final["nodes"]["d"]["state"] == "INCOMPLETE"
    checks = kbp.pair_checks("d", final["nodes"]["d"], final["results"], None, 0.35)
    assert checks[0]["status"] == "INCOMPLETE" and "unreachable" in checks[0]["detail"]


def judged_nodes(statuses):
    return {n: {"status": s, "checks": [{"id": "nccl.pair.all_reduce", "status": s, "detail": f"{n} detail"}]}
            for n, s in statuses.items()}


def test_actions_drain_fail_resume_swap_pass_and_never_a_persons_drain():
    nodes = judged_nodes({"c1": "FAIL", "c2": "PASS", "c3": "PASS", "c4": "FAIL", "c5": "PASS", "c6": "INCOMPLETE"})
    drained = {"c2": "BURNIN: nccl.pair.all_reduce: slow", "c3": "RMA 4711", "c4": "RMA 4712",
               "c6": "BURNIN: old"}
    actions = {a["node"]: a for a in kb.plan_actions(nodes, "swap", drained, ["c2", "c3", "c4", "c6"],
                                                     {"c1": "node01"})}
    assert actions["c1"]["action"] == "drain" and actions["c1"]["reason"].startswith("BURNIN: nccl.pair.all_reduce")
    assert actions["c1"]["slurm_node"] == "node01"
    assert actions["c2"]["action"] == "resume"
    assert actions["c3"]["action"] == "restore" and actions["c3"]["reason"] == "RMA 4711"
    assert actions["c4"]["action"] == "restore" and actions["c4"]["reason"] == "RMA 4712"  # FAIL keeps a person's drain
    assert actions["c6"]["action"] == "restore" and actions["c6"]["reason"] == "BURNIN: old"
    assert "c5" not in actions


def test_actions_upgrade_drain_is_kilns_and_resume_on_pass_only():
    nodes = judged_nodes({"u1": "PASS", "u2": "WARN", "u3": "FAIL", "u4": "PASS"})
    drained = {"u1": "UPGRADE: to stack ab12 (run r1)", "u2": "UPGRADE: to stack ab12 (run r1)",
               "u3": "UPGRADE: to stack ab12 (run r1)", "u4": "UPGRADES by hand"}
    acts = {a["node"]: a for a in kb.plan_actions(nodes, "swap", drained, ["u1", "u2", "u3", "u4"],
                                                  resume_on=["PASS"])}
    assert acts["u1"]["action"] == "resume"
    assert acts["u2"]["action"] == "restore" and acts["u2"]["reason"].startswith("UPGRADE:")
    assert "ends PASS" in acts["u2"]["why"]
    assert acts["u3"]["action"] == "drain" and acts["u3"]["reason"].startswith("BURNIN:")
    # "UPGRADES by hand" is not kiln's prefix "UPGRADE:": a person's drain, never lifted
    assert acts["u4"]["action"] == "restore" and acts["u4"]["reason"] == "UPGRADES by hand"
    default = {a["node"]: a for a in kb.plan_actions(nodes, "swap", drained, ["u2"])}
    assert default["u2"]["action"] == "resume"  # the burn-in's own default keeps a WARN in service
    with pytest.raises(kiln_verdict.KilnConfigError, match="kiln_burnin_resume_on"):
        kb.plan_actions(nodes, "swap", drained, [], resume_on=["FAIL"])
    assert kns.kiln_reason("UPGRADE: x") and kns.kiln_reason("BURNIN: y")
    assert not kns.kiln_reason(None) and not kns.kiln_reason("RMA 1") and not kns.kiln_reason(" BURNIN: z")


def test_actions_outside_swap_keep_a_burnin_drain():
    nodes = judged_nodes({"c2": "PASS"})
    actions = kb.plan_actions(nodes, "default", {"c2": "BURNIN: x"}, ["c2"])
    assert actions[0]["action"] == "restore" and "swap" in actions[0]["why"]


def test_actions_backend_none_plans_but_does_not_apply():
    actions = kb.plan_actions(judged_nodes({"c1": "FAIL"}), "default", {}, [], backend="none")
    assert actions[0]["applied"] is False
    with pytest.raises(kiln_verdict.KilnConfigError, match="kiln_burnin_actions"):
        kb.plan_actions({}, "default", {}, [], backend="k8s")


def test_report_writes_pairs_actions_and_appends_history(tmp_path):
    histories = {n: history() for n in NODES}
    state = kiln_data.pair_start(NODES, "default", [], [], histories, VERSIONS, None)
    out = slow_c3_phase(state)
    raw = out["results"]
    nodes = {n: {"kiln_gpu": {"pci_gpu_count": 0}} for n in NODES}
    assembled = kiln_data.assemble(nodes, [], mode="default", pairs={**state, "results": raw},
                            results_dir=str(tmp_path / "run"))
    res = kb.report("run1", "default", assembled, str(tmp_path / "run"), {}, write=True,
                    actions={"backend": "slurm", "drained_before": {}, "resumed": []},
                    state_dir=str(tmp_path / "history"), node_versions=VERSIONS, versions=VERSIONS, finished="2026-11-29T00:00:00Z")
    summary = res["summary"]
    assert summary["nodes"]["c3"]["status"] == "FAIL"
    assert [a["node"] for a in summary["actions"]] == ["c3"]
    assert summary["nodes"]["c3"]["action"]["action"] == "drain"
    base = {c["id"]: c for c in summary["nodes"]["c1"]["checks"]}["baseline.pair_busbw"]
    assert base["status"] == "PASS" and base["baseline"] == 0.49
    assert summary["pairs"]["rounds"] == 3
    assert "| drain | c3 |" in res["markdown"] and "Pair phase: 3 round(s)" in res["markdown"]
    assert not kiln_report.validate_summary(summary)
    schema = json.loads((REPO / "data/burnin_summary.schema.json").read_text())
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(json.loads((tmp_path / "run/summary.json").read_text()), schema)
    c3 = kiln_baseline.load(str(tmp_path / "history"), "c3")
    c1 = kiln_baseline.load(str(tmp_path / "history"), "c1")
    assert c3[-1]["status"] == "FAIL" and c3[-1]["values"]["pair"] is None
    assert c1[-1]["status"] == "PASS" and c1[-1]["values"]["pair"] > 0.4
    assert any((tmp_path / "run/pairs").iterdir())


def test_report_holds_a_node_a_person_drained_during_the_run(tmp_path):
    """Issue 31: sinfo read just before judging; c3 FAILs but a person drained it meanwhile -- reported
    "held by operator: <reason>" (action hold, nothing applied), valid against the summary schema."""
    histories = {n: history() for n in NODES}
    state = kiln_data.pair_start(NODES, "default", [], [], histories, VERSIONS, None)
    out = slow_c3_phase(state)
    nodes = {n: {"kiln_gpu": {"pci_gpu_count": 0}} for n in NODES}
    assembled = kiln_data.assemble(nodes, [], mode="default", pairs={**state, "results": out["results"]},
                            results_dir=str(tmp_path / "run"))
    sinfo = [f"{n}|idle|none" for n in NODES if n != "c3"] + ["c3|drained|RMA 4711 (PSU)"]
    res = kb.report("run1", "default", assembled, str(tmp_path / "run"), {}, write=True,
                    actions={"backend": "slurm", "drained_before": {}, "resumed": [], "sinfo": sinfo})
    summary = res["summary"]
    assert summary["nodes"]["c3"]["status"] == "FAIL"
    assert [(a["node"], a["action"], a["applied"]) for a in summary["actions"]] == [("c3", "hold", False)]
    assert summary["nodes"]["c3"]["action"]["why"].startswith("held by operator: RMA 4711 (PSU); kiln's drain")
    assert "| hold | c3 | RMA 4711 (PSU) | held by operator: RMA 4711 (PSU)" in res["markdown"]
    assert not kiln_report.validate_summary(summary)
    schema = json.loads((REPO / "data/burnin_summary.schema.json").read_text())
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(json.loads((tmp_path / "run/summary.json").read_text()), schema)


def test_baseline_warn_when_a_node_drops_below_its_own_history():
    results = [{"pair": ["a", "b"], "round": 1, "status": "PASS", "value": 0.40, "floor": 0.05,
                "reference": {"value": 0.41}}]
    checks = kbp.pair_checks("a", {"state": "CLEARED", "passed_with": ["b"]}, results,
                            {"value": 0.49, "runs": 3}, 0.10)
    pair, base = checks
    assert pair["status"] == "PASS" and base["status"] == "WARN" and "18% below" in base["detail"]


def test_baseline_above_its_history_says_above():
    """A node faster than its baseline reads "13% above", not "-13% below"."""
    results = [{"pair": ["a", "b"], "round": 1, "status": "PASS", "value": 0.295, "floor": 0.05,
                "reference": {"value": 0.29}}]
    _, base = kbp.pair_checks("a", {"state": "CLEARED", "passed_with": ["b"]}, results,
                              {"value": 0.26, "runs": 1}, 0.35)
    assert base["status"] == "PASS"
    assert "13% above" in base["detail"] and "-" not in base["detail"].split("(")[1].split(";")[1]


def test_start_takes_slurm_states_from_kiln_sinfo():
    """Not responding / powered off is down (INCOMPLETE); a state kiln does not know is never taken for idle."""
    sinfo = ksi.parse_sinfo(["c1|mixed|none", "c2|idle*|Not responding", "c3|brand_new_state|none",
                             "c4|allocated+drain|fan swap (person)"])
    state = kiln_data.pair_start(NODES, "default", [], [], {}, VERSIONS, sinfo)
    assert state["participants"] == ["c1"]
    assert state["excluded"]["c2"] == {"status": "INCOMPLETE", "why": "idle* in Slurm (Not responding)"}
    assert state["excluded"]["c3"]["status"] == "INCOMPLETE"
    assert "brand_new_state in Slurm (no reason): a state kiln does not know" in state["excluded"]["c3"]["why"]
    assert state["excluded"]["c4"]["status"] == "SKIP" and state["drained_before"] == {"c4": "fan swap (person)"}


# -- one route for the pair band and the confirmation rule (issue 32 item 2) ----------------------------------

@pytest.mark.parametrize("band, confirm", [(None, True), ("wide", True), (float("nan"), True), (1.5, True),
                                           (0.10, None), (0.10, "yes"), (0.10, 1)])
def test_pair_start_refuses_a_band_or_confirm_that_is_not_one(band, confirm):
    with pytest.raises(kiln_verdict.KilnConfigError):
        kiln_data.pair_start(NODES, "default", [], [], {}, VERSIONS, None, band=band, confirm=confirm)


def test_the_band_travels_in_the_state_and_nowhere_else():
    state = kiln_data.pair_start(NODES, "default", [], [], {}, VERSIONS, None, band=0.25, confirm=False)
    assert (state["band"], state["confirm"]) == (0.25, False)
    assert kbp.state_band(state) == (0.25, False)
    for broken in ({k: v for k, v in state.items() if k != "band"}, dict(state, confirm=None), {}):
        with pytest.raises(kiln_verdict.KilnConfigError, match="pair_start"):
            run_round(broken, [], 1)
    # a final verdict over pairs whose state lost its band is a configuration error, never a default band
    with pytest.raises(kiln_verdict.KilnConfigError):
        kiln_data.assemble({}, [], pairs={k: v for k, v in state.items() if k != "band"})
    with pytest.raises(TypeError):  # pair_round takes no band of its own
        kbp.pair_round(state, [], mode="default", floors=kiln_data.floors(), overrides={}, sku="cpu",
                       fabric="tcp", band=0.10, max_rounds=4)


@pytest.mark.parametrize("loader", ["floors", "health", "fabric"])
@pytest.mark.parametrize("path", [None, ""])
def test_the_data_loaders_have_no_default_file(loader, path):
    from kiln.fabric.base import FabricError, load_fabric_thresholds
    from kiln.health.rules import load_health
    load = {"floors": kiln_verdict.load_floors, "health": load_health, "fabric": load_fabric_thresholds}[loader]
    with pytest.raises((kiln_verdict.KilnConfigError, FabricError), match="path is required"):
        load(path)


def test_swap_takes_a_kiln_health_drained_node_as_a_repair_target():
    """A node kiln-health drained (HEALTH: ...) is tested by a swap run and resumed on PASS; a FAIL drains it
    with the burn-in's reason; outside swap mode it is left drained (docs/health.md)."""
    sinfo = ksi.parse_sinfo(["c1|idle|none", "c2|idle|none", "c4|drained|HEALTH: xid.kernel_log: 79 (0000:18:00)"])
    state = kiln_data.pair_start(["c1", "c2", "c4"], "swap", ["c4"], ["c1", "c2"],
                                 {"c1": history(), "c2": history()}, VERSIONS, sinfo)
    assert state["resume"] == ["c4"] and state["pairs"] == [("c4", "c1")]
    default = kiln_data.pair_start(["c1", "c2", "c4"], "default", [], [], {"c1": history(), "c2": history()},
                                   VERSIONS, sinfo)
    assert "c4" not in default["resume"] and "c4" in default["excluded"]
    drained = {"c4": "HEALTH: xid.kernel_log: 79 (0000:18:00)", "c5": "HEALTH: gpu.count: 7 on PCI, 8 expected"}
    acts = {a["node"]: a for a in kb.plan_actions(judged_nodes({"c4": "PASS", "c5": "FAIL"}), "swap", drained,
                                                  ["c4", "c5"])}
    assert acts["c4"]["action"] == "resume"
    assert acts["c5"]["action"] == "drain" and acts["c5"]["reason"].startswith("BURNIN:")
    assert kns.kiln_reason("HEALTH: x") and not kns.kiln_reason("HEALTHY by hand")
