# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Version parsing and arithmetic: kiln's version ordering and its helpers.

``kiln_version_key`` orders versions numerically per component (``550.54.14 <
550.127.05``, ``12.4 == 12.4.0``, ``1.0rc1 < 1.0``); the ``kiln_version_*``
filters are built on it. The ``_``-prefixed helpers (major, major.minor,
ranges) are shared by the rest of the package.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .errors import CompatError
from .schema import show


_TOKEN = re.compile(r"[0-9]+|[A-Za-z]+", re.ASCII)
_MAX_VERSION = 128


def kiln_version_key(version: Any) -> tuple[tuple[int, Any], ...]:
    """Sort key that orders versions numerically per component.

    ``550.54.14 < 550.127.05``, ``12.4 == 12.4.0``, ``13.0 < 13.2``, ``1.0rc1 < 1.0``.
    Numbers rank (2, n), the end of the version (1, ""), letters (0, s): a
    pre-release tag sorts before the release it precedes.
    """
    if version is None:
        raise CompatError("kiln_version_key: version is None")
    if isinstance(version, int) and not isinstance(version, bool) and version.bit_length() > 200:
        raise CompatError(f"kiln_version_key: {show(version)} is not a version")
    text = str(version)
    if len(text) > _MAX_VERSION:
        raise CompatError(f"kiln_version_key: {show(text)} is longer than {_MAX_VERSION} characters: not a version")
    tokens: list[tuple[int, Any]] = []
    for tok in _TOKEN.findall(text):
        if tok.isdigit():
            tokens.append((2, int(tok)))
        else:
            while tokens and tokens[-1] == (2, 0):
                tokens.pop()
            tokens.append((0, tok.lower()))
    while tokens and tokens[-1] == (2, 0):
        tokens.pop()
    return tuple(tokens) + ((1, ""),)


def kiln_version_cmp(a: Any, b: Any) -> int:
    """Compare two versions: -1 if a < b, 0 if equal, 1 if a > b."""
    ka, kb = kiln_version_key(a), kiln_version_key(b)
    return (ka > kb) - (ka < kb)


_OPS = {
    "<": lambda c: c < 0, "lt": lambda c: c < 0,
    "<=": lambda c: c <= 0, "le": lambda c: c <= 0,
    "==": lambda c: c == 0, "=": lambda c: c == 0, "eq": lambda c: c == 0,
    "!=": lambda c: c != 0, "ne": lambda c: c != 0,
    ">=": lambda c: c >= 0, "ge": lambda c: c >= 0,
    ">": lambda c: c > 0, "gt": lambda c: c > 0,
}


def kiln_version_compare(a: Any, op: str, b: Any) -> bool:
    """Return ``a <op> b`` with kiln's version ordering (op: < <= == != >= > or lt/le/eq/ne/ge/gt)."""
    if not isinstance(op, str) or op not in _OPS:
        raise CompatError(f"kiln_version_compare: unknown operator {show(op)}; use one of {sorted(_OPS)}")
    return _OPS[op](kiln_version_cmp(a, b))


def kiln_version_sort(versions: Iterable[Any], reverse: bool = False) -> list[Any]:
    """Sort a list of versions with kiln's version ordering."""
    if isinstance(versions, (str, bytes)) or not isinstance(versions, Iterable):
        raise CompatError(f"kiln_version_sort: expected a list of versions, got {type(versions).__name__}")
    return sorted(versions, key=kiln_version_key, reverse=bool(reverse))


def _nums(version: str) -> list[int]:
    text = str(version)
    if len(text) > _MAX_VERSION:
        raise CompatError(f"kiln: {show(text)} is not a version")
    nums = [int(x) for x in re.findall(r"[0-9]+", text, re.ASCII)]
    if not nums:
        raise CompatError(f"kiln: {show(text)} is not a version (no number in it)")
    return nums


def _mm(version: str) -> str:
    n = _nums(version)
    return f"{n[0]}.{n[1] if len(n) > 1 else 0}"


def _slurm_major(version: str) -> str:
    """Slurm majors are YY.MM strings: ``23.02.7`` -> ``23.02``."""
    return ".".join(str(version).split(".")[:2])


def _major(version: str) -> str:
    return str(_nums(version)[0])


def _ge(a: str, b: str) -> bool:
    return kiln_version_cmp(a, b) >= 0


def _in_range(version: str, spec: str) -> bool:
    """``spec`` is comma-separated bounds such as ``>=1.0,<1.17.8``."""
    for part in str(spec).split(","):
        part = part.strip()
        m = re.match(r"^(>=|<=|==|!=|>|<)\s*(\S+)$", part)
        if not m:
            raise CompatError(f"kiln: bad version range {show(spec)}")
        if not kiln_version_compare(version, m.group(1), m.group(2)):
            return False
    return True
