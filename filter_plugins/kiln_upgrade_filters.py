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


def _names(func: str, what: str, value: Any) -> list[str]:
    """*value* as a list of node names, or one AnsibleFilterError naming the filter and the input."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(name, str) for name in value):
        raise AnsibleFilterError(f"{func}: {what} must be a list of node names, got {type(value).__name__}")
    return list(value)


def _mapping(func: str, what: str, value: Any, values: tuple[type, ...] = ()) -> dict[Any, Any]:
    """*value* (none: empty) as a dict, its values of *values* types (or none) when given."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or (values and not all(v is None or isinstance(v, values) for v in value.values())):
        raise AnsibleFilterError(f"{func}: {what} must be a mapping, got {type(value).__name__}")
    return dict(value)


def kiln_stack_fingerprint(stack: Any) -> str:
    """12 hex of sha256 over the canonical JSON of a resolved stack."""
    try:
        return _core.stack_fingerprint(stack)
    except _core.UpgradeConfigError as exc:
        raise AnsibleFilterError(f"kiln_stack_fingerprint: {exc}") from exc


def kiln_upgrade_plan(nodes: Any, info: Any, sinfo_lines: Any = None, slurm_names: Any = None, batch: Any = 1,
                      rollback: Any = False) -> Any:
    """The rollout (done, todo, held, unreachable, batches) from stack records and sinfo lines (None: no Slurm)."""
    name = "kiln_upgrade_plan"
    nodes = _names(name, "the input (the nodes)", nodes)
    info = _mapping(name, "info (node -> {reachable, intended, applied})", info, (Mapping,))
    if sinfo_lines is not None and not isinstance(sinfo_lines, (list, tuple)):
        raise AnsibleFilterError(f"{name}: the sinfo lines must be a list, got {type(sinfo_lines).__name__}")
    slurm_names = _mapping(name, "slurm_names (node -> Slurm name)", slurm_names, (str,))
    sinfo = None if sinfo_lines is None else parse_sinfo(sinfo_lines)
    return _wrap(_core.plan)(nodes, info, sinfo, slurm_names, batch, _flag(rollback))


def kiln_upgrade_rollback_target(applied: Any, previous: Any) -> Any:
    """The record of the stack a rollback returns the node to (applied, when a rollback wrote it; else previous), or None."""
    for what, record in (("applied", applied), ("previous", previous)):
        if record is not None and not isinstance(record, Mapping):
            raise AnsibleFilterError(f"kiln_upgrade_rollback_target: {what} must be a stack record (a mapping) or none, "
                                     f"got {type(record).__name__}")
    return _core.rollback_target(applied, previous)


def kiln_upgrade_next_record(new: Any, old: Any = None, rollback: Any = False) -> Any:
    """The applied record to write: *new*, plus rolled_back_from when a rollback changes the stack (kept while it stays)."""
    if not isinstance(new, Mapping):
        raise AnsibleFilterError(f"kiln_upgrade_next_record: the input must be a stack record (a mapping), "
                                 f"got {type(new).__name__}")
    if old is not None and not isinstance(old, Mapping):
        raise AnsibleFilterError(f"kiln_upgrade_next_record: old must be a stack record (a mapping) or none, "
                                 f"got {type(old).__name__}")
    try:
        return _core.next_record(new, old, _flag(rollback))
    except _core.UpgradeConfigError as exc:
        raise AnsibleFilterError(f"kiln_upgrade_next_record: {exc}") from exc


def kiln_upgrade_account(plan: Any, hostvars: Any, batch: Any, unreachable: Any = (), max_fail_percentage: Any = 0) -> Any:
    """Whether this batch may start: every node of the earlier batches verified, every node of this one answering."""
    name = "kiln_upgrade_account"
    batch = _names(name, "batch (the nodes of this batch)", batch or [])
    unreachable = _names(name, "unreachable (node names)", unreachable or [])
    return _wrap(_core.account)(plan, _statuses(plan, hostvars, name), batch, unreachable, max_fail_percentage)


def kiln_upgrade_record(text: Any) -> Any:
    """A JSON object from text, or None (empty, not JSON, not an object)."""
    return _core.read_record(text)


def kiln_upgrade_node_info(hostvars_of_node: Any) -> Any:
    """{reachable, intended, applied} of one node from the plan play's facts."""
    return _core.node_info(hostvars_of_node)


def kiln_upgrade_verdicts(batch: Any, summary: Any) -> Any:
    """Each node of a batch from its burn-in summary; missing or unreadable -> INCOMPLETE."""
    return _core.batch_verdicts(_names("kiln_upgrade_verdicts", "the input (the batch)", batch), summary)


def kiln_upgrade_reason(fingerprint: Any, run_id: Any) -> str:
    """The drain reason of a batch under upgrade (UPGRADE: ...)."""
    return _core.drain_reason(str(fingerprint), str(run_id))


def kiln_upgrade_summary(plan: Any, hostvars: Any, run_id: Any = "") -> Any:
    """The rollout's report from the plan and each node's kiln_upgrade_status fact (hostvars)."""
    return _core.summary(plan, _statuses(plan, hostvars, "kiln_upgrade_summary"), str(run_id))


def _statuses(plan: Any, hostvars: Any, name: str) -> dict[str, Any]:
    """{node: its kiln_upgrade_status fact or None} for the plan's nodes to do; wrong types refused naming *name*."""
    if not isinstance(plan, Mapping):
        raise AnsibleFilterError(f"{name}: the plan must be a kiln_upgrade_plan result, got {type(plan).__name__}")
    for key in ("done", "todo", "held", "unreachable", "order"):
        _names(name, f"the plan's {key}", plan.get(key) or [])
    _mapping(name, "the plan's why", plan.get("why"))
    if not isinstance(hostvars, Mapping):
        raise AnsibleFilterError(f"{name}: hostvars must be a mapping, got {type(hostvars).__name__}")
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
