"""pytest configuration for kiln unit tests: make filter_plugins/ and module_utils/ importable."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FILTER_DIR = REPO / "filter_plugins"
if str(FILTER_DIR) not in sys.path:
    sys.path.insert(0, str(FILTER_DIR))
MODULE_UTILS_DIR = REPO / "module_utils"
if str(MODULE_UTILS_DIR) not in sys.path:
    sys.path.insert(0, str(MODULE_UTILS_DIR))
