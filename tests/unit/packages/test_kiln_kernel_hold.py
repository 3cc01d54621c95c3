"""The kernel hold (module_utils/kiln/packages/kernel_hold.py kernel_hold_names): the running kernel's packages and the
meta-packages of every installed kernel flavour, found in the package database -- issue 31 #11a.

The fixtures (tests/fixtures/kernel-hold/) are trimmed dpkg status files of hosts with different kernel
flavours and an rpm relations read; each test names what must be held and what must be left alone.
"""
from __future__ import annotations

import pytest
import yaml

from kiln.packages import kernel_hold as kp
from kiln_kernel_cases import FIX, dpkg_read

from kiln_paths import REPO
def held(name: str) -> list[str]:
    running, releases, relations, owners = dpkg_read(name)
    return kp.kernel_hold_names(running, "apt", relations, owners, releases)


def old_list(name: str) -> list[str]:
    """What the nvidia_driver role held before (a fixed list of names, the installed ones)."""
    running, _, relations, _ = dpkg_read(name)
    names = ["linux-image-{k}", "linux-headers-{k}", "linux-modules-{k}", "linux-modules-extra-{k}",
             "linux-image-amd64", "linux-image-arm64", "linux-headers-amd64", "linux-headers-arm64",
             "linux-image-cloud-amd64", "linux-generic", "linux-image-generic", "linux-headers-generic",
             "linux-generic-hwe-22.04", "linux-image-generic-hwe-22.04", "linux-headers-generic-hwe-22.04",
             "linux-generic-hwe-24.04", "linux-image-generic-hwe-24.04", "linux-headers-generic-hwe-24.04"]
    installed = set(kp._dpkg_relations(relations))
    return sorted(n.format(k=running) for n in names if n.format(k=running) in installed)


def test_debian_rt_holds_the_rt_flavour_and_the_standard_meta():
    got = held("debian12-rt.status")
    assert got == ["linux-headers-6.1.0-18-rt-amd64", "linux-headers-rt-amd64", "linux-image-6.1.0-18-rt-amd64",
                   "linux-image-amd64", "linux-image-rt-amd64"]
    # the list missed the rt flavour's meta-packages: an upgrade of linux-image-rt-amd64 pulls a new kernel
    assert {"linux-image-rt-amd64", "linux-headers-rt-amd64"} - set(old_list("debian12-rt.status"))


def test_ubuntu_nvidia_kernel_holds_linux_nvidia_and_the_generic_metas():
    got = held("ubuntu2404-nvidia.status")
    assert got == ["linux-generic", "linux-headers-6.8.0-1010-nvidia", "linux-headers-generic",
                   "linux-headers-nvidia", "linux-image-6.8.0-1010-nvidia", "linux-image-generic",
                   "linux-image-nvidia", "linux-modules-6.8.0-1010-nvidia", "linux-modules-extra-6.8.0-1010-nvidia",
                   "linux-modules-nvidia-550-server-open-6.8.0-1010-nvidia", "linux-modules-nvidia-550-server-open-nvidia",
                   "linux-nvidia", "linux-signatures-nvidia-6.8.0-1010-nvidia"]
    # the other kernel's own packages, the dependencies of the metas, what wants a virtual package: left alone
    for name in ("linux-image-6.8.0-45-generic", "linux-modules-6.8.0-45-generic", "linux-headers-6.8.0-45",
                 "linux-nvidia-headers-6.8.0-1010", "linux-firmware", "intel-microcode", "zfsutils-linux",
                 "ubuntu-server", "nvidia-kernel-common-550-server"):
        assert name not in got
    assert {"linux-nvidia", "linux-image-nvidia", "linux-headers-nvidia"} - set(old_list("ubuntu2404-nvidia.status"))


@pytest.mark.parametrize("flavour", ["aws", "azure", "gcp"])
def test_ubuntu_cloud_kernels_hold_their_metas(flavour):
    got = held(f"ubuntu2404-{flavour}.status")
    rel = f"6.8.0-1015-{flavour}"
    assert got == sorted([f"linux-{flavour}", f"linux-headers-{flavour}", f"linux-headers-{rel}", f"linux-image-{flavour}",
                          f"linux-image-{rel}", f"linux-modules-{rel}", f"linux-tools-{flavour}", f"linux-tools-{rel}"])
    assert f"linux-{flavour}-headers-6.8.0-1015" not in got and "cloud-init" not in got
    assert {f"linux-{flavour}", f"linux-image-{flavour}"} - set(old_list(f"ubuntu2404-{flavour}.status"))


def test_ubuntu_hwe_holds_the_hwe_and_the_ga_metas():
    got = held("ubuntu2204-hwe.status")
    assert got == ["linux-generic", "linux-generic-hwe-22.04", "linux-headers-6.5.0-41-generic", "linux-headers-generic",
                   "linux-headers-generic-hwe-22.04", "linux-image-6.5.0-41-generic", "linux-image-generic",
                   "linux-image-generic-hwe-22.04", "linux-modules-6.5.0-41-generic",
                   "linux-modules-extra-6.5.0-41-generic"]
    assert set(old_list("ubuntu2204-hwe.status")) <= set(got)  # what the list held is still held


def test_debian_standard_kernel_is_held_as_before():
    got = held("debian12-amd64.status")
    assert got == ["linux-headers-6.1.0-28-amd64", "linux-headers-amd64", "linux-image-6.1.0-28-amd64",
                   "linux-image-amd64"]
    assert set(old_list("debian12-amd64.status")) <= set(got)


def test_a_container_without_kernel_packages_holds_nothing():
    assert held("container.status") == []


def test_the_image_owner_counts_where_the_name_does_not_say_the_release():
    running, releases, relations, _ = dpkg_read("debian12-amd64.status")
    relations += "custom-kernel-image\tii \t\tkmod\ncustom-kernel-meta\tii \t\tcustom-kernel-image (>= 1)\n"
    owners = ("custom-kernel-image: /boot/vmlinuz-6.1.0-28-amd64\n"
              "diversion by custom-kernel-image from: /boot/vmlinuz-6.1.0-28-amd64\n")
    got = kp.kernel_hold_names(running, "apt", relations, owners, releases)
    assert {"custom-kernel-image", "custom-kernel-meta"} <= set(got)


def test_rpm_holds_every_flavour_by_name():
    text = (FIX / "rocky9.rpmqa").read_text()
    head, _, relations = text.partition("\n")
    releases = head.removeprefix("# boot:").split()
    standard, rt = releases[0], releases[1]
    got = kp.kernel_hold_names(standard, "dnf", relations, "", releases)
    assert {"kernel", "kernel-core", "kernel-modules", "kernel-modules-core", "kernel-modules-extra", "kernel-devel",
            "kernel-headers", "kernel-rt", "kernel-rt-core", "kernel-rt-modules"} <= set(got)
    assert not {"kmod-nvidia-open-dkms", "glibc-devel", "dracut", "bash"} & set(got)
    on_rt = kp.kernel_hold_names(rt, "dnf", relations, "", releases)
    assert {"kernel-rt", "kernel-rt-core", "kernel-rt-modules", "kernel", "kernel-core"} <= set(on_rt)
    owners = f"/boot/vmlinuz-{rt}\tkernel-rt-core\t{standard}\n"
    assert "kernel-rt" in kp.kernel_hold_names(rt, "dnf", relations, owners, [rt])


@pytest.mark.parametrize(("args", "match"), [
    (("", "apt", ""), "running kernel release must be a word"),
    (("6.1.0 x", "apt", ""), "running kernel release must be a word"),
    (("6.1.0-28-amd64", "zypper", ""), "unsupported package manager"),
    (("6.1.0-28-amd64", "apt", None), "relations read must be text"),
    (("6.1.0-28-amd64", "apt", "a\tb\n"), "has 2 fields, not 4"),
    (("6.1.0-28-amd64", "dnf", "kernel\t1\n"), "has 2 fields, not 4"),
])
def test_refuses_what_it_cannot_read(args, match):
    with pytest.raises(kp.KernelHoldError, match=match):
        kp.kernel_hold_names(*args)


def test_the_role_holds_what_the_module_finds_not_a_list():
    tasks = yaml.safe_load((REPO / "roles" / "nvidia_driver" / "tasks" / "install.yml").read_text())
    find = next(t for t in tasks if "kiln_kernel_packages" in t)
    assert find["kiln_kernel_packages"]["kernel"] == "{{ ansible_facts['kernel'] }}"
    hold = next(t for t in tasks if "Hold the kernel" in t["name"])
    assert hold["vars"]["packages_hold"] == "{{ " + find["register"] + ".names }}"
    variables = yaml.safe_load((REPO / "roles" / "nvidia_driver" / "vars" / "main.yml").read_text())
    assert "__nvidia_driver_kernel_packages" not in variables
