"""Role boundaries: no role, playbook or scenario reads another role's internal (``__<role>_``) variables.

A role publishes what others need as documented variables or facts (README "Published
variables"); its ``__<role>_`` names are free to change. Names are matched by the longest role
name they start with, so ``__slurm_compute_x`` belongs to slurm_compute, not to a role ``slurm``.
"""
from __future__ import annotations

import re
from pathlib import Path

from kiln_paths import REPO
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
INTERNAL = re.compile(r"(?<![A-Za-z0-9_])__([a-z][a-z0-9_]*)")
SUFFIXES = {".yml", ".yaml", ".j2"}


def owner(name: str) -> str | None:
    """The role whose internal variable ``__<name>`` is, or None (a task-local name like ``__item``)."""
    matches = [role for role in ROLES if name.startswith(role + "_")]
    return max(matches, key=len) if matches else None


def foreign_reads(path: Path, own: str | None) -> list[str]:
    text = path.read_text(encoding="utf-8")
    found = []
    for match in INTERNAL.finditer(text):
        role = owner(match.group(1))
        if role is not None and role != own:
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{line}: __{match.group(1)} belongs to role {role}")
    return found


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in SUFFIXES)


def test_owner_takes_the_longest_role_name() -> None:
    assert owner("slurm_compute_build") == "slurm_compute"
    assert owner("nvidia_driver_stack") == "nvidia_driver"
    assert owner("hv") is None and owner("cuda") is None  # a task-local name, not cuda's


def test_no_role_reads_another_roles_internal_variables() -> None:
    problems = [p for role in ROLES for path in files(REPO / "roles" / role) for p in foreign_reads(path, role)]
    assert problems == [], "publish it (README 'Published variables') instead:\n" + "\n".join(problems)


def test_no_playbook_or_scenario_reads_a_roles_internal_variables() -> None:
    roots = [REPO / "playbooks", REPO / "molecule", REPO / "tests" / "molecule", REPO / "inventories"]
    paths = [REPO / "site.yml"] + [p for root in roots for p in files(root)]
    problems = [p for path in paths for p in foreign_reads(path, None)]
    assert problems == [], "\n".join(problems)


def test_the_check_finds_a_foreign_read(tmp_path: Path) -> None:
    probe = tmp_path / "service.yml"
    probe.write_text("when:\n  - __munge_key_changed | bool\n  - __slurm_compute_started is changed\n  - __hv\n")
    assert foreign_reads(probe, "slurm_compute") == [f"{probe}:2: __munge_key_changed belongs to role munge"]
    assert len(foreign_reads(probe, None)) == 2
