"""The offline mirror's plan (module_utils/kiln_compat_engine/mirror.py) and data/mirror.yml."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_compat_engine import inventory, mirror, plan
from kiln_compat_engine.errors import CompatError

REPO = Path(__file__).resolve().parents[3]
FPR = "A" * 40
UPSTREAMS = {"distribution": {"url": "http://archive.example/debian"}}


def _example_plan(upstreams=None):
    inv = yaml.safe_load((REPO / "inventories/example/hosts.yml").read_text())
    stack = yaml.safe_load((REPO / "inventories/example/group_vars/all/kiln_stack.yml").read_text())["kiln_stack"]
    hosts = ["ctl01", "gpu01", "gpu02", "gpu03", "gpu04"]
    groups = {"slurm_controller": ["ctl01"], "gpu_nodes": hosts[1:], "slurm_compute": hosts[1:], "all": hosts}
    assert inv["all"]["children"]["gpu_nodes"]["hosts"]
    stacks = inventory.kiln_stacks_by_host({h: {"kiln_stack": stack} for h in hosts}, hosts)
    return plan.kiln_plan(stacks, groups, upstreams), stack


def test_example_inventory_requests_are_exactly_what_site_yml_installs():
    """The example site's mirror requests = every pinned package of its stack + the roles' distribution packages."""
    pl, stack = _example_plan(UPSTREAMS)
    mp = mirror.kiln_mirror_plan(pl, {**UPSTREAMS, "distribution": {**UPSTREAMS["distribution"], "fingerprint": FPR,
                                                                    "key_url": "http://archive.example/key.asc"}})
    assert [t["os"] for t in mp["targets"]] == ["ubuntu-24.04"]
    tgt = mp["targets"][0]
    pinned = {p for st_ in pl["groups"]["gpu_nodes"]["stacks"] for pkgs in st_["packages"].values() for p in pkgs}
    distro = {n for names in mirror.mirror_data()["distro_packages"]["debian"].values() for n in names}
    slurm_client = next(p for p in pinned if p.startswith("slurm-client="))
    extra = {"libslurm-dev=" + slurm_client.split("=", 1)[1]}  # pyxis builds against the installed Slurm
    assert set(tgt["requests"]) == pinned | distro | extra
    assert len(mp["stacks"]) == 1 and len(mp["stacks"][0]["fingerprint"]) == 12
    names = {u["name"] for u in tgt["upstreams"]}
    assert {"distribution", "cuda", "container_toolkit", "docker"} <= names
    # DOCA has no pinned key in kiln's data: refused until the site pins it, never trusted blindly
    assert "doca" not in names
    assert any("doca" in e and "kiln_mirror_upstreams.doca.fingerprint" in e for e in mp["errors"]), mp["errors"]
    # pyxis and enroot downloads without a sha256 are errors naming the variable to set
    assert any("pyxis_source_sha256" in e for e in mp["errors"])
    assert any("enroot_artifacts_sha256" in e for e in mp["errors"])


def test_distribution_upstream_needs_a_url_and_a_key():
    pl, _ = _example_plan({})
    mp = mirror.kiln_mirror_plan(pl, {})
    assert any("kiln_mirror_upstreams.distribution.url" in e for e in mp["errors"])
    mp = mirror.kiln_mirror_plan(pl, UPSTREAMS)
    # Ubuntu's archive key is not verified in kiln's data: the site must pin it
    assert any("kiln_mirror_upstreams.distribution.fingerprint" in e for e in mp["errors"])


def test_debian_archive_key_is_pinned_in_the_data():
    entry = mirror.mirror_data()["distribution"]["debian-12"]
    assert entry["key_fingerprint"] == "B8B80B5B623EAB6AD8775C45B7C5D7D6350947F8"
    assert entry["confidence"] == "VERIFIED" and entry["source"]


def test_files_with_pins_are_served_under_files():
    pl, _ = _example_plan(UPSTREAMS)
    sums = {"pyxis": "a" * 64, "enroot": {"enroot_3.5.0-1_amd64.deb": "b" * 64, "enroot+caps_3.5.0-1_amd64.deb": "c" * 64},
            "nccl_tests": "d" * 64}
    mp = mirror.kiln_mirror_plan(pl, UPSTREAMS, sums)
    serves = {f["serve"] for f in mp["files"]}
    assert "files/pyxis/0.20.0/v0.20.0.tar.gz" in serves
    assert "files/enroot/3.5.0/enroot+caps_3.5.0-1_amd64.deb" in serves
    assert any(s.startswith("files/nccl_tests/") for s in serves)
    assert not any("sha256" in e for e in mp["errors"])


def test_site_repos_point_every_repository_at_the_mirror():
    pl, _ = _example_plan(UPSTREAMS)
    mp = mirror.kiln_mirror_plan(pl, {"distribution": {**UPSTREAMS["distribution"], "fingerprint": FPR,
                                                      "key_url": "http://archive.example/key.asc"}})
    repos = mirror.kiln_mirror_site_repos(mp, "http://mirror.site/", "B" * 40)["ubuntu-24.04"]
    assert repos["distribution"] == {"url": "http://mirror.site/distribution/ubuntu-24.04", "suites": ["noble"],
                                     "components": ["main", "universe"], "key_url": "http://mirror.site/kiln-mirror.asc",
                                     "fingerprint": "B" * 40}
    assert repos["cuda"]["url"] == "http://mirror.site/cuda"
    assert all(r["fingerprint"] == "B" * 40 for r in repos.values())


def test_el_targets_are_refused_not_silently_skipped():
    stack = {"os": "rhel-9", "driver": "580.95.05", "cuda": "13.0.2"}
    stacks = inventory.kiln_stacks_by_host({"n": {"kiln_stack": stack}}, ["n"])
    mp = mirror.kiln_mirror_plan(plan.kiln_plan(stacks, {"g": ["n"]}), UPSTREAMS)
    assert any("apt mirrors only" in e for e in mp["errors"])


def test_roles_distribution_packages_are_all_in_the_data():
    """data/mirror.yml lists every distribution package the roles' vars install by name (per OS family)."""
    data = mirror.mirror_data()["distro_packages"]
    roles = REPO / "roles"

    def load(path):
        return yaml.safe_load((roles / path).read_text())

    deb, rh = set(), set()
    for fam, target in (("Debian", deb), ("RedHat", rh)):
        common = load(f"common/vars/{fam}.yml")
        target.update(common["__common_timesync_packages"] + common["__common_initramfs_packages"]
                      + common["__common_hold_support_packages"])
        target.update(load(f"nvidia_repos/vars/{fam}.yml")["__nvidia_repos_packages"])
        target.update(load(f"pyxis/vars/{fam}.yml")["__pyxis_build_packages"])
        bt = load("burnin_tools/vars/main.yml")["__burnin_tools_os"][fam]
        target.update(bt["cpu_packages"] + bt["build_packages"])
    assert deb == {n for names in data["debian"].values() for n in names}
    assert rh == {n for names in data["redhat"].values() for n in names}


def test_repos_distribution_entry_is_checked():
    from kiln_compat_engine.repos import _check_repos, kiln_repo

    ok = {"distribution": {"url": "http://m/debian", "key_url": "http://m/k.asc", "fingerprint": FPR,
                           "suites": ["bookworm"], "components": ["main"]}}
    assert kiln_repo("distribution", "debian-12", ok)["suites"] == ["bookworm"]
    for bad in ({"suites": "bookworm"}, {"suites": [1.5]}, {"components": []}, {"suite": ["x"]},
                {"suites": ["a b"]}):
        with pytest.raises(CompatError, match="kiln_repos.distribution"):
            _check_repos({"distribution": {**ok["distribution"], **bad}})
    with pytest.raises(CompatError, match="key_url and fingerprint"):
        kiln_repo("distribution", "debian-12", {"distribution": {"url": "http://m/debian"}})


@settings(max_examples=60, deadline=None)
@given(st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
                    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)),
                    max_leaves=12))
def test_hostile_upstreams_raise_a_clear_error_or_plan(value):
    pl, _ = _example_plan(UPSTREAMS)
    try:
        out = mirror.kiln_mirror_plan(pl, {"distribution": value}, {})
    except CompatError as exc:
        assert "kiln" in str(exc)
    else:
        json.dumps(out)
