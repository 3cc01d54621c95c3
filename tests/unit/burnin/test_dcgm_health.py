"""module_utils/kiln/health/dcgm_health.py: ``dcgmi health -c [-j]`` parsing and the dcgm.health check, on
the layout DCGM's dcgmi/Health.cpp writes (tests/fixtures/dcgm/health, SOURCES.md), on the dcgmi emulator
(tests/fixtures/emulators/dcgmi: watches, the GPU profile's ``health`` knob, the runtime fault file) and on
hostile documents (hypothesis): nothing raises, PASS only when the overall health and every entity say
Healthy."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_health_cases import EMU, PY, REPO, STATUSES  # noqa: F401 - the shared cases
from kiln_loader import load_source

from kiln.health import dcgm_health as kdh

FIX = REPO / "tests" / "fixtures" / "dcgm" / "health"
emulator = load_source("kiln_dcgmi_emulator", EMU / "dcgmi")


def fixture(name: str) -> str:
    return (FIX / name).read_text()


def check(stdout, rc=0, present=True, **extra):
    run = {"rc": rc, "stdout": stdout, "stderr": extra.pop("stderr", "")}
    run.update(extra)
    return kdh.dcgm_health_check(run, present)


def report(overall="Healthy", groups=None):
    body = {"Overall Health": {"value": overall}}
    body.update(groups or {})
    return json.dumps({"body": body, "header": ["Health Monitor Report"]})


def gpu(ident, value, systems):
    return {"GPU": {"children": {str(ident): {"value": value, "children": {"Errors": {"children": {
        name: {"value": word, "overflow": [msg]} for name, word, msg in systems}}}}}}}


# --------------------------------------------------------------------------- recorded-style fixtures
EXPECTED = {
    "dcgm4-healthy.json": ("PASS", "json", []),
    "dcgm4-pcie-warning.json": ("WARN", "json", [("GPU 3", "pcie", "WARN")]),
    "dcgm4-multi-failure.json": ("FAIL", "json", [("GPU 0", "memory", "WARN"), ("GPU 1", "memory", "FAIL"),
                                                  ("GPU 1", "nvlink", "WARN"), ("Switch 2", "internal_error", "FAIL")]),
    "dcgm3-legacy-errors-null.json": ("FAIL", "json", [("GPU ?", None, "FAIL")]),
    "dcgm4-text-failure.txt": ("FAIL", "text", [("GPU 3", "pcie", "WARN"), ("GPU 5", "memory", "FAIL"),
                                                ("GPU 5", "nvlink", "WARN")]),
    "watches-not-enabled.txt": (None, "none", []),
    "hostengine-down.txt": (None, "none", []),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_parses(name):
    overall, fmt, entities = EXPECTED[name]
    parsed = kdh.parse_dcgm_health(fixture(name))
    assert parsed["overall"] == overall and parsed["format"] == fmt
    assert [(e["entity"], e["system"], e["health"]) for e in parsed["entities"]] == entities


def test_every_fixture_file_is_covered():
    assert {p.name for p in FIX.iterdir()} == set(EXPECTED) | {"SOURCES.md"}


def test_messages_are_rejoined_from_overflow_rows():
    parsed = kdh.parse_dcgm_health(fixture("dcgm4-multi-failure.json"))
    mem = [e for e in parsed["entities"] if e["entity"] == "GPU 1" and e["system"] == "memory"][0]
    assert mem["messages"] == ["Detected 2 volatile double-bit ECC error(s) in GPU 1., GPU 1 had uncorrectable "
                               "memory errors and row remapping failed."]
    text = kdh.parse_dcgm_health(fixture("dcgm4-text-failure.txt"))
    nvl = [e for e in text["entities"] if e["system"] == "nvlink"][0]
    assert nvl["messages"] == ["Detected 120 CRC FLIT NvLink errors on GPU 5's NVLink which exceeds threshold of 100"]


def test_legacy_entity_key_is_named_as_a_problem():
    parsed = kdh.parse_dcgm_health(fixture("dcgm3-legacy-errors-null.json"))
    assert any("health code" in p for p in parsed["problems"])


# --------------------------------------------------------------------------- the check
def test_fixture_verdicts():
    assert check(fixture("dcgm4-healthy.json"))["status"] == "PASS"
    warn = check(fixture("dcgm4-pcie-warning.json"))
    assert warn["status"] == "WARN" and "GPU 3 pcie: Detected more than 8 PCIe replays" in warn["detail"]
    fail = check(fixture("dcgm4-multi-failure.json"))
    assert fail["id"] == "dcgm.health" and fail["status"] == "FAIL"
    assert "GPU 1 memory: Detected 2 volatile double-bit ECC error(s)" in fail["detail"]
    assert "Switch 2" in fail["detail"] and "GPU 0" not in fail["detail"]  # the warnings are not failures
    assert fail["overall"] == "FAIL" and len(fail["entities"]) == 4


def test_skip_when_dcgm_is_not_installed():
    record = kdh.dcgm_health_check(None, False)
    assert record["status"] == "SKIP" and "DCGM not installed" in record["detail"]
    assert kdh.dcgm_health_check({"rc": 0, "stdout": fixture("dcgm4-multi-failure.json")}, False)["status"] == "SKIP"


def test_not_run_is_incomplete():
    record = kdh.dcgm_health_check(None, True)
    assert record["status"] == "INCOMPLETE" and "did not run" in record["detail"]


def test_watches_not_set_is_incomplete_and_says_so():
    record = check(fixture("watches-not-enabled.txt"), rc=253)
    assert record["status"] == "INCOMPLETE"
    assert "rc 253" in record["detail"] and "dcgmi health -s a" in record["detail"]
    assert "Health watches not enabled" in record["detail"]


def test_hostengine_down_is_incomplete():
    record = check(fixture("hostengine-down.txt"), rc=235)
    assert record["status"] == "INCOMPLETE" and "host engine not reachable" in record["detail"]


@pytest.mark.parametrize("rc", [1, 124, 253, None, "0", True])
def test_healthy_report_with_a_bad_rc_is_incomplete(rc):
    record = check(fixture("dcgm4-healthy.json"), rc=rc)
    assert record["status"] == "INCOMPLETE"


def test_timeout_is_incomplete_and_a_failure_still_fails():
    assert check(fixture("dcgm4-healthy.json"), timed_out=True)["status"] == "INCOMPLETE"
    assert check(fixture("dcgm4-multi-failure.json"), rc=137, timed_out=True)["status"] == "FAIL"


def test_no_report_is_incomplete():
    for stdout in ("", "garbage", None, 42, b"\xff\xfe", "{}", '{"body": {"PCIe": {"value": "On"}}}'):
        record = check(stdout)
        assert record["status"] == "INCOMPLETE", stdout


def test_missing_overall_health_is_incomplete():
    doc = json.dumps({"body": gpu(0, "Healthy", []), "header": ["Health Monitor Report"]})
    record = check(doc)
    assert record["status"] == "INCOMPLETE" and "no Overall Health" in record["detail"]


@pytest.mark.parametrize("word", ["Internal error", "Degraded", "", 20])
def test_unknown_health_words_are_incomplete(word):
    assert check(report(word))["status"] == "INCOMPLETE"
    assert check(report("Healthy", gpu(0, word, [])))["status"] == "INCOMPLETE"
    assert check(report("Healthy", gpu(0, "Healthy", [("PCIe system", word, "x")])))["status"] == "INCOMPLETE"


def test_contradiction_healthy_overall_with_a_failed_entity_is_fail():
    dbe = "Detected 1 volatile double-bit ECC error(s) in GPU 2."
    record = check(report("Healthy", gpu(2, "Failure", [("Memory system", "Failure", dbe)])))
    assert record["status"] == "FAIL"
    assert "GPU 2 memory: Detected 1 volatile double-bit ECC error(s) in GPU 2." in record["detail"]
    assert "although Overall Health says Healthy" in record["detail"]
    assert any("Overall Health is Healthy but GPU 2 memory reports FAIL" in p for p in record["problems"])


def test_contradiction_healthy_overall_with_a_warned_entity_is_warn():
    record = check(report("Healthy", gpu(1, "Warning", [("PCIe system", "Warning", "replays")])))
    assert record["status"] == "WARN" and "although" in record["detail"]


def test_overall_failure_without_an_entity_is_fail():
    record = check(report("Failure"))
    assert record["status"] == "FAIL" and "no entity named" in record["detail"]
    assert check(report("Warning"))["status"] == "WARN"


def test_entity_failure_beats_an_unknown_word_and_a_bad_rc():
    doc = report("Internal error", gpu(4, "Failure", [("NVLINK system", "Failure", "GPU 4's NvLink link 3 is "
                                                                                   "currently down")]))
    record = check(doc, rc=253)
    assert record["status"] == "FAIL" and "GPU 4 nvlink: GPU 4's NvLink link 3 is currently down" in record["detail"]


def test_noise_around_the_document_is_tolerated():
    noisy = "Warning: something the client logged\n" + fixture("dcgm4-pcie-warning.json") + "\ntrailing junk\n"
    assert check(noisy)["status"] == "WARN"


def test_huge_and_deep_inputs_are_bounded():
    deep = '{"body": ' * 5000 + "}" * 5000
    assert check(deep)["status"] == "INCOMPLETE"
    many = report("Warning", {"GPU": {"children": {str(i): {"value": "Warning"} for i in range(3000)}}})
    parsed = kdh.parse_dcgm_health(many)
    assert len(parsed["entities"]) == kdh.MAX_ENTITIES
    assert any("more than" in p for p in parsed["problems"])
    assert parsed["entities"][-1]["entity"] == f"{3000 - kdh.MAX_ENTITIES + 1} more records"
    children = {str(i): {"value": "Healthy"} for i in range(3000)}
    children["3000"] = {"value": "Failure"}  # past the records kept: still judged
    assert check(report("Healthy", {"GPU": {"children": children}}))["status"] == "FAIL"
    systems = {f"S{i} system": {"value": "Healthy"} for i in range(500)}
    systems["Memory system"] = {"value": "Failure"}
    assert check(report("Healthy", {"GPU": {"children": {"0": {"value": "Healthy", "children": {
        "Errors": {"children": systems}}}}}}))["status"] == "FAIL"
    assert check("x" * (kdh.MAX_INPUT_CHARS + 10))["status"] == "INCOMPLETE"


@pytest.mark.parametrize("name", ["dcgm4-healthy.json", "dcgm4-multi-failure.json", "dcgm4-pcie-warning.json"])
def test_truncated_documents_never_pass(name):
    text = fixture(name)
    last = text.rindex("}")
    for cut in range(0, last, 7):
        record = check(text[:cut])
        assert record["status"] in ("INCOMPLETE", "FAIL", "WARN") and record["status"] != "PASS", cut
    assert check(text[:last + 1])["status"] == EXPECTED[name][0]


# --------------------------------------------------------------------------- hypothesis
HEALTH_VALUES = st.one_of(st.sampled_from(["Healthy", "Warning", "Failure", "Internal error", "healthy", "Pass",
                                           "WARN", "", "Healthy "]),
                          st.integers(-5, 30), st.none(), st.text(max_size=8), st.booleans())
SYSTEM = st.one_of(
    st.fixed_dictionaries({"value": HEALTH_VALUES}, optional={
        "overflow": st.one_of(st.lists(st.text(max_size=12), max_size=3), st.text(max_size=5))}),
    st.none(), st.integers(), st.text(max_size=4))
ENTITY = st.one_of(
    st.fixed_dictionaries({"value": HEALTH_VALUES}, optional={"children": st.fixed_dictionaries({"Errors": st.one_of(
        st.none(), st.fixed_dictionaries({"children": st.dictionaries(
            st.sampled_from(["PCIe system", "Memory system", "NVLINK system", "Thermal system", "Odd"]), SYSTEM,
            max_size=3)}))})}),
    st.none(), st.text(max_size=5), st.lists(st.integers(), max_size=2))
GROUPS = st.dictionaries(st.sampled_from(["GPU", "Switch", "vGPU"]),
                         st.fixed_dictionaries({"children": st.dictionaries(st.from_regex(r"\d{1,2}", fullmatch=True),
                                                                            ENTITY, max_size=4)}), max_size=2)
OVERALL = st.one_of(st.fixed_dictionaries({"value": HEALTH_VALUES}), HEALTH_VALUES)
HEALTHY = {"healthy", "pass", "passed", "ok"}


def _healthy(value) -> bool:
    return isinstance(value, str) and " ".join(value.strip().lower().split()) in HEALTHY


def all_healthy(body) -> bool:
    """The oracle: the overall and every entity and system value say healthy, every node readable."""
    overall = body.get("Overall Health")
    if not _healthy(overall.get("value") if isinstance(overall, dict) else overall):
        return False
    for name, group in body.items():
        if name == "Overall Health":
            continue
        for child in group["children"].values():
            if not isinstance(child, dict) or not _healthy(child.get("value")):
                return False
            errors = (child.get("children") or {}).get("Errors")
            for sub in (errors or {}).get("children", {}).values():
                if not isinstance(sub, dict) or not _healthy(sub.get("value")):
                    return False
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=GROUPS, overall=OVERALL, has_overall=st.booleans(), styled=st.booleans())
def test_random_reports_pass_only_when_everything_is_healthy(groups, overall, has_overall, styled):
    body = dict(groups)
    if has_overall:
        body["Overall Health"] = overall
    doc = {"body": body, "header": ["Health Monitor Report"]}
    text = emulator.jsoncpp_styled(doc) if styled else json.dumps(doc)
    record = check(text)
    assert record["status"] in STATUSES
    expected_pass = has_overall and all_healthy(body)
    assert (record["status"] == "PASS") == expected_pass, (record["detail"], text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=GROUPS, overall=OVERALL, data=st.data())
def test_random_reports_truncated_never_pass(groups, overall, data):
    text = emulator.jsoncpp_styled({"body": dict(groups, **{"Overall Health": overall}),
                                    "header": ["Health Monitor Report"]})
    cut = data.draw(st.integers(0, text.rindex("}")))
    assert check(text[:cut])["status"] != "PASS"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=400), st.binary(max_size=200), st.none(), st.integers(), st.floats(),
                 st.lists(st.text(max_size=5), max_size=3)),
       st.one_of(st.integers(-300, 300), st.none(), st.text(max_size=3)))
def test_anything_never_raises(stdout, rc):
    parsed = kdh.parse_dcgm_health(stdout)
    assert set(parsed) == {"overall", "entities", "problems", "format", "error"}
    record = kdh.dcgm_health_check({"rc": rc, "stdout": stdout, "stderr": stdout}, True)
    assert record["status"] in STATUSES
    if record["status"] == "PASS":
        assert parsed["overall"] == "PASS" and all(e["health"] == "PASS" for e in parsed["entities"])


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10)),
                    lambda kids: st.one_of(st.lists(kids, max_size=3),
                                           st.dictionaries(st.sampled_from(["body", "header", "Overall Health", "GPU",
                                                                            "children", "Errors", "value", "overflow",
                                                                            "0", "PCIe system"]), kids, max_size=4)),
                    max_leaves=30))
def test_random_json_trees_never_raise_and_never_pass_without_health(tree):
    record = check(json.dumps(tree))
    assert record["status"] in STATUSES
    if record["status"] == "PASS":
        parsed = kdh.parse_dcgm_health(json.dumps(tree))
        assert parsed["overall"] == "PASS" and all(e["health"] == "PASS" for e in parsed["entities"])


# --------------------------------------------------------------------------- the dcgmi emulator
PROFILE = {
    "name": "dcgm-health-h100-2", "driver_version": "580.95.05", "cuda_version": "13.0", "driver_loaded": True,
    "gpu_count": 2, "bus_ids": ["0000:19:00.0", "0000:3b:00.0"],
    "gpu": {"name": "NVIDIA H100 80GB HBM3", "pci_device_id": "10de:2330"}, "gpu_overrides": {},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def hostengine(tmp_path_factory):
    root = tmp_path_factory.mktemp("dcgm-health")
    env = dict(os.environ, KILN_FIXTURE_ROOT=str(root / "root"), KILN_GPU_PROFILE=str(root / "unused.json"))
    port = _free_port()
    proc = subprocess.Popen([PY, str(EMU / "nv-hostengine"), "-n", "-b", "127.0.0.1", "-p", str(port)], env=env,
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
    yield port
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=5)


@pytest.fixture
def node(hostengine, tmp_path):
    """A dcgmi runner with its own fixture root (watch state, fault file) and profile."""
    root = tmp_path / "root"

    def dcgmi(*args, port=None, faults=None, **profile_changes):
        prof = json.loads(json.dumps(PROFILE))
        prof.update(profile_changes)
        path = tmp_path / "profile.json"
        path.write_text(json.dumps(prof))
        env = dict(os.environ, KILN_FIXTURE_ROOT=str(root), KILN_GPU_PROFILE=str(path))
        env.pop("KILN_GPU_FAULTS", None)
        if faults is not None:
            env["KILN_GPU_FAULTS"] = str(faults)
        r = subprocess.run([PY, str(EMU / "dcgmi"), *args, "--host", f"127.0.0.1:{port or hostengine}"],
                           env=env, capture_output=True, text=True, timeout=20)
        return {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}

    dcgmi.root = root
    return dcgmi


def test_emulator_check_without_watches_is_the_dcgm_error(node):
    run = node("health", "-c", "-j")
    assert run["rc"] == 253
    assert run["stdout"] == "Error: Health watches not enabled. Please enable watches. \n"
    record = kdh.dcgm_health_check(run, True)
    assert record["status"] == "INCOMPLETE" and "dcgmi health -s a" in record["detail"]


@pytest.mark.parametrize("as_json", [True, False])
def test_emulator_healthy_after_set(node, as_json):
    assert node("health", "-s", "a") == {"rc": 0, "stdout": "Health monitor systems set successfully.\n",
                                         "stderr": ""}
    run = node("health", "-c", *(["-j"] if as_json else []))
    assert run["rc"] == 0
    parsed = kdh.parse_dcgm_health(run["stdout"])
    assert parsed["format"] == ("json" if as_json else "text") and parsed["overall"] == "PASS"
    assert kdh.dcgm_health_check(run, True)["status"] == "PASS"


def test_emulator_json_is_the_dcgmi_tree(node):
    node("health", "-s", "a")
    run = node("health", "-c", "-j", gpu_overrides={"1": {"health": [
        "memory", {"system": "memory", "message": "GPU 1 had uncorrectable memory errors and row remapping failed."},
        {"system": "PCIe", "status": "Warn"}]}})
    lines = run["stdout"].splitlines()
    assert lines[:3] == ["{", '\t"body" : ', "\t{"]  # jsoncpp: the nested brace on its own line
    doc = json.loads(run["stdout"])
    assert doc["header"] == ["Health Monitor Report"] and doc["body"]["Overall Health"] == {"value": "Failure"}
    gpu1 = doc["body"]["GPU"]["children"]["1"]
    assert gpu1["value"] == "Failure"
    errors = gpu1["children"]["Errors"]["children"]
    assert errors["Memory system"]["value"] == "Failure"
    assert " ".join(errors["Memory system"]["overflow"]) == (
        "Detected 1 volatile double-bit ECC error(s) in GPU 1., GPU 1 had uncorrectable memory errors and row "
        "remapping failed.")
    assert all(len(chunk) <= 55 for chunk in errors["Memory system"]["overflow"])
    assert errors["PCIe system"]["value"] == "Warning"
    record = kdh.dcgm_health_check(run, True)
    assert record["status"] == "FAIL"
    assert "GPU 1 memory: Detected 1 volatile double-bit ECC error(s) in GPU 1., GPU 1 had uncorrectable" \
        in record["detail"]


@pytest.mark.parametrize("as_json", [True, False])
def test_emulator_warning_and_failure_parse(node, as_json):
    node("health", "-s", "a")
    flag = ["-j"] if as_json else []
    warn = node("health", "-c", *flag, gpu_overrides={"0": {"health": "pcie"}})
    record = kdh.dcgm_health_check(warn, True)
    assert record["status"] == "WARN"
    assert "GPU 0 pcie: Detected more than 8 PCIe replays per minute for GPU 0 : 22" in record["detail"]
    fail = node("health", "-c", *flag, gpu_overrides={"1": {"health": {"system": "NVLink"}}})
    record = kdh.dcgm_health_check(fail, True)
    assert record["status"] == "FAIL" and "GPU 1 nvlink: GPU 1's NvLink link 3 is currently down" in record["detail"]


def test_emulator_reports_only_watched_systems(node):
    node("health", "-s", "p")
    prof = {"gpu_overrides": {"0": {"health": ["memory", "pcie"]}}}
    parsed = kdh.parse_dcgm_health(node("health", "-c", "-j", **prof)["stdout"])
    assert [(e["entity"], e["system"]) for e in parsed["entities"]] == [("GPU 0", "pcie")]
    fetch = json.loads(node("health", "-f", "-j")["stdout"].split("\n", 1)[1])
    assert fetch["body"]["PCIe"] == {"value": "On"} and fetch["body"]["Memory"] == {"value": "Off"}
    node("health", "--clear")
    assert node("health", "-c", **prof)["rc"] == 253


@pytest.mark.parametrize("letters", ["ap", "pp", "q", ""])
def test_emulator_rejects_bad_watch_letters(node, letters):
    run = node("health", "-s", letters)
    assert run["rc"] == 254 and run["stderr"].startswith("set -- ")


def test_emulator_forgets_watches_when_the_hostengine_restarts(node):
    pidfile = node.root / "var" / "run" / "nvhostengine.pid"
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.write_text("4242\n")
    node("health", "-s", "a")
    assert node("health", "-c")["rc"] == 0
    pidfile.write_text("4343\n")
    assert node("health", "-c")["rc"] == 253


def test_emulator_hostengine_down(node):
    run = node("health", "-c", "-j", port=_free_port())
    assert run["rc"] == 235
    record = kdh.dcgm_health_check(run, True)
    assert record["status"] == "INCOMPLETE" and "host engine not reachable" in record["detail"]


def test_runtime_fault_file_merges_over_gpu_overrides(node, tmp_path):
    node("health", "-s", "a")
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({"1": {"health": "memory"}, "7": {"health": "pcie"}, "0": "not a mapping"}))
    prof = {"gpu_overrides": {"1": {"health": "pcie", "fault": "pcie"}}}
    parsed = kdh.parse_dcgm_health(node("health", "-c", "-j", faults=faults, **prof)["stdout"])
    assert [(e["entity"], e["system"], e["health"]) for e in parsed["entities"]] == [("GPU 1", "memory", "FAIL")]
    diag = node("diag", "-r", "2", "-j", faults=faults, **prof)  # the profile's other knobs of GPU 1 stay
    assert diag["rc"] == 226 and '"Fail"' in diag["stdout"]


def test_runtime_fault_file_at_its_default_path(node):
    node("health", "-s", "a")
    assert kdh.dcgm_health_check(node("health", "-c", "-j"), True)["status"] == "PASS"
    path = node.root / "etc" / "kiln-fixture" / "gpu-faults.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"0": {"health": {"system": "thermal"}}}))
    record = kdh.dcgm_health_check(node("health", "-c", "-j"), True)
    assert record["status"] == "WARN" and "GPU 0 thermal: Detected clock throttling due to thermal" in record["detail"]
    path.write_text("{ not json")
    assert kdh.dcgm_health_check(node("health", "-c", "-j"), True)["status"] == "PASS"


def test_emulator_cuts_messages_like_dcgmi():
    """The rows dcgmi/tests/HealthTests.cpp expects from Health::AddErrorMessage and DcgmiOutputTree(28, 60)."""
    assert emulator.health_chunks("The car is red? Are you sure because that doesn't seem like the color I "
                                  "ordered.") == ["The car is red? Are you sure because that doesn't seem",
                                                  "like the color I ordered."]
    assert emulator.health_chunks("Green can be emerald and beautiful, but there are shades of green which are "
                                  "sure to disappoint.") == ["Green can be emerald and beautiful, but there are",
                                                             "shades of green which are sure to disappoint."]
    assert emulator.tree_row(28, 60, 1, "0", "Warning").startswith("| -> 0                      | Warning")
    assert emulator.tree_row(28, 60, 3, "Memory system", "Failure").startswith("|       -> Memory system    | Failure")
    assert emulator.tree_row(28, 60, 3, "", "lame.") == "|" + " " * 27 + "| lame." + " " * 52 + "|"
    assert emulator.health_chunks("x" * 200)  # a word longer than a row ends
