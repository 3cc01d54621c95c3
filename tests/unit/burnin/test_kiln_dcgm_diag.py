"""module_utils/kiln/health/dcgm_diag.py: dcgmi diag parsing. DCGM 3.x samples are written inline in the
layout of DCGM's own Diag.cpp / NVVS JSON (the emulator speaks 4.x only); hostile and huge outputs are
bounded and never pass."""

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
    parsed = kdd.parse_dcgm_diag(DCGM3_JSON)
    assert parsed["format"] == "json" and parsed["version"] == "3.3.5" and parsed["driver_version"] == "535.161.08"
    tests = {t["name"]: t for t in parsed["tests"]}
    assert list(tests) == ["Denylist", "Persistence Mode", "GPU Memory", "Targeted Stress", "Memory Bandwidth"]
    assert tests["Denylist"]["gpus"] == {f"GPU{i}": "PASS" for i in range(4)}
    assert tests["GPU Memory"]["key"] == "memory" and tests["GPU Memory"]["category"] == "Hardware"
    assert tests["Targeted Stress"]["status"] == "WARN" and tests["Targeted Stress"]["key"] == "targeted_stress"
    assert tests["Targeted Stress"]["warnings"] == [{"entity": "GPU2", "error_id": 58,
                                                     "message": "GPU 2 thermal violations totaling 3.1 seconds"}]
    assert tests["Memory Bandwidth"]["status"] == "SKIP"
    check = khd.dcgm_check(3, {"present": True, "rc": 0, "stdout": DCGM3_JSON}, True, require_stress=True, health=HEALTH)
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
    parsed = kdd.parse_dcgm_diag(DCGM3_TABLE)
    assert parsed["format"] == "text"
    tests = {t["name"]: t for t in parsed["tests"]}
    assert list(tests) == ["Denylist", "Persistence Mode", "PCIe", "GPU Memory", "Diagnostic", "Targeted Stress",
                           "Targeted Power", "Memory Bandwidth"]
    assert tests["Diagnostic"]["status"] == "FAIL" and tests["Diagnostic"]["category"] == "Hardware"
    assert tests["Diagnostic"]["gpus"] == {"GPU0": "PASS", "GPU1": "PASS", "GPU3": "PASS", "GPU2": "FAIL"}
    assert tests["Diagnostic"]["detail"] == ("GPU 2: Detected clocks event reason HW slowdown on GPU 2, clocks event "
                                             "reasons are 0x0000000000000008")
    assert (tests["Targeted Power"]["status"], tests["Memory Bandwidth"]["status"]) == ("WARN", "SKIP")
    check = khd.dcgm_check(3, {"present": True, "rc": 226, "stdout": DCGM3_TABLE}, True, True, health=HEALTH)
    assert check["status"] == "FAIL" and "failed: Diagnostic [GPU2]" in check["detail"]
    fail_row = "|                           | Fail - GPU: 2                                  |\n"
    without_fail = DCGM3_TABLE.replace(fail_row, "")
    assert khd.dcgm_check(3, {"present": True, "rc": 0, "stdout": without_fail}, True, True, health=HEALTH)["status"] == "WARN"


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
        test = kdd.parse_dcgm_diag("\n".join(rows))["tests"][0]
        assert test["status"] == "FAIL" and test["warnings"][0]["entity"] == "GPU0"
        assert test["warnings"][0]["message"] == msg[:kdd.MAX_MESSAGE_CHARS]


def test_dcgm4_table_warn_row_is_warn_not_fail():
    """dcgmi 4.x prints a warned entity as "Fail" under a "Warn" summary (Diag.cpp HelperDisplayDiagResult)."""
    tests = {t["name"]: t for t in kdd.parse_dcgm_diag(DCGM4_WARN_TABLE)["tests"]}
    assert tests["targeted_power"]["status"] == "WARN" and tests["targeted_power"]["gpus"] == {"GPU0": "WARN"}
    assert tests["targeted_power"]["warnings"][0]["entity"] == "GPU0"
    check = khd.dcgm_check(3, {"present": True, "rc": 0, "stdout": DCGM4_WARN_TABLE}, True, True, health=HEALTH)
    assert check["status"] == "WARN"


def test_iterations_document_merges_runs():
    one = {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "memory", "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0,
                                        "status": "Pass"}], "test_summary": {"status": "Pass"}}]}]}}
    two = json.loads(json.dumps(one))
    two["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["status"] = "Fail"
    parsed = kdd.parse_dcgm_diag(json.dumps({"iterations": [one, two]}))
    assert parsed["format"] == "json" and [t["status"] for t in parsed["tests"]] == ["FAIL"]


@pytest.mark.parametrize("stdout", [
    None, b"\xff\xfe binary", 42, ["list"], "", "   ", "[" * 200_000, "{" * 200_000,
    '{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "memory", "resu',
    '{"DCGM Diagnostic": "not a mapping"}', '{"DCGM Diagnostic": {"test_categories": {"a": 1}}}',
    '{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": 5, "results": [{"status": ["Pass"]}]}]}]}}',
    "| memory | Pass - GPU: x |", "|||||", "+----- Stress -----+\n|  | GPU0: Pass |",
])
def test_hostile_dcgm_output_never_raises_never_passes(stdout):
    parsed = kdd.parse_dcgm_diag(stdout, stderr=b"\x00 stderr")
    assert parsed["format"] in ("json", "text", "none")
    assert isinstance(parsed["problems"], list) and len(parsed["problems"]) <= kdd.MAX_PROBLEMS
    check = khd.dcgm_check(3, {"present": True, "rc": 0, "stdout": stdout}, True, True, health=HEALTH)
    assert check["status"] in ("INCOMPLETE", "FAIL")


def test_huge_output_is_bounded():
    row = "| memory                    | Pass - All                                     |\n"
    huge = row * (kdd.MAX_INPUT_CHARS // len(row) + 10)
    parsed = kdd.parse_dcgm_diag(huge)
    assert any("cut there" in p for p in parsed["problems"])
    assert len(parsed["tests"]) == 1  # the same test repeated, merged
    many = "".join(f"| test{i} | Pass |\n" for i in range(kdd.MAX_TESTS + 50))
    parsed = kdd.parse_dcgm_diag(many)
    assert len(parsed["tests"]) == kdd.MAX_TESTS and any("the rest ignored" in p for p in parsed["problems"])


def test_dcgm_test_key():
    assert kdd.dcgm_test_key("Targeted Stress") == "targeted_stress"
    assert kdd.dcgm_test_key("GPU Memory") == "memory"
    assert kdd.dcgm_test_key("  Memory   Bandwidth ") == "memory_bandwidth"
    assert kdd.dcgm_test_key("nvbandwidth") == "nvbandwidth"
    assert kdd.dcgm_test_key("Pulse Test") == "pulse_test"
