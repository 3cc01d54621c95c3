"""Parser for nccl-tests text / -J JSON output and kiln's CPU engine (module_utils/kiln_nccl.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "module_utils"))

import kiln_nccl  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "nccl-tests"


def load(name: str) -> dict:
    return kiln_nccl.parse((FIXTURES / name).read_text(encoding="utf-8"))


# name, status, layout, rows, nranks, hosts, nccl-tests version, NCCL version, OOB (count, ok), last busbw (oop, ip)
RECORDED = [
    ("nccl-tests-2.13-h100-16rank-2node.txt", "ok", "nccl-tests-2.13+", 31, 16,
     ["ztan-mig-235z", "ztan-mig-gq73"], None, None, (0, True), (338.82, 337.35)),
    ("nccl-tests-2.18.3-gh200-8rank-2node-int8.txt", "ok", "nccl-tests-2.13+", 28, 8,
     ["gpu-1-1", "gpu-1-2"], "2.18.3", "2.30.4", (0, True), (101.70, 107.63)),
    ("nccl-tests-2.18.3-16rank-2node-mpi-noise.txt", "ok", "nccl-tests-2.13+", 24, 16,
     ["R6KD-CX8aaS-GPU-14", "R6KD-CX8aaS-GPU-15"], "2.18.3", "2.30.3", (0, True), (49.73, 49.83)),
    ("nccl-tests-legacy-error-column-v100-12gpu-allreduce.txt", "ok", "nccl-tests-legacy-error", 31, 12,
     ["seville"], None, None, (0, True), (123.56, 123.57)),
    ("nccl-tests-legacy-allgather-v100-12gpu-oob-failed.txt", "ok", "nccl-tests-legacy-error", 31, 12,
     ["seville"], None, None, (4, False), (73.75, 112.34)),
    ("derived-2.19.6-format-example-burnin-md.txt", "ok", "nccl-tests-2.13+", 8, 1,
     ["gpu-node01"], "2.19.6", "2.27.3", (0, True), (480.90, 481.40)),
]


@pytest.mark.parametrize(
    ("name", "status", "layout", "nrows", "nranks", "hosts", "version", "nccl", "oob", "last"), RECORDED
)
def test_recorded_outputs(name, status, layout, nrows, nranks, hosts, version, nccl, oob, last) -> None:
    result = load(name)
    assert result["status"] == status
    assert result["layout"] == layout
    assert len(result["rows"]) == nrows
    assert result["nranks"] == nranks
    assert result["hosts"] == hosts
    assert result["nccl_tests_version"] == version
    assert result["nccl_version"] == nccl
    assert (result["out_of_bounds"]["count"], result["out_of_bounds"]["ok"]) == oob
    row = result["rows"][-1]
    assert (row["out_of_place"]["busbw"], row["in_place"]["busbw"]) == pytest.approx(last)
    assert result["avg_busbw"]["informational"] is True
    assert result["problems"] == []


def test_modern_row_has_every_column() -> None:
    row = load("nccl-tests-2.13-h100-16rank-2node.txt")["rows"][0]
    assert row == {
        "size": 8, "count": 2, "type": "float", "redop": "sum", "root": -1,
        "out_of_place": {"time_us": 135.8, "algbw": 0.0, "busbw": 0.0, "wrong": 0, "error": None},
        "in_place": {"time_us": 123.5, "algbw": 0.0, "busbw": 0.0, "wrong": 0, "error": None},
    }


def test_legacy_error_column_is_a_float_not_a_wrong_count() -> None:
    rows = load("nccl-tests-legacy-error-column-v100-12gpu-allreduce.txt")["rows"]
    assert rows[0]["root"] is None and rows[0]["redop"] == "sum"
    assert rows[0]["out_of_place"]["error"] == pytest.approx(2e-07)
    assert rows[0]["out_of_place"]["wrong"] is None


def test_legacy_allgather_without_redop_or_root() -> None:
    result = load("nccl-tests-legacy-allgather-v100-12gpu-oob-failed.txt")
    assert result["columns"][:4] == ["size", "count", "type", "time"]
    assert result["rows"][0]["redop"] is None
    assert result["out_of_bounds"] == {"count": 4, "ok": False}


def test_multi_node_header_and_config() -> None:
    result = load("nccl-tests-2.18.3-gh200-8rank-2node-int8.txt")
    assert result["collective"] == "all_reduce_perf"
    assert result["concluded"] is True
    assert result["config"]["unalign"] == 0
    assert result["config"]["iterations"] == 20 and result["config"]["warmup_iters"] == 1
    assert result["devices"][4] == {
        "rank": 4, "group": 0, "pid": 201122, "hostname": "gpu-1-2", "device": 0,
        "device_hex": "0009:01:00", "device_info": "NVIDIA GH200 120GB",
    }


def test_old_device_lines_without_group() -> None:
    dev = load("nccl-tests-legacy-error-column-v100-12gpu-allreduce.txt")["devices"][11]
    assert dev["group"] is None and dev["device_hex"] == "0xe7" and dev["device"] == 11


@pytest.mark.parametrize(
    ("name", "status", "problem"),
    [
        ("derived-truncated-2.18.3-gh200-int8.txt", "truncated", "cut off"),
        ("derived-failure-lines-2.18.3-gh200.txt", "truncated", "Out of bounds"),
        ("derived-truncated-json-v2.json", "unparseable", "not valid JSON"),
    ],
)
def test_truncated_outputs(name: str, status: str, problem: str) -> None:
    result = load(name)
    assert result["status"] == status
    assert any(problem in p for p in result["problems"])


def test_failure_lines_are_captured() -> None:
    result = load("derived-failure-lines-2.18.3-gh200.txt")
    assert len(result["failures"]) == 2
    assert "Test NCCL failure" in result["failures"][0]


def test_wrong_counts() -> None:
    result = load("derived-wrong-2.13-h100-16rank.txt")
    row = [r for r in result["rows"] if r["size"] == 4294967296][0]
    assert (row["out_of_place"]["wrong"], row["in_place"]["wrong"]) == (3, 2)
    assert result["out_of_bounds"] == {"count": 5, "ok": False}


def test_json_matches_text_of_the_same_run() -> None:
    text = load("nccl-tests-2.18.3-gh200-8rank-2node-int8.txt")
    js = load("derived-json-v2-from-2.18.3-gh200.json")
    assert js["format"] == "json" and js["status"] == "ok"
    assert js["nccl_version"] == "2.30.4"
    assert js["rows"] == text["rows"]
    assert js["hosts"] == text["hosts"] and js["nranks"] == 8
    assert js["out_of_bounds"] == {"count": 0, "ok": True}
    assert js["avg_busbw"] == {"value": 17.8617, "check": None, "informational": True}
    assert js["config"]["blocking_collectives"] is False
    assert js["collective"] == "all_reduce_perf"


def test_json_string_booleans_and_nan() -> None:
    doc = {
        "version": 2, "nccl_version": 22703, "config": {"devices": []},
        "results": [{"size": 1024, "count": 256, "type": "float", "redop": "sum", "root": "    -1",
                     "out_of_place": {"time": 1.0, "alg_bw": "nan", "bus_bw": 2.0, "nwrong": 3.0},
                     "in_place": None}],
        "out_of_bounds": {"count": 3, "okay": "false"},
        "average_bus_bandwidth": {"bandwidth": 2.0, "okay": "false"},
        "errors": ["remote process exited"],
    }
    result = kiln_nccl.parse(json.dumps(doc))
    assert result["rows"][0]["out_of_place"] == {"time_us": 1.0, "algbw": None, "busbw": 2.0, "wrong": 3, "error": None}
    assert result["rows"][0]["in_place"] is None and result["rows"][0]["root"] == -1
    assert result["out_of_bounds"] == {"count": 3, "ok": False}
    assert result["avg_busbw"]["check"] == "FAILED"
    assert result["failures"] == ["# error: remote process exited"]
    assert result["concluded"] is False


def test_json_rejects_other_documents() -> None:
    with pytest.raises(kiln_nccl.ParseError, match="no 'results'"):
        kiln_nccl.parse_json({"version": 1})
    assert kiln_nccl.parse("{}")["status"] == "unparseable"


def test_cpu_engine_format() -> None:
    result = load("derived-kiln-cpu-engine-3node-example.txt")
    assert result["engine"] == "kiln-cpu" and result["engine_version"] == "1"
    assert result["config"]["engine_backend"] == "gloo"
    assert result["layout"] == "kiln-cpu-engine/nccl-tests-2.13+"
    assert result["nranks"] == 3 and result["devices"][0]["device"] == -1
    assert result["status"] == "ok"


HEADER_219 = (
    "#                                                              out-of-place                       in-place\n"
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"
)


@pytest.mark.parametrize(
    ("header", "row", "expected"),
    [
        # -c 0: #wrong printed as N/A (nccl-tests-287 layout)
        (HEADER_219, "    33554432       8388608     float    none      -1    19.56  1715.44    0.00      0     0.78  43046.10    0.00    N/A",
         {"wrong_ip": None, "busbw_ip": 0.0}),
        # -I 1 per-iteration columns (util.cu writeResultHeader, per_iter_timing)
        ("#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%\n",
         "  1073741824     268435456     float     sum      -1   4025.4  266.74  466.80       0   4001.2   4090.1   4088.0     0.51   4018.5  267.20  467.60       0   4000.0   4080.0   4079.9     0.40",
         {"wrong_ip": 0, "busbw_ip": 467.60}),
        # -S 1 timestamp column
        ("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong           timestamp\n",
         "  1073741824     268435456     float     sum      -1   4025.4  266.74  466.80       0   4018.5  267.20  467.60       0  2026-07-30 10:12:00",
         {"wrong_ip": 0, "busbw_ip": 467.60}),
        # -C 1 cputime instead of time
        ("#       size         count      type   redop    root  cputime   algbw   busbw  #wrong  cputime   algbw   busbw  #wrong\n",
         "  1073741824     268435456     float     sum      -1   4025.4  266.74  466.80       0   4018.5  267.20  467.60       0",
         {"wrong_ip": 0, "busbw_ip": 467.60}),
    ],
)
def test_optional_columns(header: str, row: str, expected: dict) -> None:
    text = header + row + "\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1 \n"
    result = kiln_nccl.parse(text)
    assert result["status"] == "ok", result["problems"]
    cell = result["rows"][0]["in_place"]
    assert cell["wrong"] == expected["wrong_ip"]
    assert cell["busbw"] == pytest.approx(expected["busbw_ip"])


def test_tag_output_prefix_and_avg_check() -> None:
    lines = (FIXTURES / "nccl-tests-2.13-h100-16rank-2node.txt").read_text().splitlines()
    tagged = "\n".join("[1,0]<stdout>:" + line for line in lines)
    tagged = tagged.replace("Avg bus bandwidth    : 70.742 ", "Avg bus bandwidth    : 70.742 FAILED")
    result = kiln_nccl.parse(tagged)
    assert result["status"] == "ok" and len(result["rows"]) == 31
    assert result["avg_busbw"] == {"value": 70.742, "check": "FAILED", "informational": True}


def test_headerless_rows_infer_layout() -> None:
    text = "   536870912     134217728     float     sum      -1    10052   53.41   93.46      0   9676.9   55.48   97.09      0\n" \
           "# Out of bounds values : 0 OK\n"
    result = kiln_nccl.parse(text)
    assert result["status"] == "ok" and result["rows"][0]["in_place"]["busbw"] == 97.09
    assert any("inferred" in p for p in result["problems"])


@pytest.mark.parametrize("text", ["", "garbage\n", "mpirun: command not found\n", "# nThread 1 nGpus 8 minBytes 8 maxBytes 8\n"])
def test_unparseable(text: str) -> None:
    result = kiln_nccl.parse(text)
    assert result["status"] == "unparseable" and result["rows"] == []


def test_split_runs_of_repeated_output() -> None:
    one = (FIXTURES / "nccl-tests-2.18.3-gh200-8rank-2node-int8.txt").read_text()
    runs = kiln_nccl.split_runs(one + one + one)
    assert len(runs) == 3
    assert all(kiln_nccl.parse(r)["status"] == "ok" for r in runs)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("8", 8), (16, 16), ("1K", 1024), ("512M", 512 << 20), ("16G", 16 << 30), ("1g", 1 << 30), ("2GiB", 2 << 30)],
)
def test_parse_size(value, expected) -> None:
    assert kiln_nccl.parse_size(value) == expected


@pytest.mark.parametrize("value", ["", "1.5G", "G", "-1", True])
def test_parse_size_rejects(value) -> None:
    with pytest.raises(ValueError):
        kiln_nccl.parse_size(value)


@pytest.mark.parametrize(("code", "version"), [(23004, "2.30.4"), (22703, "2.27.3"), (2708, "2.7.8"), (0, None), (None, None)])
def test_nccl_version_from_code(code, version) -> None:
    assert kiln_nccl.nccl_version_from_code(code) == version


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400))
def test_parser_never_raises_on_garbage(text: str) -> None:
    result = kiln_nccl.parse(text)
    assert result["status"] in ("ok", "truncated", "unparseable")
    json.dumps(result)


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=1, max_value=3000))
def test_any_prefix_of_a_run_is_never_ok_before_the_footer(cut: int) -> None:
    text = (FIXTURES / "nccl-tests-2.18.3-gh200-8rank-2node-int8.txt").read_text()
    footer = text.index("# Out of bounds")
    prefix = text[: min(cut, footer)]
    assert kiln_nccl.parse(prefix)["status"] != "ok"
