# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Rule family RDMA stack / kernel: ofed-mlnx-support, gpudirect-flavor, gpudirect-kernel.
"""

from __future__ import annotations

from ..versions import _ge, _mm, kiln_version_cmp
from ..violations import WARNING, _violation
from .context import Checker


def r_ofed(ck: Checker) -> None:
    ofed = ck.s.get("ofed")
    if not ofed or ofed.get("kind") not in ck.d["ofed"]["kinds"]:
        return
    d = ck.d["ofed"]
    kind, ver = ofed.get("kind"), ofed.get("version")
    mlnx_major = _mm(ver.split("-")[0]) if kind == "mlnx" and ver else None
    if mlnx_major and mlnx_major not in d["mlnx_releases"] and kiln_version_cmp(mlnx_major, d["kinds"]["mlnx"]["last_release"]) < 0:
        ck.add(_violation(
            "ofed-mlnx-support", ["ofed"],
            f"MLNX_OFED {ver} is older than the last standalone LTS ({d['kinds']['mlnx']['last_release']}) and no "
            f"longer maintained.",
            "Move to DOCA-OFED (kind: doca) or MLNX_OFED 24.10 LTS.", {"ofed": {"kind": "doca", "version": "3.2.1"}},
            "DERIVED", d["kinds"]["mlnx"]["source"], severity=WARNING))
    if kind == "inbox":
        dma = d["gpudirect"]["dma_buf"]
        if ck.s.get("driver_flavor") == "proprietary":
            ck.add(_violation(
                "gpudirect-flavor", ["ofed", "driver_flavor"],
                f"With inbox RDMA drivers (ofed kind inbox) GPUDirect RDMA needs DMA-BUF, which needs the open kernel "
                f"modules; driver_flavor proprietary leaves no GPUDirect path.",
                "Set kiln_stack.driver_flavor to open, or use DOCA-OFED (ofed kind doca) for nvidia-peermem.",
                {"driver_flavor": "open"}, dma["confidence"], dma["source"], severity=WARNING))
        if ck.s.get("kernel") and not _ge(ck.s["kernel"].split("-")[0], dma["min_kernel"]):
            ck.add(_violation(
                "gpudirect-kernel", ["ofed", "kernel"],
                f"DMA-BUF GPUDirect RDMA over inbox drivers needs kernel >= {dma['min_kernel']}; kernel "
                f"{ck.s['kernel']} is older.",
                f"Use a kernel >= {dma['min_kernel']} or DOCA-OFED (ofed kind doca).",
                {"ofed": {"kind": "doca", "version": "3.2.1"}}, dma["confidence"], dma["source"], severity=WARNING))
