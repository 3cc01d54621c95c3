"""Grouping hosts by stack, host lists, the preflight report and the plan."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

import kiln_compat as kc

GOOD = {"gpu": "H100", "os": "ubuntu-24.04", "driver": "580.173.02", "cuda": "13.0.2"}
BAD = {"gpu": "H100", "os": "ubuntu-24.04", "driver": "550.127.05", "cuda": "13.0.2"}


class FakeHostVars(dict):
    """Mimics ansible's HostVars: raw_get returns untemplated vars, [] templated ones."""

    def __init__(self, raw: dict[str, dict[str, Any]], templated: dict[str, dict[str, Any]]) -> None:
        super().__init__(templated)
        self.raw = raw
        self.raw_calls = 0

    def raw_get(self, host: str) -> Any:
        self.raw_calls += 1
        return self.raw.get(host)


def test_stacks_by_host_groups_identical_stacks() -> None:
    hv = {f"gpu{i:02d}": {"kiln_stack": dict(GOOD)} for i in range(1, 9)}
    hv.update({f"old{i}": {"kiln_stack": dict(BAD)} for i in range(1, 4)})
    hv["ctl01"] = {}
    out = kc.kiln_stacks_by_host(hv, list(hv))
    assert [len(s["hosts"]) for s in out] == [8, 3, 1]
    assert out[2]["stack"] == {}


def test_stacks_by_host_shares_objects_and_templates_only_when_needed() -> None:
    shared = dict(GOOD)
    raw = {f"n{i}": {"kiln_stack": shared} for i in range(100)}
    raw["t1"] = {"kiln_stack": {"driver": "{{ kiln_driver }}"}}
    templated = {"t1": {"kiln_stack": {"driver": "580.173.02"}}}
    hv = FakeHostVars(raw, templated)
    out = kc.kiln_stacks_by_host(hv, list(raw))
    assert [len(s["hosts"]) for s in out] == [100, 1]
    assert out[1]["stack"] == {"driver": "580.173.02"}


def test_allow_list_is_part_of_the_key() -> None:
    allow = [{"rule": "cuda-driver", "reason": "lab"}]
    hv = {"a": {"kiln_stack": BAD}, "b": {"kiln_stack": BAD, "kiln_stack_allow": allow}}
    out = kc.kiln_stacks_by_host(hv, ["a", "b"])
    assert len(out) == 2
    report = kc.kiln_stack_report(out)
    assert report["error_count"] == 1  # host a: cuda-driver; host b: the same violation, allowed
    assert any("[allowed: lab]" in w for w in report["warnings"])


@pytest.mark.parametrize(("facts", "expect"), [
    ({"kiln_gpus": [{"pci_id": "10de:2330", "name": "NVIDIA H100 80GB HBM3"}]}, "10de:2330"),
    ({"kiln_gpu": "A100-SXM4-80GB"}, "A100-SXM4-80GB"),
    ({"ansible_local": {"kiln_gpu": {"model": "L40S"}}}, "L40S"),
    ({"kiln_gpu": {"driver_loaded": True, "gpus": [{"index": 0, "model": "L40S", "pci_device_id": "10de:26b9"}],
                   "models": ["L40S"]}}, "10de:26b9"),
    ({"kiln_gpu": {"driver_loaded": False, "gpus": []}}, None),
    ({"ansible_local": {}}, None),
    ({}, None),
])
def test_detected_gpu_joins_the_stack(facts: dict[str, Any], expect: str | None) -> None:
    hv = {"h1": {"kiln_stack": {"driver": "580.173.02"}, "ansible_facts": facts},
          "h2": {"kiln_stack": {"gpu": "H100", "driver": "580.173.02"}, "ansible_facts": facts}}
    out = kc.kiln_stacks_by_host(hv, ["h1", "h2"])
    assert out[0]["stack"].get("gpu") == expect
    assert out[-1].get("detected_gpus", [None])[0] == expect
    assert "detected_gpu" not in out[-1]["stack"]


def test_unknown_host_is_an_error() -> None:
    with pytest.raises(AnsibleFilterError, match="not in the inventory"):
        kc.kiln_stacks_by_host(FakeHostVars({}, {}), ["ghost"])
    with pytest.raises(AnsibleFilterError, match="list of host names"):
        kc.kiln_stacks_by_host({}, "gpu01")


@pytest.mark.parametrize(("hosts", "expect"), [
    (["gpu01", "gpu02", "gpu03", "gpu07"], "gpu[01-03,07]"),
    (["gpu1", "gpu2", "gpu10"], "gpu[1-2,10]"),
    (["ctl01"], "ctl01"),
    (["a", "b"], "a,b"),
    (["rack1-n001", "rack1-n002", "rack2-n001"], "rack1-n[001-002],rack2-n001"),
    ([f"node{i:05d}" for i in range(1, 10001)], "node[00001-10000]"),
    (["gpu01.example", "gpu02.example"], "gpu[01-02].example"),
    (["n8", "n9", "n10", "n010"], "n[8-10],n010"),
])
def test_hostlist(hosts: list[str], expect: str) -> None:
    assert kc.kiln_hostlist(hosts) == expect


def test_report_names_hosts_rules_and_fixes() -> None:
    hv = {f"gpu{i:02d}": {"kiln_stack": BAD} for i in range(1, 5)}
    hv["ctl01"] = {"kiln_stack": GOOD}
    report = kc.kiln_stack_report(kc.kiln_stacks_by_host(hv, sorted(hv)))
    assert report["evaluations"] == 2
    line = [e for e in report["errors"] if e.startswith("[cuda-driver]")][0]
    assert "gpu[01-04] (4 hosts)" in line and "550.127.05" in line and "13.0.2" in line
    # the fix is the newest listed release of a supported PB/LTSB branch (R620's first, as of the data)
    branches = kc.compat_data()["drivers"]["branches"].values()
    newest = max((r for b in branches if b.get("status") == "supported" and b.get("type") in ("PB", "LTSB")
                  for r in b.get("releases") or []), key=kc.kiln_version_key)
    assert "kiln_stack.driver" in line and f'"driver": "{newest}"' in line


def test_report_turns_malformed_stack_into_violation() -> None:
    report = kc.kiln_stack_report([{"stack": "H100", "hosts": ["x"]},
                                   {"stack": {"slurm": "24.11"}, "hosts": ["y"]}])
    assert report["error_count"] == 2 and all("[invalid-stack]" in e for e in report["errors"])


def test_plan_per_group() -> None:
    hv = {f"gpu{i:02d}": {"kiln_stack": dict(GOOD, nccl="2.28.7", torch="2.14.1")} for i in range(1, 5)}
    hv["ctl01"] = {"kiln_stack": {"os": "debian-12", "slurm": {"slurmctld": "25.11"}}}
    hv["odd01"] = {"kiln_stack": {"driver": "580.173.02"}}
    groups = {"all": sorted(hv), "gpu_nodes": [f"gpu{i:02d}" for i in range(1, 5)], "slurm_controller": ["ctl01"],
              "odd": ["odd01"], "empty": []}
    plan = kc.kiln_plan(kc.kiln_stacks_by_host(hv, sorted(hv)), groups, {"cuda": {"url": "http://mirror/cuda"}})
    assert sorted(plan["groups"]) == ["gpu_nodes", "odd", "slurm_controller"]
    gpu = plan["groups"]["gpu_nodes"]["stacks"][0]
    assert gpu["hosts"] == "gpu[01-04]" and gpu["host_count"] == 4
    assert gpu["packages"]["cuda"] == ["cuda-toolkit-13-0=13.0.2-1"]
    assert gpu["packages"]["nccl"] == ["libnccl2=2.28.7-1+cuda13.0", "libnccl-dev=2.28.7-1+cuda13.0"]
    assert gpu["repos"]["cuda"]["url"] == "http://mirror/cuda/ubuntu2404/x86_64/"
    assert gpu["pip"]["index_url"].endswith("/cu130")
    assert plan["groups"]["odd"]["stacks"][0]["errors"]  # no os: cannot render packages, says so
    text = "\n".join(kc.kiln_plan_text(plan))
    assert "== group gpu_nodes (4 hosts) ==" in text and "cuda-toolkit-13-0=13.0.2-1" in text


def test_gpu_pci_models_feed_the_facts_module() -> None:
    models = kc.kiln_gpu_pci_models()
    assert models["10de:2330"] == {"model": "H100-SXM5-80GB", "architecture": "hopper", "nvswitch": True, "family": "H100"}
    assert set(kc.kiln_gpu_pci_models(["L40S"])) == {"10de:26b9"}
    assert kc.kiln_gpu(models["10de:2330"]["model"])["pci_id"] == "10de:2330"


def test_missing_python_libs() -> None:
    assert kc.kiln_missing_python_libs(["json", "yaml"]) == []
    assert kc.kiln_missing_python_libs(["no_such_module_kiln"]) == ["no_such_module_kiln"]
