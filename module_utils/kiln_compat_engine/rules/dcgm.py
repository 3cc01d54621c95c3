# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Rule family DCGM: dcgm-driver, dcgm-gpu, dcgm-cuda, dcgm-exporter.
"""

from __future__ import annotations

from ..choose import _dcgm_cuda_major, _newest_driver_for
from ..versions import _ge, _major, _mm, kiln_version_cmp, kiln_version_key
from ..violations import _violation
from .context import Checker


def r_dcgm(ck: Checker) -> None:
    if "dcgm" not in ck.s or str(ck.s["dcgm"]) not in ck.d["dcgm"]["releases"]:
        return
    ver, dd = str(ck.s["dcgm"]), ck.d["dcgm"]
    if ck.driver and not _ge(ck.s["driver"], dd["min_driver"]["version"]):
        target = _newest_driver_for(dd["min_driver"]["version"], max_branch=ck.gpu_max_branch())
        ck.add(_violation(
            "dcgm-driver", ["dcgm", "driver"],
            f"DCGM {ver} needs driver >= {dd['min_driver']['version']}, but the driver is {ck.s['driver']}.",
            f"Raise kiln_stack.driver to {target}.", ck.driver_fix(target) if target else None,
            dd["min_driver"]["confidence"], dd["min_driver"]["source"]))
    if ck.gpu:
        need = dd.get("min_for_arch", {}).get(ck.gpu["arch"])
        if need and kiln_version_cmp(_mm(ver), need["version"]) < 0:
            newest = max(dd["releases"], key=kiln_version_key)
            ck.add(_violation(
                "dcgm-gpu", ["dcgm", "gpu"],
                f"DCGM {ver} predates {ck.gpu['arch']} support ({ck.gpu['name']} needs DCGM >= {need['version']}).",
                f"Set kiln_stack.dcgm to {newest}.", {"dcgm": newest}, need["confidence"], need["source"]))
    if ck.driver and _major(ver) == "4":
        cuda_major = _dcgm_cuda_major(ck.s, ck.gpu)
        if cuda_major == "11":
            info = dd["cuda11_packages_in_4x"]
            ck.add(_violation(
                "dcgm-cuda", ["dcgm", "driver"],
                f"DCGM {ver} would need the -cuda11 packages for driver {ck.s['driver']} (a CUDA 11 branch), and "
                f"whether DCGM 4 still publishes them is not confirmed.",
                "Use DCGM 3.3.9 with this driver, or raise the driver to a CUDA 12+ branch.", {"dcgm": "3.3.9"},
                info["confidence"], info["source"]))


def r_dcgm_exporter(ck: Checker) -> None:
    exp, dcgm = ck.s.get("dcgm_exporter"), ck.s.get("dcgm")
    if not exp or not dcgm:
        return
    exp_dcgm = exp.lstrip("v").split("-")[0]
    if _major(exp_dcgm) != _major(dcgm):
        ck.add(_violation(
            "dcgm-exporter", ["dcgm_exporter", "dcgm"],
            f"dcgm-exporter {exp} is built for DCGM {exp_dcgm}, but DCGM is {dcgm}: the exporter needs the same "
            f"DCGM major.",
            f"Set kiln_stack.dcgm_exporter to a {_major(dcgm)}.x build (<DCGM version>-<exporter version>).",
            None, "DERIVED", ck.d["sources"]["gpu_operator_lifecycle"]))
