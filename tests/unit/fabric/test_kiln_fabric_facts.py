"""Tests for library/kiln_fabric_facts.py: fixture trees from make-rdma-sysfs.py, the emulators as the tools."""

from __future__ import annotations

import sys

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from kiln_loader import load_source, ship_module_utils

from kiln_paths import REPO
RDMA = REPO / "tests" / "fixtures" / "rdma"
EMULATORS = RDMA / "emulators"

# The module imports `ansible.module_utils.kiln.facts.fabric`: serve module_utils/kiln under that name first.
ship_module_utils()
facts_module = load_source("kiln_fabric_facts", REPO / "library" / "kiln_fabric_facts.py")
make = load_source("kiln_make_rdma_sysfs", RDMA / "make-rdma-sysfs.py")


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


@pytest.fixture(autouse=True)
def _patch_exits(monkeypatch):
    def exit_json(self, **kwargs):
        raise ExitJson(kwargs)

    def fail_json(self, **kwargs):
        raise FailJson(kwargs)
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A fixture node: ndr8-storage tree, and the emulators as executables run by the module."""
    sysfs, proc = tmp_path / "sys", tmp_path / "proc"
    make.build(make.load_profile("ndr8-storage"), str(sysfs), str(proc))
    monkeypatch.setenv("KILN_RDMA_SYSFS_ROOT", str(sysfs))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("ibstat", "perfquery"):
        wrapper = bindir / tool
        wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {EMULATORS / tool} \"$@\"\n")
        wrapper.chmod(0o755)
    return {"sysfs": sysfs, "proc": proc, "bin": bindir}


def _run(args: dict) -> dict:
    with patch_module_args(args), pytest.raises(ExitJson) as caught:
        facts_module.main()
    result = caught.value.args[0]
    assert result["changed"] is False
    return result["ansible_facts"]["kiln_fabric"]


def test_sysfs_only(node):
    facts = _run({"sysfs_root": str(node["sysfs"]), "proc_root": str(node["proc"]), "kernel": "6.1.0-28-amd64"})
    assert facts["schema"] == "kiln.fabric/v1" and facts["problems"] == []
    assert len(facts["hcas"]) == 9 and facts["hcas"][0]["ports"][0]["rate_gbps"] == 400.0
    assert facts["gpudirect"] == {"kernel": "6.1.0-28-amd64", "nvidia_loaded": True, "open_modules": True,
                                  "peermem_loaded": False, "dma_buf_kernel": True}


def test_with_ibstat_and_perfquery(node):
    args = {"sysfs_root": str(node["sysfs"]), "proc_root": str(node["proc"]), "kernel": "6.1.0",
            "ibstat": str(node["bin"] / "ibstat"), "perfquery": str(node["bin"] / "perfquery")}
    facts = _run(args)
    assert facts["problems"] == []
    assert "counter_sources" not in facts["hcas"][0]["ports"][0]


def test_second_source_disagreeing_is_a_problem(node, tmp_path):
    args = {"sysfs_root": str(node["sysfs"]), "proc_root": str(node["proc"]), "kernel": "6.1.0",
            "ibstat": str(node["bin"] / "ibstat")}
    # ibstat answers from a tree where mlx5_3 is still at NDR; the module reads one where it is at HDR.
    other = tmp_path / "other"
    make.build(make.load_profile("ndr8-one-hdr"), str(other))
    args["sysfs_root"] = str(other)
    facts = _run(args)
    assert "mlx5_3 port 1: rate_gbps: sysfs says 200.0, ibstat says 400.0" in facts["problems"]


def test_missing_tool_and_check_mode(node):
    facts = _run({"sysfs_root": str(node["sysfs"]), "proc_root": str(node["proc"]), "kernel": "6.1.0",
                  "ibstat": "/nonexistent/ibstat", "_ansible_check_mode": True})
    assert facts["problems"] == ["ibstat: '/nonexistent/ibstat' was asked for but not found; install it or unset the option"]


def test_no_hcas_at_all(tmp_path):
    facts = _run({"sysfs_root": str(tmp_path), "proc_root": str(tmp_path), "kernel": "4.19.0"})
    assert facts["hcas"] == [] and facts["gpudirect"]["nvidia_loaded"] is False
    assert facts["gpudirect"]["dma_buf_kernel"] is False
