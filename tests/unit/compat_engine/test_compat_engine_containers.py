"""Container runtimes in the compat engine: the plan, the engine's packages, Docker's repository, the rules.

Rules (data/compat.yml container_engine, enroot, pyxis): engine-os, engine-cdi,
containerd-cdi, engine-toolkit, engine-containerd, enroot-kernel, pyxis-enroot,
pyxis-slurm; plus the schema of the new stack keys (hostile input: floats,
strings for booleans, unknown kinds) and a property test over every known
engine release on every OS the data lists.
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_compat_engine.containers import cdi_mode, kiln_container_plan, upstream_version
from kiln_compat_engine.data import compat_data
from kiln_compat_engine.packages import kiln_packages, kiln_pkg
from kiln_compat_engine.plan import kiln_plan, kiln_plan_text
from kiln_compat_engine.repos import kiln_repo
from kiln_compat_engine.rules import kiln_stack_violations

BASE: dict[str, Any] = {"os": "debian-12", "container_toolkit": "1.20.0"}
DOCKER = {"kind": "docker-ce", "version": "27.5.1"}


def rules(stack: dict[str, Any]) -> list[tuple[str, str]]:
    return [(v["rule"], v["severity"]) for v in kiln_stack_violations(stack)]


def errors(stack: dict[str, Any]) -> set[str]:
    return {v["rule"] for v in kiln_stack_violations(stack) if v["severity"] == "error"}


# -- packages -------------------------------------------------------------------------------------------------


def test_docker_ce_packages_on_debian_12() -> None:
    assert kiln_pkg(dict(BASE, container_engine=DOCKER), "container_engine") == [
        "docker-ce=5:27.5.1-1~debian.12~bookworm", "docker-ce-cli=5:27.5.1-1~debian.12~bookworm",
        "containerd.io=1.7.25-1", "docker-buildx-plugin=0.20.0-1~debian.12~bookworm",
        "docker-compose-plugin=2.32.4-1~debian.12~bookworm"]


def test_docker_ce_packages_on_ubuntu_and_rhel() -> None:
    ubuntu = kiln_pkg(dict(BASE, os="ubuntu-24.04", container_engine=DOCKER), "container_engine")
    assert ubuntu[0] == "docker-ce=5:27.5.1-1~ubuntu.24.04~noble"
    rhel = kiln_pkg(dict(BASE, os="rocky-9", container_engine=DOCKER), "container_engine")
    assert rhel[0] == "docker-ce-3:27.5.1-1.el9" and "containerd.io-1.7.25-3.1.el9" in rhel


def test_a_pinned_containerd_replaces_the_release_default() -> None:
    pkgs = kiln_pkg(dict(BASE, container_engine={"kind": "docker-ce", "version": "28.5.2"}, containerd="2.1.5"),
                    "container_engine")
    assert "containerd.io=2.1.5-1" in pkgs


def test_distro_engine_packages_are_the_recorded_builds() -> None:
    assert kiln_pkg(dict(BASE, container_engine={"kind": "distro"}), "container_engine") == [
        "docker.io=20.10.24+dfsg1-1+deb12u1+b6", "containerd=1.6.20~ds1-1+deb12u3", "runc=1.1.5+ds1-1+deb12u1"]
    # the shorthand string form, and a site's own build
    pinned = kiln_pkg(dict(BASE, container_engine="distro", builds={"docker_io": "20.10.24+dfsg1-1+deb12u2"}),
                      "container_engine")
    assert pinned[0] == "docker.io=20.10.24+dfsg1-1+deb12u2"


def test_distro_engine_without_a_recorded_build_is_the_held_candidate() -> None:
    assert kiln_pkg(dict(BASE, os="ubuntu-24.04", container_engine="distro"), "container_engine") == [
        "docker.io", "containerd", "runc"]


def test_no_engine_no_packages_and_kiln_packages_lists_it() -> None:
    assert kiln_pkg(BASE, "container_engine") == []
    assert "container_engine" in kiln_packages(dict(BASE, container_engine=DOCKER))
    assert "container_engine" not in kiln_packages(BASE)


def test_engine_packages_refuse_what_cannot_exist() -> None:
    with pytest.raises(AnsibleFilterError, match="podman"):
        kiln_pkg(dict(BASE, os="rhel-9", container_engine="distro"), "container_engine")
    with pytest.raises(AnsibleFilterError, match="not a Docker Engine release|not a release"):
        kiln_pkg(dict(BASE, container_engine={"kind": "docker-ce", "version": "19.03.1"}), "container_engine")


# -- plan -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "mode"), [("24.0.9", None), ("25.0.5", "features.cdi"), ("28.1.1", "features.cdi"),
                                               ("28.5.2", "default"), ("29.0.0", "default")])
def test_cdi_mode_by_docker_release(version: str, mode: str | None) -> None:
    assert cdi_mode(version) == mode


def test_plan_docker_ce_with_cdi() -> None:
    plan = kiln_container_plan(dict(BASE, container_engine=DOCKER, cdi=True))
    assert plan["engine"]["kind"] == "docker-ce" and plan["engine"]["version"] == "27.5.1"
    assert plan["engine"]["cdi_mode"] == "features.cdi" and plan["cdi"] is True
    assert plan["containerd"] == {"version": "1.7.25", "config_version": 2, "cdi": True}
    assert plan["enroot"] is None and plan["pyxis"] is None


def test_plan_containerd_2_is_config_version_3() -> None:
    plan = kiln_container_plan(dict(BASE, container_engine={"kind": "docker-ce", "version": "29.0.0"}))
    assert plan["containerd"]["config_version"] == 3 and plan["cdi"] is False


def test_plan_distro_engine_versions_are_the_builds_upstream() -> None:
    plan = kiln_container_plan(dict(BASE, container_engine="distro"))
    assert plan["engine"]["version"] == "20.10.24" and plan["engine"]["cdi_mode"] is None
    assert plan["containerd"]["version"] == "1.6.20" and plan["containerd"]["cdi"] is False


def test_plan_minor_names_the_newest_known_patch() -> None:
    assert kiln_container_plan(dict(BASE, container_engine={"kind": "docker-ce", "version": "27.5"}))["engine"]["version"] \
        == "27.5.1"


def test_plan_enroot_pyxis_and_no_engine() -> None:
    plan = kiln_container_plan({"os": "debian-12", "enroot": "3.5.0", "pyxis": "0.20.0"})
    assert plan["engine"] is None and plan["enroot"] == {"version": "3.5.0"}
    assert plan["pyxis"] == {"version": "0.20.0", "min_enroot": "3.1.0"}


def test_plan_unknown_docker_release_is_an_error_naming_the_key() -> None:
    with pytest.raises(AnsibleFilterError, match="kiln_stack.container_engine.version"):
        kiln_container_plan(dict(BASE, container_engine={"kind": "docker-ce", "version": "99.0.0"}))


@pytest.mark.parametrize(("build", "upstream"), [("20.10.24+dfsg1-1+deb12u1+b6", "20.10.24"),
                                                 ("1.6.20~ds1-1+deb12u3", "1.6.20"), ("5:27.5.1-1~debian.12~bookworm", "27.5.1"),
                                                 ("1.1.5+ds1-1+deb12u1", "1.1.5")])
def test_upstream_version(build: str, upstream: str) -> None:
    assert upstream_version(build) == upstream


def test_plan_text_names_the_engine() -> None:
    stack = dict(BASE, container_engine=DOCKER, cdi=True)
    plan = kiln_plan([{"stack": stack, "hosts": ["n1"]}], {"gpu_nodes": ["n1"]})
    entry = plan["groups"]["gpu_nodes"]["stacks"][0]
    assert entry["errors"] == [] and entry["repos"]["docker"]["suite"] == "bookworm"
    text = "\n".join(kiln_plan_text(plan))
    assert "engine              docker-ce 27.5.1" in text and "CDI on (features.cdi)" in text
    assert "pkg container_engine docker-ce=5:27.5.1-1~debian.12~bookworm" in text


# -- repository -----------------------------------------------------------------------------------------------


def test_docker_repo_defaults_and_mirror() -> None:
    repo = kiln_repo("docker", "debian-12")
    assert repo["url"] == "https://download.docker.com/linux/debian" and repo["suite"] == "bookworm"
    assert repo["components"] == ["stable"] and repo["key_url"] == "https://download.docker.com/linux/debian/gpg"
    assert repo["fingerprint"] == "9DC858229FC7DD38854AE2D88D81803C0EBFCD88"
    mirror = kiln_repo("docker", "ubuntu-24.04", {"docker": {"url": "https://mirror.example/docker/linux/",
                                                             "key_url": "https://mirror.example/docker.asc",
                                                             "fingerprint": "0123 4567 89AB CDEF 0123 4567 89AB CDEF 0123 4567"}})
    assert mirror["url"] == "https://mirror.example/docker/linux/ubuntu" and mirror["suite"] == "noble"
    assert mirror["key_url"] == "https://mirror.example/docker.asc"
    assert mirror["fingerprint"] == "0123456789ABCDEF0123456789ABCDEF01234567"
    assert kiln_repo("docker", "rocky-9")["url"] == "https://download.docker.com/linux/rhel/9/$basearch/stable"


def test_docker_repo_refuses_a_short_key_id_and_an_unserved_os() -> None:
    with pytest.raises(AnsibleFilterError, match="kiln_repos.docker.fingerprint"):
        kiln_repo("docker", "debian-12", {"docker": {"fingerprint": "0EBFCD88"}})
    with pytest.raises(AnsibleFilterError, match="kiln_repos.docker has an unknown key"):
        kiln_repo("docker", "debian-12", {"docker": {"urll": "https://x"}})


# -- rules ----------------------------------------------------------------------------------------------------


def test_compatible_container_stacks_are_clean() -> None:
    assert rules(dict(BASE, container_engine=DOCKER, cdi=True)) == []
    assert rules(dict(BASE, container_engine="distro")) == []
    # 29.0.0 is UNVERIFIED data: at most warnings
    assert errors(dict(BASE, container_engine={"kind": "docker-ce", "version": "29.0.0"}, container_toolkit="1.17.8")) == set()
    assert rules({"os": "debian-12", "slurm": {"slurmctld": "22.05", "slurmd": "22.05"}, "enroot": "3.4.1",
                  "pyxis": "0.20.0"}) == []


def test_engine_os_refusals() -> None:
    assert "engine-os" in errors(dict(BASE, os="ubuntu-26.04", container_engine=DOCKER))   # released before the OS
    assert "engine-os" in errors(dict(BASE, os="rhel-9", container_engine="distro"))       # RHEL ships podman
    assert "engine-os" not in errors(dict(BASE, container_engine={"kind": "docker-ce", "version": "24.0"}))
    assert "engine-os" in errors(dict(BASE, os="ubuntu-24.04", container_engine={"kind": "docker-ce", "version": "25.0.5"}))
    # debian-13 is an UNVERIFIED entry: a warning, never a refusal
    rs = rules(dict(BASE, os="debian-13", container_engine=DOCKER))
    assert ("engine-os", "warning") in rs and "engine-os" not in errors(dict(BASE, os="debian-13", container_engine=DOCKER))


def test_distro_on_rhel_fix_names_a_verified_release_built_for_it() -> None:
    v = [x for x in kiln_stack_violations(dict(BASE, os="rhel-9", container_engine="distro")) if x["rule"] == "engine-os"]
    fixed = v[0]["fix_stack"]["container_engine"]
    assert fixed["kind"] == "docker-ce"
    assert compat_data()["container_engine"]["docker_ce"]["releases"][fixed["version"]]["confidence"] != "UNVERIFIED"
    assert errors(dict(BASE, os="rhel-9", container_engine=fixed)) == set()


def test_engine_os_fix_names_a_release_that_is_built() -> None:
    v = [x for x in kiln_stack_violations(dict(BASE, os="ubuntu-26.04", container_engine=DOCKER)) if x["rule"] == "engine-os"]
    assert v and v[0]["fix"] and "ubuntu-26.04" in v[0]["message"]
    # no release kiln knows is built for 26.04 (29.1 is the first): the fix says so instead of naming one
    assert v[0]["fix_stack"] == {} and "record one" in v[0]["fix"]


def test_engine_cdi() -> None:
    assert "engine-cdi" in errors(dict(BASE, container_engine="distro", cdi=True))
    assert "engine-cdi" in errors(dict(BASE, container_engine={"kind": "docker-ce", "version": "24.0.9"}, cdi=True))
    assert "engine-cdi" not in errors(dict(BASE, container_engine={"kind": "docker-ce", "version": "25.0.5"}, cdi=True))
    # no recorded distro build: cannot judge, a warning
    assert ("engine-cdi", "warning") in rules(dict(BASE, os="ubuntu-24.04", container_engine="distro", cdi=True))


def test_engine_toolkit() -> None:
    # containerd 2.x (config version 3) needs toolkit >= 1.17.0
    stack = dict(BASE, container_engine={"kind": "docker-ce", "version": "28.5.2"}, containerd="2.1.5",
                 container_toolkit="1.15.0")
    assert "engine-toolkit" in errors(stack)
    assert "engine-toolkit" not in errors(dict(stack, container_toolkit="1.17.0"))
    # an engine without any toolkit: GPUs do not reach containers (a warning)
    assert ("engine-toolkit", "warning") in rules({"os": "debian-12", "container_engine": "distro"})


def test_engine_containerd() -> None:
    assert "engine-containerd" in errors(dict(BASE, container_engine=DOCKER, containerd="1.6.20"))
    assert "engine-containerd" not in errors(dict(BASE, container_engine=DOCKER, containerd="1.7.24"))
    assert "engine-containerd" in errors(dict(BASE, container_engine="distro", containerd="1.7.25"))
    assert ("engine-containerd", "warning") in rules(dict(BASE, containerd="1.7.25"))  # no engine to use it


def test_enroot_and_pyxis_rules() -> None:
    slurm = {"slurmctld": "22.05", "slurmd": "22.05"}
    assert "enroot-kernel" in errors({"os": "debian-12", "kernel": "3.2.0-4-amd64", "enroot": "3.5.0"})
    assert "enroot-kernel" not in errors({"os": "debian-12", "kernel": "6.1.0-28-amd64", "enroot": "3.5.0"})
    assert "pyxis-slurm" in errors({"os": "debian-12", "pyxis": "0.20.0", "enroot": "3.5.0"})
    assert "pyxis-enroot" in errors({"os": "debian-12", "slurm": slurm, "pyxis": "0.20.0", "enroot": "3.0.0"})
    assert ("pyxis-enroot", "warning") in rules({"os": "debian-12", "slurm": slurm, "pyxis": "0.20.0"})
    assert ("unknown-version", "warning") in rules({"os": "debian-12", "slurm": slurm, "pyxis": "0.99.0", "enroot": "3.5.0"})


def test_unknown_docker_release_is_unknown_version() -> None:
    v = kiln_stack_violations(dict(BASE, container_engine={"kind": "docker-ce", "version": "99.1.0"}))
    assert [x["rule"] for x in v] == ["unknown-version"] and v[0]["severity"] == "error"
    assert v[0]["components"] == ["container_engine.version"]


# -- schema (hostile input) -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "key"), [
    (dict(BASE, container_engine={"kind": "docker-ce", "version": 27.5}), "kiln_stack.container_engine.version"),
    (dict(BASE, container_engine={"kind": "dockerce"}), "kiln_stack.container_engine.kind"),
    (dict(BASE, container_engine={"version": "27.5.1"}), "kiln_stack.container_engine.kind"),
    (dict(BASE, container_engine={"kind": "docker-ce", "verison": "27.5.1"}), "kiln_stack.container_engine.verison"),
    (dict(BASE, container_engine=["docker-ce"]), "kiln_stack.container_engine"),
    (dict(BASE, cdi="yes"), "kiln_stack.cdi"),
    (dict(BASE, cdi=1), "kiln_stack.cdi"),
    (dict(BASE, containerd=1.7), "kiln_stack.containerd"),
    (dict(BASE, enroot=3.5), "kiln_stack.enroot"),
    (dict(BASE, pyxis="0.20.0; rm -rf /"), "kiln_stack.pyxis"),
    (dict(BASE, builds={"docker_io": "not a version"}), "kiln_stack.builds.docker_io"),
])
def test_hostile_container_keys_are_invalid_stack_naming_the_key(stack: dict[str, Any], key: str) -> None:
    v = kiln_stack_violations(stack)
    assert v and all(x["rule"] == "invalid-stack" for x in v)
    assert key in [c for x in v for c in x["components"]], v
    with pytest.raises(AnsibleFilterError, match="kiln_stack"):
        kiln_container_plan(stack)


# -- properties -----------------------------------------------------------------------------------------------

_DATA = compat_data()
_RELEASES = sorted(_DATA["container_engine"]["docker_ce"]["releases"])
_OSES = sorted(k for k in _DATA["os"] if k != "os_aliases")
_TOOLKITS = sorted(_DATA["container_toolkit"]["releases"])


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(_RELEASES), os=st.sampled_from(_OSES), toolkit=st.sampled_from(_TOOLKITS),
       cdi=st.booleans(), kind=st.sampled_from(["docker-ce", "distro"]))
def test_property_rules_and_packages_agree(version: str, os: str, toolkit: str, cdi: bool, kind: str) -> None:
    """Every combination is judged without a traceback; a stack without engine errors renders its packages,
    and the plan's CDI is on exactly when asked and the engine has it."""
    engine = {"kind": kind, "version": version} if kind == "docker-ce" else {"kind": "distro"}
    stack = {"os": os, "container_toolkit": toolkit, "container_engine": engine, "cdi": cdi}
    found = kiln_stack_violations(stack)
    assert all(v["fix"] and v["message"] for v in found)
    engine_errors = {v["rule"] for v in found if v["severity"] == "error" and v["rule"].startswith("engine-")}
    if "engine-os" not in engine_errors:
        pkgs = kiln_pkg(stack, "container_engine")
        assert pkgs and all(isinstance(p, str) and " " not in p for p in pkgs)
        plan = kiln_container_plan(stack)
        assert plan["cdi"] == (cdi and plan["engine"]["cdi_mode"] is not None)
        if cdi and plan["engine"]["cdi_mode"] is None and plan["engine"]["version"]:
            assert "engine-cdi" in engine_errors


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=80), st.booleans(), st.none(),
                       st.lists(st.text(max_size=5), max_size=3), st.dictionaries(st.text(max_size=8), st.text(max_size=8),
                                                                                  max_size=3)),
       key=st.sampled_from(["container_engine", "containerd", "cdi", "enroot", "pyxis"]))
def test_property_hostile_values_never_traceback(value: Any, key: str) -> None:
    stack = dict(BASE, **{key: value})
    found = kiln_stack_violations(stack)
    assert isinstance(found, list)
    for v in found:
        assert v["message"] and v["fix"]
    try:
        kiln_container_plan(stack)
    except AnsibleFilterError as exc:
        assert str(exc).startswith("kiln")

