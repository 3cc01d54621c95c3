"""Pure helpers of the apt mirror build (module_utils/kiln/mirror/apt.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.mirror import apt

UPS = [
    {"name": "distribution", "kind": "dists", "url": "http://archive.example/debian", "suites": ["bookworm", "bookworm-updates"],
     "components": ["main", "contrib"]},
    {"name": "cuda", "kind": "flat", "url": "file:///srv/repo/compute/cuda/repos/debian12/x86_64/"},
    {"name": "docker", "kind": "dists", "url": "http://archive.example/debian/docker", "suites": ["bookworm"],
     "components": ["stable"]},
]


def test_print_uris_lines_are_read_and_noise_ignored():
    text = ("Reading package lists...\n"
            "'http://archive.example/debian/pool/main/c/chrony/chrony_4.3-2%2bdeb12u1_amd64.deb' "
            "chrony_4.3-2+deb12u1_amd64.deb 289432 MD5Sum:0123\n"
            "'file:/srv/repo/x/libcuda1_580.95.05-1_amd64.deb' libcuda1_580.95.05-1_amd64.deb 10 SHA256:ab\n"
            "'http://x/y.dsc' y.dsc 10 MD5Sum:aa\n")
    out = apt.parse_print_uris(text)
    assert [o["filename"] for o in out] == ["chrony_4.3-2+deb12u1_amd64.deb", "libcuda1_580.95.05-1_amd64.deb"]
    assert out[0]["size"] == 289432


def test_route_picks_the_longest_prefix_and_the_pool_component():
    up, comp = apt.route("http://archive.example/debian/pool/contrib/x/x_1_amd64.deb", UPS)
    assert (up["name"], comp) == ("distribution", "contrib")
    up, comp = apt.route("http://archive.example/debian/docker/pool/stable/d/d_1_amd64.deb", UPS)
    assert (up["name"], comp) == ("docker", "stable")
    up, comp = apt.route("file:/srv/repo/compute/cuda/repos/debian12/x86_64/libcuda1_1_amd64.deb", UPS)
    assert (up["name"], comp) == ("cuda", "")
    with pytest.raises(apt.MirrorError, match="none of the upstream"):
        apt.route("http://elsewhere.example/pool/main/x.deb", UPS)


def test_sources_sign_each_upstream_with_its_own_keyring():
    lines = apt.source_lines(UPS, "/k")
    assert lines[0] == "deb [signed-by=/k/distribution.gpg] http://archive.example/debian bookworm main contrib"
    assert "deb [signed-by=/k/cuda.gpg] file:///srv/repo/compute/cuda/repos/debian12/x86_64/ /" in lines
    for bad in ({"suites": ["a b"]}, {"suites": []}, {"components": ["x;y"]}, {"url": "http://a b"}):
        with pytest.raises(apt.MirrorError):
            apt.source_lines([{**UPS[0], **bad}], "/k")


def test_index_hashes_and_deb_fields():
    idx = "Package: a\nVersion: 1:2-3\nFilename: pool/main/a/a_2-3_amd64.deb\nSize: 5\nSHA256: ABC\nDescription: x\n y\n\n"
    hashes = apt.index_hashes(apt.parse_packages_index(idx))
    assert hashes == {"a_2-3_amd64.deb": {(5, "abc")}}
    assert apt.deb_fields("a_1%3a2-3_amd64.deb") == ("a", "1:2-3", "amd64")
    with pytest.raises(apt.MirrorError):
        apt.deb_fields("not-a-deb")


def test_missing_requests_names_what_the_closure_lacks():
    pk = [{"name": "chrony", "version": "4.3-2"}, {"name": "dcgm", "version": "4.6.0-1"}]
    assert apt.missing_requests(["chrony", "dcgm=1:4.6.0-1"], pk) == []
    assert apt.missing_requests(["chrony=4.3-3", "gnupg", "dcgm=4.6.0-1"], pk) == ["chrony=4.3-3", "gnupg"]
    assert apt.missing_requests(["chrony"], []) == ["chrony"]


def test_gpg_listings():
    colons = ("pub:-:4096:1:X:1::::::scSC:\nfpr:::::::::" + "A" * 40 + ":\nsub:-:1:1:Y:1::::::s:\nfpr:::::::::" + "B" * 40
              + ":\npub:-:1:1:Z:1::::::s:\nfpr:::::::::" + "C" * 40 + ":\n")
    assert apt.pinned_key_listing(colons, "a" * 40) == (True, ["A" * 40, "C" * 40])
    assert apt.pinned_key_listing(colons, "B" * 40)[0] is False  # a subkey is not the pin
    status = "[GNUPG:] VALIDSIG " + "D" * 40 + " 2026-07-11 1 0 4 0 1 8 01 " + "E" * 40 + "\n[GNUPG:] BADSIG x y\n"
    assert apt.validsig(status) == ["D" * 40, "E" * 40]
    assert "SignWith: " + "F" * 40 in apt.reprepro_distributions("bookworm", ["main"], "amd64", "f" * 40)
    with pytest.raises(apt.MirrorError):
        apt.reprepro_distributions("bookworm", ["main"], "amd64", "short")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_parsers_never_raise_on_garbage(text):
    apt.parse_print_uris(text)
    list(apt.parse_packages_index(text))
    apt.validsig(text)
    apt.pinned_key_listing(text, "A" * 40)
