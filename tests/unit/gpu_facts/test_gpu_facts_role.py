"""The real gpu_facts role under ansible-playbook (localhost, connection local).

Regression: a GPU the compatibility data does not know (10de:ffff) used to fail the
play (the role mapped every detected PCI id through the raising ``kiln_gpu`` filter, now ``kiln_gpu_spec``).
Now the module is given ``pci_models``, ``kiln_gpu_model`` is built from known ids
only and ``kiln_gpu_unknown_pci_ids`` lists the rest.

One ansible-playbook run covers every case: each inventory host is localhost with
its own emulated sysfs tree (tests/fixtures/gpu-emulator/make-sysfs.py), nvidia-smi
not queried. Takes a few seconds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kiln_loader import load_source
from kiln_playbook import ANSIBLE_PLAYBOOK, REPO, run_playbook

make_sysfs = load_source("kiln_make_sysfs", REPO / "tests" / "fixtures" / "gpu-emulator" / "make-sysfs.py")

H100_SXM = "10de:2330"
UNKNOWN = "10de:ffff"
# host -> GPUs on its PCI bus, in bus order
HOSTS: dict[str, list[str]] = {
    "mixed": [H100_SXM, UNKNOWN],
    "unknown_only": [UNKNOWN],
    "known_only": [H100_SXM, H100_SXM],
    "no_gpu": [],
}


pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not found")

PLAYBOOK = """\
---
- name: Run the gpu_facts role on emulated sysfs trees
  hosts: all
  gather_facts: false
  roles:
    - role: gpu_facts
  tasks:
    - name: Write what the role published
      ansible.builtin.copy:
        content: "{{ {'kiln_gpu_model': kiln_gpu_model, 'kiln_gpu_present': kiln_gpu_present,
                     'kiln_gpu_unknown_pci_ids': kiln_gpu_unknown_pci_ids,
                     'unknown_pci_ids': ansible_facts['kiln_gpu']['unknown_pci_ids'],
                     'models': ansible_facts['kiln_gpu']['models']} | to_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        mode: "0644"
"""


def _sysfs(root: Path, pci_ids: list[str]) -> str:
    """One emulated GPU (no HCAs, no NVSwitches) per PCI id, each on its own bus."""
    root.mkdir(parents=True)
    for index, pci_id in enumerate(pci_ids):
        make_sysfs.build({"gpu_count": 1, "bus_ids": [f"0000:{0x18 + 0x10 * index:02x}:00.0"],
                          "gpu": {"pci_device_id": pci_id}}, str(root), hcas=False)
    return str(root)


@pytest.fixture(scope="module")
def role_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    tmp = tmp_path_factory.mktemp("gpu_facts_role")
    out_dir = tmp / "out"
    out_dir.mkdir()
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                  "gpu_facts_query_smi": False, "out_dir": str(out_dir)},
                         "hosts": {host: {"gpu_facts_sysfs_root": _sysfs(tmp / "sys" / host, ids)}
                                   for host, ids in HOSTS.items()}}}
    (tmp / "inventory.json").write_text(json.dumps(inventory))
    (tmp / "play.yml").write_text(PLAYBOOK)
    proc = run_playbook("-i", str(tmp / "inventory.json"), str(tmp / "play.yml"), tmp_path=tmp)
    return proc, out_dir


def _published(role_run, host: str) -> dict:
    proc, out_dir = role_run
    path = out_dir / f"{host}.json"
    assert path.exists(), proc.stdout + proc.stderr
    return json.loads(path.read_text())


def test_play_succeeds_on_every_host_without_traceback(role_run):
    proc, _out_dir = role_run
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out and "kiln_gpu_spec: unknown GPU" not in out
    for host in HOSTS:
        assert re.search(rf"^{host}\s*:.*\bfailed=0\b", out, re.MULTILINE), out


def test_known_and_unknown_gpu_keeps_the_known_model(role_run):
    facts = _published(role_run, "mixed")
    assert facts["kiln_gpu_model"]["pci_id"] == H100_SXM
    assert facts["kiln_gpu_model"]["name"] == "H100-SXM5-80GB" and facts["kiln_gpu_model"]["nvswitch"] is True
    assert facts["kiln_gpu_unknown_pci_ids"] == [UNKNOWN] == facts["unknown_pci_ids"]
    assert facts["kiln_gpu_present"] is True
    assert facts["models"] == ["H100-SXM5-80GB"]  # the module mapped the known id through pci_models


def test_only_unknown_gpu_gives_empty_model(role_run):
    facts = _published(role_run, "unknown_only")
    assert facts["kiln_gpu_model"] == {}
    assert facts["kiln_gpu_unknown_pci_ids"] == [UNKNOWN]
    assert facts["kiln_gpu_present"] is True


def test_known_gpus_and_no_gpu_are_unchanged(role_run):
    known = _published(role_run, "known_only")
    assert known["kiln_gpu_model"]["name"] == "H100-SXM5-80GB" and known["kiln_gpu_unknown_pci_ids"] == []
    empty = _published(role_run, "no_gpu")
    assert empty["kiln_gpu_model"] == {} and empty["kiln_gpu_unknown_pci_ids"] == []
    assert empty["kiln_gpu_present"] is False


def test_report_names_the_unknown_gpu_and_the_fix(role_run):
    out = role_run[0].stdout
    # default callback, yaml result format: one "ok: [host] =>" block per host
    blocks = dict(re.findall(r"^ok: \[(\w+)\] => ?\n((?:[ \t].*\n?)+)", out, re.MULTILINE))
    for host in ("mixed", "unknown_only"):
        text = " ".join(blocks[host].split())
        assert f"UNKNOWN GPU, PCI id {UNKNOWN}" in text, out
        assert "compat data needs an entry" in text and "data/compat.yml" in text
        assert "preflight refuses this GPU (rule gpu-detected-unknown)" in text and "kiln_stack_allow" in text
    assert "1 x H100-SXM5-80GB (hopper, NVSwitch board: True)" in " ".join(blocks["mixed"].split())
    assert "2 x H100-SXM5-80GB (hopper, NVSwitch board: True)" in blocks["known_only"]
    assert "UNKNOWN" not in blocks["known_only"] and "no NVIDIA GPU on the PCI bus" in blocks["no_gpu"]
