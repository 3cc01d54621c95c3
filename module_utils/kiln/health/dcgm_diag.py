# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parser for ``dcgmi diag [-j]`` output (DCGM 3.x and 4.x, JSON and text tables).

Pure functions, standard library only. Importable as ``kiln.health.dcgm_diag`` and as
``ansible.module_utils.kiln.health.dcgm_diag``. :func:`parse_dcgm_diag` never raises; the verdict
on a parsed run is ``kiln_health_dcgm.dcgm_check``. Statuses follow kiln_verdict, plus
``UNKNOWN`` for a status word kiln does not know (never PASS).
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import verdict as kiln_verdict

__all__ = [
    "MAX_INPUT_CHARS",
    "MAX_LINES",
    "MAX_MESSAGES",
    "MAX_MESSAGE_CHARS",
    "MAX_PROBLEMS",
    "MAX_RESULTS",
    "MAX_TESTS",
    "UNKNOWN",
    "dcgm_test_key",
    "parse_dcgm_diag",
]

PASS, WARN, FAIL, INCOMPLETE, SKIP = (kiln_verdict.PASS, kiln_verdict.WARN, kiln_verdict.FAIL,
                                      kiln_verdict.INCOMPLETE, kiln_verdict.SKIP)
#: Status of a parsed DCGM test whose status word kiln does not know (never PASS).
UNKNOWN = "UNKNOWN"

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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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


def worse_status(a: Optional[str], b: str) -> str:
    return b if a is None or _TEST_SEVERITY[b] > _TEST_SEVERITY[a] else a


def clip_message(text: Any) -> str:
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
            self.tests[ident] = {"name": clip_message(name) or "unnamed", "key": key,
                                 "category": clip_message(category) if category else None,
                                 "summary": None, "entities": {}, "warnings": []}
        return self.tests[ident]

    @staticmethod
    def message(test: Dict[str, Any], entity: Optional[str], text: Any,
                error_id: Any = None) -> Optional[Dict[str, Any]]:
        if len(test["warnings"]) >= MAX_MESSAGES:
            return None
        entry = {"entity": entity, "error_id": error_id if _is_int(error_id) else None, "message": clip_message(text)}
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
                status = worse_status(status, value)
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
            return [f"{clip_message(group)[:16]}{ident}"]
        return [f"{clip_message(group)[:16]}?"]
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
                test["summary"] = worse_status(test["summary"], status)
            for label in labels:
                test["entities"][label] = worse_status(test["entities"].get(label), status)
            if "warnings" in result:
                _json_messages(tests, test, labels[0] if len(labels) == 1 else None, result["warnings"])
    summary = entry.get("test_summary")
    if isinstance(summary, Mapping):
        if "status" in summary:
            test["summary"] = worse_status(test["summary"], _status_of(summary.get("status")))
        if "warnings" in summary:
            _json_messages(tests, test, None, summary["warnings"])
    elif "status" in entry:
        test["summary"] = worse_status(test["summary"], _status_of(entry.get("status")))


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
            meta.setdefault("runtime_error", clip_message(error))
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
    for key, where in (("version", root.get("version")), ("version", metadata.get("version")),
                       ("driver_version", metadata.get("Driver Version Detected")),
                       ("driver_version", doc.get("Driver Version Detected"))):
        if isinstance(where, str) and where.strip():
            meta.setdefault(key, clip_message(where))
    categories = root.get("test_categories")
    if isinstance(categories, list):
        for category in categories[:64]:
            if isinstance(category, Mapping) and isinstance(category.get("tests"), list):
                for entry in category["tests"][:MAX_TESTS]:
                    _json_test(tests, entry, category.get("category"))
    return True


def json_starts(text: str) -> List[int]:
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
                problems.append(clip_message(stripped))
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
                current["entities"][label] = worse_status(current["entities"].get(label), status)
                last_message = None
            elif current is not None and v3:
                _apply_v3(current, v3)
                last_message = None
            elif last_message is not None and value:
                # DCGM cuts messages into 45-character rows, mid-word; a shorter row lost a
                # trailing space to the table padding, a row printed after two spaces began with one.
                lead = row.group("value").startswith("  ")
                joiner = "" if last_chunk >= _WRAP and not lead else " "
                last_message["message"] = clip_message(last_message["message"] + joiner + value)
                last_chunk = len(value) + (1 if lead else 0)
            elif current is not None and value and not value.lower().startswith("code:"):
                current["summary"] = worse_status(current["summary"], UNKNOWN)  # a status row kiln cannot read
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
                current["summary"] = worse_status(current["summary"], UNKNOWN)
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
            test["entities"][label] = worse_status(test["entities"].get(label), status)
    elif ids is not None:
        test["summary"] = worse_status(test["summary"], UNKNOWN)  # "Fail - GPU: x": unreadable GPU list
    else:
        test["summary"] = worse_status(test["summary"], status)


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
        for number, start in enumerate(json_starts(out)):
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
                problems.append(("unrecognised output: " + clip_message(first)) if first else "no output")
        for line in err.splitlines()[:5]:
            if line.strip() and len(problems) < MAX_PROBLEMS:
                problems.append("stderr: " + clip_message(line))
        return {"format": fmt, "tests": parsed, "problems": problems[:MAX_PROBLEMS],
                "version": meta.get("version"), "driver_version": meta.get("driver_version"),
                "runtime_error": meta.get("runtime_error")}
    except Exception as exc:  # noqa: BLE001 - documented: never raises on any input
        problems.append(f"parser error: {type(exc).__name__}")
        return {"format": "none", "tests": [], "problems": problems[:MAX_PROBLEMS],
                "version": None, "driver_version": None, "runtime_error": None}

