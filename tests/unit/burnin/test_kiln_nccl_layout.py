"""module_utils/kiln/nccl/layout.py: table layouts (header or inferred), optional columns, rows that do not fit."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_paths import REPO
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.nccl import parse as kiln_nccl  # noqa: E402
from kiln_nccl_cases import FIXTURES, assert_fail_closed, good_text, load, set_limit  # noqa: E402

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


def test_headerless_rows_infer_layout() -> None:
    text = "   536870912     134217728     float     sum      -1    10052   53.41   93.46      0   9676.9   55.48   97.09      0\n" \
           "# Out of bounds values : 0 OK\n"
    result = kiln_nccl.parse(text)
    # Changed by the fail-closed rule: rows are still read, but a cut-off head (no header)
    # means the columns are guessed, so the status is no longer ok.
    assert result["status"] == "truncated" and result["rows"][0]["in_place"]["busbw"] == 97.09
    assert result["header_seen"] is False
    assert any("inferred" in p for p in result["problems"])


def test_mid_table_row_that_does_not_fit_is_invalid() -> None:
    result = kiln_nccl.parse(good_text().replace("   383.60   43.74   76.54       0", "   383.60   43.74       0", 1))
    assert result["status"] == "invalid"
    assert any("does not match the table layout" in p for p in result["problems"])


# --------------------------------------------------------------------------- the functions themselves
from kiln.nccl import layout as klay  # noqa: E402

MODERN = "size count type redop root time algbw busbw #wrong time algbw busbw #wrong".split()
MODERN_ROW = "1024 256 float sum -1 10.5 0.10 0.18 0 10.2 0.10 0.18 0".split()


def test_header_layout_and_name() -> None:
    layout = klay.header_layout(MODERN)
    assert layout == {"prefix": ["size", "count", "type", "redop", "root"],
                      "groups": [MODERN[5:9], MODERN[9:13]], "timestamp": False}
    assert klay.layout_name(layout) == "nccl-tests-2.13+"
    assert klay.header_layout(["size", "count", "busbw"]) is None  # no time column
    assert klay.header_layout(["count", "time", "busbw"]) is None
    assert klay.layout_name(klay.header_layout(MODERN + ["timestamp"])) == "nccl-tests-2.13++timestamps"


def test_guess_layout_by_row_width() -> None:
    assert klay.guess_layout(MODERN_ROW) == klay.header_layout(MODERN)
    assert klay.guess_layout(["1", "2"]) is None


def test_parse_row_accepts_rejects_and_refuses() -> None:
    layout = klay.header_layout(MODERN)
    row, reasons, info = klay.parse_row(MODERN_ROW, layout)
    assert reasons == [] and row["size"] == 1024 and row["root"] == -1
    assert row["in_place"] == {"time_us": 10.2, "algbw": 0.10, "busbw": 0.18, "wrong": 0, "error": None}
    assert info == {"size": 1024, "wrong": None, "checked": 2, "unchecked": 0}
    bad = list(MODERN_ROW)
    bad[7] = "inf"
    row, reasons, info = klay.parse_row(bad, layout)
    assert row is None and reasons == ["out-of-place busbw is not a finite number (inf)"] and info["size"] == 1024
    assert klay.parse_row(MODERN_ROW[:-1], layout) == (None, [], {})  # cut off: not this layout
    assert klay.parse_row(MODERN_ROW[:5] + ["x"] + MODERN_ROW[6:], layout) == (None, [], {})
