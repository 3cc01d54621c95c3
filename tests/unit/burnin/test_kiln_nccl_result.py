"""module_utils/kiln/nccl/result.py: NCCL version codes, the result record, number checks and the verdict."""

from __future__ import annotations

import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_paths import REPO
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.nccl import parse as kiln_nccl  # noqa: E402
from kiln_nccl_cases import FIXTURES, assert_fail_closed, good_text, load, set_limit  # noqa: E402


@pytest.mark.parametrize(("code", "version"), [(23004, "2.30.4"), (22703, "2.27.3"), (2708, "2.7.8"), (0, None), (None, None)])
def test_nccl_version_from_code(code, version) -> None:
    assert kiln_nccl.nccl_version_from_code(code) == version


# --------------------------------------------------------------------------- the functions themselves
from kiln.nccl import result as kres  # noqa: E402


def test_kiln_nccl_re_exports_the_shared_names() -> None:
    for name in ("STATUS_OK", "STATUSES", "MAX_BW_GBS", "MAX_TEXT_CHARS", "ParseError", "nccl_version_from_code"):
        assert getattr(kiln_nccl, name) is getattr(kres, name)


@pytest.mark.parametrize(("value", "why"), [
    (1.5, None), (None, "busbw missing (N/A)"), (math.inf, "busbw is not a finite number (N/A)"),
    (-1.0, "busbw is negative (N/A)"), (2e6, "busbw N/A is above the sane bound 1e+06"),
])
def test_check_measure(value, why) -> None:
    assert kres.check_measure("busbw", value, "N/A", kres.MAX_BW_GBS) == why


def test_check_wrong_and_safe_int() -> None:
    assert kres.check_wrong(None, "N/A") == (None, None)
    assert kres.check_wrong(3.0, "3") == (3, None)
    assert kres.check_wrong(2.5, "2.5") == (None, "#wrong 2.5 is not a non-negative integer count")
    assert kres.safe_int(" 42 ") == 42 and kres.safe_int("9" * 25) is None and kres.safe_int(True) is None


def test_finish_on_an_empty_record_fails_closed() -> None:
    result = kres.empty_result("text")
    kres.finish(result, kres.new_state(True))
    assert result["status"] == kres.STATUS_UNPARSEABLE and result["problems"] == ["no result rows found"]
    result = kres.empty_result("json")
    state = kres.new_state(False)
    kres.reject_row(state, result, 0, ["busbw is negative (-1)"], {"size": 8, "wrong": None})
    kres.finish(result, state)
    assert result["status"] == kres.STATUS_INVALID and result["rejected_rows"][0]["size"] == 8
    assert "no result row accepted as a measurement" in result["problems"]
