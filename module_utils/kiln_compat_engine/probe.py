# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The controller-library probe: which Python libraries the controller cannot import.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence


def kiln_missing_python_libs(libs: Sequence[str]) -> list[str]:
    """Names from ``libs`` that the controller's Python cannot import."""
    if isinstance(libs, (str, bytes)):
        libs = [libs]
    return [str(lib) for lib in libs if importlib.util.find_spec(str(lib)) is None]
