"""module_utils/kiln/burnin/checks.py: passive checks from GPU facts and the kernel log, DCGM wiring."""

from __future__ import annotations

import sys

import kiln_data
from kiln_paths import REPO
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.burnin import checks as kbc  # noqa: E402


def smi_facts(**gpu_overrides):
    gpu = {"index": 0, "name": "NVIDIA H100 80GB HBM3",
           "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16},
           "nvlink": {"links": 18, "active": 18, "inactive": 0},
           "remapped_rows": {"supported": True, "pending": False, "failure": False},
           "clock_event_reasons_active": ["gpu_idle"]}
    gpu.update(gpu_overrides)
    return {"pci_gpu_count": 1, "smi_gpu_count": 1, "driver_loaded": True, "source": "nvidia-smi", "gpus": [gpu]}


def by_id(checks):
    return {c["id"]: c for c in checks}


def test_no_gpu_is_explicitly_skipped():
    checks = kbc.passive_checks({"pci_gpu_count": 0, "gpus": []})
    assert {c["status"] for c in checks} == {"SKIP"}
    assert all("no NVIDIA GPU" in c["detail"] for c in checks)


def test_healthy_gpu_passes_and_faults_fail():
    assert {c["status"] for c in kbc.passive_checks(smi_facts())} == {"PASS"}
    bad = by_id(kbc.passive_checks(
        smi_facts(pcie={"gen_current": 1, "gen_max": 5, "width_current": 8, "width_max": 16},
                  nvlink={"links": 18, "active": 17, "inactive": 1},
                  remapped_rows={"supported": True, "pending": True, "failure": False},
                  clock_event_reasons_active=["hw_thermal_slowdown"]),
        expected_gpus=2, xid_log="[1.0] NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus."))
    for cid in ("gpu.count", "pcie.link", "nvlink.status", "clocks.throttle", "xid.kernel_log"):
        assert bad[cid]["status"] == "FAIL", cid
    assert by_id(kbc.passive_checks(smi_facts(), xid_log="NVRM: Xid (PCI:0000:18:00): 13, Graphics"))[
        "xid.kernel_log"]["status"] == "WARN"
    # A lower PCIe generation alone is idle down-training: noted, not failed.
    idle = by_id(kbc.passive_checks(smi_facts(pcie={"gen_current": 1, "gen_max": 5, "width_current": 16,
                                                   "width_max": 16})))["pcie.link"]
    assert idle["status"] == "PASS" and "gen1/5" in idle["detail"]


DCGM = REPO / "tests" / "fixtures" / "dcgm"


def test_dcgm_levels_and_codes():
    """Wiring only (the parser and rules are tested in test_kiln_dcgm_diag.py and
    test_kiln_health_dcgm.py): level by mode, stress
    tests required in acceptance mode, unparseable never PASS."""
    r2 = (DCGM / "emulated-dcgmi-4.6-diag-r2-8gpu.json").read_text()
    r3 = (DCGM / "emulated-dcgmi-4.6-diag-r3-8gpu.json").read_text()
    assert kbc.dcgm_diag_check(2, {"present": True, "rc": 0, "stdout": r2}, True, "default", kiln_data.health())["status"] == "PASS"
    assert kbc.dcgm_diag_check(3, {"present": True, "rc": 0, "stdout": r3}, True, "acceptance", kiln_data.health())["status"] == "PASS"
    # level 2 output offered as an acceptance run: its stress tests never ran
    assert kbc.dcgm_diag_check(3, {"present": True, "rc": 0, "stdout": r2}, True, "acceptance", kiln_data.health())["status"] \
        == "INCOMPLETE"
    assert kbc.dcgm_diag_check(2, {"present": True, "rc": 0, "stdout": "ok"}, True, "default", kiln_data.health())["status"] \
        == "INCOMPLETE"
    assert kbc.dcgm_diag_check(1, {"present": False}, True, "quick", kiln_data.health())["status"] == "INCOMPLETE"
    assert kbc.dcgm_diag_check(1, None, False, "quick", kiln_data.health())["status"] == "SKIP"
