# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln-health's configuration (``/etc/kiln/health.json``, rendered by roles/node_health): validated
before anything is read or changed; every error names the key and, where the role set it, the variable."""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Mapping

from .. import verdict as kiln_verdict

SCHEMA = "kiln.health.config/v1"
HOOKS = ("check", "prolog", "epilog")
ACTIONS = ("slurm", "none")
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_PATH = re.compile(r"^/[^\x00\n]{0,4095}$")
_FSTYPE = re.compile(r"^[a-z0-9][a-z0-9_.+-]{0,31}$")

#: key -> (the role variable that sets it, kind)
KEYS: Dict[str, Any] = {
    "schema": (None, "schema"),
    "node": ("node_health_slurm_node_name", "node"),
    "expected_gpus": ("kiln_burnin_expected_gpus", "gpus"),
    "fabric_expect": ("kiln_burnin_fabric_expect", "mapping_or_null"),
    "gpudirect": ("node_health_gpudirect", "mapping_or_null"),
    "mounts": ("node_health_mounts", "mounts"),
    "unknown_drain_after": ("node_health_unknown_drain_after", "count"),
    "resume_after_clean": ("node_health_resume_after_clean", "count0"),
    "actions": ("node_health_actions", "actions"),
    "sysfs_root": ("node_health_sysfs_root", "path"),
    "proc_root": ("node_health_proc_root", "path"),
    "state_dir": ("node_health_state_dir", "path"),
    "textfile_dir": ("node_health_textfile_dir", "path_or_null"),
    "rules": ("node_health_rules_path", "path"),
    "fabric_rules": ("node_health_fabric_rules_path", "path"),
    "query_smi": ("node_health_query_smi", "bool"),
    "dcgm": ("node_health_dcgm", "dcgm"),
    "journalctl": ("node_health_journalctl", "command"),
    "dmesg": ("node_health_dmesg", "command"),
    "timeout_s": ("node_health_timeout", "timeout"),
    "mount_timeout_s": ("node_health_mount_timeout", "timeout"),
}


def _where(key: str) -> str:
    var = KEYS.get(key, (None,))[0]
    return f"{key}" + (f" (set by {var})" if var else "")


def _fail(key: str, why: str, fix: str) -> kiln_verdict.KilnConfigError:
    return kiln_verdict.KilnConfigError(f"kiln-health configuration: {_where(key)} {why}; {fix}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _mounts(value: Any) -> List[Dict[str, Any]]:
    if not isinstance(value, list):
        raise _fail("mounts", f"must be a list, not {type(value).__name__}",
                    "give [{path: /home, fstype: nfs4}] or []")
    out = []
    for item in value:
        if isinstance(item, str):
            item = {"path": item}
        if not isinstance(item, Mapping):
            raise _fail("mounts", f"entry {str(item)[:40]!r} is not a path or a mapping", "give {path: /home}")
        unknown = sorted(set(item) - {"path", "fstype"})
        if unknown:
            raise _fail("mounts", f"entry {item.get('path')!r} has unknown keys {unknown}", "use path and fstype")
        path, fstype = item.get("path"), item.get("fstype")
        if not isinstance(path, str) or not _PATH.match(path) or "/../" in path + "/":
            raise _fail("mounts", f"path {str(path)[:60]!r} is not an absolute path", "give an absolute mount point")
        if fstype is not None and (not isinstance(fstype, str) or not _FSTYPE.match(fstype)):
            raise _fail("mounts", f"fstype {str(fstype)[:40]!r} of {path} is not a filesystem type",
                        "give a type as /proc/mounts names it (nfs4, lustre, xfs) or leave it out")
        out.append({"path": path.rstrip("/") or "/", "fstype": fstype})
    return out


def validate(data: Any) -> Dict[str, Any]:
    """The configuration as kiln-health uses it; KilnConfigError naming the key (and its role variable)."""
    if not isinstance(data, Mapping):
        raise kiln_verdict.KilnConfigError("kiln-health configuration: not a JSON object; re-run roles/node_health")
    unknown = sorted(str(k) for k in data if k not in KEYS)
    if unknown:
        raise kiln_verdict.KilnConfigError(f"kiln-health configuration: unknown keys {unknown}; re-run roles/node_health")
    out: Dict[str, Any] = {}
    for key, (_var, kind) in KEYS.items():
        if key not in data:
            raise _fail(key, "is missing", "re-run roles/node_health")
        value = data[key]
        if kind == "schema":
            if value != SCHEMA:
                raise _fail(key, f"is {str(value)[:40]!r}, not {SCHEMA}", "re-run roles/node_health")
        elif kind == "node":
            if not isinstance(value, str) or not _NODE.match(value):
                raise _fail(key, f"{str(value)[:40]!r} is not a Slurm node name", "set it to the node's NodeName")
        elif kind == "gpus":
            if value is not None and (not _is_int(value) or not 0 <= value <= 4096):
                raise _fail(key, f"{str(value)[:40]!r} is not a whole number of GPUs (0-4096) or null",
                            "set kiln_burnin_expected_gpus: 8 (a number, not a string)")
        elif kind == "mapping_or_null":
            if value is not None and not isinstance(value, Mapping):
                raise _fail(key, f"must be a mapping or null, not {type(value).__name__}", "see docs/health.md")
        elif kind == "mounts":
            value = _mounts(value)
        elif kind in ("count", "count0"):
            low = 1 if kind == "count" else 0
            if not _is_int(value) or not low <= value <= 1000:
                raise _fail(key, f"{str(value)[:40]!r} is not a whole number {low}-1000", "set a whole number of runs")
        elif kind == "actions":
            if value not in ACTIONS:
                raise _fail(key, f"{str(value)[:40]!r} is not one of {', '.join(ACTIONS)}",
                            "slurm drains and resumes, none only reports")
        elif kind == "path":
            if not isinstance(value, str) or not _PATH.match(value):
                raise _fail(key, f"{str(value)[:60]!r} is not an absolute path", "give an absolute path")
        elif kind == "path_or_null":
            if value is not None and (not isinstance(value, str) or not _PATH.match(value)):
                raise _fail(key, f"{str(value)[:60]!r} is not an absolute path or null", "give an absolute path")
        elif kind == "bool":
            if not isinstance(value, bool):
                raise _fail(key, f"{str(value)[:40]!r} is not true or false", "set true or false")
        elif kind == "dcgm":
            if value not in ("auto", "off"):
                raise _fail(key, f"{str(value)[:40]!r} is not auto or off", "auto checks DCGM where dcgmi is installed")
        elif kind == "command":
            if not isinstance(value, str) or (value and not re.match(r"^[A-Za-z0-9_./-]{1,255}$", value)):
                raise _fail(key, f"{str(value)[:60]!r} is not a command name or path", 'give a name, a path or "" (not used)')
        elif kind == "timeout":
            if not kiln_verdict.is_finite(value) or not 0 < float(value) <= 600 or (isinstance(value, float)
                                                                                  and math.isnan(value)):
                raise _fail(key, f"{str(value)[:40]!r} is not a number of seconds in (0, 600]", "set seconds")
        out[key] = value
    return out


def problem(data: Any) -> str:
    """The filter's form of :func:`validate`: the error text, or "" when the configuration is valid."""
    try:
        validate(data)
    except kiln_verdict.KilnConfigError as exc:
        return str(exc)
    return ""
