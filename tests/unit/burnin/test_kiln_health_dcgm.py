"""module_utils/kiln/health/dcgm.py: the dcgm.diag.r<level> verdict, on the dcgmi emulator
(tests/fixtures/emulators) and on hostile documents (hypothesis): nothing raises, PASS only comes
from tests that were really fine."""

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
    parsed = kdd.parse_dcgm_diag(run["stdout"], run["stderr"])
    assert parsed["format"] == ("json" if as_json else "text")
    assert [t["name"] for t in parsed["tests"]] == LEVEL_TESTS[level]
    assert all(t["status"] == "PASS" and t["gpus"] == {"GPU0": "PASS", "GPU1": "PASS"} for t in parsed["tests"])
    assert parsed["problems"] == []
    if as_json:
        assert parsed["version"] == "4.6.0" and parsed["driver_version"] == "580.95.05"
    check = khd.dcgm_check(level, run, True, require_stress=level >= 2, artifact="n1/dcgm.json", health=HEALTH)
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
    parsed = kdd.parse_dcgm_diag(run["stdout"])
    assert {t["status"] for t in parsed["tests"]} == {"SKIP"} and len(parsed["tests"]) == 7
    check = khd.dcgm_check(3, run, True, require_stress=True, health=HEALTH)
    assert check["status"] == "INCOMPLETE"
    assert "every test was skipped" in check["detail"]
    assert ("no stress/hardware test ran: diagnostic (skipped), targeted_stress (skipped), "
            "targeted_power (skipped), memory_bandwidth (skipped)") in check["detail"]
    assert check["stress_tests"] == {"diagnostic": "skipped", "targeted_stress": "skipped",
                                     "targeted_power": "skipped", "memory_bandwidth": "skipped"}


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_emulated_dcgmi_stress_skipped_is_incomplete_only_in_acceptance(hostengine, as_json):
    run = dcgmi(hostengine, 3, *(["-j"] if as_json else []), dcgm_skip="stress")
    default = khd.dcgm_check(3, run, True, require_stress=False, health=HEALTH)
    assert default["status"] == "PASS"
    assert "skipped: diagnostic, targeted_stress, targeted_power, memory_bandwidth" in default["detail"]
    acceptance = khd.dcgm_check(3, run, True, require_stress=True, health=HEALTH)
    assert acceptance["status"] == "INCOMPLETE"
    assert "no stress/hardware test ran: diagnostic (skipped)" in acceptance["detail"]
    # one stress test skipped on one GPU: still PASS (stress_rule any), the gap is named
    partial = dcgmi(hostengine, 3, *(["-j"] if as_json else []),
                    gpu_overrides={"1": {"skip": "targeted_power"}})
    check = khd.dcgm_check(3, partial, True, require_stress=True, health=HEALTH)
    assert check["status"] == "PASS" and "skipped on some GPUs: targeted_power [GPU1]" in check["detail"]


def test_stress_rule_all_requires_every_stress_test(hostengine):
    health = json.loads(json.dumps(HEALTH))
    health["dcgm"]["stress_rule"] = "all"
    run = dcgmi(hostengine, 3, "-j", dcgm_skip={"test": "targeted_power"})
    check = khd.dcgm_check(3, run, True, require_stress=True, health=health)
    assert check["status"] == "INCOMPLETE"
    assert "stress/hardware tests not run: targeted_power (skipped)" in check["detail"]


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_emulated_dcgmi_fail_is_fail(hostengine, as_json):
    run = dcgmi(hostengine, 3, *(["-j"] if as_json else []),
                dcgm_fail={"test": "diagnostic", "gpus": [1], "message": "GPU 1 GEMM result mismatch"})
    assert run["rc"] == 226
    check = khd.dcgm_check(3, run, True, require_stress=True, health=HEALTH)
    assert check["status"] == "FAIL"
    assert check["detail"] == ("dcgmi diag -r 3 rc 226 (DCGM_ST_NVVS_ERROR (-30): the diagnostic reported an "
                               "error): failed: diagnostic [GPU1] (GPU1: GPU 1 GEMM result mismatch)")
    statuses = {t["name"]: t["status"] for t in check["tests"]}
    assert statuses["diagnostic"] == "FAIL" and statuses["memory"] == "PASS"


def test_emulated_dcgmi_isolate_fail_and_fail_beats_skip(hostengine):
    run = dcgmi(hostengine, 2, "-j", dcgm_fail={"test": "memory", "gpus": [0]}, dcgm_skip="memory")
    assert run["rc"] == 205
    check = khd.dcgm_check(2, run, True, require_stress=False, health=HEALTH)
    assert check["status"] == "FAIL" and "DCGM_ST_NVVS_ISOLATE_ERROR" in check["detail"]
    mem = next(t for t in kdd.parse_dcgm_diag(run["stdout"])["tests"] if t["key"] == "memory")
    assert mem["gpus"] == {"GPU0": "FAIL", "GPU1": "SKIP"}
    assert mem["warnings"][0]["error_id"] == 52


def test_fail_counts_even_with_rc_zero(hostengine):
    run = dcgmi(hostengine, 2, "-j", dcgm_fail={"test": "pcie", "gpus": [1]})
    assert khd.dcgm_check(2, dict(run, rc=0), True, False, health=HEALTH)["status"] == "FAIL"


def test_emulated_dcgmi_runtime_error_and_no_hostengine(hostengine):
    run = dcgmi(hostengine, 3, "-j", dcgm_runtime_error={"message": "The NVVS binary could not be started.", "rc": 226})
    assert run["rc"] == 226
    parsed = kdd.parse_dcgm_diag(run["stdout"])
    assert parsed["format"] == "json" and parsed["tests"] == []
    assert parsed["runtime_error"] == "The NVVS binary could not be started."
    check = khd.dcgm_check(3, run, True, True, health=HEALTH)
    assert check["status"] == "INCOMPLETE"
    assert "output unparseable (The NVVS binary could not be started.)" in check["detail"]
    down = dcgmi(hostengine, 3, "-j", port=_free_port())
    assert down["rc"] == 235
    check = khd.dcgm_check(3, down, True, True, health=HEALTH)
    assert check["status"] == "INCOMPLETE" and "DCGM_ST_CONNECTION_NOT_VALID" in check["detail"]
    assert "Error: Unable to connect to host engine" in " ".join(kdd.parse_dcgm_diag(down["stdout"])["problems"])


def test_dcgm_check_simple_branches(hostengine):
    good = dcgmi(hostengine, 2, "-j")
    assert khd.dcgm_check(2, good, False, True, health=HEALTH)["status"] == "SKIP"
    assert khd.dcgm_check(2, None, True, False, health=HEALTH)["detail"] == "dcgmi not installed"
    assert khd.dcgm_check(2, {"present": False}, True, False, health=HEALTH)["status"] == "INCOMPLETE"
    for rc in (None, 1, "0", True):
        check = khd.dcgm_check(2, dict(good, rc=rc), True, False, health=HEALTH)
        assert check["status"] == "INCOMPLETE" and "although no test reported Fail" in check["detail"], rc
    assert khd.dcgm_check(2, dict(good, timed_out=True), True, False, health=HEALTH)["status"] == "INCOMPLETE"
    assert khd.dcgm_check(2, dict(good, stdout=good["stdout"][:200]), True, False, health=HEALTH)["status"] == "INCOMPLETE"
    with pytest.raises(KilnConfigError):
        khd.dcgm_check(1, good, True, require_stress=True, health=HEALTH)
    with pytest.raises(KilnConfigError):
        khd.dcgm_check("3", good, True, False, health=HEALTH)



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
    parsed = kdd.parse_dcgm_diag(stdout)
    assert parsed["format"] in ("json", "text", "none")
    for test in parsed["tests"]:
        assert test["status"] in ("PASS", "FAIL", "WARN", "SKIP", kdd.UNKNOWN)
    check = khd.dcgm_check(3, {"present": True, "rc": rc, "stdout": stdout, "stderr": ""}, True, require_stress, health=HEALTH)
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
    check = khd.dcgm_check(3, {"present": True, "rc": rc, "stdout": text}, True, require_stress, health=HEALTH)
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
    parsed = kdd.parse_dcgm_diag(text, text)
    assert parsed["format"] in ("json", "text", "none")
    check = khd.dcgm_check(2, {"present": True, "rc": rc, "stdout": text, "stderr": text}, True, False, health=HEALTH)
    assert check["status"] in STATUSES
    if check["status"] == "PASS":
        assert rc == 0 and any(t["status"] == "PASS" for t in parsed["tests"])
        assert all(t["status"] in ("PASS", "SKIP") for t in parsed["tests"])
