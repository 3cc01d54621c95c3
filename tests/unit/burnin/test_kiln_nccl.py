"""Parser for nccl-tests text / -J JSON output and kiln's CPU engine: the API of module_utils/kiln/nccl/parse.py
on recorded outputs and hostile text (JSON: test_kiln_nccl_json.py; runs and limits: test_kiln_nccl_text.py;
columns and rows: test_kiln_nccl_layout.py; the result record: test_kiln_nccl_result.py)."""

from __future__ import annotations

import json
import math
import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_paths import REPO
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.nccl import parse as kiln_nccl  # noqa: E402
from kiln_nccl_cases import FIXTURES, GOOD, assert_fail_closed, good_text, load, row_lines  # noqa: E402

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


def test_cpu_engine_format() -> None:
    result = load("derived-kiln-cpu-engine-3node-example.txt")
    assert result["engine"] == "kiln-cpu" and result["engine_version"] == "1"
    assert result["config"]["engine_backend"] == "gloo"
    assert result["layout"] == "kiln-cpu-engine/nccl-tests-2.13+"
    assert result["nranks"] == 3 and result["devices"][0]["device"] == -1
    assert result["status"] == "ok"


def test_tag_output_prefix_and_avg_check() -> None:
    lines = (FIXTURES / "nccl-tests-2.13-h100-16rank-2node.txt").read_text().splitlines()
    tagged = "\n".join("[1,0]<stdout>:" + line for line in lines)
    tagged = tagged.replace("Avg bus bandwidth    : 70.742 ", "Avg bus bandwidth    : 70.742 FAILED")
    result = kiln_nccl.parse(tagged)
    assert result["status"] == "ok" and len(result["rows"]) == 31
    assert result["avg_busbw"] == {"value": 70.742, "check": "FAILED", "informational": True}


@pytest.mark.parametrize("text", ["", "garbage\n", "mpirun: command not found\n", "# nThread 1 nGpus 8 minBytes 8 maxBytes 8\n"])
def test_unparseable(text: str) -> None:
    result = kiln_nccl.parse(text)
    assert result["status"] == "unparseable" and result["rows"] == []


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

MEASURE_COLUMNS = (5, 6, 7, 9, 10, 11)  # time, algbw, busbw of both placements in a 2.13+ row
HOSTILE_NUMBERS = ["inf", "-inf", "nan", "NaN", "Infinity", "1e999", "-1e999", "-5", "-0.5", "9e9", "1e7",
                   "9" * 5000]
HOSTILE_TOKENS = HOSTILE_NUMBERS + ["1e-999999", "N/A", "-", "", "0x10", "1_0", "١٢", "12abc", "1e", "."]


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
        rows = row_lines(lines)
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
    rows = row_lines(lines)
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


def test_cpu_engine_na_cells_are_rejected() -> None:
    text = (FIXTURES / "derived-kiln-cpu-engine-3node-example.txt").read_text()
    text = text.replace("  4993.22    0.21    0.28       0  4993.22", "      N/A     N/A     N/A       0  4993.22", 1)
    result = kiln_nccl.parse(text)
    assert result["status"] == "invalid" and result["rejected_rows"][0]["size"] == 1048576
