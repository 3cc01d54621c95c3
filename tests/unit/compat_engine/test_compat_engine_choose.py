"""Choices shared by the rules' fixes and the recommender (module choose)."""

from __future__ import annotations

from kiln_compat_engine.choose import _dcgm_cuda_major, _newest_driver_for, _pick_cudnn, _pick_nccl
from kiln_compat_engine.data import _active_denylist, compat_data
from kiln_compat_engine.lookup import _gpu_entry
from kiln_compat_engine.versions import kiln_version_cmp, kiln_version_key


def test_newest_driver_is_on_a_supported_branch_not_denylisted_and_within_bounds() -> None:
    data = compat_data()
    denied = {e.get("version") for e in _active_denylist() if e["component"] == "driver"}
    best = _newest_driver_for("0")
    branch = data["drivers"]["branches"][best.split(".")[0]]
    assert branch["type"] in data["recommend"]["driver_branch_types"] and best not in denied
    capped = _newest_driver_for("0", max_branch=580)
    assert int(capped.split(".")[0]) <= 580 and kiln_version_cmp(capped, best) <= 0
    assert _newest_driver_for("9999") is None


def test_cudnn_and_nccl_fit_the_cuda_and_the_gpu() -> None:
    v100 = _gpu_entry("V100")
    cudnn = _pick_cudnn("12.8.1", v100)
    rel = compat_data()["cudnn"]["releases"][cudnn]
    assert not rel.get("min_cc") or kiln_version_key(rel["min_cc"]) <= kiln_version_key(v100["cc"])
    nccl = _pick_nccl("12.4.1", _gpu_entry("H100"))
    ver, _, build = nccl.partition("-1+cuda")
    assert build.startswith("12.") and kiln_version_cmp(build, "12.4") <= 0
    assert ver in compat_data()["nccl"]["releases"]


def test_dcgm_cuda_major_is_the_drivers_capped_by_the_gpu() -> None:
    assert _dcgm_cuda_major({"driver": "595.91.07"}, None) == "13"
    assert _dcgm_cuda_major({"driver": "580.173.02"}, _gpu_entry("V100")) == "12"
    assert _dcgm_cuda_major({"cuda": "12.4"}, None) == "12" and _dcgm_cuda_major({}, None) is None
