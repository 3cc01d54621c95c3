"""The test bed's podman connection (tests/harness/connection_plugins/podman.py): pipelining.

Modules travel on the standard input of one ``podman exec -i``; commands without input and
file transfers behave as the collection's connection does.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kiln_loader import load_source

PLUGIN = Path(__file__).resolve().parents[2] / "tests" / "harness" / "connection_plugins" / "podman.py"
plugin = load_source("kiln_testbed_podman_connection", PLUGIN)


class Recorder(plugin.Connection):  # type: ignore[name-defined,misc]
    """The plugin with podman itself replaced by a recorder."""

    def __init__(self) -> None:  # no play context needed for these calls
        self._container_id = "kiln-node"
        self._connected = False
        self._mount_point = None
        self.user = None
        self.calls: list[tuple[Any, Any, Any, bool]] = []
        self.become = None

    def _podman(self, cmd: Any, cmd_args: Any = None, in_data: Any = None,
                use_container_id: bool = True) -> tuple[int, bytes, bytes]:
        self.calls.append((cmd, cmd_args, in_data, use_container_id))
        return 0, b"/mnt/kiln-node\n" if cmd == "mount" else b"{}", b""

    def get_option(self, name: str) -> Any:
        return {"pipelining": True, "podman_executable": "podman", "podman_extra_args": ""}[name]


def test_a_module_goes_on_stdin_of_one_exec() -> None:
    conn = Recorder()
    conn._connect()
    rc, _, _ = conn.exec_command("/bin/sh -c '/usr/bin/python3 && sleep 0'", in_data=b"MODULE")
    assert rc == 0
    assert conn.calls == [(["exec", "-i"], ["/bin/sh", "-c", "/usr/bin/python3 && sleep 0"], b"MODULE", True)]


def test_without_input_it_is_the_collections_exec_and_nothing_is_mounted() -> None:
    conn = Recorder()
    conn._connect()
    conn.exec_command("echo ~")
    assert conn.calls == [(["exec"], ["echo", "~"], None, True)]


def test_file_transfers_mount_the_container_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = Recorder()
    conn._connect()
    copied: list[tuple[bytes, bytes]] = []
    monkeypatch.setattr("shutil.copyfile", lambda a, b: copied.append((a, b)))
    monkeypatch.setattr("os.listdir", lambda path: ["etc"])
    src = tmp_path / "f"
    src.write_text("x")
    conn.put_file(str(src), "/tmp/f")
    conn.put_file(str(src), "/tmp/g")
    assert [c[0] for c in conn.calls] == ["mount"]
    assert [dest for _, dest in copied] == [b"/mnt/kiln-node/tmp/f", b"/mnt/kiln-node/tmp/g"]


def test_the_plugin_claims_pipelining_and_the_short_name() -> None:
    assert plugin.Connection.has_pipelining is True
    assert plugin.Connection.transport == "podman"
    assert "name: podman" in plugin.DOCUMENTATION and "pipelining:" in plugin.DOCUMENTATION
