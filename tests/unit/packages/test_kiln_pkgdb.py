"""The package-database snapshot of role packages: kiln_pkgdb_parse, kiln_pkg_plan's hold state, and
the entry points under a real ansible-playbook run (one read per play, one hold command per call,
few task results on a no-op call).

The playbook test runs role packages against localhost with fake dpkg-query and apt-mark first on
PATH: they serve and change a text database under tmp_path, so nothing on this machine changes.
"""
from __future__ import annotations

import ast
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_kernel_cases import dpkg_database, dpkg_read
from kiln.packages.pkgdb import VERSIONLOCK_MARKER
from kiln.packages.pkgdb import kiln_pkg_plan_filter as kiln_pkg_plan
from kiln.packages.pkgdb import kiln_pkgdb_parse_filter as kiln_pkgdb_parse
from kiln_playbook import ANSIBLE_PLAYBOOK, REPO, run_playbook

ROLE = REPO / "roles" / "packages"

# ---------------------------------------------------------------------------
# render: the inverse of the parser, for tests (what dpkg-query / rpm print)


def render_apt(db: dict[str, Any]) -> str:
    lines = []
    held = set(db["held"])
    for name, versions in db["packages"].items():
        for version in versions:
            want = "hold" if name in held else "install"
            lines.append(f"{name}\t{version}\t{want[0]}i \t{want} ok installed")
    for name in sorted(held - set(db["packages"])):
        lines.append(f"{name}\t\thn \thold ok not-installed")
    return "\n".join(lines)


def render_dnf(db: dict[str, Any]) -> str:
    lines = []
    for name, versions in db["packages"].items():
        for version in versions:
            lines.append(f"{name}\t{version if ':' in version.split('-')[0] else '0:' + version}")
    lines.append(VERSIONLOCK_MARKER)
    lines.append("# Added by 'versionlock add' command on 2026-01-01")
    for name in db["held"]:
        versions = db["packages"].get(name) or ["0-0"]
        lines.append(f"{name}-{versions[0] if ':' in versions[0].split('-')[0] else '0:' + versions[0]}.*")
    return "\n".join(lines) + "\n"


APT_READ = (
    "libnccl2\t2.28.7-1+cuda13.0\tii \tinstall ok installed\n"
    "datacenter-gpu-manager-4-cuda13\t1:4.6.0-1\thi \thold ok installed\n"
    "nvidia-open-580\t580.95.05-1\thi \thold ok installed\n"
    "oldpkg\t1.0-1\trc \tdeinstall ok config-files\n"
    "broken\t2.0-1\tiU \tinstall ok unpacked\n"
    "reinst\t3.0-1\tiiR\tinstall reinstreq installed\n"
    "future\t\thn \thold ok not-installed\n"
    "libc6\t2.36-9\tii \tinstall ok installed\n"
    "libc6\t2.36-9\tii \tinstall ok installed\n"      # multi-arch: amd64 and i386
    "trig\t1.0\tit \tinstall ok triggers-pending"
)

DNF_READ = (
    "libnccl\t0:2.28.7-1+cuda13.0\n"
    "kernel\t0:5.14.0-427.13.1.el9_4\n"
    "kernel\t0:5.14.0-503.11.1.el9_5\n"
    "datacenter-gpu-manager\t1:3.3.9-1\n"
    "gpg-pubkey\t0:fd431d51-4ae0493b\n"
    f"{VERSIONLOCK_MARKER}\n"
    "# Added lock on Mon Jan  1 00:00:00 2026\n"
    "libnccl-0:2.28.7-1+cuda13.0.*\n"
    "cuda-toolkit-12-4-0:12.4.1-1.*\n"
    "!kernel-0:5.14.0-503.11.1.el9_5.*\n"
    "\n"
    "not a lock line\n"
)


def test_parse_apt_states_versions_and_holds() -> None:
    db = kiln_pkgdb_parse(APT_READ, "apt")
    assert db["pkg_mgr"] == "apt"
    assert db["packages"] == {
        "libnccl2": ["2.28.7-1+cuda13.0"],
        "datacenter-gpu-manager-4-cuda13": ["1:4.6.0-1"],
        "nvidia-open-580": ["580.95.05-1"],
        "libc6": ["2.36-9"],
        "trig": ["1.0"],
    }  # config-files, unpacked and reinstall-required count as not installed
    assert db["held"] == ["datacenter-gpu-manager-4-cuda13", "future", "nvidia-open-580"]


def test_parse_dnf_versions_and_versionlock() -> None:
    db = kiln_pkgdb_parse(DNF_READ, "dnf")
    assert db["packages"] == {
        "libnccl": ["2.28.7-1+cuda13.0"],
        "kernel": ["5.14.0-427.13.1.el9_4", "5.14.0-503.11.1.el9_5"],
        "datacenter-gpu-manager": ["1:3.3.9-1"],
        "gpg-pubkey": ["fd431d51-4ae0493b"],
    }
    assert db["held"] == ["cuda-toolkit-12-4", "libnccl"]  # the ! exclusion locks nothing
    assert kiln_pkgdb_parse(DNF_READ, "yum")["pkg_mgr"] == "dnf"


def test_parse_dnf_without_a_versionlock_list() -> None:
    assert kiln_pkgdb_parse(f"libnccl\t0:2.28.7-1\n{VERSIONLOCK_MARKER}", "dnf")["held"] == []


@pytest.mark.parametrize("mgr", ["apt", "dnf"])
def test_parse_empty_database(mgr: str) -> None:
    out = "" if mgr == "apt" else VERSIONLOCK_MARKER
    assert kiln_pkgdb_parse(out, mgr) == {"pkg_mgr": mgr, "packages": {}, "held": []}


def test_parse_takes_non_ascii_names_verbatim() -> None:
    db = kiln_pkgdb_parse("paquet-é\t1.0-1\tii \tinstall ok installed\n包\t2\thi \thold ok installed", "apt")
    assert db["packages"] == {"paquet-é": ["1.0-1"], "包": ["2"]}
    assert db["held"] == ["包"]


@pytest.mark.parametrize(("out", "why"), [
    ("libnccl2\t2.28.7-1\tii ", "expected 4 tab-separated fields, got 3"),            # truncated line
    ("libnccl2\t2.28.7-1\tii \tinstall ok inst", "unknown dpkg status"),            # truncated status
    ("lib\tnccl2\t2.28.7-1\tii \tinstall ok installed", "got 5"),                   # tab in a name
    ("libnccl2\t2.28.7-1\thi \tinstall ok installed", "disagrees"),                  # abbrev vs status
    ("libnccl2\t\tii \tinstall ok installed", "empty version"),
    ("\t1.0\tii \tinstall ok installed", "empty name"),
    ("lib nccl2\t1.0\tii \tinstall ok installed", "whitespace or control"),
    ("libnccl2\t1.0\x00\tii \tinstall ok installed", "whitespace or control"),
    ("-libnccl2\t1.0\tii \tinstall ok installed", "does not start with a letter or digit"),
    ("libnccl2\t1.0\tii \tinstall  ok installed", "unknown dpkg status"),
    ("libnccl2\t1.0\tii \tinstall ok installed\r", "unknown dpkg status"),
])
def test_parse_apt_refuses_garbled_lines(out: str, why: str) -> None:
    with pytest.raises(AnsibleFilterError, match=r"kiln_pkgdb_parse: apt line 1: .*" + re.escape(why)):
        kiln_pkgdb_parse(out, "apt")


@pytest.mark.parametrize(("out", "why"), [
    ("libnccl\t0:2.28.7-1", "no '#kiln:versionlock' line"),                         # truncated before the list
    (f"libnccl\t2.28.7-1\n{VERSIONLOCK_MARKER}", "not epoch:version-release"),     # no epoch
    (f"libnccl\t0:2.28.7\n{VERSIONLOCK_MARKER}", "not epoch:version-release"),     # no release
    (f"libnccl\n{VERSIONLOCK_MARKER}", "got 1"),
    (f"lib\tnccl\t0:1-1\n{VERSIONLOCK_MARKER}", "got 3"),
    (f"libnccl\t0:1\x07-1\n{VERSIONLOCK_MARKER}", "not epoch:version-release"),
])
def test_parse_dnf_refuses_garbled_lines(out: str, why: str) -> None:
    with pytest.raises(AnsibleFilterError, match=re.escape(why)):
        kiln_pkgdb_parse(out, "dnf")


@pytest.mark.parametrize(("out", "mgr"), [(None, "apt"), (b"bytes", "apt"), ("", "zypper")])
def test_parse_refuses_what_is_not_a_read(out: Any, mgr: str) -> None:
    with pytest.raises(AnsibleFilterError, match="kiln_pkgdb_parse"):
        kiln_pkgdb_parse(out, mgr)


# ---------------------------------------------------------------------------
# properties

# printable, no whitespace: any script, punctuation and symbols
_NAME_REST = st.characters(exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"))
_NAME = st.builds(lambda first, rest: first + rest,
                  st.characters(categories=("Ll", "Lu", "Lo", "Nd")),
                  st.text(_NAME_REST, max_size=12))
_APT_VERSION = st.text(_NAME_REST, min_size=1, max_size=12)
_DNF_PART = st.text(st.characters(categories=("Ll", "Lu", "Nd"), include_characters="._+~^"),
                    min_size=1, max_size=8)
_DNF_VERSION = st.builds(lambda epoch, v, r: (f"{epoch}:" if epoch else "") + f"{v}-{r}",
                         st.integers(0, 3), _DNF_PART, _DNF_PART)


def _db(version: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda packages, extra_held, pick: {
            "packages": packages,
            "held": sorted({n for n, keep in zip(packages, pick) if keep} | set(extra_held)),
        },
        st.dictionaries(_NAME, st.lists(version, min_size=1, max_size=3, unique=True), max_size=8),
        st.lists(_NAME, max_size=3),
        st.lists(st.booleans(), min_size=8, max_size=8),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_db(_APT_VERSION))
def test_apt_parse_render_round_trips(db: dict[str, Any]) -> None:
    assert kiln_pkgdb_parse(render_apt(db), "apt") == {"pkg_mgr": "apt", **db}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_db(_DNF_VERSION))
def test_dnf_parse_render_round_trips(db: dict[str, Any]) -> None:
    assert kiln_pkgdb_parse(render_dnf(db), "dnf") == {"pkg_mgr": "dnf", **db}


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["apt", "dnf"]))
def test_parse_of_any_text_parses_or_refuses_clearly(out: str, mgr: str) -> None:
    try:
        db = kiln_pkgdb_parse(out, mgr)
    except AnsibleFilterError as exc:
        assert str(exc).startswith("kiln_pkgdb_parse: ")
        return
    assert set(db) == {"pkg_mgr", "packages", "held"}
    assert db["held"] == sorted(set(db["held"]))
    for name, versions in db["packages"].items():
        assert name and name[0].isalnum() and versions and len(versions) == len(set(versions))


@settings(max_examples=300, deadline=None)
@given(_db(_APT_VERSION), st.integers(1, 400))
def test_truncated_apt_read_never_parses_into_something_else(db: dict[str, Any], cut: int) -> None:
    """A read cut anywhere parses as the lines before the cut, or fails; never as other data."""
    out = render_apt(db)
    if cut >= len(out):
        return
    try:
        part = kiln_pkgdb_parse(out[:cut], "apt")
    except AnsibleFilterError:
        return
    whole = kiln_pkgdb_parse(out, "apt")
    for name, versions in part["packages"].items():  # a cut line loses its status, so it cannot parse
        assert name in whole["packages"] and set(versions) <= set(whole["packages"][name])
    assert set(part["held"]) <= set(whole["held"])


# ---------------------------------------------------------------------------
# kiln_pkg_plan with the snapshot

PINS = ["libnccl2=2.28.7-1+cuda13.0", "datacenter-gpu-manager-4-cuda13=1:4.6.0-1", "nvidia-open-580=580.95.05-1"]


def test_plan_from_the_snapshot_nothing_to_do() -> None:
    db = kiln_pkgdb_parse(APT_READ.replace("libnccl2\t2.28.7-1+cuda13.0\tii \tinstall",
                                           "libnccl2\t2.28.7-1+cuda13.0\thi \thold"), "apt")
    plan = kiln_pkg_plan(PINS, db["packages"], "apt", db["held"])
    assert plan["changes"] == [] and plan["unhold"] == [] and plan["hold"] == []


def test_plan_holds_only_what_is_not_held() -> None:
    db = kiln_pkgdb_parse(APT_READ, "apt")
    plan = kiln_pkg_plan(PINS, db["packages"], "apt", db["held"])
    assert plan["changes"] == [] and plan["unhold"] == [] and plan["hold"] == ["libnccl2"]


def test_plan_unholds_what_changes_and_holds_it_again() -> None:
    db = kiln_pkgdb_parse(APT_READ, "apt")
    plan = kiln_pkg_plan(["nvidia-open-580=580.173.02-1", "libnccl2=2.28.7-1+cuda13.0", "future=1.0-1",
                          "cuda-toolkit-13-0=13.0.2-1"], db["packages"], "apt", db["held"])
    assert plan["upgrades"] == ["nvidia-open-580"]
    assert plan["installs"] == ["future", "cuda-toolkit-13-0"]
    assert plan["unhold"] == ["nvidia-open-580", "future"]  # a held name blocks its install too
    assert plan["hold"] == ["nvidia-open-580", "libnccl2", "future", "cuda-toolkit-13-0"]


def test_plan_without_hold_state_keeps_the_old_behaviour() -> None:
    db = kiln_pkgdb_parse(APT_READ, "apt")
    plan = kiln_pkg_plan(["nvidia-open-580=580.173.02-1", "cuda-toolkit-13-0=13.0.2-1"], db["packages"], "apt")
    assert plan["unhold"] == ["nvidia-open-580"]
    assert plan["hold"] == ["nvidia-open-580", "cuda-toolkit-13-0"]


def test_plan_from_the_dnf_snapshot() -> None:
    db = kiln_pkgdb_parse(DNF_READ, "dnf")
    plan = kiln_pkg_plan(["libnccl-2.28.7-1+cuda13.0", "datacenter-gpu-manager-3.3.9-1"], db["packages"], "dnf",
                         db["held"])
    # dnf installs name-version-release whatever the epoch (1 here); apt would need the epoch
    assert plan["changes"] == [] and plan["hold"] == ["datacenter-gpu-manager"]
    apt = kiln_pkg_plan(["datacenter-gpu-manager-4-cuda13=4.6.0-1"], kiln_pkgdb_parse(APT_READ, "apt")["packages"], "apt")
    assert apt["upgrades"] == ["datacenter-gpu-manager-4-cuda13"]


@pytest.mark.parametrize(("packages", "held"), [
    ({"libnccl2": 7}, []),
    ({"libnccl2": [None]}, []),
    (["libnccl2"], []),
    ({}, "libnccl2"),
])
def test_plan_refuses_malformed_inputs(packages: Any, held: Any) -> None:
    with pytest.raises(AnsibleFilterError, match="kiln_pkg_plan"):
        kiln_pkg_plan(["libnccl2=2.28.7-1+cuda13.0"], packages, "apt", held)


@settings(max_examples=200, deadline=None)
@given(_db(_APT_VERSION), st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True),
       st.lists(st.sampled_from(["1.0-1", "2.0-1"]), min_size=4, max_size=4))
def test_plan_hold_state_invariants(db: dict[str, Any], names: list[str], versions: list[str]) -> None:
    db["packages"].update({"a": ["1.0-1"], "b": ["2.0-1"]})
    db["held"] = sorted(set(db["held"]) | {"a", "c"})
    specs = [f"{n}={v}" for n, v in zip(names, versions)]
    plan = kiln_pkg_plan(specs, db["packages"], "apt", db["held"])
    changing = {c["name"] for c in plan["changes"]}
    assert set(plan["unhold"]) == changing & set(db["held"])
    assert set(plan["hold"]) == set(names) - (set(db["held"]) - changing)
    after = (set(db["held"]) - set(plan["unhold"])) | set(plan["hold"])
    assert set(names) <= after  # every pinned package ends up held


# ---------------------------------------------------------------------------
# the reads of the module match the parser

KILN_PACKAGES = REPO / "library" / "kiln_packages.py"


def _module_constant(name: str) -> Any:
    tree = ast.parse(KILN_PACKAGES.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not in {KILN_PACKAGES}")


def test_module_reads_match_the_parser() -> None:
    # dpkg-query and rpm expand the backslash escapes themselves: the formats print what the parser reads
    assert _module_constant("DPKG_QUERY_ARGV") == [
        "dpkg-query", "-W", "-f", r"${Package}\t${Version}\t${db:Status-Abbrev}\t${Status}\n"]
    assert _module_constant("RPM_QUERY_ARGV") == ["rpm", "-qa", "--qf", r"%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n"]
    text = KILN_PACKAGES.read_text()
    assert "shell=True" not in text and "use_unsafe_shell" not in text  # argv lists only


# ---------------------------------------------------------------------------
# the entry points under ansible-playbook, with a fake dpkg / apt

FAKE_DPKG_QUERY = """\
import os, sys
state = os.environ["KILN_FAKE_STATE"]
with open(os.path.join(state, "calls.log"), "a") as log:
    log.write("dpkg-query " + " ".join(sys.argv[1:]) + "\\n")
if sys.argv[1] == "-S":  # who owns these files: the "pkg: path" lines of owners.txt, rc 1 when one is no package's
    known = open(os.path.join(state, "owners.txt")).read().splitlines() if os.path.exists(os.path.join(state, "owners.txt")) else []
    found = [line for line in known if line.split(": ", 1)[-1] in sys.argv[2:]]
    sys.stdout.write("".join(line + "\\n" for line in found))
    sys.exit(0 if len(found) == len(sys.argv[2:]) else 1)
if "Depends" in sys.argv[-1]:  # the relations read (the kernel hold): relations.txt
    path = os.path.join(state, "relations.txt")
    sys.stdout.write(open(path).read() if os.path.exists(path) else "")
    sys.exit(0)
sys.stdout.write(open(os.path.join(state, "dpkg.txt")).read())
"""

FAKE_APT_MARK = """\
import os, sys
state = os.environ["KILN_FAKE_STATE"]
args = sys.argv[1:]
with open(os.path.join(state, "calls.log"), "a") as log:
    log.write("apt-mark " + " ".join(args) + "\\n")
action, *names = args
path = os.path.join(state, "dpkg.txt")
lines = open(path).read().splitlines()
for i, line in enumerate(lines):
    name, version, abbrev, status = line.split("\\t")
    if name not in names:
        continue
    want, rest = status.split(" ", 1)
    if action == "hold" and want == "hold":
        print(f"{name} was already set on hold.")
    elif action == "hold":
        print(f"{name} set on hold.")
        lines[i] = "\\t".join([name, version, "h" + abbrev[1:], "hold " + rest])
    elif want != "hold":
        print(f"{name} was already not on hold.")
    else:
        print(f"Canceled hold on {name}.")
        lines[i] = "\\t".join([name, version, "i" + abbrev[1:], "install " + rest])
open(path, "w").write("\\n".join(lines) + "\\n")
"""

# apt-get: "update" succeeds; "install name=version ..." rewrites dpkg.txt, refusing held packages
# (as dpkg does without --allow-change-held-packages) and versions listed in refuse.txt.
FAKE_APT_GET = """\
import os, sys
state = os.environ["KILN_FAKE_STATE"]
args = sys.argv[1:]
with open(os.path.join(state, "calls.log"), "a") as log:
    log.write("apt-get " + " ".join(a for a in args if not a.startswith(("-", "Dpkg::", "DPkg::"))) + "\\n")
policy = os.environ.get("KILN_FAKE_POLICY")
if policy:
    with open(os.path.join(state, "calls.log"), "a") as log:
        log.write("policy-rc.d " + (open(policy).read().strip().splitlines()[-1] if os.path.exists(policy) else "absent") + "\\n")
if "update" in args:
    sys.exit(0)
specs = args[args.index("install") + 1:]
refuse = open(os.path.join(state, "refuse.txt")).read().split() if os.path.exists(os.path.join(state, "refuse.txt")) else []
path = os.path.join(state, "dpkg.txt")
lines = [l for l in open(path).read().splitlines() if l]
removes = [spec[:-1] for spec in specs if spec.endswith("-") and "=" not in spec]
specs = [spec for spec in specs if not (spec.endswith("-") and "=" not in spec)]
for spec in specs:
    if spec in refuse:
        sys.stderr.write(f"E: Version '{spec.split('=')[1]}' for '{spec.split('=')[0]}' was not found\\n")
        sys.exit(100)
for spec in specs:
    name, _, version = spec.partition("=")
    for i, line in enumerate(lines):
        if line.split("\\t")[0] == name:
            if line.split("\\t")[3].startswith("hold"):
                sys.stderr.write(f"E: Held packages were changed and -y was used without --allow-change-held-packages.\\n")
                sys.exit(100)
            lines[i] = "\\t".join([name, version or "9.9-1", "ii ", "install ok installed"])
            break
    else:
        lines.append("\\t".join([name, version or "9.9-1", "ii ", "install ok installed"]))
for name in removes:
    for i, line in enumerate(lines):
        if line.split("\\t")[0] == name and line.split("\\t")[3].startswith("hold"):
            sys.stderr.write("E: Held packages were changed and -y was used without --allow-change-held-packages.\\n")
            sys.exit(100)
    lines = [line for line in lines if line.split("\\t")[0] != name]
open(path, "w").write("\\n".join(lines) + "\\n")
"""

# apt-cache show --no-all-versions NAME: a record for the names in available.txt, else apt's "no packages" error.
FAKE_APT_CACHE = """\
import os, sys
state = os.environ["KILN_FAKE_STATE"]
name = sys.argv[-1]
with open(os.path.join(state, "calls.log"), "a") as log:
    log.write("apt-cache show " + name + "\\n")
path = os.path.join(state, "available.txt")
if os.path.exists(path) and name in open(path).read().split():
    print(f"Package: {name}\\nVersion: 1.0-1\\n")
    sys.exit(0)
sys.stderr.write("E: No packages found\\n")
sys.exit(100)
"""

DPKG = (
    "libnccl2\t2.28.7-1+cuda13.0\tii \tinstall ok installed\n"
    "libnccl-dev\t2.28.7-1+cuda13.0\thi \thold ok installed\n"
    "chrony\t4.3-2\thi \thold ok installed\n"
    "less\t590-2\tii \tinstall ok installed\n"
)

READ = r"dpkg-query -W -f ${Package}\t${Version}\t${db:Status-Abbrev}\t${Status}\n"
NCCL = '["libnccl2=2.28.7-1+cuda13.0", "libnccl-dev=2.28.7-1+cuda13.0"]'
NCCL_NEW = '["libnccl2=2.29.2-1+cuda13.0", "libnccl-dev=2.29.2-1+cuda13.0"]'
CALLS = [
    ("pinned 1", "pinned_install", f"{{packages_pinned: {NCCL}, packages_owner: cuda}}"),
    ("pinned 2", "pinned_install", f"{{packages_pinned: {NCCL}, packages_owner: cuda}}"),
    ("hold", "hold", "{packages_hold: [chrony], packages_owner: common}"),
    ("packages", "present", "{packages_present: [chrony, less]}"),
    ("unhold", "hold", "{packages_hold: [chrony], packages_owner: common, packages_hold_action: unhold}"),
]
CALLS_PLAY2 = [
    ("pinned 3", "pinned_install", f"{{packages_pinned: {NCCL}, packages_owner: cuda}}"),
    ("upgrade", "pinned_install", f"{{packages_pinned: {NCCL_NEW}, packages_owner: cuda}}"),
    ("packages new", "present", "{packages_present: [less, iperf3]}"),
]


def _play(name: str, calls: list[tuple[str, str, str]], policy: Path) -> str:
    tasks = []
    for label, entry, params in calls:
        tasks.append(f"    - name: MARK {label}\n      ansible.builtin.debug: {{msg: mark}}\n"
                     f"    - name: CALL {label}\n      ansible.builtin.include_role: {{name: packages, tasks_from: {entry}}}\n"
                     f"      vars: {params}\n")
    tasks.append("    - name: MARK end\n      ansible.builtin.debug: {msg: mark}\n")
    return (f"- name: {name}\n  hosts: localhost\n  gather_facts: false\n"
            "  vars:\n    ansible_facts: {pkg_mgr: apt}\n"
            "    packages_apt_cache_valid_time: 3600\n"
            "  module_defaults:\n"
            f"    kiln_packages: {{policy_rc_d_path: {policy}, apt_stamp: {policy.parent / 'stamp'}}}\n"
            "  environment:\n    PATH: \"{{ fake_bin }}:/usr/bin:/bin\"\n    KILN_FAKE_STATE: \"{{ fake_state }}\"\n"
            f"    KILN_FAKE_POLICY: {policy}\n"
            "  tasks:\n" + "".join(tasks))


def _segments(out: str) -> dict[str, list[str]]:
    """Task results of role packages between MARK tasks: label -> ['<status> <task name>', ...]."""
    segments: dict[str, list[str]] = {}
    current = None
    task = None
    for line in out.splitlines():
        header = re.match(r"^TASK \[(.*)\] \*+", line)
        if header:
            task = header[1]
            mark = re.match(r"^MARK (.*)$", task)
            if mark:
                current = mark[1]
                segments[current] = []
                task = None
            continue
        result = re.match(r"^(ok|changed|skipping|included|fatal):", line)
        if result and task and current and task.startswith("packages : ") and "Validating arguments" not in task:
            segments[current].append(f"{result[1]} {task[len('packages : '):]}")
    return segments


@pytest.fixture
def fake_host(tmp_path: Path) -> dict[str, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, code in (("dpkg-query", FAKE_DPKG_QUERY), ("apt-mark", FAKE_APT_MARK), ("apt-get", FAKE_APT_GET),
                       ("apt-cache", FAKE_APT_CACHE)):
        script = bin_dir / name
        script.write_text(f"#!{sys.executable}\n{code}")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "dpkg.txt").write_text(DPKG)
    (tmp_path / "conf").mkdir()
    (tmp_path / "sbin").mkdir()
    (tmp_path / "sbin" / "stamp").write_text("")
    return {"bin": bin_dir, "state": tmp_path, "conf": tmp_path / "conf", "policy": tmp_path / "sbin" / "policy-rc.d"}


def _run(tmp_path: Path, fake_host: dict[str, Path], *extra: str,
         plays: tuple[list[tuple[str, str, str]], ...] = (CALLS, CALLS_PLAY2)) -> tuple[str, dict[str, list[str]], list[str], int]:
    book = tmp_path / "pkgdb-play.yml"
    book.write_text("---\n" + "".join(_play(f"pkgdb test | play {n}", calls, fake_host["policy"])
                                      for n, calls in enumerate(plays, 1)))
    res = run_playbook(str(book), "-i", "localhost,", "-c", "local", *extra,
                       "-e", f"ansible_python_interpreter={sys.executable}",
                       "-e", f"fake_bin={fake_host['bin']}", "-e", f"fake_state={fake_host['state']}",
                       "-e", f"__packages_unattended_conf_dir={fake_host['conf']}",
                       "-e", f"packages_pins_dir={fake_host['state'] / 'pins'}", tmp_path=tmp_path)
    out = res.stdout + res.stderr
    calls_log = fake_host["state"] / "calls.log"
    calls = calls_log.read_text().splitlines() if calls_log.exists() else []
    return out, _segments(out), calls, res.returncode


needs_playbook = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None or os.geteuid() != 0,
                                    reason="needs ansible-playbook and root (the module writes root-owned files)")

NOOP_PINNED = ["ok pinned_install | Install the exact versions and hold them: cuda",
               "skipping pinned_install | Report version changes: cuda"]


@needs_playbook
def test_entry_points_are_one_task_and_change_only_what_differs(tmp_path: Path,
                                                                 fake_host: dict[str, Path]) -> None:
    out, seg, calls, rc = _run(tmp_path, fake_host)
    assert rc == 0, out
    assert calls == [
        READ, "apt-mark hold libnccl2", READ,              # pinned 1: hold the one not held, verify
        READ,                                              # pinned 2: a no-op reads once, runs nothing
        READ,                                              # hold: chrony already held
        READ,                                              # packages: both installed
        READ, "apt-mark unhold chrony",                    # unhold
        READ,                                              # play 2, pinned 3: no-op
        READ, "apt-mark unhold libnccl2 libnccl-dev",      # upgrade: release, install, hold, verify
        "apt-get install libnccl2=2.29.2-1+cuda13.0 libnccl-dev=2.29.2-1+cuda13.0", "policy-rc.d exit 101",
        READ, "apt-mark hold libnccl2 libnccl-dev", READ,
        READ, "apt-get install iperf3", "policy-rc.d exit 101",  # packages new: only the missing name
    ], out
    assert seg["pinned 1"] == ["changed pinned_install | Install the exact versions and hold them: cuda",
                               "skipping pinned_install | Report version changes: cuda"]
    # a no-op call: the module says so and runs no package command; the report is skipped
    assert seg["pinned 2"] == NOOP_PINNED and seg["pinned 3"] == NOOP_PINNED
    assert seg["hold"] == ["changed hold | Set the hold state: common"]  # first write of the exclusion file
    assert seg["packages"] == ["ok present | Install the packages that are missing"]
    assert seg["unhold"] == ["changed hold | Set the hold state: common"]
    assert "- 'cuda: changing'\n    - libnccl2 2.28.7-1+cuda13.0 -> 2.29.2-1+cuda13.0\n    - libnccl-dev 2.28.7-1+cuda13.0 -> 2.29.2-1+cuda13.0" in out
    db = kiln_pkgdb_parse((fake_host["state"] / "dpkg.txt").read_text(), "apt")
    assert db["held"] == ["libnccl-dev", "libnccl2"] and db["packages"]["libnccl2"] == ["2.29.2-1+cuda13.0"]
    assert "iperf3" in db["packages"] and "iperf3" not in db["held"]
    conf = (fake_host["conf"] / "51kiln-hold-cuda").read_text()
    assert '"^libnccl2$";' in conf and '"^libnccl\\-dev$";' in conf
    assert '"^chrony$";' in (fake_host["conf"] / "51kiln-hold-common").read_text()
    assert not fake_host["policy"].exists()  # the temporary policy-rc.d is gone after each install
    # every pinned install records its owner's pins (what the as-built record compares with): the last ones
    assert json.loads((fake_host["state"] / "pins" / "cuda.json").read_text()) == {
        "owner": "cuda", "packages": ["libnccl-dev=2.29.2-1+cuda13.0", "libnccl2=2.29.2-1+cuda13.0"]}


@needs_playbook
def test_check_mode_reports_the_changes_and_changes_nothing(tmp_path: Path, fake_host: dict[str, Path]) -> None:
    out, seg, calls, rc = _run(tmp_path, fake_host, "--check")
    assert rc == 0, out
    assert (fake_host["state"] / "dpkg.txt").read_text() == DPKG
    assert [c for c in calls if c != READ] == [], out  # nothing but reads
    assert seg["pinned 1"] == ["changed pinned_install | Install the exact versions and hold them: cuda",
                               "skipping pinned_install | Report version changes: cuda"]  # a hold, no version change
    assert seg["upgrade"] == ["changed pinned_install | Install the exact versions and hold them: cuda",
                              "ok pinned_install | Report version changes: cuda"]
    assert seg["unhold"] == ["changed hold | Set the hold state: common"]
    assert not list(fake_host["conf"].iterdir())


@needs_playbook
def test_a_failed_install_puts_the_holds_back_and_a_rerun_converges(tmp_path: Path,
                                                                     fake_host: dict[str, Path]) -> None:
    (fake_host["state"] / "refuse.txt").write_text("libnccl2=2.29.2-1+cuda13.0\n")
    plays = ([("upgrade", "pinned_install", f"{{packages_pinned: {NCCL_NEW}, packages_owner: cuda}}")],)
    (fake_host["state"] / "dpkg.txt").write_text(DPKG.replace("libnccl2\t2.28.7-1+cuda13.0\tii \tinstall",
                                                              "libnccl2\t2.28.7-1+cuda13.0\thi \thold"))
    out, seg, calls, rc = _run(tmp_path, fake_host, plays=plays)
    assert rc != 0
    assert "Version '2.29.2-1+cuda13.0' for 'libnccl2' was not found" in out
    # the lists were fresh (stamp): one refresh and a second try before giving up
    assert calls.count("apt-get update") == 1 and len([c for c in calls if c.startswith("apt-get install")]) == 2
    assert calls[-1] == "apt-mark hold libnccl2 libnccl-dev", calls  # the released holds are back
    db = kiln_pkgdb_parse((fake_host["state"] / "dpkg.txt").read_text(), "apt")
    assert db["held"] == ["chrony", "libnccl-dev", "libnccl2"] and db["packages"]["libnccl2"] == ["2.28.7-1+cuda13.0"]
    assert not fake_host["policy"].exists()
    (fake_host["state"] / "refuse.txt").unlink()
    out, seg, calls, rc = _run(tmp_path, fake_host, plays=plays)
    assert rc == 0, out
    db = kiln_pkgdb_parse((fake_host["state"] / "dpkg.txt").read_text(), "apt")
    assert db["packages"]["libnccl2"] == ["2.29.2-1+cuda13.0"] and "libnccl2" in db["held"]


@needs_playbook
def test_a_policy_rc_d_left_by_an_interrupted_run_is_cleared(tmp_path: Path, fake_host: dict[str, Path]) -> None:
    fake_host["policy"].write_text("#!/bin/sh\n# kiln: temporary policy-rc.d (kiln_packages)\nexit 101\n")
    out, seg, calls, rc = _run(tmp_path, fake_host, plays=([CALLS[1]],))
    assert rc == 0, out
    assert not fake_host["policy"].exists()
    site = "#!/bin/sh\nexit 0\n"
    fake_host["policy"].write_text(site)
    plays = ([("packages new", "present", "{packages_present: [iperf3]}")],)
    out, seg, calls, rc = _run(tmp_path, fake_host, plays=plays)
    assert rc == 0, out
    assert "policy-rc.d exit 101" in calls and fake_host["policy"].read_text() == site  # the site's own is back


# ---------------------------------------------------------------------------
# pinned_play: the pins of a play's roles in one read, one transaction, one verify

def _core() -> Any:
    from kiln.packages import pkgdb as kiln_pkgdb  # noqa: PLC0415 - module_utils/kiln/packages/pkgdb.py
    return kiln_pkgdb


CUDA_GROUP = {"owner": "cuda", "packages": ["libnccl2=2.28.7-1+cuda13.0", "libnccl-dev=2.28.7-1+cuda13.0"]}
DRIVER_GROUP = {"owner": "nvidia-driver", "packages": ["nvidia-open-580=580.95.05-1"], "absent": ["nvidia-fabricmanager-580"]}


def test_merge_groups_joins_owners_and_keeps_each_pin_once() -> None:
    shared = {"owner": "dcgm", "packages": ["libnccl2=2.28.7-1+cuda13.0", "datacenter-gpu-manager-4-cuda13=1:4.6.0-1"]}
    merged = _core().merge_groups([CUDA_GROUP, DRIVER_GROUP, shared], "apt")
    assert merged["specs"] == ["libnccl2=2.28.7-1+cuda13.0", "libnccl-dev=2.28.7-1+cuda13.0", "nvidia-open-580=580.95.05-1",
                               "datacenter-gpu-manager-4-cuda13=1:4.6.0-1"]
    assert merged["absent"] == ["nvidia-fabricmanager-580"] and merged["deferred"] == []
    assert merged["owners"]["dcgm"]["names"] == ["libnccl2", "datacenter-gpu-manager-4-cuda13"]


@pytest.mark.parametrize(("groups", "match"), [
    ([CUDA_GROUP, {"owner": "dcgm", "packages": ["libnccl2=2.29.2-1+cuda13.0"]}],
     r"libnccl2 is pinned twice: libnccl2=2.28.7-1\+cuda13.0 by cuda, libnccl2=2.29.2-1\+cuda13.0 by dcgm"),
    ([CUDA_GROUP, CUDA_GROUP], "owner cuda appears twice"),
    ([CUDA_GROUP, {"owner": "x", "packages": [], "absent": ["libnccl2"]}], "pinned and removed at once: libnccl2 \\(cuda\\)"),
    ([{"owner": "cuda", "pakages": ["libnccl2=1-1"]}], r"package group 0 \(cuda\): unknown key\(s\) pakages"),
    ([{"owner": "CUDA", "packages": []}], "owner 'CUDA' must be lower-case"),
    ([{"owner": "cuda", "packages": "libnccl2=1-1"}], "package group cuda: packages must be a list of strings"),
    ([{"owner": "cuda", "packages": [12.4]}], "package group cuda: packages must be a list of strings"),
    ([{"owner": "cuda", "packages": [], "defer": "yes"}], "defer must be a boolean"),
    ([{"owner": "cuda", "packages": [], "absent": ["nvidia-*"]}], "packages to remove must be bare names: nvidia-\\*"),
    ([CUDA_GROUP, {"owner": "nvidia-driver", "packages": ["nvidia-open-580=580.95.05-1"],
                   "problems": ["driver 535 does not support H100. Fix: set kiln_stack.driver"]}],
     "refused: nvidia-driver: driver 535 does not support H100. Fix: set kiln_stack.driver"),
    ("cuda", "package groups must be a list"),
    ([["cuda"]], "package group 0 must be a mapping"),
])
def test_merge_groups_refuses_what_it_cannot_install_as_one(groups: Any, match: str) -> None:
    with pytest.raises(_core().PkgError, match=match):
        _core().merge_groups(groups, "apt")


def test_merge_groups_leaves_deferred_owners_to_their_roles() -> None:
    merged = _core().merge_groups([CUDA_GROUP, {"owner": "slurm-compute", "packages": ["slurmd=22.05.8-4+deb12u3"], "defer": True}], "apt")
    assert merged["deferred"] == ["slurm-compute"] and "slurm-compute" not in merged["owners"]
    assert merged["specs"] == CUDA_GROUP["packages"]


_NAMES = st.sampled_from(["libnccl2", "libnccl-dev", "nvidia-open-580", "munge", "slurmd", "chrony"])
_VERSIONS = st.sampled_from(["1.0-1", "2.28.7-1+cuda13.0", "1:4.6.0-1"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["cuda", "dcgm", "munge", "node-exporter"]),
                          st.lists(st.tuples(_NAMES, _VERSIONS), max_size=4),
                          st.lists(_NAMES, max_size=2), st.booleans()), max_size=4))
def test_merge_groups_either_joins_consistently_or_refuses_clearly(raw: list[Any]) -> None:
    groups = [{"owner": o, "packages": [f"{n}={v}" for n, v in pkgs], "absent": gone, "defer": defer}
              for o, pkgs, gone, defer in raw]
    try:
        merged = _core().merge_groups(groups, "apt")
    except _core().PkgError as exc:
        assert str(exc)  # a message, never another exception type
        return
    names = [spec.split("=")[0] for spec in merged["specs"]]
    assert len(names) == len(set(names))  # each name pinned once
    for group in groups:
        if group["defer"]:
            assert group["owner"] in merged["deferred"] and group["owner"] not in merged["owners"]
            continue
        mine = merged["owners"][group["owner"]]
        assert mine["names"] == [spec.split("=")[0] for spec in group["packages"]]
        assert set(group["packages"]) <= set(merged["specs"])  # every owner's pins, exactly
        assert not set(mine["absent"]) & set(names)


def test_pinned_covered_only_for_exactly_the_same_pins() -> None:
    covered = _core().pinned_covered
    play = {"changed": False, "owners": {"cuda": {**CUDA_GROUP, "absent": [], "names": ["libnccl2", "libnccl-dev"], "changes": []}}}
    assert covered(play, CUDA_GROUP)["names"] == ["libnccl2", "libnccl-dev"]
    assert covered(play, {**CUDA_GROUP, "packages": CUDA_GROUP["packages"][:1]}) is None  # other pins: the role installs
    assert covered(play, {**CUDA_GROUP, "absent": ["x"]}) is None
    assert covered(play, DRIVER_GROUP) is None  # owner not in the batch
    assert covered({**play, "skipped": True}, CUDA_GROUP) is None
    assert covered({**play, "failed": True}, CUDA_GROUP) is None
    assert covered({}, CUDA_GROUP) is None and covered(None, CUDA_GROUP) is None and covered("x", CUDA_GROUP) is None


NCCL_GROUP = '{owner: cuda, packages: ["libnccl2=2.28.7-1+cuda13.0", "libnccl-dev=2.28.7-1+cuda13.0"]}'
LESS_GONE = '{owner: tools, packages: ["chrony=4.3-2"], absent: [less]}'


def _play_groups(name: str, groups: list[str], policy: Path, check: str = "") -> str:
    return (f"- name: {name}\n  hosts: localhost\n  gather_facts: false\n"
            "  vars:\n    ansible_facts: {pkg_mgr: apt}\n"
            "  module_defaults:\n"
            f"    kiln_packages: {{policy_rc_d_path: {policy}, apt_stamp: {policy.parent / 'stamp'}}}\n"
            "  environment:\n    PATH: \"{{ fake_bin }}:/usr/bin:/bin\"\n    KILN_FAKE_STATE: \"{{ fake_state }}\"\n"
            f"    KILN_FAKE_POLICY: {policy}\n"
            "  tasks:\n"
            "    - name: MARK batch\n      ansible.builtin.debug: {msg: mark}\n"
            "    - name: CALL batch\n      ansible.builtin.include_role: {name: packages, tasks_from: pinned_play}\n"
            f"      vars: {{packages_groups: [{', '.join(groups)}]}}\n"
            "    - name: MARK after\n      ansible.builtin.debug: {msg: mark}\n"
            f"    - name: Check what the batch covered\n      ansible.builtin.assert:\n        that: {json.dumps(check or 'true')}\n")


def _run_groups(tmp_path: Path, fake_host: dict[str, Path], *plays: str, extra: tuple[str, ...] = ()) -> tuple[str, list[str], int]:
    book = tmp_path / "pinned-play.yml"
    book.write_text("---\n" + "".join(plays))
    res = run_playbook(str(book), "-i", "localhost,", "-c", "local", *extra,
                       "-e", f"ansible_python_interpreter={sys.executable}",
                       "-e", f"fake_bin={fake_host['bin']}", "-e", f"fake_state={fake_host['state']}",
                       "-e", f"__packages_unattended_conf_dir={fake_host['conf']}",
                       "-e", f"packages_pins_dir={fake_host['state'] / 'pins'}", tmp_path=tmp_path)
    calls_log = fake_host["state"] / "calls.log"
    return res.stdout + res.stderr, calls_log.read_text().splitlines() if calls_log.exists() else [], res.returncode


@needs_playbook
def test_pinned_play_installs_every_owner_in_one_read_and_one_transaction(tmp_path: Path, fake_host: dict[str, Path]) -> None:
    policy = fake_host["policy"]
    new_nccl = NCCL_GROUP.replace("2.28.7", "2.29.2")
    covered = "packages_play_result | kiln_pinned_covered({'owner': 'cuda', 'packages': ['libnccl2=2.29.2-1+cuda13.0', " \
              "'libnccl-dev=2.29.2-1+cuda13.0']}) is not none"
    out, calls, rc = _run_groups(tmp_path, fake_host, _play_groups("upgrade + remove", [new_nccl, LESS_GONE], policy, covered),
                                 _play_groups("no-op", [new_nccl, LESS_GONE], policy, covered))
    assert rc == 0, out
    assert calls == [
        READ, "apt-mark unhold libnccl-dev",                  # one read for both owners; release what changes
        "apt-get install libnccl2=2.29.2-1+cuda13.0 libnccl-dev=2.29.2-1+cuda13.0 less-", "policy-rc.d exit 101",
        READ, "apt-mark hold libnccl2 libnccl-dev", READ,     # one transaction (install + removal), hold, verify
        READ,                                                 # play 2: a no-op reads once and runs nothing
    ], out
    assert "- 'cuda: changing'\n    - libnccl2 2.28.7-1+cuda13.0 -> 2.29.2-1+cuda13.0" in out
    assert "- 'tools: changing'\n    - less removed" in out
    db = kiln_pkgdb_parse((fake_host["state"] / "dpkg.txt").read_text(), "apt")
    assert "less" not in db["packages"] and db["held"] == ["chrony", "libnccl-dev", "libnccl2"]
    assert '"^libnccl2$";' in (fake_host["conf"] / "51kiln-hold-cuda").read_text()
    assert '"^chrony$";' in (fake_host["conf"] / "51kiln-hold-tools").read_text()  # a hold file per owner


@needs_playbook
def test_pinned_play_refuses_before_reading_or_changing_anything(tmp_path: Path, fake_host: dict[str, Path]) -> None:
    refusing = '{owner: nvidia-driver, packages: ["nvidia-open-580=580.95.05-1"], problems: ["GPU 0x2330 needs driver >= 525. Fix: raise kiln_stack.driver"]}'
    out, calls, rc = _run_groups(tmp_path, fake_host, _play_groups("refused", [NCCL_GROUP, refusing], fake_host["policy"]))
    assert rc != 0
    assert "nothing installed: refused: nvidia-driver: GPU 0x2330 needs driver >= 525. Fix: raise kiln_stack.driver" in out
    assert calls == [] and (fake_host["state"] / "dpkg.txt").read_text() == DPKG
    assert "Traceback" not in out


@needs_playbook
def test_pinned_play_in_check_mode_reports_and_changes_nothing(tmp_path: Path, fake_host: dict[str, Path]) -> None:
    out, calls, rc = _run_groups(tmp_path, fake_host, _play_groups("check", [NCCL_GROUP.replace("2.28.7", "2.29.2"), LESS_GONE],
                                                                    fake_host["policy"]), extra=("--check",))
    assert rc == 0, out
    assert calls == [READ] and (fake_host["state"] / "dpkg.txt").read_text() == DPKG
    assert "libnccl2 2.28.7-1+cuda13.0 -> 2.29.2-1+cuda13.0" in out and "less removed" in out


@needs_playbook
def test_present_installs_optional_names_the_repositories_carry_and_reports_the_rest(tmp_path: Path,
                                                                                    fake_host: dict[str, Path]) -> None:
    (fake_host["state"] / "available.txt").write_text("linux-headers-6.1.0-28-amd64\n")
    book = tmp_path / "optional.yml"
    book.write_text(
        "---\n- name: optional names\n  hosts: localhost\n  gather_facts: false\n"
        "  environment:\n    PATH: \"{{ fake_bin }}:/usr/bin:/bin\"\n    KILN_FAKE_STATE: \"{{ fake_state }}\"\n"
        "  tasks:\n"
        "    - name: Install with optional names\n      kiln_packages:\n        state: present\n        pkg_mgr: apt\n"
        "        packages: [less, iperf3]\n        optional: [linux-headers-6.1.0-28-amd64, linux-headers-9.9.9-nope, chrony]\n"
        f"        policy_rc_d_path: {fake_host['policy']}\n        apt_stamp: {fake_host['policy'].parent / 'stamp'}\n"
        "      register: __res\n"
        "    - name: Show\n      ansible.builtin.debug:\n        msg: \"RESULT {{ __res.installs }} {{ __res.unavailable }}\"\n")
    res = run_playbook(str(book), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                       "-e", f"fake_bin={fake_host['bin']}", "-e", f"fake_state={fake_host['state']}", tmp_path=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "RESULT ['iperf3', 'linux-headers-6.1.0-28-amd64'] ['linux-headers-9.9.9-nope']" in out
    calls = (fake_host["state"] / "calls.log").read_text().splitlines()
    # chrony is installed already (no probe); one install for the missing and the available optional names
    assert calls == [READ, "apt-cache show linux-headers-6.1.0-28-amd64", "apt-cache show linux-headers-9.9.9-nope",
                     "apt-get install iperf3 linux-headers-6.1.0-28-amd64"], out


@needs_playbook
@pytest.mark.parametrize(("args", "why"), [
    ("state: held\n        packages: [chrony]\n        absent: [less]", "absent is for state=pinned only, not state=held"),
    ("state: pinned\n        packages: [chrony]\n        optional: [less]", "optional is for state=present only, not state=pinned"),
    ("state: present\n        groups: [{owner: x, packages: []}]", "groups is for state=pinned only, not state=present"),
])
def test_options_for_another_state_are_refused_not_ignored(tmp_path: Path, fake_host: dict[str, Path],
                                                           args: str, why: str) -> None:
    book = tmp_path / "misuse.yml"
    book.write_text("---\n- name: misuse\n  hosts: localhost\n  gather_facts: false\n"
                    "  environment:\n    PATH: \"{{ fake_bin }}:/usr/bin:/bin\"\n    KILN_FAKE_STATE: \"{{ fake_state }}\"\n"
                    f"  tasks:\n    - name: Misuse\n      kiln_packages:\n        pkg_mgr: apt\n        {args}\n")
    res = run_playbook(str(book), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                       "-e", f"fake_bin={fake_host['bin']}", "-e", f"fake_state={fake_host['state']}", tmp_path=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and why in out and "Traceback" not in out, out
    assert not (fake_host["state"] / "calls.log").exists()  # nothing read, nothing changed


@needs_playbook
def test_hold_installed_only_holds_what_is_installed_and_lists_the_rest(tmp_path: Path, fake_host: dict[str, Path]) -> None:
    book = tmp_path / "kernel-hold.yml"
    book.write_text("---\n- name: kernel hold\n  hosts: localhost\n  gather_facts: false\n"
                    "  environment:\n    PATH: \"{{ fake_bin }}:/usr/bin:/bin\"\n    KILN_FAKE_STATE: \"{{ fake_state }}\"\n"
                    "  tasks:\n    - name: Hold\n      kiln_packages:\n        pkg_mgr: apt\n        state: held\n"
                    "        owner: kernel\n        installed_only: true\n"
                    "        packages: [less, linux-image-9.9.9-nope, chrony]\n"
                    f"        unattended_conf_dir: {fake_host['conf']}\n"
                    "      register: __res\n"
                    "    - name: Show\n      ansible.builtin.debug:\n        msg: \"RESULT {{ __res.names }} {{ __res.not_installed }} {{ __res.hold }}\"\n"
                    "    - name: Hold none\n      kiln_packages:\n        pkg_mgr: apt\n        state: held\n"
                    "        owner: nothing\n        installed_only: true\n        packages: [linux-image-9.9.9-nope]\n"
                    f"        unattended_conf_dir: {fake_host['conf']}\n"
                    "      register: __none\n"
                    "    - name: Show none\n      ansible.builtin.debug:\n        msg: \"NONE {{ __none.names }} {{ __none.changed }}\"\n")
    res = run_playbook(str(book), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                       "-e", f"fake_bin={fake_host['bin']}", "-e", f"fake_state={fake_host['state']}", tmp_path=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "RESULT ['less', 'chrony'] ['linux-image-9.9.9-nope'] ['less']" in out
    assert "NONE [] False" in out and not (fake_host["conf"] / "51kiln-hold-nothing").exists()
    assert '"^less$";' in (fake_host["conf"] / "51kiln-hold-kernel").read_text()
    calls = (fake_host["state"] / "calls.log").read_text().splitlines()
    assert calls == [READ, "apt-mark hold less", READ], out


def _module_play(tmp_path: Path, fake_host: dict[str, Path], tasks: str, play: str = "") -> tuple[str, list[str], int]:
    book = tmp_path / "module.yml"
    book.write_text("---\n- name: module\n  hosts: localhost\n  gather_facts: false\n" + play +
                    "  environment:\n    PATH: \"{{ fake_bin }}:/usr/bin:/bin\"\n    KILN_FAKE_STATE: \"{{ fake_state }}\"\n"
                    "  tasks:\n" + tasks)
    res = run_playbook(str(book), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                       "-e", f"fake_bin={fake_host['bin']}", "-e", f"fake_state={fake_host['state']}", tmp_path=tmp_path)
    calls_log = fake_host["state"] / "calls.log"
    # the result format folds long messages: one space between words
    return " ".join((res.stdout + res.stderr).split()), calls_log.read_text().splitlines() if calls_log.exists() else [], res.returncode


@needs_playbook
def test_kernel_hold_finds_every_flavours_meta_packages_in_the_database(tmp_path: Path,
                                                                         fake_host: dict[str, Path]) -> None:
    """Issue 31 #11a: a Debian rt kernel -- linux-image-rt-amd64 is held, found from the database, not a list
    (kiln_kernel_packages, then the packages role's hold, as roles/nvidia_driver does)."""
    running, releases, relations, owners = dpkg_read("debian12-rt.status")
    state = fake_host["state"]
    (state / "dpkg.txt").write_text(dpkg_database("debian12-rt.status"))
    (state / "relations.txt").write_text(relations)
    (state / "owners.txt").write_text(owners.replace("/boot/", f"{state / 'boot'}/"))
    (state / "boot").mkdir()
    for release in releases:
        (state / "boot" / f"vmlinuz-{release}").write_text("")
    (state / "boot" / "vmlinuz").write_text("")  # the link some distributions keep: not an image of its own
    out, calls, rc = _module_play(tmp_path, fake_host, (
        "    - name: Find the kernel's packages\n      kiln_kernel_packages:\n"
        f"        kernel: {running}\n        pkg_mgr: apt\n        boot_dir: {state / 'boot'}\n      register: __kernel\n"
        "    - name: Hold the kernel\n      ansible.builtin.include_role: {name: packages, tasks_from: hold}\n"
        "      vars: {packages_hold: \"{{ __kernel.names }}\", packages_owner: kernel, packages_hold_installed_only: true,"
        " __packages_unattended_conf_dir: " + str(fake_host["conf"]) + "}\n"
        "    - name: Show\n      ansible.builtin.debug:\n        msg: \"KERNEL {{ __kernel.names | join(',') }}\"\n"),
        play="  vars:\n    ansible_facts: {pkg_mgr: apt}\n")
    assert rc == 0, out
    want = ["linux-headers-6.1.0-18-rt-amd64", "linux-headers-rt-amd64", "linux-image-6.1.0-18-rt-amd64",
            "linux-image-amd64", "linux-image-rt-amd64"]
    assert "KERNEL " + ",".join(want) in out
    images = " ".join(str(state / "boot" / f"vmlinuz-{r}") for r in sorted(releases))
    assert calls == [f"dpkg-query -S {images}", r"dpkg-query -W -f ${Package}\t${db:Status-Abbrev}\t${Pre-Depends}\t${Depends}\n",
                     READ, "apt-mark hold " + " ".join(want)], out
    conf = (fake_host["conf"] / "51kiln-hold-kernel").read_text()
    assert '"^linux\\-image\\-rt\\-amd64$";' in conf and '"^linux\\-image\\-amd64$";' in conf
    db = kiln_pkgdb_parse((state / "dpkg.txt").read_text(), "apt")
    assert set(want) <= set(db["held"]) and "linux-image-6.1.0-17-amd64" not in db["held"]


@needs_playbook
def test_kernel_packages_in_a_container_are_none(tmp_path: Path, fake_host: dict[str, Path]) -> None:
    out, calls, rc = _module_play(tmp_path, fake_host, (
        "    - name: Find the kernel's packages\n      kiln_kernel_packages:\n        kernel: 6.8.0-49-generic\n"
        f"        pkg_mgr: apt\n        boot_dir: {fake_host['state'] / 'no-boot'}\n      register: __kernel\n"
        "    - name: Show\n      ansible.builtin.debug:\n        msg: \"NAMES {{ __kernel.names }} {{ __kernel.changed }}\"\n"))
    assert rc == 0 and "NAMES [] False" in out, out
    assert [c for c in calls if not c.startswith("dpkg-query -W")] == []  # one read, no -S without images


@needs_playbook
def test_read_says_whether_the_pins_directory_exists(tmp_path: Path, fake_host: dict[str, Path]) -> None:
    pins = fake_host["state"] / "pins"
    task = ("    - name: Read\n      kiln_packages:\n        pkg_mgr: apt\n        state: read\n"
            f"        pins_dir: {pins}\n      register: __read\n"
            "    - name: Show\n      ansible.builtin.debug:\n"
            "        msg: \"READ {{ __read.pins_dir }} {{ __read.pins_dir_present }} {{ __read.pins | length }}\"\n")
    out, _, rc = _module_play(tmp_path, fake_host, task)
    assert rc == 0 and f"READ {pins} False 0" in out, out
    pins.mkdir()
    (pins / "cuda.json").write_text(json.dumps({"owner": "cuda", "packages": ["libnccl2=2.28.7-1+cuda13.0"]}))
    out, _, rc = _module_play(tmp_path, fake_host, task)
    assert rc == 0 and f"READ {pins} True 1" in out, out


# ---------------------------------------------------------------------------
# a driver branch change on apt: the old branch's metapackage replaced in the install's transaction,
# and only when kiln's own pins record names it (an operator's hold on it stops the run first)

BRANCH_CHANGE = [("branch", "pinned_install",
                  '{packages_pinned: ["nvidia-open-590=590.48.01-1"], packages_owner: nvidia-driver, '
                  'packages_replaces: ["nvidia-open-[0-9]*", "cuda-drivers-[0-9]*"]}')]


def _branch_host(fake_host: dict[str, Path], recorded: bool) -> None:
    (fake_host["state"] / "dpkg.txt").write_text(
        DPKG + "nvidia-open-580\t580.173.02-1\thi \thold ok installed\n")
    if recorded:
        pins = fake_host["state"] / "pins"
        pins.mkdir()
        (pins / "nvidia-driver.json").write_text(
            json.dumps({"owner": "nvidia-driver", "packages": ["nvidia-open-580=580.173.02-1"]}) + "\n")


@needs_playbook
def test_branch_change_replaces_kilns_own_old_branch(tmp_path: Path, fake_host: dict[str, Path]) -> None:
    _branch_host(fake_host, recorded=True)
    out, _seg, calls, rc = _run(tmp_path, fake_host, plays=(BRANCH_CHANGE,))
    assert rc == 0, out
    assert "apt-mark unhold nvidia-open-580" in calls, calls
    assert "apt-get install nvidia-open-590=590.48.01-1 nvidia-open-580-" in calls, calls
    assert "nvidia-open-580 removed" in out and "nvidia-open-590 (new) -> 590.48.01-1" in out
    dpkg = (fake_host["state"] / "dpkg.txt").read_text()
    assert "nvidia-open-580" not in dpkg and "nvidia-open-590\t590.48.01-1" in dpkg


@needs_playbook
def test_branch_change_leaves_an_operators_hold_alone(tmp_path: Path, fake_host: dict[str, Path]) -> None:
    _branch_host(fake_host, recorded=False)
    out, _seg, calls, rc = _run(tmp_path, fake_host, plays=(BRANCH_CHANGE,))
    assert rc != 0
    assert "nvidia-open-580 must be removed for the new pins" in out and "an operator's hold" in out
    assert not [c for c in calls if c.startswith(("apt-get", "apt-mark"))], calls
    assert "nvidia-open-580\t580.173.02-1\thi" in (fake_host["state"] / "dpkg.txt").read_text()
