"""Parser for nccl-tests text / -J JSON output and kiln's CPU engine (module_utils/kiln_nccl.py)."""

from __future__ import annotations

import json
import math
import re
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


def _json_doc(oop: dict, ip=None) -> dict:
    return {
        "version": 2, "nccl_version": 22703, "config": {"devices": []},
        "results": [{"size": 1024, "count": 256, "type": "float", "redop": "sum", "root": "    -1",
                     "out_of_place": oop, "in_place": ip}],
        "out_of_bounds": {"count": 3, "okay": "false"},
        "average_bus_bandwidth": {"bandwidth": 2.0, "okay": "false"},
        "errors": ["remote process exited"],
    }


def test_json_string_booleans_and_missing_placement() -> None:
    result = kiln_nccl.parse(json.dumps(_json_doc({"time": 1.0, "alg_bw": 1.0, "bus_bw": 2.0, "nwrong": 3.0})))
    assert result["rows"][0]["out_of_place"] == {"time_us": 1.0, "algbw": 1.0, "busbw": 2.0, "wrong": 3, "error": None}
    assert result["rows"][0]["in_place"] is None and result["rows"][0]["root"] == -1
    assert result["out_of_bounds"] == {"count": 3, "ok": False}
    assert result["avg_busbw"]["check"] == "FAILED"
    assert result["failures"] == ["# error: remote process exited"]
    assert result["concluded"] is False
    assert result["status"] == "ok" and result["data_check"] is True


def test_json_nan_string_rejects_the_row() -> None:
    # Changed by the fail-closed rule: nccl-tests writes NaN as "nan"; such a row used to be
    # kept with algbw None, it is now rejected (never a measurement) and the status is invalid.
    result = kiln_nccl.parse(json.dumps(_json_doc({"time": 1.0, "alg_bw": "nan", "bus_bw": 2.0, "nwrong": 3.0})))
    assert result["rows"] == [] and result["status"] == "invalid"
    assert result["rejected_rows"][0]["size"] == 1024 and result["rejected_rows"][0]["wrong"] == 3
    assert "alg_bw is not a finite number" in result["rejected_rows"][0]["reason"]
    assert result["out_of_bounds"] == {"count": 3, "ok": False}
    assert result["failures"] == ["# error: remote process exited"]


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
    # Changed by the fail-closed rule: rows are still read, but a cut-off head (no header)
    # means the columns are guessed, so the status is no longer ok.
    assert result["status"] == "truncated" and result["rows"][0]["in_place"]["busbw"] == 97.09
    assert result["header_seen"] is False
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


# --------------------------------------------------------------------------- fail closed

GOOD = FIXTURES / "nccl-tests-2.18.3-gh200-8rank-2node-int8.txt"
MEASURE_COLUMNS = (5, 6, 7, 9, 10, 11)  # time, algbw, busbw of both placements in a 2.13+ row
HOSTILE_NUMBERS = ["inf", "-inf", "nan", "NaN", "Infinity", "1e999", "-1e999", "-5", "-0.5", "9e9", "1e7",
                   "9" * 5000]
HOSTILE_TOKENS = HOSTILE_NUMBERS + ["1e-999999", "N/A", "-", "", "0x10", "1_0", "١٢", "12abc", "1e", "."]


def good_text() -> str:
    return GOOD.read_text(encoding="utf-8")


def assert_fail_closed(result: dict) -> None:
    """Shape, JSON-safety and the meaning of status ok."""
    assert result["status"] in kiln_nccl.STATUSES
    json.dumps(result, allow_nan=False)  # no NaN/Infinity anywhere
    assert isinstance(result["problems"], list) and isinstance(result["rows"], list)
    assert result["runs"] >= 1 and result["data_check"] in (True, False, None)
    for row in result["rows"]:
        cells = [row.get(p) for p in ("out_of_place", "in_place") if row.get(p) is not None]
        assert cells, row
        for cell in cells:
            for key in ("busbw", "algbw", "time_us"):
                value = cell[key]
                assert isinstance(value, float) and math.isfinite(value) and value >= 0, (key, row)
            assert cell["busbw"] <= kiln_nccl.MAX_BW_GBS
            assert cell["wrong"] is None or (isinstance(cell["wrong"], int) and cell["wrong"] >= 0)
    if result["status"] == "ok":
        assert result["rows"], result
        assert result["header_seen"] is True
        assert result["runs"] == 1
        assert result["out_of_bounds"] is not None
        assert result["rejected_rows"] == []


def _row_lines(lines: list) -> list:
    return [i for i, line in enumerate(lines) if line.strip()[:1].isdigit()]


def _candidate(line: str) -> bool:
    tokens = line.split()
    return len(tokens) >= 2 and tokens[0].isascii() and tokens[0].isdigit() and tokens[1].isascii() \
        and tokens[1].isdigit()


def must_not_be_ok(text: str, hostile: list) -> bool:
    """What the final text holds that the fail-closed rule forbids to be ok."""
    lines = text.splitlines()
    full = lines if text.endswith("\n") else lines[:-1]
    if any(h in full for h in hostile):
        return True  # a non-finite, negative or absurd measurement
    rows = [i for i, line in enumerate(full) if _candidate(line)]
    if not rows:
        return False
    openers = [i for i, line in enumerate(full) if line.startswith(("# nThread", "# nccl-tests version"))]
    if any(i > rows[0] for i in openers):
        return True  # a second run after rows
    footers = [i for i, line in enumerate(full) if "Out of bounds values" in line]
    if footers and rows[-1] > footers[0]:
        return True  # rows after the footer
    if not any(line.lstrip("#").split()[:1] == ["size"] for line in full):
        return True  # no header
    sweep = re.search(r"minBytes (\d+) maxBytes (\d+) step: (\d+)\(factor\)", text)
    if sweep and any(re.search(r"Out of bounds values : \d+ (OK|FAILED)", line) for line in full):
        low, high, factor = (int(g) for g in sweep.groups())
        expected = len([k for k in range(64) if low * factor ** k <= high])
        tokens = [full[i].split()[0] for i in rows]
        if any(len(token) > 19 for token in tokens):
            return True  # an absurd size
        sizes = [int(token) for token in tokens]
        if len(sizes) % expected:
            return True  # a row missing or repeated
        for start in range(0, len(sizes), expected):
            chunk = sizes[start: start + expected]
            if chunk != sorted(chunk):
                return True  # rows out of order
    return False


@st.composite
def hostile_texts(draw):
    """A recorded run with hostile edits; returns (text, lines that must make it not ok)."""
    lines = draw(st.sampled_from([good_text(), (FIXTURES / "nccl-tests-2.13-h100-16rank-2node.txt").read_text(),
                                  (FIXTURES / "derived-kiln-cpu-engine-3node-example.txt").read_text()])).splitlines()
    hostile = []
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        rows = _row_lines(lines)
        action = draw(st.sampled_from(["number", "delete", "duplicate", "swap", "garbage", "opener", "rerun",
                                       "header", "random_line", "wrong"]))
        if action == "number" and rows:
            index = draw(st.sampled_from(rows))
            tokens = lines[index].split()
            if len(tokens) == 13:
                column = draw(st.sampled_from(MEASURE_COLUMNS))
                # 9e9 and 1e7 are absurd as GB/s, not as microseconds.
                pool = [v for v in HOSTILE_NUMBERS if column not in (5, 9) or v not in ("9e9", "1e7")]
                tokens[column] = draw(st.sampled_from(pool))
                lines[index] = "  ".join(tokens)
                hostile.append(lines[index])
        elif action == "wrong" and rows:
            index = draw(st.sampled_from(rows))
            tokens = lines[index].split()
            if len(tokens) == 13:
                tokens[draw(st.sampled_from([8, 12]))] = draw(st.sampled_from(["nan", "-1", "2.5", "inf", "1e999"]))
                lines[index] = "  ".join(tokens)
                hostile.append(lines[index])
        elif action == "delete" and rows:
            del lines[draw(st.sampled_from(rows))]
        elif action == "duplicate" and rows:
            index = draw(st.sampled_from(rows))
            lines.insert(index, lines[index])
        elif action == "swap" and len(rows) > 1:
            a, b = draw(st.sampled_from(rows)), draw(st.sampled_from(rows))
            lines[a], lines[b] = lines[b], lines[a]
        elif action == "garbage":
            lines.insert(draw(st.integers(0, len(lines))), draw(st.text(max_size=60)).replace("\n", " "))
        elif action == "opener" and rows:
            lines.insert(draw(st.integers(rows[0] + 1, len(lines))), "# nThread 1 nGpus 1 minBytes 8 maxBytes 8")
        elif action == "rerun":
            lines += good_text()[: draw(st.integers(0, len(good_text())))].splitlines()
        elif action == "header":
            lines = [line for line in lines if not line.lstrip("#").split()[:1] == ["size"]]
        elif action == "random_line" and rows:
            index = draw(st.sampled_from(rows))
            tokens = lines[index].split()
            tokens[draw(st.integers(0, len(tokens) - 1))] = draw(st.sampled_from(HOSTILE_TOKENS))
            lines[index] = "  ".join(tokens)
    text = "\n".join(lines) + "\n"
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    return text, hostile


@settings(max_examples=300, deadline=None)
@given(hostile_texts())
def test_hostile_text_never_raises_and_ok_means_complete(case) -> None:
    text, hostile = case
    result = kiln_nccl.parse(text)
    assert_fail_closed(result)
    if must_not_be_ok(text, hostile):
        assert result["status"] != "ok", result["problems"]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=2000))
def test_random_text_never_raises(text: str) -> None:
    assert_fail_closed(kiln_nccl.parse(text))
    assert_fail_closed(kiln_nccl.parse(text, "text"))
    assert_fail_closed(kiln_nccl.parse(text, "json"))


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=2000))
def test_random_bytes_never_raise(data: bytes) -> None:
    assert_fail_closed(kiln_nccl.parse(data))
    assert isinstance(kiln_nccl.split_runs(data.decode("utf-8", "replace")), list)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=10 ** 6))
def test_truncation_at_any_byte(cut: int) -> None:
    text = good_text()
    cut = cut % (len(text) + 1)
    result = kiln_nccl.parse(text[:cut])
    assert_fail_closed(result)
    footer = text.index("# Out of bounds values : 0 OK") + len("# Out of bounds values : 0 OK")
    assert (result["status"] == "ok") == (cut >= footer)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=10 ** 6))
def test_complete_run_followed_by_a_cut_off_run_is_never_ok(cut: int) -> None:
    text = good_text()
    second = text[: cut % (len(text) + 1)]
    result = kiln_nccl.parse(text + second)
    assert_fail_closed(result)
    first_row_digit = text.index("           1             1")
    first_row_digit += len("           ")
    if len(second) > first_row_digit:
        assert result["status"] == "invalid" and result["runs"] == 2
        assert "2 runs in one output (mixed)" in result["problems"]


JSON_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
                | st.text(max_size=10) | st.sampled_from(["nan", "inf", "-inf", "Infinity", "1e999", "true", "N/A"]))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
HOSTILE_MEASURE = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.none(),
                            st.sampled_from(["nan", "inf", "Infinity", "-1", "1e999", "", "x", 10 ** 400]), JSON_VALUES)


@st.composite
def hostile_json(draw):
    def cell():
        return draw(st.one_of(st.none(), JSON_VALUES, st.fixed_dictionaries(
            {"time": HOSTILE_MEASURE, "alg_bw": HOSTILE_MEASURE, "bus_bw": HOSTILE_MEASURE,
             "nwrong": HOSTILE_MEASURE})))

    entries = [draw(st.one_of(JSON_VALUES, st.fixed_dictionaries(
        {"size": HOSTILE_MEASURE, "count": HOSTILE_MEASURE, "root": HOSTILE_MEASURE, "type": JSON_VALUES,
         "out_of_place": st.just(None), "in_place": st.just(None)})))
        for _ in range(draw(st.integers(0, 4)))]
    for entry in entries:
        if isinstance(entry, dict) and "size" in entry:
            entry["out_of_place"], entry["in_place"] = cell(), cell()
    doc = {"results": draw(st.one_of(st.just(entries), JSON_VALUES))}
    for key in ("version", "nccl_version", "config", "devices", "args", "env", "out_of_bounds",
                "average_bus_bandwidth", "errors", "end_time"):
        if draw(st.booleans()):
            doc[key] = draw(JSON_VALUES)
    return doc


@settings(max_examples=300, deadline=None)
@given(hostile_json())
def test_hostile_json_never_raises(doc: dict) -> None:
    for text in (json.dumps(doc, default=str), json.dumps(doc, default=str)[: len(json.dumps(doc, default=str)) // 2]):
        assert_fail_closed(kiln_nccl.parse(text))
    try:
        result = kiln_nccl.parse_json(doc)
    except kiln_nccl.ParseError:
        return
    assert_fail_closed(result)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["time", "alg_bw", "bus_bw", "nwrong"]),
       st.sampled_from([math.inf, -math.inf, math.nan, -1.0, 2e6, "nan", "inf", "Infinity", 10 ** 400, [1], {}]))
def test_json_hostile_measurement_rejects_the_row(key: str, value) -> None:
    if value == 2e6:  # absurd as GB/s only
        value = 2.5 if key == "nwrong" else (2e6 if key in ("alg_bw", "bus_bw") else 2e13)
    doc = {"config": {"validation": 1}, "results": [
        {"size": 1024, "count": 256, "out_of_place": {"time": 1.0, "alg_bw": 1.0, "bus_bw": 1.0, "nwrong": 0},
         "in_place": {"time": 1.0, "alg_bw": 1.0, "bus_bw": 1.0, "nwrong": 0}}],
        "out_of_bounds": {"count": 0, "okay": "true"}}
    doc["results"][0]["in_place"][key] = value
    for result in (kiln_nccl.parse_json(doc), kiln_nccl.parse(json.dumps(doc))):
        assert_fail_closed(result)
        assert result["rows"] == [] and result["status"] == "invalid"
        assert result["rejected_rows"][0]["size"] == 1024


def test_json_nan_and_infinity_literals_are_rejected() -> None:
    base = ('{"results":[{"size":8,"out_of_place":{"time":1,"alg_bw":1,"bus_bw":%s,"nwrong":0},'
            '"in_place":null}],"out_of_bounds":{"count":0,"okay":"true"}}')
    assert kiln_nccl.parse(base % "1.5")["status"] == "ok"
    for literal in ("NaN", "Infinity", "-Infinity", "1e999"):
        result = kiln_nccl.parse(base % literal)
        assert result["status"] == "invalid" and result["rows"] == [], literal
        json.dumps(result, allow_nan=False)


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000, '{"results": ' + "[" * 5000 + "]" * 5000 + "}",
                                  '{"results": ' + "9" * 5000 + "}", '{"results": [{"size": ' + "9" * 5000 + "}]}"])
def test_json_deep_or_huge_is_a_problem_not_an_exception(text: str) -> None:
    result = kiln_nccl.parse(text)
    assert_fail_closed(result)
    assert result["status"] != "ok"


@pytest.mark.parametrize(
    "doc",
    [{"results": {"a": 1}}, {"results": "x"}, {"results": [{"size": {}}]}, {"results": [{"size": 8, "in_place": "1"}]},
     {"results": [{"size": "8", "out_of_place": {"time": "1", "alg_bw": [], "bus_bw": {}, "nwrong": "x"}}]},
     {"results": [], "config": [1], "devices": "x", "args": 5, "env": {"a": 1}, "out_of_bounds": [],
      "errors": 3, "average_bus_bandwidth": [1], "nccl_version": {"x": 1}},
     {"results": [{"size": 8, "in_place": {"time": 1, "alg_bw": 1, "bus_bw": 1, "nwrong": 0}}],
      "out_of_bounds": {"count": "many", "okay": []}, "config": {"devices": [{"hostname": 5}, {"hostname": "a"}]}}],
)
def test_json_wrong_types_are_problems(doc: dict) -> None:
    result = kiln_nccl.parse_json(doc)
    assert_fail_closed(result)
    assert result["status"] != "ok" and result["problems"]


@pytest.mark.parametrize(("old", "new"), [("76.54", value) for value in HOSTILE_NUMBERS])
def test_non_finite_or_absurd_busbw_rejects_the_row(old: str, new: str) -> None:
    result = kiln_nccl.parse(good_text().replace(old, new, 1))
    assert_fail_closed(result)
    assert result["status"] == "invalid"
    assert [r["size"] for r in result["rejected_rows"]] == [16777216]
    assert 16777216 not in [r["size"] for r in result["rows"]]
    assert any("row not accepted as a measurement" in p for p in result["problems"])


def test_rejected_row_keeps_its_wrong_counts() -> None:
    text = good_text().replace("   383.60   43.74   76.54       0   647.17   25.92   45.37       0",
                               "   383.60   43.74     inf       4   647.17   25.92   45.37       1")
    rejected = kiln_nccl.parse(text)["rejected_rows"]
    assert rejected and rejected[0]["wrong"] == 5


@pytest.mark.parametrize(
    ("where", "old", "new"),
    [("size", "    16777216      16777216", "9" * 5000 + "      16777216"),
     ("nThread", "nThread 1", "nThread " + "9" * 5000),
     ("oob", "values : 0 OK", "values : " + "9" * 5000 + " OK"),
     ("rank", "Rank  4", "Rank " + "9" * 5000),
     ("version", "nccl-library=23004", "nccl-library=" + "9" * 5000),
     ("avg", "17.8617", "9" * 5000)],
)
def test_huge_integers_never_raise(where: str, old: str, new: str) -> None:
    text = good_text()
    assert old in text
    result = kiln_nccl.parse(text.replace(old, new, 1))
    assert_fail_closed(result)
    if where in ("size", "oob"):
        assert result["status"] == "invalid"


def test_data_check_disabled() -> None:
    lines = good_text().splitlines()
    rows = _row_lines(lines)
    for index in rows:
        tokens = lines[index].split()
        tokens[8] = tokens[12] = "N/A"
        lines[index] = "  ".join(tokens)
    text = "\n".join(lines).replace("validation: 1", "validation: 0")
    result = kiln_nccl.parse(text)
    assert result["status"] == "ok" and result["data_check"] is False
    assert "data check disabled (-c 0): results unverified" in result["problems"]
    assert all(r["in_place"]["wrong"] is None for r in result["rows"])
    assert kiln_nccl.parse(good_text())["data_check"] is True
    assert kiln_nccl.parse("")["data_check"] is None


def test_validation_zero_with_counts_is_contradictory() -> None:
    result = kiln_nccl.parse(good_text().replace("validation: 1", "validation: 0"))
    assert result["status"] == "invalid" and result["data_check"] is None


def test_json_data_check_disabled() -> None:
    doc = json.loads((FIXTURES / "derived-json-v2-from-2.18.3-gh200.json").read_text())
    doc["config"]["validation"] = 0
    for entry in doc["results"]:
        entry["out_of_place"]["nwrong"] = entry["in_place"]["nwrong"] = None
    result = kiln_nccl.parse_json(doc)
    assert result["status"] == "ok" and result["data_check"] is False
    assert "data check disabled (-c 0): results unverified" in result["problems"]


def test_two_complete_runs_are_mixed() -> None:
    result = kiln_nccl.parse(good_text() * 2)
    assert result["status"] == "invalid" and result["runs"] == 2
    assert "2 runs in one output (mixed)" in result["problems"]
    assert len(kiln_nccl.split_runs(good_text() * 3)) == 3
    assert kiln_nccl.parse(good_text())["runs"] == 1


def test_rows_after_the_footer_are_a_second_run() -> None:
    text = good_text()
    tail = "\n".join(text.splitlines()[30:36]) + "\n"
    result = kiln_nccl.parse(text + tail)
    assert result["status"] == "invalid" and result["runs"] == 2
    assert len(kiln_nccl.split_runs(text + tail)) == 2


def test_soak_cycles_repeat_rows_in_one_run() -> None:
    # nccl-tests -N: the sweep repeats under one header, with one footer at the end.
    lines = good_text().splitlines()
    rows = _row_lines(lines)
    repeated = lines[: rows[-1] + 1] + [lines[i] for i in rows] + lines[rows[-1] + 1:]
    result = kiln_nccl.parse("\n".join(repeated))
    assert result["status"] == "ok" and result["runs"] == 1 and len(result["rows"]) == 2 * len(rows)


def test_mid_table_row_that_does_not_fit_is_invalid() -> None:
    result = kiln_nccl.parse(good_text().replace("   383.60   43.74   76.54       0", "   383.60   43.74       0", 1))
    assert result["status"] == "invalid"
    assert any("does not match the table layout" in p for p in result["problems"])


def test_mpi_noise_starting_with_a_digit_is_not_a_row() -> None:
    text = good_text().replace("# Out of bounds", "2 more processes have sent help message help-mpi-btl.txt\n"
                                                    "# Out of bounds")
    assert kiln_nccl.parse(text)["status"] == "ok"


def test_footer_without_ok_or_failed_is_cut_off() -> None:
    text = good_text()
    cut = text[: text.index("# Out of bounds values : 0 OK") + len("# Out of bounds values : 0")]
    result = kiln_nccl.parse(cut)
    assert result["status"] == "truncated" and result["out_of_bounds"] is None


def test_legacy_error_column_with_failure_star() -> None:
    text = (FIXTURES / "nccl-tests-legacy-allgather-v100-12gpu-oob-failed.txt").read_text()
    star = text.replace("1e+00", "1e+00*", 1)
    assert star != text
    result = kiln_nccl.parse(star)
    assert result["status"] == "ok"
    assert any((r["out_of_place"] or {}).get("error_flag") or r["in_place"].get("error_flag") for r in result["rows"])


def test_oversized_input_is_truncated(monkeypatch) -> None:
    monkeypatch.setattr(kiln_nccl, "MAX_TEXT_CHARS", 2000)
    result = kiln_nccl.parse(good_text())
    assert result["status"] in ("truncated", "invalid")
    assert any("only the first 2000" in p for p in result["problems"])


def test_too_many_lines_is_truncated(monkeypatch) -> None:
    monkeypatch.setattr(kiln_nccl, "MAX_LINES", 30)
    result = kiln_nccl.parse(good_text())
    assert result["status"] != "ok" and any("more than 30 lines" in p for p in result["problems"])


def test_over_long_line_is_not_read(monkeypatch) -> None:
    monkeypatch.setattr(kiln_nccl, "MAX_LINE_CHARS", 500)
    text = good_text().replace("# Out of bounds", "x" * 1000 + "\n# Out of bounds")
    result = kiln_nccl.parse(text)
    assert result["status"] == "invalid" and any("characters long" in p for p in result["problems"])


def test_garbage_problems_are_capped() -> None:
    result = kiln_nccl.parse("1 1\n" * 20000)
    assert len(result["problems"]) < 200 and result["status"] != "ok"


def test_cpu_engine_na_cells_are_rejected() -> None:
    text = (FIXTURES / "derived-kiln-cpu-engine-3node-example.txt").read_text()
    text = text.replace("  4993.22    0.21    0.28       0  4993.22", "      N/A     N/A     N/A       0  4993.22", 1)
    result = kiln_nccl.parse(text)
    assert result["status"] == "invalid" and result["rejected_rows"][0]["size"] == 1048576
