# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The recommender: a complete compatible stack for a GPU on an OS (newest supported choices).
"""

from __future__ import annotations

from typing import Any

from .choose import _dcgm_cuda_major, _newest_driver_for, _pick_cudnn, _pick_nccl
from .data import _active_denylist, compat_data
from .errors import CompatError
from .lookup import _cuda_release, _gpu_entry, _os_entry, _parse_torch, _wheel_runs_on
from .schema import show
from .stack import NESTED_KEYS
from .versions import _ge, _in_range, _major, _mm, kiln_version_cmp, kiln_version_key


def kiln_recommend_stack(gpu: str, os: str | None = None, torch: str | None = None,
                         driver_flavor: str | None = None) -> dict[str, Any]:
    """Return a complete compatible stack for ``gpu`` on ``os`` (newest supported choices).

    ``torch`` pins the PyTorch release (``2.12``, ``2.14.1`` or ``2.14+cu130``); the
    toolkit then follows the newest wheel variant that fits the GPU, OS and driver.
    """
    d = compat_data()
    g = _gpu_entry(gpu)
    if not g:
        raise CompatError(f"kiln_recommend_stack: unknown GPU {show(gpu)}; known models: {', '.join(d['gpus'])}")
    os_id = os or d["recommend"]["os"]
    osx = _os_entry(os_id)
    if not osx:
        raise CompatError(f"kiln_recommend_stack: unknown OS {show(os_id)}")
    os_key, os_entry = osx
    served = set(os_entry.get("cuda_majors") or [])
    max_major = int(g["max_cuda_major"]) if g.get("max_cuda_major") else 99

    def usable_cuda(c: str) -> tuple[str, dict[str, Any]] | None:
        rel = _cuda_release(c)
        if not rel or _major(rel[0]) not in served or int(_major(rel[0])) > max_major:
            return None
        if g.get("min_cuda") and kiln_version_cmp(_mm(rel[0]), g["min_cuda"]) < 0:
            return None
        if rel[0] in {e.get("version") for e in _active_denylist() if e["component"] == "cuda"}:
            return None
        if not _newest_driver_for(rel[1]["min_driver"], max_branch=g.get("last_branch"), min_major=int(_major(rel[0]))):
            return None
        return rel

    choice: tuple[str, str, str | None] | None = None  # (torch full, cuda full, variant)
    if torch is not None:
        key, full, pinned = _parse_torch(torch)
        rel = d["torch"]["releases"].get(key) if key else None
        if not rel:
            raise CompatError(f"kiln_recommend_stack: unknown PyTorch release {show(torch)}; known: {', '.join(d['torch']['releases'])}")
        torch_candidates = [(key, full, rel, pinned)]
    else:
        torch_candidates = [(k, r.get("latest_patch", k), r, None)
                            for k, r in sorted(d["torch"]["releases"].items(), key=lambda kv: kiln_version_key(kv[0]), reverse=True)]
    for key, full, rel, pinned in torch_candidates:
        variants = [pinned] if pinned else sorted(rel["variants"], key=lambda v: kiln_version_key(rel["variants"][v]), reverse=True)
        for var in variants:
            if var not in rel["variants"]:
                raise CompatError(f"kiln_recommend_stack: PyTorch {key} has no {var} wheels")
            if _wheel_runs_on(g["cc"], (rel.get("archs") or {}).get(var), (rel.get("ptx") or {}).get(var)) is False:
                continue
            cuda_rel = usable_cuda(rel["variants"][var])
            if cuda_rel:
                choice = (full, cuda_rel[0], var)
                break
        if choice:
            break
    if not choice:
        raise CompatError(
            f"kiln_recommend_stack: no PyTorch/CUDA combination in the data fits {g['name']} on {os_key}"
            + (f" with torch {torch}" if torch else ""))
    torch_full, cuda_full, variant = choice
    cuda_rel = d["cuda"]["releases"][cuda_full]
    floor = cuda_rel["min_driver"]
    if g.get("min_driver") and _ge(g["min_driver"], floor):
        floor = g["min_driver"]
    driver = _newest_driver_for(floor, max_branch=g.get("last_branch"), min_major=int(_major(cuda_full)))
    branch = int(driver.split(".")[0])
    if driver_flavor:
        flavor = driver_flavor
    elif g["open_modules"] == "unsupported" or branch < int(d["drivers"]["flavors"]["both_from_branch"]):
        flavor = "proprietary"
    else:
        flavor = "open"
    stack: dict[str, Any] = {"gpu": g["variant"] or g["model"], "os": os_key, "driver": driver, "driver_flavor": flavor}
    if g["nvswitch"]:
        stack["fabricmanager"] = driver
    stack["cuda"] = cuda_full
    cudnn = _pick_cudnn(cuda_full, g)
    if cudnn:
        stack["cudnn"] = cudnn
    nccl = _pick_nccl(cuda_full, g)
    if nccl:
        stack["nccl"] = nccl
    stack["torch"] = f"{torch_full}+{variant}" if torch and "+" in str(torch) else torch_full
    denied = _active_denylist()
    for comp in ("container_toolkit", "dcgm"):
        ok = [v for v in d[comp]["releases"]
              if not any(e["component"] == comp and (kiln_version_cmp(v, e["version"]) == 0 if e.get("version")
                                                     else _in_range(v, e["range"])) for e in denied)]
        if comp == "dcgm" and _dcgm_cuda_major({"driver": driver}, g) == "11":
            ok = [v for v in ok if _major(v) == "3"]
        stack[comp] = max(ok, key=kiln_version_key)
    rec = d["recommend"]
    stack["ofed"] = dict(rec["ofed"])
    stack["slurm"] = {k: rec["slurm"] for k in NESTED_KEYS["slurm"]}
    stack["kubernetes"] = {k: rec["kubernetes"] for k in NESTED_KEYS["kubernetes"]}
    return stack
