# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln Slurm filters: the registry (name -> function) of module_utils/kiln/slurm/nodes.py."""

import site
from pathlib import Path
from typing import Any

site.addsitedir(str(Path(__file__).resolve().parents[1] / "module_utils"))  # docs/architecture.md "Python layout"

from kiln.slurm import nodes as kiln_slurm_nodes  # noqa: E402


class FilterModule:
    """kiln Slurm filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_slurm_gpu_type": kiln_slurm_nodes.kiln_slurm_gpu_type,
            "kiln_slurm_gpu_files": kiln_slurm_nodes.kiln_slurm_gpu_files,
            "kiln_slurm_node": kiln_slurm_nodes.kiln_slurm_node,
            "kiln_slurm_node_descriptions": kiln_slurm_nodes.kiln_slurm_node_descriptions,
            "kiln_slurm_node_plan": kiln_slurm_nodes.kiln_slurm_node_plan,
        }
