"""Preflight against the local test bed: a bad stack stops site.yml and no host changes.

Runs only while the `make demo` containers of inventories/testbed are up
(kiln-demo-ctl, kiln-demo-gpu1, kiln-demo-gpu2); skipped otherwise. Package
state is read with `podman exec` (dpkg + apt holds) before and after, so the
evidence does not depend on Ansible itself. The root ansible.cfg is a real site's: the test bed's
inventory and its podman connection (tests/harness/connection_plugins) are named here.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from test_compat_playbooks import ANSIBLE_PLAYBOOK, REPO, run

INVENTORY = REPO / "inventories" / "testbed" / "hosts.yml"
CONNECTION = {"ANSIBLE_CONNECTION_PLUGINS": str(REPO / "tests" / "harness" / "connection_plugins")}


def _testbed_hosts() -> list[str]:
    if not INVENTORY.exists() or not shutil.which("podman"):
        return []
    inv = yaml.safe_load(INVENTORY.read_text())
    wanted = []
    for group in (inv.get("all", {}).get("children") or {}).values():
        wanted += list((group or {}).get("hosts") or {})
    try:
        ps = subprocess.run(["podman", "ps", "--format", "{{.Names}}"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    running = set(ps.stdout.split())
    return wanted if wanted and set(wanted) <= running else []


HOSTS = _testbed_hosts()
pytestmark = pytest.mark.skipif(not HOSTS or ANSIBLE_PLAYBOOK is None, reason="test bed (make demo) is not running")


def package_state(host: str) -> str:
    script = "dpkg-query -W -f '${Package}=${Version} ${Status}\\n' | sort; echo ---; apt-mark showhold | sort"
    res = subprocess.run(["podman", "exec", host, "sh", "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return res.stdout


def test_bad_stack_stops_site_before_any_testbed_host_changes(tmp_path: Path) -> None:
    before = {h: package_state(h) for h in HOSTS}
    res = run("site.yml", "-i", str(INVENTORY), "-e", "@inventories/example/broken-stack.yml", tmp_path=tmp_path,
              env=CONNECTION)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "kiln preflight refused the stack" in out and "[cuda-driver]" in out
    recap = out.split("PLAY RECAP")[-1]
    assert not [h for h in HOSTS if h in recap], recap
    assert {h: package_state(h) for h in HOSTS} == before
