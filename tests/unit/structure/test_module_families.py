"""module_utils families never import upward.

``module_utils/kiln/`` holds one package per family; from the bottom up: the nccl-tests parsers, the
hardware-facts readers and the pinned-install path (rank 1); the GPU-health rules, the fabric counter
rules and the Slurm state rule (rank 2); the burn-in (3); the rolling upgrade (4). A family may import
its own members and the families of a lower rank, never a sibling or one above: a parser that imports
a judge, or the Slurm rule that imports the burn-in, is the tangle this rule keeps out (the upgrade
imports none of the burn-in: it runs it as a tool and reads its summary).

A module directly in ``kiln/`` is a shared base (errors, clock, data files, the verdict vocabulary): any
family may import it, and it may import only other bases and the families listed for it in
BASE_MAY_IMPORT. Each package's ``__init__`` docstring lists its modules in dependency order.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kiln_paths import REPO

KILN = REPO / "module_utils" / "kiln"

#: family -> rank; a family may import families of a lower rank (and its own members).
FAMILIES: dict[str, int] = {
    "nccl": 1, "facts": 1, "packages": 1, "mirror": 1,
    "health": 2, "fabric": 2, "slurm": 2,
    "burnin": 3,
    "upgrade": 4, "nodehealth": 4,
}
#: The shared bases and what each may import beyond other bases (verdict holds the verdict vocabulary
#: and reads nccl-tests results).
BASE_MAY_IMPORT = {"kiln.verdict": {"nccl"}}


def dotted(path: Path) -> str:
    return ".".join(path.relative_to(KILN.parent).with_suffix("").parts).removesuffix(".__init__")


def family(name: str) -> str | None:
    """The family of module *name* (``kiln.burnin.checks`` -> burnin); None for a base (``kiln.verdict``)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in FAMILIES) else None


def kiln_imports(path: Path) -> set[str]:
    """The kiln modules (dotted, absolute) a file of the package imports; relative imports resolved."""
    here = dotted(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")
            base = base[:len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
            where = KILN.parent.joinpath(*target.split("."))
            for alias in node.names:  # `from ..nccl import parse` imports the module kiln.nccl.parse
                found.add(f"{target}.{alias.name}" if (where / f"{alias.name}.py").is_file() else target)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found |= {n.removeprefix("ansible.module_utils.") for n in names
                      if n.removeprefix("ansible.module_utils.").split(".")[0] == "kiln"}
    found.discard(here)
    return found


MODULES = sorted(p for p in KILN.rglob("*.py"))


def upward(name: str, imports: set[str]) -> list[str]:
    """The imports of module *name* that break the rule, each with why."""
    bad = []
    mine = family(name)
    for dep in sorted(imports):
        theirs = family(dep)
        if theirs is None or theirs == mine:
            continue  # a base (anyone may import it), or the module's own family
        if mine is None:
            if theirs not in BASE_MAY_IMPORT.get(name, set()):
                bad.append(f"{name} (a base) imports {dep} (family {theirs})")
        elif FAMILIES[theirs] >= FAMILIES[mine]:
            bad.append(f"{name} (family {mine}) imports {dep} (family {theirs}, not below it)")
    return bad


def test_every_package_is_a_family_and_every_family_a_package() -> None:
    packages = {d.name for d in KILN.iterdir() if (d / "__init__.py").is_file()}
    assert packages == set(FAMILIES)
    assert family("kiln.burnin.fabric_checks") == "burnin" and family("kiln.fabric.counters") == "fabric"
    assert family("kiln.verdict") is None and family("kiln.slurm") == "slurm"


@pytest.mark.parametrize("path", MODULES, ids=[dotted(p) for p in MODULES])
def test_no_module_imports_upward(path: Path) -> None:
    assert upward(dotted(path), kiln_imports(path)) == []


def test_relative_imports_are_resolved() -> None:
    imports = kiln_imports(KILN / "burnin" / "assemble.py")
    assert {"kiln.verdict", "kiln.slurm.sinfo", "kiln.burnin.checks", "kiln.nccl.parse"} <= imports


def test_the_rule_catches_an_upward_import() -> None:
    """A fabric rule importing a burn-in judge, the Slurm rule importing the upgrade, a parser importing
    health, a sibling family at the same level and a base importing a family: each is named."""
    assert upward("kiln.fabric.counters", {"kiln.burnin.fabric_checks"})
    assert upward("kiln.facts.fabric", {"kiln.fabric.counters"})
    assert upward("kiln.slurm.node_state", {"kiln.upgrade.rollout"})
    assert upward("kiln.nccl.text", {"kiln.health.rules"})
    assert upward("kiln.health.rules", {"kiln.fabric.counters"})
    assert upward("kiln.packages.drift", {"kiln.upgrade.rollout"})
    assert upward("kiln.clock", {"kiln.burnin.assemble"})
    assert upward("kiln.upgrade.rollout", {"kiln.burnin.pair_phase"}) == []  # allowed by rank; see the next test
    assert upward("kiln.burnin.assemble", {"kiln.slurm.sinfo", "kiln.verdict", "kiln.nccl.parse"}) == []


def test_the_upgrade_does_not_import_the_burnin() -> None:
    """The rolling upgrade runs the burn-in as a tool (tools/kiln-burnin) and reads its summary; it imports
    none of its Python (it once did, for a drain-reason helper that now lives with the Slurm rule)."""
    for path in (KILN / "upgrade").glob("*.py"):
        assert not {d for d in kiln_imports(path) if family(d) == "burnin"}
