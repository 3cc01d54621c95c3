# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Lookups in the compatibility data: GPUs, operating systems, CUDA releases, driver branches.

Each ``_``-prefixed lookup resolves what a user wrote (``rocky-9.4``,
``H100-SXM5-80GB``, ``10de:2330``, ``12.4``, ``570.133.20``) to its data entry,
or ``None``. :func:`kiln_gpu_spec` and :func:`kiln_gpu_pci_models` are the
filters built on the GPU lookup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .data import compat_data
from .errors import CompatError, need_list
from .schema import show
from .versions import _mm, _nums, kiln_version_key


def _os_entry(os_id: str) -> tuple[str, dict[str, Any]] | None:
    """Normalise ``rocky-9.4`` / ``Ubuntu-24.04`` to a data key and return its entry."""
    data = compat_data()["os"]
    if not isinstance(os_id, str) or len(os_id) > 32:
        return None
    m = re.fullmatch(r"([a-z]+)-([0-9]{1,3})(?:\.([0-9]{1,2}))?", os_id.strip().lower(), re.ASCII)
    if not m:
        return None
    name, major, minor = m.group(1), m.group(2), m.group(3)
    name = data.get("os_aliases", {}).get(name, name)
    key = f"{name}-{major}.{minor}" if name == "ubuntu" and minor else f"{name}-{major}"
    entry = data.get(key)
    return (key, entry) if isinstance(entry, dict) else None


def _gpu_entry(gpu: Any) -> dict[str, Any] | None:
    """Resolve a model key, variant name or PCI id to ``{model, variant, ...}``."""
    if gpu is None:
        return None
    text = str(gpu).strip()
    norm = re.sub(r"[\s_]+", "-", text.lower())
    norm = norm.removeprefix("nvidia-")
    pci = text.lower()
    if re.match(r"^0x[0-9a-f]{4}$", pci):
        pci = "10de:" + pci[2:]
    for model, entry in compat_data()["gpus"].items():
        variants = entry.get("variants") or {}
        if norm == model.lower().replace("_", "-"):
            nvswitch = {v.get("nvswitch") for v in variants.values()}
            return {"model": model, "variant": None, "pci_id": None, "name": model,
                    "nvswitch": nvswitch == {True}, "tdp_w": None, **_gpu_common(model, entry)}
        for pci_id, var in variants.items():
            if pci == pci_id or norm == str(var["name"]).lower():
                return {"model": model, "variant": var["name"], "pci_id": pci_id, "name": var["name"],
                        "nvswitch": bool(var.get("nvswitch")), "tdp_w": var.get("tdp_w"), **_gpu_common(model, entry)}
    return None


def _gpu_common(model: str, entry: dict[str, Any]) -> dict[str, Any]:
    arch = compat_data()["architectures"][entry["arch"]]
    return {
        "arch": entry["arch"], "cc": str(entry["cc"]), "class": entry.get("class", "datacenter"),
        "min_cuda": entry.get("min_cuda"), "min_cuda_confidence": entry.get("min_cuda_confidence", entry.get("confidence")),
        "min_driver": entry.get("min_driver"), "min_driver_source": entry.get("min_driver_source"),
        "open_modules": entry.get("open_modules", arch.get("open_modules")),
        "last_branch": arch.get("last_branch"), "max_cuda_major": arch.get("max_cuda_major"),
        "source": entry.get("source"), "confidence": entry.get("confidence"),
    }


def _cuda_release(cuda: str) -> tuple[str, dict[str, Any]] | None:
    """``12.4`` -> newest known 12.4.x; ``12.4.1`` -> exactly that one."""
    releases = compat_data()["cuda"]["releases"]
    text = str(cuda).strip()
    if not re.match(r"^\d+\.\d+(\.\d+)?$", text):
        return None
    if text.count(".") == 2:
        return (text, releases[text]) if text in releases else None
    same = [v for v in releases if _mm(v) == text]
    if not same:
        return None
    best = max(same, key=kiln_version_key)
    return best, releases[best]


def _driver_branch(driver: str) -> tuple[str, dict[str, Any]] | None:
    text = str(driver).strip()
    if not re.match(r"^\d{3}\.\d{2,3}(\.\d{2,3})?$", text):
        return None
    branch = text.split(".")[0]
    entry = compat_data()["drivers"]["branches"].get(branch)
    return (branch, entry) if entry else None


def _branch_latest(branch_entry: dict[str, Any]) -> str | None:
    rel = branch_entry.get("releases") or []
    return max(rel, key=kiln_version_key) if rel else None


def _parse_nccl(nccl: str) -> tuple[str, str | None]:
    m = re.match(r"^(\d+\.\d+\.\d+)(?:-\d+)?(?:\+cuda(\d+\.\d+))?$", str(nccl).strip())
    if not m:
        return str(nccl), None
    return m.group(1), m.group(2)


def _parse_torch(torch: str) -> tuple[str | None, str | None, str | None]:
    """``2.14.1+cu130`` -> (release key ``2.14``, full ``2.14.1``, variant ``cu130``)."""
    m = re.match(r"^(\d+)\.(\d+)(\.\d+)?(?:\+(cu\d+))?$", str(torch).strip())
    if not m:
        return None, None, None
    key = f"{m.group(1)}.{m.group(2)}"
    full = key + (m.group(3) or "")
    return key, full, m.group(4)


def _cc_tuple(cc: str) -> tuple[int, int]:
    n = _nums(cc)
    return n[0], n[1] if len(n) > 1 else 0


def _wheel_runs_on(cc: str, archs: Sequence[str] | None, ptx: str | None) -> bool | None:
    """SASS for M.n runs on M.m (m >= n); PTX JITs to any higher cc. None = unknown."""
    if not archs:
        return None
    gpu = _cc_tuple(cc)
    for arch in archs:
        a = _cc_tuple(arch)
        if a[0] == gpu[0] and a[1] <= gpu[1]:
            return True
    return bool(ptx and _cc_tuple(ptx) <= gpu)
def kiln_gpu_spec(gpu: str) -> dict[str, Any]:
    """Describe a GPU (model, variant, PCI id, arch, compute capability, NVSwitch, TDP)."""
    info = _gpu_entry(gpu)
    if not info:
        raise CompatError(f"kiln_gpu_spec: unknown GPU {show(gpu)}; known models: {', '.join(compat_data()['gpus'])}")
    return info


def kiln_gpu_pci_models(models: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """PCI id -> ``{model, architecture, nvswitch, family}`` for every known GPU variant.

    The input restricts the result to the listed models/variants (``[]`` or ``None``:
    all). Feeds the ``pci_models`` option of library/kiln_gpu_facts.
    """
    models = [] if models is None else need_list("kiln_gpu_pci_models", "the input (GPU models)", models, one_ok=True)
    wanted = {str(m) for m in models}
    out: dict[str, dict[str, Any]] = {}
    for family, entry in compat_data()["gpus"].items():
        for pci_id, var in (entry.get("variants") or {}).items():
            if wanted and family not in wanted and var["name"] not in wanted:
                continue
            out[pci_id] = {"model": var["name"], "architecture": entry["arch"], "nvswitch": bool(var.get("nvswitch")),
                           "family": family}
    return out


def _doca_release(version: str | None) -> tuple[str, dict[str, Any], str | None, dict[str, Any] | None] | None:
    """A DOCA version to ``(release key, release entry, update key, update entry)``; None when unknown.

    ``3.2.1`` names that update; ``3.2`` the release, whose newest known update (if any) is taken.
    An update the data does not list gives ``(release key, entry, None, None)``.
    """
    if not isinstance(version, str) or not re.fullmatch(r"[0-9]{1,4}(?:\.[0-9]{1,4}){0,4}", version, re.ASCII):
        return None
    releases = compat_data()["ofed"]["doca_releases"]
    key = _mm(version)
    entry = releases.get(key)
    if not isinstance(entry, dict):
        return None
    updates = entry.get("updates") or {}
    if version == key:
        if not updates:
            return key, entry, None, None
        newest = max(updates, key=kiln_version_key)
        return key, entry, newest, updates[newest]
    if version in updates:
        return key, entry, version, updates[version]
    return key, entry, None, None


def _hca_names() -> list[str]:
    """The HCA generation names kiln's data knows (the shared contract of kiln_fabric.HCA_MODELS)."""
    return list(compat_data()["ofed"]["hca_generations"]["names"])
