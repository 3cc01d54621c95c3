"""The kernel hold: which packages to hold so that no other kernel arrives -- pure functions.

The running kernel's own packages and the meta-packages of every installed kernel flavour, found
in the package database, not taken from a list of names (issue 31 #11a): Debian
``linux-image-rt-amd64``, Ubuntu ``linux-nvidia`` and the cloud kernels were missed by one.
library/kiln_kernel_packages.py reads the database (the formats below) on the host;
``kernel_hold_names`` decides. Errors are ``KernelHoldError`` (a ValueError) naming the input.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any


class KernelHoldError(ValueError):
    """A package database read the kernel hold cannot use."""


# Each installed package with its relations (library/kiln_kernel_packages.py reads these).
# apt: one line per package known to dpkg; the installed ones are kept.
DPKG_RELATIONS_FORMAT = "${Package}\\t${db:Status-Abbrev}\\t${Pre-Depends}\\t${Depends}\\n"
# dnf: name, version-release.arch, provides and requires as "capability = version|" lists.
RPM_RELATIONS_FORMAT = ("%{NAME}\\t%{VERSION}-%{RELEASE}.%{ARCH}\\t[%{PROVIDENAME} = %{PROVIDEVERSION}|]"
                        "\\t[%{REQUIRENAME} = %{REQUIREVERSION}|]\\n")
# rpm -qf of the kernel images: name and version-release.arch of each owner.
RPM_OWNER_FORMAT = "%{NAME}\\t%{VERSION}-%{RELEASE}.%{ARCH}\\n"
_DPKG_ALT_NAME = re.compile(r"^\s*([a-z0-9][a-z0-9.+-]*)(?::[a-z0-9-]+)?\s*(?:\(.*)?$")


def _dpkg_relations(text: str) -> dict[str, set[str]]:
    """Installed package -> the package names its Pre-Depends and Depends name (any alternative)."""
    out: dict[str, set[str]] = {}
    for line in text.split("\n"):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            raise KernelHoldError(f"kernel hold: dpkg relations line {line[:120]!r} has {len(fields)} fields, not 4")
        name, abbrev, pre, dep = fields
        name = name.split(":", 1)[0]
        if len(abbrev) < 2 or abbrev[1] not in "iWt" or abbrev[2:3] == "R":
            continue  # not installed (removed, config files only, half-installed)
        names = out.setdefault(name, set())
        for group in f"{pre},{dep}".split(","):
            for alternative in group.split("|"):
                match = _DPKG_ALT_NAME.match(alternative.split("[", 1)[0].split("<", 1)[0])
                if match:
                    names.add(match[1])
    return out


def _rpm_caps(text: str) -> set[tuple[str, str]]:
    caps = set()
    for entry in text.split("|"):
        name, _, version = entry.rpartition(" = ")
        if name.strip():
            caps.add((name.strip(), version.strip().split(":", 1)[-1]))
    return caps


def _rpm_relations(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            raise KernelHoldError(f"kernel hold: rpm relations line {line[:120]!r} has {len(fields)} fields, not 4")
        out.append({"name": fields[0], "vra": fields[1], "provides": _rpm_caps(fields[2]),
                    "requires": _rpm_caps(fields[3])})
    return out


def _owners(text: str, pkg_mgr: str) -> dict[str, set[str]]:
    """Path -> owner names, from ``dpkg-query -S`` (``pkg[, pkg]: path``) or ``rpm -qf`` with a path per line."""
    out: dict[str, set[str]] = {}
    for line in text.split("\n"):
        line = line.strip()
        if pkg_mgr == "apt":
            if not line or line.startswith("diversion by") or ": " not in line:
                continue
            names, _, path = line.partition(": ")
            out.setdefault(path.strip(), set()).update(n.strip().split(":", 1)[0] for n in names.split(",") if n.strip())
        else:
            fields = line.split("\t")
            if len(fields) == 3 and fields[0]:  # path, name, version-release.arch (the module joins them)
                out.setdefault(fields[0], set()).add(fields[1])
    return out


def kernel_hold_names(running: str, pkg_mgr: str, relations: str, owners: str = "",
                      releases: Sequence[str] = ()) -> list[str]:
    """The packages to hold so that no other kernel arrives: the running kernel's own packages and the
    meta-packages of every installed kernel flavour, found in the package database (not a list of names).

    *relations*: the read of every installed package's relations (apt ``dpkg-query -W -f
    DPKG_RELATIONS_FORMAT``; dnf ``rpm -qa --qf RPM_RELATIONS_FORMAT``); *owners*: who owns each
    installed kernel image (apt ``dpkg-query -S <images>``; dnf ``path<TAB>`` + ``rpm -qf --qf
    RPM_OWNER_FORMAT`` per image); *releases*: every installed kernel release (the ``vmlinuz-<release>``
    images), the running one included or not.

    A kernel's own packages: the owners of its image, and (apt) the installed packages whose name
    carries its release (``linux-image-<r>``, ``linux-headers-<r>``, ``linux-modules-extra-<r>``,
    ``linux-image-<r>-unsigned``), (dnf) those providing a ``*-uname-r`` of the release or
    ``kernel*`` packages built as the release. The meta-packages: every installed package that
    depends on a kernel's own package, transitively (``linux-nvidia`` -> ``linux-image-nvidia`` ->
    ``linux-image-6.8.0-1010-nvidia``; ``linux-image-rt-amd64``; ``kernel-rt``). apt: the other
    kernels' own packages are left alone (named by release, they never pull a new kernel); dnf names
    every build alike, so they are held by name (a versionlock keeps the installed builds). Only real
    package names are followed, never virtual ones (a package that wants ``zfs-modules`` is not a
    kernel's), and only Depends/Pre-Depends (dnf: requirements of exactly one build).
    """
    if not isinstance(running, str) or not running.strip() or any(c.isspace() for c in running.strip()):
        raise KernelHoldError(f"kernel hold: the running kernel release must be a word such as 6.1.0-28-amd64, got {running!r}")
    if pkg_mgr not in ("apt", "dnf", "yum"):
        raise KernelHoldError(f"kernel hold: unsupported package manager {pkg_mgr!r} (apt or dnf)")
    for what, value in (("relations", relations), ("owners", owners)):
        if not isinstance(value, str):
            raise KernelHoldError(f"kernel hold: the {what} read must be text, got {type(value).__name__}")
    if isinstance(releases, str) or not isinstance(releases, Sequence) or not all(isinstance(r, str) for r in releases):
        raise KernelHoldError("kernel hold: releases must be a list of kernel releases")
    running = running.strip()
    every = sorted({running, *(r.strip() for r in releases if r.strip())})
    image_owners = _owners(owners, "apt" if pkg_mgr == "apt" else "dnf")

    def imaged(release: str) -> set[str]:
        return {n for path, names in image_owners.items()
                if path.endswith(f"/vmlinuz-{release}") or path.endswith(f"/{release}/vmlinuz") for n in names}

    if pkg_mgr == "apt":
        depends = _dpkg_relations(relations)

        def own(release: str) -> set[str]:
            named = {n for n in depends if n.endswith(f"-{release}") or f"-{release}-" in n}
            return named | (imaged(release) & set(depends))

        rdeps: dict[str, set[str]] = {}
        for name, wants in depends.items():
            for want in wants:
                rdeps.setdefault(want, set()).add(name)
    else:
        packages = _rpm_relations(relations)

        def own(release: str) -> set[str]:
            mine = imaged(release)
            for pkg in packages:
                if any(cap.endswith("-uname-r") and ver == release for cap, ver in pkg["provides"]) or \
                        (pkg["name"].startswith("kernel") and pkg["vra"] == release):
                    mine.add(pkg["name"])
            return mine

        rdeps = {}
        provided: dict[tuple[str, str], set[str]] = {}
        for pkg in packages:
            for cap in pkg["provides"]:
                provided.setdefault(cap, set()).add(pkg["name"])
        for pkg in packages:
            for cap in pkg["requires"]:
                for name in provided.get(cap, ()):  # a requirement on exactly this build of a package
                    if cap[1]:
                        rdeps.setdefault(name, set()).add(pkg["name"])
    mine = own(running)
    # apt names a kernel's packages by release: another kernel's own never pulls a new one. rpm names
    # every build alike (kernel, kernel-core): a versionlock on the name keeps each installed build.
    others = set().union(*(own(r) for r in every if r != running)) - mine if pkg_mgr == "apt" else set()
    seen = set(mine) | set().union(*(own(r) for r in every))
    todo = list(seen)
    while todo:
        for parent in rdeps.get(todo.pop(), ()):
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return sorted(seen - others)
