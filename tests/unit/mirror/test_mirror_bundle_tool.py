"""tools/kiln-bundle: create and verify from the command line, with real gpg; its exit codes
(create: 0 written, 2 nothing written; verify: 0 ok, 1 refused, 2 usage or I/O error)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kiln.mirror import bundle
from kiln_bundle_cases import TREE, STACK, keys, write_tree  # noqa: F401
from kiln_paths import REPO

TOOL = REPO / "tools" / "kiln-bundle"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, check=False, timeout=60)


def _create(keys, tree: Path, out: Path, name: str, *extra: str) -> subprocess.CompletedProcess:  # noqa: F811
    out.mkdir(parents=True, exist_ok=True)
    return _run("create", "--mirror", str(tree), "--out", str(out), "--name", name, "--gpg-home", keys.home,
                "--key", keys.site.lower(), *extra)


def _verify(keys, tar: Path, *extra: str) -> subprocess.CompletedProcess:  # noqa: F811
    return _run("verify", "--bundle", str(tar), "--key-file", keys.site_pub, "--fingerprint", keys.site, *extra)


@pytest.fixture
def made(tmp_path, keys):  # noqa: F811
    tree = write_tree(tmp_path / "tree", TREE)
    stacks = tmp_path / "stacks.json"
    stacks.write_text(json.dumps([STACK]))
    upstream = tmp_path / "upstream.json"
    upstream.write_text(json.dumps({"upstream_checks": [{"repository": "distribution", "verified": True}]}))
    proc = _create(keys, tree, tmp_path / "out", "site-1", "--stacks", str(stacks), "--upstream", str(upstream))
    assert proc.returncode == 0, proc.stderr
    return tree, tmp_path / "out" / "site-1.tar", proc


def test_create_writes_three_files_and_says_what_it_carries(made, keys):  # noqa: F811
    _, tar, proc = made
    out = tar.parent
    assert sorted(os.listdir(out)) == ["site-1.manifest.json", "site-1.manifest.json.asc", "site-1.tar"]
    total = sum(len(v) for v in TREE.values())
    assert proc.stdout.count("\n") == 1
    assert f"bundle site-1 (full): {len(TREE)} files carried, {total} bytes, 0 inherited" in proc.stdout
    doc = json.loads((out / "site-1.manifest.json").read_text())
    assert doc["stacks"] == [STACK] and doc["upstream_checks"] == [{"repository": "distribution", "verified": True}]
    assert doc["kiln_commit"] is None or len(doc["kiln_commit"]) == 40
    assert doc["schema"] == "kiln-mirror-bundle/1" and doc["created"].endswith("Z")


def test_verify_accepts_it_and_refuses_other_stacks(made, keys, tmp_path):  # noqa: F811
    _, tar, _ = made
    proc = _verify(keys, tar)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"OK: bundle site-1: {len(TREE)} files carried")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"stacks": [{"fingerprint": "stack-aaaa1111"}]}))
    assert _verify(keys, tar, "--stacks", str(plan)).returncode == 0
    wanted = tmp_path / "wanted.json"
    wanted.write_text(json.dumps(["stack-aaaa1111", "stack-zzzz9999"]))
    proc = _verify(keys, tar, "--stacks", str(wanted))
    assert proc.returncode == 1
    assert "REFUSED" in proc.stdout and "built for other stacks: missing stack-zzzz9999" in proc.stdout


def test_verify_prints_every_problem(made, keys):  # noqa: F811
    _, tar, _ = made
    raw = bytearray(tar.read_bytes())
    with tarfile.open(tar) as archive:
        members = archive.getmembers()
    for member in members[:2]:
        raw[member.offset_data] ^= 0xFF
    tar.write_bytes(bytes(raw))
    proc = _verify(keys, tar)
    assert proc.returncode == 1
    lines = [line for line in proc.stdout.splitlines() if line.startswith("  - ")]
    assert len(lines) == 3  # the archive's sha256, then each damaged file
    assert all(any(m.name in line for line in lines) for m in members[:2])


def test_create_never_overwrites_and_refuses_a_tree_with_links(made, keys, tmp_path):  # noqa: F811
    tree, tar, _ = made
    before = tar.read_bytes()
    proc = _create(keys, tree, tar.parent, "site-1")
    assert proc.returncode == 2 and "never overwritten" in proc.stderr and tar.read_bytes() == before
    (tree / "pool" / "link.deb").symlink_to("main/c/chrony/chrony_4.3_amd64.deb")
    proc = _create(keys, tree, tmp_path / "linked", "site-2")
    assert proc.returncode == 2 and "pool/link.deb (a symbolic link)" in proc.stderr
    assert os.listdir(tmp_path / "linked") == []


def test_a_key_gpg_cannot_sign_with_leaves_nothing(keys, tmp_path):  # noqa: F811
    tree = write_tree(tmp_path / "tree", {"a": b"a"})
    out = tmp_path / "out"
    out.mkdir()
    proc = _run("create", "--mirror", str(tree), "--out", str(out), "--name", "x", "--gpg-home", keys.home,
                "--key", "0" * 40)
    assert proc.returncode == 2 and "gpg could not sign" in proc.stderr
    assert os.listdir(out) == []


@pytest.mark.parametrize("args", [[], ["verify"], ["create", "--mirror", "m"], ["frobnicate"]])
def test_usage_errors_exit_2(args):
    assert _run(*args).returncode == 2


def test_io_errors_exit_2(made, keys, tmp_path):  # noqa: F811
    _, tar, _ = made
    assert _verify(keys, tmp_path / "absent.tar").returncode == 2
    (tar.parent / "site-1.manifest.json.asc").unlink()
    proc = _verify(keys, tar)
    assert proc.returncode == 2 and "site-1.manifest.json.asc" in proc.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert _verify(keys, tar, "--stacks", str(bad)).returncode == 2
    assert _verify(keys, tar.with_suffix(".tgz")).returncode == 2


def test_an_incremental_bundle_from_the_command_line(made, keys, tmp_path):  # noqa: F811
    tree, tar, _ = made
    (tree / "dists/bookworm/Release").write_bytes(b"Suite: bookworm\nDate: later\n")
    proc = _create(keys, tree, tar.parent, "site-2", "--base", str(tar.parent / "site-1.manifest.json"))
    assert proc.returncode == 0, proc.stderr
    assert f"bundle site-2 (incremental on site-1): 1 files carried" in proc.stdout
    assert f"{len(TREE) - 1} inherited" in proc.stdout
    second = tar.parent / "site-2.tar"
    srv = tmp_path / "srv"
    proc = _verify(keys, second, "--base-dir", str(srv))
    assert proc.returncode == 1 and "serves no release yet" in proc.stdout
    bundle.unpack(str(tar), str(tar.parent / "site-1.manifest.json"), str(srv))
    proc = _verify(keys, second, "--base-dir", str(srv))
    assert proc.returncode == 0, proc.stdout
    assert f"{len(TREE) - 1} inherited from site-1" in proc.stdout
    proc = _verify(keys, second)
    assert proc.returncode == 0 and proc.stdout.startswith("note: incremental bundle on site-1")
