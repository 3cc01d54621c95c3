# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Burn-in health checks of GPU memory: ECC, row remapping and page retirement.

Pure functions, standard library only. Importable as ``kiln.health.memory`` and as
``ansible.module_utils.kiln.health.memory``. The rules come from ``kiln_health.load_health``
(``data/burnin_health.yml``); the facts from ``kiln_hwfacts.summarize`` (the ``kiln_gpu`` fact).
A counter is judged only when it is a non-negative integer no larger than
``limits.counter_max``; anything else makes the check INCOMPLETE, never PASS.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..facts import hardware as kiln_hwfacts
from .. import verdict as kiln_verdict
from .rules import (
    CHECK_ECC, CHECK_REMAP, CHECK_RETIRED, MEMORY_CHECKS, NO_SMI, is_int, memory_rules, show,
)

__all__ = ["memory_checks"]

PASS, WARN, FAIL, INCOMPLETE, SKIP = (kiln_verdict.PASS, kiln_verdict.WARN, kiln_verdict.FAIL,
                                      kiln_verdict.INCOMPLETE, kiln_verdict.SKIP)


def plausible_count(value: Any, limit: int) -> Tuple[Optional[int], Optional[str]]:
    """(value, None) for a plausible counter, else (None, why it cannot be judged)."""
    if value is None:
        return None, "not reported"
    if not is_int(value):
        return None, f"{show(value)} is not an integer count"
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
    return None, f"{show(value)} is not a yes/no value"


def _label(gpu: Any, position: int) -> str:
    index = gpu.get("index") if isinstance(gpu, Mapping) else None
    if is_int(index) and 0 <= index < 1_000_000:
        return f"GPU{index}"
    return f"GPU#{position}"


def _arch(gpu: Mapping[str, Any]) -> Optional[str]:
    arch = gpu.get("architecture")
    return arch.strip() if isinstance(arch, str) and arch.strip() else None


def _scheme(gpu: Mapping[str, Any]) -> Optional[str]:
    """row_remap / page_retirement / None, from the data first (kiln_hwfacts.memory_repair)."""
    try:
        scheme = kiln_hwfacts.memory_repair(_arch(gpu), gpu.get("remapped_rows"), gpu.get("retired_pages"))
    except Exception:  # noqa: BLE001 - hostile facts must not escape as an exception
        scheme = None
    if scheme is None and gpu.get("memory_repair") in (kiln_hwfacts.ROW_REMAP, kiln_hwfacts.PAGE_RETIREMENT):
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
        return _gpu_result(label, INCOMPLETE, [f"{label}: ECC mode {show(mode)} but no uncorrectable "
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
        value, problem = plausible_count(raw[key], limit)
        if problem is not None:
            if raw[key] is None and key != "volatile_uncorrectable" and _scheme(gpu) == kiln_hwfacts.PAGE_RETIREMENT \
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
            if is_int(rows.get(name)):
                values[name] = rows[name]
        return _gpu_result(label, kiln_verdict.worst(statuses) or INCOMPLETE, reasons, values)
    if supported not in (None, False):
        return _gpu_result(label, INCOMPLETE, [f"{label} remapped_rows.supported {show(supported)} "
                                               "is not a yes/no value"])
    if _no_ecc(gpu):
        return _gpu_result(label, SKIP, [f"{label}: ECC not supported or not reported on this board"])
    scheme = _scheme(gpu)
    if scheme == kiln_hwfacts.PAGE_RETIREMENT:
        return _gpu_result(label, SKIP, [f"{label}: no row remapping on {arch or 'pre-Ampere'} GPUs "
                                         "(page retirement applies)"])
    if scheme == kiln_hwfacts.ROW_REMAP:
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
    if scheme == kiln_hwfacts.ROW_REMAP:
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
        value, problem = plausible_count(pages.get(name), limit)
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

    *gpu_facts* is ``ansible_facts['kiln_gpu']`` (kiln_hwfacts.summarize); *thresholds* the
    mapping from ``kiln_health.load_health`` (or its ``memory`` section); *smi* whether the facts
    come from nvidia-smi (False: every check SKIPs). Raises KilnConfigError only for bad
    *thresholds*; hostile facts give INCOMPLETE, never an exception or a PASS.
    """
    rules, limit = memory_rules(thresholds)
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
        found = [r["values"][k] for r in results for k in keys if is_int(r["values"].get(k))]
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

