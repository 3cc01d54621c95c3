"""The burn-in under --limit: a plain ansible-playbook whose limit leaves out localhost stops in the first
play, before any phase (every controller phase would be skipped and the run would end "ok" with nothing
judged); site.yml under such a limit skips its burn-in; tools/kiln-burnin adds localhost (test_tools_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import kiln_playbook

pytestmark = pytest.mark.skipif(kiln_playbook.ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")

INVENTORY = "all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu01: {ansible_connection: local}\n"


def _run(tmp_path: Path, *args: str):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(INVENTORY)
    return kiln_playbook.run_playbook("-i", str(inventory), *args, tmp_path=tmp_path, timeout=120)


def test_a_limit_without_localhost_stops_before_any_phase(tmp_path: Path) -> None:
    proc = _run(tmp_path, "playbooks/burnin.yml", "--limit", "gpu01")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "leaves out localhost" in out and "tools/kiln-burnin" in out, out
    assert "TASK [burnin : " not in out, out


def test_a_limit_with_localhost_passes_the_guard(tmp_path: Path) -> None:
    """With localhost in the limit the guard passes and the run goes on to its first phase (which, with no
    burn-in settings for this inventory's single local host, is where this test stops looking)."""
    proc = _run(tmp_path, "playbooks/burnin.yml", "--limit", "gpu01,localhost", "--list-tasks")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Stop when a --limit leaves out localhost" in out and "burnin : Name the run" in out, out
