"""Package planning filters (module_utils/kiln/packages/pkgdb.py, registry filter_plugins/kiln_package_filters.py) used by the packages role's pinned_install."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

import kiln_package_filters
from kiln_package_filters import FilterModule
from kiln.packages.pkgdb import (
    kiln_format_change,
    kiln_kernel_key,
    kiln_kernels_to_check,
)
from kiln.packages.pkgdb import kiln_pkg_plan_filter as kiln_pkg_plan
from kiln.packages.pkgdb import kiln_pkg_split_filter as kiln_pkg_split

# package_facts output as recorded on a Debian 12 node of the gpu scenario
APT_FACTS = {
    "nvidia-open-580": [{"name": "nvidia-open-580", "version": "580.95.05-1", "arch": "amd64",
                         "category": "multiverse/libs", "origin": "kiln-fixture", "source": "apt"}],
    "libnccl2": [{"name": "libnccl2", "version": "2.28.7-1+cuda13.0", "arch": "amd64", "source": "apt"}],
    "datacenter-gpu-manager-4-cuda13": [{"name": "datacenter-gpu-manager-4-cuda13", "version": "1:4.6.0-1",
                                         "arch": "amd64", "source": "apt"}],
}
# package_facts on EL splits epoch/version/release
RPM_FACTS = {
    "libnccl": [{"name": "libnccl", "epoch": None, "version": "2.28.7", "release": "1+cuda13.0",
                 "arch": "x86_64", "source": "rpm"}],
}


@pytest.mark.parametrize(("spec", "mgr", "name", "version"), [
    ("libnccl2=2.28.7-1+cuda13.0", "apt", "libnccl2", "2.28.7-1+cuda13.0"),
    ("datacenter-gpu-manager-4-cuda13=1:4.6.0-1", "apt", "datacenter-gpu-manager-4-cuda13", "1:4.6.0-1"),
    ("cuda-toolkit-13-0=13.0.2-1", "apt", "cuda-toolkit-13-0", "13.0.2-1"),
    ("libnccl-2.28.7-1+cuda13.0", "dnf", "libnccl", "2.28.7-1+cuda13.0"),
    ("cuda-toolkit-13-0-13.0.2-1", "dnf", "cuda-toolkit-13-0", "13.0.2-1"),
    ("nvidia-open-580.95.05-1.el9", "dnf", "nvidia-open", "580.95.05-1.el9"),
])
def test_split(spec, mgr, name, version):
    assert kiln_pkg_split(spec, mgr) == {"name": name, "version": version, "spec": spec}


@pytest.mark.parametrize(("spec", "mgr"), [
    ("libnccl2", "apt"),            # unpinned
    ("libnccl2>=2.28", "apt"),      # a range is not a pin
    ("doca-ofed", "dnf"),
    ("libnccl2=2.28.7-1", "zypper"),
])
def test_split_refuses_what_is_not_an_exact_pin(spec, mgr):
    with pytest.raises(AnsibleFilterError, match="kiln_pkg_split"):
        kiln_pkg_split(spec, mgr)


def test_plan_nothing_to_do_when_versions_match():
    plan = kiln_pkg_plan(["nvidia-open-580=580.95.05-1", "libnccl2=2.28.7-1+cuda13.0",
                          "datacenter-gpu-manager-4-cuda13=1:4.6.0-1"], APT_FACTS, "apt")
    assert plan["changes"] == []
    assert plan["names"] == ["nvidia-open-580", "libnccl2", "datacenter-gpu-manager-4-cuda13"]


def test_plan_upgrade_and_install():
    plan = kiln_pkg_plan(["nvidia-open-580=580.173.02-1", "cuda-toolkit-13-0=13.0.2-1"], APT_FACTS, "apt")
    assert plan["upgrades"] == ["nvidia-open-580"]
    assert plan["installs"] == ["cuda-toolkit-13-0"]
    assert [kiln_format_change(c) for c in plan["changes"]] == [
        "nvidia-open-580 580.95.05-1 -> 580.173.02-1",
        "cuda-toolkit-13-0 (new) -> 13.0.2-1",
    ]


def test_plan_epoch_left_out_by_the_package_manager_still_matches():
    facts = {"datacenter-gpu-manager-4-cuda13": [{"version": "4.6.0-1"}]}
    assert kiln_pkg_plan(["datacenter-gpu-manager-4-cuda13=1:4.6.0-1"], facts, "apt")["changes"] == []


def test_plan_rpm_facts():
    assert kiln_pkg_plan(["libnccl-2.28.7-1+cuda13.0"], RPM_FACTS, "dnf")["changes"] == []
    plan = kiln_pkg_plan(["libnccl-2.29.1-1+cuda13.0"], RPM_FACTS, "dnf")
    assert plan["changes"] == [{"name": "libnccl", "from": "2.28.7-1+cuda13.0", "to": "2.29.1-1+cuda13.0"}]


def test_plan_downgrade_counts_as_a_change():
    plan = kiln_pkg_plan(["libnccl2=2.21.5-1+cuda12.4"], APT_FACTS, "apt")
    assert plan["upgrades"] == ["libnccl2"]


@pytest.mark.parametrize(("running", "installed", "expected"), [
    ("6.1.0-27-amd64", ["6.1.0-27-amd64"], ["6.1.0-27-amd64"]),
    ("6.1.0-27-amd64", ["6.1.0-26-amd64", "6.1.0-27-amd64", "6.1.0-28-amd64"], ["6.1.0-27-amd64", "6.1.0-28-amd64"]),
    ("5.15.0-91-generic", ["5.15.0-105-generic", "5.15.0-91-generic", "6.8.0-40-generic"],
     ["5.15.0-91-generic", "5.15.0-105-generic", "6.8.0-40-generic"]),
    ("5.14.0-427.13.1.el9_4.x86_64", ["5.14.0-503.11.1.el9_5.x86_64"],
     ["5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.11.1.el9_5.x86_64"]),
])
def test_kernels_to_check_are_running_plus_newer(running, installed, expected):
    assert kiln_kernels_to_check(running, installed) == expected


def test_kernel_key_orders_numerically():
    assert kiln_kernel_key("5.15.0-105-generic") > kiln_kernel_key("5.15.0-91-generic")


def test_filter_module_exposes_documented_filters():
    names = set(FilterModule().filters())
    assert names == {"kiln_pkg_split", "kiln_pkg_plan", "kiln_pkgdb_parse", "kiln_kernel_key", "kiln_kernels_to_check",
                     "kiln_format_change", "kiln_pinned_covered"}
    docs = {p.stem for p in __import__("pathlib").Path(kiln_package_filters.__file__).parent.glob("kiln_*.yml")}
    assert names <= docs
