"""The filter registries in filter_plugins/: every filter documented by a sidecar <name>.yml, and the reverse."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

import yaml

import kiln_compat_filters as kc

FILTER_DIR = Path(kc.__file__).resolve().parent
MODULE_UTILS = FILTER_DIR.parent / "module_utils"


def _registries() -> dict[str, dict[str, Any]]:
    """Each filter_plugins/*.py file -> the filters its FilterModule registers."""
    out = {}
    for path in sorted(FILTER_DIR.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"kiln_registry_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out[path.name] = module.FilterModule().filters()
    return out


def test_every_documented_filter_is_registered_and_every_registered_filter_documented() -> None:
    registered: dict[str, str] = {}
    for file, filters in _registries().items():
        for name in filters:
            assert name not in registered, f"{name} is registered by {registered.get(name)} and {file}"
            registered[name] = file
    docs = {p.stem for p in FILTER_DIR.glob("*.yml")}
    assert set(registered) == docs, {"undocumented": sorted(set(registered) - docs),
                                     "documented, not registered": sorted(docs - set(registered))}
    for name in docs:
        doc = yaml.safe_load((FILTER_DIR / f"{name}.yml").read_text())
        assert doc["DOCUMENTATION"]["name"] == name


def test_no_filter_file_shadows_a_module_utils_name() -> None:
    # tests (and controller code) put both directories on sys.path: one name, one file
    filters = {p.stem for p in FILTER_DIR.glob("*.py")}
    shared = {p.stem for p in MODULE_UTILS.glob("*.py")} | {p.name for p in MODULE_UTILS.iterdir()
                                                            if (p / "__init__.py").exists()}
    assert not filters & shared, filters & shared


def test_filters_match_sidecar_docs() -> None:
    filters = kc.FilterModule().filters()
    docs = {p.stem: p for p in FILTER_DIR.glob("kiln_*.yml")}
    assert set(filters) <= set(docs), set(filters) - set(docs)  # other plugin files document their own filters
    for name in filters:
        path = docs[name]
        doc = yaml.safe_load(path.read_text())
        assert doc["DOCUMENTATION"]["name"] == name
        assert doc["DOCUMENTATION"]["short_description"] and doc["EXAMPLES"].strip() and doc["RETURN"]["_value"]
        assert "_input" in doc["DOCUMENTATION"]["options"]


def test_documented_filter_names() -> None:
    assert sorted(kc.FilterModule().filters()) == sorted([
        "kiln_stack_violations", "kiln_recommend_stack", "kiln_resolve_stack", "kiln_gpu_spec", "kiln_gpu_pci_models",
        "kiln_version_cmp", "kiln_version_compare", "kiln_version_sort", "kiln_version_key",
        "kiln_pkg", "kiln_pkg_modules", "kiln_pkg_replaces", "kiln_packages", "kiln_distro_build", "kiln_tool", "kiln_repo", "kiln_repos_problems", "kiln_cuda_repo", "kiln_container_toolkit_repo", "kiln_torch_index",
        "kiln_stacks_by_host", "kiln_stack_report", "kiln_hostlist", "kiln_plan", "kiln_plan_text",
        "kiln_missing_python_libs", "kiln_doca_repo", "kiln_gpudirect", "kiln_ofed_builds", "kiln_container_plan",
        "kiln_mirror_plan", "kiln_mirror_site_repos",
    ])
    doc = (FILTER_DIR.parent / "docs" / "compat.md")
    if doc.exists():
        text = doc.read_text()
        for name in kc.FilterModule().filters():
            assert f"`{name}" in text, name


# --- the shape of a registry (docs/architecture.md "Python layout") ----------------------------------------------

# The one import mechanism of controller plugins: this statement, once in each registry, and nowhere else.
MECHANISM = 'site.addsitedir(str(Path(__file__).resolve().parents[1] / "module_utils"))'
REPO = FILTER_DIR.parent


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def registry_problems(source: str) -> list[str]:
    """What makes *source* more than a registry: imports, the mechanism, a FilterModule whose filters()
    returns one literal {name: function} -- no function, assignment, wrapper or call of its own."""
    problems = []
    mechanism = ast.dump(ast.parse(MECHANISM).body[0])
    classes = []
    for node in ast.parse(source).body:
        if _is_docstring(node) or isinstance(node, (ast.Import, ast.ImportFrom)) or ast.dump(node) == mechanism:
            continue
        if isinstance(node, ast.ClassDef) and node.name == "FilterModule":
            classes.append(node)
            continue
        problems.append(f"line {node.lineno}: {type(node).__name__} (a registry holds imports and FilterModule only)")
    if len(classes) != 1:
        return problems + ["no FilterModule class"]
    body = [n for n in classes[0].body if not _is_docstring(n)]
    if len(body) != 1 or not isinstance(body[0], ast.FunctionDef) or body[0].name != "filters":
        return problems + ["FilterModule holds more than filters()"]
    inner = [n for n in body[0].body if not _is_docstring(n)]
    table = inner[0].value if len(inner) == 1 and isinstance(inner[0], ast.Return) else None
    if not isinstance(table, ast.Dict):
        return problems + ["filters() does more than return a {name: function} literal"]
    for key, value in zip(table.keys, table.values):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            problems.append(f"line {table.lineno}: a filter name that is not a string literal")
        if not (isinstance(value, ast.Name) or (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name))):
            problems.append(f"line {value.lineno}: {ast.unparse(value)} is not a function reference (module.function)")
    return problems


def test_every_registry_is_thin_and_named_for_its_area() -> None:
    files = sorted(FILTER_DIR.glob("*.py"))
    assert len(files) >= 9
    for path in files:
        assert re.fullmatch(r"kiln_[a-z][a-z_]*_filters\.py", path.name), f"{path.name}: name it kiln_<area>_filters.py"
        assert not registry_problems(path.read_text(encoding="utf-8")), (path.name, registry_problems(
            path.read_text(encoding="utf-8")))
        assert path.read_text(encoding="utf-8").count(MECHANISM) == 1, f"{path.name}: the import mechanism, once"


def test_a_registry_with_logic_is_refused() -> None:
    thin = (FILTER_DIR / "kiln_time_filters.py").read_text(encoding="utf-8")
    assert not registry_problems(thin)
    assert registry_problems(thin + "\n\ndef kiln_x(value):\n    return value\n")
    assert registry_problems(thin.replace("import clock as kiln_time  # noqa: E402", "import clock as kiln_time  # noqa: E402\nX = 1"))
    assert registry_problems(thin.replace('"kiln_run_id": kiln_time.kiln_run_id',
                                          '"kiln_run_id": wrap(kiln_time.kiln_run_id)'))
    assert registry_problems(thin.replace(MECHANISM, 'sys.path.insert(0, "module_utils")'))


def _sys_path_changes(source: str) -> list[str]:
    """Every statement of *source* that changes the import path (sys.path, site.addsitedir)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        text = ast.unparse(node) if isinstance(node, (ast.Call, ast.Assign, ast.AugAssign)) else ""
        if isinstance(node, ast.Call) and re.match(r"(sys\.path\.(insert|append|extend|remove)|site\.addsitedir)\(", text):
            found.append(text)
        elif isinstance(node, (ast.Assign, ast.AugAssign)) and re.search(r"\bsys\.path\b", text.split("=")[0]):
            found.append(text)
    return found


def test_no_import_path_change_outside_the_one_mechanism() -> None:
    """The registries' MECHANISM line is the only change of the import path in the Python Ansible loads (stand-alone
    programs aside: tests/unit/conftest.py, bench/ scripts put module_utils/ on sys.path for themselves)."""
    sources = [p for d in ("filter_plugins", "callback_plugins", "library", "module_utils") for p in (REPO / d).rglob("*.py")]
    assert any(p.parent.name == "callback_plugins" for p in sources) and any(p.parent.name == "library" for p in sources)
    others = {}
    for path in sources:
        changes = _sys_path_changes(path.read_text(encoding="utf-8"))
        if path.parent == FILTER_DIR:
            changes = [c for c in changes if c != ast.unparse(ast.parse(MECHANISM))]
        if changes:
            others[str(path.relative_to(REPO))] = changes
    assert not others, others
    assert not list((REPO / "module_utils").glob("*.pth")), "site.addsitedir would run a .pth file in module_utils/"
    assert _sys_path_changes("import sys\n_P = 'x'\nif _P not in sys.path:\n    sys.path.insert(0, _P)\n")


IMPLEMENTED_BY = re.compile(r"Implemented by C\(([\w.]+)\.(\w+)\) in C\((module_utils/[\w/]+\.py)\)\.")


def test_every_filter_doc_names_the_function_that_implements_it() -> None:
    for file, filters in _registries().items():
        for name, func in filters.items():
            doc = yaml.safe_load((FILTER_DIR / f"{name}.yml").read_text())["DOCUMENTATION"]
            named = [m for line in doc.get("description") or [] for m in IMPLEMENTED_BY.findall(str(line))]
            assert len(named) == 1, f"{name}.yml: say once 'Implemented by C(<module>.<function>) in C(<path>).'"
            module, attr, path = named[0]
            assert (REPO / path).is_file(), f"{name}.yml: {path} does not exist"
            assert path[len("module_utils/"):].removesuffix(".py").removesuffix("/__init__") == module.replace(".", "/"), (
                f"{name}.yml: {module} is not {path}")
            assert getattr(importlib.import_module(module), attr, None) is func, (
                f"{name}.yml names {module}.{attr}, but {file} registers {func.__module__}.{func.__name__}")
