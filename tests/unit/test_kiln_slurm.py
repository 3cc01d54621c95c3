"""Unit tests for filter_plugins/kiln_slurm.py (pure functions, no Ansible run)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

import kiln_slurm as ks

FACTS = {
    "hostname": "gpu01", "processor_count": 2, "processor_cores": 32, "processor_threads_per_core": 2,
    "memtotal_mb": 2063723, "kiln_gpu": {"pci_gpu_count": 8},
}


def test_filters_exposed():
    assert set(ks.FilterModule().filters()) == {
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


def test_plan_drain_is_idempotent():
    plan = ks.kiln_slurm_node_plan(SINFO, ["gpu01", "gpu02"], "drain", "BURNIN: low busbw")
    assert plan == {"change": ["gpu01"], "kept": [], "unknown": [], "unrecognised": []}


def test_plan_resume_with_prefix_spares_operator_drains():
    plan = ks.kiln_slurm_node_plan(SINFO, ["gpu01", "gpu02", "gpu03", "gpu09"], "resume", only_reason_prefix="BURNIN:")
    assert plan == {"change": ["gpu02"], "kept": ["gpu03 (operator: PSU)"], "unknown": ["gpu09"], "unrecognised": []}
    assert ks.kiln_slurm_node_plan(SINFO, ["gpu03", "gpu04"], "resume")["change"] == ["gpu03", "gpu04"]


def test_plan_rejects_state():
    with pytest.raises(AnsibleFilterError, match="drain or resume"):
        ks.kiln_slurm_node_plan(SINFO, ["gpu01"], "down")


def test_plan_uses_the_shared_sinfo_parser():
    """kiln_sinfo is the one parser: the filter module reaches module_utils through sys.path."""
    import kiln_sinfo

    assert ks.parse_sinfo is kiln_sinfo.parse_sinfo


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


def test_plan_kept_names_an_empty_reason_as_none():
    plan = ks.kiln_slurm_node_plan(["gpu09|drained|none"], ["gpu09"], "resume", only_reason_prefix="BURNIN:")
    assert plan["kept"] == ["gpu09 (none)"]
