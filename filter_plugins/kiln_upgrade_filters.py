# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln rolling-upgrade filters: the registry (name -> function) of module_utils/kiln/upgrade/rollout.py."""

import site
from pathlib import Path
from typing import Any

site.addsitedir(str(Path(__file__).resolve().parents[1] / "module_utils"))  # docs/architecture.md "Python layout"

from kiln.upgrade import rollout as kiln_upgrade  # noqa: E402


class FilterModule:
    """kiln rolling-upgrade filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_stack_fingerprint": kiln_upgrade.kiln_stack_fingerprint,
            "kiln_upgrade_plan": kiln_upgrade.kiln_upgrade_plan,
            "kiln_upgrade_verdicts": kiln_upgrade.kiln_upgrade_verdicts,
            "kiln_upgrade_record": kiln_upgrade.kiln_upgrade_record,
            "kiln_upgrade_node_info": kiln_upgrade.kiln_upgrade_node_info,
            "kiln_upgrade_reason": kiln_upgrade.kiln_upgrade_reason,
            "kiln_upgrade_summary": kiln_upgrade.kiln_upgrade_summary,
            "kiln_upgrade_rollback_target": kiln_upgrade.kiln_upgrade_rollback_target,
            "kiln_upgrade_next_record": kiln_upgrade.kiln_upgrade_next_record,
            "kiln_upgrade_account": kiln_upgrade.kiln_upgrade_account,
        }
