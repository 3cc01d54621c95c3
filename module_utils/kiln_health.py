# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Burn-in health verdicts: GPU memory errors and ``dcgmi diag`` results.

Pure functions, standard library plus PyYAML (loaded lazily, for the rules file only).
Importable as ``kiln_health`` and as ``ansible.module_utils.kiln_health``.

Rules live in ``data/burnin_health.yml`` (:func:`load_health`); every rule names its source
and confidence, like ``data/burnin_floors.yml``.

Checks built here (records from ``kiln_verdict.make_check``):

``memory.ecc_uncorrectable``
    Volatile uncorrectable ECC counts per GPU (SRAM and DRAM when the facts split them,
    else the total) against ``memory.ecc_uncorrectable.*.max``.
``memory.remapped_rows``
    Row remapping (Ampere and later): a pending remap or a remap failure.
``memory.retired_pages``
    Dynamic page retirement (Kepler to Turing): a pending retirement, or more retired
    pages (double-bit, single-bit) than ``max``.
``dcgm.diag.r<level>``
    One ``dcgmi diag -r <level>`` run, parsed by :func:`parse_dcgm_diag`.

Statuses follow kiln_verdict: a counter is judged only when it is a non-negative integer
no larger than ``limits.counter_max``; anything else (None, a string, a float, a bool, a
negative or implausible number) makes the check INCOMPLETE, never PASS. SKIP is used only
where the data is genuinely not reported for that GPU: no nvidia-smi data at all, no ECC on
the board, row remapping on a page-retirement GPU (pre-Ampere) and page retirement on a
row-remapping GPU (Ampere+).
"""

from __future__ import annotations

import copy
import json
import os
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

try:
    from ansible.module_utils import kiln_gpu, kiln_verdict
except ImportError:  # imported as a top-level module (tools/, unit tests)
    import kiln_gpu  # type: ignore[no-redef]
    import kiln_verdict  # type: ignore[no-redef]

__all__ = [
    "CHECK_ECC",
    "CHECK_REMAP",
    "CHECK_RETIRED",
    "DCGM_RC",
    "MEMORY_CHECKS",
    "SCHEMA",
    "UNKNOWN",
    "dcgm_check",
    "dcgm_test_key",
    "default_health_path",
    "load_health",
    "memory_checks",
    "parse_dcgm_diag",
]

PASS, WARN, FAIL, INCOMPLETE, SKIP = (kiln_verdict.PASS, kiln_verdict.WARN, kiln_verdict.FAIL,
                                      kiln_verdict.INCOMPLETE, kiln_verdict.SKIP)
#: Status of a parsed DCGM test whose status word kiln does not know (never PASS).
UNKNOWN = "UNKNOWN"

SCHEMA = "kiln.burnin.health/v1"
CHECK_ECC = "memory.ecc_uncorrectable"
CHECK_REMAP = "memory.remapped_rows"
CHECK_RETIRED = "memory.retired_pages"
MEMORY_CHECKS = (CHECK_ECC, CHECK_REMAP, CHECK_RETIRED)

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

#: dcgmi exit statuses (dcgmReturn_t modulo 256, dcgm_structs.h) worth naming in a detail.
DCGM_RC = {
    0: "DCGM_ST_OK",
    205: "DCGM_ST_NVVS_ISOLATE_ERROR (-51): a failure that calls for isolating the GPU",
    226: "DCGM_ST_NVVS_ERROR (-30): the diagnostic reported an error",
    235: "DCGM_ST_CONNECTION_NOT_VALID (-21): host engine unreachable",
    255: "DCGM_ST_BADPARAM (-1)",
    124: "timed out (timeout(1))",
    137: "killed (SIGKILL, e.g. a timeout)",
}

# Input bounds for parse_dcgm_diag: a level-4 run on 8 GPUs is well under 1 MiB.
MAX_INPUT_CHARS = 8 * 1024 * 1024
MAX_LINES = 200_000
MAX_TESTS = 256
MAX_RESULTS = 1024
MAX_MESSAGES = 16
MAX_MESSAGE_CHARS = 400
MAX_PROBLEMS = 20
_MAX_JSON_STARTS = 8

#: DCGM 3.x display names and other spellings -> DCGM 4.x plugin names (PluginStrings.h).
_TEST_ALIASES = {
    "gpu memory": "memory", "memory": "memory",
    "diagnostic": "diagnostic", "sm stress": "sm_stress", "sm_stress": "sm_stress",
    "pcie": "pcie", "pci": "pcie",
    "targeted stress": "targeted_stress", "targeted_stress": "targeted_stress",
    "targeted power": "targeted_power", "targeted_power": "targeted_power",
    "memory bandwidth": "memory_bandwidth", "memory_bandwidth": "memory_bandwidth",
    "memtest": "memtest", "memory test": "memtest",
    "pulse test": "pulse_test", "pulse_test": "pulse_test",
    "eud": "eud", "cpu eud": "cpu_eud", "cpu_eud": "cpu_eud",
    "nvbandwidth": "nvbandwidth", "nccl tests": "nccl_tests", "nccl_tests": "nccl_tests",
    "context create": "context_create", "context_create": "context_create",
    "software": "software",
}

_STATUS_WORDS = {
    "pass": PASS, "passed": PASS,
    "fail": FAIL, "failed": FAIL, "failure": FAIL, "error": FAIL,
    "warn": WARN, "warning": WARN,
    "skip": SKIP, "skipped": SKIP, "not run": SKIP, "not_run": SKIP, "notrun": SKIP, "": SKIP,
}
_TEST_SEVERITY = {SKIP: 0, PASS: 1, WARN: 2, UNKNOWN: 3, FAIL: 4}


# --------------------------------------------------------------------------- rules file


def default_health_path() -> str:
    """data/burnin_health.yml next to this module's repository checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(here), "data", "burnin_health.yml")


def _is_int(value: Any) -> bool:
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
    if kind == "counter" and (not _is_int(rule.get("max")) or rule["max"] < 0):
        raise kiln_verdict.KilnConfigError(f"{where}: max must be a non-negative integer, not {rule.get('max')!r}")
    if confidence == "UNVERIFIED" and status == FAIL and not str(rule.get("note") or "").strip():
        raise kiln_verdict.KilnConfigError(
            f"{where}: an UNVERIFIED rule may only FAIL a node with a `note` saying so; "
            "make it WARN, verify it, or add the note")


def _validate(data: Any, where: str) -> Dict[str, Any]:
    """Check a loaded rules document; returns a deep copy with integer DCGM level keys."""
    if not isinstance(data, Mapping):
        raise kiln_verdict.KilnConfigError(f"{where}: not a kiln health rules file (not a mapping)")
    if data.get("schema") != SCHEMA:
        raise kiln_verdict.KilnConfigError(f"{where}: schema must be {SCHEMA!r}, not {data.get('schema')!r}")
    out: Dict[str, Any] = copy.deepcopy(dict(data))
    limits = out.get("limits") or {}
    if not isinstance(limits, Mapping):
        raise kiln_verdict.KilnConfigError(f"{where}: limits must be a mapping")
    counter_max = limits.get("counter_max", _DEFAULT_COUNTER_MAX)
    if not _is_int(counter_max) or counter_max < 1:
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
        level = key if _is_int(key) else (int(key) if isinstance(key, str) and key.strip().isdigit() else None)
        if level is None or not 1 <= level <= 4:
            raise kiln_verdict.KilnConfigError(f"{where}: dcgm.levels key {key!r} is not a diag level 1-4")
        stress = (spec or {}).get("stress") if isinstance(spec, Mapping) or spec is None else None
        if not isinstance(stress, list) or not all(isinstance(t, str) and t.strip() for t in stress):
            raise kiln_verdict.KilnConfigError(f"{where}: dcgm.levels.{key}.stress must be a list of test names")
        normal[level] = dict(spec or {}, stress=[dcgm_test_key(t) for t in stress])
    out["dcgm"] = dict(dcgm, levels=normal)
    out["limits"] = dict(limits, counter_max=counter_max)
    return out


def load_health(path: Optional[str] = None) -> Dict[str, Any]:
    """Load and validate the health rules file (YAML); KilnConfigError on a bad file."""
    import yaml  # PyYAML ships with Ansible; imported lazily so the parsers stay stdlib-only

    path = path or default_health_path()
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise kiln_verdict.KilnConfigError(f"cannot read health rules file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise kiln_verdict.KilnConfigError(f"{path}: not valid YAML: {exc}") from exc
    return _validate(data, path)


def _rules(thresholds: Any) -> Tuple[Mapping[str, Any], int]:
    """(memory rules, counter_max) from a loaded rules file or its ``memory`` section."""
    if not isinstance(thresholds, Mapping):
        raise kiln_verdict.KilnConfigError("memory_checks: thresholds must be the mapping from load_health()")
    if "schema" in thresholds:
        data = _validate(thresholds, "health rules")
        return data["memory"], data["limits"]["counter_max"]
    memory = thresholds.get("memory", thresholds)
    wrapped = {"schema": SCHEMA, "memory": memory, "limits": thresholds.get("limits") or {},
               "dcgm": {"confidence": "SITE", "source": "n/a", "levels": {1: {"stress": []}}}}
    data = _validate(wrapped, "health rules")
    return data["memory"], data["limits"]["counter_max"]


# --------------------------------------------------------------------------- memory checks


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _counter(value: Any, limit: int) -> Tuple[Optional[int], Optional[str]]:
    """(value, None) for a plausible counter, else (None, why it cannot be judged)."""
    if value is None:
        return None, "not reported"
    if not _is_int(value):
        return None, f"{_show(value)} is not an integer count"
    if value < 0:
        return None, f"{value} is negative"
    if value > limit:
        return None, f"{value} is implausible (above {limit}; an N/A sentinel?)"
    return value, None


def _flag(value: Any) -> Tuple[Optional[bool], Optional[str]]:
    if value is None:
        return None, "not reported"
    if isinstance(value, bool):
        return value, None
    return None, f"{_show(value)} is not a yes/no value"


def _label(gpu: Any, position: int) -> str:
    index = gpu.get("index") if isinstance(gpu, Mapping) else None
    if _is_int(index) and 0 <= index < 1_000_000:
        return f"GPU{index}"
    return f"GPU#{position}"


def _arch(gpu: Mapping[str, Any]) -> Optional[str]:
    arch = gpu.get("architecture")
    return arch.strip() if isinstance(arch, str) and arch.strip() else None


def _scheme(gpu: Mapping[str, Any]) -> Optional[str]:
    """row_remap / page_retirement / None, from the data first (kiln_gpu.memory_repair)."""
    try:
        scheme = kiln_gpu.memory_repair(_arch(gpu), gpu.get("remapped_rows"), gpu.get("retired_pages"))
    except Exception:  # noqa: BLE001 - hostile facts must not escape as an exception
        scheme = None
    if scheme is None and gpu.get("memory_repair") in (kiln_gpu.ROW_REMAP, kiln_gpu.PAGE_RETIREMENT):
        scheme = gpu["memory_repair"]
    return scheme


_ECC_KEYS = ("volatile_sram_uncorrectable", "volatile_dram_uncorrectable", "volatile_uncorrectable")
_ECC_WORDS = {"volatile_sram_uncorrectable": "volatile SRAM uncorrectable",
              "volatile_dram_uncorrectable": "volatile DRAM uncorrectable",
              "volatile_uncorrectable": "volatile uncorrectable (total)"}


def _no_ecc(gpu: Mapping[str, Any]) -> bool:
    """True for a board without ECC: no ECC mode and no ECC counter reported at all."""
    ecc = gpu.get("ecc")
    counters = [v for v in ecc.values()] if isinstance(ecc, Mapping) else []
    return gpu.get("ecc_mode") is None and all(v is None for v in counters)


def _gpu_result(label: str, status: str, reasons: List[str], values: Optional[Dict[str, Any]] = None
                ) -> Dict[str, Any]:
    return {"label": label, "status": status, "reasons": reasons, "values": values or {}}


def _ecc_gpu(gpu: Mapping[str, Any], label: str, rules: Mapping[str, Any], limit: int) -> Dict[str, Any]:
    ecc = gpu.get("ecc") if isinstance(gpu.get("ecc"), Mapping) else {}
    raw = {key: ecc.get(key) for key in _ECC_KEYS}
    if all(value is None for value in raw.values()):
        mode = gpu.get("ecc_mode")
        if _no_ecc(gpu):
            return _gpu_result(label, SKIP, [f"{label}: ECC not supported or not reported on this board"])
        if isinstance(mode, str) and mode.strip().lower() == "disabled":
            return _gpu_result(label, INCOMPLETE, [f"{label}: ECC disabled, uncorrectable errors are not counted"])
        return _gpu_result(label, INCOMPLETE, [f"{label}: ECC mode {_show(mode)} but no uncorrectable "
                                               "count reported"])
    split = raw["volatile_sram_uncorrectable"] is not None or raw["volatile_dram_uncorrectable"] is not None
    judged = list(_ECC_KEYS[:2]) if split else ["volatile_uncorrectable"]
    if split and raw["volatile_uncorrectable"] is not None:
        judged.append("volatile_uncorrectable")  # judged too: it must agree with the split
    statuses: List[str] = []
    reasons: List[str] = []
    values: Dict[str, Any] = {}
    over_split = False
    for key in judged:
        value, problem = _counter(raw[key], limit)
        if problem is not None:
            if raw[key] is None and key != "volatile_uncorrectable" and _scheme(gpu) == kiln_gpu.PAGE_RETIREMENT \
                    and raw["volatile_uncorrectable"] is not None:
                continue  # nvidia-smi's own double-bit total covers the unit it did not itemise
            statuses.append(INCOMPLETE)
            reasons.append(f"{label} {_ECC_WORDS[key]} {problem}")
            continue
        values[key] = value
        rule = rules["ecc_uncorrectable"][key]
        if value > rule["max"]:
            statuses.append(rule["status"])
            if key != "volatile_uncorrectable" or not over_split:
                reasons.append(f"{label} {_ECC_WORDS[key]} {value} > {rule['max']}")
            over_split = over_split or key != "volatile_uncorrectable"
        else:
            statuses.append(PASS)
    return _gpu_result(label, kiln_verdict.worst(statuses) or INCOMPLETE, reasons, values)


def _remap_gpu(gpu: Mapping[str, Any], label: str, rules: Mapping[str, Any]) -> Dict[str, Any]:
    rows = gpu.get("remapped_rows") if isinstance(gpu.get("remapped_rows"), Mapping) else {}
    supported = rows.get("supported")
    arch = _arch(gpu)
    if supported is True:
        statuses: List[str] = []
        reasons: List[str] = []
        values: Dict[str, Any] = {}
        for name, words in (("pending", "row remap pending (reset the GPU to apply it)"),
                            ("failure", "row remap failure (no spare row left: RMA)")):
            flag, problem = _flag(rows.get(name))
            if problem is not None:
                statuses.append(INCOMPLETE)
                reasons.append(f"{label} remapped_rows.{name} {problem}")
                continue
            values[name] = flag
            if flag:
                statuses.append(rules["remapped_rows"][name]["status"])
                reasons.append(f"{label} {words}")
            else:
                statuses.append(PASS)
        for name in ("correctable", "uncorrectable"):
            if _is_int(rows.get(name)):
                values[name] = rows[name]
        return _gpu_result(label, kiln_verdict.worst(statuses) or INCOMPLETE, reasons, values)
    if supported not in (None, False):
        return _gpu_result(label, INCOMPLETE, [f"{label} remapped_rows.supported {_show(supported)} "
                                               "is not a yes/no value"])
    if _no_ecc(gpu):
        return _gpu_result(label, SKIP, [f"{label}: ECC not supported or not reported on this board"])
    scheme = _scheme(gpu)
    if scheme == kiln_gpu.PAGE_RETIREMENT:
        return _gpu_result(label, SKIP, [f"{label}: no row remapping on {arch or 'pre-Ampere'} GPUs "
                                         "(page retirement applies)"])
    if scheme == kiln_gpu.ROW_REMAP:
        why = f"{label}: {arch or 'Ampere+'} GPU remaps rows but reported no remapped-rows data"
        if isinstance(gpu.get("mig_mode"), str) and gpu["mig_mode"].strip().lower() == "enabled":
            why += " (MIG mode is Enabled, nvidia-smi shows N/A then)"
        return _gpu_result(label, INCOMPLETE, [why])
    return _gpu_result(label, INCOMPLETE, [f"{label}: architecture unknown and no remapped-rows or "
                                           "retired-pages data: cannot tell which applies"])


def _retired_gpu(gpu: Mapping[str, Any], label: str, rules: Mapping[str, Any], limit: int) -> Dict[str, Any]:
    pages = gpu.get("retired_pages") if isinstance(gpu.get("retired_pages"), Mapping) else {}
    arch = _arch(gpu)
    scheme = _scheme(gpu)
    if scheme == kiln_gpu.ROW_REMAP:
        return _gpu_result(label, SKIP, [f"{label}: {arch or 'Ampere+'} GPUs remap rows instead of "
                                         "retiring pages"])
    if _no_ecc(gpu) and all(pages.get(k) is None for k in ("pending", "single_bit", "double_bit")):
        return _gpu_result(label, SKIP, [f"{label}: ECC not supported or not reported on this board"])
    if scheme is None:
        return _gpu_result(label, INCOMPLETE, [f"{label}: architecture unknown and no retired-pages or "
                                               "remapped-rows data: cannot tell which applies"])
    statuses: List[str] = []
    reasons: List[str] = []
    values: Dict[str, Any] = {}
    flag, problem = _flag(pages.get("pending"))
    if problem is not None:
        statuses.append(INCOMPLETE)
        reasons.append(f"{label} retired_pages.pending {problem}")
    else:
        values["pending"] = flag
        statuses.append(rules["retired_pages"]["pending"]["status"] if flag else PASS)
        if flag:
            reasons.append(f"{label} page retirement pending (applied at the next driver load)")
    for name, words in (("double_bit", "double-bit"), ("single_bit", "multiple single-bit")):
        value, problem = _counter(pages.get(name), limit)
        if problem is not None:
            statuses.append(INCOMPLETE)
            reasons.append(f"{label} retired pages ({words}) {problem}")
            continue
        values[name] = value
        rule = rules["retired_pages"][name]
        if value > rule["max"]:
            statuses.append(rule["status"])
            reasons.append(f"{label} retired pages ({words}) {value} > {rule['max']}")
        else:
            statuses.append(PASS)
    return _gpu_result(label, kiln_verdict.worst(statuses) or INCOMPLETE, reasons, values)


def _finish(check_id: str, results: Sequence[Mapping[str, Any]], ok_text: str,
            rules: Mapping[str, Any], metric: str, unit: str, value: Any) -> Dict[str, Any]:
    judged = [r for r in results if r["status"] != SKIP]
    skipped = [r for r in results if r["status"] == SKIP]
    sources = {name: {"max": rule.get("max"), "status": rule["status"], "source": rule["source"],
                      "confidence": rule["confidence"]} for name, rule in rules.items()}
    per_gpu = {r["label"]: r["status"] for r in results}
    values = {r["label"]: r["values"] for r in results if r["values"]}
    if not judged:
        why = sorted({reason.split(": ", 1)[-1] for r in skipped for reason in r["reasons"]})
        return kiln_verdict.make_check(check_id, SKIP, detail="; ".join(why) or "nothing to judge",
                                       metric=metric, unit=unit, gpus=per_gpu, rules=sources)
    status = kiln_verdict.worst(r["status"] for r in judged) or INCOMPLETE
    reasons = [reason for r in judged for reason in r["reasons"]]
    if status == PASS:
        detail = f"{len(judged)} GPU{'s' if len(judged) != 1 else ''}: {ok_text}"
    else:
        detail = "; ".join(reasons)
    if skipped:
        detail += "; not judged: " + ", ".join(r["label"] for r in skipped) + " (" + \
            "; ".join(sorted({reason.split(": ", 1)[-1] for r in skipped for reason in r["reasons"]})) + ")"
    return kiln_verdict.make_check(check_id, status, detail=detail, metric=metric, value=value, unit=unit,
                                   reasons=reasons, gpus=per_gpu, values=values, rules=sources)


def memory_checks(gpu_facts: Mapping[str, Any], thresholds: Mapping[str, Any], smi: bool) -> List[Dict[str, Any]]:
    """``memory.ecc_uncorrectable``, ``memory.remapped_rows`` and ``memory.retired_pages``.

    *gpu_facts* is ``ansible_facts['kiln_gpu']`` (kiln_gpu.summarize); *thresholds* the
    mapping from :func:`load_health` (or its ``memory`` section); *smi* whether the facts
    come from nvidia-smi (False: every check SKIPs). Raises KilnConfigError only for bad
    *thresholds*; hostile facts give INCOMPLETE, never an exception or a PASS.
    """
    rules, limit = _rules(thresholds)
    facts = gpu_facts if isinstance(gpu_facts, Mapping) else {}
    if not smi:
        return [kiln_verdict.make_check(cid, SKIP, detail=NO_SMI) for cid in MEMORY_CHECKS]
    gpus = facts.get("gpus")
    if gpus is None or (isinstance(gpus, (list, tuple)) and not gpus):
        return [kiln_verdict.make_check(cid, SKIP, detail="no GPU reported by nvidia-smi") for cid in MEMORY_CHECKS]
    if not isinstance(gpus, (list, tuple)):
        why = f"GPU facts malformed: gpus is {type(gpus).__name__}, not a list"
        return [kiln_verdict.make_check(cid, INCOMPLETE, detail=why) for cid in MEMORY_CHECKS]

    ecc: List[Dict[str, Any]] = []
    remap: List[Dict[str, Any]] = []
    retired: List[Dict[str, Any]] = []
    for position, gpu in enumerate(gpus):
        label = _label(gpu, position)
        if not isinstance(gpu, Mapping):
            bad = _gpu_result(label, INCOMPLETE, [f"{label}: malformed GPU entry ({type(gpu).__name__})"])
            ecc.append(bad)
            remap.append(bad)
            retired.append(bad)
            continue
        ecc.append(_ecc_gpu(gpu, label, rules, limit))
        remap.append(_remap_gpu(gpu, label, rules))
        retired.append(_retired_gpu(gpu, label, rules, limit))

    def worst_count(results: Iterable[Mapping[str, Any]], keys: Sequence[str]) -> Optional[int]:
        found = [r["values"][k] for r in results for k in keys if _is_int(r["values"].get(k))]
        return max(found) if found else None

    ecc_max = rules["ecc_uncorrectable"]
    return [
        _finish(CHECK_ECC, ecc,
                "no volatile uncorrectable ECC error (SRAM max "
                f"{ecc_max['volatile_sram_uncorrectable']['max']}, DRAM max "
                f"{ecc_max['volatile_dram_uncorrectable']['max']})",
                ecc_max, "volatile_uncorrectable_max", "errors",
                worst_count(ecc, _ECC_KEYS)),
        _finish(CHECK_REMAP, remap, "no row remap pending or failed", rules["remapped_rows"],
                "remap_pending_or_failed", "GPUs",
                sum(1 for r in remap if r["values"].get("pending") or r["values"].get("failure"))
                if any(r["status"] != SKIP for r in remap) else None),
        _finish(CHECK_RETIRED, retired,
                f"no retirement pending, retired pages within limits (double-bit max "
                f"{rules['retired_pages']['double_bit']['max']}, single-bit max "
                f"{rules['retired_pages']['single_bit']['max']})",
                rules["retired_pages"], "retired_pages_max", "pages",
                worst_count(retired, ("double_bit", "single_bit"))),
    ]


# --------------------------------------------------------------------------- dcgmi diag parsing


def dcgm_test_key(name: Any) -> str:
    """Canonical (DCGM 4.x plugin) name of a test: ``'Targeted Stress'`` -> ``'targeted_stress'``."""
    text = " ".join(str(name).strip().lower().replace("-", " ").split())
    if text in _TEST_ALIASES:
        return _TEST_ALIASES[text]
    underscored = text.replace(" ", "_")
    return _TEST_ALIASES.get(underscored, underscored)


def _status_of(raw: Any) -> str:
    if not isinstance(raw, str):
        return UNKNOWN
    return _STATUS_WORDS.get(" ".join(raw.strip().lower().split()), UNKNOWN)


def _worse(a: Optional[str], b: str) -> str:
    return b if a is None or _TEST_SEVERITY[b] > _TEST_SEVERITY[a] else a


def _clip(text: Any) -> str:
    value = text if isinstance(text, str) else repr(text)
    value = " ".join(value.split())
    return value if len(value) <= MAX_MESSAGE_CHARS else value[:MAX_MESSAGE_CHARS - 3] + "..."


class _Tests:
    """Accumulates tests by (category, key), keeping DCGM's order."""

    def __init__(self) -> None:
        self.order: List[Tuple[str, str]] = []
        self.tests: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.dropped = 0

    def get(self, name: str, category: Optional[str]) -> Optional[Dict[str, Any]]:
        key = dcgm_test_key(name)
        ident = ((category or "").strip().lower(), key)
        if ident not in self.tests:
            if len(self.order) >= MAX_TESTS:
                self.dropped += 1
                return None
            self.order.append(ident)
            self.tests[ident] = {"name": _clip(name) or "unnamed", "key": key,
                                 "category": _clip(category) if category else None,
                                 "summary": None, "entities": {}, "warnings": []}
        return self.tests[ident]

    @staticmethod
    def message(test: Dict[str, Any], entity: Optional[str], text: Any,
                error_id: Any = None) -> Optional[Dict[str, Any]]:
        if len(test["warnings"]) >= MAX_MESSAGES:
            return None
        entry = {"entity": entity, "error_id": error_id if _is_int(error_id) else None, "message": _clip(text)}
        test["warnings"].append(entry)
        return entry

    def finish(self) -> List[Dict[str, Any]]:
        out = []
        for ident in self.order:
            test = self.tests[ident]
            entities = dict(test["entities"])
            summary = test["summary"]
            status: Optional[str] = summary
            for value in entities.values():
                status = _worse(status, value)
            detail = "; ".join((f"{w['entity']}: " if w["entity"] else "") + w["message"]
                               for w in test["warnings"][:4] if w["message"])
            out.append({"name": test["name"], "key": test["key"], "category": test["category"],
                        "status": status or SKIP, "gpus": entities,
                        "detail": detail or ("no result reported" if status is None else ""),
                        "warnings": test["warnings"]})
        return out


def _entity_labels(result: Mapping[str, Any]) -> List[str]:
    """Entities of one JSON result: 4.x entity_group/entity_id, 3.x gpu_ids (int or CSV)."""
    if "entity_id" in result:
        group = result.get("entity_group")
        group = group.strip() if isinstance(group, str) and group.strip() else "GPU"
        ident = result.get("entity_id")
        if _is_int(ident) and 0 <= ident < 1_000_000:
            return [f"{_clip(group)[:16]}{ident}"]
        return [f"{_clip(group)[:16]}?"]
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if _is_int(ids) and 0 <= ids < 1_000_000:
        return [f"GPU{ids}"]
    if isinstance(ids, str):
        parts = [p.strip() for p in ids.split(",")[:MAX_RESULTS]]
        if parts and all(p.isdigit() and len(p) <= 6 for p in parts):
            return [f"GPU{int(p)}" for p in parts]
    return []


def _json_messages(tests: _Tests, test: Dict[str, Any], entity: Optional[str], value: Any) -> None:
    items = value if isinstance(value, list) else [value]
    for item in items[:MAX_MESSAGES]:
        if isinstance(item, Mapping):
            text = item.get("warning", item.get("message", item.get("msg")))
            if text is not None:
                tests.message(test, entity, text, item.get("error_id", item.get("error_code")))
        elif isinstance(item, str) and item.strip():
            tests.message(test, entity, item)


def _json_test(tests: _Tests, entry: Any, category: Optional[str]) -> None:
    if not isinstance(entry, Mapping):
        return  # dcgmi 3.x prints null entries in the tests array
    name = entry.get("name")
    test = tests.get(name if isinstance(name, str) and name.strip() else "unnamed",
                     category if isinstance(category, str) else None)
    if test is None:
        return
    results = entry.get("results")
    if isinstance(results, Mapping):
        results = [results]
    if isinstance(results, list):
        for result in results[:MAX_RESULTS]:
            if not isinstance(result, Mapping):
                continue
            status = _status_of(result.get("status"))
            labels = _entity_labels(result)
            if not labels:
                test["summary"] = _worse(test["summary"], status)
            for label in labels:
                test["entities"][label] = _worse(test["entities"].get(label), status)
            if "warnings" in result:
                _json_messages(tests, test, labels[0] if len(labels) == 1 else None, result["warnings"])
    summary = entry.get("test_summary")
    if isinstance(summary, Mapping):
        if "status" in summary:
            test["summary"] = _worse(test["summary"], _status_of(summary.get("status")))
        if "warnings" in summary:
            _json_messages(tests, test, None, summary["warnings"])
    elif "status" in entry:
        test["summary"] = _worse(test["summary"], _status_of(entry.get("status")))


_DIAG_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")


def _json_doc(doc: Any, tests: _Tests, meta: Dict[str, Any], nested: bool = False,
              nested_candidate: bool = False) -> bool:
    """Walk one decoded document (fixed depth). True when it looks like dcgmi diag output.

    *nested_candidate*: the object was decoded from a later ``{`` of the output, which may be
    an inner object of a truncated document; only a ``DCGM ...`` wrapper counts then.
    """
    if not isinstance(doc, Mapping):
        return False
    recognised = False
    iterations = doc.get("iterations")
    if isinstance(iterations, list) and not nested:
        for item in iterations[:64]:
            recognised = _json_doc(item, tests, meta, nested=True, nested_candidate=True) or recognised
    root: Any = None
    for key in _DIAG_KEYS:
        if isinstance(doc.get(key), Mapping):
            root = doc[key]
            break
    if root is None and "test_categories" in doc and not nested_candidate:
        root = doc
    if root is None:
        return recognised
    for source in (root, doc):
        error = source.get("runtime_error")
        if isinstance(error, str) and error.strip():
            meta.setdefault("runtime_error", _clip(error))
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
    for key, where in (("version", root.get("version")), ("version", metadata.get("version")),
                       ("driver_version", metadata.get("Driver Version Detected")),
                       ("driver_version", doc.get("Driver Version Detected"))):
        if isinstance(where, str) and where.strip():
            meta.setdefault(key, _clip(where))
    categories = root.get("test_categories")
    if isinstance(categories, list):
        for category in categories[:64]:
            if isinstance(category, Mapping) and isinstance(category.get("tests"), list):
                for entry in category["tests"][:MAX_TESTS]:
                    _json_test(tests, entry, category.get("category"))
    return True


def _json_starts(text: str) -> List[int]:
    starts: List[int] = []
    first = text.find("{")
    if first >= 0:
        starts.append(first)
    for match in re.finditer(r"(?m)^[ \t]*\{", text):
        pos = match.end() - 1
        if pos not in starts:
            starts.append(pos)
        if len(starts) >= _MAX_JSON_STARTS:
            break
    return starts


_ROW_RE = re.compile(r"^\s*\|(?P<name>[^|]*)\|(?P<value>[^|]*)\|\s*$")
_SECTION_RE = re.compile(r"^\s*[|+]-{3,}\s+(?P<title>[A-Za-z][A-Za-z /]{0,40}?)\s+-{2,}[+|]")
_V3_RE = re.compile(r"^(?P<st>pass|fail|warn|skip)(?:\s*-\s*(?:(?P<all>all)|gpus?\s*:\s*(?P<ids>[\d,\s]{0,400})))?$",
                    re.IGNORECASE)
_V4_RE = re.compile(r"^(?P<grp>[A-Za-z][A-Za-z_]{0,15}(?: [A-Za-z][A-Za-z_]{0,15})?)\s?(?P<id>\d{1,6})\s*:\s*"
                    r"(?P<st>[A-Za-z ]{0,20})$")
_WRAP = 45  # DATA_INFO_TAG_LEN in dcgmi/Diag.cpp: message rows are cut at this width
_MSG_RE = re.compile(r"^(?P<kind>warning|info)(?:\s*:\s*(?P<ent>[A-Za-z][A-Za-z_ ]{0,20}?\s?\d{1,6}))?$",
                     re.IGNORECASE)


def _parse_text(text: str, problems: List[str]) -> Tuple[List[Dict[str, Any]], bool]:
    """dcgmi diag tables (3.x ``Pass - All`` / ``Fail - GPU: 0`` rows, 4.x ``GPU0: Pass`` rows)."""
    tests = _Tests()
    section: Optional[str] = None
    current: Optional[Dict[str, Any]] = None
    last_message: Optional[Dict[str, Any]] = None
    last_chunk = 0  # length of the last message row as dcgmi cut it
    block_summary: Optional[str] = None  # status on the current test's summary row
    for number, line in enumerate(text.splitlines()):
        if number >= MAX_LINES:
            problems.append(f"text output longer than {MAX_LINES} lines: rest ignored")
            break
        section_match = _SECTION_RE.match(line)
        if section_match:
            section = section_match.group("title").strip()
            current = last_message = None
            continue
        row = _ROW_RE.match(line)
        if not row:
            stripped = line.strip()
            if stripped.lower().startswith("error") and len(problems) < MAX_PROBLEMS:
                problems.append(_clip(stripped))
            continue
        name, value = row.group("name").strip(), row.group("value").strip()
        if section is not None and section.lower() == "metadata":
            continue
        if name.lower() == "diagnostic" and value.lower() == "result":
            continue
        msg = _MSG_RE.match(name)
        if msg:
            entity = msg.group("ent")
            last_message = (tests.message(current, entity.replace(" ", "") if entity else None, value)
                            if current is not None else None)
            last_chunk = len(value) + (1 if row.group("value").startswith("  ") else 0)
            continue
        if not name:
            v4 = _V4_RE.match(value)
            v3 = _V3_RE.match(value)
            if current is not None and v4:
                label = f"{v4.group('grp').strip()}{int(v4.group('id'))}"
                status = _status_of(v4.group("st"))
                if status == FAIL and block_summary == WARN:
                    status = WARN  # dcgmi 4.x prints a warned entity as "Fail" under a "Warn" summary row
                current["entities"][label] = _worse(current["entities"].get(label), status)
                last_message = None
            elif current is not None and v3:
                _apply_v3(current, v3)
                last_message = None
            elif last_message is not None and value:
                # DCGM cuts messages into 45-character rows, mid-word; a shorter row lost a
                # trailing space to the table padding, a row printed after two spaces began with one.
                lead = row.group("value").startswith("  ")
                joiner = "" if last_chunk >= _WRAP and not lead else " "
                last_message["message"] = _clip(last_message["message"] + joiner + value)
                last_chunk = len(value) + (1 if lead else 0)
            elif current is not None and value and not value.lower().startswith("code:"):
                current["summary"] = _worse(current["summary"], UNKNOWN)  # a status row kiln cannot read
            continue
        v3 = _V3_RE.match(value)
        if v3:
            current = tests.get(name, section)
            last_message = None
            block_summary = _status_of(v3.group("st")) if v3.group("ids") is None else None
            if current is not None:
                _apply_v3(current, v3)
        elif section is not None and value:
            # a named row in a test section whose result kiln cannot read: never a pass
            current = tests.get(name, section)
            last_message = None
            if current is not None:
                current["summary"] = _worse(current["summary"], UNKNOWN)
        else:
            current = last_message = None
    return tests.finish(), tests.dropped > 0


def _apply_v3(test: Dict[str, Any], match: "re.Match[str]") -> None:
    status = _status_of(match.group("st"))
    ids = match.group("ids")
    numbers = [p.strip() for p in (ids or "").split(",") if p.strip()]
    if numbers and all(p.isdigit() and len(p) <= 6 for p in numbers):
        for p in numbers[:MAX_RESULTS]:
            label = f"GPU{int(p)}"
            test["entities"][label] = _worse(test["entities"].get(label), status)
    elif ids is not None:
        test["summary"] = _worse(test["summary"], UNKNOWN)  # "Fail - GPU: x": unreadable GPU list
    else:
        test["summary"] = _worse(test["summary"], status)


def _as_text(value: Any, what: str, problems: List[str]) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        problems.append(f"{what} is {type(value).__name__}, not text")
        return ""
    if len(value) > MAX_INPUT_CHARS:
        problems.append(f"{what} longer than {MAX_INPUT_CHARS} characters: cut there")
        value = value[:MAX_INPUT_CHARS]
    return value


def parse_dcgm_diag(stdout: Any, stderr: Any = "") -> Dict[str, Any]:
    """Parse ``dcgmi diag [-j]`` output; never raises.

    JSON first (DCGM 4.x ``{"DCGM Diagnostic": {"test_categories": [...]}, "entity_groups",
    "metadata"}`` with per-entity ``results`` and a ``test_summary``; DCGM 3.x
    ``{"DCGM GPU Diagnostic": {"test_categories": [...], "version"}}`` with ``gpu_ids``;
    leading non-JSON lines and ``null`` test entries are tolerated), then the text table.

    Returns ``{format: json|text|none, tests: [{name, key, category, status, gpus, detail,
    warnings}], problems: [...], version, driver_version, runtime_error}``. A test's status is
    PASS, FAIL, WARN or SKIP (UNKNOWN for a status word kiln does not know); its ``gpus``
    maps ``GPU0``-style entity labels to their status. dcgmi 4.x prints a warning as "Fail"
    in JSON, so a 4.x JSON warning parses as FAIL.
    """
    problems: List[str] = []
    meta: Dict[str, Any] = {}
    try:
        out = _as_text(stdout, "stdout", problems)
        err = _as_text(stderr, "stderr", problems)
        tests = _Tests()
        recognised = False
        looks_json = '"test_categories"' in out or '"DCGM' in out or '"runtime_error"' in out
        decoder = json.JSONDecoder()
        for number, start in enumerate(_json_starts(out)):
            try:
                doc, _end = decoder.raw_decode(out, start)
            except (ValueError, RecursionError):
                continue
            if number and not (isinstance(doc, Mapping) and (any(k in doc for k in _DIAG_KEYS) or "iterations" in doc)):
                continue  # an inner object of a truncated document, not a result
            if _json_doc(doc, tests, meta, nested_candidate=number > 0):
                recognised = True
                break
        if recognised:
            parsed = tests.finish()
            if tests.dropped:
                problems.append(f"more than {MAX_TESTS} tests: the rest ignored")
            if meta.get("runtime_error"):
                problems.append("runtime_error: " + meta["runtime_error"])
            fmt = "json"
        else:
            if looks_json:
                problems.append("JSON output could not be decoded (truncated or malformed)")
            parsed, dropped = _parse_text(out, problems)
            if dropped:
                problems.append(f"more than {MAX_TESTS} tests: the rest ignored")
            fmt = "text" if parsed else "none"
            if not parsed:
                first = next((line.strip() for line in out.splitlines() if line.strip()), "")
                problems.append(("unrecognised output: " + _clip(first)) if first else "no output")
        for line in err.splitlines()[:5]:
            if line.strip() and len(problems) < MAX_PROBLEMS:
                problems.append("stderr: " + _clip(line))
        return {"format": fmt, "tests": parsed, "problems": problems[:MAX_PROBLEMS],
                "version": meta.get("version"), "driver_version": meta.get("driver_version"),
                "runtime_error": meta.get("runtime_error")}
    except Exception as exc:  # noqa: BLE001 - documented: never raises on any input
        problems.append(f"parser error: {type(exc).__name__}")
        return {"format": "none", "tests": [], "problems": problems[:MAX_PROBLEMS],
                "version": None, "driver_version": None, "runtime_error": None}


# --------------------------------------------------------------------------- dcgm check


def _rc_text(rc: Any) -> str:
    if _is_int(rc):
        meaning = DCGM_RC.get(rc)
        return f"rc {rc}" + (f" ({meaning})" if meaning and rc else "")
    return "rc unknown" if rc is None else f"rc {_show(rc)} (not an integer)"


def _stress_spec(health: Optional[Mapping[str, Any]], level: int, require_stress: bool) -> Tuple[List[str], str]:
    if not require_stress:
        return [], "any"
    data = load_health() if health is None else _validate(health, "health rules")
    spec = data["dcgm"]["levels"].get(level)
    if not spec or not spec["stress"]:
        raise kiln_verdict.KilnConfigError(
            f"dcgm.diag.r{level}: require_stress needs dcgm.levels.{level}.stress in the health rules")
    return list(spec["stress"]), data["dcgm"].get("stress_rule", "any")


def dcgm_check(level: int, result: Optional[Mapping[str, Any]], gpu_present: bool, require_stress: bool = False,
               artifact: Optional[str] = None, *, health: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Verdict for one ``dcgmi diag -r <level> [-j]`` run: check ``dcgm.diag.r<level>``.

    *result* is ``{present, rc, stdout, stderr}`` (``timed_out`` optional). In order:
    no GPU -> SKIP; dcgmi missing -> INCOMPLETE; any parsed test Fail -> FAIL (whatever
    the rc); nothing parsed, rc not 0, a timeout, an unknown status, every test skipped, or
    (with *require_stress*) none of the level's stress tests run (``dcgm.levels`` in
    *health*, default: :func:`load_health`) -> INCOMPLETE; a Warn -> WARN; else PASS.
    The record carries ``tests`` (name, key, category, status per test) and ``problems``.
    """
    if not _is_int(level):
        raise kiln_verdict.KilnConfigError(f"DCGM diag level must be an integer, not {level!r}")
    cid = f"dcgm.diag.r{level}"
    stress, stress_rule = _stress_spec(health, level, bool(require_stress))
    if not gpu_present:
        return kiln_verdict.make_check(cid, SKIP, detail="no NVIDIA GPU on this node", artifact=artifact)
    if not isinstance(result, Mapping) or not result.get("present"):
        return kiln_verdict.make_check(cid, INCOMPLETE, detail="dcgmi not installed", artifact=artifact)
    rc = result.get("rc")
    parsed = parse_dcgm_diag(result.get("stdout"), result.get("stderr"))
    tests = parsed["tests"]
    summary = [{"name": t["name"], "key": t["key"], "category": t["category"], "status": t["status"]}
               for t in tests]
    fields: Dict[str, Any] = {"artifact": artifact, "tests": summary, "problems": parsed["problems"],
                              "parse_format": parsed["format"], "rc": rc if _is_int(rc) else None,
                              "level": level, "require_stress": bool(require_stress),
                              "dcgm_version": parsed["version"]}
    head = f"dcgmi diag -r {level}"

    failed = [t for t in tests if t["status"] == FAIL]
    if failed:
        parts = []
        for t in failed[:12]:
            bad = [g for g, s in t["gpus"].items() if s == FAIL]
            parts.append(t["name"] + (f" [{', '.join(bad[:8])}]" if bad else "") +
                         (f" ({t['detail']})" if t["detail"] else ""))
        detail = f"{head} {_rc_text(rc)}: failed: " + "; ".join(parts)
        return kiln_verdict.make_check(cid, FAIL, detail=detail, **fields)

    reasons: List[str] = []
    if not tests:
        why = parsed.get("runtime_error") or "; ".join(parsed["problems"][:3]) or "no test result found"
        reasons.append(f"output unparseable ({why})")
    if tests and parsed.get("runtime_error"):
        reasons.append("dcgmi reported a runtime error: " + parsed["runtime_error"])
    if result.get("timed_out"):
        reasons.append("timed out")
    if not (_is_int(rc) and rc == 0):
        reasons.append(_rc_text(rc) + (" although no test reported Fail" if tests else ""))
    unknown = [t["name"] for t in tests if t["status"] == UNKNOWN]
    if unknown:
        reasons.append("unrecognised status for " + ", ".join(unknown[:12]))
    if tests and all(t["status"] == SKIP for t in tests):
        reasons.append("every test was skipped")
    stress_state: Dict[str, str] = {}
    if require_stress:
        by_key: Dict[str, str] = {}
        for t in tests:
            by_key[t["key"]] = _worse(by_key.get(t["key"]), t["status"])
        for key in stress:
            state = by_key.get(key)
            stress_state[key] = "absent" if state is None else ("skipped" if state == SKIP else state)
        ran = [k for k, s in stress_state.items() if s in (PASS, WARN)]
        missing = [f"{k} ({s})" for k, s in stress_state.items() if s in ("absent", "skipped")]
        if tests and (not ran if stress_rule == "any" else missing):
            reasons.append(("no stress/hardware test ran: " if not ran else "stress/hardware tests not run: ")
                           + ", ".join(missing))
        fields["stress_tests"] = stress_state
    listing = ", ".join(f"{t['name']} {t['status']}" for t in tests[:40])
    if reasons:
        detail = f"{head}: " + "; ".join(reasons) + (f" [{listing}]" if listing else "")
        return kiln_verdict.make_check(cid, INCOMPLETE, detail=detail, **fields)
    warned = [t for t in tests if t["status"] == WARN]
    if warned:
        detail = f"{head}: warnings: " + "; ".join(
            t["name"] + (f" ({t['detail']})" if t["detail"] else "") for t in warned[:12]) + f" [{listing}]"
        return kiln_verdict.make_check(cid, WARN, detail=detail, **fields)
    skipped = [t["name"] for t in tests if t["status"] == SKIP]
    partial = [f"{t['name']} [{', '.join(g for g, s in t['gpus'].items() if s == SKIP)}]"
               for t in tests if t["status"] == PASS and SKIP in t["gpus"].values()]
    detail = f"{head}: {sum(1 for t in tests if t['status'] == PASS)} of {len(tests)} tests passed [{listing}]"
    if skipped:
        detail += "; skipped: " + ", ".join(skipped[:12])
    if partial:
        detail += "; skipped on some GPUs: " + ", ".join(partial[:12])
    return kiln_verdict.make_check(cid, PASS, detail=detail, **fields)
