# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln burn-in launch filters: the registry (name -> function) of module_utils/kiln/burnin/launch.py, context.py
and iperf.py (the link check the launch plan runs)."""

import site
from pathlib import Path
from typing import Any

site.addsitedir(str(Path(__file__).resolve().parents[1] / "module_utils"))  # docs/architecture.md "Python layout"

from kiln.burnin import context  # noqa: E402
from kiln.burnin import iperf as kiln_iperf  # noqa: E402
from kiln.burnin import launch as kiln_launch  # noqa: E402


class FilterModule:
    """kiln burn-in launch filter."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_launch_mode": kiln_launch.kiln_launch_mode,
            "kiln_launch_program": kiln_launch.kiln_launch_program,
            "kiln_launch_argv": kiln_launch.kiln_launch_argv,
            "kiln_launch_context": context.kiln_launch_context,
            "kiln_node_link": context.kiln_node_link,
            "kiln_iperf_link": kiln_iperf.kiln_iperf_link,
        }
