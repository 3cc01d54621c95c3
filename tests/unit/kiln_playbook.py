"""Shared by the unit tests that run real ansible-playbook: find it, and run it isolated under a tmp dir.

ansible-playbook is the venv's (next to sys.executable), else the one on PATH
(make unit puts .venv/bin first); tests skip when neither exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _find() -> str | None:
    beside = Path(sys.executable).parent / "ansible-playbook"
    if beside.exists():
        return str(beside)
    return shutil.which("ansible-playbook")


ANSIBLE_PLAYBOOK = _find()


def run_playbook(*args: str, tmp_path: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """ansible-playbook *args* from the repository root with the project's ansible.cfg and a private
    ANSIBLE_HOME, fact cache and local temp under *tmp_path*; never raises on a non-zero exit."""
    if ANSIBLE_PLAYBOOK is None:
        raise RuntimeError("ansible-playbook not found (skip with kiln_playbook.ANSIBLE_PLAYBOOK is None)")
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "local-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        PATH=f"{Path(ANSIBLE_PLAYBOOK).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    return subprocess.run([ANSIBLE_PLAYBOOK, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
