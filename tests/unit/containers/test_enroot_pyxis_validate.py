"""Roles enroot and pyxis refuse bad inputs in validate, before any change, naming the variable and the fix.

Runs the real roles with ansible-playbook on localhost (local connection, --check, only the
`always`-tagged steps: OS variables and validate), one inventory host per case.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from kiln_playbook import ANSIBLE_PLAYBOOK, run_playbook

pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not found")

SHA = "a" * 64
ENROOT_FILES = ["enroot_3.5.0-1_amd64.deb", "enroot+caps_3.5.0-1_amd64.deb"]
GOOD_ENROOT = {"kiln_stack": {"enroot": "3.5.0"}, "enroot_artifacts_sha256": {f: SHA for f in ENROOT_FILES}}
GOOD_PYXIS = {"kiln_stack": {"pyxis": "0.20.0"}, "pyxis_source_sha256": SHA}
CASES: dict[str, tuple[str, dict]] = {
    "enroot_ok": ("enroot", GOOD_ENROOT),
    "enroot_no_sha": ("enroot", {"kiln_stack": {"enroot": "3.5.0"}}),
    "enroot_bad_sha": ("enroot", {**GOOD_ENROOT, "enroot_artifacts_sha256": {ENROOT_FILES[0]: SHA, ENROOT_FILES[1]: "abc"}}),
    "enroot_no_caps": ("enroot", {**GOOD_ENROOT, "enroot_caps": False,
                                  "enroot_artifacts_sha256": {ENROOT_FILES[0]: SHA}}),
    "enroot_bad_version": ("enroot", {**GOOD_ENROOT, "kiln_stack": {"enroot": "latest"}}),
    "enroot_bad_url": ("enroot", {**GOOD_ENROOT, "enroot_artifacts_url": "ftp://mirror/enroot"}),
    "enroot_bad_env": ("enroot", {**GOOD_ENROOT, "enroot_nccl_environment": {"NCCL IB": "x; rm -rf /"}}),
    "enroot_bad_base": ("enroot", {**GOOD_ENROOT, "enroot_runtime_base": "/run/enroot $(id)", "enroot_local_base": "var/lib"}),
    "pyxis_no_sha": ("pyxis", {"kiln_stack": {"pyxis": "0.20.0"}}),
    "pyxis_bad_options": ("pyxis", {**GOOD_PYXIS, "pyxis_options": {"runtime_path": "run/pyxis", "container_scope": "node",
                                                                    "sbatch_support": "yes", "bogus": 1}}),
    "pyxis_no_slurm": ("pyxis", GOOD_PYXIS),
}

PLAYBOOK = """\
---
- name: Validate role inputs
  hosts: all
  gather_facts: true
  gather_subset: [min]
  tasks:
    - name: Run the role's always-tagged steps
      ansible.builtin.include_role:
        name: "{{ case_role }}"
      # the include runs; inside, only the role's own always-tagged steps (OS variables, validate) do
      tags: [always]
"""


def _run(tmp: Path, hosts: dict[str, dict], *extra: str):
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                         "hosts": hosts}}
    (tmp / "inventory.json").write_text(json.dumps(inventory))
    (tmp / "play.yml").write_text(PLAYBOOK)
    return run_playbook("-i", str(tmp / "inventory.json"), str(tmp / "play.yml"), "--check", "--tags", "kiln_none",
                        *extra, tmp_path=tmp)


def _failures(out: str) -> dict[str, str]:
    """host -> text of its fatal block (default callback, yaml result format)."""
    found: dict[str, str] = {}
    for match in re.finditer(r"^fatal: \[([^\]]+)\]: FAILED! => ?\n((?:    .*\n?)*)", out, re.M):
        found[match.group(1)] = " ".join(match.group(2).split()).replace("''", "'")  # YAML-quoted
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("enroot_pyxis_validate")
    proc = _run(tmp, {name: {"case_role": role, **vars_} for name, (role, vars_) in CASES.items()})
    return proc, _failures(proc.stdout)


def test_valid_enroot_inputs_pass_validate_and_the_real_kernel_check(run):
    proc, failures = run
    assert "enroot_ok" not in failures and "enroot_no_caps" not in failures, proc.stdout[-3000:] + proc.stderr
    assert re.search(r"enroot_ok\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", proc.stdout)


def test_missing_checksums_are_refused_naming_the_variable_and_each_file(run):
    _, failures = run
    msg = failures["enroot_no_sha"]
    assert "enroot_artifacts_sha256" in msg and all(f in msg for f in ENROOT_FILES), msg
    bad = failures["enroot_bad_sha"]
    assert ENROOT_FILES[1] in bad and "no sha256 (64 hex digits) for enroot+caps_3.5.0-1_amd64.deb:" in bad, bad
    assert "for enroot_3.5.0-1_amd64.deb" not in bad


@pytest.mark.parametrize("case, words", [
    ("enroot_bad_version", ["enroot_version is 'latest'", "kiln_stack.enroot"]),
    ("enroot_bad_url", ["enroot_artifacts_url is 'ftp://mirror/enroot'", "ending in /"]),
    ("enroot_bad_env", ["enroot_nccl_environment", "NCCL IB"]),
    ("enroot_bad_base", ["enroot_runtime_base / enroot_local_base must be absolute paths", "/run/enroot $(id), var/lib"]),
    ("pyxis_no_sha", ["pyxis_source_sha256 is ''", "64 hex digits", "kiln builds no unverified source"]),
    ("pyxis_no_slurm", ["slurm-client is not installed", "playbooks/slurm.yml"]),
])
def test_bad_inputs_are_refused_with_the_fix(run, case, words):
    if case == "pyxis_no_slurm" and shutil.which("slurmd"):
        pytest.skip("Slurm is installed on this machine")
    _, failures = run
    assert case in failures, sorted(failures)
    assert all(w in failures[case] for w in words), failures[case]


def test_unknown_and_mistyped_pyxis_options_are_each_named(run):
    _, failures = run
    msg = failures["pyxis_bad_options"]
    head = msg.split(" -- known arguments:")[0]
    for name in ("bogus", "runtime_path", "container_scope", "sbatch_support"):
        assert name in head, msg


def test_kernel_without_user_namespaces_or_overlay_is_refused(tmp_path):
    (tmp_path / "userns").write_text("0\n")
    (tmp_path / "filesystems").write_text("nodev\tsysfs\nnodev\ttmpfs\n\text4\n")
    proc = _run(tmp_path, {"enroot_kernel": {"case_role": "enroot", **GOOD_ENROOT}}, "-e",
                json.dumps({"__enroot_userns_file": str(tmp_path / "userns"),
                            "__enroot_filesystems_file": str(tmp_path / "filesystems")}))
    msg = _failures(proc.stdout).get("enroot_kernel", "")
    assert "sysctl user.max_user_namespaces = 0" in msg and "sysctl -w user.max_user_namespaces" in msg, proc.stdout[-2000:]
    assert "overlay is not a registered file system" in msg and "modprobe overlay" in msg
