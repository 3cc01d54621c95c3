"""Verify kiln-health in the slurm scenario: the installed program, Slurm's configuration for it, and the
fault rounds side_effect.yml ran (molecule/slurm/health_faults.py, recorded in <ephemeral>/health.json):
each fault drained its node with the check's reason within a few intervals, the running job's epilog
reported it, the node came back after the clean runs, and a person's drain survived every round."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import testinfra
import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "molecule"))
sys.path.insert(0, str(REPO / "module_utils"))
from kiln_testinfra import podman_hosts  # noqa: E402
from kiln.health import alerts  # noqa: E402

testinfra_hosts = podman_hosts("slurm_controller")

EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
COMPUTE = ["kiln-slurm-c1", "kiln-slurm-c2", "kiln-slurm-c3"]
INTERVAL = 5
#: A FAIL drains at the next periodic run (one interval, plus the run and the poll); an UNKNOWN after 3 runs;
#: a resume after 2 clean runs.
DRAIN_WITHIN_S, UNKNOWN_WITHIN_S, RESUME_WITHIN_S = 3 * INTERVAL, 6 * INTERVAL, 6 * INTERVAL


@pytest.fixture(scope="module")
def record():
    return json.loads((EPHEMERAL / "health.json").read_text(encoding="utf-8"))


def node(name):
    return testinfra.get_host(f"podman://{name}")


def test_slurm_runs_kiln_health_as_health_check_prolog_and_epilog(host):
    conf = host.file("/etc/slurm/slurm.conf").content_string.splitlines()
    for line in ("HealthCheckProgram=/usr/local/sbin/kiln-health", "HealthCheckInterval=300",
                 "HealthCheckNodeState=ANY", "Prolog=/usr/local/sbin/kiln-health-prolog",
                 "Epilog=/usr/local/sbin/kiln-health-epilog", "SchedulerParameters=nohold_on_prolog_fail"):
        assert line in conf


@pytest.mark.parametrize("name", COMPUTE)
def test_kiln_health_is_installed_with_its_configuration(name):
    compute = node(name)
    assert compute.file("/usr/local/sbin/kiln-health").mode == 0o755
    assert compute.file("/usr/lib/kiln/python/kiln/nodehealth/judge.py").exists
    config = json.loads(compute.file("/etc/kiln/health.json").content_string)
    assert config["node"] == name and config["sysfs_root"] == "/var/lib/kiln-fixture/sysfs"
    assert config["expected_gpus"] == (8 if name == "kiln-slurm-c1" else 2)
    assert json.loads(compute.file("/etc/kiln/health-rules.json").content_string)["schema"] == "kiln.burnin.health/v1"
    result = json.loads(compute.check_output("/usr/local/sbin/kiln-health --dry-run --json"))
    assert result["status"] == "PASS", [c for c in result["checks"] if c["status"] not in ("PASS", "SKIP")]


def test_every_node_was_healthy_before_the_faults(record):
    assert record["start"]["ok"], record["start"]
    assert record["rendered_interval"] == "300" and record["interval_s"] == INTERVAL  # kiln's value, put back
    for name in COMPUTE:
        baseline = record["baseline"][name]
        assert baseline.get("status") == "PASS", baseline


EXPECTED = {
    "A": {"kiln-slurm-c1": "HEALTH: xid.kernel_log: XIDs since the last run: 79",
          "kiln-slurm-c2": "HEALTH: memory."},
    "B": {"kiln-slurm-c1": "HEALTH: fabric.ports: mlx5_2", "kiln-slurm-c2": "HEALTH: gpu.count: "},
    "C": {"kiln-slurm-c1": "HEALTH: nvlink.status: GPU3 1/18 links inactive",
          "kiln-slurm-c2": "HEALTH: fabric.counters: mlx5_0/1 symbol_error +150"},
    "D": {"kiln-slurm-c1": "HEALTH: gpu.fabric:", "kiln-slurm-c2": "HEALTH: unknown: xid.kernel_log:"},
}


@pytest.mark.parametrize("letter", sorted(EXPECTED))
def test_each_fault_drains_its_node_with_the_check_then_clean_runs_resume_it(record, letter):
    entry = next(r for r in record["rounds"] if r["name"].startswith(letter + ":"))
    for name, reason in EXPECTED[letter].items():
        drained = entry["drained"][name]
        assert drained["ok"], drained
        assert drained["state"][1].startswith(reason), drained
        limit = UNKNOWN_WITHIN_S if "unknown:" in reason else DRAIN_WITHIN_S
        assert drained["seconds"] <= limit, drained
        resumed = entry["resumed"][name]
        assert resumed["ok"] and resumed["seconds"] <= RESUME_WITHIN_S, resumed


def test_a_persons_drain_survives_every_round(record):
    for entry in record["rounds"]:
        assert entry["person"] == ["drained", record["person_reason"]], entry["name"]
    assert record["person_end"] == ["drained", record["person_reason"]]
    assert record["end"]["ok"], record["end"]


def test_the_running_jobs_epilog_reported_the_fault(record):
    entry = record["rounds"][0]
    report = entry["epilog"]
    assert report.get("hook") == "epilog" and report.get("node") == "kiln-slurm-c2" and report.get("job"), report
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert statuses["memory.ecc_uncorrectable"] == "FAIL" and statuses["memory.remapped_rows"] == "FAIL"
    assert 'kiln_health_check_status{hook="prolog",check="gpu.count",status="PASS"} 1' in entry["prolog_textfile_c2"]


def test_the_textfile_showed_the_failed_check_and_the_xid(record):
    text = record["rounds"][0]["textfile"]["kiln-slurm-c1"]
    assert 'kiln_health_check_status{hook="check",check="xid.kernel_log",status="FAIL"} 1' in text
    assert 'kiln_health_node_status{hook="check",status="FAIL"} 1' in text
    assert 'kiln_health_xid_events{xid="79"} 1' in text and "kiln_health_drained 1" in text
    ecc = record["rounds"][0]["textfile"]["kiln-slurm-c2"]
    assert 'kiln_health_gpu_ecc_volatile_uncorrectable{gpu="1",kind="dram"} 2' in ecc
    assert 'kiln_health_gpu_remapped_rows_pending{gpu="1"} 1' in ecc
    port = record["rounds"][1]["textfile"]["kiln-slurm-c1"]
    assert 'kiln_health_ib_port_active{port="mlx5_2/1"} 0' in port


def test_alert_rules_on_the_prometheus_host_are_the_generated_ones_and_promtool_accepts_them(host, tmp_path):
    text = host.file("/etc/prometheus/rules/kiln-health.yml").content_string
    rules = yaml.safe_load((REPO / "data" / "burnin_health.yml").read_text(encoding="utf-8"))
    assert yaml.safe_load(text) == alerts.alert_rules(rules, 300, 3)
    path = tmp_path / "kiln-health.yml"
    path.write_text(text, encoding="utf-8")
    promtool = REPO / ".cache" / "promtool" / "promtool"
    proc = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
