# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Resolution: a stack expanded into the exact versions kiln installs (``kiln_resolve_stack``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .choose import _dcgm_cuda_major
from .data import compat_data
from .errors import CompatError
from .lookup import _cuda_release, _driver_branch, _gpu_entry, _os_entry, _parse_nccl, _parse_torch
from .stack import CheckedStack, checked
from .versions import _ge, _major, _mm, kiln_version_key


def kiln_resolve_stack(stack: Mapping[str, Any]) -> dict[str, Any]:
    """Expand a stack into the exact versions kiln installs.

    Adds ``cuda_full`` (newest known patch of the requested minor), ``driver_branch``,
    ``driver_flavor`` (explicit or the default for the GPU/branch), ``nccl_build``,
    ``torch_variant``, ``dcgm_cuda_major``, ``pkg_mgr`` and ``cuda_repo`` to a copy of the stack.
    Versions given with fewer components are replaced by the unique release they
    name (``cudnn: 9.5.1`` -> ``9.5.1.17``); ``resolved_from`` maps each such key
    to what was written. A malformed or ambiguous stack raises CompatError.
    """
    c = checked(stack)
    if "resolved" not in c.memo:
        c.memo["resolved"] = _resolve(c)
    return copy.deepcopy(c.memo["resolved"])


def _resolve(c: CheckedStack) -> dict[str, Any]:
    """:func:`kiln_resolve_stack` of a CheckedStack (computed once per value, kept in its memo)."""
    s, asked, problems = dict(c.canonical), dict(c.asked), list(c.ambiguities)
    if problems:
        raise CompatError("kiln: " + " | ".join(f"{p['message']} Fix: {p['fix']}" for p in problems))
    d = compat_data()
    out: dict[str, Any] = copy.deepcopy(s)
    if asked:
        out["resolved_from"] = dict(asked)
    g = _gpu_entry(s["gpu"]) if "gpu" in s else None
    if s.get("os"):
        osx = _os_entry(s["os"])
        if osx:
            out["os"] = osx[0]
            out["pkg_mgr"] = osx[1]["pkg_mgr"]
            out["cuda_repo"] = osx[1]["cuda_repo"]
    if s.get("cuda"):
        rel = _cuda_release(s["cuda"])
        if rel:
            out["cuda_full"] = rel[0]
    br = _driver_branch(s["driver"]) if s.get("driver") else None
    if br:
        out["driver_branch"] = br[0]
        if "driver_flavor" not in s:
            if (g and g["open_modules"] == "unsupported") or int(br[0]) < int(d["drivers"]["flavors"]["both_from_branch"]):
                out["driver_flavor"] = "proprietary"
            elif (g and g["open_modules"] == "required") or int(br[0]) >= int(d["drivers"]["flavors"]["open_default_from_branch"]):
                out["driver_flavor"] = "open"
            else:
                out["driver_flavor"] = "proprietary"
    if s.get("nccl"):
        ver, build = _parse_nccl(s["nccl"])
        out["nccl_version"] = ver
        if not build and out.get("cuda_full"):
            picked = [b for b in (d["nccl"]["releases"].get(ver) or {}).get("builds", [])
                      if _major(b) == _major(out["cuda_full"]) and _ge(_mm(out["cuda_full"]), b)]
            build = max(picked, key=kiln_version_key) if picked else None
        if build:
            out["nccl_build"] = build
    if s.get("torch"):
        key, full, pinned = _parse_torch(s["torch"])
        rel = d["torch"]["releases"].get(key) if key else None
        out["torch_version"] = full
        if rel:
            variant = pinned
            if not variant and out.get("cuda_full"):
                c = out["cuda_full"]
                fits = [v for v, vc in rel["variants"].items() if _major(vc) == _major(c) and _ge(_mm(c), vc)]
                variant = max(fits, key=lambda v: kiln_version_key(rel["variants"][v])) if fits else None
            if not variant:
                variant = max(rel["variants"], key=lambda v: kiln_version_key(rel["variants"][v]))
            out["torch_variant"] = variant
    if s.get("dcgm"):
        out["dcgm_cuda_major"] = _dcgm_cuda_major(s, g)
    if g:
        out["gpu_info"] = g
    return out
