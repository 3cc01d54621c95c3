"""Shared by the GPU-health tests (kiln_health, kiln_health_dcgm, kiln_health_memory, kiln_dcgm_diag):
the modules under test, fixture paths, the rules file and small helpers."""
from __future__ import annotations

import sys

from kiln_loader import load_source

from kiln_paths import REPO
import kiln_data
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.health import dcgm_diag as kdd  # noqa: E402
from kiln.health import rules as kh  # noqa: E402
from kiln.health import dcgm as khd  # noqa: E402
from kiln.health import memory as khm  # noqa: E402
from kiln.facts import hardware as khw  # noqa: E402

KilnConfigError = kh.kiln_verdict.KilnConfigError
SMI_FIXTURES = REPO / "tests" / "fixtures" / "nvidia-smi"
GPU_EMU = REPO / "tests" / "fixtures" / "gpu-emulator"
EMU = REPO / "tests" / "fixtures" / "emulators"
PY = sys.executable
STATUSES = {"PASS", "WARN", "FAIL", "INCOMPLETE", "SKIP"}
HEALTH = kiln_data.health()


_load = load_source


smi_emulator = _load("kiln_nvidia_smi_emulator", GPU_EMU / "nvidia-smi")


def by_id(checks):
    return {c["id"]: c for c in checks}


def facts_from_xml(text: str) -> dict:
    return khw.summarize([], smi=khw.parse_nvidia_smi_xml(text), driver_loaded=True)
