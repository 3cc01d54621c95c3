"""Verify the air-gapped EL 9 node: no route out, dnf reads only the site mirror, and every rpm came from it.

What is real: podman's internal network, dnf/rpm and their signature checks (repo_gpgcheck on the site-signed
repomd.xml, gpgcheck on the re-signed packages), the module stream metadata the mirror carries, nginx's log.
What is a fixture: the node is Rocky 9's identity over the test-bed root (tests/harness/os/rocky-9); the
distribution's packages are the fixture's stand-ins and NVIDIA's its signed fixture, mirrored like the real ones.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "molecule"))
from kiln_testinfra import podman_hosts  # noqa: E402

testinfra_hosts = podman_hosts("el9")
ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / ".cache" / "airgap-mirror"
MIRROR = "http://kiln-airgap-mirror/"
# name -> version-release, as kiln_pkg renders them for rhel-9
PINNED = {
    "nvidia-open": "580.95.05-1.el9",
    "cuda-toolkit-13-0": "13.0.2-1",
    "libcudnn9-cuda-13": "9.17.1.4-1",
    "libnccl": "2.28.7-1+cuda13.0",
    "nvidia-container-toolkit": "1.19.1-1",
    "datacenter-gpu-manager-4-cuda13": "4.6.0-1",
}


def _contents() -> dict:
    return json.loads((OUT / "work" / "contents.json").read_text())


def test_no_route_out(host):
    assert "default" not in host.check_output("ip -4 route")


def test_dnf_reads_only_the_site_mirror(host):
    repos = host.check_output("cat /etc/yum.repos.d/*.repo")
    urls = re.findall(r"^baseurl\s*=\s*(\S+)", repos, re.MULTILINE)
    assert urls and all(u.startswith(MIRROR) for u in urls), urls
    assert "kiln-distribution-base" in repos
    # repository metadata and packages checked against keys, the site's among them
    checks = [line.replace(" ", "") for line in re.findall(r"^gpgcheck\s*=.*$", repos, re.MULTILINE)]
    assert len(checks) == len(urls) and set(checks) == {"gpgcheck=1"}, checks


def test_exact_versions_from_the_mirror_installed_and_locked(host):
    locks = host.file("/etc/dnf/plugins/versionlock.list").content_string.split()
    for name, version in PINNED.items():
        assert host.check_output(f"rpm -q --qf '%{{VERSION}}-%{{RELEASE}}' {name}") == version, name
        assert any(lock.startswith(f"{name}-") and version in lock for lock in locks), (name, locks)
    assert "nvidia-driver:580-open" in host.check_output("dnf -C module list --enabled nvidia-driver 2>/dev/null "
                                                          "| awk '{print $1\":\"$2}'")


def test_every_installed_rpm_came_from_the_mirror(host):
    served = {(p["name"], f"{p['version']}-{p['release']}") for p in _contents()["packages"] if "release" in p}
    installed = [tuple(line.split(" ", 1)) for line in
                 host.check_output("rpm -qa --qf '%{NAME} %{VERSION}-%{RELEASE}\\n'").splitlines()]
    # the image's own: rocky-release (installed in prepare, as a Rocky image has it) and the keys rpm trusts
    outside = [f"{n}-{v}" for n, v in installed if (n, v) not in served and n not in ("rocky-release", "gpg-pubkey")]
    assert len(installed) > 20 and not outside, outside


def test_the_site_key_is_what_rpm_trusts_for_the_mirror(host):
    fpr = os.environ["KILN_SITE_FPR"]
    keys = host.check_output("rpm -q gpg-pubkey --qf '%{VERSION}\\n'").split()
    assert fpr[-8:].lower() in keys, (fpr, keys)


def test_mirror_log_shows_the_el_node_fetching(host):
    log = subprocess.run(["podman", "exec", "kiln-airgap-mirror", "cat", "/var/log/nginx/kiln-mirror.access.log"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    ip = host.check_output("hostname -I").split()[0]
    paths = " ".join(line for line in log.splitlines() if line.startswith(ip + " "))
    for path in ("/distribution/rocky-9/base/x86_64/os/repodata/repomd.xml.asc", "/cuda/rhel9/x86_64/",
                 "/libnvidia-container/stable/rpm/x86_64/"):
        assert path in paths, path


def test_common_regenerated_the_initramfs_with_dracut(host):
    """The nouveau blacklist reached the initramfs through EL's dracut (the stand-in records the call)."""
    assert "dracut --force" in host.file("/var/log/kiln-fixture-dracut.log").content_string
