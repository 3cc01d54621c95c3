# -*- coding: utf-8 -*-
"""Load kiln's filter plugins, its compatibility engine and data once, in the controller's main process."""
from __future__ import annotations

import importlib
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader

DOCUMENTATION = """
    name: kiln_warm
    type: aggregate
    short_description: Load kiln's filters and data before the first task
    description:
      - Ansible runs every task in a process forked from the controller's main process, and each of those
        processes imports the filter plugins it uses and parses data/compat.yml again (about 0.1 s of CPU
        for each task that uses a kiln filter, more where byte-code is not cached). This callback loads them
        once in the main process at the start of the run, so every forked task process inherits them.
      - It prints nothing and changes nothing; enabled by ansible.cfg (callbacks_enabled).
"""

# One filter of each kiln filter file (the loader imports the whole file for it).
WARM_FILTERS = ("kiln_pkg", "kiln_pkg_split", "kiln_slurm_node", "kiln_repo_key_verdict", "kiln_stack_violations")
# The compatibility engine's modules (module_utils/kiln_compat_engine): all of them, and its data. They import
# by top-level name once a filter registry has put module_utils/ on sys.path (docs/architecture.md "Python layout").
WARM_MODULES = (
    "kiln_compat_engine.rules", "kiln_compat_engine.recommend", "kiln_compat_engine.packages",
    "kiln_compat_engine.repos", "kiln_compat_engine.inventory", "kiln_compat_engine.report",
    "kiln_compat_engine.plan", "kiln_compat_engine.probe",
)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kiln_warm"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: Any) -> None:
        for name in WARM_FILTERS:
            try:
                filter_loader.get(name)
            except Exception:  # noqa: BLE001 - warming is best effort; the task that needs it reports errors
                continue
        try:
            for module in WARM_MODULES:
                importlib.import_module(module)
            data = importlib.import_module("kiln_compat_engine.data")
            data.compat_data()
            data.denylist_data()
        except Exception:  # noqa: BLE001 - best effort, as above
            pass
