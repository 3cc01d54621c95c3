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
from typing import Any, Iterator

import yaml

from kiln_paths import REPO


def _find() -> str | None:
    beside = Path(sys.executable).parent / "ansible-playbook"
    if beside.exists():
        return str(beside)
    return shutil.which("ansible-playbook")


ANSIBLE_PLAYBOOK = _find()


def names_an_inventory(args: tuple[str, ...] | list[str]) -> bool:
    """Whether an ansible-playbook command line names its inventory (-i X, -iX, --inventory[=]X)."""
    return any(a in ("-i", "--inventory", "--inventory-file") or a.startswith(("--inventory=", "--inventory-file="))
               or (a.startswith("-i") and not a.startswith("--")) for a in args)


def run_playbook(*args: str, tmp_path: Path, timeout: int = 300,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """ansible-playbook *args* from the repository root with the project's ansible.cfg and a private
    ANSIBLE_HOME, fact cache and local temp under *tmp_path*; never raises on a non-zero exit.

    *args* must name the inventory (`-i localhost,` for a play on the controller): the root
    ansible.cfg is a real site's and has none, and whatever this machine's Ansible would fall back
    to (/etc/ansible/hosts) is no test's business. *env* adds to the environment (e.g. the test
    bed's ANSIBLE_CONNECTION_PLUGINS)."""
    if ANSIBLE_PLAYBOOK is None:
        raise RuntimeError("ansible-playbook not found (skip with kiln_playbook.ANSIBLE_PLAYBOOK is None)")
    if not names_an_inventory(args):
        raise ValueError(f"name the inventory (-i localhost, or a file): the root ansible.cfg has none: {args}")
    full = {k: v for k, v in os.environ.items() if k != "ANSIBLE_INVENTORY"}
    full.update(env or {})
    full.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "local-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        PATH=f"{Path(ANSIBLE_PLAYBOOK).parent}{os.pathsep}{full.get('PATH', '')}",
    )
    return subprocess.run([ANSIBLE_PLAYBOOK, *args], cwd=REPO, env=full, capture_output=True, text=True,
                          timeout=timeout, check=False)


def mappings(node: Any) -> Iterator[dict[Any, Any]]:
    """Every mapping in a parsed YAML tree, at any depth (plays, tasks, blocks, module arguments), depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from mappings(value)
    elif isinstance(node, list):
        for item in node:
            yield from mappings(item)


#: Roles whose entry points are a playbook's phases (playbooks/burnin.yml, playbooks/upgrade.yml).
PHASE_ROLES = ("burnin", "upgrade")


def expand_phases(node: Any, roles: Path = REPO / "roles") -> Any:
    """A parsed playbook with each `import_role: {name: R, tasks_from: X}` of a role whose tasks are phases
    (PHASE_ROLES) replaced by a block of that file's tasks: what each play runs, for tests that read
    a playbook's tasks (playbooks/burnin.yml and upgrade.yml are lists of phases in roles/<role>/tasks/)."""
    if isinstance(node, list):
        return [expand_phases(v, roles) for v in node]
    if not isinstance(node, dict):
        return node
    args = node.get("ansible.builtin.import_role") or {}
    if isinstance(args, dict) and args.get("tasks_from") and args.get("name") in PHASE_ROLES:
        path = roles / args["name"] / "tasks" / f"{args['tasks_from']}.yml"
        return {"name": node.get("name"), "block": expand_phases(yaml.safe_load(path.read_text()), roles)}
    return {k: expand_phases(v, roles) for k, v in node.items()}


def load_playbook(name: str) -> Any:
    """playbooks/<name>, parsed, with its phases expanded (expand_phases)."""
    return expand_phases(yaml.safe_load((REPO / "playbooks" / name).read_text(encoding="utf-8")))
