"""module_utils/kiln/health/memory.py: GPU memory checks (ECC, row remapping, page retirement).

Normal cases come from recorded nvidia-smi XML (tests/fixtures/nvidia-smi) and the nvidia-smi
emulator (tests/fixtures/gpu-emulator). Property tests (hypothesis) feed hostile facts and check that
nothing raises and that PASS only comes from counters that were really fine.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from kiln_loader import load_source

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_health_cases import (  # noqa: F401 - the shared cases; each file uses some
    REPO, kdd, kh, khd, khm, khw, KilnConfigError, SMI_FIXTURES, GPU_EMU, EMU, PY, STATUSES, HEALTH, smi_emulator, by_id, facts_from_xml,
)



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
    checks = by_id(khm.memory_checks(facts_from_xml((SMI_FIXTURES / fname).read_text()), HEALTH, True))
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
    for check in khm.memory_checks({"gpus": [{"index": 0}], "source": "sysfs"}, HEALTH, False):
        assert check["status"] == "SKIP" and check["detail"] == kh.NO_SMI
    for facts in ({"gpus": []}, {}, None, "facts"):
        assert {c["status"] for c in khm.memory_checks(facts, HEALTH, True)} == {"SKIP"}
    for check in khm.memory_checks({"gpus": {"0": {}}}, HEALTH, True):
        assert check["status"] == "INCOMPLETE" and "not a list" in check["detail"]
    checks = khm.memory_checks({"gpus": [None, 7]}, HEALTH, True)
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
    healthy = by_id(khm.memory_checks(emulated_facts(monkeypatch, tmp_path, H100, driver=driver), HEALTH, True))
    assert [c["status"] for c in healthy.values()] == ["PASS", "PASS", "SKIP"]
    assert healthy[kh.CHECK_ECC]["detail"].startswith("8 GPUs: no volatile uncorrectable ECC error")
    facts = emulated_facts(monkeypatch, tmp_path, H100, driver=driver, overrides={
        "3": {"ecc_volatile_dram_uncorrectable": 2}, "5": {"ecc_volatile_sram_uncorrectable": 1}})
    assert facts["gpus"][3]["ecc"]["volatile_dram_uncorrectable"] == 2
    assert facts["gpus"][5]["ecc"]["volatile_sram_uncorrectable"] == 1
    ecc = by_id(khm.memory_checks(facts, HEALTH, True))[kh.CHECK_ECC]
    assert ecc["status"] == "FAIL"
    assert ecc["reasons"] == ["GPU3 volatile DRAM uncorrectable 2 > 0", "GPU5 volatile SRAM uncorrectable 1 > 0"]
    assert ecc["detail"] == "GPU3 volatile DRAM uncorrectable 2 > 0; GPU5 volatile SRAM uncorrectable 1 > 0"
    assert ecc["gpus"]["GPU3"] == "FAIL" and ecc["gpus"]["GPU0"] == "PASS" and ecc["value"] == 2
    assert ecc["rules"]["volatile_dram_uncorrectable"]["confidence"] == "DERIVED"


def test_emulated_sram_parity_counts_as_sram(monkeypatch, tmp_path):
    facts = emulated_facts(monkeypatch, tmp_path, H100, overrides={"1": {"ecc_volatile_sram_parity": 4}})
    assert facts["gpus"][1]["ecc"]["volatile_sram_uncorrectable"] == 4
    assert by_id(khm.memory_checks(facts, HEALTH, True))[kh.CHECK_ECC]["reasons"] == [
        "GPU1 volatile SRAM uncorrectable 4 > 0"]


def test_emulated_row_remap_pending_failure_and_hidden(monkeypatch, tmp_path):
    facts = emulated_facts(monkeypatch, tmp_path, H100, overrides={
        "2": {"remapped_rows_pending": True}, "6": {"remapped_rows_failure": True}})
    remap = by_id(khm.memory_checks(facts, HEALTH, True))[kh.CHECK_REMAP]
    assert remap["status"] == "FAIL" and remap["value"] == 2
    assert remap["reasons"] == ["GPU2 row remap pending (reset the GPU to apply it)",
                                "GPU6 row remap failure (no spare row left: RMA)"]
    hidden = emulated_facts(monkeypatch, tmp_path, H100, overrides={"4": {"remapped_rows_na": True}})
    remap = by_id(khm.memory_checks(hidden, HEALTH, True))[kh.CHECK_REMAP]
    assert remap["status"] == "INCOMPLETE"
    assert remap["detail"] == "GPU4: Hopper GPU remaps rows but reported no remapped-rows data"


def test_emulated_ecc_disabled_and_no_ecc(monkeypatch, tmp_path):
    disabled = emulated_facts(monkeypatch, tmp_path, H100, overrides={"0": {"ecc_mode": "Disabled"}})
    ecc = by_id(khm.memory_checks(disabled, HEALTH, True))[kh.CHECK_ECC]
    assert ecc["status"] == "INCOMPLETE" and ecc["detail"] == "GPU0: ECC disabled, uncorrectable errors are not counted"
    consumer = dict(H100, gpu=dict(H100["gpu"], ecc_mode="N/A"))
    checks = by_id(khm.memory_checks(emulated_facts(monkeypatch, tmp_path, consumer), HEALTH, True))
    assert {c["status"] for c in checks.values()} == {"SKIP"}
    assert "ECC not supported" in checks[kh.CHECK_ECC]["detail"]


def test_emulated_pascal_page_retirement(monkeypatch, tmp_path):
    healthy = by_id(khm.memory_checks(emulated_facts(monkeypatch, tmp_path, P100), HEALTH, True))
    assert [c["status"] for c in healthy.values()] == ["PASS", "SKIP", "PASS"]
    assert healthy[kh.CHECK_REMAP]["detail"] == "no row remapping on Pascal GPUs (page retirement applies)"
    facts = emulated_facts(monkeypatch, tmp_path, P100, overrides={
        "0": {"retired_pages_double_bit": 10, "retired_pages_single_bit": 10},  # at the limit: fine
        "1": {"retired_pages_double_bit": 11, "retired_pages_pending": True, "ecc_volatile_dram_uncorrectable": 1}})
    gpu1 = facts["gpus"][1]
    assert gpu1["memory_repair"] == "page_retirement" and gpu1["remapped_rows"]["supported"] is False
    assert gpu1["ecc"]["volatile_dram_uncorrectable"] == 1 and gpu1["ecc"]["volatile_uncorrectable"] == 1
    checks = by_id(khm.memory_checks(facts, HEALTH, True))
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
    ecc = by_id(khm.memory_checks(ampere(ecc={"volatile_dram_uncorrectable": value}), HEALTH, True))[kh.CHECK_ECC]
    assert ecc["status"] == "INCOMPLETE" and why in ecc["detail"]
    assert "GPU0 volatile DRAM uncorrectable" in ecc["detail"]


def test_missing_dram_count_on_ampere_is_incomplete():
    ecc = by_id(khm.memory_checks(ampere(ecc={"volatile_dram_uncorrectable": None, "volatile_uncorrectable": 0}),
                                 HEALTH, True))[kh.CHECK_ECC]
    assert ecc["status"] == "INCOMPLETE" and ecc["detail"] == "GPU0 volatile DRAM uncorrectable not reported"


def test_total_only_facts_are_judged_by_the_total():
    old = ampere(ecc=None)
    old["gpus"][0]["ecc"] = {"volatile_uncorrectable": 3, "volatile_correctable": 0}
    assert by_id(khm.memory_checks(old, HEALTH, True))[kh.CHECK_ECC]["reasons"] == [
        "GPU0 volatile uncorrectable (total) 3 > 0"]


@pytest.mark.parametrize("flag", ["Yes", 1, 0, "No", [], {}])
def test_remap_flag_that_is_not_a_bool_is_incomplete(flag):
    remap = by_id(khm.memory_checks(ampere(remapped_rows={"pending": flag}), HEALTH, True))[kh.CHECK_REMAP]
    assert remap["status"] == "INCOMPLETE" and "not a yes/no value" in remap["detail"]


def test_unknown_architecture_without_data_is_incomplete():
    facts = ampere(architecture=None, remapped_rows={"supported": False, "pending": None, "failure": None})
    checks = by_id(khm.memory_checks(facts, HEALTH, True))
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
    scheme = khw.memory_repair(arch, gpu.get("remapped_rows"), gpu.get("retired_pages"))
    if scheme is None and gpu.get("memory_repair") in ("row_remap", "page_retirement"):
        scheme = gpu["memory_repair"]
    return scheme


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=_gpus(), smi=st.booleans(), wrap=st.sampled_from(["list", "tuple", "junk"]))
def test_memory_checks_never_raise_and_pass_only_on_good_counters(gpus, smi, wrap):
    facts = {"gpus": gpus if wrap == "list" else (tuple(gpus) if wrap == "tuple" else {"0": gpus})}
    checks = by_id(khm.memory_checks(facts, HEALTH, smi))
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
