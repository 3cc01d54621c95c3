"""module_utils/kiln/nccl/text.py: runs in one output, soak cycles, the footer, input limits."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_paths import REPO
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.nccl import parse as kiln_nccl  # noqa: E402
from kiln_nccl_cases import FIXTURES, assert_fail_closed, good_text, load, row_lines, set_limit  # noqa: E402


def test_split_runs_of_repeated_output() -> None:
    one = (FIXTURES / "nccl-tests-2.18.3-gh200-8rank-2node-int8.txt").read_text()
    runs = kiln_nccl.split_runs(one + one + one)
    assert len(runs) == 3
    assert all(kiln_nccl.parse(r)["status"] == "ok" for r in runs)


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
    rows = row_lines(lines)
    repeated = lines[: rows[-1] + 1] + [lines[i] for i in rows] + lines[rows[-1] + 1:]
    result = kiln_nccl.parse("\n".join(repeated))
    assert result["status"] == "ok" and result["runs"] == 1 and len(result["rows"]) == 2 * len(rows)


def test_oversized_input_is_truncated(monkeypatch) -> None:
    set_limit(monkeypatch, "MAX_TEXT_CHARS", 2000)
    result = kiln_nccl.parse(good_text())
    assert result["status"] in ("truncated", "invalid")
    assert any("only the first 2000" in p for p in result["problems"])


def test_too_many_lines_is_truncated(monkeypatch) -> None:
    set_limit(monkeypatch, "MAX_LINES", 30)
    result = kiln_nccl.parse(good_text())
    assert result["status"] != "ok" and any("more than 30 lines" in p for p in result["problems"])


def test_over_long_line_is_not_read(monkeypatch) -> None:
    set_limit(monkeypatch, "MAX_LINE_CHARS", 500)
    text = good_text().replace("# Out of bounds", "x" * 1000 + "\n# Out of bounds")
    result = kiln_nccl.parse(text)
    assert result["status"] == "invalid" and any("characters long" in p for p in result["problems"])


def test_garbage_problems_are_capped() -> None:
    result = kiln_nccl.parse("1 1\n" * 20000)
    assert len(result["problems"]) < 200 and result["status"] != "ok"


# --------------------------------------------------------------------------- the functions themselves
from kiln.nccl import text as ktxt  # noqa: E402


def test_kiln_nccl_dispatches_to_the_text_parser() -> None:
    assert kiln_nccl.parse_text is ktxt.parse_text and kiln_nccl.split_runs is ktxt.split_runs
    assert ktxt.parse_text(good_text()) == kiln_nccl.parse(good_text())


def test_split_runs_keeps_text_before_the_first_run_with_it() -> None:
    runs = ktxt.split_runs("mpirun noise\n" + good_text() + good_text())
    assert len(runs) == 2 and runs[0].startswith("mpirun noise\n")
    assert all(kiln_nccl.parse(run)["status"] == "ok" for run in runs)
