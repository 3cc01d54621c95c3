"""The fixture of NVIDIA's repositories: real dpkg/apt formats, signed, names matching kiln_pkg."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import fixture_repo  # noqa: E402

from kiln_compat_engine.packages import kiln_packages  # noqa: E402

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("dpkg-deb", "dpkg-scanpackages", "gpg", "gcc")),
    reason="needs dpkg-deb, dpkg-scanpackages, gpg and gcc (installed by tests/harness/testbed.sh)")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    out = tmp_path_factory.mktemp("fixture") / "repo"
    fixture_repo.build(out)
    return out


def packages_index(repo: Path, rel: str) -> dict[tuple[str, str], dict[str, str]]:
    out = {}
    for stanza in (repo / rel / "Packages").read_text().strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        out[(fields["Package"], fields["Version"])] = fields
    return out


def test_signed_and_verifiable(repo):
    fpr = (repo / "fingerprint.txt").read_text().strip()
    assert len(fpr) == 40
    for rel in ("compute/cuda/repos/debian12/x86_64", "libnvidia-container/stable/deb/amd64"):
        keyring = repo / "kr.gpg"
        subprocess.run(["gpg", "--batch", "--dearmor", "-o", str(keyring), "--yes", str(repo / "key.asc")], check=True)
        subprocess.run(["gpgv", "--keyring", str(keyring), str(repo / rel / "InRelease")], check=True,
                       capture_output=True)


def test_every_package_kiln_renders_for_the_test_stack_exists(repo):
    stack = {"os": "debian-12", "driver": "580.95.05", "cuda": "13.0.2", "cudnn": "9.17.1.4",
             "nccl": "2.28.7-1+cuda13.0", "container_toolkit": "1.20.0", "dcgm": "4.6.0",
             "dcgm_exporter": "4.6.0-4.8.3", "fabricmanager": "580.95.05"}
    index = {**packages_index(repo, "compute/cuda/repos/debian12/x86_64"),
             **packages_index(repo, "libnvidia-container/stable/deb/amd64")}
    for comp, specs in kiln_packages(stack).items():
        if comp not in ("driver", "driver_companions", "fabricmanager", "cuda", "cudnn", "nccl", "container_toolkit",
                        "dcgm", "dcgm_exporter"):
            continue  # distribution packages come from the Debian mirror, not the fixture repository
        for spec in specs:
            name, version = spec.split("=", 1)
            assert (name, version.split(":")[-1]) in {(n, v.split(":")[-1]) for n, v in index}, spec


def test_driver_module_carries_modinfo_version(repo, tmp_path):
    deb = next((repo / "compute/cuda/repos/debian12/x86_64").glob("nvidia-kernel-open-dkms_580.173.02-1_amd64.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    ko = tmp_path / "usr/src/nvidia-580.173.02/nvidia.ko"
    assert ko.read_bytes()[:4] == b"\x7fELF"
    assert b"version=580.173.02" in ko.read_bytes()


def test_manifest_two_driver_releases_for_the_upgrade_test():
    manifest = yaml.safe_load(fixture_repo.MANIFEST.read_text())
    assert len(manifest["driver_versions"]) == 2
