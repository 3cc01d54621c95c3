# -*- coding: utf-8 -*-
"""nccl-tests ``-J`` JSON documents (release 2.17.7+, as written by src/util.cu).

Pure functions, standard library only; importable as ``kiln.nccl.json_doc`` and as
``ansible.module_utils.kiln.nccl.json_doc``. :func:`parse_json` raises ParseError only on input
that is not an nccl-tests JSON document; any other defect is a problem in the result.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Mapping, Optional

from .result import (
    FLOAT_RE, MAX_BW_GBS, MAX_INT, MAX_LIST, MAX_STR, MAX_TEXT_CHARS, MAX_TIME_US, NA_TOKENS,
    NONFINITE_RE, Mismatch, ParseError, check_measure, check_wrong, empty_result, finish, keep_line,
    nccl_version_from_code, new_state, reject_row, safe_int,
)

__all__ = ["parse_json"]


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

    May return inf/nan (checked by the caller); raises Mismatch for other types.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise Mismatch("boolean")
    if isinstance(value, int):
        return float(value) if abs(value) <= 10 ** 300 else math.inf
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        token = value.strip()
        if token in NA_TOKENS:
            return None
        if FLOAT_RE.match(token) or NONFINITE_RE.match(token):
            return float(token)
    raise Mismatch(type(value).__name__)


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
    except Mismatch:
        return None
    return number if number is not None and math.isfinite(number) else None


def _json_int(value: Any) -> Optional[int]:
    """Non-negative-or-not integer from an int, an integral float or a digit string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer() or abs(value) > MAX_INT:
            return None
        return int(value)
    return safe_int(value)


def _scalar(value: Any) -> Any:
    """JSON scalar kept as is (strings shortened); containers and non-finite numbers -> None."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value[:MAX_STR]
    if isinstance(value, int):
        return value if abs(value) <= MAX_INT else None
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
        except Mismatch:
            invalid.append(f"{tag} {key} is not a number ({type(raw).__name__})")
            continue
        why = check_measure(f"{tag} {key}", value, _short(raw), upper)
        if why:
            invalid.append(why)
        else:
            out[name] = value
    raw = cell.get("nwrong")
    try:
        wrong = _json_float(raw)
    except Mismatch:
        invalid.append(f"{tag} nwrong is not a number ({type(raw).__name__})")
        wrong = None
    else:
        info["unchecked" if wrong is None else "checked"] += 1
        out["wrong"], why = check_wrong(wrong, _short(raw))
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
    result = empty_result("json")
    state = new_state(False)
    result["header_seen"] = True  # a -J document names every field
    version = _scalar(data.get("version"))
    result["layout"] = f"nccl-tests-json-v{version}"
    result["json_version"] = version
    result["nccl_version"] = nccl_version_from_code(data.get("nccl_version"))
    result["start_time"] = data.get("start_time") if isinstance(data.get("start_time"), str) else None
    result["end_time"] = data.get("end_time") if isinstance(data.get("end_time"), str) else None
    args = data.get("args")
    env = data.get("env")
    result["args"] = [a[:MAX_STR] for a in args if isinstance(a, str)][:MAX_LIST] if isinstance(args, list) else []
    result["env"] = [e[:MAX_STR] for e in env if isinstance(e, str)][:MAX_LIST] if isinstance(env, list) else []
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
            reject_row(state, result, index, [f"results entry is a {type(entry).__name__}, not an object"], info)
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
            reject_row(state, result, index, invalid, info)
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
            keep_line(result["failures"], f"# error: {error[:1000]}")
    result["concluded"] = data.get("end_time") is not None
    finish(result, state)
    return result
