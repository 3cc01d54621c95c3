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

The result is a plain dict (JSON-serialisable). ``status`` is ``ok`` (table
and "Out of bounds values" footer present), ``truncated`` (rows but no footer,
or a cut-off row) or ``unparseable`` (no result row at all).  The
"Avg bus bandwidth" line is captured under ``avg_busbw`` and flagged
``informational``: it averages every size and both placements, so verdicts
never use it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Dict, List, Optional, Tuple

__all__ = [
    "CPU_ENGINE_MARKER",
    "ParseError",
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

_TAG_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?")
_VERSION_RE = re.compile(r"#\s*nccl-tests version (\S+)(?: nccl-headers=(\d+))?(?: nccl-library=(\d+))?")
_CPU_ENGINE_RE = re.compile(r"#\s*kiln-cpu-engine(?: version (\S+))?(.*)$")
_STARTING_RE = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_CONCLUDED_RE = re.compile(r"#\s*Collective test concluded:\s*(\S+)")
_NCCL_LIB_RE = re.compile(r"NCCL version (\d+\.\d+\.\d+\S*)")
_NTHREAD_RE = re.compile(r"#?\s*nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+)(.*)$")
_DEVICE_RE = re.compile(
    r"#\s+Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(-?\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_OOB_RE = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG_RE = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)\s*(OK|FAILED)?")
_JSON_PATH_RE = re.compile(r"#\s*Writing JSON output to (\S+)")
_FAILURE_RE = re.compile(
    r"(Test (?:NCCL|CUDA) failure|Test failure|Test check failure|Invalid number of GPUs)",
    re.IGNORECASE,
)
_WARN_RE = re.compile(r"NCCL WARN ")
_ERROR_LINE_RE = re.compile(r"#\s*error:\s*(\S.*)$")
_TIME_COLS = ("time", "cputime")
_WRONG_COLS = ("#wrong", "error", "wrong")
_SIZE_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class ParseError(ValueError):
    """Raised by :func:`parse_json` on input that is not an nccl-tests JSON document."""


def parse_size(value: Any) -> int:
    """Return a byte count from ``16G``/``512M``/``1K``/``8`` (binary suffixes, as nccl-tests -b/-e)."""
    if isinstance(value, bool):
        raise ValueError("size must be a number or a string like 16G, not a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = str(value).strip().upper()
    match = re.fullmatch(r"(\d+)\s*([KMGT]?)(I?B)?", text)
    if not match:
        raise ValueError(f"invalid size {value!r}: expected e.g. 8, 512M, 16G")
    return int(match.group(1)) * _SIZE_SUFFIX[match.group(2)]


def nccl_version_from_code(code: Optional[int]) -> Optional[str]:
    """Map NCCL_VERSION_CODE (e.g. 23004 or 2708) to ``2.30.4`` / ``2.7.8``."""
    if code is None:
        return None
    code = int(code)
    if code <= 0:
        return None
    if code >= 20900:  # NCCL >= 2.9 uses X*10000 + Y*100 + Z
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def detect_format(text: str) -> str:
    """Return ``json`` when *text* starts like a JSON object (a -J file), else ``text``."""
    return "json" if text.lstrip().startswith("{") else "text"


def parse(text: str, fmt: str = "auto") -> Dict[str, Any]:
    """Parse *text* (nccl-tests text, -J JSON or kiln CPU engine); *fmt* is auto|text|json."""
    if fmt == "auto":
        fmt = detect_format(text)
    if fmt == "json":
        try:
            return parse_json(text)
        except ParseError as exc:
            result = _empty_result("json")
            result["problems"].append(str(exc))
            return result
    if fmt != "text":
        raise ValueError(f"unknown format {fmt!r}: expected auto, text or json")
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
        "out_of_bounds": None,
        "avg_busbw": None,
        "concluded": False,
        "json_output": None,
        "failures": [],
        "warnings": [],
        "problems": [],
        "status": STATUS_UNPARSEABLE,
    }


def split_runs(text: str) -> List[str]:
    """Split concatenated outputs (e.g. a run repeated 3 times) into one text per run.

    A new run starts at a run-opening line (``# nccl-tests version``,
    ``# kiln-cpu-engine``, ``# Collective test starting`` or ``# nThread``)
    that follows a result row of the current run.
    """
    runs: List[List[str]] = [[]]
    seen_row = False
    for raw in text.splitlines():
        line = _TAG_PREFIX.sub("", raw)
        stripped = line.strip()
        opener = (
            stripped.startswith("# nccl-tests version")
            or stripped.startswith(CPU_ENGINE_MARKER)
            or stripped.startswith("# Collective test starting")
            or _NTHREAD_RE.match(stripped) is not None
        )
        if opener and seen_row:
            runs.append([])
            seen_row = False
        runs[-1].append(raw)
        if stripped[:1].isdigit():
            seen_row = True
    return ["\n".join(lines) + "\n" for lines in runs if any(lines)]


def _parse_config(tail: str, match: "re.Match[str]") -> Dict[str, Any]:
    config: Dict[str, Any] = {
        "nthreads": int(match.group(1)),
        "ngpus": int(match.group(2)),
        "minimum_bytes": int(match.group(3)),
        "maximum_bytes": int(match.group(4)),
    }
    step = re.search(r"step:\s*(\d+)\((factor|bytes)\)", tail)
    if step:
        config["step_factor" if step.group(2) == "factor" else "step_bytes"] = int(step.group(1))
    for key, name in (
        ("warmup iters", "warmup_iters"),
        ("agg iters", "aggregated_iterations"),
        ("validation", "validation"),
        ("graph", "graph"),
        ("unalign", "unalign"),
    ):
        found = re.search(re.escape(key) + r":\s*(-?\d+)", tail)
        if found:
            config[name] = int(found.group(1))
    iters = re.search(r"(?<!warmup )(?<!agg )iters:\s*(\d+)", tail)
    if iters:
        config["iterations"] = int(iters.group(1))
    return config


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
    try:
        float(token)
        return True
    except ValueError:
        return False


def _num(token: str) -> Optional[float]:
    if token in ("N/A", "-", ""):
        return None
    value = float(token)
    if math.isnan(value):
        return None
    return value


def _parse_row(tokens: List[str], layout: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """Return one result row, or None when the token count does not fit *layout*."""
    prefix: List[str] = layout["prefix"]
    groups: List[List[str]] = layout["groups"]
    expected = len(prefix) + sum(len(g) for g in groups) + (2 if layout["timestamp"] else 0)
    if len(tokens) != expected:
        return None
    row: Dict[str, Any] = {"size": None, "count": None, "type": None, "redop": None, "root": None}
    pos = 0
    try:
        for name in prefix:
            token = tokens[pos]
            pos += 1
            if name in ("size", "count"):
                row[name] = int(token)
            elif name == "root":
                row["root"] = int(token)
            elif name in ("type", "redop"):
                row[name] = token
            else:
                row[name] = token
        placements = ("out_of_place", "in_place") if len(groups) == 2 else ("in_place",)
        for place, group in zip(placements, groups):
            cell: Dict[str, Any] = {"time_us": None, "algbw": None, "busbw": None, "wrong": None, "error": None}
            for name in group:
                token = tokens[pos]
                pos += 1
                if name in _TIME_COLS:
                    cell["time_us"] = _num(token)
                    if name == "cputime":
                        cell["cpu_time"] = True
                elif name in ("algbw", "busbw"):
                    cell[name] = _num(token)
                elif name in ("#wrong", "wrong"):
                    value = _num(token)
                    cell["wrong"] = None if value is None else int(value)
                elif name == "error":
                    cell["error"] = _num(token)
                else:
                    cell[name.replace("%", "_pct")] = _num(token)
            row[place] = cell
        if layout["timestamp"]:
            row["timestamp"] = " ".join(tokens[pos: pos + 2])
    except (ValueError, IndexError):
        return None
    row.setdefault("out_of_place", None)
    return row


def parse_text(text: str) -> Dict[str, Any]:
    """Parse one nccl-tests (or kiln CPU engine) text run; see the module docstring."""
    result = _empty_result("text")
    layout: Optional[Dict[str, Any]] = None
    pending_header: List[str] = []
    last_row_line: Optional[int] = None
    bad_rows: List[Tuple[int, str]] = []
    lines = text.splitlines()
    footer_seen_at: Optional[int] = None
    for number, raw in enumerate(lines, start=1):
        line = _TAG_PREFIX.sub("", raw).rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            _parse_comment(stripped, result)
            body = stripped.lstrip("#").split()
            if body[:1] == ["size"]:
                found = _header_layout(body)
                if found:
                    layout = found
                    pending_header = body
            if _OOB_RE.search(stripped):
                footer_seen_at = number
            continue
        # Old builds printed the footer and header without '#'.
        if _OOB_RE.search(stripped) or _AVG_RE.search(stripped) or _NTHREAD_RE.match(stripped):
            _parse_comment("# " + stripped, result)
            if _OOB_RE.search(stripped):
                footer_seen_at = number
            continue
        tokens = stripped.split()
        if tokens[0] == "size" and "busbw" in tokens:
            found = _header_layout(tokens)
            if found:
                layout = found
                pending_header = tokens
            continue
        if _NCCL_LIB_RE.search(stripped) and result["nccl_version"] is None:
            result["nccl_version"] = _NCCL_LIB_RE.search(stripped).group(1)
        if _FAILURE_RE.search(stripped):
            result["failures"].append(stripped)
            continue
        if _WARN_RE.search(stripped):
            result["warnings"].append(stripped)
            continue
        if not tokens[0].isdigit():
            continue
        use = layout or _guess_layout(tokens)
        row = _parse_row(tokens, use) if use else None
        if row is None:
            bad_rows.append((number, stripped))
            continue
        if layout is None:
            layout = use
            result["problems"].append("no table header seen; column layout inferred from the row width")
        result["rows"].append(row)
        last_row_line = number
    if layout:
        result["columns"] = pending_header or layout["prefix"] + [c for g in layout["groups"] for c in g]
        result["layout"] = _layout_name(layout)
    if result["engine"] == "kiln-cpu" and result["layout"]:
        result["layout"] = "kiln-cpu-engine/" + result["layout"]
    _finish(result, bad_rows, last_row_line, footer_seen_at)
    return result


def _parse_comment(line: str, result: Dict[str, Any]) -> None:
    match = _VERSION_RE.match(line)
    if match:
        result["nccl_tests_version"] = match.group(1)
        library = match.group(3) or match.group(2)
        if library and result["nccl_version"] is None:
            result["nccl_version"] = nccl_version_from_code(int(library))
        return
    match = _CPU_ENGINE_RE.match(line)
    if match:
        result["engine"] = "kiln-cpu"
        result["engine_version"] = match.group(1)
        for key, value in re.findall(r"(\w+)=(\S+)", match.group(2) or ""):
            result["config"].setdefault("engine_" + key, value)
        return
    match = _STARTING_RE.match(line)
    if match:
        result["collective"] = match.group(1)
        return
    match = _CONCLUDED_RE.match(line)
    if match:
        result["concluded"] = True
        result["collective"] = result["collective"] or match.group(1)
        return
    match = _NTHREAD_RE.match(line.lstrip("#").strip())
    if match:
        result["config"].update(_parse_config(match.group(5), match))
        return
    match = _DEVICE_RE.match(line)
    if match:
        result["devices"].append(
            {
                "rank": int(match.group(1)),
                "group": int(match.group(2)) if match.group(2) is not None else None,
                "pid": int(match.group(3)),
                "hostname": match.group(4),
                "device": int(match.group(5)),
                "device_hex": match.group(6),
                "device_info": match.group(7),
            }
        )
        return
    match = _OOB_RE.search(line)
    if match:
        count = int(match.group(1))
        result["out_of_bounds"] = {"count": count, "ok": count == 0 and match.group(2) != "FAILED"}
        return
    match = _AVG_RE.search(line)
    if match:
        try:
            value: Optional[float] = float(match.group(1))
        except ValueError:
            value = None
        result["avg_busbw"] = {"value": value, "check": match.group(2), "informational": True}
        return
    match = _JSON_PATH_RE.match(line)
    if match:
        result["json_output"] = match.group(1)
        return
    match = _ERROR_LINE_RE.match(line)
    if match:
        result["failures"].append(line)
        return
    if _FAILURE_RE.search(line):
        result["failures"].append(line)


def _finish(result: Dict[str, Any], bad_rows: List[Tuple[int, str]], last_row_line: Optional[int],
            footer_line: Optional[int]) -> None:
    devices = result["devices"]
    if devices:
        result["hosts"] = sorted({d["hostname"] for d in devices})
        result["nranks"] = len(devices)
    for number, line in bad_rows:
        result["problems"].append(f"line {number}: result row does not match the table layout: {line[:80]}")
    if not result["rows"]:
        result["status"] = STATUS_UNPARSEABLE
        result["problems"].append("no result rows found")
        return
    truncated = False
    if result["out_of_bounds"] is None:
        truncated = True
        result["problems"].append("no 'Out of bounds values' line: output ends before the footer")
    if bad_rows and last_row_line is not None and bad_rows[-1][0] > last_row_line:
        if footer_line is None or bad_rows[-1][0] < footer_line:
            truncated = True
            result["problems"].append("last result row is cut off")
    result["status"] = STATUS_TRUNCATED if truncated else STATUS_OK


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


def _json_num(value: Any) -> Optional[float]:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    number = float(value)
    return None if math.isnan(number) else number


def _json_cell(cell: Any) -> Optional[Dict[str, Any]]:
    if not isinstance(cell, dict):
        return None
    cpu = "cpu_time" in cell and "time" not in cell
    wrong = _json_num(cell.get("nwrong"))
    out: Dict[str, Any] = {
        "time_us": _json_num(cell.get("cpu_time" if cpu else "time")),
        "algbw": _json_num(cell.get("alg_bw")),
        "busbw": _json_num(cell.get("bus_bw")),
        "wrong": None if wrong is None else int(wrong),
        "error": None,
    }
    if cpu:
        out["cpu_time"] = True
    return out


def parse_json(data: Any) -> Dict[str, Any]:
    """Parse an nccl-tests ``-J`` document (a str or an already-loaded dict)."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise ParseError(f"not valid JSON (truncated -J file?): {exc}") from exc
    if not isinstance(data, dict) or "results" not in data:
        raise ParseError("not an nccl-tests -J document: no 'results' key")
    result = _empty_result("json")
    result["layout"] = f"nccl-tests-json-v{data.get('version')}"
    result["json_version"] = data.get("version")
    result["nccl_version"] = nccl_version_from_code(data.get("nccl_version")) if data.get("nccl_version") else None
    result["start_time"] = data.get("start_time")
    result["end_time"] = data.get("end_time")
    result["args"] = list(data.get("args") or [])
    result["env"] = list(data.get("env") or [])
    config = dict(data.get("config") or {})
    devices = config.pop("devices", None) or data.get("devices") or []
    for key in ("blocking_collectives", "per_iter_timing", "parallel_init"):
        if key in config:
            config[key] = _json_bool(config[key])
    result["config"] = config
    for dev in devices:
        if isinstance(dev, dict):
            result["devices"].append(
                {
                    "rank": dev.get("rank"),
                    "group": dev.get("group"),
                    "pid": dev.get("pid"),
                    "hostname": dev.get("hostname"),
                    "device": dev.get("device"),
                    "device_hex": dev.get("device_hex"),
                    "device_info": dev.get("device_info"),
                }
            )
    if result["args"]:
        program = str(result["args"][0]).rsplit("/", 1)[-1]
        result["collective"] = program or None
    for entry in data.get("results") or []:
        if not isinstance(entry, dict) or entry.get("size") is None:
            result["problems"].append("results entry without a size")
            continue
        root = entry.get("root")
        try:
            root_value = int(str(root).strip()) if root is not None else None
        except ValueError:
            root_value = None
        result["rows"].append(
            {
                "size": int(entry["size"]),
                "count": int(entry["count"]) if entry.get("count") is not None else None,
                "type": entry.get("type"),
                "redop": entry.get("redop"),
                "root": root_value,
                "out_of_place": _json_cell(entry.get("out_of_place")),
                "in_place": _json_cell(entry.get("in_place")),
            }
        )
    oob = data.get("out_of_bounds")
    if isinstance(oob, dict) and oob.get("count") is not None:
        count = int(oob["count"])
        okay = _json_bool(oob.get("okay"))
        result["out_of_bounds"] = {"count": count, "ok": count == 0 and okay is not False}
    avg = data.get("average_bus_bandwidth")
    if isinstance(avg, dict):
        okay = avg.get("okay")
        check = None if okay in (None, "unchecked") else ("OK" if _json_bool(okay) else "FAILED")
        result["avg_busbw"] = {"value": _json_num(avg.get("bandwidth")), "check": check, "informational": True}
    errors = [e for e in (data.get("errors") or []) if isinstance(e, str) and e.strip()]
    result["failures"].extend(f"# error: {e}" for e in errors)
    result["concluded"] = data.get("end_time") is not None
    _finish(result, [], None, None)
    return result
