# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Choices the rules' fixes and the recommender share: the newest driver, cuDNN or NCCL that fits.

Every choice skips UNVERIFIED data and denylisted releases, so a ``fix`` or a
recommendation never points at something kiln cannot vouch for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .data import _active_denylist, compat_data
from .lookup import _cc_tuple, _driver_branch
from .versions import _ge, _major, _mm, kiln_version_cmp, kiln_version_key


def _newest_driver_for(min_version: str, *, max_branch: int | None = None, min_major: int | None = None,
                       supported_only: bool = True) -> str | None:
    """Newest listed release on a supported PB/LTSB branch satisfying the bounds."""
    data = compat_data()
    rec = data["recommend"]
    denied = {e.get("version") for e in _active_denylist() if e["component"] == "driver"}
    for preferred_only in ((True, False) if supported_only else (False,)):
        best: str | None = None
        for branch, entry in data["drivers"]["branches"].items():
            if preferred_only and (entry.get("type") not in rec["driver_branch_types"]
                                   or entry.get("status") not in rec["driver_branch_status"]):
                continue
            if entry.get("confidence") == "UNVERIFIED":
                continue
            if max_branch is not None and int(branch) > int(max_branch):
                continue
            if min_major is not None and int(entry.get("max_cuda_major") or 0) < min_major:
                continue
            for rel in entry.get("releases") or []:
                if rel in denied or not _ge(rel, min_version):
                    continue
                if best is None or kiln_version_cmp(rel, best) > 0:
                    best = rel
        if best:
            return best
    return None
def _pick_cudnn(cuda_full: str, gpu: dict[str, Any] | None) -> str | None:
    rels = compat_data()["cudnn"]["releases"]
    major, mm = _major(cuda_full), _mm(cuda_full)
    ok = []
    for ver, rel in rels.items():
        rng = (rel.get("cuda") or {}).get(major)
        if not rng or not (_ge(mm, rng[0]) and _ge(rng[1], mm)):
            continue
        if gpu and rel.get("min_cc") and _cc_tuple(gpu["cc"]) < _cc_tuple(rel["min_cc"]):
            continue
        if rel.get("confidence") == "UNVERIFIED":
            continue
        ok.append(ver)
    return max(ok, key=kiln_version_key) if ok else None


def _pick_nccl(cuda_full: str, gpu: dict[str, Any] | None) -> str | None:
    """Newest NCCL with a build for cuda_full's major at or below its minor, rendered ``ver-1+cudaX.Y``."""
    data = compat_data()["nccl"]
    need = data.get("min_for_arch", {}).get(gpu["arch"]) if gpu else None
    best: tuple[str, str] | None = None
    for ver, rel in data["releases"].items():
        if need and not _ge(ver, need["version"]):
            continue
        if rel.get("confidence") == "UNVERIFIED":
            continue
        builds = [b for b in rel["builds"] if _major(b) == _major(cuda_full) and _ge(_mm(cuda_full), b)]
        if not builds:
            continue
        if best is None or kiln_version_cmp(ver, best[0]) > 0:
            best = (ver, max(builds, key=kiln_version_key))
    return f"{best[0]}-1+cuda{best[1]}" if best else None


def _dcgm_cuda_major(stack: Mapping[str, Any], gpu: dict[str, Any] | None) -> str | None:
    """CUDA major of the DCGM 4 packages: the driver's CUDA major, capped by the GPU architecture."""
    major = None
    br = _driver_branch(stack["driver"]) if stack.get("driver") else None
    if br:
        major = int(br[1].get("max_cuda_major") or 0) or None
    elif stack.get("cuda"):
        major = int(_major(str(stack["cuda"])))
    if major and gpu and gpu.get("max_cuda_major"):
        major = min(major, int(gpu["max_cuda_major"]))
    return str(major) if major else None
