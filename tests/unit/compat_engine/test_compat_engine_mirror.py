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


EL_STACK = {"os": "rocky-9", "driver": "580.95.05", "cuda": "13.0.2", "cudnn": "9.17.1.4", "nccl": "2.28.7-1+cuda13.0",
            "container_toolkit": "1.19.1", "dcgm": "4.6.0", "slurm": {"slurmctld": "22.05", "slurmd": "22.05"},
            "pyxis": "0.20.0", "enroot": "3.5.0"}
EL_UPSTREAMS = {"distribution": {"url": "https://dl.rockylinux.org/pub/rocky/9",
                                 "key_url": "https://dl.rockylinux.org/pub/rocky/RPM-GPG-KEY-Rocky-9"},
                "epel": {"url": "https://dl.fedoraproject.org/pub/epel/9/Everything/x86_64/",
                         "key_url": "https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-9"}}


def _el_plan(stack=None, upstreams=None):
    stacks = inventory.kiln_stacks_by_host({"n": {"kiln_stack": stack or EL_STACK}}, ["n"])
    return mirror.kiln_mirror_plan(plan.kiln_plan(stacks, {"g": ["n"]}), EL_UPSTREAMS if upstreams is None else upstreams)


def test_an_el_stack_is_a_dnf_target_with_its_upstreams_streams_and_requests():
    mp = _el_plan()
    assert not [e for e in mp["errors"] if "sha256" not in e], mp["errors"]
    [tgt] = mp["targets"]
    assert (tgt["os"], tgt["pkg_mgr"], tgt["distro"], tgt["releasever"]) == ("rhel-9", "dnf", "rocky-9", "9")
    assert tgt["modules"] == ["nvidia-driver:580-open"]
    ups = {u["name"]: u for u in tgt["upstreams"]}
    assert set(ups) == {"distribution-baseos", "distribution-appstream", "distribution-crb", "epel", "cuda", "container_toolkit"}
    assert all(u["kind"] == "rpm" for u in ups.values())
    assert ups["distribution-baseos"]["url"] == "https://dl.rockylinux.org/pub/rocky/9/BaseOS/x86_64/os"
    assert ups["distribution-crb"]["serve"] == "distribution/rocky-9/CRB/x86_64/os"
    assert ups["distribution-appstream"]["fingerprint"] == "21CB256AE16FC54C6E652949702D426D350D275D"
    assert ups["epel"]["fingerprint"] == "FF8AD1344597106ECE813B918A3872BF3228467C"
    assert ups["epel"]["serve"] == "epel/9/x86_64"
    assert ups["cuda"]["serve"] == "cuda/rhel9/x86_64" and ups["cuda"]["url"].endswith("/rhel9/x86_64")
    assert ups["container_toolkit"]["serve"] == "libnvidia-container/stable/rpm/x86_64"
    req = set(tgt["requests"])
    assert {"nvidia-open-580.95.05-1.el9", "cuda-toolkit-13-0-13.0.2-1", "libnccl-2.28.7-1+cuda13.0",
            "golang-github-prometheus-node-exporter", "munge", "slurm", "slurm-devel"} <= req
    assert {n for names in mirror.mirror_data()["distro_packages"]["redhat"].values() for n in names} <= req
    assert not any("=" in r for r in req)  # dnf specs, never apt's name=version
    assert not any("apt mirrors only" in e for e in mp["errors"])


def test_el_without_epel_or_distribution_names_the_variables():
    mp = _el_plan(upstreams={})
    assert any("kiln_mirror_upstreams.distribution.url" in e for e in mp["errors"]), mp["errors"]
    assert any("kiln_mirror_upstreams.epel.url" in e for e in mp["errors"]), mp["errors"]
    mp = _el_plan(upstreams={**EL_UPSTREAMS, "epel": {"url": "https://x.example/epel/"}})
    assert any("kiln_mirror_upstreams.epel.key_url" in e for e in mp["errors"]), mp["errors"]


def test_rhel_needs_a_pinned_distribution_key():
    mp = _el_plan({**EL_STACK, "os": "rhel-9"})
    assert any("kiln_mirror_upstreams.distribution.fingerprint" in e and "rhel-9" in e for e in mp["errors"]), mp["errors"]
    pinned = {**EL_UPSTREAMS, "distribution": {**EL_UPSTREAMS["distribution"], "fingerprint": FPR}}
    mp = _el_plan({**EL_STACK, "os": "rhel-9"}, pinned)
    ups = {u["name"]: u for u in mp["targets"][0]["upstreams"]}
    assert ups["distribution-baseos"]["fingerprint"] == FPR and ups["distribution-baseos"]["url"].endswith("/baseos/os")


def test_an_el_distribution_without_data_is_an_error_not_a_guess():
    mp = _el_plan({**EL_STACK, "os": "almalinux-9"})
    assert any("almalinux-9" in e and "data/mirror.yml" in e for e in mp["errors"]), mp["errors"]


def test_el_distribution_url_template_and_repos():
    ups = {**EL_UPSTREAMS, "distribution": {"url": "file:///srv/fx/el9/{repo}/{arch}", "repos": ["base"],
                                            "key_url": "file:///srv/fx/key.asc", "fingerprint": FPR}}
    tgt = _el_plan(upstreams=ups)["targets"][0]
    dist = [u for u in tgt["upstreams"] if u["name"].startswith("distribution-")]
    assert [(u["name"], u["url"], u["serve"]) for u in dist] == [
        ("distribution-base", "file:///srv/fx/el9/base/x86_64", "distribution/rocky-9/base/x86_64/os")]


@pytest.mark.parametrize("bad", [{"epel": {"url": "ftp://x"}}, {"epel": {"fingerprint": "ABCD"}}, {"epel": "x"},
                                 {"distribution": {"repos": ["Base OS"]}}, {"distribution": {"repos": "BaseOS"}}])
def test_hostile_el_upstreams_are_refused(bad):
    with pytest.raises(CompatError, match="kiln_mirror_upstreams"):
        _el_plan(upstreams=bad)


def test_epel_is_a_kiln_repos_entry_with_the_plain_keys():
    from kiln_compat_engine.repos import _check_repos
    assert _check_repos({"epel": {"url": "http://x/epel/9/x86_64"}}) == {"epel": {"url": "http://x/epel/9/x86_64"}}
    with pytest.raises(CompatError, match=r"kiln_repos.epel has an unknown key 'repos'"):
        _check_repos({"epel": {"url": "http://x/", "repos": ["everything"]}})


def test_el_site_repos_point_the_roles_at_the_mirror():
    mp = _el_plan()
    repos = mirror.kiln_mirror_site_repos(mp, "http://mirror.site/", "B" * 40)["rhel-9"]
    assert repos["cuda"] == {"url": "http://mirror.site/cuda", "key_url": "http://mirror.site/kiln-mirror.asc",
                             "fingerprint": "B" * 40}
    assert repos["container_toolkit"]["url"] == "http://mirror.site/libnvidia-container"
    # roles/distro_repos writes the served distribution repositories and EPEL (then slurm_install skips epel-release)
    assert repos["distribution"] == {"url": "http://mirror.site/distribution/rocky-9",
                                     "key_url": "http://mirror.site/kiln-mirror.asc", "fingerprint": "B" * 40,
                                     "repos": ["AppStream", "BaseOS", "CRB"]}
    assert repos["epel"]["url"] == "http://mirror.site/epel/9/x86_64"
    assert "slurm" not in repos
    assert all(r["fingerprint"] == "B" * 40 for r in repos.values())


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


# --- kiln_mirror_distributions: one build for a site with several OSes -------------------------------------

def test_per_os_distribution_upstreams_replace_the_shared_one() -> None:
    import copy  # noqa: PLC0415

    from kiln_compat_engine import mirror as m  # noqa: PLC0415

    site = {"distribution": {"url": "http://deb.example/debian", "key_url": "file:///k.gpg"}}
    per_os = {"rocky-9": {"url": "http://rocky.example/{repo}/x86_64", "key_url": "file:///r.asc",
                          "fingerprint": "A" * 40, "repos": ["base"]}}
    deb = m._distribution_upstream("debian-12", *m._site_for(site, m._check_distributions(per_os), "debian-12"))
    assert deb["url"] == "http://deb.example/debian"
    assert deb["fingerprint_var"] == "kiln_mirror_upstreams.distribution.fingerprint"
    el_site, el_var = m._site_for(site, m._check_distributions(per_os), "rocky-9")
    el = m._el_distribution_upstreams("rocky-9", el_site, "x86_64", el_var)
    assert [u["url"] for u in el] == ["http://rocky.example/base/x86_64"] and el[0]["fingerprint"] == "A" * 40
    # an error or a pin names the variable the entry came from
    assert el[0]["fingerprint_var"] == "kiln_mirror_distributions.rocky-9.fingerprint"
    with pytest.raises(m.CompatError, match=r"Fix: set kiln_mirror_distributions\.rocky-9\.url"):
        m._el_distribution_upstreams("rocky-9", {"distribution": {}}, "x86_64", "kiln_mirror_distributions.rocky-9")
    assert m._site_for(site, {}, "rocky-9") == (site, "kiln_mirror_upstreams.distribution")
    bad = copy.deepcopy(per_os)
    bad["centos-7"] = bad.pop("rocky-9")
    with pytest.raises(m.CompatError, match=r"kiln_mirror_distributions has 'centos-7', not an OS of data/mirror.yml"):
        m._check_distributions(bad)
    with pytest.raises(m.CompatError, match="kiln_mirror_distributions.rocky-9"):
        m._check_distributions({"rocky-9": {"url": 9}})
