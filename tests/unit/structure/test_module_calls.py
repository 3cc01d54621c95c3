"""Every task that calls one of kiln's own modules (library/) passes the arguments the module requires.

A module whose knob-fed parameters are required (issue 32: a knob's default lives only in its settings
role) fails at run time -- "missing required arguments" -- on the first call that forgets one, which no
unit test of the module reaches and only a molecule run finds. This reads each module's
``AnsibleModule(argument_spec=..., required_if=...)`` from its source (AST, literals only) and every
task in playbooks/, roles/ and molecule/ that names the module, and checks:

* every ``required: True`` argument is passed;
* every ``required_if`` rule whose trigger argument is a literal in the task (``op: start``) is met;
* every argument passed exists in the spec (a typo is an error at run time too).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml

from kiln_paths import REPO
from kiln_playbook import mappings

LIBRARY = REPO / "library"
MODULES = sorted(p.stem for p in LIBRARY.glob("kiln_*.py"))
TASK_DIRS = [REPO / "playbooks", REPO / "roles", REPO / "molecule", REPO / "tests" / "playbooks"]
# meta/ holds argument specs (an option may share a module's name), not tasks
TASK_FILES = [REPO / "site.yml"] + sorted(p for d in TASK_DIRS for p in d.rglob("*.yml") if "meta" not in p.parts)


def _literal(node: ast.AST) -> Any:
    """ast.literal_eval, plus the dict(key=value, ...) form some modules write their spec in."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict" and not node.args:
        return {k.arg: _literal(k.value) for k in node.keywords}
    if isinstance(node, ast.Dict):
        return {ast.literal_eval(k): _literal(v) for k, v in zip(node.keys, node.values)}
    return ast.literal_eval(node)


def _spec(module: str) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """The module's argument_spec and required_if, read from its AnsibleModule(...) call."""
    tree = ast.parse((LIBRARY / f"{module}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "AnsibleModule":
            kw = {k.arg: k.value for k in node.keywords}
            spec = _literal(kw["argument_spec"])
            rules = _literal(kw["required_if"]) if "required_if" in kw else []
            return spec, rules
    raise AssertionError(f"library/{module}.py: no AnsibleModule(argument_spec=...) call")


def _calls() -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for path in TASK_FILES:
        try:
            doc = yaml.safe_load(path.read_text())
        except yaml.YAMLError:
            continue  # not plain YAML (a Jinja template): not a task file
        for task in mappings(doc):  # every mapping that may be a task, at any depth
            for module in MODULES:
                args = task.get(module)
                if args is None:
                    args = task.get(f"kiln.{module}")
                if isinstance(args, dict):
                    where = f"{path.relative_to(REPO)}: {task.get('name', module)}"
                    found.append((module, where, args))
    return found


CALLS = _calls()


def test_the_calls_are_found() -> None:
    """The scan sees the burn-in's module calls (a scan that finds nothing checks nothing)."""
    called = {module for module, _, _ in CALLS}
    assert {"kiln_burnin", "kiln_burnin_pairs", "kiln_burnin_lock", "kiln_packages"} <= called, called
    assert len(CALLS) >= 20, len(CALLS)


@pytest.mark.parametrize("module", MODULES)
def test_spec_is_readable(module: str) -> None:
    spec, rules = _spec(module)
    assert spec, module
    for rule in rules:
        assert rule[0] in spec and all(arg in spec for arg in rule[2]), (module, rule)


@pytest.mark.parametrize(("module", "where", "args"), CALLS, ids=[w for _, w, _ in CALLS])
def test_call_passes_what_the_module_requires(module: str, where: str, args: dict[str, Any]) -> None:
    spec, rules = _spec(module)
    unknown = sorted(set(args) - set(spec))
    assert not unknown, f"{where}: {module} has no argument(s) {unknown}"
    missing = sorted(name for name, opts in spec.items() if opts.get("required") and name not in args)
    assert not missing, f"{where}: {module} requires {missing}"
    for key, value, needed, *_ in rules:
        if args.get(key) == value:
            lacking = sorted(set(needed) - set(args))
            assert not lacking, f"{where}: {module} with {key}={value} requires {lacking}"


def test_the_check_fails_on_a_missing_argument() -> None:
    """The rule itself: a burn-in judge call without baseline_band is caught (the CI failure of 2026-12-05)."""
    spec, _ = _spec("kiln_burnin")
    args = {name: "x" for name, opts in spec.items() if opts.get("required")}
    with pytest.raises(AssertionError, match="baseline_band"):
        test_call_passes_what_the_module_requires("kiln_burnin", "t", {k: v for k, v in args.items() if k != "baseline_band"})
