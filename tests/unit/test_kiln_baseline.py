"""module_utils/kiln_baseline.py: append-only history, baselines, known-good nodes."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "module_utils"))

import kiln_baseline as kb  # noqa: E402

V1 = {"driver": "580.95.05", "nccl": "2.27.7"}
V2 = {"driver": "580.173.02", "nccl": "2.27.7"}


def rec(run, status, pair, versions=V1):
    return kb.record(run, f"2026-11-29T00:0{run[-1]}:00Z", "default", status, versions, {"pair": pair})


def test_history_is_appended_never_rewritten(tmp_path):
    kb.append(str(tmp_path), "gpu/01", rec("r1", "PASS", 1.0))
    kb.append(str(tmp_path), "gpu/01", rec("r2", "FAIL", None))
    path = Path(kb.node_file(str(tmp_path), "gpu/01"))
    assert path.name == "gpu_01.jsonl"
    assert [r["run_id"] for r in kb.load(str(tmp_path), "gpu/01")] == ["r1", "r2"]
    assert len(path.read_text().splitlines()) == 2


def test_torn_last_line_is_skipped(tmp_path):
    kb.append(str(tmp_path), "a", rec("r1", "PASS", 1.0))
    with open(kb.node_file(str(tmp_path), "a"), "a", encoding="utf-8") as handle:
        handle.write('{"run_id": "r2", "sta')
    assert [r["run_id"] for r in kb.load(str(tmp_path), "a")] == ["r1"]


def test_first_run_has_no_baseline():
    out = kb.baseline([], "pair", kb.fingerprint_id(V1))
    assert out["value"] is None and "creates it" in out["note"]


def test_baseline_is_median_of_last_passing_runs_same_versions():
    records = [rec("r1", "PASS", 0.5), rec("r2", "PASS", 1.0), rec("r3", "FAIL", 0.1),
               rec("r4", "WARN", 0.9), rec("r5", "PASS", 1.1)]
    out = kb.baseline(records, "pair", kb.fingerprint_id(V1), window=3)
    assert out["value"] == 1.0 and out["runs"] == 3 and out["since"] == "r2"


def test_version_change_starts_a_new_baseline_and_says_so():
    records = [rec("r1", "PASS", 1.0), rec("r2", "PASS", 1.0)]
    out = kb.baseline(records, "pair", kb.fingerprint_id(V2))
    assert out["value"] is None and "versions changed" in out["note"] and "r2" in out["note"]


def test_known_good_needs_a_passing_last_run_and_a_proven_network():
    histories = {
        "a": [rec("r1", "PASS", 1.0)],
        "b": [rec("r1", "PASS", 1.0), rec("r2", "FAIL", None)],
        "c": [rec("r1", "PASS", None)],          # quick mode only: network never proven
        "d": [],
    }
    assert kb.known_good(histories, test="pair") == ["a"]
    assert kb.known_good(histories) == ["a", "c"]


def test_fingerprint_id_is_stable_and_order_free():
    assert kb.fingerprint_id({"a": 1, "b": None}) == kb.fingerprint_id({"b": None, "a": 1})
    assert kb.fingerprint_id(V1) != kb.fingerprint_id(V2)
