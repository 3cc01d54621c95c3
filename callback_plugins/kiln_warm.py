# -*- coding: utf-8 -*-
"""Load kiln's filter plugins and compatibility data once, in the controller's main process."""
from __future__ import annotations

import inspect
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


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kiln_warm"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: Any) -> None:
        for name in WARM_FILTERS:
            try:
                plugin = filter_loader.get(name)
            except Exception:  # noqa: BLE001 - warming is best effort; the task that needs it reports errors
                continue
            func = getattr(plugin, "j2_function", None)
            module = inspect.getmodule(func) if func is not None else None
            for loader in ("compat_data", "denylist_data"):
                if module is not None and callable(getattr(module, loader, None)):
                    try:
                        getattr(module, loader)()
                    except Exception:  # noqa: BLE001
                        pass
