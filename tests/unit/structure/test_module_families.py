"""module_utils families never import upward.

The flat ``module_utils/kiln_*`` files form families, from the bottom up: the nccl-tests parsers and
the hardware-facts readers (rank 1); the GPU-health rules, the fabric counter rules, the Slurm state
rule and the drift gate's as-built comparisons (rank 2); the burn-in's judges (3); the rolling upgrade
(4). A family may import its own members and the families of a lower rank, never a sibling or one
above: a parser that imports a judge, or the Slurm rule that imports the burn-in, is the tangle this
rule keeps out (the burn-in's fabric judges are ``kiln_burnin_fabric_*`` for this reason, and the
upgrade no longer imports the burn-in's pair phase for a Slurm-reason helper).

A module no family names is a shared base (errors, time, verdict vocabulary, ...): any family may import
it, and it may import only other bases and the families listed for it in BASE_MAY_IMPORT.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kiln_paths import REPO

MODULE_UTILS = REPO / "module_utils"

#: family -> (rank, pattern of its members); a family may import families of a lower or equal rank.
FAMILIES: dict[str, tuple[int, re.Pattern[str]]] = {
    "nccl": (1, re.compile(r"kiln_nccl(_\w+)?$")),
    "facts": (1, re.compile(r"kiln_(hwfacts|fabric|fabric_text|netdev)$")),
    "health": (2, re.compile(r"kiln_(health(_\w+)?|dcgm_diag)$")),
    "fabric": (2, re.compile(r"kiln_fabric_(base|counters)$")),
    "slurm": (2, re.compile(r"kiln_(sinfo|node_state|slurm_nodes)$")),
    "burnin": (3, re.compile(r"kiln_(burnin(_\w+)?|baseline|isolate|report)$")),
    "upgrade": (4, re.compile(r"kiln_upgrade$")),
    # the as-built comparisons: the burn-in reads them (mixed versions across a fabric check)
    "drift": (2, re.compile(r"kiln_drift$")),
}
#: The shared bases and what each may import beyond other bases (kiln_verdict holds the verdict
#: vocabulary and reads nccl-tests results).
BASE_MAY_IMPORT = {"kiln_verdict": {"nccl"}}


def family(name: str) -> str | None:
    for fam, (_, pattern) in FAMILIES.items():
        if pattern.match(name):
            return fam
    return None


def kiln_imports(path: Path) -> set[str]:
    """The kiln_* modules a file imports (both spellings: ansible.module_utils.X and the top-level X)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            names = [f"{mod}.{a.name}" if mod == "ansible.module_utils" else mod for a in node.names]
        else:
            continue
        for name in names:
            last = name.split(".")[-1] if name.startswith("ansible.module_utils.") else name.split(".")[0]
            if last.startswith("kiln_"):
                found.add(last)
    found.discard(path.stem)
    return found


MODULES = sorted(p for p in MODULE_UTILS.glob("kiln_*.py"))


def upward(name: str, imports: set[str]) -> list[str]:
    """The imports of module *name* that break the rule, each with why."""
    bad = []
    mine = family(name)
    for dep in sorted(imports):
        theirs = family(dep)
        if theirs is None:
            continue  # a base: anyone may import it
        if mine is None:
            if theirs not in BASE_MAY_IMPORT.get(name, set()):
                bad.append(f"{name} (a base) imports {dep} (family {theirs})")
        elif FAMILIES[theirs][0] > FAMILIES[mine][0] or (FAMILIES[theirs][0] == FAMILIES[mine][0] and theirs != mine):
            bad.append(f"{name} (family {mine}) imports {dep} (family {theirs}, not below it)")
    return bad


def test_every_family_has_members() -> None:
    names = [p.stem for p in MODULES]
    for fam in FAMILIES:
        assert any(family(n) == fam for n in names), fam
    assert family("kiln_burnin_fabric_checks") == "burnin" and family("kiln_fabric_counters") == "fabric"
    assert family("kiln_fabric") == "facts" and family("kiln_hwfacts") == "facts"


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_no_module_imports_upward(path: Path) -> None:
    assert upward(path.stem, kiln_imports(path)) == []


def test_the_rule_catches_an_upward_import() -> None:
    """A fabric reader importing a burn-in judge, the Slurm rule importing the upgrade, a parser importing
    health, and a sibling family at the same level: each is named."""
    assert upward("kiln_fabric_counters", {"kiln_burnin_fabric_checks"})
    assert upward("kiln_fabric", {"kiln_fabric_counters"})
    assert upward("kiln_node_state", {"kiln_upgrade"})
    assert upward("kiln_nccl_text", {"kiln_health"})
    assert upward("kiln_health", {"kiln_fabric_counters"})
    assert upward("kiln_drift", {"kiln_upgrade"})
    assert upward("kiln_time", {"kiln_burnin"})
    assert upward("kiln_upgrade", {"kiln_burnin_pair_phase"}) == []  # allowed by rank; see the next test
    assert upward("kiln_burnin", {"kiln_sinfo", "kiln_verdict", "kiln_nccl"}) == []


def test_the_upgrade_does_not_import_the_burnin() -> None:
    """The rolling upgrade runs the burn-in as a tool (tools/kiln-burnin) and reads its summary; it imports
    none of its Python (it once did, for a drain-reason helper that now lives with the Slurm rule)."""
    assert not {d for d in kiln_imports(MODULE_UTILS / "kiln_upgrade.py") if family(d) == "burnin"}
