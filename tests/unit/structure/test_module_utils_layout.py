"""module_utils/ as Ansible ships it: small files, every kiln import through ``ansible.module_utils``.

AnsiballZ ships a module's ``ansible.module_utils.<name>`` imports (and theirs, recursively); a
module_utils file that reached another one only by its top-level name would work in the unit
tests and break on a node. A stand-in ``ansible.module_utils`` package holding copies of every
file checks it here without Ansible.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from kiln_paths import REPO
MODULE_UTILS = sorted((REPO / "module_utils").glob("*.py"))
MAX_LINES = 600


def test_no_python_file_over_the_size_limit():
    files = (MODULE_UTILS + sorted((REPO / "module_utils").glob("*/**/*.py"))
             + sorted((REPO / "library").glob("*.py")) + sorted((REPO / "filter_plugins").glob("*.py")))
    assert len(files) > 40  # the globs found the tree
    over = [f"{p.relative_to(REPO)}: {n} lines" for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES]
    assert not over, f"over {MAX_LINES} lines (split by concern): " + "; ".join(over)


def test_filter_plugins_do_not_shadow_module_utils():
    """Filters import module_utils by top-level name (sys.path): a filter file of the same name would win."""
    utils = {p.stem for p in MODULE_UTILS}
    clashes = sorted(p.name for p in (REPO / "filter_plugins").glob("*.py") if p.stem in utils)
    assert not clashes


def test_kiln_imports_go_through_ansible_module_utils():
    """Every ``import kiln_x`` / ``from kiln_x`` in module_utils is the except-branch of an ansible.module_utils try."""
    for path in MODULE_UTILS:
        text = path.read_text(encoding="utf-8")
        bare = set(re.findall(r"^\s+(?:import|from) (kiln_\w+)", text, re.M))
        shipped = set(re.findall(r"^\s+from ansible\.module_utils\.(kiln_\w+) import", text, re.M))
        for group in re.findall(r"^\s+from ansible\.module_utils import ([\w, ]+)$", text, re.M):
            shipped |= {name.strip() for name in group.split(",")}
        assert bare <= shipped, f"{path.name}: {sorted(bare - shipped)} imported without ansible.module_utils"


def test_every_module_utils_file_imports_as_ansible_module_utils(tmp_path):
    pkg = tmp_path / "ansible" / "module_utils"
    pkg.mkdir(parents=True)
    (tmp_path / "ansible" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    names = [p.stem for p in MODULE_UTILS]
    for path in MODULE_UTILS:
        (pkg / path.name).write_text(path.read_text(encoding="utf-8"))
    code = ("import importlib, sys\n"
            f"names = {names!r}\n"
            "for name in names:\n"
            "    importlib.import_module('ansible.module_utils.' + name)\n"
            "bare = sorted(m for m in sys.modules if m in names)\n"
            "assert not bare, bare\n"
            "print(len(names))\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(len(names))
