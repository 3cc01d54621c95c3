#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: kiln's one package mechanism (logic in module_utils/kiln/packages/pkgdb.py)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: kiln_packages
short_description: Install exact package versions and hold them, in one task (kiln's package mechanism)
description:
  - Reads the host's package database in-process (dpkg-query, or rpm plus the dnf versionlock list),
    plans with C(kiln_pkg_plan) (module_utils/kiln/packages/pkgdb.py) and changes only what differs.
  - C(state=pinned) unholds the pinned packages whose version changes, installs the exact versions in one
    apt/dnf transaction, holds every pinned package, writes the unattended-upgrades exclusion of the
    owner, then reads the database again and fails unless every package is at its pin and held.
    A failed install puts back the holds it released, so a re-run starts from the same state.
  - C(state=pinned) with O(groups) does the same for the pins of several owners (the roles of one play) in one
    read of the database, one transaction and one verify, writing each owner's unattended-upgrades file; a name
    pinned by two owners must carry the same pin. O(absent) names are removed in the same transaction (released
    from their hold first) when installed.
  - C(state=held) / C(state=unheld) hold or release installed packages (apt-mark, dnf versionlock);
    C(state=present) installs the names that are missing, at the repository's candidate, unheld.
  - Refreshes the apt cache before an install only when it is empty or its update stamp is older than
    O(apt_cache_valid_time), and once more when apt cannot find a pinned version in a cache it did not
    refresh itself.
  - C(state=pinned) with O(pins_dir) records each owner's pins in C(<pins_dir>/<owner>.json) (what kiln
    intends on this host; the as-built record and the drift gate compare the installed versions with it).
  - C(state=read) changes nothing -- it returns the package database (C(packages), C(held)) and the pins
    recorded under O(pins_dir) (C(pins), owner -> package strings); an unreadable record fails, naming the file.
  - In check mode nothing runs but the read; the result says what would change.
options:
  packages:
    description:
      - Exact pins (apt C(name=version), dnf C(name-version-release)) or bare names (the candidate).
      - Required unless O(groups) is given.
    type: list
    elements: str
  groups:
    description:
      - C(state=pinned) only, instead of O(packages)/O(owner)/O(absent)/O(modules) -- C({owner, packages, absent,
        replaces, modules, problems, defer}) per owner. Any C(problems) message refuses the whole batch before anything changes; a group with
        C(defer=true) is left out (its role installs it later, after adding its own repository).
    type: list
    elements: dict
  replaces:
    description:
      - C(state=pinned), globs of a name prefix and one C(*) (e.g. C(nvidia-open-[0-9]*)): installed packages they
        match, other than the pinned names, are released and removed in the install's transaction -- another
        driver branch's metapackage and Fabric Manager on a branch change (apt names carry the branch). A match on
        hold that no pins record under O(pins_dir) names is an operator's hold: the run fails before any change.
    type: list
    elements: str
  modules:
    description:
      - C(state=pinned), dnf only, the module streams (C(<module>:<stream>), e.g. C(nvidia-driver:580-open)) that must
        be the enabled ones before the install, read from /etc/dnf/modules.d. A module enabled at another stream is
        reset and the wanted stream enabled (a driver branch change), then the pins are installed; check mode reports
        C(module <name>: <from> -> <to>). A stream's packages are invisible to dnf until it is enabled.
    type: list
    elements: str
  optional:
    description:
      - C(state=present) only, bare names installed (with O(packages), in the same transaction) when the
        configured repositories carry them; the others are returned in C(unavailable), not an error.
    type: list
    elements: str
  absent:
    description: C(state=pinned) only, bare names to remove (unheld first) in the same transaction when installed.
    type: list
    elements: str
  state:
    description: What to make true of O(packages).
    type: str
    choices: [pinned, held, unheld, present, read]
    default: pinned
  owner:
    description: Who pins them (the unattended-upgrades file is C(51kiln-hold-<owner>)); lower case, digits, dashes.
    type: str
    default: common
  pkg_mgr:
    description: The host's package manager (C(ansible_facts['pkg_mgr'])).
    type: str
    choices: [apt, dnf]
    required: true
  policy_rc_d:
    description: apt only, exit code of a temporary C(/usr/sbin/policy-rc.d) during the install (101 keeps services stopped); unset for none.
    type: int
  unattended_conf_dir:
    description: Where the unattended-upgrades exclusion is written; empty for none (dnf-automatic honours versionlock).
    type: str
    default: ''
  installed_only:
    description:
      - C(state=held)/C(state=unheld) only, hold or release the installed names of O(packages) and list the
        others in C(not_installed) instead of failing (the kernel packages a host may or may not have).
    type: bool
    default: false
  pins_dir:
    description: Where C(state=pinned) records each owner's pins and C(state=read) reads them; empty for none.
    type: path
    default: ''
  policy_rc_d_path:
    description: Where apt's policy-rc.d lives (tests point it elsewhere).
    type: path
    default: /usr/sbin/policy-rc.d
  apt_cache_valid_time:
    description: Seconds an apt cache refresh stays valid (its stamp is O(apt_stamp)); 0 refreshes before every install.
    type: int
    default: 3600
  apt_stamp:
    description: The update-success stamp touched after each refresh.
    type: path
    default: /var/lib/apt/periodic/update-success-stamp
  lock_timeout:
    description: Seconds apt waits for the dpkg lock (C(DPkg::Lock::Timeout)); dnf waits for its own lock.
    type: int
    default: 120
author: kiln
"""

EXAMPLES = r"""
- name: Install CUDA at the stack's versions and hold it
  kiln_packages:
    packages: "{{ kiln_stack | kiln_pkg('cuda') }}"
    owner: cuda
    pkg_mgr: "{{ ansible_facts['pkg_mgr'] }}"
    policy_rc_d: 101
    unattended_conf_dir: /etc/apt/apt.conf.d
  register: packages_pinned_result
"""

RETURN = r"""
owner: {description: The owner given., returned: always, type: str}
names: {description: The package names of O(packages)., returned: always, type: list}
changes: {description: "Version changes, C({name, from, to}); from is null for a new package.", returned: always, type: list}
modules: {description: "state=pinned, module stream changes C({name, from, to}) (dnf); from is null for a module not enabled.",
          returned: always, type: list}
removes: {description: "Names removed (or that would be), from O(absent).", returned: always, type: list}
report: {description: "state=pinned, one line per change: C(<owner>: changing) then C(name from -> to) / C(name removed).", returned: always, type: list}
deferred: {description: "Owners of O(groups) with C(defer) (they install themselves later).", returned: always, type: list}
owners: {description: "state=pinned, per owner: C({packages, absent, names, changes, removes, msg}).", returned: always, type: dict}
installed: {description: "state=pinned, name -> installed version of each pinned name after the run.", returned: always, type: dict}
unhold: {description: Holds released for the change., returned: always, type: list}
hold: {description: Holds set (or that would be set)., returned: always, type: list}
unavailable: {description: "C(state=present), names of O(optional) the configured repositories do not carry.", returned: always, type: list}
installs: {description: Names installed by C(state=present)., returned: always, type: list}
msg: {description: One line saying what changed or that nothing had to., returned: always, type: str}
cache_refreshed: {description: Whether the apt cache was refreshed., returned: always, type: bool}
commands: {description: The package commands run (argv lists)., returned: always, type: list}
packages: {description: "C(state=read), name -> installed versions.", returned: when state is read, type: dict}
not_installed: {description: "O(installed_only), the names of O(packages) not installed (left alone).", returned: when installed_only, type: list}
held: {description: "C(state=read), names on hold.", returned: when state is read, type: list}
pins: {description: "C(state=read), owner -> the pinned package strings recorded under O(pins_dir).", returned: when state is read, type: dict}
pins_dir: {description: "C(state=read), the directory the pins were read from (null without O(pins_dir)).", returned: when state is read, type: str}
pins_dir_present: {description: "C(state=read), whether O(pins_dir) exists (no pins recorded there is drift, not clean).", returned: when state is read, type: bool}
"""

import os
import re
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kiln.packages.hostfiles import PolicyRcD, apt_cache_stale, read_pins
from ansible.module_utils.kiln.packages.pkgdb import (
    BARE_NAME,
    OWNER,
    VERSIONLOCK_MARKER,
    PkgError,
    format_change,
    foreign_holds,
    format_module_change,
    kiln_pkg_plan,
    kiln_pkg_split,
    kiln_pkgdb_parse,
    merge_groups,
    module_plan,
    parse_module_state,
    pins_record,
    replaced_names,
    unattended_conf,
)

DPKG_QUERY_ARGV = ["dpkg-query", "-W", "-f", "${Package}\\t${Version}\\t${db:Status-Abbrev}\\t${Status}\\n"]
RPM_QUERY_ARGV = ["rpm", "-qa", "--qf", "%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n"]
VERSIONLOCK_LIST = "/etc/dnf/plugins/versionlock.list"
# dnf's persistent module state (one INI file per module).
DNF_MODULES_D = "/etc/dnf/modules.d"
_APT_MISSING = re.compile(r"(Version '[^']*' for '[^']*' was not found|Unable to locate package|has no installation candidate)")
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "DEBCONF_NONINTERACTIVE_SEEN": "true", "LC_ALL": "C", "LANG": "C"}


class Host:
    """The package commands of one host, run through AnsibleModule (argv lists, never a shell)."""

    def __init__(self, module: AnsibleModule, pkg_mgr: str, lock_timeout: int) -> None:
        self.module = module
        self.pkg_mgr = pkg_mgr
        self.lock_timeout = lock_timeout
        self.commands: list[list[str]] = []

    def run(self, argv: list[str], record: bool = True) -> tuple[int, str, str]:
        if record:
            self.commands.append(argv)
        return self.module.run_command(argv, environ_update=APT_ENV if self.pkg_mgr == "apt" else {"LC_ALL": "C"})

    def must(self, argv: list[str], what: str, **extra: Any) -> str:
        rc, out, err = self.run(argv)
        if rc != 0:
            self.fail(f"{what} failed (rc {rc}): {(err or out).strip()[-2000:]}", **extra)
        return out

    def fail(self, msg: str, **extra: Any) -> None:
        self.module.fail_json(msg=msg, commands=self.commands, **extra)

    def read(self) -> dict[str, Any]:
        """One read of the package database, parsed (packages + hold state)."""
        if self.pkg_mgr == "apt":
            rc, out, err = self.run(DPKG_QUERY_ARGV, record=False)
            if rc != 0:
                self.fail(f"reading the package database (dpkg-query) failed (rc {rc}): {err.strip()}")
        else:
            rc, out, err = self.run(RPM_QUERY_ARGV, record=False)
            if rc != 0:
                self.fail(f"reading the package database (rpm -qa) failed (rc {rc}): {err.strip()}")
            locks = ""
            if os.path.exists(VERSIONLOCK_LIST):
                with open(VERSIONLOCK_LIST, encoding="utf-8", errors="replace") as handle:
                    locks = handle.read()
            out = f"{out.rstrip(chr(10))}\n{VERSIONLOCK_MARKER}\n{locks}"
        try:
            return kiln_pkgdb_parse(out, self.pkg_mgr)
        except PkgError as exc:
            self.fail(f"cannot parse the package database: {exc}")
        raise AssertionError("unreachable")  # pragma: no cover

    def module_state(self) -> dict[str, dict[str, str]]:
        """dnf's module state ({module: {stream, state}}), read from /etc/dnf/modules.d in-process."""
        files: dict[str, str] = {}
        if os.path.isdir(DNF_MODULES_D):
            for entry in sorted(os.listdir(DNF_MODULES_D)):
                if entry.endswith(".module"):
                    path = os.path.join(DNF_MODULES_D, entry)
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        files[path] = handle.read()
        try:
            return parse_module_state(files)
        except PkgError as exc:
            self.fail(f"cannot read dnf's module state: {exc}")
        raise AssertionError("unreachable")  # pragma: no cover

    def switch_modules(self, changes: list[dict[str, Any]]) -> None:
        """Enable each wanted stream; a module enabled at another stream is reset first (dnf refuses a
        direct switch). The packages follow in the install transaction, at their exact pins."""
        for change in changes:
            if change["from"] is not None:
                _run_or_raise(self, ["dnf", "-q", "-y", "module", "reset", change["name"]], "dnf module reset")
            _run_or_raise(self, ["dnf", "-q", "-y", "module", "enable", f"{change['name']}:{change['to']}"],
                          "dnf module enable")

    def set_hold(self, names: list[str], hold: bool) -> None:
        if not names:
            return
        if self.pkg_mgr == "apt":
            self.must(["apt-mark", "hold" if hold else "unhold"] + names, "apt-mark")
        else:
            self.must(["dnf", "-q", "-y", "versionlock", "add" if hold else "delete"] + names, "dnf versionlock")


def _run_or_raise(host: Host, argv: list[str], what: str) -> None:
    """Run a package command whose failure the caller recovers from (it puts the holds back)."""
    rc, out, err = host.run(argv)
    if rc != 0:
        raise PkgError(f"{what} failed (rc {rc}): {(err or out).strip()[-2000:]}")


def refresh_apt(host: Host, stamp: str) -> None:
    _run_or_raise(host, ["apt-get", "-q", "-o", f"DPkg::Lock::Timeout={host.lock_timeout}", "update"], "apt-get update")
    os.makedirs(os.path.dirname(stamp), exist_ok=True)
    with open(stamp, "a", encoding="utf-8"):
        pass
    os.utime(stamp, None)


def install(host: Host, specs: list[str], params: dict[str, Any], removes: list[str] | None = None) -> bool:
    """Install ``specs`` (and remove ``removes``) in one transaction; True when the apt cache was refreshed."""
    removes = removes or []
    if host.pkg_mgr == "dnf":
        if specs:
            _run_or_raise(host, ["dnf", "-q", "-y", "install"] + specs, "dnf install")
        if removes:
            _run_or_raise(host, ["dnf", "-q", "-y", "remove"] + removes, "dnf remove")
        return False
    refreshed = False
    if specs and apt_cache_stale(params["apt_cache_valid_time"], params["apt_stamp"], time.time()):
        refresh_apt(host, params["apt_stamp"])
        refreshed = True
    argv = ["apt-get", "-y", "-q", "--no-install-recommends", "--allow-downgrades",
            "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
            "-o", f"DPkg::Lock::Timeout={host.lock_timeout}", "install"] + specs + [f"{name}-" for name in removes]
    with PolicyRcD(params["policy_rc_d"], params["policy_rc_d_path"]):
        rc, out, err = host.run(argv)
        if rc != 0 and not refreshed and _APT_MISSING.search(err + out):
            # the lists predate a repository change (a new mirror snapshot, a new release): once more, fresh
            refresh_apt(host, params["apt_stamp"])
            refreshed = True
            rc, out, err = host.run(argv)
    if rc != 0:
        raise PkgError(f"apt-get install failed (rc {rc}): {(err or out).strip()[-2000:]}")
    return refreshed


def dnf_downgrade(host: Host, specs: list[str]) -> None:
    """dnf install leaves a newer installed version in place: downgrade what is still above its pin."""
    if specs:
        _run_or_raise(host, ["dnf", "-q", "-y", "downgrade"] + specs, "dnf downgrade")


def write_conf(module: AnsibleModule, path: str, content: str) -> bool:
    """Write ``content`` to ``path`` (0644 root) when it differs; True when it did (or would)."""
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == content:
                return False
    except OSError:
        pass
    if module.check_mode:
        return True
    tmp = path + ".kiln-tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(content)
    os.chmod(tmp, 0o644)
    module.atomic_move(tmp, path)
    return True


def write_pins(module: AnsibleModule, pins_dir: str, owner: str, packages: list[str]) -> bool:
    """Record ``owner``'s pins in ``<pins_dir>/<owner>.json``; True when it changed (or would)."""
    if not module.check_mode and not os.path.isdir(pins_dir):
        os.makedirs(pins_dir, mode=0o755, exist_ok=True)
    return write_conf(module, os.path.join(pins_dir, f"{owner}.json"), pins_record(owner, packages))


def read_state(module: AnsibleModule, host: Host, params: dict[str, Any], result: dict[str, Any]) -> None:
    """The package database and the recorded pins, changing nothing."""
    db = host.read()
    try:
        pins = read_pins(params["pins_dir"])
    except PkgError as exc:
        host.fail(str(exc))
    present = bool(params["pins_dir"]) and os.path.isdir(params["pins_dir"])
    result.update(packages=db["packages"], held=sorted(db["held"]), pins=pins, pkg_mgr=host.pkg_mgr,
                  pins_dir=params["pins_dir"] or None, pins_dir_present=present,
                  msg=f"{len(db['packages'])} packages installed, {len(pins)} owners' pins recorded"
                      + ("" if present else f" ({params['pins_dir'] or 'no pins_dir'} is missing)"))


def _group_msg(owner: str, changes: list[dict[str, Any]], removes: list[str],
               modules: list[dict[str, Any]] | None = None) -> str:
    done = [format_module_change(m) for m in modules or []] + [format_change(c) for c in changes] \
        + [f"{name} removed" for name in removes]
    return f"{owner}: changing " + ", ".join(done) if done else f"{owner}: all pinned versions already installed"


def pinned(module: AnsibleModule, host: Host, params: dict[str, Any], result: dict[str, Any]) -> None:
    """Every group's pins in one read, one transaction, one verify; a hold file per owner."""
    groups = params["groups"] or [{"owner": params["owner"], "packages": params["packages"] or [],
                                   "absent": params["absent"] or [], "modules": params["modules"] or [],
                                   "replaces": params["replaces"] or []}]
    label = "+".join(str(g.get("owner")) for g in groups) if isinstance(groups, list) else "groups"
    try:
        merged = merge_groups(groups, host.pkg_mgr)
    except PkgError as exc:
        host.fail(f"{label}: nothing installed: {exc}")
    db = host.read()
    merged_names = [kiln_pkg_split(spec, host.pkg_mgr, candidate_ok=True)["name"] for spec in merged["specs"]]
    try:
        plan = kiln_pkg_plan(merged["specs"], db["packages"], host.pkg_mgr, db["held"])
    except PkgError as exc:
        host.fail(f"{label}: {exc}")
    removes = [name for name in merged["absent"] if name in db["packages"]]
    replaced: dict[str, list[str]] = {owner: replaced_names(group["replaces"], list(db["packages"]), merged_names)
                                      for owner, group in merged["owners"].items()}
    removes += [name for names in replaced.values() for name in names if name not in removes]
    # A replaced package on hold is released only when kiln pinned it (its pins records, read before this
    # run rewrites them); anyone else's hold stops the run before anything changes.
    held_replaced = [n for names in replaced.values() for n in names if n in db["held"]]
    try:
        foreign = foreign_holds(held_replaced, db["held"], read_pins(params["pins_dir"]), host.pkg_mgr) \
            if held_replaced else []
    except PkgError as exc:
        host.fail(f"{label}: {exc}")
    if foreign:
        host.fail(f"{label}: nothing changed: {', '.join(foreign)} must be removed for the new pins (another branch's "
                  f"package) but is held and kiln's pins records ({params['pins_dir'] or 'none'}) do not name it: "
                  "an operator's hold. Release it yourself (apt-mark unhold / dnf versionlock delete), then re-run.")
    try:
        streams = module_plan(merged["modules"], host.module_state()) if merged["modules"] else []
    except PkgError as exc:
        host.fail(f"{label}: {exc}")
    result["modules"] = streams
    result.update(names=plan["names"], changes=plan["changes"], removes=removes,
                  unhold=plan["unhold"] + [n for n in removes if n in db["held"]],
                  hold=[n for n in plan["hold"] if not (module.check_mode and n in plan["installs"])])
    owners: dict[str, dict[str, Any]] = {}
    for owner, group in merged["owners"].items():
        mine = set(group["names"])
        changes = [c for c in plan["changes"] if c["name"] in mine]
        gone = [n for n in group["absent"] if n in removes] + [n for n in replaced[owner] if n not in group["absent"]]
        switched = [m for m in streams if any(s.split(":", 1)[0] == m["name"] for s in group["modules"])]
        owners[owner] = {"packages": group["packages"], "absent": group["absent"], "names": group["names"], "changes": changes,
                         "removes": gone, "modules": group["modules"], "replaces": group["replaces"],
                         "module_changes": switched,
                         "msg": _group_msg(owner, changes, gone, switched)}
    result["owners"] = owners
    result["deferred"] = merged["deferred"]
    result["report"] = [line for owner, o in owners.items() if o["changes"] or o["removes"] or o["module_changes"]
                        for line in [f"{owner}: changing"] + [format_module_change(m) for m in o["module_changes"]]
                        + [format_change(c) for c in o["changes"]] + [f"{n} removed" for n in o["removes"]]]
    result["msg"] = "; ".join(o["msg"] for o in owners.values())
    conf_dir = params["unattended_conf_dir"]
    for owner, group in merged["owners"].items():
        if conf_dir and group["names"] and write_conf(module, os.path.join(conf_dir, f"51kiln-hold-{owner}"),
                                                      unattended_conf(owner, group["names"])):
            result["changed"] = True
        if params["pins_dir"] and write_pins(module, params["pins_dir"], owner, group["packages"]):
            result["changed"] = True
    if not plan["changes"] and not plan["hold"] and not removes and not streams:
        result["installed"] = _installed(db, plan["names"])
        return
    result["changed"] = True
    if module.check_mode:
        result["installed"] = _installed(db, plan["names"])
        return
    release = plan["unhold"] + [n for n in removes if n in db["held"]]
    if streams:
        # before the install (a stream's packages are invisible until it is enabled); a failure here
        # changed at most the module state, which a re-run plans again
        try:
            host.switch_modules(streams)
        except PkgError as exc:
            host.fail(f"{label}: {exc}", changes=plan["changes"], removes=removes)
    host.set_hold(release, hold=False)
    db = {**db, "held": [n for n in db["held"] if n not in release]}
    changing = {c["name"] for c in plan["changes"]}
    specs = [s for s in plan["specs"] if kiln_pkg_split(s, host.pkg_mgr, candidate_ok=True)["name"] in changing]
    if specs or removes:
        try:
            result["cache_refreshed"] = install(host, specs, params, removes)
            if host.pkg_mgr == "dnf" and specs:
                after = host.read()
                behind = kiln_pkg_plan(specs, after["packages"], "dnf", after["held"])
                dnf_downgrade(host, [s for s in specs if kiln_pkg_split(s, "dnf", candidate_ok=True)["name"]
                                     in {c["name"] for c in behind["changes"]}])
        except PkgError as exc:
            host.set_hold(release, hold=True)  # put back the operator's holds: a re-run starts the same
            host.fail(f"{label}: {exc}", changes=plan["changes"], removes=removes)
        db = host.read()
    host.set_hold([n for n in plan["names"] if n not in db["held"]], hold=True)
    after = host.read()
    final = kiln_pkg_plan(merged["specs"], after["packages"], host.pkg_mgr, after["held"])
    left = [n for n in removes if n in after["packages"]]
    streams_left = module_plan(merged["modules"], host.module_state()) if merged["modules"] else []
    if final["changes"] or final["hold"] or left or streams_left:
        host.fail(f"{label}: after the install, not at the pins or not held: "
                  + ", ".join([format_change(c) for c in final["changes"]] + [f"{n} not held" for n in final["hold"]]
                              + [f"{n} still installed" for n in left]
                              + [format_module_change(m) + " not done" for m in streams_left]),
                  changes=plan["changes"])
    result["installed"] = _installed(after, plan["names"])


def _installed(db: dict[str, Any], names: list[str]) -> dict[str, str]:
    """name -> installed version (the first, for a multi-version rpm) of each pinned name installed."""
    return {name: db["packages"][name][0] for name in names if db["packages"].get(name)}


def holds(module: AnsibleModule, host: Host, params: dict[str, Any], result: dict[str, Any]) -> None:
    names = params["packages"]
    bad = [n for n in names if not BARE_NAME.match(n)]
    if bad:
        host.fail(f"{params['owner']}: package names to hold or release must be bare names (no versions "
                  f"or globs): {', '.join(bad)}. Pin the version in the role that installs the package, then hold the name.")
    db = host.read()
    hold = params["state"] == "held"
    missing = [n for n in names if n not in db["packages"]]
    if params["installed_only"]:
        result["not_installed"] = missing
        names, missing = [n for n in names if n in db["packages"]], []
    if missing:
        host.fail(f"cannot {'hold' if hold else 'unhold'} packages that are not installed: {', '.join(missing)} "
                  f"(owner {params['owner']}). Install them first, or remove them from the hold list.")
    todo = [n for n in names if (n not in db["held"]) == hold]
    result.update(names=names, hold=todo if hold else [], unhold=[] if hold else todo)
    result["msg"] = f"{params['owner']}: {'holding' if hold else 'releasing'} {', '.join(todo)}" if todo \
        else f"{params['owner']}: hold state already as asked"
    if hold and names and params["unattended_conf_dir"] and write_conf(
            module, os.path.join(params["unattended_conf_dir"], f"51kiln-hold-{params['owner']}"),
            unattended_conf(params["owner"], names)):
        result["changed"] = True
    if todo:
        result["changed"] = True
        if not module.check_mode:
            host.set_hold(todo, hold=hold)


APT_SHOW_ARGV = ["apt-cache", "show", "--no-all-versions"]
DNF_AVAILABLE_ARGV = ["dnf", "-q", "--cacheonly", "list", "--available"]


def available(host: Host, name: str) -> bool:
    """Whether the configured repositories carry ``name`` (the package lists as they are now)."""
    if host.pkg_mgr == "apt":
        rc, out, _ = host.run(APT_SHOW_ARGV + [name], record=False)
        return rc == 0 and "Package:" in out
    rc, out, _ = host.run(DNF_AVAILABLE_ARGV + [name], record=False)
    return rc == 0 and name in out


def present(module: AnsibleModule, host: Host, params: dict[str, Any], result: dict[str, Any]) -> None:
    names = params["packages"]
    optional = params["optional"] or []
    bad = [n for n in names + optional if not BARE_NAME.match(n)]
    if bad:
        host.fail(f"state=present takes bare package names: {', '.join(bad)}")
    db = host.read()
    todo = [n for n in dict.fromkeys(names) if n not in db["packages"]]
    maybe = [n for n in dict.fromkeys(optional) if n not in db["packages"] and n not in todo]
    if maybe and host.pkg_mgr == "apt" and not module.check_mode and \
            apt_cache_stale(params["apt_cache_valid_time"], params["apt_stamp"], time.time()):
        try:
            refresh_apt(host, params["apt_stamp"])  # ask fresh lists whether they carry the optional names
        except PkgError as exc:
            host.fail(str(exc))
        result["cache_refreshed"] = True
    unavailable = [n for n in maybe if not available(host, n)]
    todo += [n for n in maybe if n not in unavailable]
    result.update(names=names, installs=todo, unavailable=unavailable,
                  msg=(f"installing {', '.join(todo)}" if todo else "all packages already installed")
                  + (f"; not in the configured repositories: {', '.join(unavailable)}" if unavailable else ""))
    if not todo:
        return
    result["changed"] = True
    if module.check_mode:
        return
    try:
        result["cache_refreshed"] = install(host, todo, params) or result["cache_refreshed"]
    except PkgError as exc:
        host.fail(str(exc))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str"},
            "groups": {"type": "list", "elements": "dict"},
            "absent": {"type": "list", "elements": "str"},
            "modules": {"type": "list", "elements": "str"},
            "replaces": {"type": "list", "elements": "str"},
            "optional": {"type": "list", "elements": "str"},
            "state": {"type": "str", "choices": ["pinned", "held", "unheld", "present", "read"], "default": "pinned"},
            "owner": {"type": "str", "default": "common"},
            "pkg_mgr": {"type": "str", "choices": ["apt", "dnf"], "required": True},
            "policy_rc_d": {"type": "int"},
            "unattended_conf_dir": {"type": "str", "default": ""},
            "pins_dir": {"type": "path", "default": ""},
            "installed_only": {"type": "bool", "default": False},
            "policy_rc_d_path": {"type": "path", "default": "/usr/sbin/policy-rc.d"},
            "apt_cache_valid_time": {"type": "int", "default": 3600},
            "apt_stamp": {"type": "path", "default": "/var/lib/apt/periodic/update-success-stamp"},
            "lock_timeout": {"type": "int", "default": 120},
        },
        supports_check_mode=True,
    )
    params = module.params
    for option, state in (("groups", "pinned"), ("absent", "pinned"), ("modules", "pinned"), ("replaces", "pinned"),
                          ("optional", "present")):
        if params[option] and params["state"] != state:
            module.fail_json(msg=f"{option} is for state={state} only, not state={params['state']}: nothing changed")
    if params["groups"] and (params["packages"] or params["absent"] or params["modules"] or params["replaces"]):
        module.fail_json(msg="give either groups (several owners) or packages/absent/modules/replaces (one owner), not both")
    if params["packages"] is None and not params["groups"] and params["state"] != "read":
        module.fail_json(msg="packages is required unless groups is given")
    params["packages"] = params["packages"] or []
    if not OWNER.match(params["owner"]):
        module.fail_json(msg=f"owner {params['owner']!r} must be lower-case letters, digits and dashes "
                             "(it names the file 51kiln-hold-<owner>)")
    host = Host(module, params["pkg_mgr"], params["lock_timeout"])
    result: dict[str, Any] = {"changed": False, "owner": params["owner"], "names": [], "changes": [], "removes": [], "modules": [],
                              "unhold": [], "hold": [], "installs": [], "owners": {}, "deferred": [], "report": [], "unavailable": [], "installed": {},
                              "cache_refreshed": False}
    if params["pkg_mgr"] == "apt" and not module.check_mode and params["state"] != "read":
        PolicyRcD(None, params["policy_rc_d_path"]).recover()
    {"pinned": pinned, "held": holds, "unheld": holds, "present": present, "read": read_state}[params["state"]](
        module, host, params, result)
    module.exit_json(commands=host.commands, **result)


if __name__ == "__main__":
    main()
