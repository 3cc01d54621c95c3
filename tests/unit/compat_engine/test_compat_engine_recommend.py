"""The recommender: a complete compatible stack for every GPU, OS and PyTorch pin (module recommend)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from kiln_compat_engine.packages import kiln_packages
from kiln_compat_engine.recommend import kiln_recommend_stack
from kiln_compat_engine.rules import kiln_stack_violations


RECOMMEND_CASES = [
    (gpu, os, torch)
    for gpu in ("H100", "H100-SXM5-80GB", "H200-SXM-141GB", "A100-SXM4-80GB", "L40S", "T4", "V100", "B200", "GH200",
                "B300_GB300", "RTX_PRO_6000_Blackwell")
    for os in ("ubuntu-22.04", "ubuntu-24.04", "debian-12", "rocky-9")
    for torch in (None, "2.6", "2.12")
]


@pytest.mark.parametrize(("gpu", "os", "torch"), RECOMMEND_CASES)
def test_recommend_stack_is_complete_and_compatible(gpu: str, os: str, torch: str | None) -> None:
    try:
        stack = kiln_recommend_stack(gpu, os=os, torch=torch)
    except AnsibleFilterError as exc:
        # the only legitimate refusal: no wheel of that PyTorch release runs on the GPU
        assert torch is not None and "no PyTorch/CUDA combination" in str(exc)
        return
    for key in ("gpu", "os", "driver", "driver_flavor", "cuda", "cudnn", "nccl", "torch", "container_toolkit", "dcgm",
                "ofed", "slurm", "kubernetes"):
        assert key in stack, key
    assert kiln_stack_violations(stack) == []
    assert kiln_packages(stack)  # every recommendation renders


def test_recommend_prefers_newest_and_respects_architecture() -> None:
    h100 = kiln_recommend_stack("H100-SXM5-80GB")
    assert h100["driver_flavor"] == "open" and h100["fabricmanager"] == h100["driver"]
    assert h100["cuda"].startswith("13.") and h100["torch"].startswith("2.14")
    v100 = kiln_recommend_stack("V100")
    assert v100["driver"].startswith("580.") and v100["driver_flavor"] == "proprietary" and v100["cuda"].startswith("12.")
    assert "fabricmanager" not in kiln_recommend_stack("L40S")
    assert kiln_recommend_stack("A100", os="ubuntu-20.04")["cuda"].startswith("12.")


def test_recommend_rejects_unknowns() -> None:
    for args in (("RTX-9090",), ("H100", "plan9"), ("H100", "ubuntu-24.04", "9.9")):
        with pytest.raises(AnsibleFilterError, match="kiln_recommend_stack"):
            kiln_recommend_stack(*args)
