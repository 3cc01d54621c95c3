# -*- coding: utf-8 -*-
"""nccl-tests parser, shared part: limits, statuses, the result record and its final verdict.

Pure functions, standard library only; importable as ``kiln.nccl.result`` and as
``ansible.module_utils.kiln.nccl.result``. The text parser (kiln_nccl_text, kiln_nccl_layout)
and the ``-J`` JSON parser (kiln_nccl_json) fill one result record (:func:`empty_result`)
and hand it to :func:`finish`, which decides its ``status`` (fail closed; see kiln_nccl).
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

#: First line printed by kiln's CPU engine; identifies ``engine: kiln-cpu``.
CPU_ENGINE_MARKER = "# kiln-cpu-engine"

STATUS_OK = "ok"
STATUS_TRUNCATED = "truncated"
STATUS_UNPARSEABLE = "unparseable"
STATUS_INVALID = "invalid"
#: Every value ``status`` can take.
STATUSES = (STATUS_OK, STATUS_TRUNCATED, STATUS_INVALID, STATUS_UNPARSEABLE)

#: Inputs are parsed up to this many characters (64 MiB); beyond: truncated.
MAX_TEXT_CHARS = 64 * 1024 * 1024
#: Inputs are parsed up to this many lines; beyond: truncated.
MAX_LINES = 1000000
#: nccl-tests lines are < 2 KiB; a longer line is not read (status invalid).
MAX_LINE_CHARS = 64 * 1024
#: busbw/algbw above this (GB/s) is absurd: the row is rejected.
MAX_BW_GBS = 1e6
#: A time above this (us, ~11.6 days per operation) is absurd: the row is rejected.
MAX_TIME_US = 1e12
MAX_INT = 2 ** 63 - 1
MAX_LINE_PROBLEMS = 100
#: More accepted rows than this (a soak of -N cycles gives thousands) is not one sane run.
MAX_ROWS = 100000
_MAX_REJECTED = 1000
MAX_LIST = 1000
MAX_STR = 4096

DIGITS_RE = re.compile(r"[0-9]+\Z")
INT_RE = re.compile(r"[+-]?[0-9]+\Z")
FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
NONFINITE_RE = re.compile(r"[+-]?(?:inf(?:inity)?|nan)\Z", re.IGNORECASE)
NA_TOKENS = ("N/A", "n/a", "NA", "-")


class ParseError(ValueError):
    """Raised by :func:`parse_json` on input that is not an nccl-tests JSON document."""


class Mismatch(Exception):
    """A token does not fit the column it sits in: the line is not a row of this layout."""


def as_text(text: Any) -> str:
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray)):
        return bytes(text[: MAX_TEXT_CHARS * 4 + 4]).decode("utf-8", errors="replace")
    return "" if text is None else str(text)


def safe_int(text: Any) -> Optional[int]:
    """int of a short ASCII integer string, else None (never raises)."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text if -MAX_INT <= text <= MAX_INT else None
    if not isinstance(text, str):
        return None
    text = text.strip()
    if not INT_RE.match(text) or len(text) > 20:
        return None
    value = int(text)
    return value if -MAX_INT <= value <= MAX_INT else None


def nccl_version_from_code(code: Any) -> Optional[str]:
    """Map NCCL_VERSION_CODE (e.g. 23004 or 2708) to ``2.30.4`` / ``2.7.8``; None when not a code."""
    if code is None or isinstance(code, bool):
        return None
    try:
        if isinstance(code, str):
            code = code.strip()
            if not DIGITS_RE.match(code) or len(code) > 12:
                return None
        elif isinstance(code, float) and not (math.isfinite(code) and code.is_integer()):
            return None
        code = int(code)
    except (TypeError, ValueError, OverflowError):
        return None
    if code <= 0 or code > 10 ** 12:
        return None
    if code >= 20900:  # NCCL >= 2.9 uses X*10000 + Y*100 + Z
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def empty_result(fmt: str) -> Dict[str, Any]:
    return {
        "format": fmt,
        "engine": "nccl-tests",
        "engine_version": None,
        "nccl_tests_version": None,
        "nccl_version": None,
        "collective": None,
        "layout": None,
        "columns": [],
        "config": {},
        "devices": [],
        "hosts": [],
        "nranks": None,
        "rows": [],
        "rejected_rows": [],
        "out_of_bounds": None,
        "avg_busbw": None,
        "concluded": False,
        "json_output": None,
        "header_seen": False,
        "runs": 1,
        "data_check": None,
        "failures": [],
        "warnings": [],
        "problems": [],
        "status": STATUS_UNPARSEABLE,
    }


def check_measure(name: str, value: Optional[float], token: str, upper: float) -> Optional[str]:
    """Why *value* is not an acceptable time/algbw/busbw, or None when it is."""
    if value is None:
        return f"{name} missing ({token[:24]})"
    if not math.isfinite(value):
        return f"{name} is not a finite number ({token[:24]})"
    if value < 0:
        return f"{name} is negative ({token[:24]})"
    if value > upper:
        return f"{name} {token[:24]} is above the sane bound {upper:g}"
    return None


def check_wrong(value: Optional[float], token: str) -> Tuple[Optional[int], Optional[str]]:
    if value is None:
        return None, None
    if not math.isfinite(value) or value < 0 or not value.is_integer() or value > MAX_INT:
        return None, f"#wrong {token[:24]} is not a non-negative integer count"
    return int(value), None


def line_problem(state: Dict[str, Any], result: Dict[str, Any], text: str) -> None:
    """Per-line problem, capped so that garbage cannot grow the result without bound."""
    if state["line_problems"] < MAX_LINE_PROBLEMS:
        result["problems"].append(text)
    state["line_problems"] += 1


def reject_row(state: Dict[str, Any], result: Dict[str, Any], where: Any, reasons: List[str],
            info: Mapping[str, Any]) -> None:
    state["invalid"] = True
    state["rejected"] += 1
    if len(result["rejected_rows"]) < _MAX_REJECTED:
        result["rejected_rows"].append({"line": where, "size": info.get("size"), "wrong": info.get("wrong"),
                                        "reason": "; ".join(reasons)[:400]})
    label = f"line {where}" if isinstance(where, int) and state.get("text") else f"results[{where}]"
    line_problem(state, result, f"{label}: {'; '.join(reasons)[:300]}: row not accepted as a measurement")


def new_state(text: bool) -> Dict[str, Any]:
    return {"text": text, "invalid": False, "truncated": False, "headless": False, "rejected": 0,
            "line_problems": 0, "checked": 0, "unchecked": 0, "oversized": False, "bad_footer": False}


def keep_line(items: List[str], line: str) -> None:
    if len(items) < MAX_LIST:
        items.append(line)
    elif len(items) == MAX_LIST:
        items.append("(more lines of this kind not kept)")


def _expected_rows(config: Mapping[str, Any], reduced_max: Optional[int]) -> Optional[int]:
    """Rows of one sweep from the nThread line (minBytes, maxBytes, step), or None when unknown.

    nccl-tests prints one row per size ``min, min*f, ...`` (or ``min, min+s, ...``)
    up to maxBytes, lowered by "# Reducing maxBytes to N"; ``-N`` cycles and
    ``-d all`` / ``-o all`` repeat whole sweeps.
    """
    low, high = config.get("minimum_bytes"), reduced_max or config.get("maximum_bytes")
    factor, step = config.get("step_factor"), config.get("step_bytes")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)) or low <= 0 or high < low:
        return None
    if isinstance(factor, int) and factor > 1:
        count, size = 0, low
        while size <= high and count <= 200:
            count += 1
            size *= factor
        return count if count <= 200 else None
    if isinstance(step, int) and step > 0:
        count = (high - low) // step + 1
        return count if count <= MAX_ROWS else None
    return None


def _check_sweeps(result: Dict[str, Any], state: Dict[str, Any]) -> None:
    """Every expected row present, in order (text output of one run with its footer)."""
    config = result["config"] if isinstance(result["config"], dict) else {}
    expected = _expected_rows(config, state.get("reduced_max"))
    rows = result["rows"]
    if expected is None or not rows or state.get("too_many"):
        return
    total = len(rows) + state["rejected"]
    if total % expected:
        state["invalid"] = True
        result["problems"].append(
            f"{total} result rows, but minBytes {config.get('minimum_bytes')} to maxBytes "
            f"{state.get('reduced_max') or config.get('maximum_bytes')} gives {expected} per sweep: "
            "a row is missing or repeated")
        return
    if state["rejected"]:
        return
    for start in range(0, len(rows), expected):
        sizes = [row["size"] for row in rows[start: start + expected]]
        if any(a is None or b is None or b < a for a, b in zip(sizes, sizes[1:])):
            state["invalid"] = True
            result["problems"].append(f"result rows {start + 1}-{start + expected}: sizes out of order")
            return


def finish(result: Dict[str, Any], state: Dict[str, Any]) -> None:
    devices = result["devices"]
    if devices:
        result["hosts"] = sorted({d["hostname"] for d in devices if isinstance(d.get("hostname"), str)})
        result["nranks"] = len(devices)
    if state["line_problems"] > MAX_LINE_PROBLEMS:
        result["problems"].append(f"... and {state['line_problems'] - MAX_LINE_PROBLEMS} more line problems")
    if state["oversized"]:
        state["truncated"] = True
        result["problems"].append(f"input larger than {MAX_TEXT_CHARS} characters: only the first "
                                  f"{MAX_TEXT_CHARS} were parsed")
    if result["runs"] > 1:
        state["invalid"] = True
        result["problems"].append(f"{result['runs']} runs in one output (mixed)")
    # Data check: #wrong counts (or legacy error values) printed, or N/A (-c 0).
    validation = result["config"].get("validation") if isinstance(result["config"], dict) else None
    validation = validation if isinstance(validation, int) and not isinstance(validation, bool) else None
    checked, unchecked = state["checked"], state["unchecked"]
    if unchecked or (not checked and validation == 0):
        result["data_check"] = False
        result["problems"].append("data check disabled (-c 0): results unverified")
        if checked:
            result["problems"].append(f"#wrong is N/A in {unchecked} of {checked + unchecked} result cells")
    elif checked:
        result["data_check"] = True
        if validation == 0:
            state["invalid"] = True
            result["data_check"] = None
            result["problems"].append("validation: 0 but #wrong counts were printed (contradictory)")
    if not result["rows"]:
        result["status"] = STATUS_INVALID if state["rejected"] or state["invalid"] else STATUS_UNPARSEABLE
        result["problems"].append("no result rows found" if not state["rejected"]
                                  else "no result row accepted as a measurement")
        return
    if state["headless"]:
        state["truncated"] = True
    if result["out_of_bounds"] is None:
        state["truncated"] = True
        result["problems"].append("no 'Out of bounds values' line: output ends before the footer")
    if state["text"] and result["runs"] == 1 and not state["truncated"]:
        _check_sweeps(result, state)  # a complete output: every expected row must be there
    if state["invalid"]:
        result["status"] = STATUS_INVALID
    elif state["truncated"]:
        result["status"] = STATUS_TRUNCATED
    else:
        result["status"] = STATUS_OK
