"""The fixture's release artifacts (manifest section `releases`): Enroot's packages and the Pyxis stand-in
source archive, with real file names, and their sha256 as the scenarios read them."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from kiln_paths import REPO as ROOT
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import fixture_repo  # noqa: E402

from kiln_compat_engine.packages import kiln_tool  # noqa: E402

needs_dpkg = pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="needs dpkg-deb (tests/harness/testbed.sh)")


def manifest() -> dict:
    return yaml.safe_load(fixture_repo.MANIFEST.read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("releases")
    work = tmp_path_factory.mktemp("work")
    sums = fixture_repo.build_releases(manifest(), out, work)
    return out, sums


def test_release_files_carry_the_real_names():
    paths = {item["path"] for item in fixture_repo.release_specs(manifest())}
    assert "releases/enroot/v3.5.0/enroot_3.5.0-1_amd64.deb" in paths
    assert "releases/enroot/v3.5.0/enroot+caps_3.5.0-1_amd64.deb" in paths
    assert "releases/pyxis/v0.20.0.tar.gz" in paths


@pytest.mark.parametrize("tool", ["enroot", "pyxis"])
def test_release_layout_matches_the_download_urls_kiln_renders(tool):
    # The fixture mirrors the layout of the URL kiln_tool gives, so a site mirror works the same way.
    for item in fixture_repo.release_specs(manifest()):
        if item["tool"] != tool:
            continue
        url = kiln_tool(tool, item["version"])["url"]
        name = item["path"].rsplit("/", 1)[1]
        if tool == "enroot":
            assert url.endswith(f"/v{item['version']}/")
            assert item["path"] == f"releases/enroot/v{item['version']}/{name}"
        else:
            assert url.endswith(f"/{name}")


@needs_dpkg
def test_checksums_written_match_the_files(built):
    out, sums = built
    listed = {}
    for line in (out / "releases" / "SHA256SUMS").read_text().splitlines():
        digest, rel = line.split("  ", 1)
        listed[rel] = digest
        assert hashlib.sha256((out / "releases" / rel).read_bytes()).hexdigest() == digest
    assert set(listed) == {"enroot/v3.5.0/enroot_3.5.0-1_amd64.deb", "enroot/v3.5.0/enroot+caps_3.5.0-1_amd64.deb",
                           "pyxis/v0.20.0.tar.gz"}
    assert json.loads((out / "releases" / "sha256sums.json").read_text()) == sums
    assert sums["pyxis"]["0.20.0"]["v0.20.0.tar.gz"] == listed["pyxis/v0.20.0.tar.gz"]
    assert sums["enroot"]["3.5.0"]["enroot_3.5.0-1_amd64.deb"] == listed["enroot/v3.5.0/enroot_3.5.0-1_amd64.deb"]
    subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=out / "releases", check=True)


@needs_dpkg
def test_enroot_packages_control_and_contents(built, tmp_path):
    out, _ = built
    rel = out / "releases" / "enroot" / "v3.5.0"
    field = lambda deb, name: subprocess.run(["dpkg-deb", "--field", str(rel / deb), name], check=True,  # noqa: E731
                                             capture_output=True, text=True).stdout.strip()
    assert field("enroot_3.5.0-1_amd64.deb", "Package") == "enroot"
    assert field("enroot_3.5.0-1_amd64.deb", "Version") == "3.5.0-1"
    assert field("enroot+caps_3.5.0-1_amd64.deb", "Depends") == "enroot (= 3.5.0-1), libcap2-bin"
    subprocess.run(["dpkg-deb", "-x", str(rel / "enroot_3.5.0-1_amd64.deb"), str(tmp_path)], check=True)
    for path in ("usr/bin/enroot", "usr/share/enroot/hooks.d/50-slurm-pmi.sh",
                 "usr/share/enroot/hooks.d/50-slurm-pytorch.sh", "etc/enroot/enroot.conf"):
        assert (tmp_path / path).is_file(), path
    assert os.access(tmp_path / "usr/share/enroot/hooks.d/50-slurm-pmi.sh", os.X_OK)
    env = dict(os.environ, KILN_ENROOT_VERSION_FILE=str(tmp_path / "usr/share/kiln-fixture/enroot.version"))
    run = lambda *args: subprocess.run([sys.executable, str(tmp_path / "usr/bin/enroot"), *args], env=env,  # noqa: E731
                                       capture_output=True, text=True)
    assert run("version").stdout.strip() == "3.5.0"
    assert run("list").returncode == 0
    refused = run("import", "docker://ubuntu")
    assert refused.returncode == 1 and "stand-in" in refused.stderr
    # the caps package's postinst is shell text, never a format string
    control = tmp_path / "caps"
    subprocess.run(["dpkg-deb", "-e", str(rel / "enroot+caps_3.5.0-1_amd64.deb"), str(control)], check=True)
    assert "setcap cap_sys_admin+pe /usr/bin/enroot-mksquashovlfs" in (control / "postinst").read_text()


@needs_dpkg
def test_pyxis_standin_archive_layout(built):
    out, _ = built
    with tarfile.open(out / "releases" / "pyxis" / "v0.20.0.tar.gz") as tar:
        names = tar.getnames()
        members = tar.getmembers()
    assert all(n == "pyxis-0.20.0" or n.startswith("pyxis-0.20.0/") for n in names), names
    assert {"pyxis-0.20.0/Makefile", "pyxis-0.20.0/pyxis_standin.c", "pyxis-0.20.0/README.md"} <= set(names)
    assert all(m.uid == 0 and m.gid == 0 and m.mtime == 0 for m in members)
    assert not any(n.startswith("/") or ".." in n.split("/") for n in names)


def test_pyxis_standin_archive_is_reproducible(tmp_path):
    a = fixture_repo.source_tarball(fixture_repo.FIXTURES / "pyxis-standin", "pyxis-0.20.0", tmp_path / "a.tar.gz")
    b = fixture_repo.source_tarball(fixture_repo.FIXTURES / "pyxis-standin", "pyxis-0.20.0", tmp_path / "b.tar.gz")
    assert a.read_bytes() == b.read_bytes()


def test_pyxis_standin_registers_the_real_options():
    source = (fixture_repo.FIXTURES / "pyxis-standin" / "pyxis_standin.c").read_text()
    assert "SPANK_PLUGIN(pyxis, 1)" in source
    for option in ("container-image", "container-mounts", "container-workdir", "container-name",
                   "container-mount-home", "container-remap-root", "container-entrypoint"):
        assert f'{{"{option}",' in source, option
    assert 'spank_setenv(sp, "PYXIS_STANDIN_IMAGE"' in source


@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("make") and Path("/usr/include/slurm/spank.h").exists()),
                    reason="needs gcc, make and Slurm's SPANK headers (libslurm-dev)")
def test_pyxis_standin_builds_against_slurm_headers(tmp_path):
    shutil.copytree(fixture_repo.FIXTURES / "pyxis-standin", tmp_path / "src")
    subprocess.run(["make"], cwd=tmp_path / "src", check=True, capture_output=True)
    symbols = subprocess.run(["nm", "-D", str(tmp_path / "src" / "spank_pyxis.so")], check=True,
                             capture_output=True, text=True).stdout
    for symbol in ("plugin_name", "plugin_type", "plugin_version", "spank_options", "slurm_spank_user_init"):
        assert symbol in symbols


def test_hash_covers_the_release_inputs():
    inputs = {p.relative_to(fixture_repo.FIXTURES).as_posix() for p in fixture_repo.inputs()
              if fixture_repo.FIXTURES in p.parents}
    assert {"pyxis-standin/pyxis_standin.c", "pyxis-standin/Makefile", "enroot-release/enroot.conf",
            "enroot-release/hooks/50-slurm-pmi.sh", "emulators/enroot"} <= inputs


def test_hash_changes_with_a_release_input(tmp_path, monkeypatch):
    fixtures = tmp_path / "tests" / "fixtures"
    shutil.copytree(fixture_repo.FIXTURES, fixtures, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "tests" / "harness").mkdir()
    script = shutil.copy(fixture_repo.__file__, tmp_path / "tests" / "harness" / "fixture_repo.py")
    monkeypatch.setattr(fixture_repo, "__file__", str(script))
    monkeypatch.setattr(fixture_repo, "FIXTURES", fixtures)
    monkeypatch.setattr(fixture_repo, "MANIFEST", fixtures / "nvidia-repo" / "manifest.yml")
    before = fixture_repo.input_hash()
    (fixtures / "pyxis-standin" / "pyxis_standin.c").write_text("/* changed */\n")
    assert fixture_repo.input_hash() != before


def test_a_manifest_without_releases_builds_none(tmp_path):
    assert fixture_repo.release_specs({"repos": {}}) == []
    assert fixture_repo.build_releases({"repos": {}}, tmp_path, tmp_path) == {}
    assert not (tmp_path / "releases").exists()


@needs_dpkg
def test_postinst_with_braces_is_not_formatted(tmp_path):
    entry = {"releases": {"tool": {"versions": ["1.0"], "dir": "releases/tool/v{version}",
                                   "debs": [{"name": "tool", "version": "{version}-1", "description": "d",
                                             "postinst": "#!/bin/sh\necho ${HOME} {version}\n"}]}}}
    spec = fixture_repo.release_specs(entry)[0]
    assert spec["spec"]["version"] == "1.0-1" and spec["spec"]["postinst"].endswith("echo ${HOME} {version}\n")
    sums = fixture_repo.build_releases(entry, tmp_path / "out", tmp_path)
    assert list(sums["tool"]["1.0"]) == ["tool_1.0-1_amd64.deb"]
