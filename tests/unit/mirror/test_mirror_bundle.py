"""The mirror bundle (module_utils/kiln/mirror/bundle.py): made, verified, refused, unpacked.

What the air-gapped site relies on: a bundle made from a tree verifies, and the same tree gives the
same bytes; any damage to the tar (one byte, a cut, a missing, extra, linked or escaping member) is
refused naming the file; a manifest edited after signing, another key's signature and a key file that
is not the pinned key are refused; a bundle for other stacks is refused; an incremental bundle carries
only what changed and is accepted only on its own base; unpacking is idempotent, hard-links what is
inherited, switches ``current`` atomically and keeps the previous release for a rollback.
"""
from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln.mirror import bundle, manifest
from kiln_bundle_cases import TREE, check, fake_gpgv, keys, make_bundle, rewrite_manifest, write_tree  # noqa: F401

HYPOTHESIS = settings(max_examples=25, deadline=None,
                      suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def good(tmp_path_factory, keys):  # noqa: F811
    root = tmp_path_factory.mktemp("good")
    tree = write_tree(root / "tree", TREE)
    return make_bundle(keys, tree, root / "out", "site-1")


def _copy(b, to: Path):
    to.mkdir(parents=True, exist_ok=True)
    paths = [shutil.copy(p, to) for p in (b.tar, b.manifest, b.sig)]
    return type(b)(*paths, b.doc)


# --- made and verified -------------------------------------------------------------------------

def test_a_bundle_verifies(good, keys):  # noqa: F811
    report = check(good, keys, expected_stacks=["stack-aaaa1111"])
    assert report["problems"] == [] and report["ok"] is True
    assert report["id"] == "site-1" and report["files"] == len(TREE) and report["inherited"] == 0
    assert report["bytes"] == sum(len(v) for v in TREE.values())
    assert report["stacks"] == ["stack-aaaa1111"] and report["base"] is None


def test_the_binary_key_file_works_too(good, keys):  # noqa: F811
    assert bundle.verify(good.tar, good.manifest, good.sig, keys.site, key_file=keys.site_pub_binary)["ok"]


def test_the_same_tree_gives_the_same_bytes(tmp_path, good):
    """Another copy of the tree, other mtimes and modes, written in another order: the same tar."""
    tree = write_tree(tmp_path / "again", dict(reversed(list(TREE.items()))))
    for index, path in enumerate(sorted(tree.rglob("*"))):
        os.utime(path, (1_000_000 + index, 2_000_000 + index))
        if path.is_file():
            path.chmod(0o600 if index % 2 else 0o755)
    archive = bundle.write_tar(str(tree), bundle.scan_tree(str(tree)), str(tmp_path / "again.tar"))
    assert Path(good.tar).read_bytes() == (tmp_path / "again.tar").read_bytes()
    assert archive["sha256"] == good.doc["archive"]["sha256"]
    with tarfile.open(good.tar) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(TREE)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode, m.type) for m in members} == {
        (0, 0, 0, "", "", 0o644, tarfile.REGTYPE)}


def test_scan_refuses_links_and_special_files_naming_them(tmp_path):
    tree = write_tree(tmp_path / "tree", {"a/file": b"x"})
    (tree / "a" / "link").symlink_to("file")
    (tree / "dirlink").symlink_to("a")
    os.mkfifo(tree / "a" / "fifo")
    with pytest.raises(manifest.BundleError) as caught:
        bundle.scan_tree(str(tree))
    message = str(caught.value)
    assert "a/link (a symbolic link)" in message and "dirlink (a symbolic link)" in message
    assert "a/fifo (a FIFO)" in message and "regular files only" in message
    with pytest.raises(manifest.BundleError, match="holds no files"):
        (tmp_path / "empty" / "dir").mkdir(parents=True)
        bundle.scan_tree(str(tmp_path / "empty"))


# --- damage to the tar -------------------------------------------------------------------------

@HYPOTHESIS
@given(data=st.data())
def test_one_byte_changed_in_any_file_is_refused_naming_it(good, keys, tmp_path, data):  # noqa: F811
    with tarfile.open(good.tar) as tar:
        members = tar.getmembers()
    member = data.draw(st.sampled_from(members))
    offset = member.offset_data + data.draw(st.integers(0, member.size - 1))
    flip = data.draw(st.integers(1, 255))
    raw = bytearray(Path(good.tar).read_bytes())
    raw[offset] ^= flip
    bad = tmp_path / "bad" / "site-1.tar"
    bad.parent.mkdir(exist_ok=True)
    bad.write_bytes(bytes(raw))
    report = bundle.verify(str(bad), good.manifest, good.sig, keys.site, key_file=keys.site_pub,
                           gpg=fake_gpgv(keys.site))
    assert report["ok"] is False
    assert any(member.name in p and "sha256" in p for p in report["problems"]), report["problems"]
    assert any("differs from the manifest's" in p and p.startswith(str(bad)) for p in report["problems"])


@HYPOTHESIS
@given(cut=st.integers(0, 30_000))
def test_a_truncated_tar_is_refused_without_a_traceback(good, keys, tmp_path, cut):  # noqa: F811
    raw = Path(good.tar).read_bytes()
    bad = tmp_path / "cut" / "site-1.tar"
    bad.parent.mkdir(exist_ok=True)
    bad.write_bytes(raw[:min(cut, len(raw) - 1)])
    report = bundle.verify(str(bad), good.manifest, good.sig, keys.site, key_file=keys.site_pub,
                           gpg=fake_gpgv(keys.site))
    assert report["ok"] is False
    assert any("bytes, the manifest says" in p for p in report["problems"]), report["problems"]


def _retar(good, out: Path, edit) -> str:
    """The good tar rewritten member by member through *edit(members) -> [(TarInfo, bytes|None)]*."""
    with tarfile.open(good.tar) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "site-1.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, payload in edit(members):
            tar.addfile(info, io.BytesIO(payload) if payload is not None else None)
    return str(path)


def _member(name: str, kind=tarfile.REGTYPE, payload: bytes = b"", linkname: str = ""):
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, len(payload) if kind == tarfile.REGTYPE else 0, linkname
    return info, (payload if kind == tarfile.REGTYPE else None)


@pytest.mark.parametrize("case,edit,expected", [
    ("missing", lambda ms: ms[1:], "dists/bookworm/Release: in the manifest's files but missing from the archive"),
    ("extra", lambda ms: ms + [_member("pool/extra.deb", payload=b"x")],
     "member 'pool/extra.deb' is not in the manifest's files (an extra file)"),
    ("symlink", lambda ms: ms + [_member("pool/evil", tarfile.SYMTYPE, linkname="/etc/shadow")],
     "member 'pool/evil' is a symbolic link (to /etc/shadow)"),
    ("hardlink", lambda ms: ms + [_member("pool/hard", tarfile.LNKTYPE, linkname="kiln-mirror.asc")],
     "member 'pool/hard' is a hard link"),
    ("absolute", lambda ms: ms + [_member("/etc/cron.d/evil", payload=b"x")], "member '/etc/cron.d/evil' is absolute"),
    ("dotdot", lambda ms: ms + [_member("pool/../../evil", payload=b"x")], "member 'pool/../../evil' climbs out"),
    ("directory", lambda ms: [_member("pool", tarfile.DIRTYPE)] + ms, "member 'pool' is a directory entry"),
    ("duplicate", lambda ms: ms + [ms[0]], "appears twice"),
])
def test_a_wrong_member_is_refused_naming_it(good, keys, tmp_path, case, edit, expected):  # noqa: F811
    bad = _retar(good, tmp_path / case, edit)
    report = bundle.verify(bad, good.manifest, good.sig, keys.site, key_file=keys.site_pub, gpg=fake_gpgv(keys.site))
    assert report["ok"] is False
    assert any(expected in p for p in report["problems"]), report["problems"]


def test_garbage_and_a_compressed_tar_are_refused(good, keys, tmp_path):  # noqa: F811
    for name, payload in {"garbage": os.urandom(4096), "empty": b"", "gzip": b"\x1f\x8b\x08" + os.urandom(600)}.items():
        bad = tmp_path / name / "site-1.tar"
        bad.parent.mkdir()
        bad.write_bytes(payload)
        report = bundle.verify(str(bad), good.manifest, good.sig, keys.site, key_file=keys.site_pub,
                               gpg=fake_gpgv(keys.site))
        assert report["ok"] is False and len(report["problems"]) >= len(TREE), (name, report["problems"])


def test_every_problem_is_collected_in_order(good, keys, tmp_path):  # noqa: F811
    """A foreign signature, a wrong stack and a damaged file: all three, the signature first."""
    copy = _copy(good, tmp_path / "all")
    raw = bytearray(Path(copy.tar).read_bytes())
    with tarfile.open(copy.tar) as tar:
        raw[tar.getmembers()[0].offset_data] ^= 1
    Path(copy.tar).write_bytes(bytes(raw))
    report = bundle.verify(copy.tar, copy.manifest, copy.sig, keys.other, key_file=keys.other_pub,
                           expected_stacks=["stack-other"])
    problems = report["problems"]
    assert "not by the pinned site key" in problems[0] or "another key" in problems[0], problems
    assert any("sha256" in p for p in problems) and problems[-1].startswith("built for other stacks: missing stack-other")


# --- signature and key ---------------------------------------------------------------------------

def test_a_manifest_edited_after_signing_is_refused(good, keys, tmp_path):  # noqa: F811
    copy = _copy(good, tmp_path / "edited")
    doc = dict(good.doc, stacks=[{"fingerprint": "stack-smuggled"}])
    rewrite_manifest(copy, keys, doc, resign=False)
    report = check(copy, keys, expected_stacks=["stack-smuggled"])
    assert report["ok"] is False
    assert any("the signature does not match" in p and "changed after it was signed" in p for p in report["problems"])


def test_a_signature_by_another_key_is_refused_naming_both(good, keys, tmp_path):  # noqa: F811
    copy = _copy(good, tmp_path / "foreign")
    from kiln_bundle_cases import sign
    sign(keys, copy.manifest, signer=keys.other)
    report = check(copy, keys)
    assert report["ok"] is False
    [problem] = [p for p in report["problems"] if "signed by key" in p]
    assert keys.other in problem and keys.site in problem


@pytest.mark.parametrize("key_file,expected", [
    ("other_pub", "holds another key than the pinned one"),
    ("both_pub", "holds 2 primary keys"),
    ("site_secret", "holds secret key material"),
])
def test_a_key_file_that_is_not_exactly_the_pin_is_refused(good, keys, key_file, expected):  # noqa: F811
    report = bundle.verify(good.tar, good.manifest, good.sig, keys.site, key_file=getattr(keys, key_file))
    assert report["ok"] is False
    assert any(expected in p and keys.site in p for p in report["problems"]), report["problems"]


def test_a_pin_that_is_not_a_full_fingerprint_or_a_garbage_key_file_is_refused(good, keys, tmp_path):  # noqa: F811
    report = bundle.verify(good.tar, good.manifest, good.sig, keys.site[-16:], key_file=keys.site_pub)
    assert any("not a full key fingerprint" in p for p in report["problems"])
    garbage = tmp_path / "garbage.asc"
    garbage.write_bytes(b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!\n-----END PGP PUBLIC KEY BLOCK-----\n")
    report = bundle.verify(good.tar, good.manifest, good.sig, keys.site, key_file=str(garbage))
    assert any("is not an OpenPGP public key" in p for p in report["problems"])
    report = bundle.verify(good.tar, good.manifest, good.sig, keys.site, key_file=str(tmp_path / "absent.asc"))
    assert any("cannot read the site key file" in p for p in report["problems"])


def test_a_missing_gpgv_is_a_problem_not_a_traceback(good, keys):  # noqa: F811
    report = check(good, keys, gpg=lambda argv: {"rc": 127, "stdout": "", "stderr": "gpgv: not found"})
    assert report["ok"] is False and "gpgv is not installed" in report["problems"][0]


def test_a_bundle_built_for_other_stacks_is_refused(good, keys):  # noqa: F811
    report = check(good, keys, expected_stacks=["stack-aaaa1111", "stack-bbbb2222"])
    assert report["ok"] is False
    assert report["problems"] == [f"built for other stacks: missing stack-bbbb2222 (the bundle carries stack-aaaa1111): "
                                  "make a bundle for this site's stacks (kiln-bundle create --stacks)"]


# --- incremental bundles and unpacking ------------------------------------------------------------

@pytest.fixture
def chain(tmp_path, keys):  # noqa: F811
    """A full bundle b1, and b2 made on it: one file changed, one added, one removed."""
    tree = write_tree(tmp_path / "tree", TREE)
    b1 = make_bundle(keys, tree, tmp_path / "out", "b1")
    (tree / "dists/bookworm/Release").write_bytes(b"Origin: kiln\nSuite: bookworm\nDate: later\n")
    write_tree(tree, {"pool/main/n/new/new_1.0_amd64.deb": b"new"})
    (tree / "files/pyxis-0.20.0.tar.gz").unlink()
    b2 = make_bundle(keys, tree, tmp_path / "out", "b2", base_manifest=b1.manifest)
    return tree, b1, b2, tmp_path / "srv"


def test_an_incremental_bundle_carries_only_what_is_new_or_changed(chain):
    _, _, b2, _ = chain
    assert [f["path"] for f in b2.doc["files"]] == ["dists/bookworm/Release", "pool/main/n/new/new_1.0_amd64.deb"]
    assert [f["path"] for f in b2.doc["inherited"]] == sorted(
        set(TREE) - {"dists/bookworm/Release", "files/pyxis-0.20.0.tar.gz"})
    assert b2.doc["base"]["id"] == "b1"
    with tarfile.open(b2.tar) as tar:
        assert tar.getnames() == ["dists/bookworm/Release", "pool/main/n/new/new_1.0_amd64.deb"]


def test_an_incremental_bundle_verifies_on_its_base_only(chain, keys, tmp_path):  # noqa: F811
    _, b1, b2, srv = chain
    report = check(b2, keys, base_dir=str(srv))
    assert any("serves no release yet" in p for p in report["problems"]), report["problems"]
    assert check(b2, keys)["notes"] and check(b2, keys)["ok"]  # no base directory: noted, not checked
    assert bundle.unpack(b1.tar, b1.manifest, str(srv))["changed"] is True
    report = check(b2, keys, base_dir=str(srv))
    assert report["ok"] is True, report["problems"]
    assert report["inherited"] == len(b2.doc["inherited"]) and report["base"] == "b1"
    # a mirror serving another bundle than the base
    other_tree = write_tree(tmp_path / "other-tree", {"x": b"x"})
    other = make_bundle(keys, other_tree, tmp_path / "other", "b9")
    other_srv = tmp_path / "other-srv"
    bundle.unpack(other.tar, other.manifest, str(other_srv))
    report = check(b2, keys, base_dir=str(other_srv))
    assert any("made on b1, but" in p and "serves b9" in p for p in report["problems"]), report["problems"]


def test_an_incremental_bundle_is_refused_when_an_inherited_file_was_damaged(chain, keys):  # noqa: F811
    _, b1, b2, srv = chain
    bundle.unpack(b1.tar, b1.manifest, str(srv))
    victim = srv / "current" / "pool/main/c/chrony/chrony_4.3_amd64.deb"
    victim.write_bytes(b"tampered")
    (srv / "current" / "kiln-mirror.asc").unlink()
    problems = check(b2, keys, base_dir=str(srv))["problems"]
    assert any("inherited pool/main/c/chrony/chrony_4.3_amd64.deb: sha256" in p for p in problems), problems
    assert any("inherited kiln-mirror.asc: missing" in p for p in problems), problems


def test_a_base_of_the_same_name_but_another_manifest_is_refused(chain, keys, tmp_path):  # noqa: F811
    tree, _, b2, srv = chain
    impostor = make_bundle(keys, write_tree(tmp_path / "imp", TREE), tmp_path / "imp-out", "b1",
                           stacks=[{"fingerprint": "stack-other"}])
    bundle.unpack(impostor.tar, impostor.manifest, str(srv))
    problems = check(b2, keys, base_dir=str(srv))["problems"]
    assert any("serves another bundle named b1" in p for p in problems), problems


def test_unpack_is_idempotent_links_inherited_files_and_keeps_the_previous_release(chain, keys, tmp_path):  # noqa: F811
    tree, b1, b2, srv = chain
    first = bundle.unpack(b1.tar, b1.manifest, str(srv))
    assert first == {"changed": True, "id": "b1", "release_dir": str(srv / "releases" / "b1"), "previous": None,
                     "pruned": []}
    assert bundle.unpack(b1.tar, b1.manifest, str(srv))["changed"] is False
    assert os.readlink(srv / "current") == "releases/b1"
    served = {str(p.relative_to(srv / "current")): p.read_bytes() for p in (srv / "current").rglob("*") if p.is_file()}
    assert served == TREE
    assert all(oct(p.stat().st_mode & 0o777) == oct(0o644) for p in (srv / "current").rglob("*") if p.is_file())

    second = bundle.unpack(b2.tar, b2.manifest, str(srv))
    assert second["changed"] is True and second["previous"] == "b1"
    assert bundle.verify(b2.tar, b2.manifest, b2.sig, keys.site, key_file=keys.site_pub, base_dir=str(srv))["ok"]
    assert bundle.unpack(b2.tar, b2.manifest, str(srv))["changed"] is False
    assert os.readlink(srv / "current") == "releases/b2"
    now = {str(p.relative_to(tree)): p.read_bytes() for p in tree.rglob("*") if p.is_file()}
    assert {str(p.relative_to(srv / "current")): p.read_bytes()
            for p in (srv / "current").rglob("*") if p.is_file()} == now
    inherited = "pool/main/c/chrony/chrony_4.3_amd64.deb"
    assert (srv / "releases/b1" / inherited).stat().st_ino == (srv / "releases/b2" / inherited).stat().st_ino
    assert (srv / "releases/b1").is_dir() and (srv / "releases/b1.manifest.json").is_file()  # the rollback

    # a third release prunes the first; the second stays as the rollback
    write_tree(tree, {"pool/third.deb": b"3"})
    b3 = make_bundle(keys, tree, tmp_path / "out", "b3", base_manifest=b2.manifest)
    third = bundle.unpack(b3.tar, b3.manifest, str(srv))
    assert third["previous"] == "b2" and third["pruned"] == ["b1"]
    assert sorted(os.listdir(srv / "releases")) == ["b2", "b2.manifest.json", "b3", "b3.manifest.json"]
    assert (srv / "current" / inherited).read_bytes() == TREE[inherited]  # the link outlives the pruned release
    assert not [p for p in os.listdir(srv) if p.startswith(".")]


def test_current_is_switched_by_renaming_a_symlink_over_it(chain, monkeypatch):
    _, b1, b2, srv = chain
    bundle.unpack(b1.tar, b1.manifest, str(srv))
    seen = []
    real_replace = os.replace

    def replace(src, dst):
        if str(dst).endswith("/current"):
            seen.append((os.path.islink(src), os.readlink(src), os.readlink(dst), (Path(srv) / "releases/b2").is_dir()))
        return real_replace(src, dst)

    monkeypatch.setattr(bundle.os, "replace", replace)
    bundle.unpack(b2.tar, b2.manifest, str(srv))
    # one rename of a new symlink over the old one, made after the release was complete
    assert seen == [(True, "releases/b2", "releases/b1", True)]


def test_unpack_refuses_what_it_must_not_touch(chain, keys, tmp_path):  # noqa: F811
    _, b1, b2, srv = chain
    with pytest.raises(manifest.BundleError, match="made on b1, but .* serves no release"):
        bundle.unpack(b2.tar, b2.manifest, str(srv))
    bundle.unpack(b1.tar, b1.manifest, str(srv))
    impostor = make_bundle(keys, write_tree(tmp_path / "imp", {"y": b"y"}), tmp_path / "imp-out", "b1")
    with pytest.raises(manifest.BundleError, match="bundle ids must be unique"):
        bundle.unpack(impostor.tar, impostor.manifest, str(srv))
    plain = tmp_path / "plain"
    (plain / "current").mkdir(parents=True)
    with pytest.raises(manifest.BundleError, match="is not a symbolic link"):
        bundle.unpack(b1.tar, b1.manifest, str(plain))
    assert bundle.would_change(b2.manifest, str(srv)) is True and bundle.would_change(b1.manifest, str(srv)) is False


def test_an_unpack_that_fails_leaves_the_served_release_alone(chain, keys):  # noqa: F811
    _, b1, b2, srv = chain
    bundle.unpack(b1.tar, b1.manifest, str(srv))
    raw = bytearray(Path(b2.tar).read_bytes())
    with tarfile.open(b2.tar) as tar:
        raw[tar.getmembers()[-1].offset_data] ^= 1
    Path(b2.tar).write_bytes(bytes(raw))
    with pytest.raises(manifest.BundleError, match="changed since the bundle was verified"):
        bundle.unpack(b2.tar, b2.manifest, str(srv))
    assert os.readlink(srv / "current") == "releases/b1"
    assert sorted(os.listdir(srv / "releases")) == ["b1", "b1.manifest.json"]
