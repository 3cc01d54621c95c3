# -*- coding: utf-8 -*-
"""Burn-in report writers: summary.json, summary.md, JUnit XML, Prometheus textfile, SVG.

Pure functions that return strings, plus :func:`write_reports` which writes
them into a results directory.  Standard library only; importable as
``kiln.burnin.report`` and as ``ansible.module_utils.kiln.burnin.report``.

summary.json follows the versioned schema ``kiln.burnin/v1``
(data/burnin_summary.schema.json, described in docs/burnin-format.md).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import xml.etree.ElementTree as ET
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..verdict import (
    EXIT_CODES, FAIL, INCOMPLETE, PASS, SKIP, STATUSES, WARN, aggregate_node, aggregate_overall,
)

__all__ = [
    "SCHEMA",
    "build_summary",
    "render_json",
    "render_junit",
    "render_markdown",
    "render_prometheus",
    "render_svg",
    "validate_summary",
    "write_reports",
]

SCHEMA = "kiln.burnin/v1"
_STATUS_VALUE = {PASS: 0, WARN: 1, FAIL: 2, INCOMPLETE: 3, SKIP: -1}
_FINGERPRINT_KEYS = ("driver", "cuda", "nccl", "nccl_tests", "dcgm", "ofed", "env_sha256")


def build_summary(run_id: str, mode: str, nodes: Mapping[str, Any], fabric: Sequence[Mapping[str, Any]] = (),
                  fingerprint: Optional[Mapping[str, Any]] = None, **extra: Any) -> Dict[str, Any]:
    """Assemble a ``kiln.burnin/v1`` summary and compute node and overall verdicts.

    *nodes* maps a node name to a list of checks or to a dict with ``checks``
    (and optionally ``action``, ``gpu_sku``, ``fabric``).  Extra keyword
    arguments (``engine``, ``started``, ``finished``, ``nccl_env``, ``scope``,
    ``results_dir``) are stored at the top level.
    """
    out_nodes: Dict[str, Any] = {}
    for name, record in nodes.items():
        record = {"checks": list(record)} if isinstance(record, (list, tuple)) else dict(record)
        checks = [dict(c) for c in record.get("checks") or []]
        record["checks"] = checks
        record.update(aggregate_node(checks))
        out_nodes[str(name)] = record
    fabric_checks = [dict(c) for c in fabric]
    finger = {key: None for key in _FINGERPRINT_KEYS}
    finger.update(fingerprint or {})
    summary: Dict[str, Any] = {
        "schema": SCHEMA,
        "run_id": str(run_id),
        "mode": str(mode),
        "fingerprint": finger,
        "nodes": out_nodes,
        "fabric": fabric_checks,
        "overall": aggregate_overall(out_nodes, fabric_checks),
    }
    for key, value in extra.items():
        summary[key] = value
    return summary


def validate_summary(summary: Any) -> List[str]:
    """Structural checks matching data/burnin_summary.schema.json (stdlib; no jsonschema needed)."""
    errors: List[str] = []
    if not isinstance(summary, Mapping):
        return ["summary is not an object"]
    if summary.get("schema") != SCHEMA:
        errors.append(f"schema must be {SCHEMA!r}, got {summary.get('schema')!r}")
    for key, kind in (("run_id", str), ("mode", str), ("fingerprint", Mapping), ("nodes", Mapping),
                      ("fabric", list), ("overall", Mapping)):
        if not isinstance(summary.get(key), kind):
            errors.append(f"{key}: missing or not a {kind.__name__}")
    if errors:
        return errors

    def check_list(where: str, checks: Any) -> None:
        if not isinstance(checks, list):
            errors.append(f"{where}: checks must be a list")
            return
        for index, check in enumerate(checks):
            if not isinstance(check, Mapping) or not isinstance(check.get("id"), str):
                errors.append(f"{where}[{index}]: check without an id")
                continue
            if check.get("status") not in STATUSES:
                errors.append(f"{where}[{index}] {check['id']}: bad status {check.get('status')!r}")
            for num in ("value", "floor"):
                if check.get(num) is not None and not isinstance(check.get(num), (int, float)):
                    errors.append(f"{where}[{index}] {check['id']}: {num} must be a number or null")

    for name, node in summary["nodes"].items():
        if not isinstance(node, Mapping):
            errors.append(f"nodes.{name}: not an object")
            continue
        if node.get("status") not in STATUSES:
            errors.append(f"nodes.{name}: bad status {node.get('status')!r}")
        check_list(f"nodes.{name}.checks", node.get("checks"))
    check_list("fabric", summary["fabric"])
    overall = summary["overall"]
    if not isinstance(overall.get("status"), str) or overall.get("status") not in EXIT_CODES:
        errors.append(f"overall.status must be one of {sorted(EXIT_CODES)}, got {overall.get('status')!r}")
    elif overall.get("exit") != EXIT_CODES[overall["status"]]:
        errors.append(f"overall.exit {overall.get('exit')!r} does not match status {overall['status']}")
    return errors


def _finite_json(value: Any) -> Any:
    """Replace non-finite floats by null (JSON has no NaN/Infinity; the check's detail names the value)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def render_json(summary: Mapping[str, Any]) -> str:
    """summary.json text (2-space indent, trailing newline; strict JSON, never NaN/Infinity)."""
    return json.dumps(_finite_json(summary), indent=2, sort_keys=False, allow_nan=False) + "\n"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(summary: Mapping[str, Any]) -> str:
    """The table a person reads (also printed at the end of the play)."""
    finger = summary.get("fingerprint") or {}
    overall = summary.get("overall") or {}
    parts = [f"NCCL {finger.get('nccl') or '?'}", f"nccl-tests {finger.get('nccl_tests') or '?'}",
             f"driver {finger.get('driver') or '?'}"]
    lines = [
        f"# Burn-in {summary.get('run_id')}",
        "",
        f"mode={summary.get('mode')}  engine={summary.get('engine', 'nccl-tests')}  " + " / ".join(parts),
        "",
        "| Node | Status | Failed / warned checks |",
        "|---|---|---|",
    ]
    for name, node in sorted((summary.get("nodes") or {}).items()):
        bad = [c for c in node.get("checks") or [] if c.get("status") in (FAIL, WARN, INCOMPLETE)]
        text = "; ".join(
            f"{c['id']} {c['status']}" + (f" ({_fmt(c.get('value'))} < {_fmt(c.get('floor'))})"
                                           if c.get("value") is not None and c.get("floor") is not None
                                           and c["value"] < c["floor"] else "")
            for c in bad
        ) or "-"
        lines.append(f"| {_md(name)} | {node.get('status')} | {_md(text)} |")
    lines += ["", "| Node | Check | Status | Metric | Value | Floor | Unit | Detail |", "|---|---|---|---|---|---|---|---|"]
    for name, node in sorted((summary.get("nodes") or {}).items()):
        for check in node.get("checks") or []:
            lines.append(
                f"| {_md(name)} | {_md(check['id'])} | {check['status']} | {_md(check.get('metric') or '-')} | "
                f"{_fmt(check.get('value'))} | {_fmt(check.get('floor'))} | {_md(check.get('unit') or '-')} | "
                f"{_md(check.get('detail') or '')} |"
            )
    fabric = summary.get("fabric") or []
    if fabric:
        lines += ["", "| Fabric check | Nodes | Ranks | Status | Value | Floor | Reference | Detail |",
                  "|---|---|---|---|---|---|---|---|"]
        for check in fabric:
            ref = check.get("reference") or {}
            ref_text = "-"
            if ref.get("value") is not None:
                ref_text = f"{ref.get('metric', 'link')} {_fmt(ref.get('value'))} {ref.get('unit', '')}".strip()
                if ref.get("ratio") is not None:
                    ref_text += f" (ratio {ref['ratio']:.2f})"
            nodes = check.get("nodes")
            node_count = len(nodes) if isinstance(nodes, list) else nodes
            lines.append(
                f"| {_md(check['id'])} | {_fmt(node_count)} | {_fmt(check.get('ranks'))} | {check['status']} | "
                f"{_fmt(check.get('value'))} | {_fmt(check.get('floor'))} | {_md(ref_text)} | "
                f"{_md(check.get('detail') or '')} |"
            )
    pairs = summary.get("pairs") or {}
    if pairs.get("results"):
        lines += ["", f"Pair phase: {pairs.get('rounds')} round(s)" + "".join(f"; {n}" for n in pairs.get("notes") or []),
                  "", "| Round | Pair | Status | busbw | Reference | Why |", "|---|---|---|---|---|---|"]
        for result in pairs["results"]:
            ref = result.get("reference") or {}
            lines.append(f"| {result.get('round')} | {_md(' + '.join(result.get('pair') or []))} | "
                         f"{result.get('status')} | {_fmt(result.get('value'))} | {_fmt(ref.get('value'))} | "
                         f"{_md(result.get('why') or '')} |")
    actions = summary.get("actions")
    if actions is not None:
        lines += ["", "| Action | Node | Reason | Why |", "|---|---|---|---|"]
        for action in actions:
            lines.append(f"| {action.get('action')} | {_md(action.get('node'))} | {_md(action.get('reason') or '-')} | "
                         f"{_md(action.get('why') or '')} |")
        if not actions:
            lines.append("| none | - | - | no node to drain, resume or restore |")
    lines += [
        "",
        f"RESULT: {overall.get('status')} (exit {overall.get('exit')})  passed={overall.get('passed', 0)} "
        f"warned={overall.get('warned', 0)} failed={overall.get('failed', 0)} "
        f"incomplete={overall.get('incomplete', 0)}"
        + (f"  artifacts: {summary['results_dir']}" if summary.get("results_dir") else ""),
        "",
    ]
    return "\n".join(lines)


def render_junit(summary: Mapping[str, Any]) -> str:
    """JUnit XML: one testsuite per node (and one for the fabric), one testcase per check.

    FAIL -> <failure>, INCOMPLETE -> <error>, SKIP -> <skipped>, WARN -> passed
    with the warning in <system-out>.
    """
    root = ET.Element("testsuites", name=f"kiln-burnin {summary.get('run_id')}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    suites = [(f"node {name}", f"burnin.{name}", node.get("checks") or [])
              for name, node in sorted((summary.get("nodes") or {}).items())]
    if summary.get("fabric"):
        suites.append(("fabric", "burnin.fabric", summary["fabric"]))
    for suite_name, classname, checks in suites:
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        suite = ET.SubElement(root, "testsuite", name=suite_name)
        for check in checks:
            counts["tests"] += 1
            case = ET.SubElement(suite, "testcase", classname=classname, name=str(check["id"]))
            if check.get("duration_s") is not None:
                case.set("time", f"{float(check['duration_s']):.3f}")
            message = check.get("detail") or check["status"]
            status = check["status"]
            if status == FAIL:
                counts["failures"] += 1
                node = ET.SubElement(case, "failure", message=str(message)[:500], type="FAIL")
                node.text = _case_text(check)
            elif status == INCOMPLETE:
                counts["errors"] += 1
                node = ET.SubElement(case, "error", message=str(message)[:500], type="INCOMPLETE")
                node.text = _case_text(check)
            elif status == SKIP:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=str(message)[:500])
            elif status == WARN:
                ET.SubElement(case, "system-out").text = "WARN: " + _case_text(check)
            else:
                ET.SubElement(case, "system-out").text = _case_text(check)
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _case_text(check: Mapping[str, Any]) -> str:
    parts = [f"status={check.get('status')}"]
    for key in ("metric", "value", "floor", "unit", "floor_confidence", "artifact"):
        if check.get(key) is not None:
            parts.append(f"{key}={check[key]}")
    if check.get("detail"):
        parts.append(f"detail={check['detail']}")
    return " ".join(parts)


_METRIC_HELP = {
    "kiln_burnin_info": ("gauge", "kiln burn-in run information (value is always 1)"),
    "kiln_burnin_overall_status": ("gauge", "Overall burn-in verdict: 0 pass, 1 warn, 2 fail, 3 incomplete"),
    "kiln_burnin_last_run_timestamp_seconds": ("gauge", "Unix time when the burn-in report was written"),
    "kiln_burnin_node_status": ("gauge", "Node burn-in verdict: 0 pass, 1 warn, 2 fail, 3 incomplete"),
    "kiln_burnin_check_status": ("gauge", "Check verdict: 0 pass, 1 warn, 2 fail, 3 incomplete, -1 skipped"),
    "kiln_burnin_check_value": ("gauge", "Measured value of a burn-in check (unit in the unit label)"),
    "kiln_burnin_check_floor": ("gauge", "Floor a burn-in check is judged against (unit in the unit label)"),
}
_LABEL_NAME = re.compile(r"[^a-zA-Z0-9_]")


def _label_value(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample(name: str, labels: Mapping[str, Any], value: float) -> str:
    inner = ",".join(f'{_LABEL_NAME.sub("_", k)}="{_label_value(v)}"' for k, v in labels.items())
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        text = "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    else:
        text = repr(float(value)) if isinstance(value, float) else str(int(value))
    return f"{name}{{{inner}}} {text}" if inner else f"{name} {text}"


def render_prometheus(summary: Mapping[str, Any], node: Optional[str] = None,
                      timestamp: Optional[float] = None) -> str:
    """Prometheus textfile-collector exposition (``kiln_burnin_*`` gauges).

    With *node*, only that node's series (plus run-level series) are written:
    the file for that node's node-exporter textfile directory.
    """
    samples: Dict[str, List[str]] = {name: [] for name in _METRIC_HELP}
    overall = summary.get("overall") or {}
    samples["kiln_burnin_info"].append(_sample("kiln_burnin_info", {
        "run_id": summary.get("run_id"), "mode": summary.get("mode"), "schema": summary.get("schema", SCHEMA)}, 1))
    if overall.get("status") in _STATUS_VALUE:
        samples["kiln_burnin_overall_status"].append(
            _sample("kiln_burnin_overall_status", {}, _STATUS_VALUE[overall["status"]]))
    if timestamp is not None:
        samples["kiln_burnin_last_run_timestamp_seconds"].append(
            _sample("kiln_burnin_last_run_timestamp_seconds", {}, float(timestamp)))
    for name, record in sorted((summary.get("nodes") or {}).items()):
        if node is not None and name != node:
            continue
        samples["kiln_burnin_node_status"].append(
            _sample("kiln_burnin_node_status", {"node": name}, _STATUS_VALUE[record["status"]]))
        _check_samples(samples, name, record.get("checks") or [])
    fabric_node = "fabric"
    if node is None or any(node in (c.get("nodes") or []) for c in summary.get("fabric") or []
                           if isinstance(c.get("nodes"), list)):
        _check_samples(samples, fabric_node, summary.get("fabric") or [])
    out: List[str] = []
    for name, lines in samples.items():
        if not lines:
            continue
        kind, text = _METRIC_HELP[name]
        out.append(f"# HELP {name} {text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(lines)
    return "\n".join(out) + "\n"


def _check_samples(samples: Dict[str, List[str]], node: str, checks: Sequence[Mapping[str, Any]]) -> None:
    for check in checks:
        labels = {"node": node, "check": check["id"]}
        samples["kiln_burnin_check_status"].append(
            _sample("kiln_burnin_check_status", labels, _STATUS_VALUE[check["status"]]))
        unit = check.get("unit") or ""
        if isinstance(check.get("value"), (int, float)) and not isinstance(check.get("value"), bool):
            samples["kiln_burnin_check_value"].append(_sample(
                "kiln_burnin_check_value", dict(labels, metric=check.get("metric") or "", unit=unit),
                float(check["value"])))
        if isinstance(check.get("floor"), (int, float)) and not isinstance(check.get("floor"), bool):
            samples["kiln_burnin_check_floor"].append(
                _sample("kiln_burnin_check_floor", dict(labels, unit=unit), float(check["floor"])))


_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _size_label(size: float) -> str:
    for suffix, factor in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= factor:
            return f"{size / factor:g}{suffix}"
    return f"{size:g}"


def _esc(text: Any) -> str:
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def render_svg(series_by_node: Mapping[str, Sequence[Mapping[str, Any]]], floor: Optional[float] = None,
               title: str = "all_reduce busbw", unit: str = "GB/s", width: int = 720, height: int = 420) -> str:
    """Hand-written SVG: busbw (lower of out-of-place/in-place) vs message size, one line per node.

    *series_by_node* maps node -> [{"size": bytes, "busbw_oop": x, "busbw_ip": y}, ...]
    (the ``series`` field of a judged check).  The floor is a dashed red line.
    """
    left, right, top, bottom = 64, 150, 36, 48
    plot_w, plot_h = width - left - right, height - top - bottom
    points: Dict[str, List[tuple]] = {}
    for node, series in series_by_node.items():
        pts = []
        for point in series:
            values = [v for v in (point.get("busbw_oop"), point.get("busbw_ip")) if v is not None]
            if point.get("size") and values:
                pts.append((float(point["size"]), min(values)))
        if pts:
            points[str(node)] = sorted(pts)
    sizes = [p[0] for pts in points.values() for p in pts] or [1.0, 2.0]
    ymax = max([p[1] for pts in points.values() for p in pts] + [floor or 0.0, 1e-9]) * 1.1
    xmin, xmax = math.log2(min(sizes)), math.log2(max(sizes))
    if xmax - xmin < 1e-9:
        xmin, xmax = xmin - 1, xmax + 1

    def sx(size: float) -> float:
        return left + (math.log2(size) - xmin) / (xmax - xmin) * plot_w

    def sy(value: float) -> float:
        return top + plot_h - value / ymax * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f"<title>{_esc(title)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="20" font-size="14">{_esc(title)}</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="black"/>',
    ]
    for i in range(6):
        value = ymax / 1.1 * i / 5
        y = sy(value)
        out.append(f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{value:.3g}</text>')
    step = max(1, int(math.ceil((xmax - xmin) / 10)))
    exp = math.ceil(xmin)
    while exp <= xmax + 1e-9:
        x = sx(2.0 ** exp)
        out.append(f'<line x1="{x:.1f}" y1="{top + plot_h}" x2="{x:.1f}" y2="{top + plot_h + 4}" stroke="black"/>')
        out.append(f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{_size_label(2.0 ** exp)}</text>')
        exp += step
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 10}" text-anchor="middle">message size (bytes, log2)</text>')
    out.append(f'<text x="14" y="{top + plot_h / 2:.1f}" transform="rotate(-90 14 {top + plot_h / 2:.1f})" '
               f'text-anchor="middle">busbw ({_esc(unit)})</text>')
    if floor is not None:
        y = sy(float(floor))
        out.append(f'<line class="floor" x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" '
                   f'stroke="#d62728" stroke-width="1.5" stroke-dasharray="6 4"/>')
        out.append(f'<text x="{left + plot_w + 4}" y="{y + 4:.1f}" fill="#d62728">floor {float(floor):g}</text>')
    for index, (node, pts) in enumerate(sorted(points.items())):
        color = _PALETTE[index % len(_PALETTE)]
        coords = " ".join(f"{sx(s):.1f},{sy(v):.1f}" for s, v in pts)
        out.append(f'<polyline class="node" data-node="{_esc(node)}" fill="none" stroke="{color}" '
                   f'stroke-width="1.5" points="{coords}"/>')
        ly = top + 14 + index * 16
        out.append(f'<line x1="{left + plot_w + 8}" y1="{ly}" x2="{left + plot_w + 24}" y2="{ly}" stroke="{color}" '
                   f'stroke-width="2"/>')
        out.append(f'<text x="{left + plot_w + 28}" y="{ly + 4}">{_esc(node)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _plots(summary: Mapping[str, Any]) -> Dict[str, str]:
    """One SVG per check id that carries a busbw series (node checks and fabric checks)."""
    by_check: Dict[str, Dict[str, Any]] = {}
    for name, node in (summary.get("nodes") or {}).items():
        for check in node.get("checks") or []:
            if check.get("series"):
                entry = by_check.setdefault(check["id"], {"series": {}, "floor": check.get("floor"),
                                                          "unit": check.get("unit") or "GB/s"})
                entry["series"][name] = check["series"]
    for check in summary.get("fabric") or []:
        if check.get("series"):
            entry = by_check.setdefault(check["id"], {"series": {}, "floor": check.get("floor"),
                                                      "unit": check.get("unit") or "GB/s"})
            entry["series"]["fabric"] = check["series"]
    plots = {}
    for check_id, entry in sorted(by_check.items()):
        filename = "busbw-" + re.sub(r"[^A-Za-z0-9_.-]", "_", check_id) + ".svg"
        plots[filename] = render_svg(entry["series"], entry["floor"], title=f"{check_id}: busbw vs size",
                                     unit=entry["unit"])
    return plots


def _write_atomic(path: str, text: str) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_reports(summary: Mapping[str, Any], outdir: str, timestamp: Optional[float] = None) -> Dict[str, str]:
    """Write every report into *outdir*; return {logical name: path}.

    Files: summary.json, summary.md, junit.xml, metrics/kiln_burnin.prom (all
    nodes), metrics/<node>.prom (one per node, for its textfile directory) and
    plots/busbw-<check>.svg.  Writes are atomic (temp file + rename) so a
    textfile collector never reads a half-written file.
    """
    errors = validate_summary(summary)
    if errors:
        raise ValueError("invalid burn-in summary: " + "; ".join(errors))
    written: Dict[str, str] = {}

    def put(name: str, relpath: str, text: str) -> None:
        path = os.path.join(outdir, relpath)
        _write_atomic(path, text)
        written[name] = path

    put("summary.json", "summary.json", render_json(summary))
    put("summary.md", "summary.md", render_markdown(summary))
    put("junit.xml", "junit.xml", render_junit(summary))
    put("metrics", os.path.join("metrics", "kiln_burnin.prom"), render_prometheus(summary, timestamp=timestamp))
    for node in sorted(summary.get("nodes") or {}):
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", node)
        put(f"metrics:{node}", os.path.join("metrics", f"{safe}.prom"),
            render_prometheus(summary, node=node, timestamp=timestamp))
    for filename, text in _plots(summary).items():
        put(f"plot:{filename}", os.path.join("plots", filename), text)
    return written
