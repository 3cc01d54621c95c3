"""kiln_repos on EL: distribution.repos (the served rpm-md repositories) and the epel entry, checked by preflight."""
from __future__ import annotations

import pytest

from kiln_compat_engine.errors import CompatError
from kiln_compat_engine.repos import _check_repos, kiln_repo, kiln_repos_problems

FPR = "0123456789ABCDEF0123456789ABCDEF01234567"
EL = {"url": "http://mirror/distribution/rocky-9", "key_url": "http://mirror/kiln-mirror.asc", "fingerprint": FPR,
      "repos": ["BaseOS", "AppStream", "CRB"]}
APT = {"url": "http://mirror/distribution/debian-12", "key_url": "http://mirror/kiln-mirror.asc", "fingerprint": FPR,
       "suites": ["bookworm"], "components": ["main"]}
EPEL = {"url": "http://mirror/epel/9/x86_64", "key_url": "http://mirror/kiln-mirror.asc", "fingerprint": FPR.lower()}


def test_distribution_repos_and_epel_are_accepted():
    out = _check_repos({"distribution": EL, "epel": EPEL})
    assert out["distribution"]["repos"] == ["BaseOS", "AppStream", "CRB"]
    assert out["epel"] == {**EPEL, "fingerprint": FPR}  # normalised as every pin
    assert _check_repos({"distribution": APT})["distribution"]["suites"] == ["bookworm"]


def test_kiln_repo_resolves_an_el_distribution_and_epel():
    dist = kiln_repo("distribution", "rocky-9", {"distribution": EL})
    assert dist["repos"] == EL["repos"] and "suites" not in dist and "components" not in dist
    assert dist["fingerprint_var"] == "kiln_repos.distribution.fingerprint"
    assert kiln_repo("distribution", "debian-12", {"distribution": APT})["components"] == ["main"]
    epel = kiln_repo("epel", "rocky-9", {"epel": EPEL})
    assert (epel["url"], epel["fingerprint"], epel["fingerprint_var"]) == (EPEL["url"], FPR, "kiln_repos.epel.fingerprint")
    assert kiln_repo("epel", "rocky-9", {}) == {}
    with pytest.raises(CompatError, match="kiln_repos.epel has a url but no key_url and fingerprint"):
        kiln_repo("epel", "rocky-9", {"epel": {"url": EPEL["url"]}})


@pytest.mark.parametrize(("entry", "says"), [
    ({"distribution": {**EL, "repos": "BaseOS"}}, r"kiln_repos.distribution.repos is the string 'BaseOS'.*list"),
    ({"distribution": {**EL, "repos": []}}, r"kiln_repos.distribution.repos .*non-empty list.*\[BaseOS, AppStream, CRB\]"),
    ({"distribution": {**EL, "repos": ["Base OS"]}}, r"kiln_repos.distribution.repos"),
    ({"distribution": {**EL, "repos": [7]}}, r"kiln_repos.distribution.repos"),
    ({"distribution": {**EL, "suites": ["bookworm"]}}, r"kiln_repos.distribution has suites, repos: .*never both"),
    ({"distribution": {**APT, "repos": ["BaseOS"]}}, r"kiln_repos.distribution has suites, components, repos"),
    ({"distribution": {**EL, "fingerprint": 1234567890123}}, r"kiln_repos.distribution.fingerprint is .*not a string.*quote"),
    ({"distribution": {**EL, "fingerprint": 1.5e39}}, r"kiln_repos.distribution.fingerprint is .*float.*quote"),
    ({"epel": {**EPEL, "fingerprint": 12345}}, r"kiln_repos.epel.fingerprint is .*not a string"),
    ({"epel": {**EPEL, "fingerprint": "3228467C"}}, r"kiln_repos.epel.fingerprint .*not a full 40-hex-digit"),
    ({"distribution": {**EL, "repo": ["BaseOS"]}}, r"kiln_repos.distribution has an unknown key 'repo'.*repos"),
    ({"epel": {**EPEL, "suites": ["x"]}}, r"kiln_repos.epel has an unknown key 'suites'"),
    ({"epel": {**EPEL, "url": "ftp://mirror/epel"}}, r"kiln_repos.epel.url .*not an http"),
    ({"epel": "http://mirror/epel/9/x86_64"}, r"kiln_repos.epel is the string"),
    ({"epl": EPEL}, r"unknown repository 'epl'.*epel"),
])
def test_hostile_el_entries_are_refused_naming_the_key(entry, says):
    with pytest.raises(CompatError, match=says):
        _check_repos(entry)


def test_preflight_names_the_hosts_of_a_bad_el_entry():
    hostvars = {"gpu1": {"kiln_repos": {"distribution": {**EL, "suites": ["bookworm"]}}},
                "gpu2": {"kiln_repos": {"distribution": EL, "epel": EPEL}}}
    [problem] = kiln_repos_problems(hostvars, ["gpu1", "gpu2"])
    assert problem.startswith("gpu1: kiln_repos.distribution has suites, repos")
