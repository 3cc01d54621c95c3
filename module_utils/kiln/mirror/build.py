# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""What both mirror-build modules (library/kiln_mirror_apt.py, library/kiln_mirror_dnf.py) do the same way:
run a program and stop on failure, hash a file, read an upstream file (file:// on disk, http(s) through the
opener the module passes in: ansible's open_url). Standard library only.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from ..process import run_argv
from .apt import MirrorError


def run_checked(argv: Sequence[str], what: str) -> dict[str, Any]:
    """Run *argv* (no shell); MirrorError naming *what* and the program's last output when it fails."""
    res = run_argv(list(argv))
    if res["rc"] != 0:
        raise MirrorError(f"{what} failed (rc {res['rc']}): {(res.get('stderr') or res.get('stdout') or '').strip()[-2000:]}")
    return res


def sha256_file(path: str) -> str:
    """sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(url: str, opener: Callable[..., Any], timeout: int = 120) -> bytes:
    """The bytes at *url*: a file:// path read from disk (percent-decoded), anything else through *opener*."""
    if url.startswith("file://"):
        with open(urllib.parse.unquote(urllib.parse.urlsplit(url).path), "rb") as handle:
            return handle.read()
    return opener(url, timeout=timeout).read()
