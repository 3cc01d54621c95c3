# -*- coding: utf-8 -*-
"""nccl-tests (and kiln CPU engine) text output: runs, comment lines, the table and its footer.

Pure functions, standard library only; importable as ``kiln.nccl.text`` and as
``ansible.module_utils.kiln.nccl.text``. :func:`parse_text` never raises; the layouts it
accepts and the verdict it reaches are described in kiln_nccl.
"""

from __future__ import annotations

import io
import math
import re
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .layout import guess_layout, header_layout, layout_name, parse_row
from .result import (
    CPU_ENGINE_MARKER, DIGITS_RE, FLOAT_RE, MAX_LINE_CHARS, MAX_LINE_PROBLEMS, MAX_LINES, MAX_ROWS,
    MAX_TEXT_CHARS, as_text, empty_result, finish, keep_line, line_problem, nccl_version_from_code,
    new_state, reject_row, safe_int,
)

__all__ = ["parse_text", "split_runs"]

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
    if not tokens or not DIGITS_RE.match(tokens[0]):
        return False
    return len(tokens) == 1 or DIGITS_RE.match(tokens[1]) is not None


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
    buffer = io.StringIO(as_text(text)[:MAX_TEXT_CHARS])
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


def _parse_config(tail: str, match: "re.Match[str]") -> Dict[str, Any]:
    config: Dict[str, Any] = {}
    for index, name in ((1, "nthreads"), (2, "ngpus"), (3, "minimum_bytes"), (4, "maximum_bytes")):
        value = safe_int(match.group(index))
        if value is not None:
            config[name] = value
    step = re.search(r"step:\s*([0-9]{1,20})\((factor|bytes)\)", tail)
    if step:
        config["step_factor" if step.group(2) == "factor" else "step_bytes"] = safe_int(step.group(1))
    for key, name in (
        ("warmup iters", "warmup_iters"),
        ("agg iters", "aggregated_iterations"),
        ("validation", "validation"),
        ("graph", "graph"),
        ("unalign", "unalign"),
    ):
        found = re.search(re.escape(key) + r":\s*(-?[0-9]{1,20})", tail)
        if found and safe_int(found.group(1)) is not None:
            config[name] = safe_int(found.group(1))
    iters = re.search(r"(?<!warmup )(?<!agg )iters:\s*([0-9]{1,20})", tail)
    if iters:
        config["iterations"] = safe_int(iters.group(1))
    return {k: v for k, v in config.items() if v is not None}


def parse_text(text: str) -> Dict[str, Any]:
    """Parse one nccl-tests (or kiln CPU engine) text run; see the module docstring.  Never raises."""
    result = empty_result("text")
    state = new_state(True)
    text = as_text(text)
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS]
        state["oversized"] = True
    layout: Optional[Dict[str, Any]] = None
    pending_header: List[str] = []
    last_row_line: Optional[int] = None
    bad_rows: List[Tuple[int, str]] = []  # the first MAX_LINE_PROBLEMS, then only the last one
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
            line_problem(state, result, f"line {number}: {len(raw)} characters long (nccl-tests lines are short): "
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
                found = header_layout(body)
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
            found = header_layout(tokens)
            if found:
                layout = found
                pending_header = tokens
                result["header_seen"] = True
            continue
        lib = _NCCL_LIB_RE.search(stripped)
        if lib and result["nccl_version"] is None:
            result["nccl_version"] = lib.group(1)[:64]
        if _FAILURE_RE.search(stripped):
            keep_line(result["failures"], stripped[:1000])
            continue
        if _WARN_RE.search(stripped):
            keep_line(result["warnings"], stripped[:1000])
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
        use = layout or guess_layout(tokens)
        row, reasons, info = parse_row(tokens, use) if use else (None, [], {})
        if reasons:
            reject_row(state, result, number, reasons, info)
            last_row_line = number
            continue
        if row is None:
            bad_count += 1
            if len(bad_rows) > MAX_LINE_PROBLEMS:
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
        result["layout"] = layout_name(layout)
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
            line_problem(state, result, f"line {number}: result row does not match the table layout: {line[:80]}")
        if bad_count > len(bad_rows):
            state["invalid"] = True
            state["line_problems"] += bad_count - len(bad_rows)
        if cut_off:
            state["truncated"] = True
            result["problems"].append(f"last result row is cut off (line {last_bad}: {bad_rows[-1][1][:80]})")
    finish(result, state)
    return result


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
        rank, pid, device = safe_int(match.group(1)), safe_int(match.group(3)), safe_int(match.group(5))
        if rank is None or pid is None or device is None:
            return
        result["devices"].append(
            {
                "rank": rank,
                "group": safe_int(match.group(2)) if match.group(2) is not None else None,
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
        count = safe_int(match.group(1)) if match else None
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
            line_problem(state, result, f"line {number}: 'Out of bounds values' line is cut off or malformed")
        return
    match = _AVG_RE.search(line)
    if match:
        value: Optional[float] = None
        if FLOAT_RE.match(match.group(1)):
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
        state["reduced_max"] = safe_int(match.group(1))
        return
    match = _ERROR_LINE_RE.match(line)
    if match:
        keep_line(result["failures"], line[:1000])
        return
    if _FAILURE_RE.search(line):
        keep_line(result["failures"], line[:1000])
