"""module_utils/kiln_burnin.py: passive checks from GPU facts, DCGM, assembly and reports."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "module_utils"))

import kiln_burnin as kb  # noqa: E402
import kiln_report  # noqa: E402

FIX = REPO / "tests" / "fixtures" / "nccl-tests"


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
    checks = kb.passive_checks({"pci_gpu_count": 0, "gpus": []})
    assert {c["status"] for c in checks} == {"SKIP"}
    assert all("no NVIDIA GPU" in c["detail"] for c in checks)


def test_healthy_gpu_passes_and_faults_fail():
    assert {c["status"] for c in kb.passive_checks(smi_facts())} == {"PASS"}
    bad = by_id(kb.passive_checks(
        smi_facts(pcie={"gen_current": 1, "gen_max": 5, "width_current": 8, "width_max": 16},
                  nvlink={"links": 18, "active": 17, "inactive": 1},
                  remapped_rows={"supported": True, "pending": True, "failure": False},
                  clock_event_reasons_active=["hw_thermal_slowdown"]),
        expected_gpus=2, xid_log="[1.0] NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus."))
    for cid in ("gpu.count", "pcie.link", "nvlink.status", "clocks.throttle", "xid.kernel_log"):
        assert bad[cid]["status"] == "FAIL", cid
    assert by_id(kb.passive_checks(smi_facts(), xid_log="NVRM: Xid (PCI:0000:18:00): 13, Graphics"))[
        "xid.kernel_log"]["status"] == "WARN"
    # A lower PCIe generation alone is idle down-training: noted, not failed.
    idle = by_id(kb.passive_checks(smi_facts(pcie={"gen_current": 1, "gen_max": 5, "width_current": 16,
                                                   "width_max": 16})))["pcie.link"]
    assert idle["status"] == "PASS" and "gen1/5" in idle["detail"]


DCGM = REPO / "tests" / "fixtures" / "dcgm"


def test_dcgm_levels_and_codes():
    """Wiring only (the parser and rules are tested in test_kiln_health.py): level by mode, stress
    tests required in acceptance mode, unparseable never PASS."""
    r2 = (DCGM / "emulated-dcgmi-4.6-diag-r2-8gpu.json").read_text()
    r3 = (DCGM / "emulated-dcgmi-4.6-diag-r3-8gpu.json").read_text()
    assert kb.dcgm_diag_check(2, {"present": True, "rc": 0, "stdout": r2}, True, "default", None)["status"] == "PASS"
    assert kb.dcgm_diag_check(3, {"present": True, "rc": 0, "stdout": r3}, True, "acceptance", None)["status"] == "PASS"
    # level 2 output offered as an acceptance run: its stress tests never ran
    assert kb.dcgm_diag_check(3, {"present": True, "rc": 0, "stdout": r2}, True, "acceptance", None)["status"] \
        == "INCOMPLETE"
    assert kb.dcgm_diag_check(2, {"present": True, "rc": 0, "stdout": "ok"}, True, "default", None)["status"] \
        == "INCOMPLETE"
    assert kb.dcgm_diag_check(1, {"present": False}, True, "quick", None)["status"] == "INCOMPLETE"
    assert kb.dcgm_diag_check(1, None, False, "quick", None)["status"] == "SKIP"


def test_assemble_and_report(tmp_path):
    cpu = (FIX / "derived-kiln-cpu-engine-3node-example.txt").read_text()
    wrong = (FIX / "derived-wrong-2.13-h100-16rank.txt").read_text()
    good = (FIX / "nccl-tests-2.13-h100-16rank-2node.txt").read_text()
    tools = {"kiln-cpu-allreduce": "/usr/local/bin/kiln-cpu-allreduce", "mpirun": "/usr/bin/mpirun",
             "iperf3": "/usr/bin/iperf3", "required": ["kiln-cpu-allreduce", "mpirun", "iperf3"]}
    h100 = {"gpu_present": True, "sku": "h100-sxm", "kiln_gpu": {"pci_gpu_count": 8, "gpus": []}, "tools": tools,
            "dcgm": {"present": True, "rc": 0, "stdout": (DCGM / "emulated-dcgmi-4.6-diag-r2-8gpu.json").read_text()}}
    nodes = {
        "cpu-1": {"tools": tools, "kiln_gpu": {"pci_gpu_count": 0}, "nccl": {"ran": False}},
        "gpu-1": dict(h100, nccl={"ran": True, "text": good, "rc": 0}),
        "gpu-2": dict(h100, nccl={"ran": True, "text": wrong, "rc": 0}),
    }
    overrides = {"h100-sxm/any/single_node": 300}
    fabric = [{"id": "nccl.fabric.all_reduce", "ran": True, "nodes": ["cpu-1", "gpu-1"], "text": cpu, "rc": 0,
               "sku": "cpu", "reference": kb.iperf_reference([{"client": "a", "server": "b", "gbps": 18.0},
                                                               {"client": "b", "server": "a", "gbps": 16.0}])}]
    # quick mode: no pair phase is required (in default mode every node needs its pair result)
    out = kb.assemble(nodes, fabric, mode="quick", overrides=overrides, results_dir=str(tmp_path))
    assert out["nodes"]["cpu-1"]["status"] == "PASS"          # tools present; GPU checks SKIP
    assert out["nodes"]["gpu-1"]["status"] == "PASS"
    assert out["nodes"]["gpu-2"]["status"] == "FAIL"
    assert out["passed"] == ["cpu-1", "gpu-1"]
    ref = out["fabric"][0]["reference"]
    assert ref["value"] == 16.0 and ref["ratio"] == round(out["fabric"][0]["value"] / 2.0, 3)
    result = kb.report("run-1", "quick", out, str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert kiln_report.validate_summary(summary) == []
    assert summary["overall"]["status"] == "FAIL" and result["summary"]["overall"]["exit"] == 2
    assert (tmp_path / "gpu-2" / "nccl_node.txt").exists()
    assert (tmp_path / "metrics" / "gpu-1.prom").exists()
