# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln as-built and drift filters: thin wrappers of module_utils/kiln_drift.py.

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

import kiln_drift as _core  # noqa: E402

try:  # ansible-core is always present when Ansible loads the plugin
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in used when ansible-core is not importable."""


def _call(func: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return func(*args, **kwargs)
    except _core.DriftError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def _mapping(name: str, what: str, value: Any) -> dict[Any, Any]:
    """*value* (none: empty) as a dict, or one AnsibleFilterError naming the filter and the input."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise AnsibleFilterError(f"{name}: {what} must be a mapping, got {type(value).__name__}")
    return dict(value)


def kiln_as_built(read: Any, host: Any, kernel: Any = None, os: Any = None, gpu: Any = None,
                  fabric: Any = None, applied: Any = None) -> Any:
    """The as-built record of one node from a kiln_packages state=read result."""
    if not isinstance(read, dict) or "packages" not in read or read.get("pkg_mgr") not in ("apt", "dnf"):
        raise AnsibleFilterError(f"kiln_as_built: {host}: expected the result of kiln_packages state=read "
                                 "(packages, held, pins, pkg_mgr apt or dnf)")
    return _call(_core.as_built, str(host), read["pkg_mgr"], read.get("packages") or {},
                 read.get("held") or [], read.get("pins") or {}, kernel=kernel, os_id=os, gpu=gpu,
                 fabric=fabric, applied=applied, pins_dir=read.get("pins_dir"),
                 pins_dir_present=read.get("pins_dir_present"))


def kiln_node_drift(record: Any, host: Any, intended_stack: Any = None, expected: Any = None) -> Any:
    """One node's drift rows (pins, pin, hold, stack) from its as-built record."""
    return _call(_core.node_drift, str(host), record, intended_stack, expected)


def kiln_drift_expected_pins(owners: Any, groups: Any, components: Any = None) -> Any:
    """The owners whose pins a node must have (kiln_drift_pin_owners, its groups, its stack's components)."""
    return _call(_core.expected_owners, owners, groups, [] if components is None else components)


def kiln_drift_report(records: Any, intended: Any = None, partitions: Any = None, run_id: Any = "",
                      expected: Any = None) -> Any:
    """The drift gate's report over every node (rows, per-node status, overall status, table)."""
    name = "kiln_drift_report"
    return _call(_core.report, _mapping(name, "the input (node -> as-built record)", records),
                 _mapping(name, "intended (node -> stack fingerprint)", intended),
                 _mapping(name, "partitions (node -> partition)", partitions),
                 "" if run_id is None else str(run_id),
                 _mapping(name, "expected (node -> pin owners)", expected))


def kiln_drift_prom(report: Any, node: Any = None, timestamp: Any = None) -> str:
    """Prometheus textfile of a drift report (every node, or one)."""
    try:
        when = None if timestamp is None else float(timestamp)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"kiln_drift_prom: timestamp {timestamp!r} is not a number of seconds") from exc
    if not isinstance(report, dict):
        raise AnsibleFilterError(f"kiln_drift_prom: expected a kiln_drift_report result, got {type(report).__name__}")
    return _call(_core.prometheus, report, None if node is None else str(node), when)


class FilterModule:
    """kiln as-built and drift filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_as_built": kiln_as_built,
            "kiln_node_drift": kiln_node_drift,
            "kiln_drift_expected_pins": kiln_drift_expected_pins,
            "kiln_drift_report": kiln_drift_report,
            "kiln_drift_prom": kiln_drift_prom,
        }
