# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln fabric filters: the registry (name -> function) of the fabric and RDMA burn-in functions in module_utils/."""

import site
from pathlib import Path
from typing import Any

site.addsitedir(str(Path(__file__).resolve().parents[1] / "module_utils"))  # docs/architecture.md "Python layout"

from kiln.burnin import rdma as kiln_burnin_rdma  # noqa: E402
from kiln.facts import fabric_text as kiln_fabric_text  # noqa: E402
from kiln.facts import netdev as kiln_netdev  # noqa: E402
from kiln_compat_engine import gpudirect  # noqa: E402


class FilterModule:
    """kiln fabric filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_fabric_port_lines": kiln_fabric_text.kiln_fabric_port_lines,
            "kiln_node_gpudirect": gpudirect.kiln_node_gpudirect,
            "kiln_rdma_pair_plan": kiln_burnin_rdma.kiln_rdma_pair_plan,
            "kiln_rdma_judge": kiln_burnin_rdma.kiln_rdma_judge,
            "kiln_fabric_key_of": kiln_burnin_rdma.kiln_fabric_key_of,
            "kiln_rdma_argv": kiln_burnin_rdma.kiln_rdma_argv,
            "kiln_rdma_outputs": kiln_burnin_rdma.kiln_rdma_outputs,
            "kiln_rdma_node_checks": kiln_burnin_rdma.kiln_rdma_node_checks,
            "kiln_fabric_reread": kiln_burnin_rdma.kiln_fabric_reread,
            "kiln_netdev_problems": kiln_netdev.kiln_netdev_problems,
        }
