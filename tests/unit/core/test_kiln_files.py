"""library/kiln_files.py: a role's files in one task -- real ansible-playbook on localhost under tmp_path.

What an operator relies on: a second run changes nothing; a changed content rewrites only that file and
the result names only that path (handlers key on it); a failing validate leaves the old file as it was
and names the file; check mode writes nothing; a wrong mode is put back; a file whose directory is
missing is refused with the path named, never a traceback.
"""
from __future__ import annotations

import grp
import json
import os
import pwd
import stat
import sys
from pathlib import Path

import pytest
import yaml

from kiln_playbook import ANSIBLE_PLAYBOOK, run_playbook

pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")

USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


def _play(tmp_path: Path, files: list[dict], name: str = "play.yml") -> Path:
    for entry in files:
        entry.setdefault("owner", USER)
        entry.setdefault("group", GROUP)
    play = [{
        "name": "kiln_files",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "tasks": [
            {"name": "Write", "kiln_files": {"files": files}, "register": "r"},
            {"name": "Save", "ansible.builtin.copy": {"dest": str(tmp_path / "result.json"),
                                                      "content": "{{ r | to_json }}", "mode": "0600"},
             "check_mode": False},
        ],
    }]
    path = tmp_path / name
    path.write_text(yaml.safe_dump(play))
    return path


def _run(tmp_path: Path, files: list[dict], *extra: str) -> tuple[int, dict, str]:
    proc = run_playbook("-i", "localhost,", str(_play(tmp_path, files)),
                        "-e", f"ansible_python_interpreter={sys.executable}", *extra, tmp_path=tmp_path)
    out = proc.stdout + proc.stderr
    result = tmp_path / "result.json"
    data = json.loads(result.read_text()) if proc.returncode == 0 and result.exists() else {}
    if result.exists():
        result.unlink()
    return proc.returncode, data, out


def _entries(root: Path, content_a: str = "a = 1\n") -> list[dict]:
    return [
        {"path": str(root / "etc"), "state": "directory", "mode": "0755"},
        {"path": str(root / "etc" / "a.conf"), "content": content_a, "mode": "0644"},
        {"path": str(root / "etc" / "b.conf"), "content": "b = 2\n", "mode": "0600"},
    ]


def test_writes_then_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    rc, first, out = _run(tmp_path, _entries(root))
    assert rc == 0, out
    assert first["changed"] is True
    assert first["changed_paths"] == [str(root / "etc"), str(root / "etc" / "a.conf"), str(root / "etc" / "b.conf")]
    assert (root / "etc" / "a.conf").read_text() == "a = 1\n"
    assert stat.S_IMODE((root / "etc" / "b.conf").stat().st_mode) == 0o600
    rc, second, out = _run(tmp_path, _entries(root))
    assert rc == 0, out
    assert second["changed"] is False and second["changed_paths"] == []
    assert not [p for p in (root / "etc").iterdir() if p.name.startswith(".kiln-")]


def test_only_the_changed_file_is_named(tmp_path: Path) -> None:
    root = tmp_path / "root"
    assert _run(tmp_path, _entries(root))[0] == 0
    rc, res, out = _run(tmp_path, _entries(root, "a = 3\n"))
    assert rc == 0, out
    assert res["changed_paths"] == [str(root / "etc" / "a.conf")]
    assert res["content_changed"] == [str(root / "etc" / "a.conf")]
    assert (root / "etc" / "a.conf").read_text() == "a = 3\n"


def test_mode_is_put_back_without_rewriting(tmp_path: Path) -> None:
    root = tmp_path / "root"
    assert _run(tmp_path, _entries(root))[0] == 0
    (root / "etc" / "b.conf").chmod(0o666)
    rc, res, out = _run(tmp_path, _entries(root))
    assert rc == 0, out
    assert res["changed_paths"] == [str(root / "etc" / "b.conf")]
    assert res["content_changed"] == []
    assert stat.S_IMODE((root / "etc" / "b.conf").stat().st_mode) == 0o600


def test_failing_validate_keeps_the_old_file(tmp_path: Path) -> None:
    root = tmp_path / "root"
    assert _run(tmp_path, _entries(root))[0] == 0
    entries = _entries(root, "a = broken\n")
    entries[1]["validate"] = ["grep", "-q", "^a = [0-9]", "%s"]
    rc, _, out = _run(tmp_path, entries)
    assert rc != 0
    assert "a.conf: the new content failed its check" in out
    assert "the old file is unchanged" in out
    assert "Traceback" not in out
    assert (root / "etc" / "a.conf").read_text() == "a = 1\n"
    assert not [p for p in (root / "etc").iterdir() if p.name.startswith(".kiln-")]
    entries = _entries(root, "a = 4\n")
    entries[1]["validate"] = ["grep", "-q", "^a = [0-9]", "%s"]
    rc, res, out = _run(tmp_path, entries)
    assert rc == 0, out
    assert res["changed_paths"] == [str(root / "etc" / "a.conf")]


def test_check_mode_writes_nothing_and_diffs(tmp_path: Path) -> None:
    root = tmp_path / "root"
    rc, res, out = _run(tmp_path, _entries(root), "--check", "--diff")
    assert rc == 0, out
    assert res["changed"] is True
    assert not root.exists()
    assert _run(tmp_path, _entries(root))[0] == 0
    rc, res, out = _run(tmp_path, _entries(root, "a = 5\n"), "--check", "--diff")
    assert rc == 0, out
    assert res["changed_paths"] == [str(root / "etc" / "a.conf")]
    assert "+a = 5" in out and "-a = 1" in out
    assert (root / "etc" / "a.conf").read_text() == "a = 1\n"


@pytest.mark.parametrize("bad, message", [
    ({"path": "relative/a.conf", "content": "x\n", "mode": "0644"}, "the path must be absolute"),
    ({"path": "/nonexistent-kiln-dir/sub/a.conf", "content": "x\n", "mode": "0644"}, "does not exist"),
    ({"path": "/tmp", "content": "x\n", "mode": "0644"}, "is a directory"),
    ({"path": "/nonexistent-kiln-dir/a.conf", "mode": "0644"}, "a file entry needs content"),
    ({"path": "/nonexistent-kiln-dir/a.conf", "content": "x\n", "mode": 420}, "mode '420' is not an octal string"),
    ({"path": "/nonexistent-kiln-dir/a.conf", "content": "x\n", "mode": "u=rw"}, "is not an octal string"),
    ({"path": "/nonexistent-kiln-dir/a.conf", "content": "x\n", "mode": "0644", "validate": ["true"]},
     "validate must name the file to check as %s"),
])
def test_bad_entries_are_refused_by_path(tmp_path: Path, bad: dict, message: str) -> None:
    rc, _, out = _run(tmp_path, [bad])
    assert rc != 0
    assert message in out
    assert "Traceback" not in out


def test_a_bad_entry_fails_before_anything_is_written(tmp_path: Path) -> None:
    """Every entry is checked first: a bad last entry leaves the good ones before it unwritten."""
    root = tmp_path / "root"
    entries = _entries(root) + [{"path": "relative.conf", "content": "x\n", "mode": "0644"},
                                {"path": str(root / "etc" / "c.conf"), "content": "c\n", "mode": 644}]
    rc, _, out = _run(tmp_path, entries)
    assert rc != 0
    assert "kiln_files: nothing written" in out
    assert "relative.conf: the path must be absolute" in out
    assert "c.conf: mode '644' is not an octal string" in out
    assert "Traceback" not in out
    assert not root.exists()
