"""docker_engine's daemon.json merge, run for real (ansible-playbook on localhost, the file under tmp_path).

The operator wins (issue 31, defect 8): the file's data-root, registry-mirrors, exec-opts, the nvidia runtime
nvidia-ctk wrote and any key of their own stay unless the inventory sets them; kiln adds its defaults where the
file lacks them and the CDI flag the stack needs, and says what it left alone; a second run (the same content
formatted differently) writes nothing and restarts nothing; a symlink is followed to its target and stays a link,
a dangling one is refused; a file that is not JSON, or JSON that is not an object, stops the role naming the file
and is left as it was. dockerd is a stand-in on PATH whose --help has no --validate (as Debian's 20.10), so no
validation command runs.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

import kiln_playbook

pytestmark = pytest.mark.skipif(kiln_playbook.ANSIBLE_PLAYBOOK is None, reason="needs ansible-playbook")

from kiln_paths import REPO as ROOT


def _run(tmp_path: Path, daemon: Path, *args: str, tasks_from: str = "daemon", **extra: object) -> tuple[int, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "dockerd").write_text("#!/bin/sh\necho 'Usage: dockerd [OPTIONS]'\n")
    (bin_dir / "dockerd").chmod(0o755)
    play = [{
        "name": "daemon.json merge", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [{"name": "Merge", "ansible.builtin.include_role": {"name": "docker_engine", "tasks_from": tasks_from}}],
    }]
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    # extra vars: they outrank the role's vars/main.yml, where the file's path lives
    variables = {"kiln_stack": {"os": "debian-12", "container_engine": {"kind": "docker-ce", "version": "27.5.1"},
                                "cdi": True},
                 "__docker_engine_daemon_json": str(daemon), "docker_engine_service_enabled": False, **extra}
    extra_file = tmp_path / "extra.json"
    extra_file.write_text(json.dumps(variables))
    env_path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    old = os.environ["PATH"]
    real = Path("/etc/docker/daemon.json")
    before = real.read_bytes() if real.exists() else None
    os.environ["PATH"] = env_path
    try:
        done = kiln_playbook.run_playbook("-i", "localhost,", str(path), "-e", f"@{extra_file}",
                                          "-e", f"ansible_python_interpreter={sys.executable}", *args,
                                          tmp_path=tmp_path)
    finally:
        os.environ["PATH"] = old
    assert (real.read_bytes() if real.exists() else None) == before, "the test touched this machine's daemon.json"
    return done.returncode, done.stdout + done.stderr


def _changed(out: str) -> int:
    return int(out.split("changed=")[1].split()[0])


RESTART = "RUNNING HANDLER [docker_engine : Restart the Docker engine]"
NVIDIA_CTK = {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
OPERATOR = {
    **NVIDIA_CTK,
    "data-root": "/raid/docker",
    "registry-mirrors": ["https://mirror.site.example"],
    "exec-opts": ["native.cgroupdriver=cgroupfs", "native.umask=normal"],
    "max-concurrent-downloads": 5,
    "log-opts": {"max-size": "10m", "labels": "x"},
}


def test_the_operators_settings_stay_kiln_fills_the_rest_then_nothing_changes(tmp_path: Path) -> None:
    """Defect 8: data-root, registry-mirrors and exec-opts were replaced by the role's defaults."""
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps(OPERATOR))
    rc, out = _run(tmp_path, daemon, docker_engine_daemon_config={"debug": True})
    assert rc == 0, out
    merged = json.loads(daemon.read_text())
    for key, value in OPERATOR.items():
        assert merged[key] == value, key
    assert merged["features"] == {"cdi": True}  # Docker 27 needs the opt-in flag: kiln owns it
    assert merged["default-ulimits"]["memlock"] == {"Name": "memlock", "Soft": -1, "Hard": -1}  # missing: added
    assert merged["debug"] is True and merged["live-restore"] is True
    assert daemon.read_text().startswith('{\n    "') and daemon.read_text().endswith("}\n")  # nvidia-ctk's layout
    assert f"LEFT ALONE in {daemon}:" in out and "- 'exec-opts: kept the file" in out and "- 'log-opts: kept the file" in out
    assert RESTART in out
    # the same content written differently (nvidia-ctk rewrites with its own spacing) is no change: no write, no restart
    daemon.write_text(json.dumps(merged, indent=1))
    before = daemon.stat()
    rc, again = _run(tmp_path, daemon, docker_engine_daemon_config={"debug": True})
    assert rc == 0 and _changed(again) == 0, again
    assert RESTART not in again
    assert (daemon.stat().st_ino, daemon.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_what_the_inventory_sets_explicitly_wins(tmp_path: Path) -> None:
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps(OPERATOR))
    rc, out = _run(tmp_path, daemon, docker_engine_data_root="/data/docker", docker_engine_cgroup_driver="systemd",
                   docker_engine_registry_mirrors=["https://registry.example.internal"], docker_engine_log_max_size="50m")
    assert rc == 0, out
    merged = json.loads(daemon.read_text())
    assert merged["data-root"] == "/data/docker"
    assert merged["registry-mirrors"] == ["https://registry.example.internal"]
    assert merged["exec-opts"] == ["native.cgroupdriver=systemd", "native.umask=normal"]  # only the driver option
    assert merged["log-opts"] == {"max-size": "50m", "labels": "x"}
    assert merged["runtimes"] == NVIDIA_CTK["runtimes"] and merged["max-concurrent-downloads"] == 5


def test_a_symlinked_daemon_json_is_followed_and_stays_a_link(tmp_path: Path) -> None:
    store = tmp_path / "raid" / "conf"
    store.mkdir(parents=True)
    real = store / "daemon.json"
    real.write_text(json.dumps({"data-root": "/raid/docker"}))
    real.chmod(0o640)
    daemon = tmp_path / "daemon.json"
    daemon.symlink_to(real)
    rc, out = _run(tmp_path, daemon)
    assert rc == 0, out
    assert daemon.is_symlink() and os.readlink(daemon) == str(real)
    merged = json.loads(real.read_text())
    assert merged["data-root"] == "/raid/docker" and merged["live-restore"] is True
    assert oct(real.stat().st_mode & 0o7777) == oct(0o640)  # the target keeps its mode
    assert not [p for p in store.iterdir() if p.name.startswith(".kiln-")]


def test_a_dangling_symlink_is_refused_and_kept(tmp_path: Path) -> None:
    daemon = tmp_path / "daemon.json"
    daemon.symlink_to(tmp_path / "unmounted" / "daemon.json")
    rc, out = _run(tmp_path, daemon)
    assert rc != 0 and str(daemon) in out and "does not exist" in out and "Traceback" not in out, out
    assert daemon.is_symlink() and not (tmp_path / "unmounted").exists()


def test_check_mode_writes_nothing_and_shows_the_change(tmp_path: Path) -> None:
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps(OPERATOR))
    before = daemon.read_bytes()
    rc, out = _run(tmp_path, daemon, "--check", "--diff")
    assert rc == 0, out
    assert daemon.read_bytes() == before
    assert '+    "live-restore": true,' in out


def test_a_null_operator_key_removes_it(tmp_path: Path) -> None:
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps({"debug": True, "max-concurrent-downloads": 5}))
    rc, out = _run(tmp_path, daemon, docker_engine_daemon_config={"debug": None})
    assert rc == 0, out
    merged = json.loads(daemon.read_text())
    assert "debug" not in merged and merged["max-concurrent-downloads"] == 5


@pytest.mark.parametrize("content", ['{"runtimes": {', '["not", "an", "object"]', "nvidia: yes\n",
                                     '{"debug": true, "debug": false}'])
def test_a_file_kiln_cannot_read_stops_the_role_and_is_left_alone(tmp_path: Path, content: str) -> None:
    daemon = tmp_path / "daemon.json"
    daemon.write_text(content)
    rc, out = _run(tmp_path, daemon)
    assert rc != 0
    assert str(daemon) in out and ("not valid JSON" in out or "not an object" in out), out
    assert "on localhost" in out and "then re-run" in out
    assert daemon.read_text() == content
    assert "Traceback" not in out


def test_a_missing_file_is_created(tmp_path: Path) -> None:
    daemon = tmp_path / "etc" / "docker" / "daemon.json"
    rc, out = _run(tmp_path, daemon, kiln_stack={"os": "debian-12", "container_engine": "distro"})
    assert rc == 0, out
    merged = json.loads(daemon.read_text())
    assert "features" not in merged and merged["exec-opts"] == ["native.cgroupdriver=systemd"]
    assert merged["log-opts"] == {"max-size": "100m", "max-file": "3"} and "data-root" not in merged
    assert oct(daemon.stat().st_mode & 0o7777) == oct(0o644)


@pytest.mark.parametrize(("ulimits", "named"), [
    ({"memlock": {"soft": "unlimited", "hard": -1}}, "memlock has soft unlimited"),
    ({"memlock": {"soft": 4.5, "hard": 8}}, "memlock has soft 4.5"),
    ({"memlock": {"soft": True, "hard": 8}}, "memlock has soft True"),
    ({"stack": {"soft": 10, "hard": 5}}, "stack has soft 10 above hard 5"),
    ({"nofile": 1024}, "nofile is 1024, not {soft, hard}"),
    ({"memlock": {"soft": -2, "hard": -1}}, "memlock has soft -2"),
])
def test_bad_default_ulimits_are_refused_naming_the_limit(tmp_path: Path, ulimits: dict, named: str) -> None:
    """A limit that is not a whole number would be rendered as 0 by `| int`: refused before any change."""
    rc, out = _run(tmp_path, tmp_path / "daemon.json", tasks_from="validate", docker_engine_default_ulimits=ulimits)
    assert rc != 0 and "docker_engine_default_ulimits" in out and named in out, out
    assert not (tmp_path / "daemon.json").exists()


def test_good_default_ulimits_pass_validation(tmp_path: Path) -> None:
    rc, out = _run(tmp_path, tmp_path / "daemon.json", tasks_from="validate",
                   docker_engine_default_ulimits={"memlock": {"soft": -1, "hard": -1}, "stack": {"soft": 5, "hard": 10}})
    assert rc == 0, out
