# -*- coding: utf-8 -*-
"""Per-node burn-in history and baselines, kept on the Ansible controller.

One append-only JSON-lines file per node, ``<state_dir>/<node>.jsonl``: every
burn-in appends one record and nothing is ever rewritten, so the history of a
node survives repairs, version upgrades and re-runs::

  {"run_id": "...", "finished": "...", "mode": "swap", "status": "PASS",
   "fingerprint": {"driver": "...", ...}, "fingerprint_id": "3f2a...",
   "values": {"pair": 0.71, "single_node": null}}

A node's *baseline* for a test is the median of its last *window* passing
(PASS or WARN) values recorded under the same version fingerprint. The first
clean run creates it; after a fingerprint change the old values stop
counting and the report says so. *Known-good* nodes are those whose last
record passed: the swap mode's partners.

Robustness (the history is read on every burn-in; a damaged file must never
stop one, nor make a node look better than it is):

* :func:`append` starts on a fresh line when the file ends in a torn line
  (a crash mid-write), so the new record stays readable; one write, flushed
  and fsynced.  Non-finite numbers are stored as null.
* :func:`load` / :func:`load_with_warnings` never raise: unreadable files,
  non-UTF-8 lines, torn or non-JSON lines, non-object records and records
  with wrong-typed fields (``run_id`` missing or not a string, ``status`` not
  a string, ``values`` not an object, a value that is not a finite number or
  null, ``fingerprint_id`` not a string) are skipped with a warning.
* :func:`baseline` and :func:`known_good` ignore non-finite, non-numeric and
  negative values and malformed records, and never raise; a node whose last
  record is malformed is not known-good.

Standard library only; importable as ``kiln.burnin.baseline`` and as
``ansible.module_utils.kiln.burnin.baseline``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import statistics
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

PASSING = ("PASS", "WARN")
_FILE_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
#: A history larger than this is read from its end only (the newest records matter).
MAX_HISTORY_BYTES = 64 * 1024 * 1024
_MAX_WARNINGS = 50


def fingerprint_id(fingerprint: Optional[Mapping[str, Any]]) -> str:
    """Short stable hash of the version fingerprint (keys sorted, None kept)."""
    try:
        text = json.dumps(_json_safe(dict(fingerprint or {})), sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        text = "unserialisable fingerprint"
    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()[:12]


def node_file(state_dir: str, node: str) -> str:
    return os.path.join(state_dir, _FILE_SAFE.sub("_", str(node)) + ".jsonl")


def _number(value: Any) -> Optional[float]:
    """*value* as a finite float when it is an int/float (not bool) of sane size, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return float(value) if abs(value) < 10 ** 300 else None
    if isinstance(value, float) and math.isfinite(value):
        return value
    return None


def _finite_value(value: Any) -> bool:
    """A usable measurement: an int/float (not bool), finite and >= 0."""
    number = _number(value)
    return number is not None and number >= 0


def record_problem(record: Any) -> Optional[str]:
    """Why *record* is not a well-formed history record, or None when it is."""
    if not isinstance(record, Mapping):
        return f"not an object ({type(record).__name__})"
    if not isinstance(record.get("run_id"), str):
        return "run_id missing or not a string"
    if not isinstance(record.get("status"), str):
        return "status missing or not a string"
    values = record.get("values", {})
    if not isinstance(values, Mapping):
        return "values is not an object"
    for key, value in values.items():
        if value is not None and _number(value) is None:
            return f"values.{str(key)[:40]} is not a finite number or null"
    if "fingerprint_id" in record and not isinstance(record.get("fingerprint_id"), str):
        return "fingerprint_id is not a string"
    return None


def load_with_warnings(state_dir: str, node: str) -> Tuple[List[Dict[str, Any]], List[str]]:
    """``(records, warnings)``: the node's well-formed records, oldest first, and why others were skipped.

    Never raises (an unreadable file gives no records and a warning).
    """
    warnings: List[str] = []
    try:
        path = node_file(state_dir, node)
    except (TypeError, ValueError) as exc:
        return [], [f"history of {node!r}: bad path ({exc})"]
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_HISTORY_BYTES:
                handle.seek(size - MAX_HISTORY_BYTES)
                handle.readline()  # a partial first line
                warnings.append(f"{path}: larger than {MAX_HISTORY_BYTES} bytes; only its end was read")
            data = handle.read(MAX_HISTORY_BYTES)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [f"{path}: cannot read the history ({exc.strerror or exc})"]
    records: List[Dict[str, Any]] = []
    skipped = 0

    def skip(number: int, why: str) -> None:
        nonlocal skipped
        skipped += 1
        if len(warnings) < _MAX_WARNINGS:
            warnings.append(f"{path}:{number}: record skipped: {why}")

    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            skip(number, "not UTF-8")
            continue
        try:
            record = json.loads(text, parse_constant=_reject_constant)
        except RecursionError:
            skip(number, "nested too deeply")
            continue
        except ValueError as exc:
            torn = number == len(lines) or (number == len(lines) - 1 and not lines[-1])
            skip(number, ("torn last line (crash mid-write?)" if torn and not data.endswith(b"\n")
                          else "not JSON") + f": {str(exc)[:80]}")
            continue
        why = record_problem(record)
        if why:
            skip(number, why)
            continue
        records.append(dict(record))
    if skipped > _MAX_WARNINGS:
        warnings.append(f"{path}: {skipped} records skipped in all")
    return records, warnings


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def load(state_dir: str, node: str) -> List[Dict[str, Any]]:
    """The node's well-formed records, oldest first (damaged lines are skipped; never raises)."""
    return load_with_warnings(state_dir, node)[0]


def _json_safe(value: Any, depth: int = 0) -> Any:
    """Copy of *value* with non-finite floats replaced by None (JSON has no NaN/Infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 300:
        return None
    if depth > 50:
        return str(value)[:200]
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, depth + 1) for v in value]
    return value


def append(state_dir: str, node: str, record: Mapping[str, Any]) -> str:
    """Append one record (a single write of one line, flushed and fsynced).

    When the file ends in a torn line (no final newline after a crash), the
    record starts on a fresh line so that it stays readable.
    """
    os.makedirs(state_dir, exist_ok=True)
    path = node_file(state_dir, node)
    line = json.dumps(_json_safe(dict(record)), sort_keys=True, default=str, allow_nan=False) + "\n"
    data = line.encode("utf-8")
    with open(path, "a+b") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() > 0:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                data = b"\n" + data
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return path


def _value(record: Any, test: Any) -> Optional[float]:
    """The record's usable value of *test* (finite, >= 0), else None."""
    if not isinstance(record, Mapping):
        return None
    values = record.get("values")
    if not isinstance(values, Mapping):
        return None
    try:
        value = values.get(test)
    except TypeError:  # unhashable test name
        return None
    return float(value) if _finite_value(value) else None


def _passing(record: Any) -> bool:
    return isinstance(record, Mapping) and isinstance(record.get("status"), str) and record["status"] in PASSING


def baseline(records: Iterable[Mapping[str, Any]], test: str, fingerprint: Optional[str],
             window: int = 5) -> Dict[str, Any]:
    """``{value, runs, note}`` of *test* from the last *window* passing records with *fingerprint*.

    ``value`` is None when there is none yet; ``note`` says why (first run,
    versions changed since the last baseline).  Records that are malformed or
    whose value is not a finite non-negative number are ignored; never raises.
    """
    try:
        records = [r for r in (records or []) if isinstance(r, Mapping)]
    except TypeError:
        records = []
    try:
        window = max(1, int(window))
    except (TypeError, ValueError, OverflowError):
        window = 5
    passing = [r for r in records if _passing(r) and _value(r, test) is not None]
    same = [r for r in passing if fingerprint is None or r.get("fingerprint_id") == fingerprint]
    if same:
        chosen = same[-window:]
        values = [_value(r, test) for r in chosen]
        return {"value": round(statistics.median(values), 4), "runs": len(values),
                "since": chosen[0].get("run_id"), "note": None}
    if passing:
        return {"value": None, "runs": 0, "since": None,
                "note": f"versions changed since the last baseline ({passing[-1].get('run_id')}): "
                        "this run starts a new one"}
    return {"value": None, "runs": 0, "since": None, "note": "no baseline yet: this run creates it"}


def known_good(histories: Mapping[str, Iterable[Mapping[str, Any]]], test: Optional[str] = None) -> List[str]:
    """Nodes whose last recorded burn-in passed (PASS or WARN) -- and, with *test*,
    whose last record carrying a value of that test passed too (the network was proven).

    A node whose last record is malformed is not known-good; never raises.
    """
    good = []
    try:
        items = list((histories or {}).items())
    except (AttributeError, TypeError):
        return []
    for node, records in items:
        try:
            records = list(records or [])
        except TypeError:
            continue
        if not records or record_problem(records[-1]) or not _passing(records[-1]):
            continue
        if test is not None:
            measured = [r for r in records if _value(r, test) is not None and not record_problem(r)]
            if not measured or not _passing(measured[-1]):
                continue
        good.append(str(node))
    return sorted(good)


def record(run_id: str, finished: str, mode: str, status: str, fingerprint: Optional[Mapping[str, Any]],
           values: Mapping[str, Optional[float]]) -> Dict[str, Any]:
    """One history record; a value that is not a finite number is stored as None."""
    clean: Dict[str, Optional[float]] = {}
    for key, value in dict(values or {}).items():
        clean[str(key)] = value if _number(value) is not None else None
    return {"run_id": run_id, "finished": finished, "mode": mode, "status": status,
            "fingerprint": dict(fingerprint or {}), "fingerprint_id": fingerprint_id(fingerprint),
            "values": clean}
