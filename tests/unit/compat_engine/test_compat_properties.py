"""Property tests of kiln_stack_violations (hypothesis, kept small for 2-core CI)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_compat_engine.data import compat_data
from kiln_compat_engine.rules import kiln_stack_violations
from kiln_compat_engine.versions import kiln_version_cmp, kiln_version_key

DATA = compat_data()
CUDA_12 = sorted((v for v in DATA["cuda"]["releases"] if v.startswith("12.")), key=kiln_version_key)
DRIVERS = sorted({r for b in DATA["drivers"]["branches"].values() for r in b["releases"]}, key=kiln_version_key)

# Values per key: known ones, plus unknown/odd ones so unknown-version is exercised too.
VALUES: dict[str, list[Any]] = {
    "gpu": ["H100", "V100", "B200", "GH200", "A10", "T4", "L4", "10de:2330", "RTX-9090"],
    "os": ["ubuntu-20.04", "ubuntu-22.04", "ubuntu-24.04", "debian-12", "rocky-9", "rhel-10", "plan9"],
    "kernel": ["5.10.0-28-amd64", "6.8.0-45-generic"],
    "driver": ["470.239.06", "535.309.01", "550.127.05", "570.124.06", "575.57.08", "580.173.02", "590.44.01",
               "595.91.07", "610.57.04", "615.20.01", "999.1.1"],
    "driver_flavor": ["open", "proprietary", "closed"],
    "fabricmanager": ["550.127.05", "580.173.02", "595.91.07"],
    "cuda": ["11.8", "12.2.2", "12.4", "12.8.1", "12.9.1", "13.0.2", "13.2", "12.7"],
    "cudnn": ["8.9.7.29", "9.5.1.17", "9.10.2.21", "9.17.1.4", "9.24.0.43", "9.99.0.1"],
    "nccl": ["2.21.5", "2.21.5-1+cuda12.4", "2.23.4", "2.28.7-1+cuda13.0", "2.30.7", "2.99.1"],
    "torch": ["2.0", "2.6", "2.8", "2.8+cu128", "2.12", "2.14.1", "2.14+cu126", "3.0"],
    "container_toolkit": ["1.15.0", "1.17.8", "1.20.0", "9.9.9"],
    "dcgm": ["3.3.9", "4.2.3", "4.6.0", "5.0.0"],
    "ofed": [{"kind": "inbox"}, {"kind": "doca", "version": "3.2.1"}, {"kind": "mlnx", "version": "5.8-1.0.1.1"},
             {"kind": "mlnx", "version": "24.10-4.1.4.0"}],
    "slurm": [{"slurmdbd": "24.11", "slurmctld": "24.11", "slurmd": "23.02"}, {"slurmctld": "24.05", "slurmd": "24.11"},
              {"slurmctld": "25.11", "slurmd": "22.05"}],
    "kubernetes": [{"apiserver": "1.30", "kubelet": "1.27"}, {"apiserver": "1.30", "kubelet": "1.31", "kubectl": "1.28"},
                   {"kubelet": "1.33"}],
}
KEYS = sorted(VALUES)


def ident(violations: list[dict[str, Any]]) -> set[tuple[str, tuple[str, ...]]]:
    return {(v["rule"], tuple(v["components"])) for v in violations}


@st.composite
def stacks(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.sets(st.sampled_from(KEYS), max_size=8))
    return {k: draw(st.sampled_from(VALUES[k])) for k in keys}


SETTINGS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(base=stacks(), extra_key=st.sampled_from(KEYS), data=st.data())
def test_adding_an_absent_component_never_removes_a_violation(base: dict[str, Any], extra_key: str, data: st.DataObject) -> None:
    if extra_key in base:
        return
    extended = dict(base)
    extended[extra_key] = data.draw(st.sampled_from(VALUES[extra_key]))
    after = kiln_stack_violations(extended)
    if any(v["rule"] == "invalid-stack" for v in after):
        return  # a malformed value stops the check before any rule: still refused, never compatible
    assert ident(kiln_stack_violations(base)) <= ident(after)


@SETTINGS
@given(cuda=st.sampled_from(CUDA_12), driver=st.sampled_from(DRIVERS))
def test_driver_accepted_for_cuda_12x_is_accepted_for_every_earlier_12y(cuda: str, driver: str) -> None:
    def accepted(c: str) -> bool:
        return not [v for v in kiln_stack_violations({"cuda": c, "driver": driver}) if "cuda" in v["components"]]

    if accepted(cuda):
        for earlier in CUDA_12:
            if kiln_version_cmp(earlier, cuda) <= 0:
                assert accepted(earlier), (earlier, cuda, driver)


@SETTINGS
@given(stack=stacks())
def test_unverified_is_never_an_error_and_every_violation_is_complete(stack: dict[str, Any]) -> None:
    for v in kiln_stack_violations(stack):
        assert v["severity"] in ("error", "warning")
        if v["confidence"] == "UNVERIFIED":
            assert v["severity"] == "warning", v
        assert v["rule"] and v["components"] and v["message"] and v["fix"]


@SETTINGS
@given(stack=stacks())
def test_fix_stack_removes_its_violation(stack: dict[str, Any]) -> None:
    for v in kiln_stack_violations(stack):
        if not v["fix_stack"]:
            continue
        fixed = dict(stack)
        fixed.update(v["fix_stack"])
        after = ident(kiln_stack_violations(fixed))
        assert (v["rule"], tuple(v["components"])) not in after, (v, fixed)


@settings(max_examples=200, deadline=None, database=None)
@given(parts=st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=4),
       other=st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=4))
def test_version_order_matches_integer_tuples(parts: list[int], other: list[int]) -> None:
    def norm(p: list[int]) -> tuple[int, ...]:
        p = list(p)
        while p and p[-1] == 0:
            p.pop()
        return tuple(p)

    a, b = ".".join(map(str, parts)), ".".join(map(str, other))
    expected = (norm(parts) > norm(other)) - (norm(parts) < norm(other))
    assert kiln_version_cmp(a, b) == expected
