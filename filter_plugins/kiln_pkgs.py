"""Package-state planning filters shared by every kiln role that pins packages.

kiln roles install exact package strings rendered by ``kiln_pkg`` (apt
``name=version``, dnf ``name-version-release``). These filters compare them
with what a host has installed (``ansible_facts['packages']`` from
``package_facts``) so the shared ``common`` entry point ``pinned_install`` can
unhold, install and hold again only what must change, and say what changes.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

_APT = re.compile(r"^(?P<name>[a-z0-9][a-z0-9.+-]*)=(?P<version>[A-Za-z0-9.+:~_-]+)$")
_BARE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")
_DNF = re.compile(r"^(?P<name>[A-Za-z0-9_.+-]+?)-(?P<version>[0-9][A-Za-z0-9.+_~^]*-[A-Za-z0-9.+_~^]+)$")
_KERNEL_NUM = re.compile(r"\d+")


def kiln_pkg_split(spec: str, pkg_mgr: str, candidate_ok: bool = False) -> dict[str, Any]:
    """Split one pinned package string into ``{name, version, spec}``.

    With ``candidate_ok`` a bare package name (a distribution package with no recorded
    build, see kiln_distro_build) is accepted with ``version: None``; otherwise refused.

    apt: ``libnccl2=2.28.7-1+cuda13.0``; dnf: ``libnccl-2.28.7-1+cuda13.0``
    (version-release; epoch, if any, as ``N:`` before the version).
    """
    if not isinstance(spec, str):
        raise AnsibleFilterError(f"kiln_pkg_split: expected a package string, got {type(spec).__name__}")
    if pkg_mgr == "apt":
        match = _APT.match(spec)
    elif pkg_mgr in ("dnf", "yum"):
        match = _DNF.match(spec)
    else:
        raise AnsibleFilterError(f"kiln_pkg_split: unsupported package manager {pkg_mgr!r} (apt or dnf)")
    if not match:
        if candidate_ok and _BARE.match(spec):  # no recorded build: the repository's candidate (then held)
            return {"name": spec, "version": None, "spec": spec}
        raise AnsibleFilterError(
            f"kiln_pkg_split: {spec!r} is not an exact {pkg_mgr} pin (apt: name=version, dnf: name-version-release)")
    return {"name": match["name"], "version": match["version"], "spec": spec}


def _norm(version: str) -> str:
    """Compare versions the way the package manager shows them: a 0 epoch is no epoch."""
    return version[2:] if version.startswith("0:") else version


def _installed_versions(packages: Mapping[str, Any], name: str) -> list[str]:
    out: list[str] = []
    for entry in packages.get(name) or []:
        version = str(entry.get("version", ""))
        if entry.get("release"):
            version = f"{version}-{entry['release']}"
        if entry.get("epoch") not in (None, "", 0, "0"):
            version = f"{entry['epoch']}:{version}"
        out.append(version)
    return out


def kiln_pkg_plan(specs: Sequence[str], packages: Mapping[str, Any] | None, pkg_mgr: str) -> dict[str, Any]:
    """Plan the change from installed packages to the exact pinned ``specs``.

    Returns ``{names, specs, changes: [{name, from, to}], installs, upgrades, unchanged}``;
    ``from`` is ``None`` for a package not installed yet. A version counts as
    installed when it matches exactly, or when the only difference is an epoch
    the package manager left out of its report.
    """
    packages = packages or {}
    plan: dict[str, Any] = {"names": [], "specs": [], "changes": [], "installs": [], "upgrades": [], "unchanged": []}
    for spec in specs:
        item = kiln_pkg_split(spec, pkg_mgr, candidate_ok=True)
        plan["names"].append(item["name"])
        plan["specs"].append(spec)
        if item["version"] is None:  # a bare name: whatever is installed stays (held); else the candidate
            if _installed_versions(packages, item["name"]):
                plan["unchanged"].append(item["name"])
            else:
                plan["changes"].append({"name": item["name"], "from": None, "to": "(repository candidate)"})
                plan["installs"].append(item["name"])
            continue
        want = _norm(item["version"])
        have = [_norm(v) for v in _installed_versions(packages, item["name"])]
        want_no_epoch = want.split(":", 1)[-1]
        if want in have or (":" in want and want_no_epoch in have):
            plan["unchanged"].append(item["name"])
            continue
        change = {"name": item["name"], "from": have[0] if have else None, "to": item["version"]}
        plan["changes"].append(change)
        (plan["upgrades"] if have else plan["installs"]).append(item["name"])
    return plan


def kiln_kernel_key(kernel: str) -> tuple[int, ...]:
    """Numeric sort key of a kernel release string (6.1.0-28-amd64 -> (6, 1, 0, 28))."""
    return tuple(int(n) for n in _KERNEL_NUM.findall(str(kernel).split("+")[0]))


def kiln_kernels_to_check(running: str, installed: Sequence[str]) -> list[str]:
    """The running kernel plus every installed kernel newer than it (what may boot next)."""
    newer = [k for k in installed if k != running and kiln_kernel_key(k) > kiln_kernel_key(running)]
    return [running] + sorted(set(newer), key=kiln_kernel_key)


def kiln_format_change(change: Mapping[str, Any]) -> str:
    """One line for a planned change: ``name from -> to`` or ``name (new) -> to``."""
    return f"{change['name']} {change.get('from') or '(new)'} -> {change['to']}"


class FilterModule:
    """kiln package planning filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_pkg_split": kiln_pkg_split,
            "kiln_pkg_plan": kiln_pkg_plan,
            "kiln_kernel_key": kiln_kernel_key,
            "kiln_kernels_to_check": kiln_kernels_to_check,
            "kiln_format_change": kiln_format_change,
        }
