"""module_utils/kiln/burnin/baseline.py: append-only history, baselines, known-good nodes."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_paths import REPO
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.burnin import baseline as kb  # noqa: E402

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


# --------------------------------------------------------------------------- damaged histories


def test_append_after_a_torn_line_stays_readable(tmp_path):
    kb.append(str(tmp_path), "a", rec("r1", "PASS", 1.0))
    path = Path(kb.node_file(str(tmp_path), "a"))
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"run_id": "r2", "sta')          # crash mid-write: no newline
    kb.append(str(tmp_path), "a", rec("r3", "PASS", 2.0))
    records, warnings = kb.load_with_warnings(str(tmp_path), "a")
    assert [r["run_id"] for r in records] == ["r1", "r3"]
    assert len(warnings) == 1 and "torn" in warnings[0]
    assert path.read_bytes().endswith(b"\n") and path.read_text().count("\n") == 3


def test_append_to_a_clean_file_adds_no_blank_line(tmp_path):
    kb.append(str(tmp_path), "a", rec("r1", "PASS", 1.0))
    kb.append(str(tmp_path), "a", rec("r2", "PASS", 1.0))
    assert len(Path(kb.node_file(str(tmp_path), "a")).read_text().splitlines()) == 2


@pytest.mark.parametrize(
    ("line", "why"),
    [(b"\xff\xfe not utf-8", "not UTF-8"),
     (b"[1, 2]", "not an object"),
     (b'"text"', "not an object"),
     (b'{"status": "PASS", "values": {}}', "run_id"),
     (b'{"run_id": 5, "status": "PASS"}', "run_id"),
     (b'{"run_id": "r", "status": ["PASS"]}', "status"),
     (b'{"run_id": "r", "status": "PASS", "values": [1]}', "values"),
     (b'{"run_id": "r", "status": "PASS", "values": {"pair": "1.0"}}', "values.pair"),
     (b'{"run_id": "r", "status": "PASS", "values": {"pair": NaN}}', "NaN"),
     (b'{"run_id": "r", "status": "PASS", "values": {"pair": Infinity}}', "Infinity"),
     (b'{"run_id": "r", "status": "PASS", "values": {"pair": 1e999}}', "values.pair"),
     (b'{"run_id": "r", "status": "PASS", "values": {"pair": true}}', "values.pair"),
     (b'{"run_id": "r", "status": "PASS", "fingerprint_id": 7}', "fingerprint_id"),
     (b'{"run_id": "r", "status": "PASS", "values": {"pair": ' + b"9" * 5000 + b"}}", "not JSON"),
     (b"[" * 100000, "")],
)
def test_load_skips_bad_records_with_a_warning(tmp_path, line, why):
    kb.append(str(tmp_path), "a", rec("r1", "PASS", 1.0))
    with open(kb.node_file(str(tmp_path), "a"), "ab") as handle:
        handle.write(line + b"\n")
    kb.append(str(tmp_path), "a", rec("r2", "PASS", 2.0))
    records, warnings = kb.load_with_warnings(str(tmp_path), "a")
    assert [r["run_id"] for r in records] == ["r1", "r2"]
    assert len(warnings) == 1 and why in warnings[0]
    assert kb.load(str(tmp_path), "a") == records


def test_load_of_an_unreadable_history_warns(tmp_path):
    os_dir = Path(kb.node_file(str(tmp_path), "a"))
    os_dir.mkdir(parents=True)                      # a directory where the file should be
    records, warnings = kb.load_with_warnings(str(tmp_path), "a")
    assert records == [] and warnings
    assert kb.load_with_warnings(str(tmp_path), "missing") == ([], [])


def test_record_and_append_refuse_non_finite_values(tmp_path):
    entry = kb.record("r1", "t", "default", "PASS", {"driver": float("nan")},
                      {"pair": float("inf"), "single_node": float("nan"), "x": 1.5, "y": True, "z": "2"})
    assert entry["values"] == {"pair": None, "single_node": None, "x": 1.5, "y": None, "z": None}
    kb.append(str(tmp_path), "a", entry)
    kb.append(str(tmp_path), "a", {"run_id": "r2", "status": "PASS", "values": {"pair": float("nan")}})
    records, warnings = kb.load_with_warnings(str(tmp_path), "a")
    assert warnings == [] and [r["values"]["pair"] for r in records] == [None, None]
    assert "NaN" not in Path(kb.node_file(str(tmp_path), "a")).read_text()


def test_baseline_ignores_non_finite_negative_and_malformed_values():
    good = [rec("r1", "PASS", 1.0), rec("r2", "PASS", 3.0)]
    junk = [rec("j1", "PASS", None), {"run_id": "j2", "status": "PASS", "values": {"pair": float("nan")},
                                      "fingerprint_id": kb.fingerprint_id(V1)},
            {"run_id": "j3", "status": "PASS", "values": {"pair": -4.0}, "fingerprint_id": kb.fingerprint_id(V1)},
            {"run_id": "j4", "status": "PASS", "values": {"pair": "9"}, "fingerprint_id": kb.fingerprint_id(V1)},
            {"run_id": "j5", "status": "PASS", "values": [9]}, "garbage", None, 7,
            {"run_id": "j6", "status": "PASS", "values": {"pair": float("inf")},
             "fingerprint_id": kb.fingerprint_id(V1)}]
    out = kb.baseline(good + junk, "pair", kb.fingerprint_id(V1))
    assert out["value"] == 2.0 and out["runs"] == 2 and out["since"] == "r1"
    assert kb.baseline(junk, "pair", kb.fingerprint_id(V1))["value"] is None
    assert kb.baseline(good, "pair", kb.fingerprint_id(V1), window=0)["runs"] == 1
    assert kb.baseline(good, "pair", kb.fingerprint_id(V1), window="x")["value"] == 2.0


def test_known_good_needs_a_well_formed_last_record():
    histories = {
        "a": [rec("r1", "PASS", 1.0), "garbage"],
        "b": [rec("r1", "PASS", 1.0), {"run_id": "r2", "status": "PASS", "values": {"pair": float("nan")}}],
        "c": [rec("r1", "PASS", float("inf"))],
        "d": [rec("r1", "PASS", -1.0)],
        "e": [rec("r1", "PASS", 1.0)],
        "f": None,
    }
    assert kb.known_good(histories, test="pair") == ["e"]
    assert kb.known_good(histories) == ["c", "d", "e"]
    assert kb.known_good(None) == [] and kb.known_good({"x": 5}) == []


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
                       | st.text(max_size=8),
                       lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                       max_leaves=12)
RECORDISH = st.one_of(JSONISH, st.fixed_dictionaries(
    {"run_id": JSONISH | st.text(max_size=4), "status": st.sampled_from(["PASS", "WARN", "FAIL"]) | JSONISH,
     "values": st.dictionaries(st.sampled_from(["pair", "single_node"]), JSONISH, max_size=2) | JSONISH,
     "fingerprint_id": JSONISH}))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_random_history_bytes_never_raise_and_append_stays_readable(tmp_path_factory, data):
    state = tmp_path_factory.mktemp("h")
    Path(kb.node_file(str(state), "n")).write_bytes(data)
    records, warnings = kb.load_with_warnings(str(state), "n")
    assert all(kb.record_problem(r) is None for r in records)
    kb.append(str(state), "n", rec("new", "PASS", 1.5))
    after = kb.load(str(state), "n")
    assert after[-1]["run_id"] == "new" and after[-1]["values"]["pair"] == 1.5
    assert len(after) == len(records) + 1


@settings(max_examples=300, deadline=None)
@given(st.lists(RECORDISH, max_size=6), st.sampled_from(["pair", "single_node"]), JSONISH)
def test_baseline_and_known_good_never_raise(records, test, window):
    out = kb.baseline(records, test, kb.fingerprint_id(V1), window=window if isinstance(window, int) else 5)
    assert out["value"] is None or (math.isfinite(out["value"]) and out["value"] >= 0)
    json.dumps(out, allow_nan=False)
    good = kb.known_good({"a": records, "b": list(reversed(records))}, test=test)
    assert set(good) <= {"a", "b"}
    for node in good:
        last = (records if node == "a" else list(reversed(records)))[-1]
        assert kb.record_problem(last) is None and last["status"] in kb.PASSING


@settings(max_examples=100, deadline=None)
@given(st.lists(RECORDISH, max_size=4))
def test_written_garbage_records_load_without_raising(tmp_path_factory, records):
    state = tmp_path_factory.mktemp("g")
    with open(kb.node_file(str(state), "n"), "w", encoding="utf-8") as handle:
        for entry in records:
            handle.write(json.dumps(entry) + "\n")
    loaded, warnings = kb.load_with_warnings(str(state), "n")
    assert len(loaded) + len(warnings) == len(records)
    assert all(kb.record_problem(r) is None for r in loaded)
