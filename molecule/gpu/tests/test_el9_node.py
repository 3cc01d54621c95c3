"""Verify the GPU node stack on the EL 9 node (Rocky 9 identity over the test-bed root).

What this node proves: kiln's EL branches -- os_family RedHat, pkg_mgr dnf, the rhel9 repository
layout, yum_repository files with gpgcheck and the verified key imported with its exact
fingerprint, the nvidia-driver module stream enabled before the install (its packages are
invisible to dnf until then), exact NEVRAs installed and version-locked, the driver upgrade of
the side effect through dnf, the EL package names. What it does not prove: Rocky's own userland
(the programs are Debian's; the distribution's packages are stand-ins in a fixture repository).
Runs after the side effect upgraded the driver 580.95.05 -> 580.173.02 within the 580-open stream and
then changed its branch to 590 (the stream switched to 590-open), and the toolkit to 1.20.0.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "molecule"))
from kiln_testinfra import podman_hosts  # noqa: E402

testinfra_hosts = podman_hosts("el9")

DRIVER = "590.48.01"
# name -> version-release, exactly as kiln_pkg renders them for rhel-9
PINNED = {
    "nvidia-open": f"{DRIVER}-1.el9",
    "cuda-toolkit-13-0": "13.0.2-1",
    "libcudnn9-cuda-13": "9.17.1.4-1",
    "libcudnn9-devel-cuda-13": "9.17.1.4-1",
    "libnccl": "2.28.7-1+cuda13.0",
    "libnccl-devel": "2.28.7-1+cuda13.0",
    "nvidia-container-toolkit": "1.20.0-1",
    "libnvidia-container1": "1.20.0-1",
    "datacenter-gpu-manager-4-cuda13": "4.6.0-1",
}


def rpm_version(host, name: str) -> str:
    return host.check_output(f"rpm -q --qf '%{{VERSION}}-%{{RELEASE}}\\n' {name}").strip()


def test_the_node_is_el9_shaped(host):
    # what Ansible's facts read (os_family RedHat, pkg_mgr dnf); kiln's dnf branch having run is
    # shown by the repository files, keys and locks below
    assert 'ID="rocky"' in host.file("/etc/os-release").content_string
    assert host.file("/etc/redhat-release").content_string.startswith("Rocky Linux release 9")
    assert rpm_version(host, "rocky-release") == "9.4-1.7.el9"


@pytest.mark.parametrize(("name", "version"), sorted(PINNED.items()))
def test_exact_versions_installed_and_versionlocked(host, name, version):
    assert rpm_version(host, name) == version
    locks = host.file("/etc/dnf/plugins/versionlock.list").content_string.split()
    assert any(lock.startswith(f"{name}-") and version in lock for lock in locks), locks


def test_driver_stream_enabled_and_its_packages_from_it(host):
    state = host.file("/etc/dnf/modules.d/nvidia-driver.module").content_string
    assert "stream=590-open" in state and "state=enabled" in state
    # the open flavor's kernel module package, pulled in at the driver's version; never the proprietary one
    assert rpm_version(host, "kmod-nvidia-open-dkms") == f"{DRIVER}-1.el9"
    assert host.run("rpm -q kmod-nvidia-latest-dkms").rc != 0
    assert host.run("rpm -q cuda-drivers").rc != 0


def test_modular_filtering_is_real(host):
    # the repository carries both flavors and both branches; dnf shows only the enabled stream's
    # (590-open): the proprietary metapackage (590-dkms) and the 580 branch's releases are filtered
    # out, as on a real EL 9 node
    visible = host.run("dnf -q list --showduplicates nvidia-open")
    # dnf answered (the installed 590 driver is listed), and no release of the 580 branch
    assert visible.rc == 0 and f"{DRIVER}-1.el9" in visible.stdout, visible.stdout + visible.stderr
    assert "580." not in visible.stdout
    # cuda-drivers is in the repository (below) but dnf finds no match: filtered out
    hidden = host.run("dnf -q list --showduplicates cuda-drivers")
    assert hidden.rc != 0 and "cuda-drivers" not in hidden.stdout
    assert host.check_output("find /srv/kiln-fixture-repo/compute/cuda/repos/rhel9/x86_64/ "
                             f"-name cuda-drivers-{DRIVER}-1.el9.x86_64.rpm")


def test_repositories_gpgchecked_with_the_pinned_key(host):
    fpr = host.check_output("gpg --batch --with-colons --show-keys /etc/pki/rpm-gpg/kiln-cuda.asc")
    fprs = [line.split(":")[9] for line in fpr.splitlines() if line.startswith("fpr:")]
    assert len(fprs) == 1
    for name in ("cuda", "nvidia-container-toolkit"):
        repo = host.file(f"/etc/yum.repos.d/kiln-{name}.repo").content_string
        assert "gpgcheck = 1" in repo or "gpgcheck=1" in repo
        assert f"gpgkey = file:///etc/pki/rpm-gpg/kiln-{name}.asc" in repo or \
            f"gpgkey=file:///etc/pki/rpm-gpg/kiln-{name}.asc" in repo
    assert "rhel9/x86_64" in host.file("/etc/yum.repos.d/kiln-cuda.repo").content_string
    # the key is in rpm's database under its key id, and the installed driver's signature is that key's
    keyid = fprs[0][-8:].lower()
    keys = host.check_output("rpm -qa 'gpg-pubkey*'")
    assert f"gpg-pubkey-{keyid}" in keys
    # the distribution stand-in has a key of its own (imported by prepare, as a Rocky image has Rocky's):
    # NVIDIA's fixture key above got into rpm's database only through kiln's rpm_key
    dist = host.check_output("gpg --batch --with-colons --show-keys /srv/kiln-fixture-repo/el9/base/x86_64/key.asc")
    dist_fprs = [line.split(":")[9] for line in dist.splitlines() if line.startswith("fpr:")]
    assert len(dist_fprs) == 1 and dist_fprs[0] != fprs[0]
    assert f"gpg-pubkey-{dist_fprs[0][-8:].lower()}" in keys
    sig = [line for line in host.check_output("rpm -qi nvidia-open").splitlines() if line.startswith("Signature")]
    assert sig and fprs[0][-16:].lower() in sig[0].lower(), sig


def test_driver_module_for_running_kernel_and_the_rolled_one(host):
    kernel = host.check_output("uname -r")
    assert host.check_output(f"modinfo -k {kernel} -F version nvidia") == DRIVER
    fact = json.loads(host.file("/etc/ansible/facts.d/kiln_driver.fact").content_string)
    rolled = [k for k in fact["kernels_checked"] if k.endswith("-kiln-fixture-roll")]
    assert len(rolled) == 1, fact
    assert host.check_output(f"modinfo -k {rolled[0]} -F version nvidia") == DRIVER
    assert host.file(f"/lib/modules/{rolled[0]}/extra/nvidia.ko").exists


def test_nvidia_smi_and_the_driver_fact(host):
    out = host.check_output("nvidia-smi --query-gpu=driver_version,name --format=csv,noheader")
    rows = [r.split(", ") for r in out.splitlines()]
    assert {r[0] for r in rows} == {DRIVER}
    assert len(rows) == 2
    fact = json.loads(host.file("/etc/ansible/facts.d/kiln_driver.fact").content_string)
    assert fact["driver"] == DRIVER
    assert fact["fabricmanager"] is False


def test_cuda_and_dcgm(host):
    out = host.check_output("bash -lc 'nvcc --version'")
    assert "release 13.0" in out
    assert host.service("nvidia-dcgm").is_running
    assert "2 GPUs found" in host.check_output("dcgmi discovery -l")


def test_no_apt_state_written(host):
    # an EL host gets no apt configuration from kiln (the OS branches, not a when: per task)
    assert not host.file("/etc/apt/sources.list.d/kiln-cuda.sources").exists
    assert host.run("ls /etc/apt/apt.conf.d/51kiln-hold-* 2>/dev/null").stdout.strip() == ""
