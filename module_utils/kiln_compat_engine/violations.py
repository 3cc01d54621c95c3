# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Violation records: the dict every rule emits, and the helpers that build one.

A violation is ``{rule, components, severity, message, fix, fix_stack,
confidence, source}`` (``kiln_stack_violations`` adds ``allowed`` and
``allow_reason``). Severity follows confidence: a rule resting on an
UNVERIFIED source is a warning, anything else an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .versions import kiln_version_key


ERROR = "error"
WARNING = "warning"
CONFIDENCE_LEVELS = ("VERIFIED", "SECONDARY", "DERIVED", "UNVERIFIED")

def _severity(*confidences: str | None) -> str:
    return WARNING if "UNVERIFIED" in confidences else ERROR


def _worst_conf(*confidences: str | None) -> str:
    present = [c for c in confidences if c]
    return max(present, key=CONFIDENCE_LEVELS.index) if present else "DERIVED"


def _violation(rule: str, components: Sequence[str], message: str, fix: str, fix_stack: dict[str, Any] | None,
               confidence: str | None = "VERIFIED", source: Any = None, severity: str | None = None) -> dict[str, Any]:
    conf = confidence or "DERIVED"
    return {
        "rule": rule,
        "components": list(components),
        "severity": severity or _severity(conf),
        "message": message,
        "fix": fix,
        "fix_stack": fix_stack or {},
        "confidence": conf,
        "source": source,
    }


def _unknown(component: str, value: Any, what: str, fix: str, fix_stack: dict[str, Any] | None = None,
             severity: str = ERROR) -> dict[str, Any]:
    hint = ""
    if re.match(r"^\d+\.\d$", str(value)) and component in ("cuda", "torch", "kubernetes.kubelet", "kubernetes.apiserver",
                                                          "kubernetes.kubectl", "slurm.slurmd", "slurm.slurmctld",
                                                          "slurm.slurmdbd"):
        hint = " (if you wrote an unquoted number such as 1.30, YAML read it as a float: quote versions)"
    return _violation(
        "unknown-version", [component],
        f"{component} {value} is not in kiln's compatibility data ({what}){hint}, so kiln cannot vouch for it.",
        fix, fix_stack, confidence="VERIFIED", source="data/compat.yml", severity=severity)


def _known(pool: Iterable[str], newest: int = 10) -> str:
    """The newest releases of a pool, for a message: ``9.20.0.48, 9.24.0.43 (and 40 older)``."""
    rels = sorted(pool, key=kiln_version_key)
    shown = ", ".join(rels[-newest:])
    return shown + (f" (and {len(rels) - newest} older)" if len(rels) > newest else "")
def _stack_get(stack: Mapping[str, Any], component: str) -> Any:
    if "." in component:
        top, sub = component.split(".", 1)
        value = stack.get(top)
        return value.get(sub) if isinstance(value, Mapping) else None
    return stack.get(component)


def _set_fix(stack: Mapping[str, Any], component: str, value: Any) -> dict[str, Any]:
    """fix_stack entry that sets ``component`` (nested keys replace the whole sub-dict)."""
    if "." in component:
        top, sub = component.split(".", 1)
        new = dict(stack.get(top) or {})
        new[sub] = value
        return {top: new}
    return {component: value}
