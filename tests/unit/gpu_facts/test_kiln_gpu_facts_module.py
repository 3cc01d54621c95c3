"""Tests for library/kiln_gpu_facts.py: run_command patched, fake sysfs under tmp_path."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from unittest import mock

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from kiln_loader import ship_module_utils
from kiln_paths import REPO
EMULATOR_DIR = REPO / "tests" / "fixtures" / "gpu-emulator"
H100_PROFILE = EMULATOR_DIR / "profiles" / "h100-sxm-8.json"
L40S_PROFILE = EMULATOR_DIR / "profiles" / "l40s-2.json"
PCI_MODELS = {"10de:2330": {"model": "H100-SXM5-80GB", "architecture": "hopper", "nvswitch": True},
              "10de:26b9": {"model": "L40S", "architecture": "ada", "nvswitch": False}}


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    loader = SourceFileLoader(name, str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    sys.modules[name] = module
    loader.exec_module(module)
    return module


# The module imports `ansible.module_utils.kiln.facts.hardware`: serve module_utils/kiln under that name first.
ship_module_utils()
facts_module = _load("kiln_gpu_facts", REPO / "library" / "kiln_gpu_facts.py")
emulator = _load("kiln_nvidia_smi_emulator", EMULATOR_DIR / "nvidia-smi")
make_sysfs = _load("kiln_make_sysfs", EMULATOR_DIR / "make-sysfs.py")


class AnsibleExitJson(Exception):
    pass


class AnsibleFailJson(Exception):
    pass


def _exit_json(self, **kwargs):
    raise AnsibleExitJson(kwargs)


def _fail_json(self, **kwargs):
    kwargs["failed"] = True
    raise AnsibleFailJson(kwargs)


@pytest.fixture(autouse=True)
def _patch_exits(monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)


@pytest.fixture
def fake_smi(tmp_path):
    """An executable file so the module's existence check passes; run_command is patched anyway."""
    path = tmp_path / "bin" / "nvidia-smi"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


def _emulated_run_command(profile: Path, **env: str):
    """A run_command replacement that answers with the emulator, in-process."""
    def run_command(self, args, **_kwargs):
        with mock.patch.dict(os.environ, {"KILN_GPU_PROFILE": str(profile), **env}):
            try:
                return emulator.run(list(args[1:]))
            except emulator.UsageError as exc:
                return 2, "", str(exc)
    return run_command


def _run(args: dict, run_command=None, check_mode: bool = False) -> dict:
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    runner = run_command or (lambda self, a, **k: pytest.fail(f"unexpected run_command {a}"))
    with patch_module_args(args), mock.patch.object(basic.AnsibleModule, "run_command", runner):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as caught:
            facts_module.main()
    return caught.value.args[0]


def _sysfs(tmp_path: Path, profile: Path) -> str:
    root = tmp_path / "sys"
    make_sysfs.build(json.loads(profile.read_text()), str(root))
    return str(root)


def test_empty_host_returns_empty_facts(tmp_path):
    result = _run({"sysfs_root": str(tmp_path / "empty"), "nvidia_smi": str(tmp_path / "missing")})
    facts = result["ansible_facts"]["kiln_gpu"]
    assert result["changed"] is False and "failed" not in result
    assert facts["gpus"] == [] and facts["hcas"] == [] and facts["models"] == []
    assert facts["source"] == "none" and facts["driver_loaded"] is False
    assert facts["smi_error"] == "nvidia-smi not found"


@pytest.mark.parametrize("check_mode", [False, True])
def test_h100_node_with_driver(tmp_path, fake_smi, check_mode):
    result = _run({"sysfs_root": _sysfs(tmp_path, H100_PROFILE), "nvidia_smi": fake_smi, "pci_models": PCI_MODELS},
                  run_command=_emulated_run_command(H100_PROFILE), check_mode=check_mode)
    facts = result["ansible_facts"]["kiln_gpu"]
    assert result["changed"] is False
    assert facts["source"] == "nvidia-smi" and facts["driver_loaded"] is True
    assert facts["driver_version"] == "580.95.05" and facts["cuda_version"] == "13.0"
    assert facts["gpu_count"] == facts["pci_gpu_count"] == facts["smi_gpu_count"] == 8
    assert facts["nvswitch_count"] == 4 and facts["nvswitch_board"] is True
    assert facts["models"] == ["H100-SXM5-80GB"] and facts["architecture"] == "hopper"
    assert all(g["nvlink"] == {"links": 18, "active": 18, "inactive": 0} for g in facts["gpus"])
    assert facts["hca_count"] == 8 and facts["smi_error"] is None


def test_l40s_node_pcie_only(tmp_path, fake_smi):
    result = _run({"sysfs_root": _sysfs(tmp_path, L40S_PROFILE), "nvidia_smi": fake_smi, "pci_models": PCI_MODELS},
                  run_command=_emulated_run_command(L40S_PROFILE))
    facts = result["ansible_facts"]["kiln_gpu"]
    assert facts["gpu_count"] == facts["pci_gpu_count"] == 2
    assert facts["nvswitch_board"] is False and facts["nvswitch_count"] == 0
    assert facts["models"] == ["L40S"] and facts["architecture"] == "ada"
    assert all(g["nvlink"] == {"links": 0, "active": 0, "inactive": 0} for g in facts["gpus"])
    assert facts["hcas"][0]["ports"][0]["link_layer"] == "Ethernet"


def test_driver_not_loaded_is_not_a_failure(tmp_path, fake_smi):
    result = _run({"sysfs_root": _sysfs(tmp_path, H100_PROFILE), "nvidia_smi": fake_smi, "pci_models": PCI_MODELS},
                  run_command=_emulated_run_command(H100_PROFILE, KILN_GPU_DRIVER_LOADED="0"))
    facts = result["ansible_facts"]["kiln_gpu"]
    assert "failed" not in result
    assert facts["driver_loaded"] is False and facts["driver_version"] is None
    assert facts["source"] == "sysfs" and facts["gpu_count"] == facts["pci_gpu_count"] == 8
    assert facts["smi_gpu_count"] is None and facts["nvswitch_board"] is True
    assert "driver not loaded" in facts["smi_error"]


def test_no_devices_found(tmp_path, fake_smi):
    result = _run({"sysfs_root": str(tmp_path), "nvidia_smi": fake_smi},
                  run_command=lambda self, a, **k: (6, "No devices were found\n", ""))
    facts = result["ansible_facts"]["kiln_gpu"]
    assert facts["driver_loaded"] is True and facts["smi_gpu_count"] == 0 and facts["gpus"] == []


@pytest.mark.parametrize("rc,out,msg", [
    (0, "<nvidia_smi_log><gpu>", "cannot parse nvidia-smi"),
    (15, "", "failed with rc=15"),
])
def test_bad_nvidia_smi_fails_cleanly(tmp_path, fake_smi, rc, out, msg):
    result = _run({"sysfs_root": str(tmp_path), "nvidia_smi": fake_smi},
                  run_command=lambda self, a, **k: (rc, out, "GPU is lost" if rc else ""))
    assert result["failed"] is True and msg in result["msg"]


def test_query_smi_false_never_runs_nvidia_smi(tmp_path, fake_smi):
    result = _run({"sysfs_root": _sysfs(tmp_path, L40S_PROFILE), "nvidia_smi": fake_smi, "query_smi": False})
    facts = result["ansible_facts"]["kiln_gpu"]
    assert facts["source"] == "sysfs" and facts["gpu_count"] == 2 and facts["unknown_pci_ids"] == ["10de:26b9"]


def test_documentation_is_valid_yaml():
    import yaml
    for block in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
        assert yaml.safe_load(getattr(facts_module, block))
    doc = yaml.safe_load(facts_module.DOCUMENTATION)
    assert set(doc["options"]) == {"sysfs_root", "nvidia_smi", "pci_models", "query_smi"}
    assert not hasattr(facts_module, "ANSIBLE_METADATA")


@pytest.mark.skipif(shutil.which("ansible") is None and not (REPO / ".venv" / "bin" / "ansible").exists(),
                    reason="ansible is not installed (neither on PATH nor in .venv)")
def test_module_runs_under_real_ansible(tmp_path):
    ansible = shutil.which("ansible") or str(REPO / ".venv" / "bin" / "ansible")
    root = _sysfs(tmp_path, H100_PROFILE)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), KILN_GPU_PROFILE=str(H100_PROFILE),
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_FACT_CACHING="memory", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    args = json.dumps({"sysfs_root": root, "nvidia_smi": str(EMULATOR_DIR / "nvidia-smi"), "pci_models": PCI_MODELS})
    proc = subprocess.run(
        [ansible, "localhost", "-i", "localhost,", "-c", "local", "-m", "kiln_gpu_facts", "-a", args,
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # ansible.cfg enables a timing callback that prints a line before the JSON document.
    document, _end = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{\n"):])
    result = document["plays"][0]["tasks"][0]["hosts"]["localhost"]
    facts = result["ansible_facts"]["kiln_gpu"]
    assert result["changed"] is False
    assert facts["source"] == "nvidia-smi" and facts["gpu_count"] == facts["pci_gpu_count"] == 8
    assert facts["nvswitch_board"] is True and facts["driver_version"] == "580.95.05"
