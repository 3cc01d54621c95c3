# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Slurm nodes for templates and plays: node descriptions for slurm.conf/gres.conf from facts,
and drain/resume plans (through kiln_node_state, the one rule of kiln's drains).

Pure functions; they raise :class:`kiln_filter_error.FilterError` for input they cannot use.
Registered as filters of the same names by filter_plugins/kiln_slurm_filters.py (documented by
filter_plugins/<name>.yml). Importable as ``kiln.slurm.nodes`` and as
``ansible.module_utils.kiln.slurm.nodes``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from . import node_state as kiln_node_state
from ..errors import FilterError


_FACT_KEYS = ("processor_count", "processor_cores", "processor_threads_per_core", "memtotal_mb")


def kiln_slurm_gpu_type(model: Any) -> str:
    """Gres type from a GPU model: ``{'model': 'H100', ...}`` or ``"L40S"`` -> ``h100`` / ``l40s``."""
    if isinstance(model, Mapping):
        model = model.get("model") or model.get("name") or ""
    slug = re.sub(r"[^a-z0-9_]+", "_", str(model or "").strip().lower()).strip("_")
    return slug or "gpu"


def kiln_slurm_gpu_files(count: Any, prefix: str = "/dev/nvidia") -> str:
    """Device files of ``count`` GPUs in Slurm's range syntax: 2 -> ``/dev/nvidia[0-1]``."""
    try:
        n = int(count)
    except (TypeError, ValueError, OverflowError) as exc:
        raise FilterError(f"kiln_slurm_gpu_files: count must be an integer, got {count!r}") from exc
    if n < 1:
        raise FilterError(f"kiln_slurm_gpu_files: count must be >= 1, got {n}")
    return f"{prefix}0" if n == 1 else f"{prefix}[0-{n - 1}]"


def kiln_slurm_node(facts: Mapping[str, Any], gpu_model: Any = None, memory_reserve_pct: Any = 5,
                    gres_type: Any = None) -> dict[str, Any]:
    """Describe one compute node for slurm.conf from its gathered facts.

    ``facts`` is the host's ``ansible_facts``; GPUs come from ``facts.kiln_gpu``
    (gpu_facts role) and their Slurm type from ``gpu_model`` (``kiln_gpu_model``)
    unless ``gres_type`` overrides it. RealMemory is MemTotal less
    ``memory_reserve_pct`` percent (rounded down), so slurmd never reports less
    memory than slurm.conf promises.
    """
    if not isinstance(facts, Mapping):
        raise FilterError(f"kiln_slurm_node: facts must be a mapping, got {type(facts).__name__}")
    missing = [k for k in _FACT_KEYS if facts.get(k) in (None, "")]
    if missing:
        raise FilterError(f"kiln_slurm_node: facts lack {', '.join(missing)} (gather hardware facts first)")
    try:
        pct = float(memory_reserve_pct)
    except (TypeError, ValueError) as exc:
        raise FilterError(f"kiln_slurm_node: memory_reserve_pct must be a number, got {memory_reserve_pct!r}") from exc
    if not 0 <= pct < 100:
        raise FilterError(f"kiln_slurm_node: memory_reserve_pct must be in [0, 100), got {pct}")
    sockets = max(int(facts["processor_count"]), 1)
    cores = max(int(facts["processor_cores"]), 1)
    threads = max(int(facts["processor_threads_per_core"]), 1)
    gpu = facts.get("kiln_gpu") if isinstance(facts.get("kiln_gpu"), Mapping) else {}
    gpus = int(gpu.get("pci_gpu_count") or 0)
    name = str(facts.get("hostname") or "")
    if not name:
        raise FilterError("kiln_slurm_node: facts lack hostname")
    return {
        "name": name,
        "cpus": sockets * cores * threads,
        "sockets": sockets,
        "cores_per_socket": cores,
        "threads_per_core": threads,
        "real_memory": int(int(facts["memtotal_mb"]) * (100 - pct) // 100),
        "gpus": gpus,
        "gpu_type": (str(gres_type) if gres_type else kiln_slurm_gpu_type(gpu_model)) if gpus else "",
    }


def kiln_slurm_node_descriptions(hostvars: Mapping[str, Any], hosts: Iterable[str], memory_reserve_pct: Any = 5,
                                 gres_type_var: str = "slurm_gres_type") -> dict[str, dict[str, Any]]:
    """``{host: kiln_slurm_node(...)}`` for each of ``hosts`` whose hardware facts are known.

    Hosts without gathered facts (outside this run and not in the fact cache)
    are left out; the caller merges the result over the descriptions it stored
    earlier. A host's ``slurm_gres_type`` variable overrides the derived type.
    """
    if isinstance(hosts, (str, bytes, Mapping)) or not isinstance(hosts, Iterable) \
            or not all(isinstance(host, str) for host in hosts):
        raise FilterError(f"kiln_slurm_node_descriptions: hosts must be a list of host names, got {hosts!r}")
    if not isinstance(hostvars, Mapping):
        raise FilterError(f"kiln_slurm_node_descriptions: the input must be hostvars (a mapping), "
                          f"got {type(hostvars).__name__}")
    if not isinstance(gres_type_var, str):
        raise FilterError(f"kiln_slurm_node_descriptions: gres_type_var must be a variable name, "
                          f"got {type(gres_type_var).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for host in hosts:
        hv = hostvars.get(host)
        if not isinstance(hv, Mapping):  # not a host of the inventory: no facts
            continue
        facts = hv.get("ansible_facts") if "ansible_facts" in hv else None
        if not isinstance(facts, Mapping) or any(facts.get(k) in (None, "") for k in _FACT_KEYS):
            continue
        if not isinstance(facts.get("kiln_gpu"), Mapping):
            continue
        model = hv.get("kiln_gpu_model") if "kiln_gpu_model" in hv else None
        override = hv.get(gres_type_var) if gres_type_var in hv else None
        out[str(host)] = kiln_slurm_node(facts, model, memory_reserve_pct, override)
    return out


def kiln_slurm_node_plan(sinfo_lines: Iterable[str], nodes: Iterable[str], state: str, reason: str = "",
                         only_reason_prefix: str = "", operator_drains: Mapping[str, str] | None = None
                         ) -> dict[str, Any]:
    """Decide a drain/resume from ``sinfo --Node --format '%N|%T|%E'`` lines read just before it.

    A thin wrapper of ``kiln_node_state.plan`` (module_utils/kiln/slurm/node_state.py: the one rule --
    nobody's drain but kiln's is ever changed). Returns ``{change, unchanged, held, kept, left,
    unknown, unrecognised, why}``; ``held`` is ``{node: reason}`` of nodes someone else's reason
    holds (reported "held by operator: <reason>").
    """
    if state not in kiln_node_state.ACTIONS:
        raise FilterError(f"kiln_slurm_node_plan: state must be drain or resume, got {state!r}")
    if operator_drains is not None and not isinstance(operator_drains, Mapping):
        raise FilterError(f"kiln_slurm_node_plan: operator_drains must be a mapping of node to reason, "
                          f"got {type(operator_drains).__name__}")
    try:
        return kiln_node_state.plan(sinfo_lines, nodes, state, reason or "", only_reason_prefix or "",
                                    operator_drains)
    except ValueError as exc:
        raise FilterError(f"kiln_slurm_node_plan: {exc} (nodes {nodes!r})") from exc

