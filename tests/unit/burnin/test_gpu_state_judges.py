"""GPU state judges (issue 35 item 6, module_utils/kiln/health/gpu_state.py): gpu.persistence_mode, gpu.fabric
and nvlink.errors, their rules (data/burnin_health.yml sections gpu_state and nvlink_errors, validated by
kiln.health.rules), the burn-in's wiring (checks.gpu_state_checks, assemble's nvlink baseline from the history)
and the emulator's faults judged end to end. Property tests (hypothesis): hostile or missing values never
PASS and never raise; growth above a rule never PASSes."""

from __future__ import annotations

import copy
import json
import os
import sys
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln_data
from kiln_loader import load_source
from kiln_paths import REPO

sys.path.insert(0, str(REPO / "module_utils"))

from kiln.burnin import assemble as kb  # noqa: E402
from kiln.burnin import baseline as kbl  # noqa: E402
from kiln.burnin import checks as kbc  # noqa: E402
from kiln.facts import hardware as khw  # noqa: E402
from kiln.health import gpu_state as gs  # noqa: E402
from kiln.health import rules as kh  # noqa: E402

KilnConfigError = kh.kiln_verdict.KilnConfigError
HEALTH = kiln_data.health()
GPU_EMU = REPO / "tests" / "fixtures" / "gpu-emulator"
H100_PROFILE = GPU_EMU / "profiles" / "h100-sxm-8.json"
emulator = load_source("kiln_nvidia_smi_emulator", GPU_EMU / "nvidia-smi")
NOT_PASS = {"WARN", "FAIL", "INCOMPLETE", "SKIP"}
FM_ACTIVE = {"present": True, "active": "active"}


def gpu(index=0, uuid=None, **extra):
    entry = {"index": index, "uuid": uuid or f"GPU-{index:08d}-0000-0000-0000-000000000000",
             "architecture": "Hopper", "persistence_mode": True,
             "fabric": {"state": "Completed", "status": "Success", "clique_id": 0, "cluster_uuid": None,
                        "health_summary": None},
             "nvlink": {"links": 2, "active": 2, "inactive": 0},
             "nvlink_errors": {"0": {"replay": 0, "recovery": 0, "crc": 0}, "1": {"replay": 0, "recovery": 0, "crc": 0}}}
    entry.update(extra)
    return entry


_TWO = object()


def facts(gpus=_TWO, nvswitch_count=4, fabric_manager=FM_ACTIVE, **extra):
    out = {"gpus": [gpu(i) for i in range(2)] if gpus is _TWO else gpus, "nvswitch_count": nvswitch_count,
           "fabric_manager": fabric_manager, "driver_loaded": True, "source": "nvidia-smi", "pci_gpu_count": 2}
    out.update(extra)
    return out


# --------------------------------------------------------------------------- rules
def test_shipped_rules_have_sources_and_the_three_counters():
    rules = kh.gpu_state_rules(HEALTH)
    assert rules["persistence_mode"]["disabled"]["status"] == "WARN"
    assert rules["fabric"]["registered"]["states"] == ["Completed"]
    assert rules["fabric"]["registered"]["statuses"] == ["Success"]
    assert rules["fabric"]["in_progress"]["status"] == "WARN"
    assert rules["fabric"]["manager_inactive"]["status"] == rules["fabric"]["not_registered"]["status"] == "FAIL"
    assert {"replay", "recovery", "crc"} <= set(rules["nvlink_errors"])
    assert rules["nvlink_errors"]["recovery"]["status"] == "FAIL"
    for rule in list(rules["nvlink_errors"].values()) + [rules["persistence_mode"]["disabled"]] + \
            [rules["fabric"][k] for k in ("manager_inactive", "registered", "in_progress", "not_registered")]:
        assert rule["source"].strip() and rule["confidence"] in ("DERIVED", "REPORTED", "UNVERIFIED", "SITE")
        if rule["confidence"] == "UNVERIFIED":
            assert rule.get("status") != "FAIL" or rule.get("note")
    # The sections alone work too (what a caller wraps).
    assert kh.gpu_state_rules({"gpu_state": HEALTH["gpu_state"], "nvlink_errors": HEALTH["nvlink_errors"]})


def _write(tmp_path, mutate):
    import yaml
    data = yaml.safe_load((REPO / "data" / "burnin_health.yml").read_text())
    mutate(data)
    path = tmp_path / "health.yml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.pop("gpu_state"), "gpu_state"),
    (lambda d: d.pop("nvlink_errors"), "nvlink_errors"),
    (lambda d: d["gpu_state"]["persistence_mode"].pop("disabled"), "gpu_state.persistence_mode.disabled"),
    (lambda d: d["gpu_state"]["persistence_mode"]["disabled"].update(status="PASS"), "status"),
    (lambda d: d["gpu_state"]["fabric"].pop("in_progress"), "gpu_state.fabric.in_progress"),
    (lambda d: d["gpu_state"]["fabric"]["registered"].update(states=[]), "registered.states"),
    (lambda d: d["gpu_state"]["fabric"]["registered"].update(statuses="Success"), "registered.statuses"),
    (lambda d: d["gpu_state"]["fabric"]["registered"].update(confidence="SURE"), "confidence"),
    (lambda d: d["gpu_state"]["fabric"]["in_progress"].update(states=["Completed"]), "both registered"),
    (lambda d: d["gpu_state"]["fabric"]["manager_inactive"].update(source=" "), "no source"),
    (lambda d: d["nvlink_errors"]["counters"].pop("crc"), "nvlink_errors.counters.crc"),
    (lambda d: d["nvlink_errors"]["counters"]["replay"].update(max_growth=-1), "max_growth"),
    (lambda d: d["nvlink_errors"]["counters"]["replay"].update(max_growth=1.5), "max_growth"),
    (lambda d: d["nvlink_errors"]["counters"]["replay"].update(max_growth=2 ** 40), "counter_max"),
    (lambda d: d["nvlink_errors"]["counters"]["recovery"].update(confidence="UNVERIFIED"), "UNVERIFIED"),
    (lambda d: d["nvlink_errors"]["counters"].update({"Bad Name": d["nvlink_errors"]["counters"]["crc"]}),
     "counter name"),
])
def test_bad_rules_are_config_errors_naming_the_key(tmp_path, mutate, message):
    with pytest.raises(KilnConfigError, match=message):
        kh.load_health(_write(tmp_path, mutate))


def test_judges_reject_junk_rules():
    for junk in (None, {}, "rules", {"gpu_state": {}}):
        for judge in (gs.persistence_check, gs.fabric_check):
            with pytest.raises(KilnConfigError):
                judge(facts(), junk, True)
        with pytest.raises(KilnConfigError):
            gs.nvlink_errors_check(facts(), None, junk, True)


# --------------------------------------------------------------------------- gpu.persistence_mode
def test_persistence():
    assert gs.persistence_check(facts(), HEALTH, True)["status"] == "PASS"
    off = facts(gpus=[gpu(0), gpu(1, persistence_mode=False)])
    check = gs.persistence_check(off, HEALTH, True)
    assert check["id"] == "gpu.persistence_mode" and check["status"] == "WARN"
    assert "GPU1 persistence mode Disabled" in check["detail"] and check["value"] == 1
    assert gs.persistence_check(facts(gpus=[gpu(0, persistence_mode=None)]), HEALTH, True)["status"] == "INCOMPLETE"
    assert gs.persistence_check(facts(gpus=[gpu(0, persistence_mode="Enabled")]), HEALTH, True)["status"] == "INCOMPLETE"
    assert gs.persistence_check(facts(), HEALTH, False)["status"] == "SKIP"
    assert gs.persistence_check(facts(gpus=[]), HEALTH, True)["status"] == "SKIP"
    assert gs.persistence_check(facts(gpus="junk"), HEALTH, True)["status"] == "INCOMPLETE"
    site = copy.deepcopy(HEALTH)
    site["gpu_state"]["persistence_mode"]["disabled"].update(status="FAIL", confidence="SITE")
    assert gs.persistence_check(off, site, True)["status"] == "FAIL"


# --------------------------------------------------------------------------- gpu.fabric
@pytest.mark.parametrize("change,status,words", [
    ({}, "PASS", "nvidia-fabricmanager active"),
    ({"nvswitch_count": 0}, "SKIP", "no NVSwitch"),
    ({"fabric_manager": {"present": True, "active": "failed"}}, "FAIL", "nvidia-fabricmanager is failed"),
    ({"fabric_manager": {"present": True, "active": "inactive"}}, "FAIL", "inactive"),
    ({"fabric_manager": {"present": False, "active": None}}, "FAIL", "not installed"),
    ({"fabric_manager": {"present": True, "active": None}}, "INCOMPLETE", "state is unknown"),
    ({"fabric_manager": None}, "INCOMPLETE", "not in the facts"),
    ({"fabric_manager": "active"}, "INCOMPLETE", "malformed"),
    ({"fabric_manager": {"present": "yes", "active": "active"}}, "INCOMPLETE", "present"),
    ({"nvswitch_count": "4"}, "INCOMPLETE", "nvswitch_count"),
    ({"gpus": []}, "INCOMPLETE", "unknown on an NVSwitch board"),
])
def test_fabric_service(change, status, words):
    check = gs.fabric_check(facts(**change), HEALTH, True)
    assert check["id"] == "gpu.fabric" and check["status"] == status and words in check["detail"]


@pytest.mark.parametrize("fabric,arch,status,words", [
    ({"state": "In Progress", "status": None}, "Hopper", "WARN", "GPU1 fabric registration In Progress"),
    ({"state": "Not Started", "status": None}, "Hopper", "FAIL", "GPU1 fabric state Not Started"),
    ({"state": "Completed", "status": "Timeout"}, "Hopper", "FAIL", "status Timeout"),
    ({"state": "Completed", "status": None}, "Hopper", "INCOMPLETE", "no status"),
    ({"state": None, "status": None}, "Hopper", "INCOMPLETE", "reports no fabric registration state"),
    ({"state": None, "status": None}, None, "INCOMPLETE", "architecture is unknown"),
    ({"state": None, "status": None}, "Ampere", "PASS", "judged on Fabric Manager alone"),
    ({"state": 3, "status": "Success"}, "Hopper", "INCOMPLETE", "not a state name"),
    ({"state": " ", "status": "Success"}, "Hopper", "INCOMPLETE", "not a state name"),
    ("Completed", "Hopper", "INCOMPLETE", "malformed"),
])
def test_fabric_registration(fabric, arch, status, words):
    check = gs.fabric_check(facts(gpus=[gpu(0), gpu(1, fabric=fabric, architecture=arch)]), HEALTH, True)
    assert check["status"] == status, check["detail"]
    assert words in check["detail"]


def test_fabric_without_smi_on_an_nvswitch_board_judges_the_service_never_passes():
    # Registration needs nvidia-smi's data: not judged (SKIP, like the other nvidia-smi checks), never PASS.
    check = gs.fabric_check(facts(), HEALTH, False)
    assert check["status"] == "SKIP" and "not judged" in check["detail"]
    # A service that cannot be asked is INCOMPLETE ...
    assert gs.fabric_check(facts(fabric_manager={"present": True, "active": None}), HEALTH, False)["status"] == \
        "INCOMPLETE"
    # ... and one that is down still FAILs it.
    assert gs.fabric_check(facts(fabric_manager={"present": False, "active": None}), HEALTH, False)["status"] == "FAIL"
    assert gs.fabric_check(facts(nvswitch_count=0), HEALTH, False)["status"] == "SKIP"


# --------------------------------------------------------------------------- nvlink.errors
def _with(counters, index=0, **extra):
    return gpu(index, nvlink_errors=counters, **extra)


def test_first_run_records_the_baseline():
    check, snap = gs.nvlink_errors_check(facts(), None, HEALTH, True)
    assert check["id"] == "nvlink.errors" and check["status"] == "PASS" and "baseline recorded" in check["detail"]
    assert snap == {g["uuid"]: g["nvlink_errors"] for g in facts()["gpus"]}
    assert gs.nvlink_snapshot_ok(snap)


@pytest.mark.parametrize("counter,after,status", [
    ("replay", 1, "WARN"), ("crc", 7, "WARN"), ("recovery", 1, "FAIL"), ("replay", 0, "PASS"),
])
def test_growth_is_judged_per_counter_rule(counter, after, status):
    _check, snap = gs.nvlink_errors_check(facts(), None, HEALTH, True)
    grown = facts()
    grown["gpus"][1]["nvlink_errors"]["1"][counter] = after
    check, new = gs.nvlink_errors_check(grown, snap, HEALTH, True)
    assert check["status"] == status
    if status != "PASS":
        assert f"GPU1 link 1 {counter} +{after} (0 -> {after})" in check["detail"]
        assert check["value"] == after and check["growth"] == {"GPU1": {"1": {counter: after}}}
    assert new[grown["gpus"][1]["uuid"]]["1"][counter] == after  # the snapshot is what was read now


def test_growth_within_a_site_rule_passes_and_names_it():
    site = copy.deepcopy(HEALTH)
    site["nvlink_errors"]["counters"]["replay"].update(max_growth=5, confidence="SITE")
    _c, snap = gs.nvlink_errors_check(facts(), None, site, True)
    grown = facts()
    grown["gpus"][0]["nvlink_errors"]["0"]["replay"] = 5
    check, _ = gs.nvlink_errors_check(grown, snap, site, True)
    assert check["status"] == "PASS" and "max +5" in check["detail"]
    grown["gpus"][0]["nvlink_errors"]["0"]["replay"] = 6
    assert gs.nvlink_errors_check(grown, snap, site, True)[0]["status"] == "WARN"


def test_counter_that_went_down_is_a_new_baseline_not_growth():
    before = facts(gpus=[_with({"0": {"replay": 50, "recovery": 3, "crc": 9}})])
    _c, snap = gs.nvlink_errors_check(before, None, HEALTH, True)
    after = facts(gpus=[_with({"0": {"replay": 2, "recovery": 0, "crc": 0}})])
    check, new = gs.nvlink_errors_check(after, snap, HEALTH, True)
    assert check["status"] == "PASS" and "went down 50 -> 2" in check["detail"] and "new baseline" in check["detail"]
    assert new[after["gpus"][0]["uuid"]]["0"] == {"replay": 2, "recovery": 0, "crc": 0}
    # growth from the new baseline is judged again
    later = facts(gpus=[_with({"0": {"replay": 2, "recovery": 1, "crc": 0}})])
    assert gs.nvlink_errors_check(later, new, HEALTH, True)[0]["status"] == "FAIL"


@pytest.mark.parametrize("value,words", [
    (None, "not reported"), ("12", "not an integer"), (True, "not an integer"), (1.5, "not an integer"),
    (-1, "negative"), (2 ** 32, "implausible"),
])
def test_hostile_counter_values_are_incomplete(value, words):
    hostile = facts(gpus=[_with({"0": {"replay": value, "recovery": 0, "crc": 0}})])
    check, _ = gs.nvlink_errors_check(hostile, None, HEALTH, True)
    assert check["status"] == "INCOMPLETE" and words in check["detail"] and "GPU0 link 0 replay" in check["detail"]


def test_gpus_are_matched_by_uuid_and_a_swapped_gpu_starts_a_new_baseline():
    a, b = _with({"0": {"replay": 10, "recovery": 0, "crc": 0}}, 0, uuid="GPU-a"), \
        _with({"0": {"replay": 0, "recovery": 0, "crc": 0}}, 1, uuid="GPU-b")
    _c, snap = gs.nvlink_errors_check(facts(gpus=[a, b]), None, HEALTH, True)
    # Same GPUs, enumerated the other way round: no growth.
    swapped_order = facts(gpus=[dict(b, index=0), dict(a, index=1)])
    assert gs.nvlink_errors_check(swapped_order, snap, HEALTH, True)[0]["status"] == "PASS"
    # GPU-a replaced by GPU-c (counters 11, not +1 over GPU-a's 10): a new baseline, noted.
    c = _with({"0": {"replay": 11, "recovery": 0, "crc": 0}}, 0, uuid="GPU-c")
    check, new = gs.nvlink_errors_check(facts(gpus=[c, b]), snap, HEALTH, True)
    assert check["status"] == "PASS" and "no baseline for GPU-c" in check["detail"]
    assert set(new) == {"GPU-b", "GPU-c"}  # the gone GPU is dropped


def test_gpu_without_uuid_is_keyed_by_index():
    no_uuid = facts(gpus=[_with({"0": {"replay": 0, "recovery": 0, "crc": 0}}, 3, uuid=None)])
    no_uuid["gpus"][0]["uuid"] = None
    _c, snap = gs.nvlink_errors_check(no_uuid, None, HEALTH, True)
    assert list(snap) == ["gpu3"]


@pytest.mark.parametrize("change,status,words", [
    ({"nvswitch_count": 0, "gpus": [gpu(0, nvlink={"links": 0, "active": 0, "inactive": 0}, nvlink_errors=None)]},
     "SKIP", "no NVLink on this board"),
    ({"gpus": [gpu(0, nvlink_errors=None)]}, "INCOMPLETE", "GPU0: NVLink error counters not read (2 links)"),
    ({"gpus": [gpu(0, nvlink=None, nvlink_errors=None)]}, "INCOMPLETE", "not read"),
    ({"gpus": [gpu(0, nvlink={"links": 0}, nvlink_errors={})]}, "INCOMPLETE", "no NVLink reported on an NVSwitch"),
    ({"gpus": [gpu(0, nvlink_errors="0: 0")]}, "INCOMPLETE", "malformed"),
    ({"gpus": [gpu(0, nvlink_errors={"x": {"replay": 0, "recovery": 0, "crc": 0}})]}, "INCOMPLETE", "not a link"),
    ({"gpus": [gpu(0, nvlink_errors={"0": {"replay": 0, "crc": 0}})]}, "INCOMPLETE", "recovery not reported"),
    ({"gpus": [gpu(0, nvlink_errors={"0": {}})]}, "INCOMPLETE", "no error counter reported"),
    ({"gpus": [gpu(0, nvlink_errors={"0": {"rx_errors": 0}})]}, "SKIP", "only counters the rules do not name"),
    ({"gpus": ["GPU0"]}, "INCOMPLETE", "malformed GPU entry"),
    ({"gpus": None}, "SKIP", "no GPU"),
    ({"gpus": {"0": {}}}, "INCOMPLETE", "not a list"),
])
def test_nvlink_cases(change, status, words):
    check, _ = gs.nvlink_errors_check(facts(**change), None, HEALTH, True)
    assert check["status"] == status, check["detail"]
    assert words in check["detail"]


def test_nvlink5_counters_are_judged_where_the_rules_name_them():
    link = {"link_recovery_failed_events": 0, "total_link_recovery_events": 2, "rx_errors": 0}
    _c, snap = gs.nvlink_errors_check(facts(gpus=[_with({"0": link})]), None, HEALTH, True)
    grown = dict(link, total_link_recovery_events=3)
    check, _ = gs.nvlink_errors_check(facts(gpus=[_with({"0": grown})]), snap, HEALTH, True)
    assert check["status"] == "WARN" and "total_link_recovery_events +1" in check["detail"]


def test_without_smi_skip_and_the_baseline_is_kept():
    _c, snap = gs.nvlink_errors_check(facts(), None, HEALTH, True)
    check, kept = gs.nvlink_errors_check(facts(), snap, HEALTH, False)
    assert check["status"] == "SKIP" and kept == snap


def test_unreadable_gpu_keeps_its_previous_entry():
    _c, snap = gs.nvlink_errors_check(facts(), None, HEALTH, True)
    half = facts(gpus=[gpu(0), gpu(1, nvlink_errors=None)])
    check, kept = gs.nvlink_errors_check(half, snap, HEALTH, True)
    assert check["status"] == "INCOMPLETE" and kept == snap


@pytest.mark.parametrize("previous,words", [
    ("snapshot", "previous snapshot malformed"),
    ({"GPU-00000000-0000-0000-0000-000000000000": "junk"}, "previous snapshot for"),
    ({"GPU-00000000-0000-0000-0000-000000000000": {"0": {"replay": -5, "recovery": 0, "crc": 0}}},
     "previous value -5 is negative"),
    ({"GPU-00000000-0000-0000-0000-000000000000": {"0": ["replay", 0]}}, "previous snapshot malformed"),
])
def test_malformed_previous_is_incomplete_and_the_current_reading_returned(previous, words):
    check, snap = gs.nvlink_errors_check(facts(), previous, HEALTH, True)
    assert check["status"] == "INCOMPLETE" and words in check["detail"]
    assert gs.nvlink_snapshot_ok(snap) and snap["GPU-00000001-0000-0000-0000-000000000000"]


# --------------------------------------------------------------------------- properties
_HOSTILE = st.one_of(st.none(), st.booleans(), st.integers(-10, 2 ** 40), st.floats(allow_nan=True),
                     st.text(max_size=12), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                                st.integers(), max_size=2))
_GOOD_COUNTER = st.integers(0, 1000)


def _sane(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 4294967294


@st.composite
def _gpu_entries(draw):
    """A GPU entry whose fields are sometimes hostile; returns (entry, the keys made hostile)."""
    hostile = set()
    entry = gpu(draw(st.integers(0, 7)), uuid=draw(st.sampled_from([None, "GPU-x", "GPU-y", "GPU-z"])))
    for key in ("persistence_mode", "fabric", "nvlink_errors", "nvlink", "architecture", "uuid", "index"):
        if draw(st.booleans()) and draw(st.booleans()):
            entry[key] = draw(_HOSTILE)
            if not (key == "persistence_mode" and entry[key] is True):
                hostile.add(key)
    if isinstance(entry.get("nvlink_errors"), dict) and "nvlink_errors" not in hostile:
        for link in list(entry["nvlink_errors"]):
            if draw(st.booleans()) and draw(st.booleans()):
                counter = draw(st.sampled_from(["replay", "recovery", "crc"]))
                value = draw(_HOSTILE)
                entry["nvlink_errors"][link] = dict(entry["nvlink_errors"][link], **{counter: value})
                if not _sane(value):
                    hostile.add("nvlink_errors")
    return entry, hostile


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_gpu_entries(), min_size=1, max_size=4), st.sampled_from([0, 4]),
       st.one_of(st.just(FM_ACTIVE), _HOSTILE), st.one_of(st.none(), _HOSTILE), st.booleans())
def test_hostile_facts_never_raise(entries, switches, fm, previous, smi):
    f = facts(gpus=[e for e, _ in entries], nvswitch_count=switches, fabric_manager=fm)
    statuses = {gs.persistence_check(f, HEALTH, smi)["status"], gs.fabric_check(f, HEALTH, smi)["status"]}
    check, snap = gs.nvlink_errors_check(f, previous, HEALTH, smi)
    statuses.add(check["status"])
    assert statuses <= {"PASS", "WARN", "FAIL", "INCOMPLETE", "SKIP"}
    assert isinstance(snap, dict) and gs.nvlink_snapshot_ok(snap)
    json.dumps([check, snap])  # what Ansible and the history store
    if any("nvlink_errors" in keys for _, keys in entries) or (previous is not None and not isinstance(previous, dict)):
        assert check["status"] != "PASS"  # a missing, malformed or hostile counter (or baseline) never passes
    if smi and any("persistence_mode" in keys for _, keys in entries):
        assert gs.persistence_check(f, HEALTH, smi)["status"] != "PASS"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 3), st.sampled_from(["replay", "recovery", "crc"]), _HOSTILE)
def test_a_hostile_counter_never_passes(link, counter, value):
    counters = {str(n): {"replay": 0, "recovery": 0, "crc": 0} for n in range(4)}
    counters[str(link)][counter] = value
    check, _ = gs.nvlink_errors_check(facts(gpus=[_with(counters)]), None, HEALTH, True)
    if not _sane(value):
        assert check["status"] == "INCOMPLETE"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["replay", "recovery", "crc"]), st.tuples(_GOOD_COUNTER, _GOOD_COUNTER),
                       min_size=1), st.integers(0, 3))
def test_growth_above_the_rule_never_passes(pairs, link):
    before = {str(n): {"replay": 0, "recovery": 0, "crc": 0} for n in range(4)}
    after = copy.deepcopy(before)
    for counter, (old, new) in pairs.items():
        before[str(link)][counter] = old
        after[str(link)][counter] = new
    _c, snap = gs.nvlink_errors_check(facts(gpus=[_with(before)]), None, HEALTH, True)
    check, _ = gs.nvlink_errors_check(facts(gpus=[_with(after)]), snap, HEALTH, True)
    rules = kh.gpu_state_rules(HEALTH)["nvlink_errors"]
    over = [c for c, (old, new) in pairs.items() if new - old > rules[c]["max_growth"]]
    if over:
        assert check["status"] in {rules[c]["status"] for c in over} | {"FAIL"}
        assert check["status"] != "PASS"
    else:
        assert check["status"] == "PASS"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_gpu_entries(), min_size=1, max_size=4))
def test_a_missing_or_hostile_gpu_value_never_passes_persistence(entries):
    f = facts(gpus=[e for e, _ in entries])
    check = gs.persistence_check(f, HEALTH, True)
    if any(not isinstance(e, dict) or e.get("persistence_mode") is not True for e, _ in entries):
        assert check["status"] != "PASS"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_gpu_entries(), min_size=1, max_size=4), st.one_of(st.just(FM_ACTIVE), _HOSTILE))
def test_fabric_passes_only_with_the_service_active_and_every_judged_gpu_registered(entries, fm):
    f = facts(gpus=[e for e, _ in entries], fabric_manager=fm)
    check = gs.fabric_check(f, HEALTH, True)
    if check["status"] == "PASS":
        assert fm == FM_ACTIVE
        for e, _ in entries:
            fab = e.get("fabric") if isinstance(e.get("fabric"), dict) else {}
            arch = e.get("architecture")
            old_arch = isinstance(arch, str) and arch.strip() and not arch.strip().lower().startswith(
                ("hopper", "blackwell", "grace", "rubin"))
            assert (fab.get("state") == "Completed" and fab.get("status") == "Success") or \
                (fab.get("state") is None and old_arch)


# --------------------------------------------------------------------------- burn-in wiring
def _node(gpu_facts):
    return {"kiln_gpu": gpu_facts, "gpu_present": True, "gpu_name": "NVIDIA H100 80GB HBM3", "sku": "h100-sxm",
            "xid_log": "", "engine": "nccl-tests"}


def _checks(out, node="n"):
    return {c["id"]: c for c in out["nodes"][node]["checks"]}


def test_every_node_gets_the_three_checks():
    out = kiln_data.assemble({"n": _node(facts()), "cpu": {"kiln_gpu": {"pci_gpu_count": 0}, "engine": "cpu"}},
                             mode="quick", final=False)
    for node, status in (("n", "PASS"), ("cpu", "SKIP")):
        checks = _checks(out, node)
        assert {checks[cid]["status"] for cid in kbc.GPU_STATE_CHECKS} == {status}, checks
    assert "baseline recorded" in _checks(out)["nvlink.errors"]["detail"]
    assert out["nodes"]["n"]["nvlink"]["baseline_run"] is None
    assert set(out["nodes"]["n"]["nvlink"]["counters"]) == {g["uuid"] for g in facts()["gpus"]}
    assert "nvlink" not in out["nodes"]["cpu"]


def test_growth_since_the_last_passing_run_warns_or_fails_the_node():
    first = kiln_data.assemble({"n": _node(facts())}, mode="quick", final=False)
    previous = {"n": {"run_id": "run-1", "counters": first["nodes"]["n"]["nvlink"]["counters"]}}
    grown = facts()
    grown["gpus"][0]["nvlink_errors"]["0"]["recovery"] = 2
    out = kiln_data.assemble({"n": _node(grown)}, mode="quick", final=False, nvlink_previous=previous)
    check = _checks(out)["nvlink.errors"]
    assert check["status"] == "FAIL" and "GPU0 link 0 recovery +2" in check["detail"]
    assert out["nodes"]["n"]["status"] == "FAIL" and out["nodes"]["n"]["nvlink"]["baseline_run"] == "run-1"


def _record(node_status, nvlink_status, counters):
    return {"status": node_status, "checks": [{"id": "nvlink.errors", "status": nvlink_status}],
            "nvlink": {"counters": counters, "baseline_run": None}}


def test_history_keeps_the_snapshot_only_from_a_run_that_passed_nvlink_errors(tmp_path):
    snap = {"GPU-a": {"0": {"replay": 1, "recovery": 0, "crc": 0}}}
    assert kb.nvlink_record(_record("PASS", "PASS", snap), {"counters": snap}) == {"counters": snap}
    assert kb.nvlink_record(_record("WARN", "PASS", snap), {"counters": snap}) == {"counters": snap}
    for node_status, check_status in (("WARN", "WARN"), ("FAIL", "PASS"), ("INCOMPLETE", "PASS"), ("PASS", "SKIP")):
        kept = kb.nvlink_record(_record(node_status, check_status, snap), {"counters": snap})
        assert set(kept) == {"baseline_kept"}
    # history_records writes it next to the other values; nvlink_baseline reads back the newest passing one.
    summary = {"run_id": "run-2", "mode": "quick", "nodes": {"n": _record("PASS", "PASS", snap)}}
    record = kb.history_records(summary, {}, "2026-01-01T00:00:00Z")["n"]
    assert record["nvlink"] == {"counters": snap}
    kbl.append(str(tmp_path), "n", dict(record, run_id="run-1"))
    grown = {"GPU-a": {"0": {"replay": 9, "recovery": 0, "crc": 0}}}
    kbl.append(str(tmp_path), "n", dict(record, run_id="run-2", status="FAIL", nvlink={"counters": grown}))
    kbl.append(str(tmp_path), "n", dict(record, run_id="run-3", nvlink={"baseline_kept": "nvlink.errors WARN"}))
    base = kb.nvlink_history(str(tmp_path), ["n", "other"])
    assert base["n"] == {"counters": snap, "run_id": "run-1", "note": None}
    assert base["other"]["counters"] is None
    assert kb.nvlink_history(None, ["n"]) == {}
    assert kb.nvlink_baseline("junk")["counters"] is None
    assert kb.nvlink_baseline([{"status": "PASS", "run_id": "x", "nvlink": {"counters": {"GPU-a": "bad"}}}])[
        "counters"] is None


def test_summary_with_the_nvlink_entry_is_valid():
    out = kiln_data.assemble({"n": _node(facts())}, mode="quick", final=False)
    summary = kb.report("r", "quick", out, "/nonexistent", write=False)["summary"]
    assert summary["nodes"]["n"]["nvlink"]["counters"]
    import jsonschema
    schema = json.loads((REPO / "data" / "burnin_summary.schema.json").read_text())
    jsonschema.validate(json.loads(json.dumps(summary)), schema)


# --------------------------------------------------------------------------- the emulator, end to end
def _emulated_facts(tmp_path, faults=None, fm=FM_ACTIVE):
    path = tmp_path / "gpu-faults.json"
    if faults is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(json.dumps(faults))
    with mock.patch.dict(os.environ, {"KILN_GPU_PROFILE": str(H100_PROFILE), "KILN_GPU_FAULTS": str(path)}):
        xml = emulator.run(["-q", "-x"])[1]
        status = emulator.run(["nvlink", "-s"])[1]
        errors = emulator.run(["nvlink", "-e"])[1]
    return khw.summarize([{"kind": "nvswitch", "address": f"0000:0{i}:00.0"} for i in range(4)],
                         smi=khw.parse_nvidia_smi_xml(xml), driver_loaded=True,
                         nvlink=khw.parse_nvlink_status(status), nvlink_errors=khw.parse_nvlink_errors(errors),
                         fabric_manager=fm)


def test_faults_injected_through_the_emulator_are_judged(tmp_path):
    clean = _emulated_facts(tmp_path)
    assert {gs.persistence_check(clean, HEALTH, True)["status"], gs.fabric_check(clean, HEALTH, True)["status"]} == {
        "PASS"}
    check, snap = gs.nvlink_errors_check(clean, None, HEALTH, True)
    assert check["status"] == "PASS" and len(snap) == 8 and all(len(v) == 18 for v in snap.values())
    faults = {"1": {"persistence_mode": "Disabled"}, "4": {"fabric_state": "In Progress"},
              "6": {"nvlink_errors": {"9": {"crc": 3}}}}
    faulty = _emulated_facts(tmp_path, faults)
    assert gs.persistence_check(faulty, HEALTH, True)["status"] == "WARN"
    assert gs.fabric_check(faulty, HEALTH, True)["status"] == "WARN"
    check, _ = gs.nvlink_errors_check(faulty, snap, HEALTH, True)
    assert check["status"] == "WARN" and "GPU6 link 9 crc +3 (0 -> 3)" in check["detail"]
    # The fault removed (file deleted): counters back to 0 read as a reset, not growth.
    assert gs.nvlink_errors_check(_emulated_facts(tmp_path), snap, HEALTH, True)[0]["status"] == "PASS"
    assert gs.fabric_check(_emulated_facts(tmp_path, fm={"present": True, "active": "failed"}), HEALTH, True)[
        "status"] == "FAIL"
