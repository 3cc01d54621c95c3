"""pytest configuration for kiln unit tests: make the shared helpers, filter_plugins/ and module_utils/ importable.

The tests sit in subdirectories that mirror the source (tests/unit/README.md); the shared helpers
(kiln_paths, kiln_loader, kiln_playbook) stay here, in tests/unit, which goes on sys.path for every
subdirectory. A directory's own case modules (burnin/kiln_nccl_cases.py, ...) are importable from its
tests because pytest puts each test file's directory on sys.path (the default prepend import mode, no
__init__.py files: every test file's basename is unique, tests/unit/structure/test_unit_layout.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

UNIT = Path(__file__).resolve().parent
if str(UNIT) not in sys.path:
    sys.path.insert(0, str(UNIT))
REPO = UNIT.parents[1]
FILTER_DIR = REPO / "filter_plugins"
if str(FILTER_DIR) not in sys.path:
    sys.path.insert(0, str(FILTER_DIR))
MODULE_UTILS_DIR = REPO / "module_utils"
if str(MODULE_UTILS_DIR) not in sys.path:
    sys.path.insert(0, str(MODULE_UTILS_DIR))
