# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln rolling-upgrade filters: thin wrappers of module_utils/kiln_upgrade.py.

Documentation for each filter is in the adjacent ``<filter_name>.yml`` sidecar files.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_KILN_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
if _KILN_MODULE_UTILS not in sys.path:
    sys.path.insert(0, _KILN_MODULE_UTILS)

import kiln_upgrade as _core  # noqa: E402
from kiln_sinfo import parse_sinfo  # noqa: E402

try:  # ansible-core is always present when Ansible loads the plugin
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in used when ansible-core is not importable."""


def _wrap(func: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except _core.UpgradeConfigError as exc:
            raise AnsibleFilterError(str(exc)) from exc
    call.__name__ = func.__name__
    call.__doc__ = func.__doc__
    return call


def kiln_stack_fingerprint(stack: Any) -> str:
    """12 hex of sha256 over the canonical JSON of a resolved stack."""
    return _wrap(_core.stack_fingerprint)(stack)


def kiln_upgrade_plan(nodes: Any, info: Any, sinfo_lines: Any = None, slurm_names: Any = None, batch: Any = 1,
                      rollback: Any = False) -> Any:
    """The rollout (done, todo, held, unreachable, batches) from stack records and sinfo lines (None: no Slurm)."""
    sinfo = None if sinfo_lines is None else parse_sinfo(sinfo_lines)
    return _wrap(_core.plan)(list(nodes), dict(info or {}), sinfo, dict(slurm_names or {}), batch, _flag(rollback))


def kiln_upgrade_rollback_target(applied: Any, previous: Any) -> Any:
    """The record of the stack a rollback returns the node to (applied, when a rollback wrote it; else previous), or None."""
    return _core.rollback_target(applied, previous)


def kiln_upgrade_next_record(new: Any, old: Any = None, rollback: Any = False) -> Any:
    """The applied record to write: *new*, plus rolled_back_from when a rollback changes the stack (kept while it stays)."""
    return _wrap(_core.next_record)(new, old, _flag(rollback))


def kiln_upgrade_account(plan: Any, hostvars: Any, batch: Any, unreachable: Any = (), max_fail_percentage: Any = 0) -> Any:
    """Whether this batch may start: every node of the earlier batches verified, every node of this one answering."""
    return _wrap(_core.account)(plan, _statuses(plan, hostvars), list(batch or []), list(unreachable or []),
                                max_fail_percentage)


def kiln_upgrade_record(text: Any) -> Any:
    """A JSON object from text, or None (empty, not JSON, not an object)."""
    return _core.read_record(text)


def kiln_upgrade_node_info(hostvars_of_node: Any) -> Any:
    """{reachable, intended, applied} of one node from the plan play's facts."""
    return _core.node_info(hostvars_of_node)


def kiln_upgrade_verdicts(batch: Any, summary: Any) -> Any:
    """Each node of a batch from its burn-in summary; missing or unreadable -> INCOMPLETE."""
    return _core.batch_verdicts(list(batch), summary)


def kiln_upgrade_reason(fingerprint: Any, run_id: Any) -> str:
    """The drain reason of a batch under upgrade (UPGRADE: ...)."""
    return _core.drain_reason(str(fingerprint), str(run_id))


def kiln_upgrade_summary(plan: Any, hostvars: Any, run_id: Any = "") -> Any:
    """The rollout's report from the plan and each node's kiln_upgrade_status fact (hostvars)."""
    return _core.summary(plan, _statuses(plan, hostvars), str(run_id))


def _statuses(plan: Any, hostvars: Any) -> dict[str, Any]:
    """{node: its kiln_upgrade_status fact or None} for the plan's nodes to do."""
    if not isinstance(plan, Mapping):
        raise AnsibleFilterError(f"kiln upgrade: the plan must be the kiln_upgrade_plan mapping, not {type(plan).__name__}")
    statuses = {}
    for node in list(plan.get("todo") or []):
        try:
            statuses[node] = hostvars[node].get("kiln_upgrade_status")
        except (KeyError, AttributeError, TypeError):
            statuses[node] = None
    return statuses


def _flag(value: Any) -> bool:
    """A boolean flag as Ansible's bool filter reads it (a string 'false' is false)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


class FilterModule:
    """kiln rolling-upgrade filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_stack_fingerprint": kiln_stack_fingerprint,
            "kiln_upgrade_plan": kiln_upgrade_plan,
            "kiln_upgrade_verdicts": kiln_upgrade_verdicts,
            "kiln_upgrade_record": kiln_upgrade_record,
            "kiln_upgrade_node_info": kiln_upgrade_node_info,
            "kiln_upgrade_reason": kiln_upgrade_reason,
            "kiln_upgrade_summary": kiln_upgrade_summary,
            "kiln_upgrade_rollback_target": kiln_upgrade_rollback_target,
            "kiln_upgrade_next_record": kiln_upgrade_next_record,
            "kiln_upgrade_account": kiln_upgrade_account,
        }
