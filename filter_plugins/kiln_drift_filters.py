# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln as-built and drift filters: the registry (name -> function) of module_utils/kiln/packages/drift.py."""

import site
from pathlib import Path
from typing import Any

site.addsitedir(str(Path(__file__).resolve().parents[1] / "module_utils"))  # docs/architecture.md "Python layout"

from kiln.packages import drift as kiln_drift  # noqa: E402


class FilterModule:
    """kiln as-built and drift filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_as_built": kiln_drift.kiln_as_built,
            "kiln_node_drift": kiln_drift.kiln_node_drift,
            "kiln_drift_expected_pins": kiln_drift.kiln_drift_expected_pins,
            "kiln_drift_report": kiln_drift.kiln_drift_report,
            "kiln_drift_prom": kiln_drift.kiln_drift_prom,
        }
