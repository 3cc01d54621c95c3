# -*- coding: utf-8 -*-
"""Parser for nccl-tests output (text and ``-J`` JSON) and kiln's CPU engine.

Pure functions, standard library only, importable both as a top-level module
(``import kiln_nccl``, used by tools/ and the unit tests) and as
``ansible.module_utils.kiln.nccl.parse`` (used by modules and plugins). This module is the
parser's API; the work is done by kiln_nccl_text (text runs; kiln_nccl_layout for the
table's columns and rows), kiln_nccl_json (``-J`` documents) and kiln_nccl_result (limits,
statuses, the result record and its verdict).

Supported inputs (see docs/burnin-format.md for the full description):

* nccl-tests text output of every layout seen in the wild:

  - 2.13+ (2022-08 on): ``size count type redop root`` then ``time algbw busbw
    #wrong`` twice (out-of-place, in-place);
  - 2.17.7+ adds ``# nccl-tests version ...``, ``# Collective test starting``,
    ``unalign:`` and ``# Collective test concluded``; 2.19 adds ``-I 1``
    per-iteration columns (``i_min i_max i_p99 i_cv%``) and ``-S 1`` timestamps;
  - before 2022-08: no ``root`` column (or no ``redop`` column for
    all_gather), and an ``error`` column holding the maximum relative error
    as a float (``2e-07``) instead of a ``#wrong`` count;
  - ``-C`` reports ``cputime`` instead of ``time``; ``-c 0`` prints ``N/A``
    for ``#wrong``;
  - MPI noise, ``NCCL version`` / ``NCCL INFO`` lines, ``mpirun --tag-output``
    prefixes (``[1,0]<stdout>:``) and failure lines (``Test NCCL failure``).

* nccl-tests ``-J`` JSON (release 2.17.7+), as written by src/util.cu.

* kiln's CPU engine, which prints the nccl-tests text layout (see
  ``CPU_ENGINE_MARKER`` and docs/burnin-format.md).

The result is a plain dict (JSON-serialisable, no NaN or infinity anywhere).
It fails closed: ``status`` is ``ok`` only when the output is one complete,
trustworthy run, i.e. all of

* at least one result row was accepted, and every accepted row's time, algbw
  and busbw are finite, non-negative and sane (busbw/algbw <= ``MAX_BW_GBS``,
  time <= ``MAX_TIME_US``), its ``#wrong`` a non-negative integer or ``N/A``;
* the table header was seen (``header_seen``; the column layout was not
  guessed from the row width);
* the text holds exactly one run (``runs == 1``);
* the "Out of bounds values : N OK|FAILED" footer is present (``out_of_bounds``);
* no result row was rejected, cut off or out of layout; with the footer
  present, the rows are whole sweeps of the sizes the nThread line announces
  (``minBytes`` to ``maxBytes`` by ``step``, or the lowered "Reducing
  maxBytes"; ``-N`` cycles and ``-d all`` repeat whole sweeps), each in
  increasing size;
* the input was within ``MAX_TEXT_CHARS`` characters, ``MAX_LINES`` lines,
  ``MAX_ROWS`` rows.

Otherwise ``status`` is (``STATUSES``):

* ``unparseable`` -- no result row at all and nothing judged invalid (also
  invalid or cut-off JSON);
* ``invalid`` (``STATUS_INVALID``) -- the output holds something that cannot be
  trusted as a measurement: a row with a non-finite (``inf``, ``nan``,
  ``1e999``, JSON ``Infinity``/``NaN``), negative or absurd number (rejected,
  listed in ``rejected_rows``, never in ``rows``), a result row in the middle
  of the table that does not fit the layout, a row missing, repeated or out of
  order, several runs in one output (``"N runs in one output (mixed)"``: a run
  opener -- ``# nccl-tests version``, ``# Collective test starting``,
  ``# nThread``, ``# kiln-cpu-engine`` -- after result rows, or result rows
  after the footer), two nThread lines that disagree, ``validation: 0`` with
  printed ``#wrong`` counts, an unreadable footer count, an over-long line,
  more than ``MAX_ROWS`` rows, or JSON of the wrong shape; it wins over
  ``truncated``;
* ``truncated`` -- rows but no footer, a cut-off last row, no table header
  (the head of the output is missing, so the columns are unknown), or an
  input beyond ``MAX_TEXT_CHARS`` / ``MAX_LINES`` (only its head was parsed).

``problems`` says why, in words.  ``data_check`` is True when every result
cell printed a ``#wrong`` count (or a legacy ``error`` value), False when any
printed ``N/A`` (``-c 0``) or the run says ``validation: 0`` -- the problem
"data check disabled (-c 0): results unverified" is added and the status stays
``ok``, so verdicts must not PASS such a run -- and None when unknown (no rows,
or ``validation: 0`` contradicted by printed counts, which is ``invalid``).
``rejected_rows`` lists rows refused as measurements (``line`` or JSON index,
``size``, ``wrong``: the #wrong counts that could be read, ``reason``).  The
"Avg bus bandwidth" line is captured under ``avg_busbw`` and flagged
``informational``: it averages every size and both placements, so verdicts
never use it.
"""

from __future__ import annotations

import re
from typing import Any, Dict

from .json_doc import parse_json
from .result import (
    CPU_ENGINE_MARKER, MAX_BW_GBS, MAX_LINE_CHARS, MAX_LINES, MAX_ROWS, MAX_TEXT_CHARS, MAX_TIME_US,
    STATUS_INVALID, STATUS_OK, STATUS_TRUNCATED, STATUS_UNPARSEABLE, STATUSES, ParseError, as_text,
    empty_result, nccl_version_from_code,
)
from .text import parse_text, split_runs

__all__ = [
    "CPU_ENGINE_MARKER",
    "MAX_BW_GBS",
    "MAX_LINE_CHARS",
    "MAX_LINES",
    "MAX_ROWS",
    "MAX_TEXT_CHARS",
    "MAX_TIME_US",
    "ParseError",
    "STATUSES",
    "STATUS_INVALID",
    "STATUS_OK",
    "STATUS_TRUNCATED",
    "STATUS_UNPARSEABLE",
    "detect_format",
    "nccl_version_from_code",
    "parse",
    "parse_json",
    "parse_size",
    "parse_text",
    "split_runs",
]

_SIZE_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(value: Any) -> int:
    """Return a byte count from ``16G``/``512M``/``1K``/``8`` (binary suffixes, as nccl-tests -b/-e).

    Raises ValueError on anything else (including numbers too long to convert).
    """
    if isinstance(value, bool):
        raise ValueError("size must be a number or a string like 16G, not a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = str(value).strip().upper()
    match = re.fullmatch(r"([0-9]{1,30})\s*([KMGT]?)(I?B)?", text)
    if not match:
        raise ValueError(f"invalid size {str(value)[:40]!r}: expected e.g. 8, 512M, 16G")
    return int(match.group(1)) * _SIZE_SUFFIX[match.group(2)]


def detect_format(text: str) -> str:
    """Return ``json`` when *text* starts like a JSON object (a -J file), else ``text``."""
    return "json" if re.match(r"\s*\{", as_text(text)) else "text"


def parse(text: Any, fmt: str = "auto") -> Dict[str, Any]:
    """Parse *text* (nccl-tests text, -J JSON or kiln CPU engine); *fmt* is auto|text|json.

    Never raises on any input text (a bad *fmt* is a programming error: ValueError).
    """
    if fmt not in ("auto", "text", "json"):
        raise ValueError(f"unknown format {fmt!r}: expected auto, text or json")
    text = as_text(text)
    if fmt == "auto":
        fmt = detect_format(text)
    if fmt == "json":
        try:
            return parse_json(text)
        except ParseError as exc:
            result = empty_result("json")
            result["problems"].append(str(exc))
            result["problems"].append("no result rows found")
            return result
    return parse_text(text)
