"""Grouping hosts by stack and the Slurm host list compressor (module inventory)."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from kiln_compat_engine.inventory import kiln_hostlist, kiln_stacks_by_host
from kiln_compat_engine.report import kiln_stack_report

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
    out = kiln_stacks_by_host(hv, list(hv))
    assert [len(s["hosts"]) for s in out] == [8, 3, 1]
    assert out[2]["stack"] == {}


def test_stacks_by_host_shares_objects_and_templates_only_when_needed() -> None:
    shared = dict(GOOD)
    raw = {f"n{i}": {"kiln_stack": shared} for i in range(100)}
    raw["t1"] = {"kiln_stack": {"driver": "{{ kiln_driver }}"}}
    templated = {"t1": {"kiln_stack": {"driver": "580.173.02"}}}
    hv = FakeHostVars(raw, templated)
    out = kiln_stacks_by_host(hv, list(raw))
    assert [len(s["hosts"]) for s in out] == [100, 1]
    assert out[1]["stack"] == {"driver": "580.173.02"}


def test_allow_list_is_part_of_the_key() -> None:
    allow = [{"rule": "cuda-driver", "reason": "lab"}]
    hv = {"a": {"kiln_stack": BAD}, "b": {"kiln_stack": BAD, "kiln_stack_allow": allow}}
    out = kiln_stacks_by_host(hv, ["a", "b"])
    assert len(out) == 2
    report = kiln_stack_report(out)
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
    out = kiln_stacks_by_host(hv, ["h1", "h2"])
    assert out[0]["stack"].get("gpu") == expect
    assert out[-1].get("detected_gpus", [None])[0] == expect
    assert "detected_gpu" not in out[-1]["stack"]


def test_unknown_host_is_an_error() -> None:
    with pytest.raises(AnsibleFilterError, match="not in the inventory"):
        kiln_stacks_by_host(FakeHostVars({}, {}), ["ghost"])
    with pytest.raises(AnsibleFilterError, match="list of host names"):
        kiln_stacks_by_host({}, "gpu01")


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
    assert kiln_hostlist(hosts) == expect
