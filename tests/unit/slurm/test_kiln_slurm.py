"""Unit tests for module_utils/kiln/slurm/nodes.py and its registry filter_plugins/kiln_slurm_filters.py (no Ansible run)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

import kiln_slurm_filters
from kiln.slurm import nodes as ks

FACTS = {
    "hostname": "gpu01", "processor_count": 2, "processor_cores": 32, "processor_threads_per_core": 2,
    "memtotal_mb": 2063723, "kiln_gpu": {"pci_gpu_count": 8},
}


def test_filters_exposed():
    assert set(kiln_slurm_filters.FilterModule().filters()) == {
        "kiln_slurm_gpu_type", "kiln_slurm_gpu_files", "kiln_slurm_node", "kiln_slurm_node_descriptions",
        "kiln_slurm_node_plan"}


@pytest.mark.parametrize("model, slug", [
    ({"model": "H100", "name": "H100-SXM5-80GB"}, "h100"), ("L40S", "l40s"), ({"name": "A100 80GB"}, "a100_80gb"),
    ({}, "gpu"), (None, "gpu"),
])
def test_gpu_type(model, slug):
    assert ks.kiln_slurm_gpu_type(model) == slug


@pytest.mark.parametrize("count, files", [(1, "/dev/nvidia0"), (2, "/dev/nvidia[0-1]"), ("8", "/dev/nvidia[0-7]")])
def test_gpu_files(count, files):
    assert ks.kiln_slurm_gpu_files(count) == files


@pytest.mark.parametrize("bad", [0, -1, "x", None])
def test_gpu_files_rejects(bad):
    with pytest.raises(AnsibleFilterError, match="kiln_slurm_gpu_files"):
        ks.kiln_slurm_gpu_files(bad)


def test_node_from_facts():
    node = ks.kiln_slurm_node(FACTS, {"model": "H100"}, 5)
    assert node == {"name": "gpu01", "cpus": 128, "sockets": 2, "cores_per_socket": 32, "threads_per_core": 2,
                    "real_memory": 2063723 * 95 // 100, "gpus": 8, "gpu_type": "h100"}
    assert ks.kiln_slurm_node(FACTS, {"model": "H100"}, 0, "h100_nvl")["gpu_type"] == "h100_nvl"
    cpu_only = dict(FACTS, kiln_gpu={"pci_gpu_count": 0})
    assert ks.kiln_slurm_node(cpu_only, None)["gpu_type"] == ""


@pytest.mark.parametrize("facts, pct, match", [
    ({"hostname": "x"}, 5, "lack processor_count"), (FACTS, 100, r"\[0, 100\)"), (FACTS, "lots", "number"),
    ("nope", 5, "mapping"),
])
def test_node_rejects(facts, pct, match):
    with pytest.raises(AnsibleFilterError, match=match):
        ks.kiln_slurm_node(facts, None, pct)


def test_nodes_skips_hosts_without_facts():
    hostvars = {"gpu01": {"ansible_facts": FACTS, "kiln_gpu_model": {"model": "H100"}},
                "gpu02": {"ansible_facts": {}}, "gpu03": {}}
    assert list(ks.kiln_slurm_node_descriptions(hostvars, ["gpu01", "gpu02", "gpu03"])) == ["gpu01"]
    with pytest.raises(AnsibleFilterError, match="list of host names"):
        ks.kiln_slurm_node_descriptions(hostvars, "gpu01")


SINFO = ["gpu01|idle|none", "gpu02|drained|BURNIN: low busbw", "gpu03|drained|operator: PSU", "gpu02|drained|BURNIN: low busbw",
         "gpu04|down*|Not responding"]


def buckets(plan):
    """The plan's decisions, without the per-node explanations."""
    return {k: v for k, v in plan.items() if k != "why"}


NOTHING = {"change": [], "unchanged": [], "held": {}, "kept": [], "left": [], "unknown": [], "unrecognised": []}


def test_plan_drain_is_idempotent():
    plan = ks.kiln_slurm_node_plan(SINFO, ["gpu01", "gpu02"], "drain", "BURNIN: low busbw")
    assert buckets(plan) == dict(NOTHING, change=["gpu01"], unchanged=["gpu02"])


def test_plan_resume_with_prefix_spares_operator_drains():
    plan = ks.kiln_slurm_node_plan(SINFO, ["gpu01", "gpu02", "gpu03", "gpu09"], "resume", only_reason_prefix="BURNIN:")
    assert buckets(plan) == dict(NOTHING, change=["gpu02"], unchanged=["gpu01"], held={"gpu03": "operator: PSU"},
                                 unknown=["gpu09"])
    assert plan["why"]["gpu03"] == "held by operator: operator: PSU"
    # Without a prefix a resume still lifts only kiln's drains (issue 31): a person's drain and
    # Slurm's own "Not responding" are held, never resumed.
    plan = ks.kiln_slurm_node_plan(SINFO, ["gpu03", "gpu04"], "resume")
    assert plan["change"] == [] and plan["held"] == {"gpu03": "operator: PSU", "gpu04": "Not responding"}


def test_plan_resume_with_prefix_keeps_kilns_other_drains():
    plan = ks.kiln_slurm_node_plan(["gpu05|drained|BURNIN: nccl.pair", "gpu06|drained|UPGRADE: to stack ab"],
                                   ["gpu05", "gpu06"], "resume", only_reason_prefix="UPGRADE:")
    assert plan["change"] == ["gpu06"] and plan["kept"] == ["gpu05 (BURNIN: nccl.pair)"] and plan["held"] == {}


def test_plan_rejects_state():
    with pytest.raises(AnsibleFilterError, match="drain or resume"):
        ks.kiln_slurm_node_plan(SINFO, ["gpu01"], "down")


def test_plan_uses_the_shared_sinfo_parser():
    """kiln_sinfo is the one parser: the filter plans through kiln_node_state, which parses with it."""
    from kiln.slurm import node_state as kiln_node_state
    from kiln.slurm import sinfo as kiln_sinfo

    assert ks.kiln_node_state is kiln_node_state and kiln_node_state.parse_sinfo is kiln_sinfo.parse_sinfo


@pytest.mark.parametrize("state, resumed", [
    ("drained*", True), ("draining@", True), ("mixed+drain", True), ("down~", True), ("fail", True),
    ("powered_down", True), ("idle", False), ("idle*", False), ("allocated", False), ("idle~", False),
])
def test_plan_resume_follows_the_documented_states(state, resumed):
    plan = ks.kiln_slurm_node_plan([f"gpu05|{state}|BURNIN: x"], ["gpu05"], "resume")
    assert plan["change"] == (["gpu05"] if resumed else [])


def test_plan_reports_states_it_does_not_know():
    lines = ["gpu06|weird_new_state|BURNIN: x", "gpu07|drained+zzz|BURNIN: x", "gpu08|idle|none"]
    resume = ks.kiln_slurm_node_plan(lines, ["gpu06", "gpu07", "gpu08"], "resume")
    assert resume["change"] == [] and resume["unrecognised"] == ["gpu06 (weird_new_state)", "gpu07 (drained+zzz)"]
    drain = ks.kiln_slurm_node_plan(lines, ["gpu06", "gpu08"], "drain", "BURNIN: y")
    assert drain["change"] == ["gpu06", "gpu08"] and drain["unrecognised"] == ["gpu06 (weird_new_state)"]


def test_plan_holds_a_drain_without_a_reason_and_names_it():
    """A drained node without a reason is nobody kiln knows: held (never resumed, never re-drained)."""
    plan = ks.kiln_slurm_node_plan(["gpu09|drained|none"], ["gpu09"], "resume", only_reason_prefix="BURNIN:")
    assert plan["change"] == [] and plan["held"] == {"gpu09": ""}
    assert plan["why"]["gpu09"] == "held by operator: no reason"
    drain = ks.kiln_slurm_node_plan(["gpu09|drained|none"], ["gpu09"], "drain", "BURNIN: x")
    assert drain["change"] == [] and drain["held"] == {"gpu09": ""}


def test_issue_31_a_persons_drain_is_never_replaced_then_lifted():
    """The reproduction of issue 31: the upgrade's batch drain re-drained gpu02 over a person's RMA, and the
    resume with prefix UPGRADE: then lifted it -- the person's reason gone, the node back in production."""
    sinfo = ["gpu02|drained|RMA-123 bad PSU"]
    drain = ks.kiln_slurm_node_plan(sinfo, ["gpu02"], "drain", "UPGRADE: to stack ab12 (kiln run r1)")
    assert drain["change"] == []
    assert drain["held"] == {"gpu02": "RMA-123 bad PSU"}
    assert drain["why"]["gpu02"] == "held by operator: RMA-123 bad PSU"
    resume = ks.kiln_slurm_node_plan(sinfo, ["gpu02"], "resume", "", "UPGRADE:")
    assert resume["change"] == [] and resume["held"] == {"gpu02": "RMA-123 bad PSU"}
    # the burn-in's FAIL drain, the same rule
    fail = ks.kiln_slurm_node_plan(sinfo, ["gpu02"], "drain", "BURNIN: nccl.pair.all_reduce: slow")
    assert fail["change"] == [] and fail["held"] == {"gpu02": "RMA-123 bad PSU"}


def test_plan_redrains_kilns_own_drain_with_a_new_kiln_reason():
    plan = ks.kiln_slurm_node_plan(["gpu02|drained|UPGRADE: to stack ab"], ["gpu02"], "drain", "BURNIN: failed")
    assert plan["change"] == ["gpu02"] and plan["held"] == {}


def test_plan_operator_drains_is_an_exact_opt_in():
    """The burn-in's kiln_burnin_override_operator_drain: only the exact reason recorded is lifted."""
    sinfo = ["gpu07|drained|RMA 42", "gpu08|drained|RMA 43 (changed since)"]
    plan = ks.kiln_slurm_node_plan(sinfo, ["gpu07", "gpu08"], "resume", "", "",
                                   {"gpu07": "RMA 42", "gpu08": "RMA 43"})
    assert plan["change"] == ["gpu07"] and plan["held"] == {"gpu08": "RMA 43 (changed since)"}
    # restoring it puts the person's exact reason back; already back is a no-op
    restore = ks.kiln_slurm_node_plan(["gpu07|idle|none", "gpu08|drained|RMA 43"], ["gpu07", "gpu08"], "drain",
                                      "RMA 43")
    assert restore["change"] == ["gpu07"] and restore["unchanged"] == ["gpu08"]


@pytest.mark.parametrize("args, match", [
    ((["gpu01"], "resume", "", "RMA"), "lifts only kiln's drains"),
    ((["gpu01"], "drain", ""), "needs a reason"),
    ((["gpu01"], "resume", "", "", ["gpu01"]), "operator_drains must be a mapping"),
])
def test_plan_rejects_a_resume_prefix_that_is_not_kilns(args, match):
    with pytest.raises(AnsibleFilterError, match=match):
        ks.kiln_slurm_node_plan(SINFO, *args)
