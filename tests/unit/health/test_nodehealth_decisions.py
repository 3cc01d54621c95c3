"""module_utils/kiln/nodehealth: the configuration check, the streaks and the drain/resume decision,
the mounts judge and the textfile -- pure functions, with hypothesis over hostile input."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import verdict as kv
from kiln.nodehealth import action, config, judge, textfile

GOOD = {
    "schema": "kiln.health.config/v1", "node": "gpu01", "expected_gpus": 8, "fabric_expect": None,
    "gpudirect": None, "mounts": ["/home", {"path": "/scratch", "fstype": "lustre"}], "unknown_drain_after": 3,
    "resume_after_clean": 2, "actions": "slurm", "sysfs_root": "/sys", "proc_root": "/proc",
    "state_dir": "/var/lib/kiln/health", "textfile_dir": None, "rules": "/etc/kiln/health-rules.json",
    "fabric_rules": "/etc/kiln/fabric-rules.json", "query_smi": True, "dcgm": "auto", "journalctl": "journalctl",
    "dmesg": "dmesg", "timeout_s": 20, "mount_timeout_s": 5}
CFG = config.validate(GOOD)


def fail(cid, detail="bad"):
    return {"id": cid, "status": "FAIL", "detail": detail}


def run(hook, *checks):
    return {"hook": hook, "checks": list(checks), "status": judge.worst([c["status"] for c in checks])}


def test_the_good_configuration_validates_and_mounts_normalise():
    assert CFG["mounts"] == [{"path": "/home", "fstype": None}, {"path": "/scratch", "fstype": "lustre"}]
    assert config.problem(GOOD) == ""


@pytest.mark.parametrize("key, value, words", [
    ("expected_gpus", 8.0, "kiln_burnin_expected_gpus"), ("expected_gpus", True, "kiln_burnin_expected_gpus"),
    ("expected_gpus", 5000, "0-4096"), ("unknown_drain_after", "3", "node_health_unknown_drain_after"),
    ("resume_after_clean", -1, "node_health_resume_after_clean"), ("node", "gpu 01; rm -rf /", "NodeName"),
    ("mounts", "/home", "node_health_mounts"), ("mounts", [{"path": "/x", "fs": "nfs"}], "unknown keys"),
    ("mounts", [{"path": "/x", "fstype": "NFS 4"}], "fstype"), ("dcgm", "on", "node_health_dcgm"),
    ("timeout_s", math.inf, "node_health_timeout"), ("timeout_s", 0, "node_health_timeout"),
    ("dmesg", "dmesg; reboot", "node_health_dmesg"), ("query_smi", "yes", "node_health_query_smi"),
])
def test_each_bad_value_names_its_variable(key, value, words):
    bad = dict(GOOD, **{key: value})
    with pytest.raises(kv.KilnConfigError, match="kiln-health configuration") as info:
        config.validate(bad)
    assert words in str(info.value)
    assert words in config.problem(bad)


def test_unknown_and_missing_keys_are_refused():
    assert "unknown keys ['expected_gpu']" in config.problem(dict(GOOD, expected_gpu=8))
    assert "mounts (set by node_health_mounts) is missing" in config.problem({k: v for k, v in GOOD.items()
                                                                               if k != "mounts"})


@settings(max_examples=200, deadline=None)
@given(key=st.sampled_from(sorted(GOOD)), value=st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2)))
def test_any_value_validates_or_is_a_config_error_never_a_traceback(key, value):
    try:
        config.validate(dict(GOOD, **{key: value}))
    except kv.KilnConfigError as exc:
        assert "kiln-health configuration" in str(exc)


def test_a_fail_asks_for_a_drain_naming_the_first_failed_check():
    result = run("check", {"id": "gpu.count", "status": "PASS"}, fail("xid.kernel_log", "XIDs 79 (0000:18:00)"),
                 fail("gpu.fabric"))
    streak = action.streaks({}, result)
    wanted = action.wanted_action(result, streak, CFG)
    assert wanted["action"] == "drain" and wanted["reason"] == "HEALTH: xid.kernel_log: XIDs 79 (0000:18:00)"
    assert streak == {"unknown_runs": {}, "clean_runs": 0}


def test_unknown_drains_only_after_n_consecutive_runs_and_a_judged_run_ends_the_streak():
    state: dict = {}
    unknown = run("check", {"id": "xid.kernel_log", "status": "UNKNOWN", "detail": "dmesg refused"})
    for n in (1, 2):
        state = action.streaks(state, unknown)
        assert state["unknown_runs"] == {"xid.kernel_log": n}
        assert action.wanted_action(unknown, state, CFG)["action"] == "none"
    state = action.streaks(state, unknown)
    wanted = action.wanted_action(unknown, state, CFG)
    assert wanted["reason"] == "HEALTH: unknown: xid.kernel_log: dmesg refused"
    judged = run("check", {"id": "xid.kernel_log", "status": "PASS"})
    assert action.streaks(state, judged)["unknown_runs"] == {}


def test_only_the_periodic_check_counts_clean_runs_and_any_hook_breaks_them():
    clean = run("check", {"id": "gpu.count", "status": "PASS"})
    state = action.streaks({}, clean)
    state = action.streaks(state, run("prolog", {"id": "gpu.count", "status": "PASS"}))
    assert state["clean_runs"] == 1
    state = action.streaks(state, run("epilog", fail("memory.ecc_uncorrectable")))
    assert state["clean_runs"] == 0
    state = action.streaks(action.streaks(state, clean), clean)
    assert action.wanted_action(clean, state, CFG)["action"] == "resume"
    assert action.wanted_action(run("prolog", {"id": "gpu.count", "status": "PASS"}), state, CFG)["action"] == "none"
    never = dict(CFG, resume_after_clean=0)
    assert action.wanted_action(clean, {"clean_runs": 99}, never)["action"] == "none"


DRAIN = {"action": "drain", "key": "HEALTH: gpu.count:", "reason": "HEALTH: gpu.count: 7 on PCI, 8 expected"}
RESUME = {"action": "resume", "key": "HEALTH:", "reason": ""}


@pytest.mark.parametrize("row, wanted, apply, outcome", [
    ({"state": "idle", "reason": ""}, DRAIN, True, "change"),
    ({"state": "allocated", "reason": ""}, DRAIN, True, "change"),
    ({"state": "drained", "reason": "RMA 42"}, DRAIN, False, "held"),
    ({"state": "drained", "reason": "BURNIN: nccl.pair.all_reduce: slow"}, DRAIN, False, "held"),
    ({"state": "draining", "reason": "UPGRADE: batch 2"}, DRAIN, False, "held"),
    ({"state": "drained", "reason": "HEALTH: gpu.count: 6 on PCI, 8 expected"}, DRAIN, False, "unchanged"),
    ({"state": "drained", "reason": "HEALTH: xid.kernel_log: 79"}, DRAIN, True, "change"),
    ({"state": "drained", "reason": "HEALTH: xid.kernel_log: 79"}, RESUME, True, "change"),
    ({"state": "drained", "reason": "RMA 42"}, RESUME, False, "held"),
    ({"state": "drained", "reason": "BURNIN: x"}, RESUME, False, "held"),
    ({"state": "idle", "reason": ""}, RESUME, False, "unchanged"),
    (None, DRAIN, False, "unknown"),
])
def test_the_one_drain_rule_with_kiln_health_s_prefix(row, wanted, apply, outcome):
    decision = action.decide_action(wanted, row)
    assert (decision["apply"], decision["outcome"]) == (apply, outcome), decision


@settings(max_examples=300, deadline=None)
@given(state=st.sampled_from(["idle", "allocated", "mixed", "drained", "draining", "down", "down*", "fail", "weird"]),
       reason=st.text(max_size=40), wanted=st.sampled_from([DRAIN, RESUME]))
def test_never_acts_on_a_reason_kiln_health_did_not_set(state, reason, wanted):
    decision = action.decide_action(wanted, {"state": state, "reason": reason})
    if reason.strip() and not reason.startswith("HEALTH:"):
        assert not decision["apply"]
    if wanted["action"] == "resume" and decision["apply"]:
        assert reason.startswith("HEALTH:")


def test_scontrol_is_argv_with_the_reason_one_argument():
    argv = action.scontrol_argv("gpu01", dict(DRAIN, reason="HEALTH: x: a; rm -rf / $(id)"))
    assert argv == ["scontrol", "update", "NodeName=gpu01", "State=DRAIN", "Reason=HEALTH: x: a; rm -rf / $(id)"]
    assert action.scontrol_argv("gpu01", RESUME) == ["scontrol", "update", "NodeName=gpu01", "State=RESUME"]


def test_long_or_multiline_details_make_a_one_line_reason_of_200_characters():
    result = run("check", fail("fabric.counters", "x" * 500 + "\nsecond line"))
    reason = action.wanted_action(result, action.streaks({}, result), CFG)["reason"]
    assert len(reason) <= 200 and "\n" not in reason


@pytest.mark.parametrize("seen, status", [
    ([{"path": "/home", "mounted": True, "fstype": "nfs4", "responds": True},
      {"path": "/scratch", "mounted": True, "fstype": "lustre", "responds": True}], "PASS"),
    ([{"path": "/home", "mounted": False}, {"path": "/scratch", "mounted": True, "fstype": "lustre",
                                            "responds": True}], "FAIL"),
    ([{"path": "/home", "mounted": True, "fstype": "nfs4", "responds": False, "error": "timed out"},
      {"path": "/scratch", "mounted": True, "fstype": "lustre", "responds": True}], "FAIL"),
    ([{"path": "/home", "mounted": True, "fstype": "nfs4", "responds": True},
      {"path": "/scratch", "mounted": True, "fstype": "xfs", "responds": True}], "FAIL"),
    ([{"path": "/home", "mounted": None, "error": "mountinfo unreadable"}], "INCOMPLETE"),
    ([], "INCOMPLETE"),
    (None, "INCOMPLETE"),
])
def test_mounts(seen, status):
    assert judge.mounts_check(CFG["mounts"], seen)["status"] == status
    assert judge.mounts_check([], seen)["status"] == "SKIP"


def test_textfile_leaves_out_non_finite_values_and_escapes_labels():
    result = {"status": "FAIL", "checks": [{"id": 'odd"check\\', "status": "FAIL"}]}
    snap = {"gpu": {"gpus": [{"index": 0, "ecc": {"volatile_dram_uncorrectable": float("nan"),
                                                  "volatile_sram_uncorrectable": 3}}]}}
    text = textfile.render("check", result, 1.0e9, 0.5, {"unknown_runs": {}, "clean_runs": 0}, True, snap)
    assert 'check="odd\\"check\\\\"' in text and "nan" not in text.lower()
    assert 'kiln_health_gpu_ecc_volatile_uncorrectable{gpu="0",kind="sram"} 3' in text
    assert "kind=\"dram\"" not in text and "kiln_health_drained 1" in text
    assert textfile.counter_deltas({"p": {"a": 5, "b": 1}}, {"p": {"a": 2, "b": 3}}) == {"p": {"a": 3}}
