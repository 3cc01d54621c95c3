"""The test bed's podman connection (tests/harness/connection_plugins/podman.py): pipelining.

Modules travel on the standard input of one process: nsenter into the running container's
namespaces (root), else one ``podman exec -i``; without nsenter, commands without input and
file transfers behave as the collection's connection does.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import os
import subprocess

import pytest

from kiln_loader import load_source
from kiln_paths import REPO

PLUGIN = REPO / "tests" / "harness" / "connection_plugins" / "podman.py"
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
        return {"pipelining": True, "podman_executable": "podman", "podman_extra_args": "",
                "nsenter": self.nsenter}[name]

    nsenter = False


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


LIMITS = """Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max stack size            8388608              unlimited            bytes
Max processes             32768                32768                processes
Max open files            20000                20000                files
Max locked memory         8388608              8388608              bytes
Max nice priority         0                    0
"""


def test_limits_are_read_as_the_container_sets_them() -> None:
    assert plugin.parse_limits(LIMITS) == {
        "RLIMIT_STACK": [8388608, -1], "RLIMIT_NPROC": [32768, 32768], "RLIMIT_NOFILE": [20000, 20000],
        "RLIMIT_MEMLOCK": [8388608, 8388608]}
    assert plugin.parse_limits("Max locked memory  lots  of\ngarbage") == {}


def test_start_time_and_namespaces_of_this_process() -> None:
    assert plugin.proc_start_time(os.getpid()) is not None
    assert plugin.proc_start_time(2 ** 22 + 1) is None  # no such pid
    assert plugin.namespace_flags(os.getpid()) == []  # nothing differs from itself


class NsRecorder(Recorder):
    """nsenter on: the container's record is given, the process launch recorded."""

    nsenter = True

    def __init__(self, target: dict[str, Any]) -> None:
        super().__init__()
        self.target = target
        self.runs: list[tuple[list[str], Any]] = []

    def _ns_target(self) -> dict[str, Any] | None:
        return self.target

    def _ns_run(self, target: dict[str, Any], argv: list[str], in_data: Any) -> tuple[int, bytes, bytes]:
        self.runs.append((argv, in_data))
        return 0, b"content", b""


def test_with_nsenter_a_module_runs_in_the_container_without_podman(tmp_path: Path) -> None:
    conn = NsRecorder({"pid": 42})
    conn._connect()
    assert conn.exec_command("/bin/sh -c '/usr/bin/python3 && sleep 0'", in_data=b"MODULE")[0] == 0
    src = tmp_path / "f"
    src.write_bytes(b"DATA")
    conn.put_file(str(src), "/tmp/a b")
    conn.fetch_file("/etc/hostname", str(tmp_path / "out"))
    assert conn.calls == []  # podman never ran
    assert conn.runs == [(["/bin/sh", "-c", "/usr/bin/python3 && sleep 0"], b"MODULE"),
                         (["/bin/sh", "-c", 'cat > "$1"', "kiln-put", "/tmp/a b"], b"DATA"),
                         (["cat", "--", "/etc/hostname"], None)]
    assert (tmp_path / "out").read_bytes() == b"content"


def test_nsenter_runs_with_the_containers_environment_and_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class Proc:
        returncode = 0

        def communicate(self, input: bytes) -> tuple[bytes, bytes]:  # noqa: A002 - subprocess's name
            seen["input"] = input
            return b"out", b""

    def popen(argv: list[str], **kwargs: Any) -> Proc:
        seen["argv"], seen["env"], seen["preexec"] = argv, kwargs["env"], kwargs["preexec_fn"]
        return Proc()

    monkeypatch.setattr(subprocess, "Popen", popen)
    conn = NsRecorder({})
    target = {"pid": 7, "flags": ["-m", "-p"], "env": {"PATH": "/usr/bin", "HOME": "/root"},
              "limits": {"RLIMIT_MEMLOCK": [8388608, 8388608]}, "nsenter": "/usr/bin/nsenter"}
    assert plugin.Connection._ns_run(conn, target, ["true"], None) == (0, b"out", b"")
    assert seen["argv"] == ["/usr/bin/nsenter", "-t", "7", "-m", "-p", "-r", "-w", "--", "true"]
    assert seen["env"] == {"PATH": "/usr/bin", "HOME": "/root"} and seen["input"] == b""
    applied: list[tuple[int, tuple[int, int]]] = []
    monkeypatch.setattr(plugin.resource, "setrlimit", lambda kind, pair: applied.append((kind, pair)))
    seen["preexec"]()
    assert applied == [(plugin.resource.RLIMIT_MEMLOCK, (8388608, 8388608))]


def test_without_root_or_as_another_user_it_falls_back_to_podman_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = Recorder()
    conn.nsenter = True
    conn.user = "slurm"
    assert conn._ns_target() is None
    conn.user = None
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert conn._ns_target() is None


def test_a_stopped_container_falls_back_to_podman_exec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    class Stopped(Recorder):
        nsenter = True

        def _podman(self, cmd: Any, cmd_args: Any = None, in_data: Any = None,
                    use_container_id: bool = True) -> tuple[int, bytes, bytes]:
            self.calls.append((cmd, cmd_args, in_data, use_container_id))
            return 0, b"0\t[]\n", b""  # podman inspect of a stopped container: Pid 0

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(plugin, "_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(plugin.shutil, "which", lambda name: "/usr/bin/nsenter")
    conn = Stopped()
    assert conn._ns_target() is None
    assert conn.calls[0][0][0] == "inspect"


@pytest.mark.parametrize("in_data", [None, b"MODULE"])
def test_a_container_that_is_down_is_unreachable_as_a_dead_ssh_host(in_data: Any) -> None:
    class Down(Recorder):
        def _podman(self, cmd: Any, cmd_args: Any = None, in_data: Any = None,
                    use_container_id: bool = True) -> tuple[int, bytes, bytes]:
            self.calls.append((cmd, cmd_args, in_data, use_container_id))
            if cmd[:2] == ["container", "inspect"]:
                return 0, b"false\n", b""
            return 255, b"", b"Error: can only create exec sessions on running containers: container state improper"

    conn = Down()
    conn._connect()
    with pytest.raises(plugin.AnsibleConnectionFailure, match="kiln-node is not running"):
        conn.exec_command("/bin/sh -c true", in_data=in_data)
    assert conn.calls[-1][0][:2] == ["container", "inspect"]


def test_a_command_that_prints_the_same_words_in_a_running_container_is_only_a_failure() -> None:
    class Running(Recorder):
        def _podman(self, cmd: Any, cmd_args: Any = None, in_data: Any = None,
                    use_container_id: bool = True) -> tuple[int, bytes, bytes]:
            self.calls.append((cmd, cmd_args, in_data, use_container_id))
            if cmd[:2] == ["container", "inspect"]:
                return 0, b"true\n", b""
            return 255, b"", b"docker: Error: no such container web"

    conn = Running()
    conn._connect()
    assert conn.exec_command("docker start web", in_data=b"x")[0] == 255


def test_only_podmans_own_error_codes_hint_at_a_node_that_is_down() -> None:
    assert not plugin.not_running(1, b"ls: cannot access 'x': No such file or directory")
    assert not plugin.not_running(0, b"container state improper")  # rc 0: the command ran
    assert not plugin.not_running(2, b"Error: no such container web")  # the command's own exit code
    assert plugin.not_running(125, b'Error: no container with name or ID "kiln-node" found: no such container')
    assert plugin.not_running(255, b"Error: can only create exec sessions on running containers: "
                                   b"container state improper")


def test_the_cached_record_is_used_while_its_process_lives(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import json
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(plugin, "_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(plugin.shutil, "which", lambda name: "/usr/bin/nsenter")
    live = {"pid": os.getpid(), "start": plugin.proc_start_time(os.getpid()), "flags": [], "env": {},
            "limits": {}, "nsenter": "/usr/bin/nsenter"}
    (tmp_path / "kiln-node.json").write_text(json.dumps(live))
    conn = Recorder()
    conn.nsenter = True
    assert conn._ns_target() == live and conn.calls == []
    (tmp_path / "kiln-node.json").write_text(json.dumps(dict(live, start="1")))  # the container restarted
    assert conn._ns_target() is None  # looked up again: the recorder's inspect answers nothing usable
    assert conn.calls[0][0][0] == "inspect"
