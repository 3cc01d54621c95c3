"""module_utils/kiln_health.py: memory checks, dcgmi diag parsing and verdicts, rules file.

Normal cases come from recorded nvidia-smi XML (tests/fixtures/nvidia-smi), the nvidia-smi
emulator (tests/fixtures/gpu-emulator) and the dcgmi emulator (tests/fixtures/emulators);
DCGM 3.x samples are written inline in the layout of DCGM's own Diag.cpp / NVVS JSON (the
emulator speaks 4.x only). Property tests (hypothesis) feed hostile inputs and check that
nothing raises and that PASS only comes from counters and tests that were really fine.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from kiln_loader import load_source

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "module_utils"))

import kiln_gpu as kg  # noqa: E402
import kiln_health as kh  # noqa: E402

KilnConfigError = kh.kiln_verdict.KilnConfigError
SMI_FIXTURES = REPO / "tests" / "fixtures" / "nvidia-smi"
GPU_EMU = REPO / "tests" / "fixtures" / "gpu-emulator"
EMU = REPO / "tests" / "fixtures" / "emulators"
PY = sys.executable
STATUSES = {"PASS", "WARN", "FAIL", "INCOMPLETE", "SKIP"}
HEALTH = kh.load_health()


_load = load_source


smi_emulator = _load("kiln_nvidia_smi_emulator", GPU_EMU / "nvidia-smi")


def by_id(checks):
    return {c["id"]: c for c in checks}


def facts_from_xml(text: str) -> dict:
    return kg.summarize([], smi=kg.parse_nvidia_smi_xml(text), driver_loaded=True)


# --------------------------------------------------------------------------- rules file
def test_default_rules_file_loads_with_sources_and_confidences():
    data = kh.load_health()
    assert data["schema"] == kh.SCHEMA
    for section in ("ecc_uncorrectable", "remapped_rows", "retired_pages"):
        for name, rule in data["memory"][section].items():
            assert rule["source"].strip() and rule["confidence"] in ("DERIVED", "REPORTED", "UNVERIFIED", "SITE")
            assert rule["status"] in ("FAIL", "WARN")
    assert data["memory"]["ecc_uncorrectable"]["volatile_sram_uncorrectable"]["max"] == 0
    assert data["memory"]["ecc_uncorrectable"]["volatile_dram_uncorrectable"]["max"] == 0
    assert data["memory"]["retired_pages"]["double_bit"]["max"] == 10
    assert set(data["dcgm"]["levels"]) == {1, 2, 3, 4}
    assert data["dcgm"]["levels"][3]["stress"] == ["diagnostic", "targeted_stress", "targeted_power",
                                                   "memory_bandwidth"]
    assert data["limits"]["counter_max"] == 4294967294


def _write_rules(tmp_path, mutate):
    import yaml

    data = yaml.safe_load((REPO / "data" / "burnin_health.yml").read_text())
    mutate(data)
    path = tmp_path / "health.yml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.update(schema="other/v1"), "schema"),
    (lambda d: d["memory"]["ecc_uncorrectable"].pop("volatile_dram_uncorrectable"), "missing rule"),
    (lambda d: d["memory"]["remapped_rows"]["pending"].update(confidence="VERIFIED"), "confidence"),
    (lambda d: d["memory"]["retired_pages"]["pending"].update(source=""), "no source"),
    (lambda d: d["memory"]["retired_pages"]["double_bit"].update(max=-1), "non-negative"),
    (lambda d: d["memory"]["retired_pages"]["double_bit"].update(max=True), "non-negative"),
    (lambda d: d["memory"]["ecc_uncorrectable"]["volatile_sram_uncorrectable"].update(status="INCOMPLETE"),
     "status"),
    (lambda d: d["memory"]["retired_pages"]["single_bit"].update(confidence="UNVERIFIED"), "UNVERIFIED"),
    (lambda d: d["dcgm"]["levels"].update({7: {"stress": []}}), "level"),
    (lambda d: d["dcgm"]["levels"][3].update(stress="diagnostic"), "list of test names"),
    (lambda d: d["dcgm"].update(stress_rule="most"), "stress_rule"),
    (lambda d: d["limits"].update(counter_max=0), "counter_max"),
])
def test_bad_rules_file_is_a_config_error(tmp_path, mutate, message):
    with pytest.raises(KilnConfigError, match=message):
        kh.load_health(_write_rules(tmp_path, mutate))


def test_unverified_fail_rule_needs_a_note(tmp_path):
    def mutate(d):
        d["memory"]["retired_pages"]["single_bit"].update(confidence="UNVERIFIED", note="placeholder, FAILs on purpose")
    assert kh.load_health(_write_rules(tmp_path, mutate))["memory"]["retired_pages"]["single_bit"]["note"]

    def as_warn(d):
        d["memory"]["retired_pages"]["single_bit"].update(confidence="UNVERIFIED", status="WARN")
    assert kh.load_health(_write_rules(tmp_path, as_warn))


def test_unreadable_rules_file(tmp_path):
    with pytest.raises(KilnConfigError, match="cannot read"):
        kh.load_health(str(tmp_path / "absent.yml"))
    bad = tmp_path / "bad.yml"
    bad.write_text("schema: [unclosed\n")
    with pytest.raises(KilnConfigError, match="YAML"):
        kh.load_health(str(bad))
    bad.write_text("- a list\n")
    with pytest.raises(KilnConfigError, match="not a mapping"):
        kh.load_health(str(bad))


def test_memory_checks_accept_the_memory_section_and_reject_junk():
    facts = facts_from_xml((SMI_FIXTURES / "a10g-515.105.01.xml").read_text())
    assert by_id(kh.memory_checks(facts, {"memory": HEALTH["memory"]}, True))[kh.CHECK_ECC]["status"] == "PASS"
    assert by_id(kh.memory_checks(facts, HEALTH["memory"], True))[kh.CHECK_ECC]["status"] == "PASS"
    for junk in (None, {}, {"memory": {}}, "rules"):
        with pytest.raises(KilnConfigError):
            kh.memory_checks(facts, junk, True)


# --------------------------------------------------------------------------- memory: recorded XML
RECORDED = [
    # file, ecc, remapped_rows, retired_pages, a word the non-PASS detail must contain
    ("a100-sxm4-80gb-535.54.03.xml", "PASS", "INCOMPLETE", "SKIP", "MIG"),
    ("a10g-515.105.01.xml", "PASS", "PASS", "SKIP", "remap rows"),
    ("synthetic-h100-sxm5-565.57.01.xml", "PASS", "PASS", "SKIP", "Hopper"),
    ("tesla-p100-pcie-510.47.03.xml", "PASS", "SKIP", "PASS", "Pascal"),
]


@pytest.mark.parametrize("fname,ecc,remap,retired,word", RECORDED, ids=[r[0] for r in RECORDED])
def test_memory_checks_on_recorded_xml(fname, ecc, remap, retired, word):
    checks = by_id(kh.memory_checks(facts_from_xml((SMI_FIXTURES / fname).read_text()), HEALTH, True))
    assert [c for c in checks] == list(kh.MEMORY_CHECKS)
    assert (checks[kh.CHECK_ECC]["status"], checks[kh.CHECK_REMAP]["status"],
            checks[kh.CHECK_RETIRED]["status"]) == (ecc, remap, retired)
    details = " ".join(c["detail"] for c in checks.values() if c["status"] != "PASS")
    assert word in details
    for check in checks.values():
        assert check["detail"]
        if check["status"] != "SKIP":
            assert check["gpus"] == {"GPU0": check["status"]}
    assert checks[kh.CHECK_ECC]["value"] == 0 and checks[kh.CHECK_ECC]["unit"] == "errors"


def test_no_smi_no_gpu_and_malformed_facts():
    for check in kh.memory_checks({"gpus": [{"index": 0}], "source": "sysfs"}, HEALTH, False):
        assert check["status"] == "SKIP" and check["detail"] == kh.NO_SMI
    for facts in ({"gpus": []}, {}, None, "facts"):
        assert {c["status"] for c in kh.memory_checks(facts, HEALTH, True)} == {"SKIP"}
    for check in kh.memory_checks({"gpus": {"0": {}}}, HEALTH, True):
        assert check["status"] == "INCOMPLETE" and "not a list" in check["detail"]
    checks = kh.memory_checks({"gpus": [None, 7]}, HEALTH, True)
    assert {c["status"] for c in checks} == {"INCOMPLETE"}
    assert "GPU#0: malformed GPU entry" in checks[0]["detail"]


# --------------------------------------------------------------------------- memory: emulator
H100 = json.loads((GPU_EMU / "profiles" / "h100-sxm-8.json").read_text())
P100 = {
    "name": "p100-2", "description": "2x Tesla P100 PCIe (pre-Ampere: page retirement)",
    "driver_version": "510.47.03", "cuda_version": "11.6", "gpu_count": 2,
    "gpu": {"name": "Tesla P100-PCIE-16GB", "architecture": "Pascal", "pci_device_id": "10de:15f8",
            "memory_total_mib": 16280, "power_limit_w": 250, "pcie_gen": 3},
    "gpu_overrides": {}, "nvswitch_count": 0,
}


def emulated_facts(monkeypatch, tmp_path, profile, overrides=None, driver=None, **top):
    prof = json.loads(json.dumps(profile))
    prof["gpu_overrides"] = overrides or {}
    prof.update(top)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(prof))
    monkeypatch.setenv("KILN_GPU_PROFILE", str(path))
    monkeypatch.delenv("KILN_GPU_DRIVER_LOADED", raising=False)
    if driver:
        monkeypatch.setenv("KILN_GPU_DRIVER_VERSION", driver)
    else:
        monkeypatch.delenv("KILN_GPU_DRIVER_VERSION", raising=False)
    rc, out, err = smi_emulator.run(["-q", "-x"])
    assert rc == 0, err
    return facts_from_xml(out)


@pytest.mark.parametrize("driver", [None, "550.127.05", "525.147.05"])  # 555+ parity/secded, 535+, v11
def test_emulated_h100_healthy_then_ecc_faults(monkeypatch, tmp_path, driver):
    healthy = by_id(kh.memory_checks(emulated_facts(monkeypatch, tmp_path, H100, driver=driver), HEALTH, True))
    assert [c["status"] for c in healthy.values()] == ["PASS", "PASS", "SKIP"]
    assert healthy[kh.CHECK_ECC]["detail"].startswith("8 GPUs: no volatile uncorrectable ECC error")
    facts = emulated_facts(monkeypatch, tmp_path, H100, driver=driver, overrides={
        "3": {"ecc_volatile_dram_uncorrectable": 2}, "5": {"ecc_volatile_sram_uncorrectable": 1}})
    assert facts["gpus"][3]["ecc"]["volatile_dram_uncorrectable"] == 2
    assert facts["gpus"][5]["ecc"]["volatile_sram_uncorrectable"] == 1
    ecc = by_id(kh.memory_checks(facts, HEALTH, True))[kh.CHECK_ECC]
    assert ecc["status"] == "FAIL"
    assert ecc["reasons"] == ["GPU3 volatile DRAM uncorrectable 2 > 0", "GPU5 volatile SRAM uncorrectable 1 > 0"]
    assert ecc["detail"] == "GPU3 volatile DRAM uncorrectable 2 > 0; GPU5 volatile SRAM uncorrectable 1 > 0"
    assert ecc["gpus"]["GPU3"] == "FAIL" and ecc["gpus"]["GPU0"] == "PASS" and ecc["value"] == 2
    assert ecc["rules"]["volatile_dram_uncorrectable"]["confidence"] == "DERIVED"


def test_emulated_sram_parity_counts_as_sram(monkeypatch, tmp_path):
    facts = emulated_facts(monkeypatch, tmp_path, H100, overrides={"1": {"ecc_volatile_sram_parity": 4}})
    assert facts["gpus"][1]["ecc"]["volatile_sram_uncorrectable"] == 4
    assert by_id(kh.memory_checks(facts, HEALTH, True))[kh.CHECK_ECC]["reasons"] == [
        "GPU1 volatile SRAM uncorrectable 4 > 0"]


def test_emulated_row_remap_pending_failure_and_hidden(monkeypatch, tmp_path):
    facts = emulated_facts(monkeypatch, tmp_path, H100, overrides={
        "2": {"remapped_rows_pending": True}, "6": {"remapped_rows_failure": True}})
    remap = by_id(kh.memory_checks(facts, HEALTH, True))[kh.CHECK_REMAP]
    assert remap["status"] == "FAIL" and remap["value"] == 2
    assert remap["reasons"] == ["GPU2 row remap pending (reset the GPU to apply it)",
                                "GPU6 row remap failure (no spare row left: RMA)"]
    hidden = emulated_facts(monkeypatch, tmp_path, H100, overrides={"4": {"remapped_rows_na": True}})
    remap = by_id(kh.memory_checks(hidden, HEALTH, True))[kh.CHECK_REMAP]
    assert remap["status"] == "INCOMPLETE"
    assert remap["detail"] == "GPU4: Hopper GPU remaps rows but reported no remapped-rows data"


def test_emulated_ecc_disabled_and_no_ecc(monkeypatch, tmp_path):
    disabled = emulated_facts(monkeypatch, tmp_path, H100, overrides={"0": {"ecc_mode": "Disabled"}})
    ecc = by_id(kh.memory_checks(disabled, HEALTH, True))[kh.CHECK_ECC]
    assert ecc["status"] == "INCOMPLETE" and ecc["detail"] == "GPU0: ECC disabled, uncorrectable errors are not counted"
    consumer = dict(H100, gpu=dict(H100["gpu"], ecc_mode="N/A"))
    checks = by_id(kh.memory_checks(emulated_facts(monkeypatch, tmp_path, consumer), HEALTH, True))
    assert {c["status"] for c in checks.values()} == {"SKIP"}
    assert "ECC not supported" in checks[kh.CHECK_ECC]["detail"]


def test_emulated_pascal_page_retirement(monkeypatch, tmp_path):
    healthy = by_id(kh.memory_checks(emulated_facts(monkeypatch, tmp_path, P100), HEALTH, True))
    assert [c["status"] for c in healthy.values()] == ["PASS", "SKIP", "PASS"]
    assert healthy[kh.CHECK_REMAP]["detail"] == "no row remapping on Pascal GPUs (page retirement applies)"
    facts = emulated_facts(monkeypatch, tmp_path, P100, overrides={
        "0": {"retired_pages_double_bit": 10, "retired_pages_single_bit": 10},  # at the limit: fine
        "1": {"retired_pages_double_bit": 11, "retired_pages_pending": True, "ecc_volatile_dram_uncorrectable": 1}})
    gpu1 = facts["gpus"][1]
    assert gpu1["memory_repair"] == "page_retirement" and gpu1["remapped_rows"]["supported"] is False
    assert gpu1["ecc"]["volatile_dram_uncorrectable"] == 1 and gpu1["ecc"]["volatile_uncorrectable"] == 1
    checks = by_id(kh.memory_checks(facts, HEALTH, True))
    retired = checks[kh.CHECK_RETIRED]
    assert retired["status"] == "FAIL" and retired["gpus"] == {"GPU0": "PASS", "GPU1": "FAIL"}
    assert retired["reasons"] == ["GPU1 page retirement pending (applied at the next driver load)",
                                  "GPU1 retired pages (double-bit) 11 > 10"]
    assert retired["value"] == 11
    assert checks[kh.CHECK_ECC]["reasons"] == ["GPU1 volatile DRAM uncorrectable 1 > 0"]


def test_emulated_query_fields_agree_with_xml(monkeypatch, tmp_path):
    emulated_facts(monkeypatch, tmp_path, P100, overrides={"1": {"retired_pages_double_bit": 3,
                                                                 "ecc_volatile_dram_uncorrectable": 2}})
    rc, out, _ = smi_emulator.run(["--query-gpu=index,ecc.errors.uncorrected.volatile.total,retired_pages.dbe,"
                                   "retired_pages.pending,ecc.errors.uncorrected.volatile.dram",
                                   "--format=csv,noheader"])
    assert rc == 0 and out.splitlines() == ["0, 0, 0, No, [N/A]", "1, 2, 3, No, [N/A]"]
    emulated_facts(monkeypatch, tmp_path, H100, overrides={"1": {"ecc_volatile_sram_uncorrectable": 3}})
    rc, out, _ = smi_emulator.run(["--query-gpu=ecc.errors.uncorrected.volatile.sram,retired_pages.dbe",
                                   "--format=csv,noheader", "-i", "1"])
    assert rc == 0 and out == "3, [N/A]\n"


# --------------------------------------------------------------------------- memory: hostile values
def ampere(**changes):
    gpu = {"index": 0, "architecture": "Ampere", "ecc_mode": "Enabled",
           "ecc": {"volatile_sram_uncorrectable": 0, "volatile_dram_uncorrectable": 0, "volatile_uncorrectable": 0},
           "remapped_rows": {"supported": True, "pending": False, "failure": False},
           "retired_pages": {"single_bit": None, "double_bit": None, "pending": None}}
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(gpu.get(key), dict):
            gpu[key] = dict(gpu[key], **value)
        else:
            gpu[key] = value
    return {"gpus": [gpu], "source": "nvidia-smi"}


@pytest.mark.parametrize("value,why", [
    ("3", "is not an integer count"), (-1, "is negative"), (2 ** 40, "implausible"), (1.0, "not an integer"),
    (True, "not an integer"), (float("nan"), "not an integer"), (float("inf"), "not an integer"),
    ([0], "not an integer"),
])
def test_unjudgeable_counter_is_incomplete_never_pass(value, why):
    ecc = by_id(kh.memory_checks(ampere(ecc={"volatile_dram_uncorrectable": value}), HEALTH, True))[kh.CHECK_ECC]
    assert ecc["status"] == "INCOMPLETE" and why in ecc["detail"]
    assert "GPU0 volatile DRAM uncorrectable" in ecc["detail"]


def test_missing_dram_count_on_ampere_is_incomplete():
    ecc = by_id(kh.memory_checks(ampere(ecc={"volatile_dram_uncorrectable": None, "volatile_uncorrectable": 0}),
                                 HEALTH, True))[kh.CHECK_ECC]
    assert ecc["status"] == "INCOMPLETE" and ecc["detail"] == "GPU0 volatile DRAM uncorrectable not reported"


def test_total_only_facts_are_judged_by_the_total():
    old = ampere(ecc=None)
    old["gpus"][0]["ecc"] = {"volatile_uncorrectable": 3, "volatile_correctable": 0}
    assert by_id(kh.memory_checks(old, HEALTH, True))[kh.CHECK_ECC]["reasons"] == [
        "GPU0 volatile uncorrectable (total) 3 > 0"]


@pytest.mark.parametrize("flag", ["Yes", 1, 0, "No", [], {}])
def test_remap_flag_that_is_not_a_bool_is_incomplete(flag):
    remap = by_id(kh.memory_checks(ampere(remapped_rows={"pending": flag}), HEALTH, True))[kh.CHECK_REMAP]
    assert remap["status"] == "INCOMPLETE" and "not a yes/no value" in remap["detail"]


def test_unknown_architecture_without_data_is_incomplete():
    facts = ampere(architecture=None, remapped_rows={"supported": False, "pending": None, "failure": None})
    checks = by_id(kh.memory_checks(facts, HEALTH, True))
    assert checks[kh.CHECK_REMAP]["status"] == "INCOMPLETE" and "cannot tell" in checks[kh.CHECK_REMAP]["detail"]
    assert checks[kh.CHECK_RETIRED]["status"] == "INCOMPLETE"


# --------------------------------------------------------------------------- memory: properties
def _counter_values():
    return st.one_of(st.just(0), st.just(0), st.just(None), st.integers(0, 12), st.integers(-3, 3),
                     st.integers(-(2 ** 70), 2 ** 70), st.floats(allow_nan=True, allow_infinity=True),
                     st.booleans(), st.sampled_from(["0", "N/A", "3", ""]), st.lists(st.integers(), max_size=1))


def _flags():
    return st.one_of(st.booleans(), st.booleans(), st.none(), st.sampled_from(["Yes", "No", 0, 1]))


def _gpus():
    ecc = st.one_of(st.fixed_dictionaries({k: _counter_values() for k in
                                           ("volatile_sram_uncorrectable", "volatile_dram_uncorrectable",
                                            "volatile_uncorrectable", "volatile_correctable")}),
                    st.none(), st.text(max_size=3))
    remap = st.one_of(st.fixed_dictionaries({"supported": _flags(), "pending": _flags(), "failure": _flags(),
                                             "uncorrectable": _counter_values()}), st.none(), st.integers())
    pages = st.one_of(st.fixed_dictionaries({"single_bit": _counter_values(), "double_bit": _counter_values(),
                                             "pending": _flags()}), st.none(), st.just([]))
    gpu = st.fixed_dictionaries({
        "index": st.one_of(st.integers(0, 9), st.none(), st.text(max_size=2), st.integers(-5, -1)),
        "architecture": st.sampled_from([None, "Ampere", "Hopper", "Pascal", "Volta", "Ada Lovelace", "Turing",
                                         "Blackwell", "", "N/A", 7]),
        "ecc_mode": st.sampled_from([None, "Enabled", "Disabled", "N/A", 3]),
        "mig_mode": st.sampled_from([None, "Enabled", "Disabled"]),
        "memory_repair": st.sampled_from([None, "row_remap", "page_retirement", "bogus"]),
        "ecc": ecc, "remapped_rows": remap, "retired_pages": pages,
    })
    # mostly plausible GPUs with the odd bad value, so that PASS is reached and its oracle exercised
    small = st.sampled_from([0, 0, 0, 0, 1, None, "0", -1, 2 ** 40])
    flag = st.sampled_from([False, False, False, False, True, None, "No", 0])
    remapping = st.fixed_dictionaries({
        "index": st.integers(0, 7), "architecture": st.sampled_from(["Ampere", "Hopper", "Ada Lovelace"]),
        "ecc_mode": st.sampled_from(["Enabled", "Enabled", "Enabled", "Disabled", None]),
        "mig_mode": st.sampled_from(["Disabled", "Enabled"]),
        "ecc": st.fixed_dictionaries({"volatile_sram_uncorrectable": small, "volatile_dram_uncorrectable": small,
                                      "volatile_uncorrectable": small}),
        "remapped_rows": st.fixed_dictionaries({"supported": st.sampled_from([True, True, True, True, False, "Yes"]),
                                                "pending": flag, "failure": flag}),
        "retired_pages": st.just({"single_bit": None, "double_bit": None, "pending": None})})
    retiring = st.fixed_dictionaries({
        "index": st.integers(0, 7), "architecture": st.sampled_from(["Pascal", "Volta", None]),
        "ecc_mode": st.sampled_from(["Enabled", "Enabled", "Enabled", None]),
        "ecc": st.fixed_dictionaries({"volatile_sram_uncorrectable": small, "volatile_dram_uncorrectable": small,
                                      "volatile_uncorrectable": small}),
        "remapped_rows": st.just({"supported": False, "pending": None, "failure": None}),
        "retired_pages": st.fixed_dictionaries({"single_bit": st.sampled_from([0, 3, 10, 11, None, "2", -1]),
                                                "double_bit": st.sampled_from([0, 0, 10, 11, None, 2.0]),
                                                "pending": flag})})
    return st.lists(st.one_of(gpu, remapping, remapping, retiring, retiring, st.none(), st.integers()),
                    min_size=0, max_size=4)


def _valid(value, limit):
    return type(value) is int and 0 <= value <= limit


def _no_ecc(gpu):
    ecc = gpu.get("ecc")
    values = list(ecc.values()) if isinstance(ecc, dict) else []
    return gpu.get("ecc_mode") is None and all(v is None for v in values)


def _scheme(gpu):
    arch = gpu.get("architecture")
    arch = arch.strip() if isinstance(arch, str) and arch.strip() else None
    scheme = kg.memory_repair(arch, gpu.get("remapped_rows"), gpu.get("retired_pages"))
    if scheme is None and gpu.get("memory_repair") in ("row_remap", "page_retirement"):
        scheme = gpu["memory_repair"]
    return scheme


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=_gpus(), smi=st.booleans(), wrap=st.sampled_from(["list", "tuple", "junk"]))
def test_memory_checks_never_raise_and_pass_only_on_good_counters(gpus, smi, wrap):
    facts = {"gpus": gpus if wrap == "list" else (tuple(gpus) if wrap == "tuple" else {"0": gpus})}
    checks = by_id(kh.memory_checks(facts, HEALTH, smi))
    assert list(checks) == list(kh.MEMORY_CHECKS)
    assert all(c["status"] in STATUSES and isinstance(c["detail"], str) and c["detail"] for c in checks.values())
    if not smi:
        assert {c["status"] for c in checks.values()} == {"SKIP"}
        return
    if any(c["status"] == "PASS" for c in checks.values()):
        assert wrap != "junk" and all(isinstance(g, dict) for g in gpus)
    if checks[kh.CHECK_ECC]["status"] == "PASS":
        judged = 0
        for gpu in gpus:
            ecc = gpu["ecc"] if isinstance(gpu["ecc"], dict) else {}
            values = [ecc.get(k) for k in ("volatile_sram_uncorrectable", "volatile_dram_uncorrectable",
                                           "volatile_uncorrectable")]
            assert all(v is None or _valid(v, 0) for v in values), gpu
            if any(v is not None for v in values):
                judged += 1
            else:
                assert _no_ecc(gpu), gpu  # a GPU with nothing to judge may only be skipped for lack of ECC
        assert judged >= 1
    if checks[kh.CHECK_REMAP]["status"] == "PASS":
        judged = 0
        for gpu in gpus:
            rows = gpu["remapped_rows"] if isinstance(gpu["remapped_rows"], dict) else {}
            if rows.get("supported") is True:
                assert rows.get("pending") is False and rows.get("failure") is False, gpu
                judged += 1
            else:
                assert rows.get("supported") in (None, False), gpu
                assert _no_ecc(gpu) or _scheme(gpu) == "page_retirement", gpu
        assert judged >= 1
    if checks[kh.CHECK_RETIRED]["status"] == "PASS":
        judged = 0
        for gpu in gpus:
            pages = gpu["retired_pages"] if isinstance(gpu["retired_pages"], dict) else {}
            if _scheme(gpu) == "row_remap" or (_no_ecc(gpu) and all(
                    pages.get(k) is None for k in ("pending", "single_bit", "double_bit"))):
                continue
            assert pages.get("pending") is False, gpu
            assert _valid(pages.get("double_bit"), 10) and _valid(pages.get("single_bit"), 10), gpu
            judged += 1
        assert judged >= 1


# --------------------------------------------------------------------------- dcgmi emulator
PROFILE = {
    "name": "health-h100-2", "driver_version": "580.95.05", "cuda_version": "13.0", "driver_loaded": True,
    "gpu_count": 2, "bus_ids": ["0000:19:00.0", "0000:3b:00.0"],
    "gpu": {"name": "NVIDIA H100 80GB HBM3", "pci_device_id": "10de:2330"}, "gpu_overrides": {},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def hostengine(tmp_path_factory):
    root = tmp_path_factory.mktemp("dcgm")
    env = dict(os.environ, KILN_FIXTURE_ROOT=str(root / "root"), KILN_GPU_PROFILE=str(root / "unused.json"))
    port = _free_port()
    proc = subprocess.Popen([PY, str(EMU / "nv-hostengine"), "-n", "--service-account", "nvidia-dcgm",
                             "-b", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("nv-hostengine emulator did not listen")
    yield {"port": port, "env": env, "dir": root}
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=5)


def dcgmi(hostengine, level, *flags, port=None, **profile_changes):
    prof = json.loads(json.dumps(PROFILE))
    prof.update(profile_changes)
    path = hostengine["dir"] / f"profile-{abs(hash(json.dumps(prof, sort_keys=True)))}.json"
    path.write_text(json.dumps(prof))
    env = dict(hostengine["env"], KILN_GPU_PROFILE=str(path))
    r = subprocess.run([PY, str(EMU / "dcgmi"), "diag", "-r", str(level), *flags,
                        "--host", f"127.0.0.1:{port or hostengine['port']}"],
                       env=env, capture_output=True, text=True, timeout=20)
    return {"present": True, "rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}


LEVEL_TESTS = {
    1: ["software"],
    2: ["software", "memory", "pcie"],
    3: ["software", "memory", "diagnostic", "pcie", "targeted_stress", "targeted_power", "memory_bandwidth"],
    4: ["software", "memory", "diagnostic", "pulse_test", "memtest", "pcie", "targeted_stress", "targeted_power",
        "memory_bandwidth"],
}


@pytest.mark.parametrize("level", [1, 2, 3, 4])
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_emulated_dcgmi_pass_parses_and_passes(hostengine, level, as_json):
    run = dcgmi(hostengine, level, *(["-j"] if as_json else []))
    assert run["rc"] == 0
    parsed = kh.parse_dcgm_diag(run["stdout"], run["stderr"])
    assert parsed["format"] == ("json" if as_json else "text")
    assert [t["name"] for t in parsed["tests"]] == LEVEL_TESTS[level]
    assert all(t["status"] == "PASS" and t["gpus"] == {"GPU0": "PASS", "GPU1": "PASS"} for t in parsed["tests"])
    assert parsed["problems"] == []
    if as_json:
        assert parsed["version"] == "4.6.0" and parsed["driver_version"] == "580.95.05"
    check = kh.dcgm_check(level, run, True, require_stress=level >= 2, artifact="n1/dcgm.json")
    assert check["id"] == f"dcgm.diag.r{level}" and check["status"] == "PASS"
    assert check["artifact"] == "n1/dcgm.json"
    assert [(t["name"], t["status"]) for t in check["tests"]] == [(n, "PASS") for n in LEVEL_TESTS[level]]
    assert check["detail"].startswith(f"dcgmi diag -r {level}: {len(LEVEL_TESTS[level])} of "
                                      f"{len(LEVEL_TESTS[level])} tests passed")


def test_emulated_dcgmi_json_has_the_dcgm4_layout(hostengine):
    run = dcgmi(hostengine, 3, "-j", dcgm_fail={"test": "pcie", "gpus": [1]}, dcgm_skip={"test": "memory",
                                                                                           "gpus": [0]})
    doc = json.loads(run["stdout"])
    assert set(doc) == {"DCGM Diagnostic", "entity_groups", "metadata"}
    assert {"version", "Driver Version Detected"} <= set(doc["metadata"])
    group = doc["entity_groups"][0]
    assert (group["entity_group"], group["entity_group_id"]) == ("GPU", 1)
    assert {"entity_id", "device_id", "serial_num"} <= set(group["entities"][0])
    categories = doc["DCGM Diagnostic"]["test_categories"]
    assert [c["category"] for c in categories] == ["Deployment", "Hardware", "Integration", "Stress"]
    for category in categories:
        for test in category["tests"]:
            assert set(test) == {"name", "results", "test_summary"}
            assert test["test_summary"]["status"] in ("Pass", "Fail", "Skip")
            for result in test["results"]:
                assert {"entity_group", "entity_group_id", "entity_id", "status"} <= set(result)
                assert result["status"] in ("Pass", "Fail", "Skip")
    pcie = next(t for c in categories for t in c["tests"] if t["name"] == "pcie")
    assert set(pcie["results"][1]["warnings"][0]) == {"warning", "error_id", "error_category", "error_severity"}
    memory = next(t for c in categories for t in c["tests"] if t["name"] == "memory")
    assert [r["status"] for r in memory["results"]] == ["Skip", "Pass"] and memory["test_summary"]["status"] == "Pass"


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_emulated_dcgmi_all_skipped_level3(hostengine, as_json):
    run = dcgmi(hostengine, 3, *(["-j"] if as_json else []), dcgm_skip="all")
    assert run["rc"] == 0
    parsed = kh.parse_dcgm_diag(run["stdout"])
    assert {t["status"] for t in parsed["tests"]} == {"SKIP"} and len(parsed["tests"]) == 7
    check = kh.dcgm_check(3, run, True, require_stress=True)
    assert check["status"] == "INCOMPLETE"
    assert "every test was skipped" in check["detail"]
    assert ("no stress/hardware test ran: diagnostic (skipped), targeted_stress (skipped), "
            "targeted_power (skipped), memory_bandwidth (skipped)") in check["detail"]
    assert check["stress_tests"] == {"diagnostic": "skipped", "targeted_stress": "skipped",
                                     "targeted_power": "skipped", "memory_bandwidth": "skipped"}


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_emulated_dcgmi_stress_skipped_is_incomplete_only_in_acceptance(hostengine, as_json):
    run = dcgmi(hostengine, 3, *(["-j"] if as_json else []), dcgm_skip="stress")
    default = kh.dcgm_check(3, run, True, require_stress=False)
    assert default["status"] == "PASS"
    assert "skipped: diagnostic, targeted_stress, targeted_power, memory_bandwidth" in default["detail"]
    acceptance = kh.dcgm_check(3, run, True, require_stress=True)
    assert acceptance["status"] == "INCOMPLETE"
    assert "no stress/hardware test ran: diagnostic (skipped)" in acceptance["detail"]
    # one stress test skipped on one GPU: still PASS (stress_rule any), the gap is named
    partial = dcgmi(hostengine, 3, *(["-j"] if as_json else []),
                    gpu_overrides={"1": {"skip": "targeted_power"}})
    check = kh.dcgm_check(3, partial, True, require_stress=True)
    assert check["status"] == "PASS" and "skipped on some GPUs: targeted_power [GPU1]" in check["detail"]


def test_stress_rule_all_requires_every_stress_test(hostengine):
    health = json.loads(json.dumps(HEALTH))
    health["dcgm"]["stress_rule"] = "all"
    run = dcgmi(hostengine, 3, "-j", dcgm_skip={"test": "targeted_power"})
    check = kh.dcgm_check(3, run, True, require_stress=True, health=health)
    assert check["status"] == "INCOMPLETE"
    assert "stress/hardware tests not run: targeted_power (skipped)" in check["detail"]


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_emulated_dcgmi_fail_is_fail(hostengine, as_json):
    run = dcgmi(hostengine, 3, *(["-j"] if as_json else []),
                dcgm_fail={"test": "diagnostic", "gpus": [1], "message": "GPU 1 GEMM result mismatch"})
    assert run["rc"] == 226
    check = kh.dcgm_check(3, run, True, require_stress=True)
    assert check["status"] == "FAIL"
    assert check["detail"] == ("dcgmi diag -r 3 rc 226 (DCGM_ST_NVVS_ERROR (-30): the diagnostic reported an "
                               "error): failed: diagnostic [GPU1] (GPU1: GPU 1 GEMM result mismatch)")
    statuses = {t["name"]: t["status"] for t in check["tests"]}
    assert statuses["diagnostic"] == "FAIL" and statuses["memory"] == "PASS"


def test_emulated_dcgmi_isolate_fail_and_fail_beats_skip(hostengine):
    run = dcgmi(hostengine, 2, "-j", dcgm_fail={"test": "memory", "gpus": [0]}, dcgm_skip="memory")
    assert run["rc"] == 205
    check = kh.dcgm_check(2, run, True, require_stress=False)
    assert check["status"] == "FAIL" and "DCGM_ST_NVVS_ISOLATE_ERROR" in check["detail"]
    mem = next(t for t in kh.parse_dcgm_diag(run["stdout"])["tests"] if t["key"] == "memory")
    assert mem["gpus"] == {"GPU0": "FAIL", "GPU1": "SKIP"}
    assert mem["warnings"][0]["error_id"] == 52


def test_fail_counts_even_with_rc_zero(hostengine):
    run = dcgmi(hostengine, 2, "-j", dcgm_fail={"test": "pcie", "gpus": [1]})
    assert kh.dcgm_check(2, dict(run, rc=0), True, False)["status"] == "FAIL"


def test_emulated_dcgmi_runtime_error_and_no_hostengine(hostengine):
    run = dcgmi(hostengine, 3, "-j", dcgm_runtime_error={"message": "The NVVS binary could not be started.", "rc": 226})
    assert run["rc"] == 226
    parsed = kh.parse_dcgm_diag(run["stdout"])
    assert parsed["format"] == "json" and parsed["tests"] == []
    assert parsed["runtime_error"] == "The NVVS binary could not be started."
    check = kh.dcgm_check(3, run, True, True)
    assert check["status"] == "INCOMPLETE"
    assert "output unparseable (The NVVS binary could not be started.)" in check["detail"]
    down = dcgmi(hostengine, 3, "-j", port=_free_port())
    assert down["rc"] == 235
    check = kh.dcgm_check(3, down, True, True)
    assert check["status"] == "INCOMPLETE" and "DCGM_ST_CONNECTION_NOT_VALID" in check["detail"]
    assert "Error: Unable to connect to host engine" in " ".join(kh.parse_dcgm_diag(down["stdout"])["problems"])


def test_dcgm_check_simple_branches(hostengine):
    good = dcgmi(hostengine, 2, "-j")
    assert kh.dcgm_check(2, good, False, True)["status"] == "SKIP"
    assert kh.dcgm_check(2, None, True, False)["detail"] == "dcgmi not installed"
    assert kh.dcgm_check(2, {"present": False}, True, False)["status"] == "INCOMPLETE"
    for rc in (None, 1, "0", True):
        check = kh.dcgm_check(2, dict(good, rc=rc), True, False)
        assert check["status"] == "INCOMPLETE" and "although no test reported Fail" in check["detail"], rc
    assert kh.dcgm_check(2, dict(good, timed_out=True), True, False)["status"] == "INCOMPLETE"
    assert kh.dcgm_check(2, dict(good, stdout=good["stdout"][:200]), True, False)["status"] == "INCOMPLETE"
    with pytest.raises(KilnConfigError):
        kh.dcgm_check(1, good, True, require_stress=True)
    with pytest.raises(KilnConfigError):
        kh.dcgm_check("3", good, True, False)


# --------------------------------------------------------------------------- DCGM 3.x layouts
DCGM3_JSON = """WARNING: a line dcgmi printed before the document
{
	"DCGM GPU Diagnostic" :
	{
		"test_categories" :
		[
			{
				"category" : "Deployment",
				"tests" :
				[
					{ "name" : "Denylist", "results" : [ { "gpu_ids" : "0,1,2,3", "status" : "PASS" } ] },
					null,
					{ "name" : "Persistence Mode", "results" : [ { "gpu_ids" : "0,1,2,3", "status" : "Pass" } ] }
				]
			},
			{
				"category" : "Hardware",
				"tests" :
				[
					{ "name" : "GPU Memory", "results" : [
						{ "gpu_ids" : "0", "status" : "Pass" }, { "gpu_ids" : 1, "status" : "Pass" },
						{ "gpu_ids" : "2", "status" : "Pass" }, { "gpu_ids" : "3", "status" : "Pass" } ] }
				]
			},
			{
				"category" : "Stress",
				"tests" :
				[
					{ "name" : "Targeted Stress", "results" : [
						{ "gpu_ids" : "0", "status" : "Pass" }, { "gpu_ids" : "1", "status" : "Pass" },
						{ "gpu_ids" : "2", "status" : "Warn", "warnings" : [
							{ "warning" : "GPU 2 thermal violations totaling 3.1 seconds",
							  "error_id" : 58, "error_category" : 4, "error_severity" : 1 } ] },
						{ "gpu_ids" : "3", "status" : "Pass" } ] },
					{ "name" : "Memory Bandwidth", "results" : [
						{ "gpu_ids" : "0", "status" : "Skip", "info" : [ "not supported" ] } ] }
				]
			}
		],
		"version" : "3.3.5"
	},
	"Driver Version Detected" : "535.161.08"
}
"""


def test_dcgm3_json_layout():
    parsed = kh.parse_dcgm_diag(DCGM3_JSON)
    assert parsed["format"] == "json" and parsed["version"] == "3.3.5" and parsed["driver_version"] == "535.161.08"
    tests = {t["name"]: t for t in parsed["tests"]}
    assert list(tests) == ["Denylist", "Persistence Mode", "GPU Memory", "Targeted Stress", "Memory Bandwidth"]
    assert tests["Denylist"]["gpus"] == {f"GPU{i}": "PASS" for i in range(4)}
    assert tests["GPU Memory"]["key"] == "memory" and tests["GPU Memory"]["category"] == "Hardware"
    assert tests["Targeted Stress"]["status"] == "WARN" and tests["Targeted Stress"]["key"] == "targeted_stress"
    assert tests["Targeted Stress"]["warnings"] == [{"entity": "GPU2", "error_id": 58,
                                                     "message": "GPU 2 thermal violations totaling 3.1 seconds"}]
    assert tests["Memory Bandwidth"]["status"] == "SKIP"
    check = kh.dcgm_check(3, {"present": True, "rc": 0, "stdout": DCGM3_JSON}, True, require_stress=True)
    assert check["status"] == "WARN"
    assert "warnings: Targeted Stress (GPU2: GPU 2 thermal violations totaling 3.1 seconds)" in check["detail"]
    assert check["stress_tests"]["targeted_stress"] == "WARN" and check["stress_tests"]["diagnostic"] == "absent"


DCGM3_TABLE = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.5                                          |
| Driver Version Detected   | 535.161.08                                     |
| GPU Device IDs Detected   | 2330,2330,2330,2330                            |
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| Persistence Mode          | Pass                                           |
+-----  Integration  -------+------------------------------------------------+
| PCIe                      | Pass - All                                     |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - All                                     |
| Diagnostic                | Pass - GPUs: 0, 1, 3                           |
|                           | Fail - GPU: 2                                  |
| Warning                   | GPU 2: Detected clocks event reason HW slowdo  |
|                           | wn on GPU 2, clocks event reasons are 0x00000  |
|                           | 00000000008                                    |
+-----  Stress  ------------+------------------------------------------------+
| Targeted Stress           | Pass - All                                     |
| Targeted Power            | Warn - All                                     |
| Memory Bandwidth          | Skip - All                                     |
+---------------------------+------------------------------------------------+
"""


def test_dcgm3_table_layout():
    parsed = kh.parse_dcgm_diag(DCGM3_TABLE)
    assert parsed["format"] == "text"
    tests = {t["name"]: t for t in parsed["tests"]}
    assert list(tests) == ["Denylist", "Persistence Mode", "PCIe", "GPU Memory", "Diagnostic", "Targeted Stress",
                           "Targeted Power", "Memory Bandwidth"]
    assert tests["Diagnostic"]["status"] == "FAIL" and tests["Diagnostic"]["category"] == "Hardware"
    assert tests["Diagnostic"]["gpus"] == {"GPU0": "PASS", "GPU1": "PASS", "GPU3": "PASS", "GPU2": "FAIL"}
    assert tests["Diagnostic"]["detail"] == ("GPU 2: Detected clocks event reason HW slowdown on GPU 2, clocks event "
                                             "reasons are 0x0000000000000008")
    assert (tests["Targeted Power"]["status"], tests["Memory Bandwidth"]["status"]) == ("WARN", "SKIP")
    check = kh.dcgm_check(3, {"present": True, "rc": 226, "stdout": DCGM3_TABLE}, True, True)
    assert check["status"] == "FAIL" and "failed: Diagnostic [GPU2]" in check["detail"]
    fail_row = "|                           | Fail - GPU: 2                                  |\n"
    without_fail = DCGM3_TABLE.replace(fail_row, "")
    assert kh.dcgm_check(3, {"present": True, "rc": 0, "stdout": without_fail}, True, True)["status"] == "WARN"


DCGM4_WARN_TABLE = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 4.6.0                                          |
|-----  Deployment  --------+------------------------------------------------|
| software                  | Pass                                           |
|                           | GPU0: Pass                                     |
+-----  Stress  ------------+------------------------------------------------+
| targeted_power            | Warn                                           |
|                           | GPU0: Fail                                     |
| Warning: GPU0             | Power 650.0 W below the target of 700.0 W.     |
+---------------------------+------------------------------------------------+
"""


def test_wrapped_message_keeps_spaces_at_the_cut():
    """dcgmi cuts messages into 45-character rows (Diag.cpp DisplayVerboseInfo)."""
    head = ["+-----  Stress  ------------+------------------------------------------------+",
            "| %-25s | %-46s |" % ("targeted_power", "Fail"), "| %-25s | %-46s |" % ("", "GPU0: Fail")]
    for msg in ("Temperature 95 of GPU 0 exceeded user-specified maximum allowed temperature 87",
                "a" * 44 + " " + "b" * 10,      # the first row ends with a space (lost to the padding)
                "a" * 45 + " b" + "c" * 50):    # the second row starts with a space
        chunks = [msg[i:i + 45] for i in range(0, len(msg), 45)]
        rows = head + ["| %-25s | %-46s |" % ("Warning: GPU0" if i == 0 else "", c) for i, c in enumerate(chunks)]
        test = kh.parse_dcgm_diag("\n".join(rows))["tests"][0]
        assert test["status"] == "FAIL" and test["warnings"][0]["entity"] == "GPU0"
        assert test["warnings"][0]["message"] == msg[:kh.MAX_MESSAGE_CHARS]


def test_dcgm4_table_warn_row_is_warn_not_fail():
    """dcgmi 4.x prints a warned entity as "Fail" under a "Warn" summary (Diag.cpp HelperDisplayDiagResult)."""
    tests = {t["name"]: t for t in kh.parse_dcgm_diag(DCGM4_WARN_TABLE)["tests"]}
    assert tests["targeted_power"]["status"] == "WARN" and tests["targeted_power"]["gpus"] == {"GPU0": "WARN"}
    assert tests["targeted_power"]["warnings"][0]["entity"] == "GPU0"
    check = kh.dcgm_check(3, {"present": True, "rc": 0, "stdout": DCGM4_WARN_TABLE}, True, True)
    assert check["status"] == "WARN"


def test_iterations_document_merges_runs():
    one = {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "memory", "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0,
                                        "status": "Pass"}], "test_summary": {"status": "Pass"}}]}]}}
    two = json.loads(json.dumps(one))
    two["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["status"] = "Fail"
    parsed = kh.parse_dcgm_diag(json.dumps({"iterations": [one, two]}))
    assert parsed["format"] == "json" and [t["status"] for t in parsed["tests"]] == ["FAIL"]


@pytest.mark.parametrize("stdout", [
    None, b"\xff\xfe binary", 42, ["list"], "", "   ", "[" * 200_000, "{" * 200_000,
    '{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "memory", "resu',
    '{"DCGM Diagnostic": "not a mapping"}', '{"DCGM Diagnostic": {"test_categories": {"a": 1}}}',
    '{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": 5, "results": [{"status": ["Pass"]}]}]}]}}',
    "| memory | Pass - GPU: x |", "|||||", "+----- Stress -----+\n|  | GPU0: Pass |",
])
def test_hostile_dcgm_output_never_raises_never_passes(stdout):
    parsed = kh.parse_dcgm_diag(stdout, stderr=b"\x00 stderr")
    assert parsed["format"] in ("json", "text", "none")
    assert isinstance(parsed["problems"], list) and len(parsed["problems"]) <= kh.MAX_PROBLEMS
    check = kh.dcgm_check(3, {"present": True, "rc": 0, "stdout": stdout}, True, True)
    assert check["status"] in ("INCOMPLETE", "FAIL")


def test_huge_output_is_bounded():
    row = "| memory                    | Pass - All                                     |\n"
    huge = row * (kh.MAX_INPUT_CHARS // len(row) + 10)
    parsed = kh.parse_dcgm_diag(huge)
    assert any("cut there" in p for p in parsed["problems"])
    assert len(parsed["tests"]) == 1  # the same test repeated, merged
    many = "".join(f"| test{i} | Pass |\n" for i in range(kh.MAX_TESTS + 50))
    parsed = kh.parse_dcgm_diag(many)
    assert len(parsed["tests"]) == kh.MAX_TESTS and any("the rest ignored" in p for p in parsed["problems"])


def test_dcgm_test_key():
    assert kh.dcgm_test_key("Targeted Stress") == "targeted_stress"
    assert kh.dcgm_test_key("GPU Memory") == "memory"
    assert kh.dcgm_test_key("  Memory   Bandwidth ") == "memory_bandwidth"
    assert kh.dcgm_test_key("nvbandwidth") == "nvbandwidth"
    assert kh.dcgm_test_key("Pulse Test") == "pulse_test"


# --------------------------------------------------------------------------- DCGM properties
STATUS_WORDS = ["Pass", "PASS", "pass", "Fail", "FAIL", "Skip", "Warn", "Not Run", "", "banana", "Pass ",
                None, 3, ["Pass"]]
_PASSING = {"pass", "passed"}
_SKIPPING = {"skip", "skipped", "not run", "not_run", "notrun", ""}


def _norm(status):
    return " ".join(status.strip().lower().split()) if isinstance(status, str) else None


def _results():
    entity4 = st.fixed_dictionaries({"entity_group": st.sampled_from(["GPU", "CPU", 5]),
                                     "entity_group_id": st.just(1),
                                     "entity_id": st.one_of(st.integers(0, 7), st.text(max_size=2)),
                                     "status": st.sampled_from(STATUS_WORDS)},
                                    optional={"warnings": st.one_of(
                                        st.lists(st.fixed_dictionaries({"warning": st.text(max_size=30),
                                                                        "error_id": st.integers(-2, 99)}),
                                                 max_size=2), st.text(max_size=10))})
    entity3 = st.fixed_dictionaries({"gpu_ids": st.one_of(st.integers(0, 7), st.sampled_from(["0", "0,1", "x", ""])),
                                     "status": st.sampled_from(STATUS_WORDS)})
    return st.lists(st.one_of(entity4, entity3, st.none(), st.integers()), max_size=4)


def _tests():
    test = st.fixed_dictionaries({"name": st.one_of(st.sampled_from(
        ["software", "memory", "diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth", "pcie",
         "Targeted Power", "GPU Memory"]), st.text(max_size=8), st.none())},
        optional={"results": _results(),
                  "test_summary": st.one_of(st.fixed_dictionaries({"status": st.sampled_from(STATUS_WORDS)}),
                                            st.none())})
    return st.lists(st.one_of(test, test, test, st.none()), max_size=6)


def _docs():
    category = st.fixed_dictionaries({"category": st.sampled_from(["Deployment", "Hardware", "Stress", None]),
                                      "tests": _tests()})
    body = st.fixed_dictionaries({"test_categories": st.lists(category, max_size=4)},
                                 optional={"version": st.sampled_from(["4.6.0", "3.3.5"]),
                                           "runtime_error": st.sampled_from(["boom", ""])})
    return st.one_of(st.builds(lambda b: {"DCGM Diagnostic": b, "metadata": {"version": "4.6.0"}}, body),
                     st.builds(lambda b: {"DCGM GPU Diagnostic": b}, body))


def _doc_statuses(doc):
    """Every status the document carries, for the oracle (only where the parser is meant to look)."""
    root = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic")
    found = []
    for category in root["test_categories"]:
        for test in category["tests"]:
            if not isinstance(test, dict):
                continue
            for result in test.get("results") or []:
                if isinstance(result, dict):
                    found.append(result.get("status"))
            if isinstance(test.get("test_summary"), dict):
                found.append(test["test_summary"].get("status"))
    return found


def _oracle_pass(check, statuses, rc, require_stress, doc):
    assert type(rc) is int and rc == 0
    body = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic")
    assert not body.get("runtime_error")
    assert statuses, "PASS without any status in the document"
    assert all(isinstance(s, str) and _norm(s) in _PASSING | _SKIPPING for s in statuses), statuses
    assert any(_norm(s) in _PASSING for s in statuses)
    assert check["tests"] and all(t["status"] in ("PASS", "SKIP") for t in check["tests"])
    if require_stress:
        assert any(t["key"] in HEALTH["dcgm"]["levels"][3]["stress"] and t["status"] == "PASS"
                   for t in check["tests"])


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_docs(), rc=st.sampled_from([0, 0, 0, 226, 205, 235, None, "0", True, -30]),
       require_stress=st.booleans(), indent=st.sampled_from([None, "\t", 2]),
       prefix=st.sampled_from(["", "WARNING: banner\n", "Error: something\n"]),
       cut=st.one_of(st.none(), st.floats(0.0, 0.999)))
def test_dcgm_json_property(doc, rc, require_stress, indent, prefix, cut):
    text = json.dumps(doc, indent=indent, separators=(",", " : ") if indent else None)
    if cut is not None:
        text = text[:int(len(text) * cut)]
    stdout = prefix + text
    parsed = kh.parse_dcgm_diag(stdout)
    assert parsed["format"] in ("json", "text", "none")
    for test in parsed["tests"]:
        assert test["status"] in ("PASS", "FAIL", "WARN", "SKIP", kh.UNKNOWN)
    check = kh.dcgm_check(3, {"present": True, "rc": rc, "stdout": stdout, "stderr": ""}, True, require_stress)
    assert check["status"] in STATUSES and check["id"] == "dcgm.diag.r3"
    statuses = _doc_statuses(doc)
    if cut is not None:
        assert check["status"] != "PASS"
        return
    if any(_norm(s) in ("fail", "failed") for s in statuses if isinstance(s, str)):
        assert check["status"] == "FAIL"
    if check["status"] == "PASS":
        _oracle_pass(check, statuses, rc, require_stress, doc)


def _table(model, layout):
    """Render a test model [(section, name, [(gpu, status word)], summary word)] as a dcgmi table."""
    lines = ["Successfully ran diagnostic for group.",
             "+---------------------------+------------------------------------------------+",
             "| Diagnostic                | Result                                         |",
             "+===========================+================================================+"]
    section = None
    for sec, name, gpus, summary in model:
        if sec != section:
            lines.append(f"+-----  {sec}  ----------+------------------------------------------------+")
            section = sec
        if layout == 4:
            lines.append("| %-25s | %-46s |" % (name, summary))
            for gpu, word in gpus:
                lines.append("| %-25s | %-46s |" % ("", f"GPU{gpu}: {word}"))
        else:
            lines.append("| %-25s | %-46s |" % (name, f"{summary} - All" if not gpus else
                                                 f"{gpus[0][1]} - GPU: {gpus[0][0]}"))
            for gpu, word in gpus[1:]:
                lines.append("| %-25s | %-46s |" % ("", f"{word} - GPU: {gpu}"))
    return "\n".join(lines) + "\n"


@settings(max_examples=200, deadline=None, database=None)
@given(model=st.lists(st.tuples(st.sampled_from(["Hardware", "Stress", "Integration"]),
                                st.sampled_from(["memory", "diagnostic", "targeted_stress", "Targeted Power",
                                                 "pcie", "memory_bandwidth"]),
                                st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["Pass", "Fail", "Skip",
                                                                                       "Warn", "Bogus"])),
                                         max_size=3),
                                st.sampled_from(["Pass", "Fail", "Skip", "Warn"])), max_size=6),
       layout=st.sampled_from([3, 4]), rc=st.sampled_from([0, 226]), require_stress=st.booleans())
def test_dcgm_table_property(model, layout, rc, require_stress):
    text = _table(model, layout)
    check = kh.dcgm_check(3, {"present": True, "rc": rc, "stdout": text}, True, require_stress)
    words = [w for _s, _n, gpus, summary in model for w in ([summary] if layout == 4 or not gpus else [])
             + [w for _g, w in gpus]]
    if check["status"] == "PASS":
        assert rc == 0 and words and all(w in ("Pass", "Skip") for w in words)
        assert "Pass" in words
    # 4.x layout: an entity Fail under a Warn summary is a warning (dcgmi's own rendering)
    hard_fail = any(w == "Fail" for _s, _n, gpus, summary in model for w in
                    ([summary] if layout == 4 or not gpus else [])
                    + [w for _g, w in gpus if not (layout == 4 and summary == "Warn")])
    if hard_fail:
        assert check["status"] == "FAIL"


@settings(max_examples=200, deadline=None, database=None)
@given(text=st.text(alphabet=st.sampled_from(list("|+-= \n{}[]\":,GPU0123:PassFailSkipWarn")), max_size=400),
       rc=st.sampled_from([0, 226, None]))
def test_dcgm_random_text_property(text, rc):
    parsed = kh.parse_dcgm_diag(text, text)
    assert parsed["format"] in ("json", "text", "none")
    check = kh.dcgm_check(2, {"present": True, "rc": rc, "stdout": text, "stderr": text}, True, False)
    assert check["status"] in STATUSES
    if check["status"] == "PASS":
        assert rc == 0 and any(t["status"] == "PASS" for t in parsed["tests"])
        assert all(t["status"] in ("PASS", "SKIP") for t in parsed["tests"])


# --------------------------------------------------------------------------- import styles
def test_importable_as_ansible_module_utils(tmp_path):
    """The Ansible import line works (a stand-in ansible.module_utils package holds copies)."""
    pkg = tmp_path / "ansible" / "module_utils"
    pkg.mkdir(parents=True)
    (tmp_path / "ansible" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    for name in ("kiln_health", "kiln_gpu", "kiln_verdict", "kiln_nccl"):
        (pkg / f"{name}.py").write_text((REPO / "module_utils" / f"{name}.py").read_text())
    # load_health's default path is <module dir>/../data/burnin_health.yml
    (tmp_path / "ansible" / "data").mkdir()
    (tmp_path / "ansible" / "data" / "burnin_health.yml").write_text(
        (REPO / "data" / "burnin_health.yml").read_text())
    code = ("from ansible.module_utils import kiln_health as kh; import sys; "
            "assert 'kiln_verdict' not in sys.modules and 'kiln_gpu' not in sys.modules; "
            "print(kh.kiln_verdict.__name__, kh.kiln_gpu.__name__, kh.load_health()['schema'])")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = subprocess.run([PY, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ansible.module_utils.kiln_verdict", "ansible.module_utils.kiln_gpu", kh.SCHEMA]
