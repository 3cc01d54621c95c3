# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln-health's Prometheus textfile (node-exporter's textfile collector): one file per hook.

Series (docs/health.md "Metrics"; the node is the scrape's ``instance``). Every file carries the
hook-labelled series; only the periodic check's file carries the per-node, per-GPU and per-port
series, so no series appears in two files (node-exporter refuses duplicates).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from .judge import STATUSES

NODE_STATUSES = ("PASS", "WARN", "FAIL", "UNKNOWN")
_HELP = {
    "kiln_health_last_run_timestamp_seconds": "Unix time of the last kiln-health run of this hook.",
    "kiln_health_run_duration_seconds": "Wall time of the last kiln-health run of this hook.",
    "kiln_health_check_status": "One-hot status of each check of the last run (PASS, WARN, FAIL, UNKNOWN, SKIP).",
    "kiln_health_node_status": "One-hot worst status of the last run.",
    "kiln_health_unknown_runs": "Consecutive runs the check could not be judged.",
    "kiln_health_clean_runs": "Consecutive clean periodic runs (no FAIL, no UNKNOWN).",
    "kiln_health_drained": "1 when the node is drained with a HEALTH: reason (as last read from Slurm).",
    "kiln_health_gpu_ecc_volatile_uncorrectable": "Volatile uncorrectable ECC errors per GPU.",
    "kiln_health_gpu_remapped_rows_pending": "1 when a row remap is pending on the GPU.",
    "kiln_health_gpu_remapped_rows_failure": "1 when a row remap failed on the GPU.",
    "kiln_health_gpu_retired_pages": "Retired pages per GPU and cause.",
    "kiln_health_gpu_nvlink_inactive_links": "Inactive NVLinks per GPU.",
    "kiln_health_xid_events": "XID events in the kernel log since the previous run.",
    "kiln_health_ib_port_active": "1 when the RDMA port is ACTIVE and LinkUp.",
    "kiln_health_ib_counter_delta": "Growth of an RDMA port's error counter since the previous run.",
}


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, Any]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: Any) -> Optional[str]:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return None


class _Doc:
    def __init__(self) -> None:
        self.series: Dict[str, List[Tuple[Dict[str, Any], str]]] = {}

    def add(self, name: str, labels: Mapping[str, Any], value: Any) -> None:
        text = _number(value)
        if text is not None:  # a value that is not a finite number is left out, never written as 0
            self.series.setdefault(name, []).append((dict(labels), text))

    def render(self) -> str:
        out = []
        for name, rows in self.series.items():
            out.append(f"# HELP {name} {_HELP[name]}")
            out.append(f"# TYPE {name} gauge")
            out += [f"{name}{_labels(labels)} {value}" for labels, value in rows]
        return "\n".join(out) + "\n"


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _gpu_series(doc: _Doc, gpu: Mapping[str, Any]) -> None:
    for position, entry in enumerate(gpu.get("gpus") or []):
        if not isinstance(entry, Mapping):
            continue
        label = {"gpu": entry.get("index") if _int(entry.get("index")) is not None else position}
        ecc = entry.get("ecc") if isinstance(entry.get("ecc"), Mapping) else {}
        for kind, key in (("sram", "volatile_sram_uncorrectable"), ("dram", "volatile_dram_uncorrectable"),
                          ("total", "volatile_uncorrectable")):
            doc.add("kiln_health_gpu_ecc_volatile_uncorrectable", dict(label, kind=kind), _int(ecc.get(key)))
        rows = entry.get("remapped_rows") if isinstance(entry.get("remapped_rows"), Mapping) else {}
        if rows.get("supported") is True:
            for key in ("pending", "failure"):
                if isinstance(rows.get(key), bool):
                    doc.add(f"kiln_health_gpu_remapped_rows_{key}", label, rows[key])
        pages = entry.get("retired_pages") if isinstance(entry.get("retired_pages"), Mapping) else {}
        for cause in ("single_bit", "double_bit"):
            doc.add("kiln_health_gpu_retired_pages", dict(label, cause=cause), _int(pages.get(cause)))
        nvlink = entry.get("nvlink") if isinstance(entry.get("nvlink"), Mapping) else {}
        if _int(nvlink.get("links")):
            doc.add("kiln_health_gpu_nvlink_inactive_links", label, _int(nvlink.get("inactive")))


def _fabric_series(doc: _Doc, fabric: Mapping[str, Any], deltas: Mapping[str, Mapping[str, Any]]) -> None:
    for hca in fabric.get("hcas") or []:
        if not isinstance(hca, Mapping):
            continue
        for port in hca.get("ports") or []:
            if not isinstance(port, Mapping):
                continue
            name = f"{hca.get('name')}/{port.get('port')}"
            doc.add("kiln_health_ib_port_active", {"port": name},
                    port.get("state") == "ACTIVE" and port.get("phys_state") == "LinkUp")
    for name, counters in sorted(deltas.items()):
        for counter, value in sorted((counters or {}).items()):
            doc.add("kiln_health_ib_counter_delta", {"port": name, "counter": counter}, _int(value))


def counter_deltas(now: Any, before: Any) -> Dict[str, Dict[str, int]]:
    """``{port: {counter: growth}}`` of two counter snapshots (a counter that went down is left out)."""
    out: Dict[str, Dict[str, int]] = {}
    if not isinstance(now, Mapping) or not isinstance(before, Mapping):
        return out
    for port, counters in now.items():
        old = before.get(port)
        if not isinstance(counters, Mapping) or not isinstance(old, Mapping):
            continue
        for name, value in counters.items():
            a, b = _int(value), _int(old.get(name))
            if a is not None and b is not None and a >= b:
                out.setdefault(str(port), {})[str(name)] = a - b
    return out


def render(hook: str, result: Mapping[str, Any], started: float, duration: float,
           streak: Optional[Mapping[str, Any]] = None, drained: Optional[bool] = None,
           snapshot: Optional[Mapping[str, Any]] = None, deltas: Optional[Mapping[str, Any]] = None,
           xids: Iterable[int] = ()) -> str:
    """The textfile of one run (the contract in docs/health.md "Metrics")."""
    doc = _Doc()
    doc.add("kiln_health_last_run_timestamp_seconds", {"hook": hook}, float(int(started)))
    doc.add("kiln_health_run_duration_seconds", {"hook": hook}, round(float(duration), 3))
    for item in result.get("checks") or []:
        for status in STATUSES:
            doc.add("kiln_health_check_status", {"hook": hook, "check": item.get("id"), "status": status},
                    int(item.get("status") == status))
    for status in NODE_STATUSES:
        doc.add("kiln_health_node_status", {"hook": hook, "status": status}, int(result.get("status") == status))
    if hook != "check":
        return doc.render()
    for cid, runs in sorted(((streak or {}).get("unknown_runs") or {}).items()):
        doc.add("kiln_health_unknown_runs", {"check": cid}, _int(runs))
    for item in result.get("checks") or []:
        if item.get("id") not in ((streak or {}).get("unknown_runs") or {}):
            doc.add("kiln_health_unknown_runs", {"check": item.get("id")}, 0)
    doc.add("kiln_health_clean_runs", {}, _int((streak or {}).get("clean_runs")))
    if drained is not None:
        doc.add("kiln_health_drained", {}, bool(drained))
    snap = snapshot or {}
    if isinstance(snap.get("gpu"), Mapping):
        _gpu_series(doc, snap["gpu"])
    counts: Dict[int, int] = {}
    for xid in xids:
        counts[xid] = counts.get(xid, 0) + 1
    for xid, count in sorted(counts.items()):
        doc.add("kiln_health_xid_events", {"xid": xid}, count)
    if isinstance(snap.get("fabric"), Mapping):
        _fabric_series(doc, snap["fabric"], deltas or {})
    return doc.render()
