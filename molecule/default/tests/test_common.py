"""Verify the `common` role on the default scenario's two nodes (real host state)."""
from __future__ import annotations

import json
import time

import pytest

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "molecule"))
from kiln_testinfra import podman_hosts  # noqa: E402

testinfra_hosts = podman_hosts()


def test_chrony_installed_and_held(host):
    assert host.package("chrony").is_installed
    held = host.check_output("apt-mark showhold").split()
    assert "chrony" in held


def test_unattended_upgrades_exclude_held_packages(host):
    conf = host.file("/etc/apt/apt.conf.d/51kiln-hold-common")
    assert conf.exists
    assert conf.mode == 0o644
    assert '"^chrony$";' in conf.content_string
    # apt itself parses the file and sees the list
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    assert "^chrony$" in dump


def test_nouveau_blacklisted(host):
    conf = host.file("/etc/modprobe.d/kiln-blacklist-nouveau.conf")
    assert conf.is_file
    assert conf.user == "root"
    assert conf.mode == 0o644
    assert "blacklist nouveau" in conf.content_string
    assert "options nouveau modeset=0" in conf.content_string
    # the handler ran: an initramfs tool is installed and was invoked
    assert host.package("initramfs-tools").is_installed


def test_chrony_running_without_touching_the_clock(host):
    service = host.service("chrony")
    assert service.is_running
    assert service.is_enabled
    opts = host.file("/etc/default/chrony").content_string
    assert 'DAEMON_OPTS="-F 1 -x"' in opts
    assert "pool " not in host.file("/etc/chrony/chrony.conf").content_string


def test_kernel_headers_reported_as_skipped_not_installed(host):
    """No headers package exists for the host's kernel: must say skipped."""
    fact = json.loads(host.file("/etc/ansible/facts.d/kiln_common.fact").content_string)
    kernel = host.check_output("uname -r")
    assert fact["kernel"] == kernel
    assert fact["kernel_headers"]["package"] == f"linux-headers-{kernel}"
    assert fact["kernel_headers"]["status"] == "skipped"
    assert "no package" in fact["kernel_headers"]["reason"]
    assert not host.package(f"linux-headers-{kernel}").is_installed


def test_time_served_between_nodes(host):
    """node2 synchronises from node1 across the test network."""
    name = host.check_output("hostname")
    if name.endswith("node1"):
        conf = host.file("/etc/chrony/chrony.conf").content_string
        assert "allow 10.89.77.0/24" in conf
        assert "local stratum 8" in conf
        return
    assert "server kiln-default-node1 iburst" in host.file("/etc/chrony/chrony.conf").content_string
    reach = 0
    for _ in range(30):
        out = host.check_output("chronyc -n -c sources")
        # CSV: mode,state,address,stratum,poll,reach,...
        rows = [line.split(",") for line in out.splitlines() if line]
        if rows:
            reach = int(rows[0][5], 8)
            if reach > 0:
                break
        time.sleep(1)
    assert reach > 0, f"node2 never reached node1's chronyd: {out!r}"
    tracking = host.check_output("chronyc -c tracking").split(",")
    assert int(tracking[2]) == 9, f"node2 should sit one stratum below node1 (8): {tracking}"


def test_each_node_has_its_os_identity(host):
    # node2 is the Ubuntu 22.04 node (tests/harness/os/ubuntu-22.04): the same role, its Ubuntu branch
    release = host.file("/etc/os-release").content_string
    if host.check_output("hostname").endswith("node2"):
        assert "ID=ubuntu" in release and 'VERSION_ID="22.04"' in release
        assert "DISTRIB_CODENAME=jammy" in host.file("/etc/lsb-release").content_string
    else:
        assert "ID=debian" in release and 'VERSION_ID="12"' in release


@pytest.mark.parametrize("path", ["/etc/ansible/facts.d/kiln_common.fact"])
def test_local_fact_mode(host, path):
    assert host.file(path).mode == 0o644
