# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""DCGM background health watches: the parser of ``dcgmi health -c [-j]`` and the ``dcgm.health`` check.

Pure functions, standard library only. Importable as ``kiln.health.dcgm_health`` and as
``ansible.module_utils.kiln.health.dcgm_health``. :func:`parse_dcgm_health` never raises;
:func:`dcgm_health_check` turns one run into a check record (``kiln_verdict.make_check``).

The layout is the one dcgmi builds in ``dcgmi/Health.cpp`` (``GenerateOutputFromResponse``,
``HandleOneEntity``) through ``DcgmiOutputJson`` (``dcgmi/DcgmiOutput.{h,cpp}``), the same in DCGM
3.x and 4.x: every node is ``{"value": str, "overflow": [str], "children": {name: node}}``, the
report is ``{"header": ["Health Monitor Report"], "body": {"Overall Health": {"value": W},
"<entity group>": {"children": {"<entity id>": {"value": W, "children": {"Errors": {"children":
{"<System> system": {"value": W, "overflow": [message chunks]}}}}}}}}}`` where the entity group is
``DcgmFieldsGetEntityGroupString`` ("GPU", "Switch", "vGPU", "GPU_I", "GPU_CI", ...) and W is
``Health::HelperHealthToString``: Healthy, Warning, Failure (anything else, e.g. "Internal
error", is UNKNOWN here). A message longer than 54 characters is cut into ``overflow`` chunks
at word ends; several incidents of one system are joined by ", " first. Older dcgmi (the loop
before ``HandleOneEntity``) keyed an entity by its health code and may leave ``"Errors": null``:
such an entity still counts, with no system. The text table (``DcgmiOutputTree``) is parsed
as a fallback.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import verdict as kiln_verdict
from .dcgm import DCGM_RC
from .dcgm_diag import clip_message, json_starts
from .rules import is_int, show

__all__ = ["CHECK_ID", "MAX_ENTITIES", "UNKNOWN", "dcgm_health_check", "parse_dcgm_health"]

PASS, WARN, FAIL, INCOMPLETE, SKIP = (kiln_verdict.PASS, kiln_verdict.WARN, kiln_verdict.FAIL,
                                      kiln_verdict.INCOMPLETE, kiln_verdict.SKIP)
#: A health word kiln does not know ("Internal error", a typo, a hostile value): never a pass.
UNKNOWN = "UNKNOWN"
CHECK_ID = "dcgm.health"

MAX_INPUT_CHARS = 4 * 1024 * 1024
MAX_LINES = 100_000
MAX_ENTITIES = 1024
MAX_MESSAGES = 16
MAX_PROBLEMS = 20
_SEVERITY = {PASS: 0, WARN: 1, UNKNOWN: 2, FAIL: 3}

_HEALTH_WORDS = {"healthy": PASS, "pass": PASS, "passed": PASS, "ok": PASS,
                 "warning": WARN, "warn": WARN,
                 "failure": FAIL, "fail": FAIL, "failed": FAIL}
#: ``Health::HelperSystemToString`` labels (and the ``--fetch`` tags) -> kiln's system names.
_SYSTEMS = {"pcie": "pcie", "pci": "pcie", "nvlink": "nvlink", "memory": "memory", "mem": "memory",
            "inforom": "inforom", "thermal": "thermal", "power": "power", "driver": "driver",
            "sm": "sm", "pmu": "pmu", "mcu": "mcu", "connectx": "connectx",
            "nvswitch": "nvswitch", "nvswitch nf": "nvswitch", "nvswitch f": "nvswitch",
            "nvswitch fatal": "nvswitch", "nvswitch nonfatal": "nvswitch", "nvswitch non-fatal": "nvswitch"}

#: dcgmi exit statuses of ``health`` (dcgmReturn_t modulo 256, dcgm_structs.h; main_dcgmi.cpp returns it).
HEALTH_RC = dict(DCGM_RC)
HEALTH_RC.update({
    253: "DCGM_ST_GENERIC_ERROR (-3): dcgmi could not check the watches (none set, or the check failed)",
    254: "-2: dcgmi rejected its command line",
})


def _health_of(raw: Any) -> str:
    if not isinstance(raw, str):
        return UNKNOWN
    return _HEALTH_WORDS.get(" ".join(raw.strip().lower().split()), UNKNOWN)


def _worse(a: Optional[str], b: str) -> str:
    return b if a is None or _SEVERITY[b] > _SEVERITY[a] else a


def _system_of(label: Any) -> str:
    text = " ".join(str(label).strip().lower().split())
    if text.endswith(" system"):
        text = text[:-7].strip()
    return _SYSTEMS.get(text, clip_message(text).replace(" ", "_")[:40] or "unnamed")


class _Report:
    """What one parse found: the overall health word and one record per (entity, system)."""

    def __init__(self) -> None:
        self.overall: Optional[str] = None
        self.entities: List[Dict[str, Any]] = []
        self.problems: List[str] = []
        self.dropped = 0
        self.dropped_worst: Optional[str] = None  # the verdict still sees what was not kept

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS and text not in self.problems:
            self.problems.append(text)

    def add(self, entity: str, system: Optional[str], health: str, messages: List[str]) -> None:
        if len(self.entities) >= MAX_ENTITIES:
            self.dropped += 1
            self.dropped_worst = _worse(self.dropped_worst, health)
            return
        self.entities.append({"entity": entity, "system": system, "health": health,
                              "messages": [m for m in messages if m][:MAX_MESSAGES]})


def _overflow_text(node: Mapping[str, Any], where: str, report: _Report) -> List[str]:
    """The message of a node: its overflow chunks joined (dcgmi cut it at word ends)."""
    chunks = node.get("overflow")
    if chunks is None:
        return []
    if not isinstance(chunks, list):
        report.problem(f"{where}: message is {type(chunks).__name__}, not a list")
        return []
    text = " ".join(c.strip() for c in chunks[:64] if isinstance(c, str) and c.strip())
    return [clip_message(text)] if text else []


_LEGACY_KEYS = {"0": PASS, "10": WARN, "20": FAIL}  # dcgmHealthWatchResults_t values


def _json_entity(report: _Report, label: str, node: Any, group: Optional[str] = None,
                 ident: Optional[str] = None) -> None:
    if group is not None and ident in _LEGACY_KEYS and isinstance(node, Mapping) \
            and _LEGACY_KEYS[ident] == _health_of(node.get("value")):
        children = node.get("children")
        errors = children.get("Errors") if isinstance(children, Mapping) else None
        if not (isinstance(errors, Mapping) and isinstance(errors.get("children"), Mapping) and errors["children"]):
            label = f"{group} ?"  # older dcgmi keyed the entity by its health code and lost its id
            report.problem(f"{group} entity keyed {ident}: the health code of an older dcgmi, not an entity id")
    if not isinstance(node, Mapping):
        report.problem(f"{label}: entity is {type(node).__name__}, not an object")
        report.add(label, None, UNKNOWN, [])
        return
    health = _health_of(node.get("value"))
    if health == UNKNOWN:
        report.problem(f"{label}: health {show(node.get('value'))} not recognised")
    children = node.get("children")
    errors = children.get("Errors") if isinstance(children, Mapping) else None
    systems = errors.get("children") if isinstance(errors, Mapping) else None
    worst_system: Optional[str] = None
    if isinstance(errors, Mapping) and errors.get("value") not in ("", None):  # never set by dcgmi
        worst_system = _health_of(errors["value"])
        report.add(label, None, worst_system, [])
    if isinstance(systems, Mapping):
        for name, sub in systems.items():
            system = _system_of(name)
            if not isinstance(sub, Mapping):
                report.problem(f"{label} {system}: not an object")
                report.add(label, system, UNKNOWN, [])
                worst_system = _worse(worst_system, UNKNOWN)
                continue
            sys_health = _health_of(sub.get("value"))
            if sys_health == UNKNOWN:
                report.problem(f"{label} {system}: health {show(sub.get('value'))} not recognised")
            report.add(label, system, sys_health, _overflow_text(sub, f"{label} {system}", report))
            worst_system = _worse(worst_system, sys_health)
    elif systems is not None or (errors is not None and not isinstance(errors, Mapping)):
        report.problem(f"{label}: Errors unreadable")
        worst_system = UNKNOWN
        report.add(label, None, UNKNOWN, [])
    if worst_system is None or _SEVERITY[health] > _SEVERITY[worst_system]:
        report.add(label, None, health, _overflow_text(node, label, report))


def _json_report(doc: Any, report: _Report, nested_candidate: bool) -> bool:
    """Walk one decoded document. True when it is a health check report."""
    if not isinstance(doc, Mapping):
        return False
    body = doc.get("body")
    header = doc.get("header")
    is_report = isinstance(header, list) and any(isinstance(h, str) and "health monitor report" in h.lower()
                                                 for h in header[:8])
    if isinstance(body, Mapping) and "Overall Health" in body:
        is_report = True
    if not is_report or (nested_candidate and not isinstance(body, Mapping)):
        return False
    if not isinstance(body, Mapping):
        report.problem("report has no body")
        return True
    for key, node in body.items():
        name = clip_message(key)[:40]
        if key == "Overall Health":
            raw = node.get("value") if isinstance(node, Mapping) else node
            report.overall = _health_of(raw)
            if report.overall == UNKNOWN:
                report.problem(f"Overall Health {show(raw)} not recognised")
        elif isinstance(node, Mapping) and isinstance(node.get("children"), Mapping):
            if "value" in node and node["value"] not in ("", None):  # dcgmi sets none on a group: read it anyway
                report.add(name, None, _health_of(node["value"]), [])
            for ident, child in node["children"].items():
                _json_entity(report, f"{name} {clip_message(ident)[:16]}", child, name, ident)
        else:  # dcgmi writes no other section: read it as an entity ("GPU ID: 0": {"value": ...}), never skip it
            _json_entity(report, name, node)
    return True


_ROW_RE = re.compile(r"^\|\s(?P<left>[^|]*?)\s*\|\s?(?P<right>[^|]*?)\s*\|\s*$")
_LEVEL_RE = re.compile(r"^(?P<indent> *)-> (?P<label>.*)$")


def _parse_text(text: str, report: _Report) -> bool:
    """The DcgmiOutputTree table: ``| Overall Health | W |``, ``| GPU |``, ``| -> 0 | W |``,
    ``|    -> Errors |``, ``|       -> PCIe system | W |`` and message rows with an empty label."""
    group: Optional[str] = None
    entity: Optional[Dict[str, Any]] = None
    system: Optional[Dict[str, Any]] = None
    entities: List[Dict[str, Any]] = []
    found = False
    for number, line in enumerate(text.splitlines()):
        if number >= MAX_LINES:
            report.problem(f"text output longer than {MAX_LINES} lines: rest ignored")
            break
        row = _ROW_RE.match(line.rstrip())
        if not row:
            continue
        left, right = row.group("left"), row.group("right").strip()
        label = left.strip()
        if label == "Health Monitor Report" and not right:
            found = True
            continue
        level = _LEVEL_RE.match(left)
        depth = (len(level.group("indent")) // 3 + 1) if level else 0
        name = level.group("label").strip() if level else label
        if not label:
            target = system if system is not None else entity
            if target is not None and right:
                target["chunks"].append(right)
            continue
        if depth == 0:
            entity = system = None
            if name == "Overall Health":
                found = True
                report.overall = _health_of(right)
                if report.overall == UNKNOWN:
                    report.problem(f"Overall Health {show(right)} not recognised")
                group = None
            else:
                group = clip_message(name)[:40]
        elif depth == 1:
            entity = {"label": f"{group or 'entity'} {clip_message(name)[:16]}", "value": right, "systems": [],
                      "chunks": []}
            entities.append(entity)
            system = None
        elif depth == 3 and entity is not None:
            system = {"name": name, "value": right, "chunks": []}
            entity["systems"].append(system)
        elif depth != 2:
            report.problem(f"unexpected row {show(label)}")
    for item in entities:
        node = {"value": item["value"], "overflow": item["chunks"], "children": {"Errors": {"children": {
            s["name"]: {"value": s["value"], "overflow": s["chunks"]} for s in item["systems"]}}}}
        if not item["systems"]:
            node.pop("children")
        _json_entity(report, item["label"], node)
    return found


def _as_text(value: Any, what: str, report: _Report) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        report.problem(f"{what} is {type(value).__name__}, not text")
        return ""
    if len(value) > MAX_INPUT_CHARS:
        report.problem(f"{what} longer than {MAX_INPUT_CHARS} characters: cut there")
        value = value[:MAX_INPUT_CHARS]
    return value


def _error_line(text: str) -> Optional[str]:
    """dcgmi's own error line (``Error: Health watches not enabled. ...``), if it printed one."""
    for line in text.splitlines()[:200]:
        stripped = line.strip()
        if stripped.lower().startswith("error") or " -- " in stripped:
            return clip_message(stripped)
    return None


def parse_dcgm_health(text: Any) -> Dict[str, Any]:
    """Parse ``dcgmi health -c -j`` output (JSON; the text table as a fallback); never raises.

    Returns ``{overall, entities, problems, format, error}``: *overall* is PASS, WARN, FAIL,
    UNKNOWN (a word kiln does not know) or None (no ``Overall Health`` found); *entities* holds one
    record per entity and system, ``{"entity": "GPU 0", "system": "memory", "health": "FAIL",
    "messages": [...]}`` (``system`` None for an entity's own value when no system explains it);
    *problems* lists what could not be read; *format* is json, text or none; *error* is the first
    ``Error...`` line dcgmi printed (no watches set, host engine unreachable), else None.
    """
    report = _Report()
    fmt = "none"
    error: Optional[str] = None
    try:
        out = _as_text(text, "output", report)
        decoder = json.JSONDecoder()
        for number, start in enumerate(json_starts(out)):
            try:
                doc, _end = decoder.raw_decode(out, start)
            except (ValueError, RecursionError):
                continue
            if _json_report(doc, report, nested_candidate=number > 0):
                fmt = "json"
                break
        if fmt == "none":
            if '"body"' in out or '"Overall Health"' in out:
                report.problem("JSON output could not be decoded (truncated or malformed)")
            if _parse_text(out, report):
                fmt = "text"
        if fmt != "none" and report.overall is None:
            report.problem("no Overall Health in the report")
        if report.dropped and report.dropped_worst is not None:
            report.problem(f"more than {MAX_ENTITIES} entity records: the rest summed up in the last one")
            report.entities[-1] = {"entity": f"{report.dropped + 1} more records", "system": None, "messages": [],
                                   "health": _worse(report.dropped_worst, report.entities[-1]["health"])}
        if fmt == "none":
            error = _error_line(out)
            first = next((line.strip() for line in out.splitlines() if line.strip()), "")
            report.problem(error or (("unrecognised output: " + clip_message(first)) if first else "no output"))
        overall = report.overall
        for item in report.entities:
            if overall == PASS and item["health"] in (WARN, FAIL):
                report.problem(f"Overall Health is Healthy but {item['entity']}"
                               f"{' ' + item['system'] if item['system'] else ''} reports {item['health']}")
                break
        return {"overall": overall, "entities": report.entities, "problems": report.problems[:MAX_PROBLEMS],
                "format": fmt, "error": error}
    except Exception as exc:  # noqa: BLE001 - documented: never raises on any input
        report.problem(f"parser error: {type(exc).__name__}")
        return {"overall": None, "entities": [], "problems": report.problems[:MAX_PROBLEMS], "format": "none",
                "error": None}


def _rc_text(rc: Any) -> str:
    if is_int(rc):
        meaning = HEALTH_RC.get(rc)
        return f"rc {rc}" + (f" ({meaning})" if meaning and rc else "")
    return "rc unknown" if rc is None else f"rc {show(rc)} (not an integer)"


def _name(item: Mapping[str, Any]) -> str:
    return item["entity"] + (f" {item['system']}" if item.get("system") else "")


def _why_not_run(error: Optional[str]) -> str:
    low = (error or "").lower()
    if "not enabled" in low or "enable watches" in low:
        return "health watches not set (run `dcgmi health -s a` first)"
    if "connect" in low or "host engine" in low:
        return "host engine not reachable (nv-hostengine not running?)"
    return ""


def dcgm_health_check(run: Optional[Mapping[str, Any]], present: bool,
                      artifact: Optional[str] = None) -> Dict[str, Any]:
    """Verdict for one ``dcgmi health -c -j`` run: check ``dcgm.health``.

    *run* is ``{rc, stdout, stderr}`` (``timed_out`` optional) or None when it did not run;
    *present* says whether DCGM (dcgmi and a host engine) is installed. In order: not present
    -> SKIP; any entity or the overall health Failure -> FAIL (whatever the rc, naming the entity,
    the system and the first message); no run, a non-zero rc (no watches set: dcgmi exits 253,
    host engine unreachable: 235), a timeout, no report, no ``Overall Health`` or a health word
    kiln does not know -> INCOMPLETE naming why; a Warning anywhere -> WARN; else PASS.

    Contradictions are judged by the worst word: ``Overall Health: Healthy`` beside an entity
    Failure is FAIL (DCGM derives the overall from the incidents, so the entity is the evidence)
    and beside a Warning is WARN; the record's ``problems`` names the contradiction. A check
    within about 60 s of ``dcgmi health -s`` can pass on too few samples (DCGM's note); the
    watches' age is not in the output.
    """
    cid = CHECK_ID
    empty: Dict[str, Any] = {"artifact": artifact, "overall": None, "entities": [], "problems": [],
                             "parse_format": None, "rc": None}
    if not present:
        return kiln_verdict.make_check(cid, SKIP, detail="DCGM not installed (no dcgmi or nv-hostengine)", **empty)
    head = "dcgmi health -c -j"
    if not isinstance(run, Mapping):
        return kiln_verdict.make_check(cid, INCOMPLETE, detail=f"{head} did not run", **empty)
    rc = run.get("rc")
    parsed = parse_dcgm_health(run.get("stdout"))
    err_text = run.get("stderr")
    stderr_error = _error_line(err_text) if isinstance(err_text, str) else None
    entities = parsed["entities"]
    fields: Dict[str, Any] = {"artifact": artifact, "overall": parsed["overall"], "entities": entities,
                              "problems": parsed["problems"], "parse_format": parsed["format"],
                              "rc": rc if is_int(rc) else None}

    failed: List[Tuple[str, List[str]]] = [(_name(e), e["messages"]) for e in entities if e["health"] == FAIL]
    if failed or parsed["overall"] == FAIL:
        if failed:
            parts = [n + (f": {m[0]}" if m else "") for n, m in failed[:8]]
            more = f" (+{len(failed) - 8} more)" if len(failed) > 8 else ""
            detail = f"{head}: Failure: " + "; ".join(parts) + more
        else:
            detail = f"{head}: Overall Health Failure, no entity named"
        if parsed["overall"] == PASS:
            detail += " (although Overall Health says Healthy)"
        return kiln_verdict.make_check(cid, FAIL, detail=detail, **fields)

    reasons: List[str] = []
    if run.get("timed_out"):
        reasons.append("timed out")
    if not (is_int(rc) and rc == 0):
        why = _why_not_run(parsed["error"] or stderr_error)
        reasons.append(_rc_text(rc) + (f": {why}" if why else "")
                       + (f" [{parsed['error'] or stderr_error}]" if parsed["error"] or stderr_error else ""))
    if parsed["format"] == "none":
        if is_int(rc) and rc == 0:
            why = _why_not_run(parsed["error"] or stderr_error)
            reasons.append("no health report: " + (f"{why}: " if why else "") + "; ".join(parsed["problems"][:3]))
    elif parsed["overall"] is None:
        reasons.append("no Overall Health in the report")
    unknown = [_name(e) for e in entities if e["health"] == UNKNOWN]
    if parsed["overall"] == UNKNOWN:
        unknown.insert(0, "Overall Health")
    if unknown:
        reasons.append("health not recognised for " + ", ".join(unknown[:8]))
    if reasons:
        return kiln_verdict.make_check(cid, INCOMPLETE, detail=f"{head}: " + "; ".join(reasons), **fields)
    warned = [e for e in entities if e["health"] == WARN]
    if warned or parsed["overall"] == WARN:
        parts = [_name(e) + (f": {e['messages'][0]}" if e["messages"] else "") for e in warned[:8]]
        detail = f"{head}: Warning: " + ("; ".join(parts) if parts else "Overall Health Warning, no entity named")
        if parsed["overall"] == PASS:
            detail += " (although Overall Health says Healthy)"
        return kiln_verdict.make_check(cid, WARN, detail=detail, **fields)
    return kiln_verdict.make_check(cid, PASS, detail=f"{head}: Overall Health Healthy, no incident", **fields)
