"""Package database and pin planning: pure functions shared by the kiln_packages
module (library/kiln_packages.py, on the managed host) and the package filters
(filter_plugins/kiln_package_filters.py, on the controller: the filters are the section
at the end, the functions above with their PkgError turned into kiln's FilterError).

kiln roles install exact package strings rendered by ``kiln_pkg`` (apt
``name=version``, dnf ``name-version-release``). ``kiln_pkgdb_parse`` reads one
dump of the host's package database into ``{pkg_mgr, packages: {name:
[versions]}, held: [names]}``; ``kiln_pkg_plan`` compares the pins with it and
says what to unhold, install and hold; ``unattended_conf`` renders the
unattended-upgrades exclusion of one owner's packages; ``merge_groups`` joins
the pins of several owners (the roles of one play) into one transaction.

Errors are ``PkgError`` (a ValueError) with a message that names the input.
"""
from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import FilterError, as_filter


class PkgError(ValueError):
    """A package string, database dump or plan input kiln cannot use."""


_APT = re.compile(r"^(?P<name>[a-z0-9][a-z0-9.+-]*)=(?P<version>[A-Za-z0-9.+:~_-]+)$")
BARE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")
_DNF = re.compile(r"^(?P<name>[A-Za-z0-9_.+-]+?)-(?P<version>[0-9][A-Za-z0-9.+_~^]*-[A-Za-z0-9.+_~^]+)$")

# The line that separates rpm's package list from the versionlock list in the
# dnf read (library/kiln_packages.py prints it between the two).
VERSIONLOCK_MARKER = "#kiln:versionlock"
# dpkg's Status field: want, error flag, state; and the letters of db:Status-Abbrev.
_DPKG_WANT = {"unknown": "u", "install": "i", "hold": "h", "deinstall": "r", "purge": "p"}
_DPKG_EFLAG = {"ok": "", "reinstreq": "R", "hold": "", "hold-reinstreq": "R"}
_DPKG_STATE = {"not-installed": "n", "config-files": "c", "half-installed": "H", "unpacked": "U",
               "half-configured": "F", "triggers-awaited": "W", "triggers-pending": "t", "installed": "i"}
# States in which the package's files are in place and configured (the trigger
# states only wait for another package's trigger); anything else is reinstalled.
_DPKG_INSTALLED = frozenset({"installed", "triggers-awaited", "triggers-pending"})
_RPM_VERSION = re.compile(r"^(?P<epoch>[0-9]+):(?P<vr>[^\s:-]+-[^\s:-]+)$")
_LOCK_ENTRY = re.compile(r"^(?P<name>.+)-(?:[0-9]+:)?[^-]+-[^-]+$")


def kiln_pkg_split(spec: str, pkg_mgr: str, candidate_ok: bool = False) -> dict[str, Any]:
    """Split one pinned package string into ``{name, version, spec}``.

    With ``candidate_ok`` a bare package name (a distribution package with no recorded
    build, see kiln_distro_build) is accepted with ``version: None``; otherwise refused.

    apt: ``libnccl2=2.28.7-1+cuda13.0``; dnf: ``libnccl-2.28.7-1+cuda13.0``
    (version-release; epoch, if any, as ``N:`` before the version).
    """
    if not isinstance(spec, str):
        raise PkgError(f"kiln_pkg_split: expected a package string, got {type(spec).__name__}")
    if pkg_mgr == "apt":
        match = _APT.match(spec)
    elif pkg_mgr in ("dnf", "yum"):
        match = _DNF.match(spec)
    else:
        raise PkgError(f"kiln_pkg_split: unsupported package manager {pkg_mgr!r} (apt or dnf)")
    if not match:
        if candidate_ok and BARE_NAME.match(spec):  # no recorded build: the repository's candidate (then held)
            return {"name": spec, "version": None, "spec": spec}
        raise PkgError(
            f"kiln_pkg_split: {spec!r} is not an exact {pkg_mgr} pin (apt: name=version, dnf: name-version-release)")
    return {"name": match["name"], "version": match["version"], "spec": spec}


def _norm(version: str) -> str:
    """Compare versions the way the package manager shows them: a 0 epoch is no epoch."""
    return version[2:] if version.startswith("0:") else version


def _token_error(field: str, value: str) -> str | None:
    """Why ``value`` cannot be a package name or version (None when it can)."""
    if not value:
        return f"empty {field}"
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        return f"{field} {value!r} holds whitespace or control characters"
    if field == "name" and not value[0].isalnum():
        return f"name {value!r} does not start with a letter or digit"
    return None


def _parse_error(pkg_mgr: str, lineno: int, line: str, why: str) -> PkgError:
    shown = line if len(line) <= 120 else line[:117] + "..."
    return PkgError(f"kiln_pkgdb_parse: {pkg_mgr} line {lineno}: {why}: {shown!r}")


def _add_version(packages: dict[str, list[str]], name: str, version: str) -> None:
    versions = packages.setdefault(name, [])
    if version not in versions:
        versions.append(version)


def _parse_dpkg(lines: list[str]) -> tuple[dict[str, list[str]], set[str]]:
    packages: dict[str, list[str]] = {}
    held: set[str] = set()
    for lineno, line in enumerate(lines, 1):
        if not line:
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            raise _parse_error("apt", lineno, line, f"expected 4 tab-separated fields, got {len(fields)}")
        name, version, abbrev, status = fields
        words = status.split(" ")
        if len(words) != 3 or words[0] not in _DPKG_WANT or words[1] not in _DPKG_EFLAG \
                or words[2] not in _DPKG_STATE:
            raise _parse_error("apt", lineno, line, f"unknown dpkg status {status!r}")
        want, eflag, state = words
        expected = _DPKG_WANT[want] + _DPKG_STATE[state] + _DPKG_EFLAG[eflag]
        if abbrev.rstrip(" ") != expected:
            raise _parse_error("apt", lineno, line, f"status abbreviation {abbrev!r} disagrees with {status!r}")
        why = _token_error("name", name)
        if why is None and (version or state != "not-installed"):
            why = _token_error("version", version)
        if why:
            raise _parse_error("apt", lineno, line, why)
        if want == "hold":
            held.add(name)
        if state in _DPKG_INSTALLED and eflag in ("ok", "hold"):
            _add_version(packages, name, version)
    return packages, held


def _parse_rpm(lines: list[str]) -> tuple[dict[str, list[str]], set[str]]:
    packages: dict[str, list[str]] = {}
    try:
        marker = lines.index(VERSIONLOCK_MARKER)
    except ValueError:
        raise PkgError(
            f"kiln_pkgdb_parse: dnf output has no {VERSIONLOCK_MARKER!r} line before the versionlock list "
            "(truncated output, or not the read of library/kiln_packages.py)") from None
    for lineno, line in enumerate(lines[:marker], 1):
        if not line:
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise _parse_error("dnf", lineno, line, f"expected 2 tab-separated fields, got {len(fields)}")
        name, evr = fields
        why = _token_error("name", name)
        if why:
            raise _parse_error("dnf", lineno, line, why)
        match = _RPM_VERSION.match(evr)
        if not match or _token_error("version", evr):
            raise _parse_error("dnf", lineno, line, "version is not epoch:version-release")
        _add_version(packages, name, _norm(evr))
    held: set[str] = set()
    for line in lines[marker + 1:]:
        entry = line.strip()
        if not entry or entry.startswith(("#", "!")):
            continue  # comments, and exclusions (which lock nothing in place)
        match = _LOCK_ENTRY.match(entry)
        if match and _token_error("name", match["name"]) is None:
            held.add(match["name"])
    return packages, held


def kiln_pkgdb_parse(stdout: str, pkg_mgr: str) -> dict[str, Any]:
    """Parse one read of a host's package database into ``{pkg_mgr, packages, held}``.

    apt: ``dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\t${Status}\\n'``.
    A package counts as installed in the states installed, triggers-awaited and
    triggers-pending with no reinstall-required flag; ``held`` names every
    package whose selection is hold (installed or not).

    dnf: ``rpm -qa --qf '%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n'``, then a
    line ``#kiln:versionlock``, then the versionlock list (one
    ``name-[epoch:]version-release[.arch]`` pattern a line, as ``dnf versionlock
    add`` writes them; comments, ``!`` exclusions and lines of another form are
    ignored). A 0 epoch is left out of the versions, as dnf prints them;
    ``held`` names every package with a lock entry.

    ``packages`` maps each installed name to its versions in the order read,
    without duplicates (several for multi-arch or install-only packages such as
    kernels); ``held`` is sorted. Blank lines are skipped; empty output is an
    empty database. Names and versions are taken verbatim when non-empty, free
    of whitespace and control characters, and a name starts with a letter or
    digit (any script). Anything else (a truncated line, a tab inside a field, an
    unknown dpkg status) raises PkgError naming the line.
    """
    if not isinstance(stdout, str):
        raise PkgError(f"kiln_pkgdb_parse: expected the read's stdout as a string, got {type(stdout).__name__}")
    lines = stdout.split("\n")
    if pkg_mgr == "apt":
        packages, held = _parse_dpkg(lines)
    elif pkg_mgr in ("dnf", "yum"):
        packages, held = _parse_rpm(lines)
        pkg_mgr = "dnf"
    else:
        raise PkgError(f"kiln_pkgdb_parse: unsupported package manager {pkg_mgr!r} (apt or dnf)")
    return {"pkg_mgr": pkg_mgr, "packages": packages, "held": sorted(held)}


def _installed_versions(packages: Mapping[str, Any], name: str) -> list[str]:
    """Versions of ``name``: from a kiln_pkgdb_parse mapping (strings) or package_facts (dicts)."""
    entries = packages.get(name) or []
    if isinstance(entries, str):
        entries = [entries]
    if not isinstance(entries, Sequence):
        raise PkgError(f"kiln_pkg_plan: versions of {name!r} must be a list, got {type(entries).__name__}")
    out: list[str] = []
    for entry in entries:
        if isinstance(entry, str):
            out.append(entry)
            continue
        if not isinstance(entry, Mapping):
            raise PkgError(
                f"kiln_pkg_plan: a version of {name!r} must be a string or a package_facts entry, got {type(entry).__name__}")
        version = str(entry.get("version", ""))
        if entry.get("release"):
            version = f"{version}-{entry['release']}"
        if entry.get("epoch") not in (None, "", 0, "0"):
            version = f"{entry['epoch']}:{version}"
        out.append(version)
    return out


def kiln_pkg_plan(specs: Sequence[str], packages: Mapping[str, Any] | None, pkg_mgr: str,
                  held: Sequence[str] | None = None) -> dict[str, Any]:
    """Plan the change from installed packages to the exact pinned ``specs``.

    ``packages`` maps a name to its installed versions: the ``packages`` of
    ``kiln_pkgdb_parse`` (version strings) or ``ansible_facts['packages']``
    (package_facts entries). ``held`` names the packages on hold now (the
    ``held`` of ``kiln_pkgdb_parse``).

    Returns ``{names, specs, changes: [{name, from, to}], installs, upgrades,
    unchanged, unhold, hold}``; ``from`` is ``None`` for a package not installed
    yet. A version counts as installed when it matches exactly, or when the only
    difference is an epoch the package manager left out of its report, or (dnf)
    an epoch the pin leaves out.
    ``unhold``: pinned packages to release before the install (a version changes
    and they are held); ``hold``: pinned packages to hold afterwards (not held
    yet, or released for the change). Without ``held`` the hold state is
    unknown: every changing package is released and every pinned one held.
    """
    packages = packages or {}
    if isinstance(specs, (str, Mapping)) or not isinstance(specs, Sequence):
        raise PkgError(f"kiln_pkg_plan: the pins must be a list of package strings, got {type(specs).__name__}")
    if not isinstance(packages, Mapping):
        raise PkgError(f"kiln_pkg_plan: installed packages must be a mapping, got {type(packages).__name__}")
    if held is not None and (isinstance(held, str) or not isinstance(held, Sequence)
                             or not all(isinstance(name, str) for name in held)):
        raise PkgError(f"kiln_pkg_plan: held must be a list of names, got {type(held).__name__}")
    plan: dict[str, Any] = {"names": [], "specs": [], "changes": [], "installs": [], "upgrades": [], "unchanged": [],
                            "unhold": [], "hold": []}
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
        # dnf installs name-version-release whatever the epoch; apt needs the epoch spelled out.
        have_any_epoch = [v.split(":", 1)[-1] for v in have] if pkg_mgr != "apt" and ":" not in want else []
        if want in have or (":" in want and want_no_epoch in have) or want in have_any_epoch:
            plan["unchanged"].append(item["name"])
            continue
        change = {"name": item["name"], "from": have[0] if have else None, "to": item["version"]}
        plan["changes"].append(change)
        (plan["upgrades"] if have else plan["installs"]).append(item["name"])
    on_hold = None if held is None else set(held)
    changing = {change["name"] for change in plan["changes"]}
    for name in plan["names"]:
        if name in changing and (on_hold is None or name in on_hold) and name not in plan["unhold"]:
            plan["unhold"].append(name)
        if (on_hold is None or name in changing or name not in on_hold) and name not in plan["hold"]:
            plan["hold"].append(name)
    if on_hold is None:
        plan["unhold"] = [name for name in plan["unhold"] if name in plan["upgrades"]]
    return plan


def format_change(change: Mapping[str, Any]) -> str:
    """One line for a planned change: ``name from -> to`` or ``name (new) -> to``."""
    if not isinstance(change, Mapping) or "name" not in change or "to" not in change:
        raise PkgError(f"kiln_format_change: expected a planned change {{name, from, to}} (kiln_pkg_plan), "
                       f"got {type(change).__name__}")
    return f"{change['name']} {change.get('from') or '(new)'} -> {change['to']}"


def unattended_conf(owner: str, names: Sequence[str]) -> str:
    """The apt.conf fragment that keeps unattended-upgrades away from ``names``."""
    lines = ["// Managed by kiln: do not edit by hand.",
             f"// Packages held by kiln ({owner}): unattended-upgrades must not touch them.",
             "Unattended-Upgrade::Package-Blacklist {"]
    lines += [f'    "^{re.escape(name)}$";' for name in sorted(set(names))]
    lines.append("};")
    return "\n".join(lines) + "\n"


OWNER = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


def pins_record(owner: str, packages: Sequence[str]) -> str:
    """The pins record of one owner (``<pins_dir>/<owner>.json``): what kiln intends on the host."""
    return json.dumps({"owner": owner, "packages": sorted(str(p) for p in packages)}, indent=1, sort_keys=True) + "\n"


def parse_pins(path: str, text: str) -> tuple[str, list[str]]:
    """``(owner, packages)`` of a pins record; PkgError naming *path* when it is not one."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PkgError(f"the pins record {path} cannot be read ({exc}); re-run the play of its owner, "
                       "which writes it again") from exc
    if (not isinstance(data, dict) or not OWNER.match(str(data.get("owner", "")))
            or not isinstance(data.get("packages"), list) or not all(isinstance(p, str) for p in data["packages"])):
        raise PkgError(f"the pins record {path} is not {{owner, packages: [strings]}}; re-run the play of its "
                       "owner, which writes it again")
    return data["owner"], list(data["packages"])


def merge_groups(groups: Sequence[Mapping[str, Any]], pkg_mgr: str) -> dict[str, Any]:
    """Join the pinned packages of several owners into one install.

    ``groups`` is a list of ``{owner, packages: [pins], absent: [names],
    replaces: [globs], modules: [streams], problems: [messages], defer: bool}``
    (what the roles of one play pin, the names they remove, the globs of another
    branch's names their pins replace, the dnf module streams they need enabled,
    why they refuse this host, and whether they install themselves later, after
    a repository of their own). Returns ``{specs, absent, modules, owners:
    {owner: {packages, names, absent, replaces, modules}}, deferred: [owner]}``:
    ``specs`` holds every pin once, in order. Any problem refuses the whole
    batch (nothing is installed); a name pinned by two owners must carry the
    same pin, a module wanted by two the same stream; a name cannot be both
    pinned and removed; owners are unique; streams are dnf's only.
    """
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
        raise PkgError(f"package groups must be a list of {{owner, packages}}, got {type(groups).__name__}")
    specs: list[str] = []
    pins: dict[str, tuple[str, str]] = {}
    absent: list[str] = []
    owners: dict[str, dict[str, Any]] = {}
    deferred: list[str] = []
    problems: list[str] = []
    modules: dict[str, tuple[str, str]] = {}
    for index, group in enumerate(groups):
        if not isinstance(group, Mapping):
            raise PkgError(f"package group {index} must be a mapping {{owner, packages}}, got {type(group).__name__}")
        unknown = sorted(set(group) - {"owner", "packages", "absent", "problems", "defer", "modules", "replaces"})
        owner = group.get("owner")
        if unknown:
            raise PkgError(f"package group {index} ({owner}): unknown key(s) {', '.join(map(str, unknown))}")
        if not isinstance(owner, str) or not OWNER.match(owner):
            raise PkgError(f"package group {index}: owner {owner!r} must be lower-case letters, digits and dashes")
        if owner in owners or owner in deferred:
            raise PkgError(f"package group {index}: owner {owner} appears twice")
        packages, gone, refusals = group.get("packages", []), group.get("absent", []), group.get("problems", [])
        streams, globs = group.get("modules", []), group.get("replaces", [])
        for key, value in (("packages", packages), ("absent", gone), ("problems", refusals), ("modules", streams),
                           ("replaces", globs)):
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or \
                    not all(isinstance(item, str) for item in value):
                raise PkgError(f"package group {owner}: {key} must be a list of strings")
        if not isinstance(group.get("defer", False), bool):
            raise PkgError(f"package group {owner}: defer must be a boolean, got {group['defer']!r}")
        problems += [f"{owner}: {problem}" for problem in refusals]
        if group.get("defer", False):
            deferred.append(owner)
            continue
        names = []
        for spec in packages:
            name = kiln_pkg_split(spec, pkg_mgr, candidate_ok=True)["name"]
            if name in pins and pins[name][0] != spec:
                raise PkgError(f"{name} is pinned twice: {pins[name][0]} by {pins[name][1]}, {spec} by {owner}")
            if name not in pins:
                pins[name] = (spec, owner)
                specs.append(spec)
            names.append(name)
        bad = [name for name in gone if not BARE_NAME.match(name)]
        if bad:
            raise PkgError(f"package group {owner}: packages to remove must be bare names: {', '.join(bad)}")
        for stream in streams:
            name = module_stream_split(stream)[0]
            if name in modules and modules[name][0] != stream:
                raise PkgError(f"module {name} is wanted at two streams: {modules[name][0]} by {modules[name][1]}, "
                               f"{stream} by {owner}")
            modules.setdefault(name, (stream, owner))
        if streams and pkg_mgr != "dnf":
            raise PkgError(f"package group {owner}: module streams ({', '.join(streams)}) are dnf's; "
                           f"this host's package manager is {pkg_mgr}")
        bad = [glob for glob in globs if not REPLACES_GLOB.match(glob)]
        if bad:
            raise PkgError(f"package group {owner}: replaces takes a name prefix and one * (e.g. nvidia-open-[0-9]*): "
                           f"{', '.join(bad)}")
        owners[owner] = {"packages": list(packages), "names": names, "absent": list(gone), "modules": list(streams),
                         "replaces": list(globs)}
        absent += [name for name in gone if name not in absent]
    if problems:
        raise PkgError("refused: " + " | ".join(problems))
    both = [name for name in absent if name in pins]
    if both:
        raise PkgError(f"pinned and removed at once: {', '.join(both)} ({', '.join(sorted({pins[n][1] for n in both}))})")
    return {"specs": specs, "absent": absent, "owners": owners, "deferred": deferred,
            "modules": [stream for stream, _owner in modules.values()]}


# What a group's ``replaces`` may hold: a package-name prefix, optionally one [0-9] class, then *
# (another branch's metapackage: nvidia-open-[0-9]*), nothing wider.
REPLACES_GLOB = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*-(\[0-9\])?\*$")


def replaced_names(globs: Sequence[str], installed: Sequence[str], pinned: Sequence[str]) -> list[str]:
    """The installed names a group's ``replaces`` globs match, other than the names pinned now: the
    packages of another driver branch (``nvidia-open-580`` when ``nvidia-open-590`` is pinned),
    removed in the install's transaction. Sorted."""
    keep = set(pinned)
    return sorted({name for name in installed for glob in globs
                   if name not in keep and fnmatch.fnmatchcase(name, glob)})


def foreign_holds(replaced: Sequence[str], held: Sequence[str], recorded: Mapping[str, Sequence[str]],
                  pkg_mgr: str) -> list[str]:
    """The replaced names on hold that no kiln pins record names (``recorded``: owner -> package strings,
    read before this run writes its own): someone else's hold, which kiln must not release. Sorted."""
    kiln_names = {kiln_pkg_split(spec, pkg_mgr, candidate_ok=True)["name"]
                  for specs in recorded.values() for spec in specs}
    on_hold = set(held)
    return sorted(name for name in set(replaced) if name in on_hold and name not in kiln_names)


# A dnf module stream as kiln names it: <module>:<stream> (no profile, no version).
_MODULE_STREAM = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.+-]*):(?P<stream>[A-Za-z0-9][A-Za-z0-9_.+-]*)$")


def module_stream_split(stream: Any) -> tuple[str, str]:
    """``"nvidia-driver:580-open"`` -> ``("nvidia-driver", "580-open")``; PkgError for anything else."""
    match = _MODULE_STREAM.match(stream) if isinstance(stream, str) else None
    if not match:
        raise PkgError(f"module stream {stream!r} must be <module>:<stream>, e.g. nvidia-driver:580-open")
    return match["name"], match["stream"]


def parse_module_state(files: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """dnf's persistent module state: ``{module: {stream, state}}`` from the INI files of
    /etc/dnf/modules.d (file name -> text; ``[name]`` sections with ``stream=`` and ``state=``).
    A section without a state, or a file kiln cannot read as INI, is a PkgError naming the file."""
    out: dict[str, dict[str, str]] = {}
    for path, text in sorted(files.items()):
        section: str | None = None
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1].strip()
                out[section] = {"stream": "", "state": ""}
                continue
            key, sep, value = line.partition("=")
            if not sep or section is None:
                raise PkgError(f"{path} line {number}: {raw[:80]!r} is not a key=value line of a [module] section")
            if key.strip() in ("stream", "state"):
                out[section][key.strip()] = value.strip()
    for name, entry in out.items():
        if entry["state"] not in ("enabled", "disabled", ""):
            raise PkgError(f"module {name}: unknown state {entry['state']!r} in /etc/dnf/modules.d")
    return out


def module_plan(wanted: Sequence[str], state: Mapping[str, Mapping[str, str]]) -> list[dict[str, Any]]:
    """What must change for every wanted stream to be the enabled one: ``[{name, from, to}]``;
    ``from`` is the enabled stream being replaced (None when the module is not enabled)."""
    changes: list[dict[str, Any]] = []
    for stream in wanted:
        name, want = module_stream_split(stream)
        now = state.get(name) or {}
        enabled = now.get("stream") if now.get("state") == "enabled" else None
        if enabled != want:
            changes.append({"name": name, "from": enabled or None, "to": want})
    return changes


def format_module_change(change: Mapping[str, Any]) -> str:
    """One report line: ``module nvidia-driver: 580-open -> 590-open`` (``(none)`` when not enabled)."""
    return f"module {change['name']}: {change['from'] or '(none)'} -> {change['to']}"


def pinned_covered(play: Any, group: Any) -> dict[str, Any] | None:
    """What a play's batch (``packages_play_result``) did for ``group``'s owner, or None.

    Not None only when the batch installed exactly this group -- same owner,
    same packages, same names to remove, same module streams -- so the role may skip its own install
    and read its result here; anything else (no batch, a skipped or failed one,
    the owner deferred or absent, other pins) is None: the role installs itself.
    """
    if not isinstance(play, Mapping) or not isinstance(group, Mapping):
        return None
    if play.get("failed") or play.get("skipped"):
        return None
    owners = play.get("owners")
    mine = owners.get(group.get("owner")) if isinstance(owners, Mapping) else None
    if not isinstance(mine, Mapping):
        return None
    if list(mine.get("packages", [])) != list(group.get("packages", [])) or \
            list(mine.get("absent", [])) != list(group.get("absent", [])) or \
            list(mine.get("modules", [])) != list(group.get("modules", [])) or \
            list(mine.get("replaces", [])) != list(group.get("replaces", [])):
        return None
    return dict(mine)


# --------------------------------------------------------------------------- the filters
# What filter_plugins/kiln_package_filters.py registers: the functions above as filters (a PkgError
# becomes a FilterError with the same message), and the kernel ordering of the driver's kernel check.
kiln_pkg_split_filter = as_filter(kiln_pkg_split, (PkgError,), chain=False)
kiln_pkgdb_parse_filter = as_filter(kiln_pkgdb_parse, (PkgError,), chain=False)
kiln_pkg_plan_filter = as_filter(kiln_pkg_plan, (PkgError,), chain=False)
kiln_pinned_covered = as_filter(pinned_covered, (PkgError,), chain=False)

_KERNEL_NUM = re.compile(r"\d+")


def kiln_kernel_key(kernel: str) -> tuple[int, ...]:
    """Numeric sort key of a kernel release string (6.1.0-28-amd64 -> (6, 1, 0, 28))."""
    return tuple(int(n) for n in _KERNEL_NUM.findall(str(kernel).split("+")[0]))


def kiln_kernels_to_check(running: str, installed: Sequence[str]) -> list[str]:
    """The running kernel plus every installed kernel newer than it (what may boot next)."""
    if not isinstance(running, str) or not running:
        raise FilterError(f"kiln_kernels_to_check: the running kernel must be a release string, "
                          f"got {type(running).__name__}")
    if isinstance(installed, (str, Mapping)) or not isinstance(installed, Sequence) \
            or not all(isinstance(k, str) for k in installed):
        raise FilterError(f"kiln_kernels_to_check: the installed kernels must be a list of release strings, "
                          f"got {type(installed).__name__}")
    newer = [k for k in installed if k != running and kiln_kernel_key(k) > kiln_kernel_key(running)]
    return [running] + sorted(set(newer), key=kiln_kernel_key)


def kiln_format_change(change: Mapping[str, Any]) -> str:
    """One line for a planned change: ``name from -> to`` or ``name (new) -> to``."""
    try:
        return str(format_change(change))
    except PkgError as exc:
        raise FilterError(str(exc)) from None
