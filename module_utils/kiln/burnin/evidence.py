# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""What the burn-in collected from one node, as one typed record: :class:`NodeEvidence`.

The final phase hands the judge one mapping per node (the preflight's ``__burnin_node``, the active
phase's ``__burnin_active``, the RDMA pair checks and the counters read after the run, merged).
:func:`node_evidence` reads it once: every key must be one the burn-in writes (a misspelt key is a
configuration error, never a silently missing measurement), every value has the type its check
expects, and a measurement that was not collected stays :data:`ABSENT` -- which the judge tells
apart from one collected empty (``dcgm: {present: false}`` is INCOMPLETE; no ``dcgm`` at all is a
check the mode did not run, and the required-checks rule decides whether that may pass).

Standard library only; importable as ``kiln.burnin.evidence`` and as
``ansible.module_utils.kiln.burnin.evidence``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Dict, Optional, Tuple

from .. import verdict as kiln_verdict

__all__ = ["ABSENT", "NodeEvidence", "node_evidence"]


class _Absent:
    """Not collected (the key was not in the node's data)."""

    _instance: Optional["_Absent"] = None

    def __new__(cls) -> "_Absent":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class NodeEvidence:
    """One node's burn-in data (roles/burnin/tasks/preflight.yml and active.yml write it).

    Facts: ``kiln_gpu`` (ansible_facts['kiln_gpu']), ``gpu_present``, ``gpu_name``, ``expected_gpus``
    (kiln_burnin_expected_gpus), ``history_gpus`` (GPUs its history saw), ``engine`` (cpu or
    nccl-tests), ``sku`` (kiln_burnin_sku), ``stack`` ({versions, as_built, drift}).
    Measurements (:data:`ABSENT` when not collected): ``tools``, ``kernel_log`` and ``xid_log``,
    ``dcgm`` ({present, rc, stdout, stderr}), ``nccl`` ({ran, text, rc, timed_out} or {ran: false,
    why}), ``fabric`` ({facts, expect, history, gpudirect, socket_ifname}), ``fabric_after`` (the
    counters read after the run), ``rdma`` (its ib_write_bw checks). ``excluded``: why the node was
    left out of the active phase ("" when it was not).
    """

    name: str
    kiln_gpu: Any = None
    gpu_present: bool = False
    gpu_name: Optional[str] = None
    expected_gpus: Any = None
    history_gpus: Any = None
    engine: Optional[str] = None
    sku: Optional[str] = None
    stack: Any = ABSENT
    tools: Any = ABSENT
    kernel_log: Any = None
    xid_log: str = ""
    dcgm: Any = ABSENT
    nccl: Any = ABSENT
    fabric: Any = ABSENT
    fabric_after: Any = None
    rdma: Tuple[Dict[str, Any], ...] = ()
    excluded: str = ""

    def collected(self, key: str) -> bool:
        """Whether measurement *key* was collected (its key was in the node's data)."""
        return getattr(self, key) is not ABSENT

    def as_node(self) -> Dict[str, Any]:
        """The mapping the per-node check functions read (``node_sku``): facts only."""
        return {"kiln_gpu": self.kiln_gpu, "gpu_name": self.gpu_name, "sku": self.sku}


#: key -> (types allowed besides None, what it must be) for the keys whose type the judge relies on.
_TYPES: Dict[str, Tuple[Tuple[type, ...], str]] = {
    "kiln_gpu": ((Mapping,), "a mapping (ansible_facts['kiln_gpu'])"),
    "gpu_name": ((str,), "a string"),
    "engine": ((str,), "cpu or nccl-tests"),
    "sku": ((str,), "a floors SKU name"),
    "stack": ((Mapping,), "a mapping {versions, as_built, drift}"),
    "tools": ((Mapping,), "a mapping of tool name to path"),
    "xid_log": ((str,), "text"),
    "dcgm": ((Mapping,), "a mapping {present, rc, stdout, stderr}"),
    "nccl": ((Mapping,), "a mapping {ran, text, rc, timed_out} or {ran: false, why}"),
    "fabric": ((Mapping,), "a mapping {facts, expect, history, gpudirect, socket_ifname}"),
    "fabric_after": ((Mapping,), "a mapping {facts, why}"),
    "excluded": ((str,), "the reason, as text"),
}
KEYS = frozenset(f.name for f in fields(NodeEvidence)) - {"name"}
#: Keys whose null means "collected, nothing in it" (their check judges it): kept, not ABSENT.
_NULL_KEPT = frozenset({"tools", "dcgm", "nccl"})


def node_evidence(name: str, raw: Any) -> NodeEvidence:
    """The :class:`NodeEvidence` of node *name* from its raw mapping; KilnConfigError naming the node,
    the key and what it must be for an unknown key or a value of the wrong type."""
    if not isinstance(raw, Mapping):
        raise kiln_verdict.KilnConfigError(f"{name}: the burn-in data of a node must be a mapping, got "
                                           f"{type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in KEYS)
    if unknown:
        raise kiln_verdict.KilnConfigError(
            f"{name}: unknown key(s) {', '.join(unknown)} in the node's burn-in data; the judge reads "
            f"{', '.join(sorted(KEYS))} (a misspelt key would be a measurement silently not judged)")
    values: Dict[str, Any] = {"name": str(name)}
    for key, value in raw.items():
        if value is None:
            if key in _NULL_KEPT:
                values[key] = None
            continue
        types, what = _TYPES.get(key, ((object,), ""))
        if not isinstance(value, types):
            raise kiln_verdict.KilnConfigError(f"{name}: {key} must be {what}, got {type(value).__name__}")
        values[key] = value
    if "gpu_present" in values:
        values["gpu_present"] = bool(values["gpu_present"])
    if "rdma" in values:
        rdma = values["rdma"]
        if not isinstance(rdma, (list, tuple)):
            raise kiln_verdict.KilnConfigError(f"{name}: rdma must be a list of checks, got {type(rdma).__name__}")
        values["rdma"] = tuple(dict(c) for c in rdma if isinstance(c, Mapping))
    return NodeEvidence(**values)
