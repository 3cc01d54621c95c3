# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Rule family denylist: a stack component matching an active entry of data/denylist.yml.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..data import _active_denylist, compat_data
from ..lookup import _parse_nccl
from ..versions import _in_range, _major, kiln_version_cmp, kiln_version_key
from ..violations import ERROR, WARNING, _set_fix, _stack_get, _violation
from .context import Checker


def r_denylist(ck: Checker) -> None:
    for entry in _active_denylist(ck.today):
        value = _stack_get(ck.s, entry["component"])
        if value is None:
            continue
        value = str(value)
        if entry["component"] == "nccl":
            value = _parse_nccl(value)[0]
        hit = kiln_version_cmp(value, entry["version"]) == 0 if entry.get("version") else _in_range(value, entry["range"])
        if not hit:
            continue
        conf = entry.get("confidence", "UNVERIFIED")
        sev = entry.get("severity", ERROR) if conf != "UNVERIFIED" else WARNING
        bad = entry.get("version") or entry.get("range")
        ck.add(_violation(
            "denylist", [entry["component"]],
            f"{entry['component']} {value} is denylisted ({entry['id']}, matches {bad}): {entry['reason']}",
            f"Change kiln_stack.{entry['component']} to a version outside {bad} (see {entry['link']}).",
            _denylist_fix(ck.s, entry), conf, entry["link"], severity=sev))

def _denylist_fix(stack: Mapping[str, Any], entry: dict[str, Any]) -> dict[str, Any] | None:
    comp = entry["component"]
    if comp in ("container_toolkit", "dcgm", "cuda"):
        pool = compat_data()["cuda" if comp == "cuda" else comp]["releases"]
        bad = entry.get("version")
        good = [v for v in pool if not (kiln_version_cmp(v, bad) == 0 if bad else _in_range(v, entry["range"]))]
        if comp == "cuda" and stack.get("cuda"):
            good = [v for v in good if _major(v) == _major(str(stack["cuda"]))] or good
        if good:
            return _set_fix(stack, comp, max(good, key=kiln_version_key))
    if comp == "driver":
        branch = compat_data()["drivers"]["branches"].get(str(stack.get("driver", "")).split(".")[0])
        rel = [r for r in (branch or {}).get("releases", []) if r != entry.get("version")]
        if rel:
            target = max(rel, key=kiln_version_key)
            fix = {"driver": target}
            if stack.get("fabricmanager"):
                fix["fabricmanager"] = target
            return fix
    return None
