# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The controller-library probe: which Python libraries the controller cannot import.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence

from .errors import CompatError, need_list
from .schema import show

_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*", re.ASCII)


def kiln_missing_python_libs(libs: Sequence[str]) -> list[str]:
    """Names from ``libs`` that the controller's Python cannot import."""
    libs = need_list("kiln_missing_python_libs", "the input (module names)", libs, one_ok=True)
    bad = [lib for lib in libs if not isinstance(lib, str) or not _MODULE.fullmatch(lib)]
    if bad:
        raise CompatError(f"kiln_missing_python_libs: not a Python module name: {show(bad[0])}")
    return [lib for lib in libs if not _importable(lib)]


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a dotted name whose parent package is missing
        return False
