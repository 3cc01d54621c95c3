"""roles/node_health/files/kiln-health, the real program, on an emulated node (kiln_nodehealth_env): the
periodic check, the prolog and the epilog, the drain and resume through (fake) sinfo/scontrol, the
textfiles, and the errors that must never be a traceback."""

from __future__ import annotations

import json

import pytest

from kiln_nodehealth_env import Node

ECC = {"1": {"ecc_volatile_dram_uncorrectable": 2, "remapped_rows_pending": True}}


@pytest.fixture
def h100(tmp_path):
    return Node(tmp_path, "h100")


def test_a_healthy_node_passes_every_check_it_can_judge(h100):
    result = h100.result()
    statuses = h100.statuses(result)
    assert result["status"] == "PASS" and result["rc"] == 0, result
    assert statuses["gpu.count"] == statuses["memory.ecc_uncorrectable"] == statuses["fabric.ports"] == "PASS"
    assert statuses["gpu.fabric"] == statuses["nvlink.errors"] == statuses["xid.kernel_log"] == "PASS"
    assert statuses["dcgm.health"] == "SKIP" and statuses["fabric.gpudirect"] == "SKIP"
    assert h100.scontrol_calls() == []  # idle and healthy: nothing to do


def test_a_fail_drains_with_the_check_and_detail_then_m_clean_runs_resume(h100):
    h100.faults.write_text(json.dumps(ECC), encoding="utf-8")
    result = h100.result()
    assert result["status"] == "FAIL" and result["rc"] == 1
    calls = h100.scontrol_calls()
    assert calls == [["update", "NodeName=gpu01", "State=DRAIN", calls[0][3]]]
    assert calls[0][3].startswith("Reason=HEALTH: memory.ecc_uncorrectable: GPU1 volatile DRAM uncorrectable 2")
    h100.set_row("drained", calls[0][3].split("=", 1)[1])
    h100.result()  # still failing: the same check keeps its reason, no second scontrol
    assert len(h100.scontrol_calls()) == 1
    h100.faults.unlink()
    first = h100.result()
    assert first["status"] == "PASS" and first["streak"]["clean_runs"] == 1 and len(h100.scontrol_calls()) == 1
    second = h100.result()
    assert second["streak"]["clean_runs"] == 2
    assert h100.scontrol_calls()[-1] == ["update", "NodeName=gpu01", "State=RESUME"]


@pytest.mark.parametrize("reason", ["RMA 42", "BURNIN: nccl.pair.all_reduce: slow", "UPGRADE: batch 2"])
def test_someone_elses_drain_is_never_replaced_or_lifted(h100, reason):
    h100.config["resume_after_clean"] = 1
    h100.write_config()
    h100.set_row("drained", reason)
    h100.faults.write_text(json.dumps(ECC), encoding="utf-8")
    result = h100.result()
    assert result["action"]["outcome"] == "held" and h100.scontrol_calls() == []
    h100.faults.unlink()
    clean = h100.result()
    assert clean["streak"]["clean_runs"] == 1 and clean["action"]["action"] == "resume"
    assert clean["action"]["outcome"] == "held" and h100.scontrol_calls() == []  # never lifts another's drain


def test_an_unreadable_kernel_log_is_unknown_and_drains_only_after_n_runs(h100):
    (h100.root / "kmsg-unreadable").write_text("", encoding="utf-8")
    for run in (1, 2):
        result = h100.result()
        assert h100.statuses(result)["xid.kernel_log"] == "UNKNOWN" and result["status"] == "UNKNOWN"
        assert result["streak"]["unknown_runs"]["xid.kernel_log"] == run and h100.scontrol_calls() == []
    h100.result()
    reason = h100.scontrol_calls()[0][3]
    assert reason.startswith("Reason=HEALTH: unknown: xid.kernel_log: kernel log unreadable")


def test_an_xid_79_fails_once_then_the_window_moves_on(h100):
    h100.result()
    h100.xid(79)
    result = h100.result()
    assert h100.statuses(result)["xid.kernel_log"] == "FAIL" and "79" in h100.scontrol_calls()[0][3]


def test_nvidia_smi_gone_on_a_gpu_node_is_unknown_never_skip_or_pass(h100):
    (h100.bin / "nvidia-smi").unlink()
    env = h100.env()
    env["PATH"] = f"{h100.bin}:/nonexistent"
    proc = h100.run("--json", env=env)
    result = json.loads(proc.stdout)
    statuses = {c["id"]: c["status"] for c in result["checks"]}
    for cid in ("memory.ecc_uncorrectable", "memory.remapped_rows", "nvlink.status", "gpu.persistence_mode"):
        assert statuses[cid] == "UNKNOWN", (cid, statuses)
    assert result["status"] == "UNKNOWN"


def test_fabric_manager_stopped_and_a_port_down_fail(h100):
    h100.fm.write_text("inactive\n", encoding="utf-8")
    port = h100.sysfs / "class" / "infiniband" / "mlx5_2" / "ports" / "1"
    (port / "state").write_text("1: DOWN\n", encoding="utf-8")
    (port / "phys_state").write_text("3: Disabled\n", encoding="utf-8")
    statuses = h100.statuses(h100.result())
    assert statuses["gpu.fabric"] == "FAIL" and statuses["fabric.ports"] == "FAIL"


def test_prolog_is_a_fast_subset_and_fails_the_job_start_only_on_fail(h100):
    result = h100.result("--hook", "prolog")
    assert {c["id"] for c in result["checks"]} == {"gpu.count", "xid.kernel_log", "fabric.facts", "fabric.ports",
                                                               "filesystems.mounts"}
    assert result["rc"] == 0
    (h100.root / "kmsg-unreadable").write_text("", encoding="utf-8")
    assert h100.result("--hook", "prolog")["rc"] == 0  # UNKNOWN does not stop a job
    (h100.root / "kmsg-unreadable").unlink()
    h100.xid(79)
    assert h100.result("--hook", "prolog")["rc"] == 1


def test_epilog_reports_what_happened_during_the_job_and_always_exits_0(h100):
    env = dict(h100.env(), SLURM_JOB_ID="4242")
    assert h100.run("--hook", "prolog", env=env).returncode == 0
    state = h100.root / "state"
    assert (state / "jobs" / "4242.start.json").exists()
    h100.faults.write_text(json.dumps(ECC), encoding="utf-8")
    assert h100.run("--hook", "epilog", env=env).returncode == 0
    report = json.loads((state / "jobs" / "4242.json").read_text(encoding="utf-8"))
    assert report["job"] == "4242" and report["status"] == "FAIL" and report["hook"] == "epilog"
    assert {c["id"]: c["status"] for c in report["checks"]}["memory.ecc_uncorrectable"] == "FAIL"
    assert not (state / "jobs" / "4242.start.json").exists()
    assert h100.scontrol_calls()[0][3].startswith("Reason=HEALTH: memory.")


def test_textfiles_carry_no_series_twice(h100):
    env = dict(h100.env(), SLURM_JOB_ID="7")
    h100.run()
    h100.run("--hook", "prolog", env=env)
    h100.run("--hook", "epilog", env=env)
    seen = {}
    for path in sorted((h100.root / "prom").glob("*.prom")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line and not line.startswith("#"):
                series = line.rsplit(" ", 1)[0]
                assert series not in seen, (series, path.name, seen.get(series))
                seen[series] = path.name
    text = (h100.root / "prom" / "kiln_health_check.prom").read_text(encoding="utf-8")
    assert 'kiln_health_check_status{hook="check",check="gpu.count",status="PASS"} 1' in text
    assert 'kiln_health_ib_port_active{port="mlx5_0/1"} 1' in text
    assert 'kiln_health_gpu_ecc_volatile_uncorrectable{gpu="0",kind="dram"} 0' in text


@pytest.mark.parametrize("key, value, words", [
    ("expected_gpus", 8.0, "expected_gpus (set by kiln_burnin_expected_gpus)"),
    ("expected_gpus", "8", "expected_gpus (set by kiln_burnin_expected_gpus)"),
    ("unknown_drain_after", 0, "node_health_unknown_drain_after"),
    ("mounts", [{"path": "home"}], "node_health_mounts"),
    ("actions", "drain", "node_health_actions"),
    ("timeout_s", float("nan"), "node_health_timeout"),
])
def test_a_bad_configuration_is_one_line_naming_the_variable_exit_2(h100, key, value, words):
    h100.config[key] = value
    h100.write_config()
    proc = h100.run()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert words in proc.stderr and proc.stderr.count("\n") == 1
    assert not (h100.root / "state" / "state.json").exists() and h100.scontrol_calls() == []


def test_missing_python_or_rules_is_exit_2_not_a_traceback(h100, tmp_path):
    proc = h100.run("--lib", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "kiln's Python is missing" in proc.stderr and "Traceback" not in proc.stderr
    (h100.root / "rules.json").write_text("{not json", encoding="utf-8")
    proc = h100.run()
    assert proc.returncode == 2 and "health rules" in proc.stderr and "Traceback" not in proc.stderr


def test_dry_run_changes_nothing(h100):
    h100.faults.write_text(json.dumps(ECC), encoding="utf-8")
    result = h100.result("--dry-run")
    assert result["status"] == "FAIL" and h100.scontrol_calls() == []
    assert not (h100.root / "state").exists() and not (h100.root / "prom").exists()
