"""module_utils/kiln/nodehealth/judge.py on snapshots built from the fixtures (the emulator's nvidia-smi
output, the fixture sysfs trees), then destroyed piece by piece: never a traceback, never a PASS from a
source that was not read."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.facts import fabric, hardware
from kiln.health import catalogue, rules as health_rules
from kiln.fabric import base as fabric_base
from kiln.nodehealth import config, judge
from kiln_nodehealth_env import EXPECT, FIXTURES, PROFILES, fabric_rules, rules

RULES = health_rules.validate_health(rules(), "data/burnin_health.yml")
FABRIC = fabric_base.validate_fabric_thresholds(fabric_rules(), "data/burnin_fabric.yml")
WANTED = catalogue.catalogue(RULES)
HOSTILE = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8),
                    st.lists(st.none(), max_size=2), st.dictionaries(st.text(max_size=4), st.none(), max_size=2))


def _smi(profile, *args):
    env = dict(os.environ, KILN_GPU_PROFILE=str(profile))
    return subprocess.run([sys.executable, str(FIXTURES / "gpu-emulator" / "nvidia-smi"), *args], env=env,
                          capture_output=True, text=True, check=True).stdout


def _snapshot(root, kind):
    gpu, rdma = PROFILES[kind]
    profile = FIXTURES / "gpu-emulator" / "profiles" / f"{gpu}.json"
    sysfs = root / "sysfs"
    subprocess.run([sys.executable, str(FIXTURES / "gpu-emulator" / "make-sysfs.py"), "--profile", str(profile),
                    "--root", str(sysfs)], check=True, capture_output=True)
    subprocess.run([sys.executable, str(FIXTURES / "rdma" / "make-rdma-sysfs.py"), "--profile",
                    str(FIXTURES / "rdma" / "profiles" / f"{rdma}.json"), "--root", str(sysfs)], check=True,
                   capture_output=True)
    pci = hardware.scan_pci_sysfs(str(sysfs))
    smi = hardware.parse_nvidia_smi_xml(_smi(profile, "-q", "-x"))
    nvlink = hardware.parse_nvlink_status(_smi(profile, "nvlink", "-s"))
    errors = hardware.parse_nvlink_errors(_smi(profile, "nvlink", "-e"))
    manager = {"present": True, "active": "active"} if kind == "h100" else None
    gpu_facts = hardware.summarize(pci, smi=smi, nvlink=nvlink or None, driver_loaded=True,
                                   nvlink_errors=errors or None, fabric_manager=manager)
    return {"gpu": gpu_facts, "fabric": fabric.merge_sources(fabric.read_sysfs(str(sysfs))),
            "kernel_log": {"readable": True, "source": "dmesg", "since": 1, "now": 2, "xid_lines": [],
                           "problems": []},
            "dcgm": {"present": False, "run": None},
            "mounts": [{"path": "/", "mounted": True, "fstype": "overlay", "responds": True}]}


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    return {kind: _snapshot(tmp_path_factory.mktemp(kind), kind) for kind in PROFILES}


def _config(kind):
    return config.validate({
        "schema": "kiln.health.config/v1", "node": "gpu01", "expected_gpus": 8 if kind == "h100" else 2,
        "fabric_expect": EXPECT[kind], "gpudirect": None, "mounts": ["/"], "unknown_drain_after": 3,
        "resume_after_clean": 2, "actions": "none", "sysfs_root": "/sys", "proc_root": "/proc",
        "state_dir": "/tmp/x", "textfile_dir": None, "rules": "/r", "fabric_rules": "/f", "query_smi": True,
        "dcgm": "auto", "journalctl": "journalctl", "dmesg": "dmesg", "timeout_s": 20, "mount_timeout_s": 5})


@pytest.mark.parametrize("kind", sorted(PROFILES))
def test_the_fixture_nodes_pass(snapshots, kind):
    """(fabric.facts included: the fixture trees read without a problem.)"""
    result = judge.judge("check", snapshots[kind], _config(kind), RULES, FABRIC, {}, WANTED)
    assert result["status"] == "PASS", [c for c in result["checks"] if c["status"] not in ("PASS", "SKIP")]
    assert {c["id"] for c in result["checks"]} == {cid for cid, spec in WANTED.items() if "check" in spec["hooks"]}
    assert "fabric_counters" in result["keep"] and result["keep"].get("history_gpus") == (8 if kind == "h100" else 2)


def test_each_hook_returns_exactly_its_checks(snapshots):
    for hook in ("check", "prolog", "epilog"):
        result = judge.judge(hook, snapshots["h100"], _config("h100"), RULES, FABRIC, {}, WANTED)
        assert sorted(c["id"] for c in result["checks"]) == sorted(
            cid for cid, spec in WANTED.items() if hook in spec["hooks"])


SOURCES = {"gpu": ("gpu.count",), "kernel_log": ("xid.kernel_log",), "fabric": ("fabric.facts", "fabric.ports", "fabric.rate"),
           "mounts": ("filesystems.mounts",)}


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(sorted(PROFILES)), source=st.sampled_from(sorted(SOURCES)), value=HOSTILE,
       hook=st.sampled_from(["check", "prolog", "epilog"]))
def test_a_destroyed_source_never_passes_its_checks(snapshots, kind, source, value, hook):
    snap = dict(snapshots[kind], **{source: value})
    result = judge.judge(hook, snap, _config(kind), RULES, FABRIC, {}, WANTED)
    statuses = {c["id"]: c["status"] for c in result["checks"]}
    for cid in SOURCES[source]:
        if cid in statuses:
            assert statuses[cid] != "PASS", (source, value, cid, result["checks"])
    assert result["status"] != "PASS" or not any(cid in statuses for cid in SOURCES[source])


@settings(max_examples=100, deadline=None)
@given(state=st.dictionaries(st.sampled_from(["fabric_counters", "nvlink_errors", "history_gpus", "fabric_history",
                                              "unknown_runs", "clean_runs", "kernel_since"]), HOSTILE, max_size=4))
def test_a_corrupt_state_file_never_breaks_the_judge(snapshots, state):
    result = judge.judge("check", snapshots["h100"], _config("h100"), RULES, FABRIC, state, WANTED)
    assert all(c["status"] in judge.STATUSES for c in result["checks"])
