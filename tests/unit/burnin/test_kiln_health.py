"""module_utils/kiln/health/rules.py: the health rules file (data/burnin_health.yml) and the import style
of the health modules (kiln_health, kiln_health_memory, kiln_health_dcgm, kiln_dcgm_diag)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import kiln_data
from kiln_loader import load_source

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_health_cases import (  # noqa: F401 - the shared cases; each file uses some
    REPO, kdd, kh, khd, khm, khw, KilnConfigError, SMI_FIXTURES, GPU_EMU, EMU, PY, STATUSES, HEALTH, smi_emulator, by_id, facts_from_xml,
)



# --------------------------------------------------------------------------- rules file
def test_default_rules_file_loads_with_sources_and_confidences():
    data = kiln_data.health()
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
    assert by_id(khm.memory_checks(facts, {"memory": HEALTH["memory"]}, True))[kh.CHECK_ECC]["status"] == "PASS"
    assert by_id(khm.memory_checks(facts, HEALTH["memory"], True))[kh.CHECK_ECC]["status"] == "PASS"
    for junk in (None, {}, {"memory": {}}, "rules"):
        with pytest.raises(KilnConfigError):
            khm.memory_checks(facts, junk, True)



# --------------------------------------------------------------------------- import styles
def test_importable_as_ansible_module_utils(tmp_path):
    """The Ansible import lines work (a stand-in ansible.module_utils package holds copies)."""
    pkg = tmp_path / "ansible" / "module_utils"
    pkg.mkdir(parents=True)
    (tmp_path / "ansible" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    shutil.copytree(REPO / "module_utils" / "kiln", pkg / "kiln")
    # load_health's default path is <module dir>/../data/burnin_health.yml
    (tmp_path / "ansible" / "data").mkdir()
    (tmp_path / "ansible" / "data" / "burnin_health.yml").write_text(
        (REPO / "data" / "burnin_health.yml").read_text())
    code = ("from ansible.module_utils.kiln.health import rules as kh, memory as khm, dcgm as khd; "
            "import sys; "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'kiln'], sorted(sys.modules); "
            "print(kh.kiln_verdict.__name__, khm.kiln_hwfacts.__name__, khd.parse_dcgm_diag.__module__, "
            "kh.load_health(kh.default_health_path())['schema'])")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = subprocess.run([PY, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ansible.module_utils.kiln.verdict", "ansible.module_utils.kiln.facts.hardware",
                                "ansible.module_utils.kiln.health.dcgm_diag", kh.SCHEMA]
