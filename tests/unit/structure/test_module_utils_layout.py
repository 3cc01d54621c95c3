"""module_utils/ as Ansible ships it: small files, one package of families, every kiln import relative.

AnsiballZ ships a module's ``ansible.module_utils.<name>`` imports (and theirs, recursively); a
module_utils file that reached another one by a top-level name (``import kiln.verdict``) would work in
the unit tests and break on a node. Inside ``module_utils/kiln/`` every import of kiln is relative
(``from ..slurm.sinfo import parse_sinfo``), which resolves under both names. A stand-in
``ansible.module_utils`` package holding a copy of the tree checks it here without Ansible.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys

from kiln_paths import REPO

MODULE_UTILS = REPO / "module_utils"
KILN = MODULE_UTILS / "kiln"
PACKAGE_FILES = sorted(KILN.rglob("*.py"))
MAX_LINES = 600


def test_no_python_file_over_the_size_limit():
    files = (sorted(MODULE_UTILS.rglob("*.py")) + sorted((REPO / "library").glob("*.py"))
             + sorted((REPO / "filter_plugins").glob("*.py")))
    assert len(files) > 40  # the globs found the tree
    over = [f"{p.relative_to(REPO)}: {n} lines" for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES]
    assert not over, f"over {MAX_LINES} lines (split by concern): " + "; ".join(over)


def test_module_utils_holds_packages_only():
    """No flat module beside the packages: kiln's code is in kiln/ (families) or kiln_compat_engine/."""
    assert sorted(p.name for p in MODULE_UTILS.glob("*.py")) == []
    assert {p.name for p in MODULE_UTILS.iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        "kiln", "kiln_compat_engine"}


def test_every_directory_is_a_package_with_a_docstring():
    for directory in [KILN, *sorted(d for d in KILN.rglob("*") if d.is_dir() and d.name != "__pycache__")]:
        init = directory / "__init__.py"
        assert init.is_file(), f"{directory.relative_to(REPO)} has no __init__.py"
        tree = ast.parse(init.read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree) or ""
        assert doc, f"{init.relative_to(REPO)}: say what the family is and its modules in dependency order"
        assert len(tree.body) == 1, f"{init.relative_to(REPO)}: a docstring only (code lives in the modules)"
        for module in sorted(p.stem for p in directory.glob("*.py") if p.stem != "__init__"):
            assert f"``{module}``" in doc, f"{init.relative_to(REPO)} does not name its module {module}"


def _kiln_imports(path):
    """(line, how) of every import of kiln's own code in *path* that is not relative."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")
            if top[0] in ("kiln", "kiln_compat_engine") or top[:3] == ["ansible", "module_utils", "kiln"]:
                bad.append((node.lineno, name))
    return bad


def test_kiln_imports_inside_the_package_are_relative():
    found = {str(p.relative_to(REPO)): bad for p in PACKAGE_FILES if (bad := _kiln_imports(p))}
    assert not found, f"import kiln's own modules relatively inside module_utils/kiln: {found}"


def test_the_relative_rule_catches_an_absolute_import(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text("from kiln.slurm.sinfo import parse_sinfo\nfrom ..verdict import FAIL\n"
                      "from ansible.module_utils.kiln import clock\n")
    assert [name for _, name in _kiln_imports(sample)] == ["kiln.slurm.sinfo", "ansible.module_utils.kiln"]


def test_every_module_imports_as_ansible_module_utils(tmp_path):
    pkg = tmp_path / "ansible" / "module_utils"
    pkg.mkdir(parents=True)
    (tmp_path / "ansible" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    shutil.copytree(KILN, pkg / "kiln")
    names = sorted(".".join(p.relative_to(MODULE_UTILS).with_suffix("").parts).removesuffix(".__init__")
                   for p in PACKAGE_FILES)
    code = ("import importlib, sys\n"
            f"names = {names!r}\n"
            "for name in names:\n"
            "    importlib.import_module('ansible.module_utils.' + name)\n"
            "bare = sorted(m for m in sys.modules if m.split('.')[0] == 'kiln')\n"
            "assert not bare, bare\n"
            "print(len(names))\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(len(names))
