# -*- coding: utf-8 -*-
"""nccl-tests text table: column layouts (from the header, or guessed from a row) and result rows.

Pure functions, standard library only; importable as ``kiln.nccl.layout`` and as
``ansible.module_utils.kiln.nccl.layout``. Used by kiln_nccl_text.parse_text.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from .result import (
    FLOAT_RE, INT_RE, MAX_BW_GBS, MAX_INT, MAX_TIME_US, NA_TOKENS, NONFINITE_RE, Mismatch, check_measure,
    check_wrong,
)

_TIME_COLS = ("time", "cputime")
_WRONG_COLS = ("#wrong", "error", "wrong")


def header_layout(tokens: List[str]) -> Optional[Dict[str, Any]]:
    """Return the column layout from the header tokens (without the leading '#')."""
    if not tokens or tokens[0] != "size" or "busbw" not in tokens:
        return None
    starts = [i for i, tok in enumerate(tokens) if tok in _TIME_COLS]
    if not starts:
        return None
    prefix = tokens[: starts[0]]
    groups = []
    bounds = starts + [len(tokens)]
    for index, start in enumerate(starts):
        group = tokens[start: bounds[index + 1]]
        groups.append(group)
    timestamp = False
    if groups and groups[-1][-1] == "timestamp":
        groups[-1] = groups[-1][:-1]
        timestamp = True
    if not all(("busbw" in g) for g in groups) or len(groups) > 2:
        return None
    return {"prefix": prefix, "groups": groups, "timestamp": timestamp}


def layout_name(layout: Dict[str, Any]) -> str:
    prefix = layout["prefix"]
    wrong = next((c for c in layout["groups"][0] if c in _WRONG_COLS), None)
    if "root" in prefix and "redop" in prefix and wrong == "#wrong":
        name = "nccl-tests-2.13+"
    elif wrong == "error":
        name = "nccl-tests-legacy-error"
    else:
        name = "nccl-tests-custom"
    if any(c.startswith("i_") for c in layout["groups"][0]):
        name += "+per-iter"
    if layout["timestamp"]:
        name += "+timestamps"
    return name


def guess_layout(tokens: List[str]) -> Optional[Dict[str, Any]]:
    """Infer the layout of a row when no header was seen (cut-off head of a log)."""
    group = ["time", "algbw", "busbw", "#wrong"]
    numeric_4 = len(tokens) > 4 and _is_number(tokens[4])
    if len(tokens) == 13 and numeric_4:
        return {"prefix": ["size", "count", "type", "redop", "root"], "groups": [group, group], "timestamp": False}
    legacy = ["time", "algbw", "busbw", "error"]
    if len(tokens) == 12 and not _is_number(tokens[3]):
        return {"prefix": ["size", "count", "type", "redop"], "groups": [legacy, legacy], "timestamp": False}
    if len(tokens) == 11:
        return {"prefix": ["size", "count", "type"], "groups": [legacy, legacy], "timestamp": False}
    return None


def _is_number(token: str) -> bool:
    return FLOAT_RE.match(token) is not None or NONFINITE_RE.match(token) is not None


def _token_float(token: str) -> Optional[float]:
    """A number token as float (may be inf/nan: checked by the caller); None for N/A; Mismatch otherwise."""
    if token in NA_TOKENS:
        return None
    if FLOAT_RE.match(token) or NONFINITE_RE.match(token):
        return float(token)  # never raises on these patterns; 1e999 -> inf
    raise Mismatch(token)


def _int_column(name: str, token: str, low: int, invalid: List[str]) -> Optional[int]:
    if not INT_RE.match(token):
        raise Mismatch(token)
    if len(token.lstrip("+-")) > 19:
        invalid.append(f"{name} {token[:24]}... is out of range")
        return None
    value = int(token)
    if not low <= value <= MAX_INT:
        invalid.append(f"{name} {token[:24]} is out of range")
        return None
    return value


def parse_row(tokens: List[str], layout: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], List[str], Dict[str, Any]]:
    """One result row against *layout*.

    Returns ``(row, [], info)`` for an accepted row, ``(None, [], {})`` when the
    tokens do not fit the layout (cut off, other table) and ``(None, reasons,
    info)`` when they fit but hold numbers that are not a measurement
    (non-finite, negative, absurd).  *info*: ``size``, ``wrong`` (sum of the
    counts that could be read), ``checked`` / ``unchecked`` (data-check cells).
    """
    prefix: List[str] = layout["prefix"]
    groups: List[List[str]] = layout["groups"]
    expected = len(prefix) + sum(len(g) for g in groups) + (2 if layout["timestamp"] else 0)
    if len(tokens) != expected:
        return None, [], {}
    row: Dict[str, Any] = {"size": None, "count": None, "type": None, "redop": None, "root": None}
    invalid: List[str] = []
    info: Dict[str, Any] = {"size": None, "wrong": None, "checked": 0, "unchecked": 0}
    pos = 0
    try:
        for name in prefix:
            token = tokens[pos]
            pos += 1
            if name in ("size", "count"):
                row[name] = _int_column(name, token, 0, invalid)
            elif name == "root":
                row["root"] = _int_column("root", token, -MAX_INT, invalid)
            else:
                row[name] = token
        info["size"] = row["size"]
        placements = ("out_of_place", "in_place") if len(groups) == 2 else ("in_place",)
        for place, group in zip(placements, groups):
            cell: Dict[str, Any] = {"time_us": None, "algbw": None, "busbw": None, "wrong": None, "error": None}
            tag = "out-of-place" if place == "out_of_place" else "in-place"
            for name in group:
                token = tokens[pos]
                pos += 1
                flagged = name == "error" and token.endswith("*") and len(token) > 1
                value = _token_float(token[:-1] if flagged else token)
                if name in _TIME_COLS:
                    why = check_measure(f"{tag} {name}", value, token, MAX_TIME_US)
                    cell["time_us"] = None if why else value
                    if name == "cputime":
                        cell["cpu_time"] = True
                elif name in ("algbw", "busbw"):
                    why = check_measure(f"{tag} {name}", value, token, MAX_BW_GBS)
                    cell[name] = None if why else value
                elif name in ("#wrong", "wrong"):
                    cell["wrong"], why = check_wrong(value, token)
                    info["unchecked" if value is None else "checked"] += 1
                    if cell["wrong"]:
                        info["wrong"] = (info["wrong"] or 0) + cell["wrong"]
                elif name == "error":
                    why = None
                    info["unchecked" if value is None else "checked"] += 1
                    if flagged:  # some builds print "1e+00*" when a check failed
                        cell["error_flag"] = True
                    if value is not None and (not math.isfinite(value) or value < 0):
                        why = f"{tag} error {token[:24]} is not a finite non-negative number"
                    cell["error"] = None if why else value
                else:
                    # Optional per-iteration columns: informational, never judged.
                    why = None
                    cell[name.replace("%", "_pct")] = value if value is not None and math.isfinite(value) else None
                if why:
                    invalid.append(why)
            row[place] = cell
        if layout["timestamp"]:
            row["timestamp"] = " ".join(tokens[pos: pos + 2])
    except (Mismatch, IndexError):
        return None, [], {}
    if invalid:
        return None, invalid, info
    row.setdefault("out_of_place", None)
    return row, [], info
