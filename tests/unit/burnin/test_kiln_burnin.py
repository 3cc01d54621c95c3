"""module_utils/kiln/burnin/assemble.py: assembly and reports (the per-node checks: test_kiln_burnin_checks.py)."""

from __future__ import annotations

import json
import sys

from kiln_paths import REPO
import kiln_data
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.burnin import assemble as kb  # noqa: E402
from kiln.burnin.iperf import iperf_reference  # noqa: E402
from kiln.burnin import report as kiln_report  # noqa: E402

FIX = REPO / "tests" / "fixtures" / "nccl-tests"
DCGM = REPO / "tests" / "fixtures" / "dcgm"


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
               "sku": "cpu", "reference": iperf_reference([{"client": "a", "server": "b", "gbps": 18.0},
                                                            {"client": "b", "server": "a", "gbps": 16.0}])}]
    # quick mode: no pair phase is required (in default mode every node needs its pair result)
    out = kiln_data.assemble(nodes, fabric, mode="quick", overrides=overrides, results_dir=str(tmp_path))
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
