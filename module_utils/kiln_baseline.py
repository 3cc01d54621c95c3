# -*- coding: utf-8 -*-
"""Per-node burn-in history and baselines, kept on the Ansible controller.

One append-only JSON-lines file per node, ``<state_dir>/<node>.jsonl``: every
burn-in appends one record and nothing is ever rewritten, so the history of a
node survives repairs, version upgrades and re-runs::

  {"run_id": "...", "finished": "...", "mode": "swap", "status": "PASS",
   "fingerprint": {"driver": "...", ...}, "fingerprint_id": "3f2a...",
   "values": {"pair": 0.71, "single_node": null}}

A node's *baseline* for a test is the median of its last *window* passing
(PASS or WARN) values recorded under the same version fingerprint. The first
clean run creates it; after a fingerprint change the old values stop
counting and the report says so. *Known-good* nodes are those whose last
record passed: the swap mode's partners.

Standard library only; importable as ``kiln_baseline`` and as
``ansible.module_utils.kiln_baseline``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
from typing import Any, Dict, Iterable, List, Mapping, Optional

PASSING = ("PASS", "WARN")
_FILE_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def fingerprint_id(fingerprint: Optional[Mapping[str, Any]]) -> str:
    """Short stable hash of the version fingerprint (keys sorted, None kept)."""
    text = json.dumps(dict(fingerprint or {}), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def node_file(state_dir: str, node: str) -> str:
    return os.path.join(state_dir, _FILE_SAFE.sub("_", node) + ".jsonl")


def load(state_dir: str, node: str) -> List[Dict[str, Any]]:
    """The node's records, oldest first (a torn last line from a crash is skipped)."""
    path = node_file(state_dir, node)
    if not os.path.exists(path):
        return []
    records = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def append(state_dir: str, node: str, record: Mapping[str, Any]) -> str:
    """Append one record (a single write of one line, flushed and fsynced)."""
    os.makedirs(state_dir, exist_ok=True)
    path = node_file(state_dir, node)
    line = json.dumps(dict(record), sort_keys=True, default=str) + "\n"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
    return path


def baseline(records: Iterable[Mapping[str, Any]], test: str, fingerprint: Optional[str],
             window: int = 5) -> Dict[str, Any]:
    """``{value, runs, note}`` of *test* from the last *window* passing records with *fingerprint*.

    ``value`` is None when there is none yet; ``note`` says why (first run,
    versions changed since the last baseline).
    """
    records = list(records)
    passing = [r for r in records if r.get("status") in PASSING
               and (r.get("values") or {}).get(test) is not None]
    same = [r for r in passing if fingerprint is None or r.get("fingerprint_id") == fingerprint]
    if same:
        values = [float(r["values"][test]) for r in same[-int(window):]]
        return {"value": round(statistics.median(values), 4), "runs": len(values),
                "since": same[-len(values)]["run_id"], "note": None}
    if passing:
        return {"value": None, "runs": 0, "since": None,
                "note": f"versions changed since the last baseline ({passing[-1].get('run_id')}): "
                        "this run starts a new one"}
    return {"value": None, "runs": 0, "since": None, "note": "no baseline yet: this run creates it"}


def known_good(histories: Mapping[str, Iterable[Mapping[str, Any]]], test: Optional[str] = None) -> List[str]:
    """Nodes whose last recorded burn-in passed (PASS or WARN) -- and, with *test*,
    whose last record carrying a value of that test passed too (the network was proven)."""
    good = []
    for node, records in histories.items():
        records = list(records)
        if not records or records[-1].get("status") not in PASSING:
            continue
        if test is not None:
            measured = [r for r in records if (r.get("values") or {}).get(test) is not None]
            if not measured or measured[-1].get("status") not in PASSING:
                continue
        good.append(node)
    return sorted(good)


def record(run_id: str, finished: str, mode: str, status: str, fingerprint: Optional[Mapping[str, Any]],
           values: Mapping[str, Optional[float]]) -> Dict[str, Any]:
    return {"run_id": run_id, "finished": finished, "mode": mode, "status": status,
            "fingerprint": dict(fingerprint or {}), "fingerprint_id": fingerprint_id(fingerprint),
            "values": dict(values)}
