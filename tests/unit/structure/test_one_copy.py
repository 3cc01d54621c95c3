"""One copy of each tool: no two files under tools/ and roles/*/files/ have the same content.

A tool an operator runs from the checkout and a role installs on the nodes lives once, in the
role's files/; tools/ links to it (relative symlink). A second copy would drift.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from kiln_paths import REPO


def _candidates() -> list[Path]:
    paths = [p for p in (REPO / "tools").rglob("*")]
    for files in sorted(REPO.glob("roles/*/files")):
        paths.extend(files.rglob("*"))
    return sorted(p for p in paths if p.is_symlink() or p.is_file())


def test_links_resolve_inside_the_repository():
    for path in _candidates():
        if path.is_symlink():
            target = path.resolve()
            assert target.is_file(), f"{path.relative_to(REPO)} is a broken link"
            assert REPO in target.parents, f"{path.relative_to(REPO)} points outside the repository"
            assert not Path(path.readlink()).is_absolute(), f"{path.relative_to(REPO)}: use a relative link"


def test_no_two_copies_of_one_file():
    seen: dict[str, Path] = {}
    copies = []
    for path in _candidates():
        if path.is_symlink():
            continue  # a link is the one-copy mechanism, not a copy
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest in seen:
            copies.append(f"{seen[digest].relative_to(REPO)} == {path.relative_to(REPO)}")
        else:
            seen[digest] = path
    assert not copies, "identical copies (keep one, link the other): " + "; ".join(copies)


def test_cpu_engine_is_linked_not_copied():
    entry = REPO / "tools" / "kiln-cpu-allreduce"
    role_file = REPO / "roles" / "burnin_tools" / "files" / "kiln-cpu-allreduce"
    assert not role_file.is_symlink(), "the role holds the file itself (a role must not reach outside roles/)"
    assert entry.is_symlink()
    assert entry.resolve() == role_file.resolve()
