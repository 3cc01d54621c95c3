# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The repository's data/ directory, seen from this package (the controller and tests; on a node a
module is always given its file's path). Standard library only."""

from __future__ import annotations

import os

#: <repository>/data: module_utils/kiln/datafiles.py is three directories below the repository.
DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "data")


def data_path(name: str) -> str:
    """The path of data file *name* (``burnin_floors.yml``) in the repository checkout."""
    return os.path.join(DATA_DIR, name)
