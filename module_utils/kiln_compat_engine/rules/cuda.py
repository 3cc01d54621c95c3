# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Rule family CUDA libraries: cuda-os, cudnn-cuda, cudnn-gpu, nccl-cuda, nccl-gpu, torch-cuda, torch-gpu,
torch-driver.
"""

from __future__ import annotations

from typing import Any

from ..choose import _newest_driver_for, _pick_cudnn, _pick_nccl
from ..lookup import _cc_tuple, _cuda_release, _parse_nccl, _parse_torch, _wheel_runs_on
from ..versions import _ge, _major, _mm, kiln_version_key
from ..violations import _violation, _worst_conf
from .context import Checker


def r_cuda_os(ck: Checker) -> None:
    if not (ck.cuda and ck.os):
        return
    key, entry = ck.os
    major = _major(ck.cuda[0])
    if major in (entry.get("cuda_majors") or []):
        return
    dropped = major in (entry.get("cuda_majors_dropped") or [])
    served = entry.get("cuda_majors") or []
    best = max((v for v in ck.d["cuda"]["releases"] if _major(v) in served), key=kiln_version_key, default=None)
    ck.add(_violation(
        "cuda-os", ["cuda", "os"],
        f"The NVIDIA CUDA repository for {key} ({entry['cuda_repo']}) "
        + ("does not serve" if dropped else "is not known to serve")
        + f" CUDA {major}.x, so CUDA {ck.s['cuda']} cannot be installed from it.",
        f"Set kiln_stack.cuda to a {'/'.join(served)}.x release (e.g. {best}) or change kiln_stack.os.",
        {"cuda": best} if best else None,
        entry["confidence"] if dropped else "UNVERIFIED", entry["source"]))


def r_cudnn(ck: Checker) -> None:
    if "cudnn" not in ck.s or str(ck.s["cudnn"]) not in ck.d["cudnn"]["releases"]:
        return
    ver = str(ck.s["cudnn"])
    rel = ck.d["cudnn"]["releases"][ver]
    if ck.cuda:
        cuda_full = ck.cuda[0]
        major, mm = _major(cuda_full), _mm(cuda_full)
        rng = (rel.get("cuda") or {}).get(major)
        ok = bool(rng) and _ge(mm, rng[0]) and _ge(rng[1], mm)
        if not ok:
            target = _pick_cudnn(cuda_full, ck.gpu)
            have = ", ".join(f"{lo}-{hi}" for lo, hi in (rel.get("cuda") or {}).values())
            # An entry's confidence may soften the edge of a CUDA range it lists, never invent a build:
            # no build for this CUDA major at all is an error whatever the entry's confidence.
            no_build = not rng
            ck.add(_violation(
                "cudnn-cuda", ["cudnn", "cuda"],
                f"cuDNN {ver} is built for CUDA {have}, not for CUDA {ck.cuda_txt()}"
                + (f": no cuDNN {ver} build exists for CUDA {major}.x." if no_build else "."),
                f"Set kiln_stack.cudnn to {target}." if target else "Pick a cuDNN release built for this CUDA.",
                {"cudnn": target} if target else None, "DERIVED" if no_build else rel["confidence"], rel["source"]))
    if ck.gpu and rel.get("min_cc") and _cc_tuple(ck.gpu["cc"]) < _cc_tuple(rel["min_cc"]):
        target = _pick_cudnn(ck.cuda[0], ck.gpu) if ck.cuda else None
        ck.add(_violation(
            "cudnn-gpu", ["cudnn", "gpu"],
            f"cuDNN {ver} needs compute capability >= {rel['min_cc']}; {ck.gpu['name']} is {ck.gpu['cc']}.",
            f"Set kiln_stack.cudnn to {target or '9.10.2.21 (the last release for Maxwell/Pascal/Volta)'}.",
            {"cudnn": target or "9.10.2.21"}, rel["confidence"], rel["source"]))


def r_nccl(ck: Checker) -> None:
    if "nccl" not in ck.s:
        return
    ver, build = _parse_nccl(ck.s["nccl"])
    rel = ck.d["nccl"]["releases"].get(ver)
    if not rel or (build and build not in rel["builds"]):
        return
    if ck.cuda:
        cuda_full = ck.cuda[0]
        builds = [build] if build else rel["builds"]
        usable = [b for b in builds if _major(b) == _major(cuda_full) and _ge(_mm(cuda_full), b)]
        if not usable:
            target = _pick_nccl(cuda_full, ck.gpu)
            incomplete = not build and _major(cuda_full) in (rel.get("builds_unknown_for") or [])
            # no build of this CUDA major among those the entry names (and none said to exist unnamed):
            # an error whatever the entry's confidence, which may soften a range's edge, never invent a build
            no_build = not incomplete and not any(_major(b) == _major(cuda_full) for b in builds)
            conf = "UNVERIFIED" if incomplete else "DERIVED" if no_build else _worst_conf(
                rel.get("builds_confidence", rel["confidence"]),
                ck.d["nccl"]["runs_on_same_major_newer_minor"]["confidence"])
            gap = (f" NCCL {ver} is published for CUDA {_major(cuda_full)}, but kiln's data does not name that "
                   f"build's minor, so this is a warning." if incomplete else "")
            ck.add(_violation(
                "nccl-cuda", ["nccl", "cuda"],
                f"NCCL {ck.s['nccl']} is built for CUDA {', '.join(builds)} and none of those builds runs on CUDA "
                f"{ck.cuda_txt()}: a build needs the same CUDA major and a minor at or below it.{gap}",
                (f"Set kiln_stack.nccl to {target}" if target else "Pick an NCCL build for this CUDA major")
                + (f", or name the build: {ver}-1+cuda<X.Y>." if incomplete else "."),
                {"nccl": target} if target else None, conf, rel["source"]))
    if ck.gpu:
        need = ck.d["nccl"].get("min_for_arch", {}).get(ck.gpu["arch"])
        if need and not _ge(ver, need["version"]):
            target = _pick_nccl(ck.cuda[0], ck.gpu) if ck.cuda else None
            ck.add(_violation(
                "nccl-gpu", ["nccl", "gpu"],
                f"NCCL {ck.s['nccl']} predates {ck.gpu['arch']} support; {ck.gpu['name']} needs NCCL >= {need['version']}.",
                f"Set kiln_stack.nccl to {target or need['version']} or newer.", {"nccl": target or need["version"]},
                need["confidence"], need["source"]))


def r_torch(ck: Checker) -> None:
    if "torch" not in ck.s:
        return
    key, _full, pinned = _parse_torch(ck.s["torch"])
    rel = ck.d["torch"]["releases"].get(key) if key else None
    if not rel or (pinned and pinned not in rel["variants"]):
        return
    variants = {pinned: rel["variants"][pinned]} if pinned else dict(rel["variants"])
    if ck.cuda:
        cuda_full = ck.cuda[0]
        cands = {v: c for v, c in variants.items() if _major(c) == _major(cuda_full) and _ge(_mm(cuda_full), c)}
        if not cands:
            ck.add(_violation(
                "torch-cuda", ["torch", "cuda"],
                f"PyTorch {ck.s['torch']} has wheels for CUDA {', '.join(variants.values())}, none for CUDA "
                f"{ck.s['cuda']} ({_major(cuda_full)}.x at or below {_mm(cuda_full)}).",
                _torch_fix_text(rel, key),
                {"cuda": _cuda_release(max(variants.values(), key=kiln_version_key))[0]}
                if _cuda_release(max(variants.values(), key=kiln_version_key)) else None,
                rel["confidence"], rel["source"]))
        else:
            variants = cands

    def driver_ok(c: str) -> bool:
        maj = ck.d["cuda"]["majors"].get(_major(c))
        return not (ck.driver and maj) or _ge(ck.s["driver"], maj["mvc_floor"])

    def arch_ok(v: str) -> bool:
        if not ck.gpu:
            return True
        ran = _wheel_runs_on(ck.gpu["cc"], (rel.get("archs") or {}).get(v), (rel.get("ptx") or {}).get(v))
        return ran is not False

    arch_fit = [v for v in variants if arch_ok(v)]
    drv_fit = [v for v in variants if driver_ok(variants[v])]
    if ck.gpu and not arch_fit:
        ck.add(_violation(
            "torch-gpu", ["torch", "gpu"],
            f"PyTorch {ck.s['torch']} wheels ({', '.join(variants)}) carry no kernels for {ck.gpu['name']} "
            f"(compute capability {ck.gpu['cc']}).",
            "Use a PyTorch release/variant that still builds for this architecture (e.g. the cu126 wheels keep sm_50-sm_90).",
            None, rel["confidence"], rel.get("archs_source", rel["source"])))
    pool = arch_fit or list(variants)
    if ck.driver and not [v for v in pool if v in drv_fit]:
        need = min((ck.d["cuda"]["majors"][_major(variants[v])]["mvc_floor"] for v in pool
                    if _major(variants[v]) in ck.d["cuda"]["majors"]), key=kiln_version_key)
        target = _newest_driver_for(need, max_branch=ck.gpu_max_branch())
        ck.add(_violation(
            "torch-driver", ["torch", "driver"],
            f"PyTorch {ck.s['torch']} wheels ({', '.join(pool)}) need driver >= {need}, but the driver is {ck.s['driver']}.",
            f"Raise kiln_stack.driver to {target} or newer.", ck.driver_fix(target) if target else None,
            "VERIFIED", ck.d["sources"]["cuda_mvc"]))

def _torch_fix_text(rel: dict[str, Any], key: str) -> str:
    pairs = ", ".join(f"{v} (CUDA {c})" for v, c in rel["variants"].items())
    return f"Set kiln_stack.cuda to a CUDA that PyTorch {key} ships wheels for: {pairs}."
