# -*- coding: utf-8 -*-
"""Parser for nccl-tests output (text and ``-J`` JSON) and kiln's CPU engine.

Pure functions, standard library only, importable both as a top-level module
(``import kiln_nccl``, used by tools/ and the unit tests) and as
``ansible.module_utils.kiln_nccl`` (used by modules and plugins).

Supported inputs (see docs/burnin-format.md for the full description):

* nccl-tests text output of every layout seen in the wild:

  - 2.13+ (2022-08 on): ``size count type redop root`` then ``time algbw busbw
    #wrong`` twice (out-of-place, in-place);
  - 2.17.7+ adds ``# nccl-tests version ...``, ``# Collective test starting``,
    ``unalign:`` and ``# Collective test concluded``; 2.19 adds ``-I 1``
    per-iteration columns (``i_min i_max i_p99 i_cv%``) and ``-S 1`` timestamps;
  - before 2022-08: no ``root`` column (or no ``redop`` column for
    all_gather), and an ``error`` column holding the maximum relative error
    as a float (``2e-07``) instead of a ``#wrong`` count;
  - ``-C`` reports ``cputime`` instead of ``time``; ``-c 0`` prints ``N/A``
    for ``#wrong``;
  - MPI noise, ``NCCL version`` / ``NCCL INFO`` lines, ``mpirun --tag-output``
    prefixes (``[1,0]<stdout>:``) and failure lines (``Test NCCL failure``).

* nccl-tests ``-J`` JSON (release 2.17.7+), as written by src/util.cu.

* kiln's CPU engine, which prints the nccl-tests text layout (see
  ``CPU_ENGINE_MARKER`` and docs/burnin-format.md).

The result is a plain dict (JSON-serialisable, no NaN or infinity anywhere).
It fails closed: ``status`` is ``ok`` only when the output is one complete,
trustworthy run, i.e. all of

* at least one result row was accepted, and every accepted row's time, algbw
  and busbw are finite, non-negative and sane (busbw/algbw <= ``MAX_BW_GBS``,
  time <= ``MAX_TIME_US``), its ``#wrong`` a non-negative integer or ``N/A``;
* the table header was seen (``header_seen``; the column layout was not
  guessed from the row width);
* the text holds exactly one run (``runs == 1``);
* the "Out of bounds values : N OK|FAILED" footer is present (``out_of_bounds``);
* no result row was rejected, cut off or out of layout; with the footer
  present, the rows are whole sweeps of the sizes the nThread line announces
  (``minBytes`` to ``maxBytes`` by ``step``, or the lowered "Reducing
  maxBytes"; ``-N`` cycles and ``-d all`` repeat whole sweeps), each in
  increasing size;
* the input was within ``MAX_TEXT_CHARS`` characters, ``MAX_LINES`` lines,
  ``MAX_ROWS`` rows.

Otherwise ``status`` is (``STATUSES``):

* ``unparseable`` -- no result row at all and nothing judged invalid (also
  invalid or cut-off JSON);
* ``invalid`` (``STATUS_INVALID``) -- the output holds something that cannot be
  trusted as a measurement: a row with a non-finite (``inf``, ``nan``,
  ``1e999``, JSON ``Infinity``/``NaN``), negative or absurd number (rejected,
  listed in ``rejected_rows``, never in ``rows``), a result row in the middle
  of the table that does not fit the layout, a row missing, repeated or out of
  order, several runs in one output (``"N runs in one output (mixed)"``: a run
  opener -- ``# nccl-tests version``, ``# Collective test starting``,
  ``# nThread``, ``# kiln-cpu-engine`` -- after result rows, or result rows
  after the footer), two nThread lines that disagree, ``validation: 0`` with
  printed ``#wrong`` counts, an unreadable footer count, an over-long line,
  more than ``MAX_ROWS`` rows, or JSON of the wrong shape; it wins over
  ``truncated``;
* ``truncated`` -- rows but no footer, a cut-off last row, no table header
  (the head of the output is missing, so the columns are unknown), or an
  input beyond ``MAX_TEXT_CHARS`` / ``MAX_LINES`` (only its head was parsed).

``problems`` says why, in words.  ``data_check`` is True when every result
cell printed a ``#wrong`` count (or a legacy ``error`` value), False when any
printed ``N/A`` (``-c 0``) or the run says ``validation: 0`` -- the problem
"data check disabled (-c 0): results unverified" is added and the status stays
``ok``, so verdicts must not PASS such a run -- and None when unknown (no rows,
or ``validation: 0`` contradicted by printed counts, which is ``invalid``).
``rejected_rows`` lists rows refused as measurements (``line`` or JSON index,
``size``, ``wrong``: the #wrong counts that could be read, ``reason``).  The
"Avg bus bandwidth" line is captured under ``avg_busbw`` and flagged
``informational``: it averages every size and both placements, so verdicts
never use it.
"""

from __future__ import annotations

import io
import json
import math
import re
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

__all__ = [
    "CPU_ENGINE_MARKER",
    "MAX_BW_GBS",
    "MAX_LINE_CHARS",
    "MAX_LINES",
    "MAX_ROWS",
    "MAX_TEXT_CHARS",
    "MAX_TIME_US",
    "ParseError",
    "STATUSES",
    "STATUS_INVALID",
    "STATUS_OK",
    "STATUS_TRUNCATED",
    "STATUS_UNPARSEABLE",
    "detect_format",
    "nccl_version_from_code",
    "parse",
    "parse_json",
    "parse_size",
    "parse_text",
    "split_runs",
]

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
_MAX_INT = 2 ** 63 - 1
_MAX_LINE_PROBLEMS = 100
#: More accepted rows than this (a soak of -N cycles gives thousands) is not one sane run.
MAX_ROWS = 100000
_MAX_REJECTED = 1000
_MAX_LIST = 1000
_MAX_STR = 4096

_TAG_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?")
_VERSION_RE = re.compile(r"#\s*nccl-tests version (\S+)(?: nccl-headers=(\d+))?(?: nccl-library=(\d+))?")
_CPU_ENGINE_RE = re.compile(r"#\s*kiln-cpu-engine(?: version (\S+))?(.*)$")
_STARTING_RE = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_CONCLUDED_RE = re.compile(r"#\s*Collective test concluded:\s*(\S+)")
_NCCL_LIB_RE = re.compile(r"NCCL version (\d+\.\d+\.\d+\S*)")
_NTHREAD_RE = re.compile(r"#?\s*nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+)(.*)$")
_DEVICE_RE = re.compile(
    r"#\s+Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(-?\d+)\s+\[([^\]]*)\](.*)$"
)
_OOB_ANY_RE = re.compile(r"Out of bounds values\s*:")
_OOB_RE = re.compile(r"Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)\b")
_AVG_RE = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)\s*(OK|FAILED)?")
_JSON_PATH_RE = re.compile(r"#\s*Writing JSON output to (\S+)")
_REDUCED_RE = re.compile(r"#\s*Reducing maxBytes to ([0-9]{1,20})")
_FAILURE_RE = re.compile(
    r"(Test (?:NCCL|CUDA) failure|Test failure|Test check failure|Invalid number of GPUs)",
    re.IGNORECASE,
)
_WARN_RE = re.compile(r"NCCL WARN ")
_ERROR_LINE_RE = re.compile(r"#\s*error:\s*(\S.*)$")
_DIGITS_RE = re.compile(r"[0-9]+\Z")
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_NONFINITE_RE = re.compile(r"[+-]?(?:inf(?:inity)?|nan)\Z", re.IGNORECASE)
_NA_TOKENS = ("N/A", "n/a", "NA", "-")
_TIME_COLS = ("time", "cputime")
_WRONG_COLS = ("#wrong", "error", "wrong")
_SIZE_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class ParseError(ValueError):
    """Raised by :func:`parse_json` on input that is not an nccl-tests JSON document."""


class _Mismatch(Exception):
    """A token does not fit the column it sits in: the line is not a row of this layout."""


def parse_size(value: Any) -> int:
    """Return a byte count from ``16G``/``512M``/``1K``/``8`` (binary suffixes, as nccl-tests -b/-e).

    Raises ValueError on anything else (including numbers too long to convert).
    """
    if isinstance(value, bool):
        raise ValueError("size must be a number or a string like 16G, not a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = str(value).strip().upper()
    match = re.fullmatch(r"([0-9]{1,30})\s*([KMGT]?)(I?B)?", text)
    if not match:
        raise ValueError(f"invalid size {str(value)[:40]!r}: expected e.g. 8, 512M, 16G")
    return int(match.group(1)) * _SIZE_SUFFIX[match.group(2)]


def nccl_version_from_code(code: Any) -> Optional[str]:
    """Map NCCL_VERSION_CODE (e.g. 23004 or 2708) to ``2.30.4`` / ``2.7.8``; None when not a code."""
    if code is None or isinstance(code, bool):
        return None
    try:
        if isinstance(code, str):
            code = code.strip()
            if not _DIGITS_RE.match(code) or len(code) > 12:
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


def detect_format(text: str) -> str:
    """Return ``json`` when *text* starts like a JSON object (a -J file), else ``text``."""
    return "json" if re.match(r"\s*\{", _as_text(text)) else "text"


def _as_text(text: Any) -> str:
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray)):
        return bytes(text[: MAX_TEXT_CHARS * 4 + 4]).decode("utf-8", errors="replace")
    return "" if text is None else str(text)


def parse(text: Any, fmt: str = "auto") -> Dict[str, Any]:
    """Parse *text* (nccl-tests text, -J JSON or kiln CPU engine); *fmt* is auto|text|json.

    Never raises on any input text (a bad *fmt* is a programming error: ValueError).
    """
    if fmt not in ("auto", "text", "json"):
        raise ValueError(f"unknown format {fmt!r}: expected auto, text or json")
    text = _as_text(text)
    if fmt == "auto":
        fmt = detect_format(text)
    if fmt == "json":
        try:
            return parse_json(text)
        except ParseError as exc:
            result = _empty_result("json")
            result["problems"].append(str(exc))
            result["problems"].append("no result rows found")
            return result
    return parse_text(text)


def _empty_result(fmt: str) -> Dict[str, Any]:
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


# --------------------------------------------------------------------------- runs


def _iter_lines(buffer: "io.StringIO") -> Iterator[str]:
    """The lines of *buffer*, split like str.splitlines(), without building one list of them all."""
    for physical in buffer:
        yield from physical.splitlines()


def _is_opener(stripped: str) -> bool:
    """A line that starts a run: version, CPU engine marker, 'Collective test starting' or nThread."""
    return (
        stripped.startswith("# nccl-tests version")
        or stripped.startswith(CPU_ENGINE_MARKER)
        or stripped.startswith("# Collective test starting")
        or _NTHREAD_RE.match(stripped) is not None
    )


def _is_row_candidate(tokens: List[str]) -> bool:
    """A line that looks like a result row: size (and count) as plain ASCII integers.

    A lone integer is a row cut off after its first column.  MPI noise such as
    ``2 more processes have sent help message`` is not a candidate.
    """
    if not tokens or not _DIGITS_RE.match(tokens[0]):
        return False
    return len(tokens) == 1 or _DIGITS_RE.match(tokens[1]) is not None


def _is_footer_line(stripped: str) -> bool:
    return _OOB_ANY_RE.search(stripped) is not None


def split_runs(text: str) -> List[str]:
    """Split concatenated outputs (e.g. a run repeated 3 times) into one text per run.

    A new run starts at a run-opening line (``# nccl-tests version``,
    ``# kiln-cpu-engine``, ``# Collective test starting`` or ``# nThread``)
    that follows a result row of the current run, or at a result row that
    follows the current run's "Out of bounds values" footer (a second run
    whose head was cut off).  :func:`parse_text` counts runs the same way.
    """
    runs: List[List[str]] = [[]]
    seen_row = False
    seen_footer = False
    buffer = io.StringIO(_as_text(text)[:MAX_TEXT_CHARS])
    for count, raw in enumerate(_iter_lines(buffer), start=1):
        if count > MAX_LINES:  # too long to be one output: the rest stays with the last run (parse flags it)
            runs[-1].append(raw + "\n" + buffer.read())
            break
        line = _TAG_PREFIX.sub("", raw)
        stripped = line.strip()
        if len(stripped) <= MAX_LINE_CHARS:
            candidate = not stripped.startswith("#") and _is_row_candidate(stripped.split()[:2])
            if (_is_opener(stripped) and seen_row) or (candidate and seen_footer):
                runs.append([])
                seen_row = seen_footer = False
            if candidate:
                seen_row = True
            if _is_footer_line(stripped):
                seen_footer = True
        runs[-1].append(raw)
    return ["\n".join(lines) + "\n" for lines in runs if any(lines)]


# --------------------------------------------------------------------------- text layout


def _safe_int(text: Any) -> Optional[int]:
    """int of a short ASCII integer string, else None (never raises)."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text if -_MAX_INT <= text <= _MAX_INT else None
    if not isinstance(text, str):
        return None
    text = text.strip()
    if not _INT_RE.match(text) or len(text) > 20:
        return None
    value = int(text)
    return value if -_MAX_INT <= value <= _MAX_INT else None


def _parse_config(tail: str, match: "re.Match[str]") -> Dict[str, Any]:
    config: Dict[str, Any] = {}
    for index, name in ((1, "nthreads"), (2, "ngpus"), (3, "minimum_bytes"), (4, "maximum_bytes")):
        value = _safe_int(match.group(index))
        if value is not None:
            config[name] = value
    step = re.search(r"step:\s*([0-9]{1,20})\((factor|bytes)\)", tail)
    if step:
        config["step_factor" if step.group(2) == "factor" else "step_bytes"] = _safe_int(step.group(1))
    for key, name in (
        ("warmup iters", "warmup_iters"),
        ("agg iters", "aggregated_iterations"),
        ("validation", "validation"),
        ("graph", "graph"),
        ("unalign", "unalign"),
    ):
        found = re.search(re.escape(key) + r":\s*(-?[0-9]{1,20})", tail)
        if found and _safe_int(found.group(1)) is not None:
            config[name] = _safe_int(found.group(1))
    iters = re.search(r"(?<!warmup )(?<!agg )iters:\s*([0-9]{1,20})", tail)
    if iters:
        config["iterations"] = _safe_int(iters.group(1))
    return {k: v for k, v in config.items() if v is not None}


def _header_layout(tokens: List[str]) -> Optional[Dict[str, Any]]:
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


def _layout_name(layout: Dict[str, Any]) -> str:
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


def _guess_layout(tokens: List[str]) -> Optional[Dict[str, Any]]:
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
    return _FLOAT_RE.match(token) is not None or _NONFINITE_RE.match(token) is not None


def _token_float(token: str) -> Optional[float]:
    """A number token as float (may be inf/nan: checked by the caller); None for N/A; _Mismatch otherwise."""
    if token in _NA_TOKENS:
        return None
    if _FLOAT_RE.match(token) or _NONFINITE_RE.match(token):
        return float(token)  # never raises on these patterns; 1e999 -> inf
    raise _Mismatch(token)


def _check_measure(name: str, value: Optional[float], token: str, upper: float) -> Optional[str]:
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


def _check_wrong(value: Optional[float], token: str) -> Tuple[Optional[int], Optional[str]]:
    if value is None:
        return None, None
    if not math.isfinite(value) or value < 0 or not value.is_integer() or value > _MAX_INT:
        return None, f"#wrong {token[:24]} is not a non-negative integer count"
    return int(value), None


def _int_column(name: str, token: str, low: int, invalid: List[str]) -> Optional[int]:
    if not _INT_RE.match(token):
        raise _Mismatch(token)
    if len(token.lstrip("+-")) > 19:
        invalid.append(f"{name} {token[:24]}... is out of range")
        return None
    value = int(token)
    if not low <= value <= _MAX_INT:
        invalid.append(f"{name} {token[:24]} is out of range")
        return None
    return value


def _parse_row(tokens: List[str], layout: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], List[str], Dict[str, Any]]:
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
                row["root"] = _int_column("root", token, -_MAX_INT, invalid)
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
                    why = _check_measure(f"{tag} {name}", value, token, MAX_TIME_US)
                    cell["time_us"] = None if why else value
                    if name == "cputime":
                        cell["cpu_time"] = True
                elif name in ("algbw", "busbw"):
                    why = _check_measure(f"{tag} {name}", value, token, MAX_BW_GBS)
                    cell[name] = None if why else value
                elif name in ("#wrong", "wrong"):
                    cell["wrong"], why = _check_wrong(value, token)
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
    except (_Mismatch, IndexError):
        return None, [], {}
    if invalid:
        return None, invalid, info
    row.setdefault("out_of_place", None)
    return row, [], info


# --------------------------------------------------------------------------- text


def _line_problem(state: Dict[str, Any], result: Dict[str, Any], text: str) -> None:
    """Per-line problem, capped so that garbage cannot grow the result without bound."""
    if state["line_problems"] < _MAX_LINE_PROBLEMS:
        result["problems"].append(text)
    state["line_problems"] += 1


def _reject(state: Dict[str, Any], result: Dict[str, Any], where: Any, reasons: List[str],
            info: Mapping[str, Any]) -> None:
    state["invalid"] = True
    state["rejected"] += 1
    if len(result["rejected_rows"]) < _MAX_REJECTED:
        result["rejected_rows"].append({"line": where, "size": info.get("size"), "wrong": info.get("wrong"),
                                        "reason": "; ".join(reasons)[:400]})
    label = f"line {where}" if isinstance(where, int) and state.get("text") else f"results[{where}]"
    _line_problem(state, result, f"{label}: {'; '.join(reasons)[:300]}: row not accepted as a measurement")


def _new_state(text: bool) -> Dict[str, Any]:
    return {"text": text, "invalid": False, "truncated": False, "headless": False, "rejected": 0,
            "line_problems": 0, "checked": 0, "unchecked": 0, "oversized": False, "bad_footer": False}


def parse_text(text: str) -> Dict[str, Any]:
    """Parse one nccl-tests (or kiln CPU engine) text run; see the module docstring.  Never raises."""
    result = _empty_result("text")
    state = _new_state(True)
    text = _as_text(text)
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS]
        state["oversized"] = True
    layout: Optional[Dict[str, Any]] = None
    pending_header: List[str] = []
    last_row_line: Optional[int] = None
    bad_rows: List[Tuple[int, str]] = []  # the first _MAX_LINE_PROBLEMS, then only the last one
    bad_count = 0
    footer_seen_at: Optional[int] = None
    runs = 1
    row_in_run = False
    footer_in_run = False
    for number, raw in enumerate(_iter_lines(io.StringIO(text)), start=1):
        if number > MAX_LINES:
            state["truncated"] = True
            result["problems"].append(f"more than {MAX_LINES} lines: only the first {MAX_LINES} were parsed")
            break
        if len(raw) > MAX_LINE_CHARS + 64:
            state["invalid"] = True
            _line_problem(state, result, f"line {number}: {len(raw)} characters long (nccl-tests lines are short): "
                                         "not read")
            continue
        line = _TAG_PREFIX.sub("", raw).rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        if _is_opener(stripped) and row_in_run:
            runs += 1
            row_in_run = footer_in_run = False
            footer_seen_at = None
        if stripped.startswith("#"):
            _parse_comment(stripped, result, state, number)
            body = stripped.lstrip("#").split()
            if body[:1] == ["size"]:
                found = _header_layout(body)
                if found:
                    layout = found
                    pending_header = body
                    result["header_seen"] = True
            if _is_footer_line(stripped):
                footer_in_run = True
                if result["out_of_bounds"] is not None and _OOB_RE.search(stripped):
                    footer_seen_at = number
            continue
        # Old builds printed the footer and header without '#'.
        if _is_footer_line(stripped) or _AVG_RE.search(stripped) or _NTHREAD_RE.match(stripped):
            _parse_comment("# " + stripped, result, state, number)
            if _is_footer_line(stripped):
                footer_in_run = True
                if result["out_of_bounds"] is not None and _OOB_RE.search(stripped):
                    footer_seen_at = number
            continue
        tokens = stripped.split()
        if tokens[0] == "size" and "busbw" in tokens:
            found = _header_layout(tokens)
            if found:
                layout = found
                pending_header = tokens
                result["header_seen"] = True
            continue
        lib = _NCCL_LIB_RE.search(stripped)
        if lib and result["nccl_version"] is None:
            result["nccl_version"] = lib.group(1)[:64]
        if _FAILURE_RE.search(stripped):
            _keep(result["failures"], stripped[:1000])
            continue
        if _WARN_RE.search(stripped):
            _keep(result["warnings"], stripped[:1000])
            continue
        if not _is_row_candidate(tokens):
            continue
        if footer_in_run:  # rows after the footer: a second run whose head was cut off
            runs += 1
            footer_in_run = False
            footer_seen_at = None
        row_in_run = True
        if len(result["rows"]) >= MAX_ROWS:
            if not state.get("too_many"):
                state["too_many"] = state["invalid"] = True
                result["problems"].append(f"more than {MAX_ROWS} result rows: the rest is not read")
            continue
        use = layout or _guess_layout(tokens)
        row, reasons, info = _parse_row(tokens, use) if use else (None, [], {})
        if reasons:
            _reject(state, result, number, reasons, info)
            last_row_line = number
            continue
        if row is None:
            bad_count += 1
            if len(bad_rows) > _MAX_LINE_PROBLEMS:
                bad_rows[-1] = (number, stripped[:200])
            else:
                bad_rows.append((number, stripped[:200]))
            continue
        if layout is None:
            layout = use
            state["headless"] = True
            result["problems"].append("no table header seen; column layout inferred from the row width")
        state["checked"] += info["checked"]
        state["unchecked"] += info["unchecked"]
        result["rows"].append(row)
        last_row_line = number
    if layout:
        result["columns"] = pending_header or layout["prefix"] + [c for g in layout["groups"] for c in g]
        result["layout"] = _layout_name(layout)
    if result["engine"] == "kiln-cpu" and result["layout"]:
        result["layout"] = "kiln-cpu-engine/" + result["layout"]
    result["runs"] = runs
    if bad_rows:
        last_bad = bad_rows[-1][0]
        cut_off = (last_row_line is None or last_bad > last_row_line) and (footer_seen_at is None
                                                                           or last_bad < footer_seen_at)
        for number, line in bad_rows:
            if cut_off and number == last_bad:
                continue
            state["invalid"] = True
            _line_problem(state, result, f"line {number}: result row does not match the table layout: {line[:80]}")
        if bad_count > len(bad_rows):
            state["invalid"] = True
            state["line_problems"] += bad_count - len(bad_rows)
        if cut_off:
            state["truncated"] = True
            result["problems"].append(f"last result row is cut off (line {last_bad}: {bad_rows[-1][1][:80]})")
    _finish(result, state)
    return result


def _keep(items: List[str], line: str) -> None:
    if len(items) < _MAX_LIST:
        items.append(line)
    elif len(items) == _MAX_LIST:
        items.append("(more lines of this kind not kept)")


def _parse_comment(line: str, result: Dict[str, Any], state: Dict[str, Any], number: int) -> None:
    match = _VERSION_RE.match(line)
    if match:
        result["nccl_tests_version"] = match.group(1)[:64]
        library = match.group(3) or match.group(2)
        if library and result["nccl_version"] is None:
            result["nccl_version"] = nccl_version_from_code(library)
        return
    match = _CPU_ENGINE_RE.match(line)
    if match:
        result["engine"] = "kiln-cpu"
        result["engine_version"] = match.group(1)[:64] if match.group(1) else None
        for key, value in re.findall(r"(\w+)=(\S+)", (match.group(2) or "")[:2000]):
            result["config"].setdefault("engine_" + key, value[:200])
        return
    match = _STARTING_RE.match(line)
    if match:
        result["collective"] = match.group(1)[:200]
        return
    match = _CONCLUDED_RE.match(line)
    if match:
        result["concluded"] = True
        result["collective"] = result["collective"] or match.group(1)[:200]
        return
    match = _NTHREAD_RE.match(line.lstrip("#").strip())
    if match:
        config = _parse_config(match.group(5), match)
        if state.get("config_line") and any(result["config"].get(k) != v for k, v in config.items()):
            state["invalid"] = True
            result["problems"].append(f"line {number}: a second nThread line with other parameters "
                                      f"(line {state['config_line']} first): contradictory")
        state["config_line"] = state.get("config_line") or number
        result["config"].update(config)
        return
    match = _DEVICE_RE.match(line)
    if match:
        rank, pid, device = _safe_int(match.group(1)), _safe_int(match.group(3)), _safe_int(match.group(5))
        if rank is None or pid is None or device is None:
            return
        result["devices"].append(
            {
                "rank": rank,
                "group": _safe_int(match.group(2)) if match.group(2) is not None else None,
                "pid": pid,
                "hostname": match.group(4)[:255],
                "device": device,
                "device_hex": match.group(6)[:128],
                "device_info": match.group(7).strip()[:1024],
            }
        )
        return
    if _OOB_ANY_RE.search(line):
        match = _OOB_RE.search(line)
        count = _safe_int(match.group(1)) if match else None
        if match and count is not None:
            ok = count == 0 and match.group(2) == "OK"
            if (count == 0) != (match.group(2) == "OK"):
                result["problems"].append(f"line {number}: 'Out of bounds values' count and OK/FAILED disagree")
            result["out_of_bounds"] = {"count": count, "ok": ok}
        elif match:
            state["invalid"] = state["bad_footer"] = True
            result["out_of_bounds"] = {"count": None, "ok": False}
            result["problems"].append(f"line {number}: 'Out of bounds values' count is out of range")
        else:
            _line_problem(state, result, f"line {number}: 'Out of bounds values' line is cut off or malformed")
        return
    match = _AVG_RE.search(line)
    if match:
        value: Optional[float] = None
        if _FLOAT_RE.match(match.group(1)):
            value = float(match.group(1))
            value = value if math.isfinite(value) else None
        result["avg_busbw"] = {"value": value, "check": match.group(2), "informational": True}
        return
    match = _JSON_PATH_RE.match(line)
    if match:
        result["json_output"] = match.group(1)[:4096]
        return
    match = _REDUCED_RE.match(line)
    if match:
        state["reduced_max"] = _safe_int(match.group(1))
        return
    match = _ERROR_LINE_RE.match(line)
    if match:
        _keep(result["failures"], line[:1000])
        return
    if _FAILURE_RE.search(line):
        _keep(result["failures"], line[:1000])


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


def _finish(result: Dict[str, Any], state: Dict[str, Any]) -> None:
    devices = result["devices"]
    if devices:
        result["hosts"] = sorted({d["hostname"] for d in devices if isinstance(d.get("hostname"), str)})
        result["nranks"] = len(devices)
    if state["line_problems"] > _MAX_LINE_PROBLEMS:
        result["problems"].append(f"... and {state['line_problems'] - _MAX_LINE_PROBLEMS} more line problems")
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


# --------------------------------------------------------------------------- JSON


def _json_bool(value: Any) -> Optional[bool]:
    """nccl-tests writes booleans as the strings "true"/"false" (util.cu jsonBool)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value.lower() == "true":
            return True
        if value.lower() == "false":
            return False
    return None


def _json_float(value: Any) -> Optional[float]:
    """A JSON number (or a numeric string such as nccl-tests' "nan") as float; None when absent.

    May return inf/nan (checked by the caller); raises _Mismatch for other types.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise _Mismatch("boolean")
    if isinstance(value, int):
        return float(value) if abs(value) <= 10 ** 300 else math.inf
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        token = value.strip()
        if token in _NA_TOKENS:
            return None
        if _FLOAT_RE.match(token) or _NONFINITE_RE.match(token):
            return float(token)
    raise _Mismatch(type(value).__name__)


def _short(value: Any) -> str:
    """A short printable form of a JSON value for problem texts (never raises on huge ints)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 30:
        return "<huge integer>"
    if isinstance(value, (dict, list)):
        return f"<{type(value).__name__}>"
    return str(value)[:24]


def _json_num(value: Any) -> Optional[float]:
    """Finite number or None (informational fields)."""
    try:
        number = _json_float(value)
    except _Mismatch:
        return None
    return number if number is not None and math.isfinite(number) else None


def _json_int(value: Any) -> Optional[int]:
    """Non-negative-or-not integer from an int, an integral float or a digit string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer() or abs(value) > _MAX_INT:
            return None
        return int(value)
    return _safe_int(value)


def _scalar(value: Any) -> Any:
    """JSON scalar kept as is (strings shortened); containers and non-finite numbers -> None."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value[:_MAX_STR]
    if isinstance(value, int):
        return value if abs(value) <= _MAX_INT else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return None


def _json_cell(cell: Any, tag: str, info: Dict[str, Any], invalid: List[str]) -> Optional[Dict[str, Any]]:
    if cell is None:
        return None
    if not isinstance(cell, Mapping):
        invalid.append(f"{tag} is not an object")
        return None
    cpu = "cpu_time" in cell and "time" not in cell
    out: Dict[str, Any] = {"time_us": None, "algbw": None, "busbw": None, "wrong": None, "error": None}
    for key, name, upper in (("cpu_time" if cpu else "time", "time_us", MAX_TIME_US),
                             ("alg_bw", "algbw", MAX_BW_GBS), ("bus_bw", "busbw", MAX_BW_GBS)):
        raw = cell.get(key)
        try:
            value = _json_float(raw)
        except _Mismatch:
            invalid.append(f"{tag} {key} is not a number ({type(raw).__name__})")
            continue
        why = _check_measure(f"{tag} {key}", value, _short(raw), upper)
        if why:
            invalid.append(why)
        else:
            out[name] = value
    raw = cell.get("nwrong")
    try:
        wrong = _json_float(raw)
    except _Mismatch:
        invalid.append(f"{tag} nwrong is not a number ({type(raw).__name__})")
        wrong = None
    else:
        info["unchecked" if wrong is None else "checked"] += 1
        out["wrong"], why = _check_wrong(wrong, _short(raw))
        if why:
            invalid.append(f"{tag} {why}")
        elif out["wrong"]:
            info["wrong"] = (info["wrong"] or 0) + out["wrong"]
    if cpu:
        out["cpu_time"] = True
    return out


def _load_json(data: Any) -> Any:
    if isinstance(data, (bytes, bytearray)):
        if len(data) > MAX_TEXT_CHARS:
            raise ParseError(f"-J file larger than {MAX_TEXT_CHARS} bytes: not read")
        data = bytes(data).decode("utf-8", errors="replace")
    if len(data) > MAX_TEXT_CHARS:
        raise ParseError(f"-J file larger than {MAX_TEXT_CHARS} characters: not read")
    try:
        # NaN/Infinity are not JSON: keep their names as strings, rejected as non-finite below.
        return json.loads(data, parse_constant=lambda name: name)
    except RecursionError:
        raise ParseError("not valid JSON: nested too deeply") from None
    except (ValueError, TypeError) as exc:
        raise ParseError(f"not valid JSON (truncated -J file?): {str(exc)[:200]}") from None


def parse_json(data: Any) -> Dict[str, Any]:
    """Parse an nccl-tests ``-J`` document (a str, bytes or an already-loaded dict).

    Raises ParseError (only) on input that is not a JSON object with ``results``;
    any other defect is a problem in the result (status invalid/truncated).
    """
    if isinstance(data, (str, bytes, bytearray)):
        data = _load_json(data)
    if not isinstance(data, Mapping) or "results" not in data:
        raise ParseError("not an nccl-tests -J document: no 'results' key")
    try:
        return _parse_json_document(data)
    except RecursionError:
        raise ParseError("malformed nccl-tests -J document: nested too deeply") from None
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError) as exc:
        # Defensive net: _parse_json_document checks every type itself.
        raise ParseError(f"malformed nccl-tests -J document: {type(exc).__name__}: {str(exc)[:200]}") from None


def _parse_json_document(data: Mapping[str, Any]) -> Dict[str, Any]:
    result = _empty_result("json")
    state = _new_state(False)
    result["header_seen"] = True  # a -J document names every field
    version = _scalar(data.get("version"))
    result["layout"] = f"nccl-tests-json-v{version}"
    result["json_version"] = version
    result["nccl_version"] = nccl_version_from_code(data.get("nccl_version"))
    result["start_time"] = data.get("start_time") if isinstance(data.get("start_time"), str) else None
    result["end_time"] = data.get("end_time") if isinstance(data.get("end_time"), str) else None
    args = data.get("args")
    env = data.get("env")
    result["args"] = [a[:_MAX_STR] for a in args if isinstance(a, str)][:_MAX_LIST] if isinstance(args, list) else []
    result["env"] = [e[:_MAX_STR] for e in env if isinstance(e, str)][:_MAX_LIST] if isinstance(env, list) else []
    raw_config = data.get("config")
    raw_config = raw_config if isinstance(raw_config, Mapping) else {}
    config = {str(k)[:200]: _scalar(v) for k, v in list(raw_config.items())[:200] if k != "devices"}
    for key in ("blocking_collectives", "per_iter_timing", "parallel_init"):
        if key in config:
            config[key] = _json_bool(config[key])
    if "validation" in config:
        config["validation"] = _json_int(config["validation"])
    result["config"] = config
    devices = raw_config.get("devices")
    if not isinstance(devices, list):
        devices = data.get("devices") if isinstance(data.get("devices"), list) else []
    for dev in devices[:100000]:
        if isinstance(dev, Mapping):
            result["devices"].append({key: _scalar(dev.get(key)) for key in (
                "rank", "group", "pid", "hostname", "device", "device_hex", "device_info")})
    if result["args"]:
        program = result["args"][0].rsplit("/", 1)[-1]
        result["collective"] = program or None
    results = data.get("results")
    if results is None:
        results = []
    if not isinstance(results, list):
        state["invalid"] = True
        result["problems"].append(f"'results' is not a list ({type(results).__name__})")
        results = []
    for index, entry in enumerate(results):
        info: Dict[str, Any] = {"size": None, "wrong": None, "checked": 0, "unchecked": 0}
        invalid: List[str] = []
        if not isinstance(entry, Mapping):
            _reject(state, result, index, [f"results entry is a {type(entry).__name__}, not an object"], info)
            continue
        size = _json_int(entry.get("size"))
        if size is None or size < 0:
            invalid.append("results entry without a valid size")
        info["size"] = size
        count = _json_int(entry.get("count"))
        oop = _json_cell(entry.get("out_of_place"), "out_of_place", info, invalid)
        ip = _json_cell(entry.get("in_place"), "in_place", info, invalid)
        if oop is None and ip is None and not invalid:
            invalid.append("neither an out_of_place nor an in_place result")
        if invalid:
            _reject(state, result, index, invalid, info)
            continue
        state["checked"] += info["checked"]
        state["unchecked"] += info["unchecked"]
        result["rows"].append(
            {
                "size": size,
                "count": count if count is not None and count >= 0 else None,
                "type": entry.get("type")[:64] if isinstance(entry.get("type"), str) else None,
                "redop": entry.get("redop")[:64] if isinstance(entry.get("redop"), str) else None,
                "root": _json_int(entry.get("root")),
                "out_of_place": oop,
                "in_place": ip,
            }
        )
    oob = data.get("out_of_bounds")
    if isinstance(oob, Mapping) and oob.get("count") is not None:
        count = _json_int(oob.get("count"))
        okay = _json_bool(oob.get("okay"))
        if count is None or count < 0:
            state["invalid"] = True
            result["problems"].append("out_of_bounds.count is not a non-negative integer")
            result["out_of_bounds"] = {"count": None, "ok": False}
        else:
            result["out_of_bounds"] = {"count": count, "ok": count == 0 and okay is not False}
    elif oob is not None and not isinstance(oob, Mapping):
        state["invalid"] = True
        result["problems"].append("out_of_bounds is not an object")
    avg = data.get("average_bus_bandwidth")
    if isinstance(avg, Mapping):
        okay = avg.get("okay")
        check = None if okay is None or okay == "unchecked" or isinstance(okay, (list, dict)) else (
            "OK" if _json_bool(okay) else "FAILED")
        result["avg_busbw"] = {"value": _json_num(avg.get("bandwidth")), "check": check, "informational": True}
    errors = data.get("errors")
    errors = errors if isinstance(errors, list) else []
    for error in errors:
        if isinstance(error, str) and error.strip():
            _keep(result["failures"], f"# error: {error[:1000]}")
    result["concluded"] = data.get("end_time") is not None
    _finish(result, state)
    return result
