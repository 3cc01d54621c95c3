"""What both mirror-build modules share (module_utils/kiln/mirror/build.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kiln.mirror.apt import MirrorError
from kiln.mirror.build import fetch, run_checked, sha256_file


def test_run_checked_returns_the_result_or_names_what_failed() -> None:
    assert run_checked(["true"], "nothing")["rc"] == 0
    with pytest.raises(MirrorError, match=r"indexing x failed \(rc 3\): boom"):
        run_checked(["sh", "-c", "echo boom >&2; exit 3"], "indexing x")
    with pytest.raises(MirrorError, match=r"rc 127"):
        run_checked(["/nonexistent/program"], "running it")


def test_sha256_file_and_file_urls_read_from_disk(tmp_path: Path) -> None:
    data = b"x" * (3 << 20)
    path = tmp_path / "a b+c.bin"
    path.write_bytes(data)
    assert sha256_file(str(path)) == hashlib.sha256(data).hexdigest()

    def never(*_args: object, **_kw: object) -> object:
        raise AssertionError("a file:// URL must not reach the opener")

    assert fetch("file://" + str(tmp_path / "a%20b+c.bin"), never) == data


def test_other_urls_go_through_the_opener_with_the_timeout() -> None:
    seen = {}

    class Answer:
        def read(self) -> bytes:
            return b"ok"

    def opener(url: str, timeout: int) -> Answer:
        seen.update(url=url, timeout=timeout)
        return Answer()

    assert fetch("http://mirror.example/x", opener, timeout=7) == b"ok"
    assert seen == {"url": "http://mirror.example/x", "timeout": 7}
