# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The node-health check catalogue: ``node_health`` of ``data/burnin_health.yml``, checked.

``node_health.checks`` names the checks kiln-health runs between Slurm jobs, and per check:

``hooks``
    where it runs, a non-empty subset of ``check`` (Slurm's HealthCheckProgram, every interval),
    ``prolog`` and ``epilog``;
``severity``
    the Prometheus alert's severity label, ``critical`` (pages) or ``warning`` (tickets);
``summary``
    one line: the alert's summary.

The section itself names its ``source`` and ``confidence`` like every rule of the file. A check id is
one of :data:`KNOWN_CHECKS` (the checks kiln-health implements): a key outside it is a typo, and an
alert generated for it could never fire.

Pure, standard library only; importable as ``kiln.health.catalogue`` and as
``ansible.module_utils.kiln.health.catalogue``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

from .. import verdict as kiln_verdict
from .rules import _CONFIDENCES, show

__all__ = ["CONFIDENCES", "HOOKS", "KNOWN_CHECKS", "SEVERITIES", "catalogue"]

#: Where a check may run, in kiln-health's order.
HOOKS = ("check", "prolog", "epilog")
#: The alert severities: critical pages, warning tickets.
SEVERITIES = ("critical", "warning")
#: The same confidence words as the other rules of data/burnin_health.yml.
CONFIDENCES = _CONFIDENCES
#: The checks kiln-health implements (the burn-in's passive checks and their fabric and filesystem
#: companions); ``node_health.checks`` may name any of them, and no other.
KNOWN_CHECKS = (
    "gpu.count", "xid.kernel_log", "pcie.link", "nvlink.status", "nvlink.errors", "clocks.throttle",
    "gpu.persistence_mode", "gpu.fabric", "memory.ecc_uncorrectable", "memory.remapped_rows",
    "memory.retired_pages", "dcgm.health", "fabric.facts", "fabric.ports", "fabric.rate", "fabric.counters",
    "fabric.gpudirect", "filesystems.mounts",
)
_FIELDS = ("hooks", "severity", "summary")
_MAX_SUMMARY = 300


def _check(where: str, spec: Any) -> Dict[str, Any]:
    if not isinstance(spec, Mapping):
        raise kiln_verdict.KilnConfigError(f"{where}: not a mapping of hooks, severity and summary, got {show(spec)}")
    extra = [key for key in spec if key not in _FIELDS]
    if extra:
        raise kiln_verdict.KilnConfigError(
            f"{where}: unknown key {show(extra[0])} (a check has {', '.join(_FIELDS)})")
    hooks = spec.get("hooks")
    if (not isinstance(hooks, list) or not hooks or not all(isinstance(h, str) for h in hooks)
            or any(h not in HOOKS for h in hooks) or len(set(hooks)) != len(hooks)):
        raise kiln_verdict.KilnConfigError(
            f"{where}.hooks: a non-empty list of distinct hooks out of {', '.join(HOOKS)}, not {show(hooks)}")
    severity = spec.get("severity")
    if not isinstance(severity, str) or severity not in SEVERITIES:
        raise kiln_verdict.KilnConfigError(
            f"{where}.severity: {show(severity)} is not one of {', '.join(SEVERITIES)}")
    summary = spec.get("summary")
    if (not isinstance(summary, str) or not summary.strip() or "\n" in summary.strip()
            or len(summary) > _MAX_SUMMARY):
        raise kiln_verdict.KilnConfigError(
            f"{where}.summary: one non-empty line of at most {_MAX_SUMMARY} characters, not {show(summary)}")
    return {"hooks": [h for h in HOOKS if h in hooks], "severity": severity, "summary": summary.strip()}


def catalogue(health: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    """``{check_id: {"hooks": [...], "severity": ..., "summary": ...}}`` of the loaded rules file's
    ``node_health`` section, in the file's order (hooks in :data:`HOOKS` order); KilnConfigError naming
    the offending key otherwise."""
    if not isinstance(health, Mapping):
        raise kiln_verdict.KilnConfigError(
            f"node_health: expected the loaded data/burnin_health.yml (a mapping), got {type(health).__name__}")
    section = health.get("node_health")
    if not isinstance(section, Mapping):
        raise kiln_verdict.KilnConfigError(f"node_health: missing, or not a mapping (got {show(section)})")
    confidence = section.get("confidence")
    if not isinstance(confidence, str) or confidence not in CONFIDENCES:
        raise kiln_verdict.KilnConfigError(
            f"node_health.confidence: {show(confidence)} is not one of {', '.join(CONFIDENCES)}")
    source = section.get("source")
    if not isinstance(source, str) or not source.strip():
        raise kiln_verdict.KilnConfigError("node_health.source: name where the selection comes from")
    checks = section.get("checks")
    if not isinstance(checks, Mapping) or not checks:
        raise kiln_verdict.KilnConfigError(f"node_health.checks: a non-empty mapping of checks, not {show(checks)}")
    out: Dict[str, Dict[str, Any]] = {}
    unknown: List[str] = [show(key) for key in checks if not isinstance(key, str) or key not in KNOWN_CHECKS]
    if unknown:
        raise kiln_verdict.KilnConfigError(
            f"node_health.checks: {unknown[0]} is not a check kiln-health runs (known: {', '.join(KNOWN_CHECKS)})")
    for check_id, spec in checks.items():
        out[check_id] = _check(f"node_health.checks.{check_id}", spec)
    return out
