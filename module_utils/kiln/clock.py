# -*- coding: utf-8 -*-
"""kiln's clock: every time kiln records is UTC, and every epoch is true epoch seconds.

Ansible's ``now(utc=true)`` is a *naive* datetime that holds UTC wall-clock time. Python
reads a naive datetime as local time, so both ``now(utc=true).timestamp()`` and
``now(utc=true, fmt='%s')`` are off by the controller's UTC offset (5 h ahead on a controller
in New York, 5.5 h behind in Kolkata). ``now(utc=true, fmt='%Y-%m-%dT%H:%M:%SZ')`` is right
(only ``%s``, ``%z`` and ``%Z`` depend on the zone). The playbooks take epoch seconds and run
ids from here (filters ``kiln_utc_epoch`` and ``kiln_run_id``); a node's own epoch comes from
its ``time.time()`` (module ``kiln_kernel_log``), never from a formatted datetime.

Standard library only; importable as ``kiln.clock`` and as ``ansible.module_utils.kiln.clock``.
"""

from __future__ import annotations

import datetime
import math
import re
import secrets
from typing import Any, Optional

from .errors import FilterError

UTC = datetime.timezone.utc
#: Compact UTC stamp of run ids and directory names (sorts in time order).
COMPACT = "%Y%m%dT%H%M%SZ"
#: ISO-8601 UTC stamp of reports and history records.
ISO = "%Y-%m-%dT%H:%M:%SZ"
_EPOCH_RE = re.compile(r"^\d{1,12}(\.\d+)?$")
_COMPACT_RE = re.compile(r"^\d{8}T\d{6}Z$")
_TOKEN_RE = re.compile(r"^[0-9a-z]{4,32}$")
_SUFFIX_RE = re.compile(r"^[A-Za-z0-9_.-]{0,64}$")


class KilnTimeError(ValueError):
    """A value that is not a point in time kiln can place in UTC."""


def as_utc(value: Any) -> datetime.datetime:
    """An aware UTC datetime from a point in time.

    Accepted: a naive ``datetime`` (UTC wall-clock time, as Ansible's ``now(utc=true)`` gives:
    never pass ``now()``, which is local), an aware ``datetime``, epoch seconds (int, float or
    a string of digits), an ISO-8601 string with ``Z`` or an offset, or a compact
    ``20260101T000000Z`` stamp. A string without a zone is refused: it says no zone.
    """
    if isinstance(value, datetime.datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, bool) or value is None:
        raise KilnTimeError(f"not a point in time: {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 0:
            raise KilnTimeError(f"not epoch seconds: {value!r}")
        return datetime.datetime.fromtimestamp(value, UTC)
    if isinstance(value, str):
        text = value.strip()
        if _EPOCH_RE.match(text):
            return as_utc(float(text))
        if _COMPACT_RE.match(text):
            return datetime.datetime.strptime(text, COMPACT).replace(tzinfo=UTC)
        try:
            parsed = datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        except ValueError:
            raise KilnTimeError(f"not an ISO-8601 time: {text[:60]!r}") from None
        if parsed.tzinfo is None:
            raise KilnTimeError(f"{text[:60]!r} has no zone (add Z for UTC): refused, it could be any zone")
        return parsed.astimezone(UTC)
    raise KilnTimeError(f"not a point in time: {type(value).__name__}")


def epoch(value: Any) -> int:
    """Whole epoch seconds (UTC, independent of the zone of the machine) of *value* (see as_utc)."""
    return math.floor(as_utc(value).timestamp())


def iso(value: Any) -> str:
    """``2026-01-01T00:00:00Z``."""
    return as_utc(value).strftime(ISO)


def compact(value: Any) -> str:
    """``20260101T000000Z``."""
    return as_utc(value).strftime(COMPACT)


def new_token(nbytes: int = 6) -> str:
    """A random hex token (12 hex digits, 48 bits, by default: 2,000 ids drawn in one second collide with odds of about 1 in 70 million)."""
    return secrets.token_hex(nbytes)


def run_id(value: Any, suffix: Any = "", token: Optional[str] = None) -> str:
    """A run id unique per invocation: ``<UTC to the second>-<random token>[-<suffix>]``.

    ``20260101T000000Z-3f9a0c-default``: ids sort by start time, and two runs started in the
    same second get different ids (the token). *token* is for tests; None draws a new one.
    """
    suffix = "" if suffix is None else str(suffix)
    if not _SUFFIX_RE.match(suffix):
        raise KilnTimeError(f"run id suffix {suffix[:40]!r}: letters, digits, '_', '.', '-' only")
    token = new_token() if token is None else str(token)
    if not _TOKEN_RE.match(token):
        raise KilnTimeError(f"run id token {token[:40]!r}: 4-32 lowercase letters or digits")
    return "-".join(part for part in (compact(value), token, suffix) if part)

# --------------------------------------------------------------------------- the filters
# What filter_plugins/kiln_time_filters.py registers: each input checked (one FilterError naming the
# filter and the input), then the functions above.

def kiln_utc_epoch(value: Any) -> int:
    """True epoch seconds of now(utc=true) (naive UTC), an aware datetime, an ISO-8601 time with a zone."""
    try:
        return epoch(value)
    except KilnTimeError as exc:
        raise FilterError(f"kiln_utc_epoch: {exc}") from exc


def kiln_run_id(value: Any, suffix: Any = "") -> str:
    """<UTC to the second>-<random token>[-<suffix>]: unique per invocation."""
    try:
        return run_id(value, suffix)
    except KilnTimeError as exc:
        raise FilterError(f"kiln_run_id: {exc}") from exc
