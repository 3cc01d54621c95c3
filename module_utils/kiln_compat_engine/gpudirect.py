# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""GPUDirect RDMA: which method a node gets (``kiln_gpudirect``), and why.

DMA-BUF needs every one of: the open kernel modules, kernel >= 5.12, CUDA >= 11.7
and a Turing or newer GPU (any RDMA stack, inbox included). ``nvidia-peermem``
needs the peer-memory API of DOCA-OFED or MLNX_OFED. Each condition is
``True`` (holds), ``False`` (fails) or ``None`` (the stack does not say): ``auto``
takes DMA-BUF only when every condition holds, so an unknown condition never
yields DMA-BUF by default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .data import compat_data
from .errors import CompatError
from .lookup import _gpu_entry
from .resolve import kiln_resolve_stack
from .schema import STACK_FIELDS, describe
from .stack import checked
from .versions import _ge

METHODS = ("dma_buf", "peermem", "none")


def _check_kernel(kernel: Any) -> str | None:
    if kernel is None or kernel == "":
        return None
    field = STACK_FIELDS["kernel"]
    if not isinstance(kernel, str) or len(kernel) > field.max_len or not field.matches(kernel):
        raise CompatError(f"kiln_gpudirect: kernel is {describe(kernel)}, not a kernel release such as "
                          f"\"{field.example}\". Fix: pass ansible_facts['kernel'] (uname -r) or leave it out.")
    return kernel


def _kernel_ge(kernel: str, floor: str) -> bool:
    m = re.match(r"([0-9]{1,3})\.([0-9]{1,3})", kernel, re.ASCII)
    return bool(m) and _ge(f"{m.group(1)}.{m.group(2)}", floor)


def dma_buf_conditions(stack: Mapping[str, Any], kernel: str | None = None) -> dict[str, dict[str, Any]]:
    """Each DMA-BUF condition of a normalised stack: ``{name: {ok: True|False|None, text}}``."""
    dma = compat_data()["ofed"]["gpudirect"]["dma_buf"]
    archs = compat_data()["architectures"]
    out: dict[str, dict[str, Any]] = {}
    flavor = stack.get("driver_flavor")
    if flavor is None and stack.get("driver"):
        try:
            flavor = kiln_resolve_stack(stack).get("driver_flavor")
        except CompatError:
            flavor = None
    out["flavor"] = {"ok": None if flavor is None else flavor == "open",
                     "text": "open kernel modules: " + ("unknown (no driver_flavor or driver)" if flavor is None
                                                        else f"driver_flavor {flavor}")}
    kern = kernel or stack.get("kernel")
    out["kernel"] = {"ok": None if not kern else _kernel_ge(kern, dma["min_kernel"]),
                     "text": f"kernel >= {dma['min_kernel']}: " + (f"{kern}" if kern else "unknown (no kernel)")}
    cuda = stack.get("cuda")
    out["cuda"] = {"ok": None if not cuda else _ge(cuda, dma["min_cuda"]),
                   "text": f"CUDA >= {dma['min_cuda']}: " + (f"{cuda}" if cuda else "unknown (no cuda)")}
    gpu = _gpu_entry(stack["gpu"]) if stack.get("gpu") else None
    floor = archs[dma["min_arch"]]["rank"]
    rank = (archs.get(gpu["arch"]) or {}).get("rank") if gpu else None
    out["gpu"] = {"ok": None if rank is None else rank >= floor,
                  "text": f"GPU {dma['min_arch'].capitalize()} or newer: "
                          + (f"{gpu['name']} ({gpu['arch']})" if gpu else "unknown (no known gpu)")}
    return out


def kiln_gpudirect(stack: Mapping[str, Any] | None, kernel: str | None = None) -> dict[str, Any]:
    """The GPUDirect RDMA method of a stack: ``{method, module, why, requested, conditions}``.

    ``method`` is ``dma_buf``, ``peermem`` or ``none``; ``module`` is ``nvidia-peermem`` for peermem,
    else None. ``requested`` is ``kiln_stack.ofed.gpudirect`` (default ``auto``): auto takes DMA-BUF
    when every condition holds, else nvidia-peermem with DOCA-OFED / MLNX_OFED, else none. An explicit
    method whose conditions fail gives ``none`` (preflight refuses such a stack). ``kernel`` (the
    host's ``ansible_facts['kernel']``) overrides ``kiln_stack.kernel``.
    """
    s = checked(stack)
    kern = _check_kernel(kernel)
    d = compat_data()["ofed"]["gpudirect"]
    ofed = s.get("ofed") or {}
    kind = ofed.get("kind")
    requested = ofed.get("gpudirect", "auto")
    conds = dma_buf_conditions(s, kern)
    dma_ok = all(c["ok"] is True for c in conds.values())
    dma_fails = [c["text"] for c in conds.values() if c["ok"] is False]
    dma_unknown = [c["text"] for c in conds.values() if c["ok"] is None]
    peer_ok = kind in d["peermem"]["needs_ofed"]
    dma_txt = "; ".join(c["text"] + {True: " (holds)", False: " (fails)", None: ""}[c["ok"]] for c in conds.values())
    peer_txt = f"nvidia-peermem needs DOCA-OFED or MLNX_OFED: ofed kind {kind or '(none)'}"
    conditions = {k: c["ok"] for k, c in conds.items()}
    conditions["peermem_ofed"] = peer_ok

    def result(method: str, why: str) -> dict[str, Any]:
        return {"method": method, "module": d["peermem"]["module"] if method == "peermem" else None,
                "why": why, "requested": requested, "conditions": conditions}

    if not kind:
        return result("none", "No GPUDirect RDMA: the stack has no ofed (RDMA stack) to carry it.")
    if requested == "none":
        return result("none", "No GPUDirect RDMA: kiln_stack.ofed.gpudirect is none.")
    if requested == "dma_buf":
        if dma_fails:
            return result("none", f"DMA-BUF was requested but cannot work ({'; '.join(dma_fails)}); "
                                  f"preflight refuses this stack.")
        extra = f" (checked on the host: {'; '.join(dma_unknown)})" if dma_unknown else ""
        return result("dma_buf", f"DMA-BUF, as requested: {dma_txt}{extra}.")
    if requested == "peermem":
        if not peer_ok:
            return result("none", f"nvidia-peermem was requested but cannot work: {peer_txt}; "
                                  f"preflight refuses this stack.")
        return result("peermem", f"nvidia-peermem, as requested: {peer_txt}.")
    if dma_ok:
        return result("dma_buf", f"DMA-BUF (auto): every condition holds: {dma_txt}.")
    if peer_ok:
        return result("peermem", f"nvidia-peermem (auto): DMA-BUF is not certain ({dma_txt}); {peer_txt}.")
    return result("none", f"No GPUDirect RDMA (auto): DMA-BUF is not certain ({dma_txt}) and {peer_txt}.")


def kiln_node_gpudirect(stack: Any, kernel: Any = None, gpu_model: Any = None) -> dict[str, Any]:
    """The GPUDirect RDMA method of one host: kiln_gpudirect of its stack and kernel, the stack's ``gpu``
    taken from the host's detected board (``kiln_gpu_model``) when the stack names none."""
    stack = dict(stack) if isinstance(stack, Mapping) else {}
    name = gpu_model.get("name") if isinstance(gpu_model, Mapping) else None
    if not stack.get("gpu") and isinstance(name, str) and name:
        stack["gpu"] = name
    return kiln_gpudirect(stack, kernel)
