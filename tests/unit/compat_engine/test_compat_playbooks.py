"""kiln filters and playbooks under real ansible-playbook runs (subprocess).

Needs ansible-playbook: the venv next to sys.executable, else PATH (make unit
puts .venv/bin first). Each run takes a couple of seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiln_playbook import ANSIBLE_PLAYBOOK, REPO, run_playbook as run
from test_compat_hostile import BOMB
from kiln_compat_engine.packages import PACKAGE_COMPONENTS

pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not found")


def test_filters_under_real_templating(tmp_path: Path) -> None:
    res = run("tests/playbooks/filters.yml", "-i", "tests/playbooks/inventory", tmp_path=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "failed=0" in out and "rescued=1" in out  # the error path ran and was caught


def test_plan_prints_and_writes_bill_of_materials(tmp_path: Path) -> None:
    dest = tmp_path / "out" / "plan.json"
    res = run("playbooks/plan.yml", "-i", "inventories/example", "-e", f"kiln_plan_output={dest}", tmp_path=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "== group gpu_nodes (4 hosts) ==" in out and "hosts: gpu[01-04] (4)" in out
    assert "cuda-toolkit-13-0=13.0.2-1" in out
    plan = json.loads(dest.read_text())
    gpu = plan["groups"]["gpu_nodes"]["stacks"][0]
    assert gpu["packages"]["driver"] == ["nvidia-open-580=580.173.02-1"]
    assert gpu["repos"]["cuda"]["url"].endswith("/ubuntu2404/x86_64/")
    assert "192.0.2" not in out  # no host was contacted


def _site(tmp_path: Path) -> str:
    site = REPO / "site.yml"
    if site.exists():
        return str(site)
    # site.yml not written yet: an equivalent stand-in, kept out of the repository
    stand_in = tmp_path / "site.yml"
    stand_in.write_text(
        "---\n"
        f"- name: Preflight\n  ansible.builtin.import_playbook: {REPO / 'playbooks/preflight.yml'}\n"
        "- name: Change hosts\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Marker\n      ansible.builtin.ping:\n"
    )
    return str(stand_in)


def test_site_stops_in_preflight_on_broken_stack(tmp_path: Path) -> None:
    res = run(_site(tmp_path), "-i", "inventories/example", "-e", "@inventories/example/broken-stack.yml", tmp_path=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "kiln preflight refused the stack" in out
    assert "[cuda-driver] ctl01,gpu[01-04] (5 hosts)" in out
    assert "Raise kiln_stack.driver to" in out and "[fabricmanager-driver]" in out
    # nothing ran against the managed hosts: only localhost appears in the recap
    recap = out.split("PLAY RECAP")[-1]
    assert "localhost" in recap and "gpu01" not in recap and "ctl01 " not in recap


def test_preflight_passes_example_inventory(tmp_path: Path) -> None:
    res = run("playbooks/preflight.yml", "-i", "inventories/example", tmp_path=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "5 hosts, 1 distinct stacks, 0 errors" in out


def test_detected_gpu_from_host_facts_joins_the_stack(tmp_path: Path) -> None:
    book = tmp_path / "gpu_facts.yml"
    book.write_text(
        "---\n"
        "- name: Pretend gpu02 reported its GPU (set_fact needs no connection)\n  hosts: gpu02\n  gather_facts: false\n"
        "  tasks:\n    - name: Cache a GPU fact\n      ansible.builtin.set_fact:\n"
        "        kiln_gpus: [{pci_id: '10de:20b2'}]\n        cacheable: true\n"
        f"- name: Preflight\n  ansible.builtin.import_playbook: {REPO / 'playbooks/preflight.yml'}\n"
    )
    res = run(str(book), "-i", "inventories/example", tmp_path=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "5 hosts, 2 distinct stacks, 1 errors" in out
    assert "[gpu-detected] gpu02 (1 host): Inventory says gpu H100-SXM5-80GB but the host reports A100-SXM4-80GB" in out


def test_hostile_inventory_is_refused_fast_with_one_line_per_problem(tmp_path: Path) -> None:
    """Issue 12's hostile inventories through the real preflight: clear, bounded, fast, nothing else runs."""
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text(
        "all:\n  children:\n    good: {hosts: {g01: {}, g02: {}}}\n    bomb: {hosts: {b01: {}}}\n"
        "    floaty: {hosts: {f01: {}, f02: {}}}\n    typo: {hosts: {t01: {}}}\n    huge: {hosts: {h01: {}}}\n")
    (inv / "group_vars" / "good.yml").write_text(
        'kiln_stack: {gpu: H100, os: ubuntu-24.04, driver: "580.95", cuda: "13.0", cudnn: "9.17.1"}\n')
    (inv / "group_vars" / "bomb.yml").write_text("---" + BOMB)
    (inv / "group_vars" / "floaty.yml").write_text(
        "kiln_stack: {cuda: 12.10, torch: 2.10, os: rocky-9garbage, driver_flavor: OPEN,"
        " ofed: {kind: doca, version: latest}}\n")
    (inv / "group_vars" / "typo.yml").write_text('kiln_stack: {drvier: "580.95.05", driver: "", dcgm: latest}\n')
    (inv / "group_vars" / "huge.yml").write_text('kiln_stack: {cuda: "1.' + "2" * 20_000_000 + '"}\n')
    res = run("playbooks/preflight.yml", "-i", str(inv), tmp_path=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out[-3000:]
    assert len(out) < 100_000  # the 20 MB value is not echoed
    assert "Traceback" not in out and "list index out of range" not in out
    flat = out.replace("\n        ", " ").replace("''", "'").replace("\\'", "'")  # undo YAML/repr line folding
    for line in ("[invalid-stack] b01 (1 host): kiln_stack is more than 2,000 values once YAML aliases are expanded",
                 "[invalid-stack] f[01-02] (2 hosts): kiln_stack.cuda is the YAML float 12.1",
                 "kiln_stack.torch is the YAML float 2.1",
                 "kiln_stack.os is 'rocky-9garbage': not an operating system kiln knows",
                 "kiln_stack.driver_flavor is 'OPEN'; allowed: open, proprietary. Did you mean 'open'?",
                 "kiln_stack.ofed.version is 'latest'",
                 "[invalid-stack] t01 (1 host): kiln_stack has an unknown key 'drvier'. Did you mean 'driver'?",
                 "kiln_stack.driver is empty", "kiln_stack.dcgm is 'latest'",
                 "[invalid-stack] h01 (1 host): kiln_stack is more than 65,536 characters of text"):
        assert line in flat, line
    assert "g[01-02]" not in out.split("Stop before any host")[-1]  # the good stack has no finding


def test_preflight_and_plan_run_under_a_limit_without_localhost(tmp_path: Path) -> None:
    """--limit gpu01 (no localhost in it) still checks gpu01's stack, without contacting gpu01."""
    dest = tmp_path / "plan.json"
    res = run("playbooks/preflight.yml", "playbooks/plan.yml", "-i", "inventories/example", "--limit", "gpu01",
              "-e", f"kiln_plan_output={dest}", tmp_path=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "kiln preflight: 1 hosts, 1 distinct stacks, 0 errors" in out
    assert "skipping: no hosts matched" not in out
    assert json.loads(dest.read_text())["groups"]["gpu_nodes"]["stacks"][0]["hosts"] == "gpu01"
    bad = run(_site(tmp_path), "-i", "inventories/example", "--limit", "gpu01", "-e", "@inventories/example/broken-stack.yml",
              tmp_path=tmp_path)
    out = bad.stdout + bad.stderr
    assert bad.returncode != 0, out
    assert "kiln preflight refused the stack" in out and "[cuda-driver] gpu01 (1 host)" in out
    assert "Prepare nodes" not in out  # nothing after preflight ran


def test_example_inventory_renders_every_component(tmp_path: Path) -> None:
    """inventories/example is a complete site: every group present, every stack component renders packages."""
    dest = tmp_path / "plan.json"
    res = run("playbooks/preflight.yml", "playbooks/plan.yml", "-i", "inventories/example", "-e", f"kiln_plan_output={dest}",
              tmp_path=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "5 hosts, 1 distinct stacks, 0 errors, 0 warnings" in out
    plan = json.loads(dest.read_text())
    assert set(plan["groups"]) == {"gpu_nodes", "slurm_compute", "slurm_controller"}
    stack = plan["groups"]["gpu_nodes"]["stacks"][0]
    assert stack["errors"] == []
    assert set(stack["packages"]) == set(PACKAGE_COMPONENTS)  # every role's packages, NVIDIA and distribution
    # what data/compat.yml records for Ubuntu 24.04 is pinned; the rest is the candidate, held (and said so)
    assert stack["packages"]["slurmd"] == ["slurmd=23.11.4-1.2ubuntu5", "slurm-client=23.11.4-1.2ubuntu5"]
    # ofed: DOCA 3.2.1's doca-ofed metapackage version is not recorded in data/compat.yml
    assert sorted(stack["candidates"]) == ["mpi4py", "node_exporter", "ofed", "pmix"]
    assert "(no recorded build: the repository's candidate, then held)" in out
    assert stack["stack"]["dcgm_exporter"] and stack["stack"]["slurm"]["slurmd"] == "23.11"


@pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")
def test_preflight_refuses_a_malformed_kiln_repos(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    gpu01: {ansible_connection: local}\n  vars:\n"
                   "    kiln_stack: {os: debian-12, driver: '580.95.05'}\n"
                   "    kiln_repos: {cdua: {url: 'https://m/'}, container_toolkit: {fingerprint: 'F796ECB0'}}\n")
    res = run("playbooks/preflight.yml", "-i", str(inv), tmp_path=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "kiln preflight refused kiln_repos" in out and "Did you mean 'cuda'" in out and "Traceback" not in out
