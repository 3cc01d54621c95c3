# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln time filters: the registry (name -> function) of module_utils/kiln/clock.py."""

import site
from pathlib import Path
from typing import Any

site.addsitedir(str(Path(__file__).resolve().parents[1] / "module_utils"))  # docs/architecture.md "Python layout"

from kiln import clock as kiln_time  # noqa: E402


class FilterModule:
    """kiln time filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_utc_epoch": kiln_time.kiln_utc_epoch,
            "kiln_run_id": kiln_time.kiln_run_id,
        }
