"""Rules of kiln_stack_violations, with cases taken from the official tables.

Each case names the table it comes from (data/compat.yml carries the URLs).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from kiln_compat_engine.data import _CACHE, DATA_DIR
from kiln_compat_engine.resolve import kiln_resolve_stack
from kiln_compat_engine.rules import kiln_stack_violations
from kiln_compat_engine.violations import _stack_get

# (id, stack, expected rule ids with severity; None = the stack must be clean of
# rules involving these components). Sources: CUDA release notes Table 3 (toolkit
# driver), minor-version-compatibility guide, architecture matrix, kernel-modules
# guide, GPU Operator platform support, cuDNN / PyTorch matrices, Slurm upgrade
# guide, Kubernetes version-skew policy.
COMPATIBLE: list[tuple[str, dict[str, Any]]] = [
    ("cuda-12.4.0-on-its-ga-driver", {"cuda": "12.4.0", "driver": "550.54.14"}),
    ("cuda-12.4.1-on-550.54.15", {"cuda": "12.4.1", "driver": "550.54.15"}),
    ("cuda-12.2.2-on-535.104.05", {"cuda": "12.2.2", "driver": "535.104.05"}),
    ("cuda-11.8-on-520.61.05", {"cuda": "11.8.0", "driver": "520.61.05"}),
    ("cuda-12.8-on-570.26", {"cuda": "12.8.0", "driver": "570.26"}),
    ("cuda-12.9.1-on-575.57.08", {"cuda": "12.9.1", "driver": "575.57.08"}),
    ("cuda-13.0.2-on-580.95.05", {"cuda": "13.0.2", "driver": "580.95.05"}),
    ("cuda-13.2.2-on-595.71.05", {"cuda": "13.2.2", "driver": "595.71.05"}),
    ("cuda-12.6-on-newer-595", {"cuda": "12.6", "driver": "595.91.07"}),
    ("b200-explicit-driver-floor", {"gpu": "B200", "driver": "570.133.20", "driver_flavor": "open", "cuda": "12.8.1"}),
    ("h100-open-580", {"gpu": "H100", "driver": "580.173.02", "driver_flavor": "open", "cuda": "13.0.2"}),
    ("v100-r580-proprietary-cuda12", {"gpu": "V100", "driver": "580.173.02", "driver_flavor": "proprietary", "cuda": "12.9.1"}),
    ("t4-proprietary-allowed", {"gpu": "T4", "driver": "570.124.06", "driver_flavor": "proprietary", "cuda": "12.8.1"}),
    ("fabricmanager-equal", {"driver": "550.127.05", "fabricmanager": "550.127.05"}),
    ("cudnn-9.17-cuda-13.1", {"cudnn": "9.17.1.4", "cuda": "13.1.1"}),
    ("cudnn-9.10-cuda-11.8", {"cudnn": "9.10.2.21", "cuda": "11.8.0"}),
    ("cudnn-9.10-on-volta", {"cudnn": "9.10.2.21", "gpu": "V100", "cuda": "12.6.3"}),
    ("nccl-12.4-build-on-12.6", {"nccl": "2.21.5-1+cuda12.4", "cuda": "12.6.3"}),
    ("nccl-without-build-picks-one", {"nccl": "2.30.7", "cuda": "12.9.1"}),
    ("torch-2.14-cu126-wheel-on-535", {"torch": "2.14", "driver": "535.309.01"}),
    ("torch-2.8-cu126-on-volta", {"torch": "2.8", "cuda": "12.6.3", "gpu": "V100"}),
    ("torch-2.12-cu130-blackwell", {"torch": "2.12", "cuda": "13.0.2", "gpu": "B200", "driver": "580.173.02"}),
    ("slurm-24.11-three-back", {"slurm": {"slurmdbd": "24.11", "slurmctld": "24.11", "slurmd": "23.02"}}),
    ("slurm-24.05-two-back", {"slurm": {"slurmdbd": "24.05.4", "slurmctld": "24.05.4", "slurmd": "23.02.7"}}),
    ("slurm-debian-22.05", {"slurm": {"slurmdbd": "22.05.8", "slurmctld": "22.05.8", "slurmd": "22.05.8"}}),
    ("k8s-kubelet-3-older", {"kubernetes": {"apiserver": "1.30", "kubelet": "1.27", "kubectl": "1.31"}}),
    ("k8s-pre-1.25-two-older", {"kubernetes": {"apiserver": "1.24", "kubelet": "1.22", "kubectl": "1.23"}}),
    ("cuda-13-on-ubuntu-22.04", {"cuda": "13.0.2", "os": "ubuntu-22.04"}),
    ("cuda-12-on-rocky-9", {"cuda": "12.6.3", "os": "rocky-9"}),
    ("cuda-13-on-debian-12", {"cuda": "13.2.2", "os": "debian-12"}),
    ("dcgm-4-on-r580-volta", {"dcgm": "4.6.0", "driver": "580.173.02", "gpu": "V100"}),
    ("dcgm-3.3-on-hopper", {"dcgm": "3.3.9", "gpu": "H100"}),
    ("doca-ofed", {"ofed": {"kind": "doca", "version": "3.2.1"}, "driver_flavor": "proprietary"}),
    ("inbox-with-open-and-new-kernel", {"ofed": {"kind": "inbox"}, "driver_flavor": "open", "kernel": "6.8.0-45-generic"}),
]

INCOMPATIBLE: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    ("cuda-12.4.1-on-ga-driver-is-mvc", {"cuda": "12.4.1", "driver": "550.54.14"}, {"cuda-driver-mvc": "warning"}),
    ("cuda-12.8-on-535-is-mvc", {"cuda": "12.8.1", "driver": "535.309.01"}, {"cuda-driver-mvc": "warning"}),
    ("cuda-11.8-on-450.80.02-is-mvc", {"cuda": "11.8.0", "driver": "450.80.02"}, {"cuda-driver-mvc": "warning"}),
    ("cuda-13-on-575", {"cuda": "13.0.0", "driver": "575.57.08"}, {"cuda-driver": "error"}),
    ("cuda-13-on-550", {"cuda": "13.0.2", "driver": "550.127.05"}, {"cuda-driver": "error"}),
    ("cuda-12-on-520", {"cuda": "12.0.0", "driver": "520.61.05"}, {"cuda-driver": "error"}),
    ("blackwell-proprietary", {"gpu": "B200", "driver_flavor": "proprietary"}, {"driver-flavor-gpu": "error"}),
    ("gh200-proprietary", {"gpu": "GH200", "driver_flavor": "proprietary"}, {"driver-flavor-gpu": "error"}),
    ("volta-open", {"gpu": "V100", "driver_flavor": "open"}, {"driver-flavor-gpu": "error"}),
    ("open-before-r515", {"driver": "510.47.03", "driver_flavor": "open"}, {"driver-flavor-branch": "error"}),
    ("volta-on-r595", {"gpu": "V100", "driver": "595.91.07"}, {"gpu-driver-max": "error"}),
    ("volta-on-cuda-13", {"gpu": "V100", "cuda": "13.0.2"}, {"gpu-cuda-max": "error"}),
    ("hopper-on-cuda-11.7", {"gpu": "H100", "cuda": "11.7.1"}, {"gpu-cuda-min": "error"}),
    ("b200-below-explicit-floor", {"gpu": "B200", "driver": "570.124.06"}, {"gpu-driver-min": "error"}),
    ("l4-on-r515", {"gpu": "L4", "driver": "515.48.07"}, {"gpu-driver-min": "error"}),
    ("a10-min-cuda-unverified", {"gpu": "A10", "cuda": "11.0.3"}, {"gpu-cuda-min": "warning"}),
    ("fabricmanager-off-by-one", {"driver": "550.127.05", "fabricmanager": "550.54.15"}, {"fabricmanager-driver": "error"}),
    ("cudnn-9.17-no-cuda-11", {"cudnn": "9.17.1.4", "cuda": "11.8.0"}, {"cudnn-cuda": "error"}),
    ("cudnn-9.17-not-13.2", {"cudnn": "9.17.1.4", "cuda": "13.2.0"}, {"cudnn-cuda": "error"}),
    ("cudnn-8-unverified-range", {"cudnn": "8.9.7.29", "cuda": "12.4.1"}, {"cudnn-cuda": "warning"}),
    ("cudnn-9.17-volta", {"cudnn": "9.17.1.4", "gpu": "V100", "cuda": "12.6.3"}, {"cudnn-gpu": "error"}),
    ("nccl-newer-build-than-cuda", {"nccl": "2.21.5-1+cuda12.4", "cuda": "12.2.2"}, {"nccl-cuda": "error"}),
    ("nccl-cuda-12-build-on-13", {"nccl": "2.21.5", "cuda": "13.0.2"}, {"nccl-cuda": "error"}),
    ("nccl-old-on-blackwell", {"nccl": "2.23.4", "gpu": "B200"}, {"nccl-gpu": "error"}),
    ("torch-2.0-no-cuda-12.4", {"torch": "2.0", "cuda": "12.4.1"}, {"torch-cuda": "error"}),
    ("torch-cu13-on-575", {"torch": "2.14+cu130", "driver": "575.57.08"}, {"torch-driver": "error"}),
    ("torch-2.8-cu128-drops-volta", {"torch": "2.8+cu128", "gpu": "V100"}, {"torch-gpu": "error"}),
    ("cuda-13-on-ubuntu-20.04", {"cuda": "13.0.2", "os": "ubuntu-20.04"}, {"cuda-os": "error"}),
    ("cuda-12-on-rhel-10-unconfirmed", {"cuda": "12.6.3", "os": "rhel-10"}, {"cuda-os": "warning"}),
    ("slurmd-newer-than-ctld", {"slurm": {"slurmctld": "24.05", "slurmd": "24.11"}}, {"slurm-order": "error"}),
    ("slurmctld-newer-than-dbd", {"slurm": {"slurmdbd": "24.05", "slurmctld": "24.11"}}, {"slurm-order": "error"}),
    ("slurmd-outside-24.11-window", {"slurm": {"slurmctld": "24.11", "slurmd": "22.05"}}, {"slurm-skew": "error"}),
    ("slurmd-outside-24.05-window", {"slurm": {"slurmctld": "24.05", "slurmd": "22.05"}}, {"slurm-skew": "error"}),
    ("kubelet-newer-than-api", {"kubernetes": {"apiserver": "1.30", "kubelet": "1.31"}}, {"kubernetes-kubelet-skew": "error"}),
    ("kubelet-4-older", {"kubernetes": {"apiserver": "1.30", "kubelet": "1.26"}}, {"kubernetes-kubelet-skew": "error"}),
    ("kubelet-3-older-pre-1.25", {"kubernetes": {"apiserver": "1.24", "kubelet": "1.21"}}, {"kubernetes-kubelet-skew": "error"}),
    ("kubectl-2-older", {"kubernetes": {"apiserver": "1.30", "kubectl": "1.28"}}, {"kubernetes-kubectl-skew": "error"}),
    ("dcgm-4-cuda11-driver", {"dcgm": "4.6.0", "driver": "470.239.06"}, {"dcgm-cuda": "warning"}),
    ("inbox-proprietary", {"ofed": {"kind": "inbox"}, "driver_flavor": "proprietary"}, {"gpudirect-flavor": "warning"}),
    ("inbox-old-kernel", {"ofed": {"kind": "inbox"}, "kernel": "5.10.0-28-amd64"}, {"gpudirect-kernel": "warning"}),
    ("driver-eol", {"driver": "535.309.01"}, {"driver-branch-eol": "warning"}),
    ("deny-rc-toolkit", {"cuda": "11.0.1"}, {"denylist": "error"}),
    ("deny-beta-driver", {"driver": "590.44.01"}, {"denylist": "warning"}),
    ("deny-ctk-cve-unverified", {"container_toolkit": "1.17.0"}, {"denylist": "warning"}),
]


def rules(violations: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in violations:
        # keep the worst severity per rule
        if out.get(v["rule"]) != "error":
            out[v["rule"]] = v["severity"]
    return out


def value_text(stack: dict[str, Any], component: str) -> str:
    value = _stack_get(stack, component)
    if isinstance(value, dict):
        return str(value.get("kind") or value.get("version"))
    return str(value)


def apply_fix(stack: dict[str, Any], violation: dict[str, Any]) -> dict[str, Any]:
    fixed = copy.deepcopy(stack)
    fixed.update(copy.deepcopy(violation["fix_stack"]))
    return fixed


@pytest.mark.parametrize(("stack"), [c[1] for c in COMPATIBLE], ids=[c[0] for c in COMPATIBLE])
def test_compatible_cases(stack: dict[str, Any]) -> None:
    found = [v for v in kiln_stack_violations(stack) if v["rule"] not in ("driver-branch-eol",)]
    assert found == []


@pytest.mark.parametrize(("stack", "expected"), [c[1:] for c in INCOMPATIBLE], ids=[c[0] for c in INCOMPATIBLE])
def test_incompatible_cases(stack: dict[str, Any], expected: dict[str, str]) -> None:
    got = rules(kiln_stack_violations(stack))
    for rule, severity in expected.items():
        assert got.get(rule) == severity, got


@pytest.mark.parametrize(("stack"), [c[1] for c in INCOMPATIBLE], ids=[c[0] for c in INCOMPATIBLE])
def test_violation_shape_and_messages(stack: dict[str, Any]) -> None:
    for v in kiln_stack_violations(stack):
        assert {"rule", "components", "message", "fix", "fix_stack", "severity", "confidence", "source"} <= set(v)
        assert v["severity"] in ("error", "warning")
        assert v["message"].endswith((".", ")")) and v["fix"]
        if v["confidence"] == "UNVERIFIED":
            assert v["severity"] == "warning"
        if len(v["components"]) >= 2:
            for comp in v["components"]:
                assert value_text(stack, comp) in v["message"], (comp, v["message"])


@pytest.mark.parametrize(("stack"), [c[1] for c in INCOMPATIBLE], ids=[c[0] for c in INCOMPATIBLE])
def test_each_fix_removes_its_violation(stack: dict[str, Any]) -> None:
    for v in kiln_stack_violations(stack):
        if v["rule"] == "torch-gpu":  # no single key fixes it: the message says which wheels to use
            continue
        assert v["fix_stack"], v
        after = kiln_stack_violations(apply_fix(stack, v))
        assert not [a for a in after if a["rule"] == v["rule"] and a["components"] == v["components"]], (v, after)


def test_example_broken_stack_fixes_converge() -> None:
    """Applying every fix of the documented broken stack, repeatedly, reaches no errors."""
    import yaml

    stack = yaml.safe_load((DATA_DIR.parent / "inventories/example/broken-stack.yml").read_text())["kiln_stack"]
    for _ in range(5):
        errors = [v for v in kiln_stack_violations(stack) if v["severity"] == "error"]
        if not errors:
            break
        stack = apply_fix(stack, errors[0])
    assert [v["rule"] for v in kiln_stack_violations(stack) if v["severity"] == "error"] == []


@pytest.mark.parametrize(
    ("stack", "component"),
    [
        ({"cuda": "12.7"}, "cuda"),
        ({"cuda": "13.4"}, "cuda"),
        ({"driver": "999.10.01"}, "driver"),
        ({"driver": "latest"}, "driver"),
        ({"gpu": "RTX-9090"}, "gpu"),
        ({"os": "plan9"}, "os"),
        ({"cudnn": "9.99.0.1"}, "cudnn"),
        ({"nccl": "2.99.1"}, "nccl"),
        ({"nccl": "2.21.5-1+cuda12.9"}, "nccl"),
        ({"torch": "3.0"}, "torch"),
        ({"torch": "2.14+cu999"}, "torch"),
        ({"container_toolkit": "9.9.9"}, "container_toolkit"),
        ({"dcgm": "5.0.0"}, "dcgm"),
        ({"driver_flavor": "closed"}, "driver_flavor"),
        ({"slurm": {"slurmd": "19.05"}}, "slurm.slurmd"),
        ({"kubernetes": {"kubelet": "1.3"}}, "kubernetes.kubelet"),
        ({"kubernetes": {"apiserver": "1.99"}}, "kubernetes.apiserver"),
        ({"ofed": {"kind": "vendor"}}, "ofed.kind"),
    ],
)
def test_unknown_version_is_never_a_silent_pass(stack: dict[str, Any], component: str) -> None:
    # a value of the wrong shape is refused by the schema (invalid-stack), one of the right
    # shape that the data does not know by unknown-version: both errors naming the key
    found = [v for v in kiln_stack_violations(stack) if v["rule"] in ("unknown-version", "invalid-stack")]
    assert found and found[0]["components"][0] in (component, f"kiln_stack.{component}"), found
    assert found[0]["severity"] == "error"
    assert value_text(stack, component) in found[0]["message"]


def test_unverified_branch_is_only_a_warning() -> None:
    found = kiln_stack_violations({"driver": "615.20.01"})
    assert [(v["rule"], v["severity"]) for v in found] == [("unknown-version", "warning")]


def test_float_version_hint() -> None:
    found = kiln_stack_violations({"kubernetes": {"apiserver": 1.3}})
    assert "float" in found[0]["message"]


def test_allow_list_turns_error_into_warning() -> None:
    stack = {"cuda": "13.0.2", "driver": "550.127.05"}
    plain = rules(kiln_stack_violations(stack))
    assert plain["cuda-driver"] == "error"
    allowed = kiln_stack_violations(stack, [{"rule": "cuda-driver", "reason": "lab node, compat package installed"}])
    hit = [v for v in allowed if v["rule"] == "cuda-driver"][0]
    assert hit["severity"] == "warning" and hit["allowed"] is True
    assert hit["allow_reason"] == "lab node, compat package installed"
    assert all(v["allowed"] is False for v in allowed if v["rule"] != "cuda-driver")


@pytest.mark.parametrize("allow", [[{"rule": "cuda-driver"}], [{"rule": "cuda-driver", "reason": " "}], "cuda-driver", [["x"]]])
def test_allow_list_needs_reasons(allow: Any) -> None:
    found = kiln_stack_violations({"cuda": "13.0"}, allow)
    assert found and {v["rule"] for v in found} == {"invalid-stack"}
    assert all(v["components"][0].startswith("kiln_stack_allow") and v["severity"] == "error" for v in found)


def test_empty_and_absent_stacks_are_compatible() -> None:
    assert kiln_stack_violations({}) == []
    assert kiln_stack_violations(None) == []
    assert kiln_stack_violations({"gpu": "H100", "cuda": None, "slurm": {}}) == []


@pytest.mark.parametrize("bad", ["H100", ["H100"], {"ofed": ["doca"]}, {"slurm": {"slurmdx": "24.11"}}])
def test_malformed_stacks_raise(bad: Any) -> None:
    found = kiln_stack_violations(bad)
    assert found and {v["rule"] for v in found} == {"invalid-stack"} and found[0]["severity"] == "error"
    assert found[0]["components"][0].startswith("kiln_stack")
    with pytest.raises(AnsibleFilterError, match="kiln_stack"):
        kiln_resolve_stack(bad)


def test_gpu_by_pci_id_in_a_stack() -> None:
    assert rules(kiln_stack_violations({"gpu": "10de:2901", "driver_flavor": "proprietary"})) == {"driver-flavor-gpu": "error"}


def test_detected_gpu_mismatch() -> None:
    found = kiln_stack_violations({"gpu": "H100"}, detected=["10de:20b2"])
    assert [v["rule"] for v in found] == ["gpu-detected"]
    assert found[0]["fix_stack"] == {"gpu": "A100-SXM4-80GB"}
    assert kiln_stack_violations({"gpu": "H100"}, detected=["10de:2330"]) == []


def test_denylist_expiry(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    entries = [{"id": "x", "component": "dcgm", "version": "4.6.0", "reason": "r.", "link": "https://example.invalid/x",
                "confidence": "VERIFIED", "expires": "2026-01-31"}]
    monkeypatch.setitem(_CACHE, "denylist", entries)
    assert rules(kiln_stack_violations({"dcgm": "4.6.0"}, today="2026-01-01")) == {"denylist": "error"}
    assert kiln_stack_violations({"dcgm": "4.6.0"}, today="2026-02-01") == []


def test_every_rule_function_of_every_family_runs() -> None:
    import inspect

    from kiln_compat_engine.rules import CHECKS, cluster, containers, cuda, dcgm, denylist, fabricmanager, gpu, ofed

    defined = [f for m in (gpu, fabricmanager, cuda, dcgm, ofed, cluster, containers, denylist)
               for n, f in vars(m).items() if n.startswith("r_") and inspect.isfunction(f) and f.__module__ == m.__name__]
    assert sorted(f.__qualname__ for f in CHECKS) == sorted(f.__qualname__ for f in defined)
    assert len(set(CHECKS)) == len(CHECKS) == len(defined)


@pytest.mark.parametrize(("stack", "expected"), [
    ({"dcgm": "4.6.0", "driver": "450.51.05"}, {"dcgm-driver": "error", "dcgm-cuda": "warning", "driver-branch-eol": "warning"}),
    ({"dcgm": "3.3.9", "gpu": "B200"}, {"dcgm-gpu": "warning"}),
    ({"dcgm": "4.6.0", "dcgm_exporter": "3.3.9-3.6.1"}, {"dcgm-exporter": "error"}),
    ({"ofed": {"kind": "mlnx", "version": "5.8-1.0.1.1"}}, {"unknown-version": "warning", "ofed-mlnx-support": "warning",
                                                             "ofed-mlnx-eol": "warning"}),
], ids=["dcgm-driver", "dcgm-gpu", "dcgm-exporter", "ofed-mlnx-support"])
def test_dcgm_and_rdma_families(stack: dict[str, Any], expected: dict[str, str]) -> None:
    assert rules(kiln_stack_violations(stack, today="2026-12-02")) == expected  # ofed-mlnx-eol reads the date


# -- confidence softens an edge, never invents a build (issue 33 item 5) ---------------------------------------

@pytest.mark.parametrize("stack", [
    {"cuda": "13.0", "cudnn": "8.9.7.29"},   # UNVERIFIED entry: no cuDNN 8 build for CUDA 13 exists at all
    {"cuda": "13.0", "cudnn": "8.9.0.131"},
    {"cuda": "11.8", "cudnn": "9.17.1.4"},
])
def test_no_build_for_the_cuda_major_is_an_error_whatever_the_confidence(stack) -> None:
    from kiln_compat_engine.rules import kiln_stack_violations
    found = [v for v in kiln_stack_violations(stack) if v["rule"] == "cudnn-cuda"]
    assert found and all(v["severity"] == "error" for v in found), found
    assert "no cuDNN" in found[0]["message"] and "build exists for CUDA" in found[0]["message"]


def test_an_unverified_nccl_entry_without_a_build_for_the_major_is_still_an_error(monkeypatch) -> None:
    from kiln_compat_engine.data import compat_data
    from kiln_compat_engine.rules import kiln_stack_violations
    rel = compat_data()["nccl"]["releases"]["2.21.5"]
    monkeypatch.setitem(rel, "confidence", "UNVERIFIED")
    monkeypatch.setitem(rel, "builds_confidence", "UNVERIFIED")
    (found,) = [v for v in kiln_stack_violations({"cuda": "13.0", "nccl": "2.21.5"}) if v["rule"] == "nccl-cuda"]
    assert found["severity"] == "error"
    # the same entry, short of a minor inside a major it has builds for, keeps its softened edge
    (edge,) = [v for v in kiln_stack_violations({"cuda": "12.2", "nccl": "2.21.5"}) if v["rule"] == "nccl-cuda"]
    assert edge["severity"] == "warning"
