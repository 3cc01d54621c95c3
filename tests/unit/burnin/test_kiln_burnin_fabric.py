"""The burn-in with fabric data: passive fabric checks in assemble, rdma.write_bw through the
playbook's filters, the report's fabric entry and NCCL env, counters kept in the history and
judged as deltas on the next run. Facts come from the RDMA fixture trees through the real
fact code (kiln_fabric.read_sysfs + merge_sources), as on a test node."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kiln.burnin import baseline as kiln_baseline
from kiln.burnin import assemble as kb
from kiln.facts import fabric as kiln_fabric
from kiln.burnin import rdma as ff  # the RDMA pair filters (registry: filter_plugins/kiln_fabric_filters.py)
from kiln.burnin import report as kiln_report
from kiln_loader import load_source

from kiln_paths import REPO
import kiln_data
RDMA = REPO / "tests" / "fixtures" / "rdma"
make = load_source("kiln_make_rdma_sysfs", RDMA / "make-rdma-sysfs.py")
FABRIC_RULES = str(REPO / "data" / "burnin_fabric.yml")
EXPECT = {"ports": 8, "rate_gbps": 400, "width": "4X", "link_layer": "InfiniBand", "exclude": ["mlx5_8"]}
TOOLS = {"kiln-cpu-allreduce": "/usr/local/bin/kiln-cpu-allreduce", "mpirun": "/usr/bin/mpirun",
         "iperf3": "/usr/bin/iperf3", "required": ["kiln-cpu-allreduce", "mpirun", "iperf3"]}


def facts(tmp: Path, profile: str, counters: dict[str, int] | None = None) -> dict[str, Any]:
    root = tmp / profile / "sysfs"
    proc = tmp / profile / "proc"
    make.build(make.load_profile(profile), str(root), str(proc))
    for name, value in (counters or {}).items():
        hca, counter = name.split(":")
        (root / "class" / "infiniband" / hca / "ports" / "1" / "counters" / counter).write_text(f"{value}\n")
    gd = kiln_fabric.gpudirect_facts(str(root), str(proc), "6.1.0-28-amd64")
    return kiln_fabric.merge_sources(kiln_fabric.read_sysfs(str(root)), gpudirect=gd)


def node(fab: dict[str, Any], history: dict[str, Any] | None = None,
         after: dict[str, Any] | None = None) -> dict[str, Any]:
    """A node's burn-in data; *after*: its fabric facts read after the run's traffic (default: unchanged)."""
    return {"tools": TOOLS, "kiln_gpu": {"pci_gpu_count": 0}, "nccl": {"ran": False},
            "fabric": {"facts": fab, "expect": EXPECT, "history": history or {},
                       "gpudirect": {"method": "dma_buf"}, "socket_ifname": "eth0"},
            "fabric_after": {"facts": copy.deepcopy(fab) if after is None else after}}


def test_assemble_judges_ports_rates_and_reports_the_fabric(tmp_path: Path) -> None:
    nodes = {"c1": node(facts(tmp_path, "ndr8-storage")), "c2": node(facts(tmp_path, "ndr8-one-hdr")),
             "c3": node(facts(tmp_path, "ndr8-one-down"))}
    out = kiln_data.assemble(nodes, [], mode="quick", fabric_path=FABRIC_RULES)
    status = {n: {c["id"]: c for c in r["checks"]} for n, r in out["nodes"].items()}
    assert out["nodes"]["c1"]["status"] == "PASS", status["c1"]
    assert status["c2"]["fabric.rate"]["status"] == "FAIL"
    assert "mlx5_3/1 at 200 Gb/s" in status["c2"]["fabric.rate"]["detail"]
    assert "expected 400 Gb/s" in status["c2"]["fabric.rate"]["detail"]
    assert status["c3"]["fabric.ports"]["status"] == "FAIL" and "mlx5_5/1" in status["c3"]["fabric.ports"]["detail"]
    entry = out["nodes"]["c1"]["fabric"]
    hca = entry["nccl_env"]["NCCL_IB_HCA"]
    assert hca.startswith("=mlx5_0:1,") and "mlx5_8" not in hca and hca.count(",") == 7
    assert entry["nccl_env"]["NCCL_SOCKET_IFNAME"] in ("=eth0", "eth0")
    assert len(entry["ports"]) == 9 and entry["gpudirect"] == "dma_buf"
    summary = kb.report("r1", "quick", out, str(tmp_path / "results"), write=True)["summary"]
    assert kiln_report.validate_summary(summary) == []
    assert summary["nodes"]["c1"]["fabric"]["nccl_env"]["NCCL_IB_HCA"] == hca


def test_required_fabric_checks_cannot_be_missing(tmp_path: Path) -> None:
    data = node(facts(tmp_path, "ndr8-storage"))
    data["fabric"]["facts"] = {"schema": "kiln.fabric/v1", "hcas": "garbage", "problems": []}
    out = kiln_data.assemble({"c1": data}, [], mode="quick", fabric_path=FABRIC_RULES)
    assert out["nodes"]["c1"]["status"] == "INCOMPLETE"


def test_counter_growth_between_runs_is_flagged_naming_the_counter(tmp_path: Path) -> None:
    state = tmp_path / "history"
    first = kiln_data.assemble({"c1": node(facts(tmp_path, "ndr8-storage"))}, [], mode="quick", fabric_path=FABRIC_RULES)
    assert first["nodes"]["c1"]["status"] == "PASS"
    kb.report("r1", "quick", first, str(tmp_path / "r1"), state_dir=str(state))
    records = kiln_baseline.load(str(state), "c1")
    assert records[-1]["fabric"]["counters"]["mlx5_1/1"]["symbol_error"] == 0
    assert len(records[-1]["fabric"]["ports"]) == 8
    from kiln.burnin import pair_phase as pp
    history = pp.fabric_history(records)
    grown = facts(tmp_path / "later", "ndr8-storage", {"mlx5_1:symbol_error": 150})
    second = kiln_data.assemble({"c1": node(grown, history)}, [], mode="quick", fabric_path=FABRIC_RULES)
    counters = next(c for c in second["nodes"]["c1"]["checks"] if c["id"] == "fabric.counters")
    assert counters["status"] in ("WARN", "FAIL")
    assert "mlx5_1/1" in counters["detail"] and "symbol_error" in counters["detail"] and "+150" in counters["detail"]


def test_rdma_plan_and_judge_name_the_slow_hca(tmp_path: Path) -> None:
    data = {n: node(facts(tmp_path / n, "ndr8-storage"))["fabric"] for n in ("c1", "c2", "c3", "c4")}
    plan = ff.kiln_rdma_pair_plan(data, 18515)
    assert len(plan) == 4 * 8 and {p["tcp_port"] for p in plan} == set(range(18515, 18523))
    assert all(p["client_hca"] != "mlx5_8" for p in plan)
    slow = ("c4", "mlx5_2")
    runs: dict[str, list[dict[str, Any]]] = {}
    for entry in plan:
        gbps = 150.0 if slow in ((entry["client"], entry["client_hca"]), (entry["server"], entry["server_hca"])) else 392.0
        text = (RDMA / "recorded" / "ib_write_bw-client-ib-ndr-gbits-derived.txt").read_text()
        text = text.replace("Device         : ibp5", "Device         : " + entry["client_hca"])
        runs.setdefault(entry["client"], []).append({"rc": 0, "stdout": _with_bw(text, gbps), "stderr": ""})
    outputs = ff.kiln_rdma_outputs(plan, {n: {"stdout": json.dumps(r)} for n, r in runs.items()})
    assert len(outputs) == len(plan)
    checks = ff.kiln_rdma_judge(plan, outputs, FABRIC_RULES)
    assert checks["c4"][0]["status"] == "FAIL" and "mlx5_2" in checks["c4"][0]["detail"]
    assert all(checks[n][0]["status"] == "PASS" for n in ("c1", "c2", "c3")), checks
    assert ff.kiln_rdma_node_checks("c4", checks) == {"rdma": checks["c4"]}
    assert ff.kiln_rdma_node_checks("c9", checks) == {}
    # a client that produced nothing is INCOMPLETE, never PASS
    broken = list(outputs)
    broken[0] = dict(broken[0], stdout="", rc=1)
    again = ff.kiln_rdma_judge(plan, broken, FABRIC_RULES)
    assert again[plan[0]["client"]][0]["status"] in ("INCOMPLETE", "FAIL")
    # a client node whose runner printed nothing: its entries have no output, so its links are INCOMPLETE
    lost = ff.kiln_rdma_outputs(plan, {n: {"stdout": json.dumps(r)} for n, r in runs.items() if n != "c1"})
    assert len(lost) == len(plan) - 8
    c1 = ff.kiln_rdma_judge(plan, lost, FABRIC_RULES)["c1"][0]
    assert c1["status"] in ("INCOMPLETE", "FAIL") and "no result" in c1["detail"]


def test_argv_is_a_list_of_words() -> None:
    entry = {"client": "c1", "server": "c2", "client_hca": "mlx5_0", "server_hca": "mlx5_1", "ib_port": 1,
             "server_ib_port": 1, "tcp_port": 18515}
    hostvars = {"c2": {"ansible_facts": {"default_ipv4": {"interface": "eth0", "address": "10.0.0.2"}}}}
    assert ff.kiln_rdma_argv(entry, "ib_write_bw", ["-F"], 60) == [
        "timeout", "60", "ib_write_bw", "-d", "mlx5_1", "-i", "1", "-p", "18515", "-F"]
    assert ff.kiln_rdma_argv(entry, "ib_write_bw", ["-F"], 60, hostvars)[-1] == "10.0.0.2"
    assert ff.kiln_rdma_argv(entry, "ib_write_bw", ["-F"], 60, {})[-1] == "c2"


def test_fabric_key_follows_the_engine(tmp_path: Path) -> None:
    data = {n: node(facts(tmp_path / n, "ndr8-storage"))["fabric"] for n in ("c1", "c2")}
    assert ff.kiln_fabric_key_of(data, "cpu")["key"] == "tcp"
    assert ff.kiln_fabric_key_of(data, "nccl-tests")["key"] == "ib_ndr"
    hdr = copy.deepcopy(data)
    hdr["c2"]["facts"] = facts(tmp_path / "hdr", "ndr8-one-hdr")
    hdr["c2"]["expect"] = None
    assert ff.kiln_fabric_key_of(hdr, "nccl-tests")["key"] in ("ib_hdr", "ib_ndr", "tcp")


def test_a_bad_expectation_names_the_variable(tmp_path: Path) -> None:
    data = node(facts(tmp_path, "ndr8-storage"))
    data["fabric"]["expect"] = {"ports": "eight"}
    with pytest.raises(Exception, match="kiln_burnin_fabric_expect"):
        kiln_data.assemble({"c1": data}, [], mode="quick", fabric_path=FABRIC_RULES)


def _with_bw(text: str, gbps: float) -> str:
    """The recorded client report with its result row's bandwidth replaced (peak and average)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[0].isdigit() and parts[1].isdigit():
            parts[2] = parts[3] = f"{gbps:.2f}"
            line = "  " + "      ".join(parts)
        out.append(line)
    return "\n".join(out) + "\n"


def test_rdma_fixture_keeps_the_gpu_fixture_devices(tmp_path: Path) -> None:
    """Regression: the RDMA tree once took PCI addresses of the H100 profile's GPUs (3 of 8 lost)."""
    from kiln.facts import hardware as kiln_hwfacts
    gpu_make = load_source("kiln_make_sysfs", REPO / "tests" / "fixtures" / "gpu-emulator" / "make-sysfs.py")
    profile = json.loads((REPO / "tests" / "fixtures" / "gpu-emulator" / "profiles" / "h100-sxm-8.json").read_text())
    gpu_make.build(profile, str(tmp_path))
    make.build(make.load_profile("ndr8-storage"), str(tmp_path))
    gpus = [d for d in kiln_hwfacts.scan_pci_sysfs(str(tmp_path)) if str(d.get("vendor", "")).lower() in ("0x10de", "10de")
            and str(d.get("class", "")).startswith(("0x0302", "0302"))]
    assert len(gpus) == 8, gpus
    assert len(kiln_fabric.read_sysfs(str(tmp_path))["hcas"]) == 9


def test_a_damaged_rules_or_floors_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    from kiln.burnin import fabric_checks as kiln_burnin_fabric_checks
    from kiln import verdict as kiln_verdict
    bad = tmp_path / "rules.yml"
    bad.write_text("counters: [unclosed\n")
    with pytest.raises(kiln_burnin_fabric_checks.FabricError, match="rules.yml"):
        kiln_burnin_fabric_checks.load_fabric_thresholds(str(bad))
    with pytest.raises(kiln_verdict.KilnConfigError, match="rules.yml"):
        kiln_verdict.load_floors(str(bad))
