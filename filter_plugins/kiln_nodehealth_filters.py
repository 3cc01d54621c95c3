# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln-health filters: the registry (name -> function) of module_utils/kiln/nodehealth/."""

import site
from pathlib import Path
from typing import Any

site.addsitedir(str(Path(__file__).resolve().parents[1] / "module_utils"))  # docs/architecture.md "Python layout"

from kiln.nodehealth import config as kiln_nodehealth_config  # noqa: E402


class FilterModule:
    """kiln-health filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_health_config_problem": kiln_nodehealth_config.problem,
        }
