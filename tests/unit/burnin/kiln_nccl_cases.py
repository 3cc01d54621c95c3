"""Shared by the nccl parser tests: fixtures, the fail-closed assertions, limits patched everywhere."""

from __future__ import annotations

import json
import math
import sys

from kiln_paths import REPO
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.nccl import parse as kiln_nccl  # noqa: E402
from kiln.nccl import json_doc as kiln_nccl_json  # noqa: E402
from kiln.nccl import layout as kiln_nccl_layout  # noqa: E402
from kiln.nccl import result as kiln_nccl_result  # noqa: E402
from kiln.nccl import text as kiln_nccl_text  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "nccl-tests"
GOOD = FIXTURES / "nccl-tests-2.18.3-gh200-8rank-2node-int8.txt"


def load(name: str) -> dict:
    return kiln_nccl.parse((FIXTURES / name).read_text(encoding="utf-8"))


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


def set_limit(monkeypatch, name: str, value) -> None:
    """Lower one of the parser's limits (MAX_*) in every module of the parser that reads it."""
    patched = 0
    for module in (kiln_nccl, kiln_nccl_result, kiln_nccl_text, kiln_nccl_json, kiln_nccl_layout):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, value)
            patched += 1
    assert patched, name


def row_lines(lines: list) -> list:
    """Indexes of the lines that start like a result row."""
    return [i for i, line in enumerate(lines) if line.strip()[:1].isdigit()]
