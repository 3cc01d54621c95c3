# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln node-health filters: the registry (name -> function) of module_utils/kiln/health/alerts.py."""

import site
from pathlib import Path
from typing import Any

site.addsitedir(str(Path(__file__).resolve().parents[1] / "module_utils"))  # docs/architecture.md "Python layout"

from kiln.health import alerts as kiln_health_alerts  # noqa: E402


class FilterModule:
    """kiln node-health filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_health_alert_rules": kiln_health_alerts.kiln_health_alert_rules,
        }
