"""Pure helpers of the dnf (EL) mirror build (module_utils/kiln/mirror/dnf.py), hostile input included."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.mirror import dnf

FPR = "281FAD48FD0F3732E15AD22B77767D5C1DAA930D"
OTHER = "D644DDB74D8028AFB93B646812BD9DD3D841AD2C"
UPS = [{"name": "cuda", "url": "file:///srv/fixture/compute/cuda/repos/rhel9/x86_64"},
       {"name": "distribution-baseos", "url": "https://dl.rockylinux.org/pub/rocky/9/BaseOS/x86_64/os/"}]
KEYS = {"cuda": "/w/keys/cuda.asc", "distribution-baseos": "/w/keys/distribution-baseos.asc"}

REPOMD = b"""<?xml version="1.0" encoding="UTF-8"?>
<repomd xmlns="http://linux.duke.edu/metadata/repo"><revision>1</revision>
<data type="primary"><checksum type="sha256">""" + b"a" * 64 + b"""</checksum>
<location href="repodata/x-primary.xml.gz"/><size>42</size></data>
<data type="modules"><checksum type="sha256">""" + b"b" * 64 + b"""</checksum>
<location href="repodata/y-modules.yaml.gz"/></data></repomd>"""

PRIMARY = """<?xml version="1.0" encoding="UTF-8"?>
<metadata xmlns="http://linux.duke.edu/metadata/common" xmlns:rpm="http://linux.duke.edu/metadata/rpm" packages="2">
<package type="rpm"><name>nvidia-open</name><arch>x86_64</arch><version epoch="0" ver="580.95.05" rel="1.el9"/>
<checksum type="sha256" pkgid="YES">{sha}</checksum><size package="1234" installed="1" archive="1"/>
<location href="nvidia-open-580.95.05-1.el9.x86_64.rpm"/></package>
<package type="rpm"><name>old</name><arch>noarch</arch><version epoch="0" ver="1" rel="1"/>
<checksum type="sha1" pkgid="YES">{sha1}</checksum><location href="Packages/o/old-1-1.noarch.rpm"/></package>
</metadata>""".format(sha="c" * 64, sha1="d" * 40)

MODULES = """---
document: modulemd
version: 2
data:
  name: nvidia-driver
  stream: 580-open
  artifacts:
    rpms:
    - nvidia-open-0:580.95.05-1.el9.x86_64
...
---
document: modulemd
version: 2
data:
  name: nvidia-driver
  stream: "580-dkms"
...
---
document: modulemd-defaults
version: 1
data:
  module: nvidia-driver
  stream: 580-dkms
...
"""


def _colons(*fprs: str) -> str:
    lines = []
    for f in fprs:
        lines += [f"pub:-:255:22:{f[-16:]}:1:::-:::scSC:::::ed25519:::0:", f"fpr:::::::::{f}:",
                  "uid:-::::1::X::someone::::::::::0:", "sub:-:255:18:ABCD:1::::::e:::::cv25519::",
                  "fpr:::::::::" + "E" * 40 + ":"]
    return "\n".join(lines) + "\n"


def test_key_file_must_hold_exactly_the_pinned_key():
    assert dnf.key_listing_problem(_colons(FPR), FPR) == ""
    assert dnf.key_listing_problem(_colons(FPR), FPR.lower()) == ""
    assert "not the pinned" in dnf.key_listing_problem(_colons(OTHER), FPR)
    # a second key in the file would be trusted by dnf and rpm as well: refused
    assert "2 keys" in dnf.key_listing_problem(_colons(FPR, OTHER), FPR)
    assert dnf.key_listing_problem("", FPR) == "holds no OpenPGP key"
    # a subkey's fingerprint is never taken for the primary's
    assert "not the pinned" in dnf.key_listing_problem(_colons(OTHER), "E" * 40)


@pytest.mark.parametrize("bad", ["ABCD", "G" * 40, "A" * 39, "A" * 41, 12345, None, ["A" * 40], "0x" + "A" * 38])
def test_fingerprints_must_be_40_hex(bad):
    with pytest.raises(dnf.MirrorError, match="not a full 40-hex-digit"):
        dnf.check_fingerprint(bad, "kiln_mirror_upstreams.epel.fingerprint")


def test_fingerprint_normalised():
    assert dnf.check_fingerprint("281f ad48 fd0f 3732 e15a d22b 7776 7d5c 1daa 930d", "x") == FPR


def test_repo_file_pins_each_upstream_to_its_key_with_both_checks():
    text = dnf.repo_file(UPS, KEYS)
    assert text.count("\ngpgcheck=1\n") == 2 and text.count("\nrepo_gpgcheck=1\n") == 2
    assert "[kiln-cuda]" in text and "gpgkey=file:///w/keys/cuda.asc" in text
    assert "baseurl=https://dl.rockylinux.org/pub/rocky/9/BaseOS/x86_64/os/\n" in text
    assert "gpgcheck=0" not in text


@pytest.mark.parametrize("url", ["ftp://x/y", "http://x/y z", "http://x/\nbaseurl=http://evil/", "", None, 7])
def test_repo_file_refuses_hostile_urls(url):
    with pytest.raises(dnf.MirrorError, match="URL"):
        dnf.repo_file([{"name": "cuda", "url": url}], KEYS)


@pytest.mark.parametrize("name", ["a]\n[b", "../x", "", "with space", None])
def test_repo_file_refuses_hostile_names(name):
    with pytest.raises(dnf.MirrorError):
        dnf.repo_file([{"name": name, "url": "http://x/"}], {str(name): "/k"})


def test_repo_file_needs_a_checked_key():
    with pytest.raises(dnf.MirrorError, match="no checked key"):
        dnf.repo_file(UPS, {"cuda": "/w/keys/cuda.asc"})


def test_dnf_argv_confines_dnf_to_the_private_root():
    argv = dnf.dnf_argv("/w/root", "/w", "9", "x86_64")
    assert argv[0] == "dnf"
    for opt in ("--installroot=/w/root", "--releasever=9", "--forcearch=x86_64", "--setopt=reposdir=/w/repos.d",
                "--setopt=cachedir=/w/cache", "--config=/w/dnf.conf", "--setopt=module_platform_id=platform:el9",
                "--setopt=install_weak_deps=False", "--disablerepo=*", "--setopt=repo_gpgcheck=True"):
        assert opt in argv
    assert all(isinstance(a, str) for a in argv)
    assert dnf.repo_enable_argv(UPS) == ["--enablerepo=kiln-cuda", "--enablerepo=kiln-distribution-baseos"]


@pytest.mark.parametrize("rel,arch", [("9; rm -rf /", "x86_64"), ("", "x86_64"), ("9", "ppc64le"), (9, "x86_64")])
def test_dnf_argv_refuses_bad_release_or_arch(rel, arch):
    with pytest.raises(dnf.MirrorError):
        dnf.dnf_argv("/w/root", "/w", rel, arch)


def test_repomd_is_read():
    out = dnf.parse_repomd(REPOMD)
    assert out["primary"] == {"href": "repodata/x-primary.xml.gz", "checksum_type": "sha256", "checksum": "a" * 64, "size": 42}
    assert out["modules"]["size"] is None


@pytest.mark.parametrize("text", [REPOMD[:-30], b"", b"<repomd/>", b"<x xmlns='http://linux.duke.edu/metadata/repo'/>",
                                  REPOMD.replace(b'type="primary"', b'type="other"'),
                                  REPOMD.replace(b"repodata/x-primary.xml.gz", b"../../etc/passwd"),
                                  REPOMD.replace(b"repodata/x-primary.xml.gz", b"http://evil/p.xml.gz"),
                                  REPOMD.replace(b'<location href="repodata/y-modules.yaml.gz"/>', b"")])
def test_hostile_repomd_is_refused(text):
    with pytest.raises(dnf.MirrorError, match="refused"):
        dnf.parse_repomd(text)


def test_primary_keeps_sha256_entries_only():
    out = dnf.parse_primary(PRIMARY)
    assert [p["name"] for p in out] == ["nvidia-open"]
    assert out[0]["sha256"] == "c" * 64 and out[0]["size"] == 1234 and out[0]["release"] == "1.el9"
    assert dnf.primary_index(out) == {"nvidia-open-580.95.05-1.el9.x86_64.rpm": {"c" * 64}}


@pytest.mark.parametrize("text", [PRIMARY[:200], "<metadata/>", PRIMARY.replace("<name>nvidia-open</name>", ""),
                                  PRIMARY.replace('<location href="nvidia-open-580.95.05-1.el9.x86_64.rpm"/>', "")])
def test_hostile_primary_is_refused(text):
    with pytest.raises(dnf.MirrorError, match="refused"):
        dnf.parse_primary(text)


def test_checksig_only_a_verified_signature_counts():
    text = ("/d/a-1-1.x86_64.rpm: digests signatures OK\n"
            "/d/b-1-1.x86_64.rpm: digests SIGNATURES NOT OK\n"
            "/d/c-1-1.x86_64.rpm: digests OK\n"
            "/d/d-1-1.x86_64.rpm: DIGESTS signatures NOT OK\n"
            "error: /d/e.rpm: not an rpm package\n"
            "noise\n")
    out = dnf.parse_checksig(text)
    assert out == {"/d/a-1-1.x86_64.rpm": True, "/d/b-1-1.x86_64.rpm": False, "/d/c-1-1.x86_64.rpm": False,
                   "/d/d-1-1.x86_64.rpm": False, "error: /d/e.rpm": False}
    assert not out.get("/d/e.rpm")


def test_rpm_file_names():
    assert dnf.rpm_fields("libnccl-2.28.7-1+cuda13.0.x86_64.rpm") == ("libnccl", "2.28.7", "1+cuda13.0", "x86_64")
    assert dnf.rpm_fields("cuda-toolkit-13-0-13.0.2-1.x86_64.rpm") == ("cuda-toolkit-13-0", "13.0.2", "1", "x86_64")
    for bad in ("x.deb", "a/b-1-1.x86_64.rpm", "nohyphen.rpm"):
        with pytest.raises(dnf.MirrorError):
            dnf.rpm_fields(bad)


def test_a_request_missing_from_the_download_is_named():
    pkgs = [{"name": "nvidia-open", "version": "580.95.05", "release": "1.el9"},
            {"name": "cuda-toolkit-13-0", "version": "13.0.2", "release": "1"}]
    assert dnf.missing_requests(["nvidia-open-580.95.05-1.el9", "cuda-toolkit-13-0", "cuda-toolkit-13-0-13.0.2"], pkgs) == []
    assert dnf.missing_requests(["nvidia-open-0:580.95.05-1.el9"], pkgs) == []
    assert dnf.missing_requests(["nvidia-open-580.173.02-1.el9", "chrony"], pkgs) == ["nvidia-open-580.173.02-1.el9", "chrony"]
    assert dnf.missing_requests(["x"], []) == ["x"]


def test_only_the_wanted_streams_are_served():
    body, lost = dnf.select_modules(MODULES, ["nvidia-driver:580-open"])
    assert lost == [] and "stream: 580-open" in body and "580-dkms" not in body and "modulemd-defaults" not in body
    assert body.startswith("---\n") and body.endswith("...\n")
    body, lost = dnf.select_modules(MODULES, ["nvidia-driver:580-dkms", "nvidia-driver:590-open"])
    assert "580-dkms" in body and lost == ["nvidia-driver:590-open"]
    assert dnf.select_modules("", ["nvidia-driver:580-open"]) == ("", ["nvidia-driver:580-open"])


@pytest.mark.parametrize("stream", ["nvidia-driver", "a:b:c", "x y:z", "", None, 5, "nvidia-driver:580 open"])
def test_bad_streams_are_refused(stream):
    with pytest.raises(dnf.MirrorError, match="module stream"):
        dnf.select_modules(MODULES, [stream])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_repomd_parser_never_crashes(data):
    try:
        out = dnf.parse_repomd(data)
    except dnf.MirrorError:
        return
    assert "primary" in out


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_primary_parser_never_crashes(text):
    try:
        out = dnf.parse_primary(text)
    except dnf.MirrorError:
        return
    assert isinstance(out, list)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=600))
def test_checksig_parser_never_crashes_and_never_passes_without_ok(text):
    for path, ok in dnf.parse_checksig(text).items():
        assert isinstance(path, str)
        if ok:
            assert "signatures OK" in text or "signatures" in text


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=600), st.lists(st.from_regex(r"[a-z]{1,8}:[0-9a-z-]{1,8}", fullmatch=True), max_size=3))
def test_module_selection_keeps_only_wanted_documents(text, streams):
    body, lost = dnf.select_modules(text, streams)
    assert set(lost) <= set(streams)
    if not streams:
        assert body == ""
