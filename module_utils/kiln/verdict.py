# -*- coding: utf-8 -*-
"""Burn-in verdicts: busbw metric, floors, per-check and aggregate status, exit codes.

Pure functions; standard library plus PyYAML (shipped with Ansible) for the
floors file.  Importable as ``kiln.verdict`` and as
``ansible.module_utils.kiln.verdict``.

Status values, in increasing severity: ``SKIP`` < ``PASS`` < ``WARN`` <
``INCOMPLETE`` < ``FAIL``.  Exit codes (Nagios-compatible plus 4):
0 PASS, 1 WARN, 2 FAIL, 3 INCOMPLETE, 4 configuration error.

Rules for one all_reduce check (docs/burnin-format.md, "Verdict rules"):

1. Integrity, never forgiven: any ``#wrong > 0``, ``Out of bounds values``
   FAILED (or a non-zero count) or a ``Test ... failure`` line -> FAIL.
2. Exit and timeout: a non-zero exit or a timeout (flag or nccl-tests rc 4)
   -> FAIL when the run had produced result rows (it broke under load),
   INCOMPLETE when it produced none (tool missing, launcher or MPI error
   before any measurement).
3. Output: unparseable (no rows) or truncated (no footer) -> INCOMPLETE.
4. Metric: no size >= ``min_size`` -> INCOMPLETE.  Otherwise
   value < floor -> FAIL; value < floor * (1 + warn_band) -> WARN; else PASS.

The metric is busbw at the largest sizes: for each size the lower of the
out-of-place and in-place busbw, then the median (or min) over the ``top_n``
largest sizes >= ``min_size``.  The "Avg bus bandwidth" line is never used.
Several runs of the same check (repeats) combine by the median of their
metrics; an integrity failure in any run fails the check.
"""

from __future__ import annotations

import copy
import math
import re
import statistics
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from .nccl.parse import STATUS_OK, STATUS_TRUNCATED, parse_size
from .datafiles import data_path

__all__ = [
    "EXIT_CODES",
    "EXIT_CONFIG_ERROR",
    "FAIL",
    "INCOMPLETE",
    "KilnConfigError",
    "PASS",
    "SKIP",
    "STATUSES",
    "WARN",
    "aggregate_node",
    "aggregate_overall",
    "busbw_metric",
    "default_floors_path",
    "exit_code",
    "judge_nccl",
    "load_floors",
    "lookup_floor",
    "make_check",
    "sku_from_gpu_name",
    "status_from_exit",
    "worst",
]

PASS = "PASS"
WARN = "WARN"
FAIL = "FAIL"
INCOMPLETE = "INCOMPLETE"
SKIP = "SKIP"
#: Statuses in increasing severity.
STATUSES = (SKIP, PASS, WARN, INCOMPLETE, FAIL)
_SEVERITY = {status: rank for rank, status in enumerate(STATUSES)}
#: Process exit code per status (SKIP never decides an exit code on its own).
EXIT_CODES = {PASS: 0, WARN: 1, FAIL: 2, INCOMPLETE: 3}
EXIT_CONFIG_ERROR = 4
_REDUCERS = ("median", "min")
_CONFIDENCES = ("DERIVED", "REPORTED", "UNVERIFIED", "SITE", "BASELINE")
#: nccl-tests testResult_t values (src/common.h) that mean a timeout.
NCCL_TESTS_RC_TIMEOUT = 4


class KilnConfigError(ValueError):
    """Configuration problem (unknown SKU/test, missing floor, bad option): exit code 4."""


def finite_number(value: Any, what: str, positive: bool = True) -> float:
    """*value* as a finite float (> 0 with *positive*), else KilnConfigError naming *what*."""
    if value is None or isinstance(value, bool):
        raise KilnConfigError(f"{what} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise KilnConfigError(f"{what} must be a number, got {str(value)[:40]!r}") from None
    if not math.isfinite(number) or (positive and number <= 0) or (not positive and number < 0):
        raise KilnConfigError(f"{what} must be a finite {'positive' if positive else 'non-negative'} number, "
                              f"got {str(value)[:40]!r}")
    return number


def is_finite(value: Any) -> bool:
    """True for a finite int/float (bool excluded)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def exit_code(status: str) -> int:
    """Map a status to the wrapper's exit code (SKIP alone counts as INCOMPLETE)."""
    if status == SKIP:
        return EXIT_CODES[INCOMPLETE]
    try:
        return EXIT_CODES[status]
    except KeyError:
        raise KilnConfigError(f"unknown status {status!r}; expected one of {', '.join(STATUSES)}") from None


def status_from_exit(code: int) -> str:
    """Inverse of :func:`exit_code` for 0-3; anything else is a configuration error."""
    for status, value in EXIT_CODES.items():
        if value == code:
            return status
    raise KilnConfigError(f"exit code {code} has no status")


def worst(statuses: Iterable[str]) -> Optional[str]:
    """Most severe status of *statuses* (None when empty)."""
    found = None
    for status in statuses:
        if status not in _SEVERITY:
            raise KilnConfigError(f"unknown status {status!r}")
        if found is None or _SEVERITY[status] > _SEVERITY[found]:
            found = status
    return found


def make_check(check_id: str, status: str, **fields: Any) -> Dict[str, Any]:
    """Build a check record in the summary.json shape (unset fields are None)."""
    if status not in _SEVERITY:
        raise KilnConfigError(f"unknown status {status!r} for check {check_id}")
    check: Dict[str, Any] = {
        "id": check_id,
        "status": status,
        "metric": None,
        "value": None,
        "floor": None,
        "unit": None,
        "detail": "",
        "artifact": None,
    }
    check.update(fields)
    return check


# --------------------------------------------------------------------------- metric


def busbw_metric(parsed: Mapping[str, Any], min_size: Any = "1G", top_n: int = 3,
                 reducer: str = "median") -> Optional[Dict[str, Any]]:
    """busbw at the largest sizes of one parsed run, or None when no size reaches *min_size*.

    Per size: the lowest busbw across out-of-place, in-place and repeated
    rows of that size.  Then *reducer* (median|min) over the *top_n* largest
    sizes >= *min_size*.
    """
    if reducer not in _REDUCERS:
        raise KilnConfigError(f"reducer must be one of {_REDUCERS}, not {reducer!r}")
    if int(top_n) < 1:
        raise KilnConfigError("top_n must be >= 1")
    minimum = parse_size(min_size)
    per_size: Dict[int, float] = {}
    for row in parsed.get("rows") or []:
        size = row.get("size")
        if size is None or size < minimum:
            continue
        for place in ("out_of_place", "in_place"):
            cell = row.get(place)
            if not cell or not is_finite(cell.get("busbw")) or cell["busbw"] < 0:
                continue
            value = float(cell["busbw"])
            per_size[size] = min(per_size.get(size, value), value)
    if not per_size:
        return None
    sizes = sorted(per_size, reverse=True)[: int(top_n)]
    values = [per_size[s] for s in sizes]
    value = statistics.median(values) if reducer == "median" else min(values)
    return {
        "value": round(value, 4),
        "sizes": sorted(sizes),
        "per_size": {str(s): per_size[s] for s in sorted(sizes)},
        "reducer": reducer,
        "top_n": int(top_n),
        "min_size": minimum,
    }


def _series(parsed: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """busbw per size (out-of-place, in-place) for plotting."""
    series: Dict[int, Dict[str, Any]] = {}
    for row in parsed.get("rows") or []:
        size = row.get("size")
        if not size:
            continue
        point = series.setdefault(size, {"size": size, "busbw_oop": None, "busbw_ip": None})
        for place, key in (("out_of_place", "busbw_oop"), ("in_place", "busbw_ip")):
            cell = row.get(place) or {}
            if cell.get("busbw") is not None:
                old = point[key]
                point[key] = cell["busbw"] if old is None else min(old, cell["busbw"])
    return [series[s] for s in sorted(series)]


def _integrity_problems(parsed: Mapping[str, Any]) -> List[str]:
    problems = []
    wrong = 0
    wrong_sizes = []
    for row in parsed.get("rows") or []:
        for place in ("out_of_place", "in_place"):
            cell = row.get(place) or {}
            if is_finite(cell.get("wrong")) and cell["wrong"] > 0:
                wrong += int(cell["wrong"])
                wrong_sizes.append(row.get("size"))
    for row in parsed.get("rejected_rows") or []:  # corruption evidence in a row refused as a measurement
        if isinstance(row, Mapping) and is_finite(row.get("wrong")) and row["wrong"] > 0:
            wrong += int(row["wrong"])
            wrong_sizes.append(row.get("size"))
    flagged = [row.get("size") for row in parsed.get("rows") or [] for place in ("out_of_place", "in_place")
               if isinstance(row.get(place), Mapping) and row[place].get("error_flag")]
    if flagged:
        problems.append("error column flagged (*) at size(s) " + ", ".join(str(s) for s in flagged))
    if wrong:
        sizes = ", ".join(str(s) for s in sorted(set(wrong_sizes), key=str))
        problems.append(f"#wrong = {wrong} (data corruption) at size(s) {sizes}")
    oob = parsed.get("out_of_bounds")
    if oob and (not oob.get("ok") or oob.get("count")):
        problems.append(f"Out of bounds values: {oob.get('count')} FAILED")
    for line in parsed.get("failures") or []:
        problems.append(f"failure reported: {line.strip()[:160]}")
    return problems


def judge_nccl(runs: Sequence[Mapping[str, Any]], floor: Any, *, warn_band: Optional[float] = None,
               min_size: Any = None, top_n: Optional[int] = None, reducer: Optional[str] = None,
               check_id: str = "nccl.all_reduce", artifact: Optional[str] = None,
               floor_source: Optional[str] = None, floor_confidence: Optional[str] = None,
               unit: str = "GB/s") -> Dict[str, Any]:
    """Verdict for one all_reduce check from one or more runs.

    Each run is a mapping with ``parsed`` (a kiln_nccl result or None),
    ``exit_code`` (int or None when unknown) and ``timed_out`` (bool).
    *floor* is the busbw floor in GB/s (a floor dict from :func:`lookup_floor`
    is accepted too; its metric options then apply unless given here).
    Returns a check record (see :func:`make_check`) with ``reasons``.
    """
    spec: Mapping[str, Any] = floor if isinstance(floor, Mapping) else {}
    if spec:
        floor = spec.get("value")
        floor_source = floor_source or spec.get("source")
        floor_confidence = floor_confidence or spec.get("confidence")
        unit = spec.get("unit", unit)
    warn_band = finite_number(spec.get("warn_band", 0.05) if warn_band is None else warn_band,
                              f"{check_id}: warn_band", positive=False)
    min_size = spec.get("min_size", "1G") if min_size is None else min_size
    top_n = int(finite_number(spec.get("top_n", 3) if top_n is None else top_n, f"{check_id}: top_n"))
    reducer = str(spec.get("reducer", "median") if reducer is None else reducer)
    relative = bool(spec.get("relative_only")) and floor is None
    floor = None if relative else finite_number(floor, f"{check_id}: the busbw floor")
    if not runs:
        raise KilnConfigError(f"{check_id}: no runs to judge")

    reasons: List[str] = []
    hard_fail = False
    incomplete = False
    values: List[float] = []
    metrics: List[Optional[Dict[str, Any]]] = []
    series: List[Dict[str, Any]] = []
    for index, run in enumerate(runs, start=1):
        tag = f"run {index}: " if len(runs) > 1 else ""
        parsed = run.get("parsed") or {}
        rows = parsed.get("rows") or []
        rc = run.get("exit_code")
        timed_out = bool(run.get("timed_out")) or rc == NCCL_TESTS_RC_TIMEOUT
        problems = _integrity_problems(parsed)
        if problems:
            hard_fail = True
            reasons.extend(tag + p for p in problems)
        if timed_out:
            if rows:
                hard_fail = True
                reasons.append(tag + "timed out after result rows were printed (hang under load)")
            else:
                incomplete = True
                reasons.append(tag + "timed out before any result row")
        elif rc not in (None, 0):
            if rows:
                hard_fail = True
                reasons.append(tag + f"exit code {rc} after result rows were printed")
            else:
                incomplete = True
                reasons.append(tag + f"exit code {rc} before any result row (tool, launcher or MPI error)")
        status = parsed.get("status")
        if not parsed or not rows:
            incomplete = True
            reasons.append(tag + "output unparseable: no result rows")
            metrics.append(None)
            continue
        if status == STATUS_TRUNCATED:
            incomplete = True
            reasons.append(tag + "output truncated: " + "; ".join(parsed.get("problems") or ["no footer"]))
        elif status != STATUS_OK:
            incomplete = True
            reasons.append(tag + f"output not usable ({status}): " + "; ".join(
                str(p) for p in (parsed.get("problems") or [])[:3]))
        if parsed.get("data_check") is False:
            incomplete = True
            reasons.append(tag + "data check disabled (#wrong N/A, nccl-tests -c 0): results unverified")
        metric = busbw_metric(parsed, min_size=min_size, top_n=top_n, reducer=reducer)
        metrics.append(metric)
        if not series:
            series = _series(parsed)
        if metric is None:
            incomplete = True
            reasons.append(tag + f"no message size >= {parse_size(min_size)} B: sweep too small to judge")
        else:
            values.append(metric["value"])

    value = round(statistics.median(values), 4) if values else None
    warn_below = round(floor * (1.0 + warn_band), 4) if floor is not None else None
    if hard_fail:
        status = FAIL
    elif incomplete or value is None:
        status = INCOMPLETE
    elif floor is None:
        status = WARN
        reasons.append(f"busbw {value:g} {unit}: no absolute floor for this GPU model; judged against the run's "
                       "fleet median and the node's own baseline only")
    elif value < floor:
        status = FAIL
        reasons.append(f"busbw {value:g} < floor {floor:g} {unit}")
    elif value < warn_below:
        status = WARN
        reasons.append(f"busbw {value:g} within {warn_band:.0%} above floor {floor:g} {unit}")
    else:
        status = PASS
    if value is not None and floor is not None and status in (FAIL, INCOMPLETE) \
            and not any("busbw" in r for r in reasons) and value < floor:
        reasons.append(f"busbw {value:g} < floor {floor:g} {unit}")
    first = next((m for m in metrics if m), None)
    metric_name = "busbw"
    if first:
        metric_name = f"busbw_{first['reducer']}_top{first['top_n']}_ge{_human_size(first['min_size'])}"
    check = make_check(
        check_id,
        status,
        metric=metric_name,
        value=value,
        floor=floor,
        unit=unit,
        warn_below=warn_below,
        relative_only=relative,
        floor_source=floor_source,
        floor_confidence=floor_confidence,
        artifact=artifact,
        detail="; ".join(reasons) if reasons else f"busbw {value:g} {unit} >= {warn_below:g}",
        reasons=reasons,
        runs=len(runs),
        run_values=values,
        sizes=first["sizes"] if first else [],
        series=series,
    )
    return check


def _human_size(size: int) -> str:
    for suffix, factor in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{suffix}"
    return f"{size}B"


# --------------------------------------------------------------------------- aggregation


def aggregate_node(checks: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """Node status = worst check; only SKIPs (or no checks) -> INCOMPLETE."""
    statuses = [c["status"] for c in checks]
    judged = [s for s in statuses if s != SKIP]
    status = worst(judged) if judged else INCOMPLETE
    return {"status": status, "exit": exit_code(status)}


def aggregate_overall(nodes: Mapping[str, Mapping[str, Any]],
                      fabric: Sequence[Mapping[str, Any]] = ()) -> Dict[str, Any]:
    """Overall verdict from node records (``{"status": ...}``) and fabric checks.

    Raises KilnConfigError on an empty scope (no nodes): exit code 4.
    """
    if not nodes:
        raise KilnConfigError("empty burn-in scope: no nodes")
    counts = {"passed": 0, "warned": 0, "failed": 0, "incomplete": 0}
    key = {PASS: "passed", WARN: "warned", FAIL: "failed", INCOMPLETE: "incomplete", SKIP: "incomplete"}
    for record in nodes.values():
        counts[key[record["status"]]] += 1
    statuses = [r["status"] for r in nodes.values()]
    statuses += [c["status"] for c in fabric if c.get("status") != SKIP]
    status = worst(statuses) or INCOMPLETE
    if status == SKIP:
        status = INCOMPLETE
    result: Dict[str, Any] = {"status": status, "exit": exit_code(status), "nodes": len(nodes)}
    result.update(counts)
    result["fabric_failed"] = sum(1 for c in fabric if c.get("status") == FAIL)
    return result


# --------------------------------------------------------------------------- floors


def default_floors_path() -> str:
    """data/burnin_floors.yml next to this module's repository checkout."""
    return data_path("burnin_floors.yml")


def read_yaml(path: str, what: str, error: type = KilnConfigError) -> Any:
    """One YAML data file of the burn-in (floors, fabric rules); *error* (a KilnConfigError) names the
    file when it cannot be read or is not YAML -- never a bare YAMLError traceback."""
    import yaml  # PyYAML ships with Ansible; imported lazily so the parsers stay stdlib-only

    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except OSError as exc:
        raise error(f"cannot read {what} file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise error(f"{path}: the {what} file is not valid YAML: {str(exc)[:200]}") from exc


def load_floors(path: str) -> Dict[str, Any]:
    """Load and sanity-check the floors file (YAML) at *path* (the module's floors_path; on the
    controller and in tests :func:`default_floors_path`)."""
    if not path or not isinstance(path, str):
        raise KilnConfigError(f"load_floors: the floors file's path is required, not {path!r}")
    data = read_yaml(path, "floors")
    if not isinstance(data, dict) or not isinstance(data.get("skus"), dict):
        raise KilnConfigError(f"{path}: not a kiln floors file (no 'skus' mapping)")
    for sku, spec in data["skus"].items():
        for fabric, tests in ((spec or {}).get("floors") or {}).items():
            for test, entry in (tests or {}).items():
                if not isinstance(entry, dict) or "value" not in entry:
                    raise KilnConfigError(f"{path}: {sku}/{fabric}/{test} has no value")
                if entry.get("confidence") not in _CONFIDENCES:
                    raise KilnConfigError(f"{path}: {sku}/{fabric}/{test} has confidence {entry.get('confidence')!r}")
                if not entry.get("source"):
                    raise KilnConfigError(f"{path}: {sku}/{fabric}/{test} has no source")
    return data


def _deep_merge(base: Dict[str, Any], override: Mapping[str, Any]) -> Dict[str, Any]:
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _normalise_overrides(overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """Accept the data-file shape, plus scalars (``two_node_ring: 360``) and ``"sku/fabric/test": 360`` keys."""
    result: Dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(key, str) and key.count("/") == 2:
            sku, fabric, test = key.split("/")
            entry = value if isinstance(value, Mapping) else {"value": value}
            _deep_merge(result, {"skus": {sku: {"floors": {fabric: {test: dict(entry)}}}}})
        else:
            _deep_merge(result, {key: value})
    for sku in (result.get("skus") or {}).values():
        for fabric, tests in list(((sku or {}).get("floors") or {}).items()):
            for test, entry in list((tests or {}).items()):
                if not isinstance(entry, Mapping):
                    entry = {"value": entry}
                entry = dict(entry)
                entry.setdefault("confidence", "SITE")
                entry.setdefault("source", "site override (group_vars burnin_floor_overrides)")
                tests[test] = entry
    return result


def lookup_floor(floors: Mapping[str, Any], sku: str, fabric: str, test: str,
                 overrides: Optional[Mapping[str, Any]] = None,
                 baseline: Optional[float] = None) -> Dict[str, Any]:
    """Floor and metric options for SKU x fabric x test, overrides merged over the data.

    Looks up ``skus.<sku>.floors.<fabric>.<test>``, then ``...floors.any.<test>``.
    With a measured *baseline* (same test and scale) the floor becomes
    ``baseline * baseline_factor`` (confidence BASELINE).  Raises
    KilnConfigError for an unknown SKU or test, or a missing floor.
    """
    data = copy.deepcopy(dict(floors))
    if overrides:
        _deep_merge(data, _normalise_overrides(overrides))
    skus = data.get("skus") or {}
    if sku not in skus:
        raise KilnConfigError(f"unknown GPU SKU {sku!r} in floors; known: {', '.join(sorted(skus))}")
    if test not in (data.get("tests") or {}):
        raise KilnConfigError(f"unknown burn-in test {test!r}; known: {', '.join(sorted(data.get('tests') or {}))}")
    spec = skus[sku] or {}
    table = spec.get("floors") or {}
    entry = (table.get(fabric) or {}).get(test)
    used_fabric = fabric
    if entry is None:
        entry = (table.get("any") or {}).get(test)
        used_fabric = "any"
    options = dict(data.get("defaults") or {})
    options.update(spec.get("defaults") or {})
    if entry is None and spec.get("relative_only"):
        # A GPU model kiln knows but has no published figure for: judged
        # against the run's fleet median and the node's own baseline, with a
        # WARN saying no absolute floor exists.
        entry = {"value": None, "source": spec.get("source") or "no absolute floor: relative rules only",
                 "confidence": spec.get("confidence") or "UNVERIFIED"}
        used_fabric = fabric
    if entry is None:
        raise KilnConfigError(
            f"no floor for {sku}/{fabric}/{test}: set burnin_floor_overrides['{sku}/{fabric}/{test}'] in group_vars"
        )
    options.update({k: v for k, v in entry.items() if k not in ("value", "source", "confidence")})
    value = entry.get("value")
    source = entry.get("source")
    confidence = entry.get("confidence")
    where = f"floor for {sku}/{used_fabric}/{test}"
    if baseline is not None:
        factor = finite_number(options.get("baseline_factor", 0.9), f"{where}: baseline_factor")
        value = round(finite_number(baseline, f"{where}: baseline") * factor, 4)
        source = f"measured baseline {float(baseline):g} x {factor:g}"
        confidence = "BASELINE"
    relative = value is None and bool(spec.get("relative_only"))
    if not relative:
        value = finite_number(value, where)
    reducer = options.get("reducer", "median")
    if reducer not in _REDUCERS:
        raise KilnConfigError(f"reducer must be one of {_REDUCERS}, not {reducer!r}")
    return {
        "key": f"{sku}/{used_fabric}/{test}",
        "value": None if relative else float(value),
        "relative_only": relative,
        "unit": options.get("unit", "GB/s"),
        "source": source,
        "confidence": confidence,
        "warn_band": finite_number(options.get("warn_band", 0.05), f"{where}: warn_band", positive=False),
        "relative_band": finite_number(options.get("relative_band", 0.10), f"{where}: relative_band"),
        "min_size": parse_size(options.get("min_size", "1G")),
        "top_n": int(finite_number(options.get("top_n", 3), f"{where}: top_n")),
        "reducer": reducer,
    }


def sku_from_gpu_name(floors: Mapping[str, Any], gpu_name: str) -> Optional[str]:
    """SKU key whose ``match`` patterns (regular expressions) match *gpu_name*, or None."""
    for sku, spec in (floors.get("skus") or {}).items():
        for pattern in (spec or {}).get("match") or []:
            if re.search(pattern, gpu_name, re.IGNORECASE):
                return sku
    return None
