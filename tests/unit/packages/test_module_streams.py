"""dnf module streams: the driver's stream from the data (kiln_pkg_modules), dnf's module state
read from /etc/dnf/modules.d (parse_module_state), what must change (module_plan), and how
merge_groups carries and checks them. The real dnf path (enable, switch, modular filtering) runs
on the gpu scenario's EL 9 node."""
from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.packages import pkgdb
from kiln_compat_engine.errors import CompatError
from kiln_compat_engine.packages import kiln_pkg, kiln_pkg_modules, kiln_pkg_replaces

EL_STACK = {"os": "rhel-9", "driver": "580.95.05", "gpu": "26b5"}


@pytest.mark.parametrize(("stack", "expected"), [
    (EL_STACK, ["nvidia-driver:580-open"]),
    ({**EL_STACK, "driver_flavor": "proprietary", "gpu": "20b5"}, ["nvidia-driver:580-dkms"]),
    ({**EL_STACK, "os": "debian-12"}, []),
    ({**EL_STACK, "os": "ubuntu-24.04"}, []),
    ({"os": "rhel-9", "cuda": "13.0.2"}, []),
    ({**EL_STACK, "os": "rhel-8"}, ["nvidia-driver:580-open"]),
    # EL 10 has no modularity: nvidia-open is installed and version-locked without a stream
    ({**EL_STACK, "os": "rhel-10"}, []),
])
def test_driver_stream_follows_branch_and_flavor(stack: dict[str, Any], expected: list[str]) -> None:
    assert kiln_pkg_modules(stack, "driver") == expected


def test_stream_and_packages_agree_on_the_flavor() -> None:
    # the open stream goes with the open metapackage, the dkms stream with cuda-drivers
    assert kiln_pkg(EL_STACK, "driver") == ["nvidia-open-580.95.05-1.el9"]
    prop = {**EL_STACK, "driver_flavor": "proprietary", "gpu": "20b5"}
    assert kiln_pkg(prop, "driver") == ["cuda-drivers-580.95.05-1.el9"]


def test_components_without_a_stream_and_unknown_ones() -> None:
    assert kiln_pkg_modules({**EL_STACK, "cuda": "13.0.2"}, "cuda") == []
    with pytest.raises(CompatError, match="unknown component"):
        kiln_pkg_modules(EL_STACK, "drivr")
    with pytest.raises(CompatError, match="depends on the EL release: set kiln_stack.os"):
        kiln_pkg_modules({"driver": "580.95.05", "gpu": "26b5"}, "driver", "dnf")


STATE = {"/etc/dnf/modules.d/nvidia-driver.module":
         "[nvidia-driver]\nname=nvidia-driver\nstream=580-open\nprofiles=\nstate=enabled\n"}


def test_parse_module_state_reads_dnfs_files() -> None:
    assert pkgdb.parse_module_state(STATE) == {"nvidia-driver": {"stream": "580-open", "state": "enabled"}}
    assert pkgdb.parse_module_state({}) == {}


@pytest.mark.parametrize(("files", "match"), [
    ({"/x.module": "stream=580-open\n"}, r"/x.module line 1: .* not a key=value line of a \[module\] section"),
    ({"/x.module": "[m]\nstreams\n"}, r"/x.module line 2"),
    ({"/x.module": "[m]\nstate=on\n"}, "module m: unknown state 'on'"),
])
def test_parse_module_state_refuses_what_it_cannot_read(files: dict[str, str], match: str) -> None:
    with pytest.raises(pkgdb.PkgError, match=match):
        pkgdb.parse_module_state(files)


@pytest.mark.parametrize(("wanted", "state", "expected"), [
    (["nvidia-driver:580-open"], {"nvidia-driver": {"stream": "580-open", "state": "enabled"}}, []),
    (["nvidia-driver:580-open"], {}, [{"name": "nvidia-driver", "from": None, "to": "580-open"}]),
    # a reset module (state empty) or a disabled one is not enabled at any stream
    (["nvidia-driver:580-open"], {"nvidia-driver": {"stream": "", "state": ""}},
     [{"name": "nvidia-driver", "from": None, "to": "580-open"}]),
    (["nvidia-driver:580-open"], {"nvidia-driver": {"stream": "580-open", "state": "disabled"}},
     [{"name": "nvidia-driver", "from": None, "to": "580-open"}]),
    # the branch change
    (["nvidia-driver:590-open"], {"nvidia-driver": {"stream": "580-open", "state": "enabled"}},
     [{"name": "nvidia-driver", "from": "580-open", "to": "590-open"}]),
])
def test_module_plan(wanted: list[str], state: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    assert pkgdb.module_plan(wanted, state) == expected


def test_module_change_lines() -> None:
    assert pkgdb.format_module_change({"name": "nvidia-driver", "from": "580-open", "to": "590-open"}) == \
        "module nvidia-driver: 580-open -> 590-open"
    assert pkgdb.format_module_change({"name": "nvidia-driver", "from": None, "to": "580-open"}) == \
        "module nvidia-driver: (none) -> 580-open"


@pytest.mark.parametrize("bad", ["nvidia-driver", "nvidia-driver:580-open/fm", ":580", "a:b:c", 580, None, "x; rm -rf /:1"])
def test_stream_names_are_checked(bad: Any) -> None:
    with pytest.raises(pkgdb.PkgError, match="must be <module>:<stream>"):
        pkgdb.module_stream_split(bad)


DRIVER_EL = {"owner": "nvidia-driver", "packages": ["nvidia-open-580.95.05-1.el9"], "modules": ["nvidia-driver:580-open"]}


def test_merge_groups_carries_streams() -> None:
    merged = pkgdb.merge_groups([DRIVER_EL, {"owner": "cuda", "packages": ["cuda-toolkit-13-0-13.0.2-1"]}], "dnf")
    assert merged["modules"] == ["nvidia-driver:580-open"]
    assert merged["owners"]["nvidia-driver"]["modules"] == ["nvidia-driver:580-open"]
    assert merged["owners"]["cuda"]["modules"] == []


@pytest.mark.parametrize(("groups", "mgr", "match"), [
    ([DRIVER_EL, {"owner": "other", "packages": [], "modules": ["nvidia-driver:590-open"]}], "dnf",
     "module nvidia-driver is wanted at two streams: nvidia-driver:580-open by nvidia-driver, nvidia-driver:590-open by other"),
    ([{"owner": "nvidia-driver", "packages": [], "modules": ["nvidia-driver:580-open"]}], "apt",
     "module streams .* are dnf's; this host's package manager is apt"),
    ([{"owner": "nvidia-driver", "packages": [], "modules": "nvidia-driver:580-open"}], "dnf",
     "modules must be a list of strings"),
    ([{"owner": "nvidia-driver", "packages": [], "modules": ["580-open"]}], "dnf", "must be <module>:<stream>"),
])
def test_merge_groups_refuses_bad_streams(groups: list[Any], mgr: str, match: str) -> None:
    with pytest.raises(pkgdb.PkgError, match=match):
        pkgdb.merge_groups(groups, mgr)


def test_pinned_covered_needs_the_same_streams() -> None:
    play = {"owners": {"nvidia-driver": {"packages": DRIVER_EL["packages"], "absent": [], "modules": DRIVER_EL["modules"]}}}
    assert pkgdb.pinned_covered(play, DRIVER_EL) is not None
    assert pkgdb.pinned_covered(play, {**DRIVER_EL, "modules": ["nvidia-driver:590-open"]}) is None


_STREAMS = st.sampled_from(["580-open", "580-dkms", "590-open", "open-dkms"])


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["nvidia-driver", "nodejs"]),
                       st.tuples(_STREAMS, st.sampled_from(["enabled", "disabled", ""])), max_size=2),
       st.lists(st.tuples(st.sampled_from(["nvidia-driver", "nodejs"]), _STREAMS), max_size=2, unique_by=lambda t: t[0]))
def test_plan_then_apply_converges(state: dict[str, tuple[str, str]], wanted: list[tuple[str, str]]) -> None:
    files = {f"/etc/dnf/modules.d/{name}.module": f"[{name}]\nname={name}\nstream={stream}\nprofiles=\nstate={status}\n"
             for name, (stream, status) in state.items()}
    parsed = pkgdb.parse_module_state(files)
    streams = [f"{name}:{stream}" for name, stream in wanted]
    plan = pkgdb.module_plan(streams, parsed)
    # applying the plan (what dnf module reset + enable leaves) makes a second plan empty
    for change in plan:
        parsed[change["name"]] = {"stream": change["to"], "state": "enabled"}
    assert pkgdb.module_plan(streams, parsed) == []
    assert {c["name"] for c in plan} <= {name for name, _ in wanted}


# --- branch changes on apt: the names that carry the branch -----------------------------------------

DEB_STACK = {"os": "debian-12", "driver": "590.48.01", "gpu": "2330"}


def test_replaces_globs_from_the_data() -> None:
    assert kiln_pkg_replaces(DEB_STACK, "driver") == ["nvidia-open-[0-9]*", "cuda-drivers-[0-9]*"]
    assert kiln_pkg_replaces({**DEB_STACK, "fabricmanager": "590.48.01"}, "fabricmanager") == \
        ["nvidia-fabricmanager-[0-9]*", "libnvidia-nscq-[0-9]*"]
    assert kiln_pkg_replaces({**EL_STACK}, "driver") == []
    assert kiln_pkg_replaces({"os": "debian-12", "cuda": "13.0.2"}, "driver") == []
    with pytest.raises(CompatError, match="unknown component"):
        kiln_pkg_replaces(DEB_STACK, "nvidia")


def test_replaced_names_are_the_other_branches_installed() -> None:
    installed = ["nvidia-open-580", "nvidia-open-590", "nvidia-kernel-open-dkms", "nvidia-fabricmanager-580",
                 "libnvidia-nscq-580", "cuda-drivers-580", "nvidia-open", "cuda-toolkit-13-0"]
    globs = ["nvidia-open-[0-9]*", "cuda-drivers-[0-9]*", "nvidia-fabricmanager-[0-9]*", "libnvidia-nscq-[0-9]*"]
    pinned = ["nvidia-open-590", "nvidia-fabricmanager-590", "libnvidia-nscq-590"]
    assert pkgdb.replaced_names(globs, installed, pinned) == \
        ["cuda-drivers-580", "libnvidia-nscq-580", "nvidia-fabricmanager-580", "nvidia-open-580"]
    # nothing of another branch installed: nothing to remove
    assert pkgdb.replaced_names(globs, ["nvidia-open-590"], pinned) == []


@pytest.mark.parametrize("glob", ["*", "nvidia-*-580", "nvidia-open-[0-9]", "nvidia open-*", "nvidia-open-[a-z]*", "-*"])
def test_replaces_refuses_wide_or_odd_globs(glob: str) -> None:
    with pytest.raises(pkgdb.PkgError, match="replaces takes a name prefix and one"):
        pkgdb.merge_groups([{"owner": "nvidia-driver", "packages": [], "replaces": [glob]}], "apt")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["nvidia-open-580", "nvidia-open-590", "nvidia-open-570", "cuda-drivers-580",
                                 "nvidia-kernel-open-dkms", "libnccl2", "nvidia-open"]), unique=True),
       st.sampled_from(["580", "590"]))
def test_replaced_names_never_touch_the_pins_or_other_families(installed: list[str], branch: str) -> None:
    pinned = [f"nvidia-open-{branch}"]
    gone = pkgdb.replaced_names(["nvidia-open-[0-9]*", "cuda-drivers-[0-9]*"], installed, pinned)
    assert not set(gone) & set(pinned)
    branchy = re.compile(r"^(nvidia-open|cuda-drivers)-[0-9]+$")
    assert all(branchy.match(name) for name in gone)
    assert set(gone) == {n for n in installed if n not in pinned and branchy.match(n)}


def test_foreign_holds_are_the_held_names_kiln_never_pinned() -> None:
    recorded = {"nvidia-driver": ["nvidia-open-580=580.173.02-1", "nvidia-fabricmanager-580=580.173.02-1"]}
    replaced = ["nvidia-open-580", "nvidia-fabricmanager-580", "cuda-drivers-580", "libnvidia-nscq-580"]
    # kiln's own held 580 packages may go; an operator's hold on cuda-drivers-580 may not; an unheld one is no hold
    assert pkgdb.foreign_holds(replaced, ["nvidia-open-580", "nvidia-fabricmanager-580", "cuda-drivers-580"],
                               recorded, "apt") == ["cuda-drivers-580"]
    # no pins record at all: every held replaced name is someone else's
    assert pkgdb.foreign_holds(replaced, ["nvidia-open-580"], {}, "apt") == ["nvidia-open-580"]
    assert pkgdb.foreign_holds([], ["nvidia-open-580"], {}, "apt") == []
    with pytest.raises(pkgdb.PkgError):
        pkgdb.foreign_holds(["x-1"], ["x-1"], {"o": ["not a pin ="]}, "apt")
