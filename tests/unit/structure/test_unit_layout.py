"""tests/unit mirrors the source (issue 32 #6): every test sits in the directory of what it exercises.

No test file flat in tests/unit (only the shared helpers are), every directory is in the map of
tests/unit/README.md and the map names no directory that is gone, and no file name is used twice
(pytest's default import mode imports a test file by its basename, from its own directory).
"""
from __future__ import annotations

import re

from kiln_paths import REPO

UNIT = REPO / "tests" / "unit"
SHARED = {"conftest.py", "kiln_paths.py", "kiln_loader.py", "kiln_playbook.py", "kiln_data.py", "README.md"}


def _dirs() -> set[str]:
    return {p.name for p in UNIT.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}


def test_no_test_file_sits_flat_in_tests_unit():
    flat = sorted(p.name for p in UNIT.iterdir() if p.is_file() and p.name not in SHARED)
    assert flat == [], f"move these into the directory of what they test (tests/unit/README.md): {flat}"


def test_every_directory_is_in_the_map_and_the_map_names_no_other():
    mapped = set(re.findall(r"^\| `([a-z_]+)/` \|", (UNIT / "README.md").read_text(), flags=re.M))
    assert mapped == _dirs(), f"tests/unit/README.md's map: missing {sorted(_dirs() - mapped)}, stale {sorted(mapped - _dirs())}"


def test_directories_are_one_level_deep_and_hold_only_python():
    for name in sorted(_dirs()):
        entries = [p for p in (UNIT / name).iterdir() if p.name != "__pycache__"]
        assert entries, f"tests/unit/{name}/ is empty"
        assert all(p.is_file() and p.suffix == ".py" for p in entries), \
            f"tests/unit/{name}/: {sorted(p.name for p in entries if not (p.is_file() and p.suffix == '.py'))}"


def test_no_file_name_twice_and_no_package_markers():
    names: dict[str, list[str]] = {}
    for path in sorted(UNIT.rglob("*.py")):
        if "__pycache__" not in path.parts:
            names.setdefault(path.name, []).append(str(path.relative_to(UNIT)))
    assert "__init__.py" not in names, names.get("__init__.py")
    twice = {name: paths for name, paths in names.items() if len(paths) > 1}
    assert twice == {}, twice
