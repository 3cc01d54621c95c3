# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln time filters: thin wrappers of module_utils/kiln_time.py (every time UTC, every epoch true).

Documentation for each filter is in the adjacent ``<filter_name>.yml`` sidecar files.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_KILN_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
if _KILN_MODULE_UTILS not in sys.path:
    sys.path.insert(0, _KILN_MODULE_UTILS)

import kiln_time as _core  # noqa: E402

try:  # ansible-core is always present when Ansible loads the plugin
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in used when ansible-core is not importable."""


def kiln_utc_epoch(value: Any) -> int:
    """True epoch seconds of now(utc=true) (naive UTC), an aware datetime, an ISO-8601 time with a zone."""
    try:
        return _core.epoch(value)
    except _core.KilnTimeError as exc:
        raise AnsibleFilterError(f"kiln_utc_epoch: {exc}") from exc


def kiln_run_id(value: Any, suffix: Any = "") -> str:
    """<UTC to the second>-<random token>[-<suffix>]: unique per invocation."""
    try:
        return _core.run_id(value, suffix)
    except _core.KilnTimeError as exc:
        raise AnsibleFilterError(f"kiln_run_id: {exc}") from exc


class FilterModule:
    """kiln time filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_utc_epoch": kiln_utc_epoch,
            "kiln_run_id": kiln_run_id,
        }
