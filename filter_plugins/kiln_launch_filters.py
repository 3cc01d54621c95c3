# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln burn-in launches as a Jinja filter: ``kiln_launch_argv``.

A thin registry over ``module_utils/kiln_launch.py`` (pure Python, unit-tested
there): the filter takes the launch settings the burn-in's play keeps in one
variable (``__launch`` in playbooks/burnin.yml) and returns the argv of one
pair or fabric all-reduce. Documentation: the adjacent ``kiln_launch_argv.yml``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_KILN_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
if _KILN_MODULE_UTILS not in sys.path:
    sys.path.insert(0, _KILN_MODULE_UTILS)

from kiln_launch import LaunchError, launch_argv  # noqa: E402

try:  # ansible-core is always present when Ansible loads the plugin
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in used when ansible-core is not importable."""


#: Keys of the filter's ``launch`` mapping.
LAUNCH_KEYS = frozenset({"launcher", "ppn", "iface", "env", "slurm_names", "addresses", "reservation"})


def kiln_launch_argv(members: Any, launch: Any, program: Any, timeout: Any) -> list[str]:
    """argv of one all-reduce on *members* (inventory hosts) with the play's *launch* settings.

    *launch* holds ``launcher`` (srun or mpirun), ``ppn``, ``slurm_names``, ``addresses``,
    ``iface``, ``env`` (the run's environment: its names are forwarded by mpirun) and
    ``reservation`` (srun; empty or None for none).
    """
    if not isinstance(launch, Mapping):
        raise AnsibleFilterError(f"kiln_launch_argv: launch must be a mapping, got {type(launch).__name__}")
    unknown = sorted(set(launch) - LAUNCH_KEYS)
    if unknown:
        raise AnsibleFilterError(f"kiln_launch_argv: unknown launch keys {', '.join(map(str, unknown))}; "
                                 f"known: {', '.join(sorted(LAUNCH_KEYS))}")
    if "launcher" not in launch or "ppn" not in launch:
        raise AnsibleFilterError("kiln_launch_argv: launch needs launcher and ppn")
    env = launch.get("env") or {}
    try:
        return launch_argv(
            launch["launcher"], members, ppn=launch["ppn"], program=program, timeout=timeout,
            slurm_names=launch.get("slurm_names"), addresses=launch.get("addresses"),
            iface=launch.get("iface") or "", env_names=list(env) if isinstance(env, Mapping) else env,
            reservation=launch.get("reservation") or None)
    except LaunchError as exc:
        raise AnsibleFilterError(f"kiln_launch_argv: {exc}") from exc


class FilterModule:
    """kiln burn-in launch filter."""

    def filters(self) -> dict[str, Any]:
        return {"kiln_launch_argv": kiln_launch_argv}
