# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Burn-in health rules: the rules file behind the GPU memory and ``dcgmi diag`` verdicts.

Pure functions, standard library plus PyYAML (loaded lazily, for the rules file only).
Importable as ``kiln.health.rules`` and as ``ansible.module_utils.kiln.health.rules``.

Rules live in ``data/burnin_health.yml`` (:func:`load_health`); every rule names its source
and confidence, like ``data/burnin_floors.yml``.

The health checks (records from ``kiln_verdict.make_check``), built from these rules by
``kiln_health_memory.memory_checks`` (memory) and ``kiln_health_dcgm.dcgm_check`` (DCGM, on
output parsed by ``kiln_dcgm_diag.parse_dcgm_diag``):

``memory.ecc_uncorrectable``
    Volatile uncorrectable ECC counts per GPU (SRAM and DRAM when the facts split them,
    else the total) against ``memory.ecc_uncorrectable.*.max``.
``memory.remapped_rows``
    Row remapping (Ampere and later): a pending remap or a remap failure.
``memory.retired_pages``
    Dynamic page retirement (Kepler to Turing): a pending retirement, or more retired
    pages (double-bit, single-bit) than ``max``.
``dcgm.diag.r<level>``
    One ``dcgmi diag -r <level>`` run, parsed by ``kiln_dcgm_diag.parse_dcgm_diag``.
``gpu.persistence_mode``, ``gpu.fabric``, ``nvlink.errors``
    Persistence mode, Fabric Manager and GPU fabric registration (NVSwitch boards) and NVLink
    error-counter growth, judged by ``kiln.health.gpu_state`` with the ``gpu_state`` and
    ``nvlink_errors`` sections (:func:`gpu_state_rules`); the burn-in and kiln-health both call them.

Statuses follow kiln_verdict: a counter is judged only when it is a non-negative integer
no larger than ``limits.counter_max``; anything else (None, a string, a float, a bool, a
negative or implausible number) makes the check INCOMPLETE, never PASS. SKIP is used only
where the data is genuinely not reported for that GPU: no nvidia-smi data at all, no ECC on
the board, row remapping on a page-retirement GPU (pre-Ampere) and page retirement on a
row-remapping GPU (Ampere+).
"""

from __future__ import annotations

import copy
import re
from typing import Any, Dict, List, Mapping, Tuple

from .. import verdict as kiln_verdict
from .dcgm_diag import dcgm_test_key
from ..datafiles import data_path

__all__ = [
    "CHECK_ECC",
    "CHECK_REMAP",
    "CHECK_RETIRED",
    "MEMORY_CHECKS",
    "NO_SMI",
    "SCHEMA",
    "GPU_STATE_CHECKS",
    "NVLINK_COUNTERS",
    "default_health_path",
    "gpu_state_rules",
    "load_health",
    "memory_rules",
    "validate_health",
]

PASS, WARN, FAIL, INCOMPLETE, SKIP = (kiln_verdict.PASS, kiln_verdict.WARN, kiln_verdict.FAIL,
                                      kiln_verdict.INCOMPLETE, kiln_verdict.SKIP)

SCHEMA = "kiln.burnin.health/v1"
CHECK_ECC = "memory.ecc_uncorrectable"
CHECK_REMAP = "memory.remapped_rows"
CHECK_RETIRED = "memory.retired_pages"
MEMORY_CHECKS = (CHECK_ECC, CHECK_REMAP, CHECK_RETIRED)
CHECK_PERSISTENCE = "gpu.persistence_mode"
CHECK_FABRIC = "gpu.fabric"
CHECK_NVLINK_ERRORS = "nvlink.errors"
GPU_STATE_CHECKS = (CHECK_PERSISTENCE, CHECK_FABRIC, CHECK_NVLINK_ERRORS)
#: The NVLink counters every rules file must judge (kiln_hwfacts.parse_nvlink_errors' names).
NVLINK_COUNTERS = ("replay", "recovery", "crc")

_CONFIDENCES = ("DERIVED", "REPORTED", "UNVERIFIED", "SITE", "BASELINE")
_RULE_STATUSES = (FAIL, WARN)
_DEFAULT_COUNTER_MAX = 4294967294
NO_SMI = "no nvidia-smi data (driver not loaded or not queried)"

# Rules the memory checks need: (section, rule, kind) with kind "counter" (max + status)
# or "flag" (status when the flag is set).
_MEMORY_RULES = (
    ("ecc_uncorrectable", "volatile_sram_uncorrectable", "counter"),
    ("ecc_uncorrectable", "volatile_dram_uncorrectable", "counter"),
    ("ecc_uncorrectable", "volatile_uncorrectable", "counter"),
    ("remapped_rows", "pending", "flag"),
    ("remapped_rows", "failure", "flag"),
    ("retired_pages", "pending", "flag"),
    ("retired_pages", "double_bit", "counter"),
    ("retired_pages", "single_bit", "counter"),
)



def default_health_path() -> str:
    """data/burnin_health.yml next to this module's repository checkout."""
    return data_path("burnin_health.yml")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_rule(where: str, rule: Any, kind: str) -> None:
    if not isinstance(rule, Mapping):
        raise kiln_verdict.KilnConfigError(f"{where}: not a mapping")
    confidence = rule.get("confidence")
    if confidence not in _CONFIDENCES:
        raise kiln_verdict.KilnConfigError(
            f"{where}: confidence {confidence!r} is not one of {', '.join(_CONFIDENCES)}")
    if not isinstance(rule.get("source"), str) or not rule["source"].strip():
        raise kiln_verdict.KilnConfigError(f"{where}: no source")
    status = rule.get("status")
    if status not in _RULE_STATUSES:
        raise kiln_verdict.KilnConfigError(
            f"{where}: status must be one of {', '.join(_RULE_STATUSES)}, not {status!r}")
    if kind == "counter" and (not is_int(rule.get("max")) or rule["max"] < 0):
        raise kiln_verdict.KilnConfigError(f"{where}: max must be a non-negative integer, not {rule.get('max')!r}")
    if kind == "growth" and (not is_int(rule.get("max_growth")) or rule["max_growth"] < 0):
        raise kiln_verdict.KilnConfigError(
            f"{where}: max_growth must be a non-negative integer, not {rule.get('max_growth')!r}")
    if confidence == "UNVERIFIED" and status == FAIL and not str(rule.get("note") or "").strip():
        raise kiln_verdict.KilnConfigError(
            f"{where}: an UNVERIFIED rule may only FAIL a node with a `note` saying so; "
            "make it WARN, verify it, or add the note")


def _words(where: str, value: Any) -> List[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise kiln_verdict.KilnConfigError(f"{where} must be a non-empty list of strings, not {show(value)}")
    return [v.strip() for v in value]


def _check_source(where: str, rule: Any) -> None:
    """source + confidence of a rule that has no status of its own."""
    if not isinstance(rule, Mapping):
        raise kiln_verdict.KilnConfigError(f"{where}: not a mapping")
    if rule.get("confidence") not in _CONFIDENCES:
        raise kiln_verdict.KilnConfigError(
            f"{where}: confidence {rule.get('confidence')!r} is not one of {', '.join(_CONFIDENCES)}")
    if not isinstance(rule.get("source"), str) or not rule["source"].strip():
        raise kiln_verdict.KilnConfigError(f"{where}: no source")


def _validate_gpu_state(out: Dict[str, Any], where: str, counter_max: int) -> None:
    """The ``gpu_state`` and ``nvlink_errors`` sections (normalised in place: lists of stripped words)."""
    section = out.get("gpu_state")
    if not isinstance(section, Mapping):
        raise kiln_verdict.KilnConfigError(f"{where}: no 'gpu_state' mapping (gpu.persistence_mode, gpu.fabric rules)")
    persistence = section.get("persistence_mode")
    if not isinstance(persistence, Mapping) or "disabled" not in persistence:
        raise kiln_verdict.KilnConfigError(f"{where}: missing rule gpu_state.persistence_mode.disabled")
    _check_rule(f"{where}: gpu_state.persistence_mode.disabled", persistence["disabled"], "flag")
    fabric = section.get("fabric")
    if not isinstance(fabric, Mapping):
        raise kiln_verdict.KilnConfigError(f"{where}: missing rule gpu_state.fabric")
    for name in ("manager_inactive", "registered", "in_progress", "not_registered"):
        if name not in fabric:
            raise kiln_verdict.KilnConfigError(f"{where}: missing rule gpu_state.fabric.{name}")
    for name in ("manager_inactive", "in_progress", "not_registered"):
        _check_rule(f"{where}: gpu_state.fabric.{name}", fabric[name], "flag")
    _check_source(f"{where}: gpu_state.fabric.registered", fabric["registered"])
    registered = dict(fabric["registered"])
    for key in ("states", "statuses", "architectures"):
        registered[key] = _words(f"{where}: gpu_state.fabric.registered.{key}", registered.get(key))
    registered["architectures"] = [a.lower() for a in registered["architectures"]]
    in_progress = dict(fabric["in_progress"])
    in_progress["states"] = _words(f"{where}: gpu_state.fabric.in_progress.states", in_progress.get("states"))
    clash = {s.lower() for s in registered["states"]} & {s.lower() for s in in_progress["states"]}
    if clash:
        raise kiln_verdict.KilnConfigError(
            f"{where}: gpu_state.fabric state(s) {', '.join(sorted(clash))} both registered and in_progress")
    out["gpu_state"] = dict(section, fabric=dict(fabric, registered=registered, in_progress=in_progress))

    nvlink = out.get("nvlink_errors")
    counters = nvlink.get("counters") if isinstance(nvlink, Mapping) else None
    if not isinstance(counters, Mapping):
        raise kiln_verdict.KilnConfigError(f"{where}: no 'nvlink_errors.counters' mapping (nvlink.errors rules)")
    for name in NVLINK_COUNTERS:
        if name not in counters:
            raise kiln_verdict.KilnConfigError(f"{where}: missing rule nvlink_errors.counters.{name}")
    for name, rule in counters.items():
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9_]{1,64}", name):
            raise kiln_verdict.KilnConfigError(
                f"{where}: nvlink_errors.counters key {name!r} is not a counter name (lower case, digits, _)")
        _check_rule(f"{where}: nvlink_errors.counters.{name}", rule, "growth")
        if rule["max_growth"] >= counter_max:
            raise kiln_verdict.KilnConfigError(
                f"{where}: nvlink_errors.counters.{name}.max_growth is not below limits.counter_max")


def validate_health(data: Any, where: str, partial: bool = False) -> Dict[str, Any]:
    """Check a loaded rules document; returns a deep copy with integer DCGM level keys.

    The ``gpu_state`` and ``nvlink_errors`` sections are required; *partial* lets a document
    without them through (the sections a caller wraps for one judge: :func:`memory_rules`).
    """
    if not isinstance(data, Mapping):
        raise kiln_verdict.KilnConfigError(f"{where}: not a kiln health rules file (not a mapping)")
    if data.get("schema") != SCHEMA:
        raise kiln_verdict.KilnConfigError(f"{where}: schema must be {SCHEMA!r}, not {data.get('schema')!r}")
    out: Dict[str, Any] = copy.deepcopy(dict(data))
    limits = out.get("limits") or {}
    if not isinstance(limits, Mapping):
        raise kiln_verdict.KilnConfigError(f"{where}: limits must be a mapping")
    counter_max = limits.get("counter_max", _DEFAULT_COUNTER_MAX)
    if not is_int(counter_max) or counter_max < 1:
        raise kiln_verdict.KilnConfigError(f"{where}: limits.counter_max must be a positive integer")
    memory = out.get("memory")
    if not isinstance(memory, Mapping):
        raise kiln_verdict.KilnConfigError(f"{where}: no 'memory' mapping")
    for section, name, kind in _MEMORY_RULES:
        block = memory.get(section)
        if not isinstance(block, Mapping) or name not in block:
            raise kiln_verdict.KilnConfigError(f"{where}: missing rule memory.{section}.{name}")
        _check_rule(f"{where}: memory.{section}.{name}", block[name], kind)
        if kind == "counter" and block[name]["max"] >= counter_max:
            raise kiln_verdict.KilnConfigError(f"{where}: memory.{section}.{name}.max is not below limits.counter_max")
    dcgm = out.get("dcgm")
    if not isinstance(dcgm, Mapping):
        raise kiln_verdict.KilnConfigError(f"{where}: no 'dcgm' mapping")
    if dcgm.get("confidence") not in _CONFIDENCES or not str(dcgm.get("source") or "").strip():
        raise kiln_verdict.KilnConfigError(f"{where}: dcgm needs a source and a confidence")
    if dcgm.get("stress_rule", "any") not in ("any", "all"):
        raise kiln_verdict.KilnConfigError(f"{where}: dcgm.stress_rule must be 'any' or 'all'")
    levels = dcgm.get("levels")
    if not isinstance(levels, Mapping) or not levels:
        raise kiln_verdict.KilnConfigError(f"{where}: dcgm.levels must be a non-empty mapping")
    normal: Dict[int, Dict[str, Any]] = {}
    for key, spec in levels.items():
        level = key if is_int(key) else (int(key) if isinstance(key, str) and key.strip().isdigit() else None)
        if level is None or not 1 <= level <= 4:
            raise kiln_verdict.KilnConfigError(f"{where}: dcgm.levels key {key!r} is not a diag level 1-4")
        stress = (spec or {}).get("stress") if isinstance(spec, Mapping) or spec is None else None
        if not isinstance(stress, list) or not all(isinstance(t, str) and t.strip() for t in stress):
            raise kiln_verdict.KilnConfigError(f"{where}: dcgm.levels.{key}.stress must be a list of test names")
        normal[level] = dict(spec or {}, stress=[dcgm_test_key(t) for t in stress])
    out["dcgm"] = dict(dcgm, levels=normal)
    out["limits"] = dict(limits, counter_max=counter_max)
    if not partial or "gpu_state" in out or "nvlink_errors" in out:
        _validate_gpu_state(out, where, counter_max)
    return out


def load_health(path: str) -> Dict[str, Any]:
    """Load and validate the health rules file (YAML) at *path* (the module's health_path; on the
    controller and in tests :func:`default_health_path`); KilnConfigError on a bad file."""
    import yaml  # PyYAML ships with Ansible; imported lazily so the parsers stay stdlib-only

    if not path or not isinstance(path, str):
        raise kiln_verdict.KilnConfigError(f"load_health: the health rules file's path is required, not {path!r}")
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise kiln_verdict.KilnConfigError(f"cannot read health rules file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise kiln_verdict.KilnConfigError(f"{path}: not valid YAML: {exc}") from exc
    return validate_health(data, path)


def memory_rules(thresholds: Any) -> Tuple[Mapping[str, Any], int]:
    """(memory rules, counter_max) from a loaded rules file or its ``memory`` section."""
    if not isinstance(thresholds, Mapping):
        raise kiln_verdict.KilnConfigError("memory_checks: thresholds must be the mapping from load_health()")
    if "schema" in thresholds:
        data = validate_health(thresholds, "health rules")
        return data["memory"], data["limits"]["counter_max"]
    memory = thresholds.get("memory", thresholds)
    wrapped = {"schema": SCHEMA, "memory": memory, "limits": thresholds.get("limits") or {},
               "dcgm": {"confidence": "SITE", "source": "n/a", "levels": {1: {"stress": []}}}}
    data = validate_health(wrapped, "health rules", partial=True)
    return data["memory"], data["limits"]["counter_max"]


_MEMORY_STUB = {"ecc_uncorrectable": {k: {"max": 0, "status": FAIL, "confidence": "SITE", "source": "n/a"}
                                      for k in ("volatile_sram_uncorrectable", "volatile_dram_uncorrectable",
                                                "volatile_uncorrectable")},
                "remapped_rows": {k: {"status": FAIL, "confidence": "SITE", "source": "n/a"}
                                  for k in ("pending", "failure")},
                "retired_pages": {"pending": {"status": FAIL, "confidence": "SITE", "source": "n/a"},
                                  "double_bit": {"max": 0, "status": FAIL, "confidence": "SITE", "source": "n/a"},
                                  "single_bit": {"max": 0, "status": FAIL, "confidence": "SITE", "source": "n/a"}}}


def gpu_state_rules(thresholds: Any) -> Dict[str, Any]:
    """The rules of kiln.health.gpu_state's judges, validated.

    *thresholds*: the mapping from :func:`load_health` (or any mapping with its ``gpu_state``,
    ``nvlink_errors`` and optional ``limits`` sections). Returns ``{persistence_mode: {disabled},
    fabric: {manager_inactive, registered, in_progress, not_registered}, nvlink_errors: {counter:
    rule}, counter_max}``; KilnConfigError naming the key for anything missing or malformed.
    """
    if not isinstance(thresholds, Mapping):
        raise kiln_verdict.KilnConfigError("gpu_state judges: rules must be the mapping from load_health()")
    if "schema" in thresholds:
        data = validate_health(thresholds, "health rules")
    else:
        wrapped = {"schema": SCHEMA, "memory": _MEMORY_STUB, "limits": thresholds.get("limits") or {},
                   "dcgm": {"confidence": "SITE", "source": "n/a", "levels": {1: {"stress": []}}},
                   "gpu_state": thresholds.get("gpu_state"), "nvlink_errors": thresholds.get("nvlink_errors")}
        data = validate_health(wrapped, "health rules")
    return {"persistence_mode": data["gpu_state"]["persistence_mode"], "fabric": data["gpu_state"]["fabric"],
            "nvlink_errors": dict(data["nvlink_errors"]["counters"]), "counter_max": data["limits"]["counter_max"]}



def show(value: Any) -> str:
    """A short repr of a hostile value for a detail text."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
