"""Enroot's per-user directories cannot be squatted (issue 31, defect 9).

The bases (/run/enroot, /var/lib/enroot/{cache,data}) are sticky and world-writable, and enroot
runs `mkdir -p` on its configured paths, which accepts any existing directory: user B could create
`user-<A's uid>` (or a symlink of that name into B's files) before A, and A's containers would be
unpacked where B can swap their root filesystem. enroot.conf now names every per-user path through
roles/enroot/files/kiln-enroot-user-dir, which makes the path the caller's own or refuses it.

The check's logic runs in-process on real directories; then the role's real enroot.conf (rendered
from its template) is evaluated the way enroot evaluates it -- each value through the calling
user's shell, then `mkdir -p` with umask 077 -- as two real unprivileged users (setpriv, as root),
proving that B cannot prepare A's directory, under the old configuration it could, and each user
still gets a private 0700 directory.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import jinja2
import pytest
import yaml

import kiln_playbook

from kiln_paths import REPO
ROLE = REPO / "roles" / "enroot"
HELPER = ROLE / "files" / "kiln-enroot-user-dir"
USER_A, USER_B = 60101, 60102


def _load():
    loader = importlib.machinery.SourceFileLoader("kiln_enroot_user_dir", str(HELPER))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


dirs = _load()
ME = os.getuid()
TRUSTED = (0, ME)


def _base(tmp_path: Path) -> Path:
    base = tmp_path / "data"
    base.mkdir()
    base.chmod(0o1777)
    return base


# ---- the check, in-process on real directories


def test_the_callers_directory_is_created_private_then_accepted(tmp_path: Path) -> None:
    base = _base(tmp_path)
    path = dirs.ensure(str(base), ME, TRUSTED)
    assert path == str(base / f"user-{ME}")
    info = os.lstat(path)
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == ME and stat.S_IMODE(info.st_mode) == 0o700
    assert dirs.ensure(str(base), ME, TRUSTED) == path  # the next call accepts it as it is


def test_a_directory_someone_else_made_is_refused(tmp_path: Path) -> None:
    """B (this process) made user-<A>: A's check refuses it, naming path, owner and the fix."""
    base = _base(tmp_path)
    squat = base / f"user-{USER_A}"
    squat.mkdir(mode=0o777)
    with pytest.raises(dirs.Refused) as err:
        dirs.ensure(str(base), USER_A, TRUSTED)
    msg = str(err.value)
    assert str(squat) in msg and f"uid {ME}" in msg and "not by you" in msg and "rm -rf" in msg


def test_a_symlink_in_place_of_the_directory_is_refused(tmp_path: Path) -> None:
    base = _base(tmp_path)
    elsewhere = tmp_path / "mine"
    elsewhere.mkdir()
    (base / f"user-{ME}").symlink_to(elsewhere)
    with pytest.raises(dirs.Refused, match="is a symlink"):
        dirs.ensure(str(base), ME, TRUSTED)


def test_a_group_or_world_writable_directory_is_refused(tmp_path: Path) -> None:
    base = _base(tmp_path)
    (base / f"user-{ME}").mkdir()
    (base / f"user-{ME}").chmod(0o770)
    with pytest.raises(dirs.Refused, match="writable by group or others.*chmod go-w"):
        dirs.ensure(str(base), ME, TRUSTED)


@pytest.mark.parametrize("how", ["not-sticky", "missing", "symlink", "foreign-owner", "file"])
def test_an_unsafe_base_is_refused(tmp_path: Path, how: str) -> None:
    base = tmp_path / "data"
    if how == "not-sticky":
        base.mkdir()
        base.chmod(0o777)  # anyone could rename a user's directory away
    elif how == "symlink":
        (tmp_path / "real").mkdir()
        base.symlink_to(tmp_path / "real")
    elif how == "file":
        base.write_text("")
    elif how == "foreign-owner":
        base.mkdir()  # owned by this process's uid, which this case does not trust
    with pytest.raises(dirs.Refused) as err:
        dirs.ensure(str(base), ME, (12345,) if how == "foreign-owner" else TRUSTED)
    assert str(base) in str(err.value) or str(tmp_path) in str(err.value)


def test_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _base(tmp_path)
    squat = base / f"user-{os.geteuid()}"
    squat.symlink_to(tmp_path)
    assert dirs.main(["kiln-enroot-user-dir", str(base)]) == dirs.EXIT_REFUSED
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("kiln-enroot-user-dir: refused: ") and str(squat) in out.err
    assert dirs.main(["kiln-enroot-user-dir"]) == dirs.EXIT_USAGE


# ---- the role's real enroot.conf, evaluated as enroot does, as two real users


def _render(runtime: Path, local: Path, helper: Path) -> str:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)  # Ansible's template settings
    env.filters["bool"] = lambda value: value is True or str(value).lower() in ("yes", "true", "1", "on")
    variables = {**defaults, "enroot_runtime_base": str(runtime), "enroot_local_base": str(local),
                 "__enroot_user_dir_helper": str(helper), "__enroot_refused_path": role_vars.get("__enroot_refused_path", "")}
    return env.from_string((ROLE / "templates" / "enroot.conf.j2").read_text()).render(variables)


# What enroot does with enroot.conf before any command (enroot.in, "config"): every ENROOT_ value is
# evaluated by the calling user's bash, then the three per-user paths are made with `mkdir -p` under
# umask 077 (which accepts an existing directory of anyone's). Prints the data path enroot would use.
ENROOT_READS_ITS_CONFIG = r"""
set -euo pipefail
while IFS=$' \t=' read -r key value; do
    if [[ "${key}" =~ ^ENROOT_[[:upper:]_]+$ ]]; then
        export "${key}=$(eval echo "${value}")"
    fi
done < "$1"
(umask 077 && mkdir -p "${ENROOT_CACHE_PATH}" "${ENROOT_DATA_PATH}" "${ENROOT_RUNTIME_PATH}")
printf '%s\n' "${ENROOT_DATA_PATH}"
"""

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="runs processes as two other users: needs root and setpriv")


@pytest.fixture
def node() -> Iterator[Path]:
    """A node's layout under a temporary root that other users can enter: the bases root's, 1777 as the role makes them."""
    root = Path(tempfile.mkdtemp(prefix="kiln-enroot-", dir="/tmp"))
    root.chmod(0o755)
    for sub in ("run/enroot", "lib/enroot/cache", "lib/enroot/data", "libexec"):
        (root / sub).mkdir(parents=True)
    for sub in ("run", "lib", "lib/enroot", "libexec"):
        (root / sub).chmod(0o755)
    for sub in ("run/enroot", "lib/enroot/cache", "lib/enroot/data"):
        (root / sub).chmod(0o1777)
    helper = root / "libexec" / "enroot-user-dir"
    shutil.copy(HELPER, helper)
    helper.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root)


def _as(uid: int, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv],
                          capture_output=True, text=True, timeout=60, check=False, env={"PATH": "/usr/bin:/bin", "HOME": "/"})


def _enroot_config(node: Path, uid: int, conf: str) -> subprocess.CompletedProcess[str]:
    path = node / f"enroot-{uid}.conf"
    path.write_text(conf)
    path.chmod(0o644)
    return _as(uid, "bash", "-c", ENROOT_READS_ITS_CONFIG, "enroot", str(path))


@needs_root
def test_user_b_cannot_prepare_user_as_directory(node: Path) -> None:
    conf = _render(node / "run" / "enroot", node / "lib" / "enroot", node / "libexec" / "enroot-user-dir")
    data = node / "lib" / "enroot" / "data"
    # B prepares A's data directory (theirs, open to them) and a runtime "directory" that is a link to B's files
    # (the kernel's protected_symlinks already stops A following B's link in a sticky directory, where it is on;
    # the check refuses the link by name either way)
    assert _as(USER_B, "mkdir", "-m", "0777", str(data / f"user-{USER_A}")).returncode == 0
    assert _as(USER_B, "mkdir", "-m", "0777", str(node / "run" / "enroot" / f"user-{USER_B}")).returncode == 0
    assert _as(USER_B, "ln", "-s", str(node / "run" / "enroot" / f"user-{USER_B}"),
               str(node / "run" / "enroot" / f"user-{USER_A}")).returncode == 0
    done = _enroot_config(node, USER_A, conf)
    assert done.returncode != 0, done.stdout  # enroot stops before any command
    assert f"{data}/user-{USER_A} is owned by uid {USER_B}, not by you (uid {USER_A})" in done.stderr, done.stderr
    assert "is a symlink" in done.stderr
    assert f"user-{USER_A}" not in done.stdout  # A was never given B's directory
    assert os.listdir(data / f"user-{USER_A}") == []
    # once an administrator removed what B made, A gets their own
    shutil.rmtree(data / f"user-{USER_A}")
    os.unlink(node / "run" / "enroot" / f"user-{USER_A}")
    done = _enroot_config(node, USER_A, conf)
    assert done.returncode == 0 and done.stdout.strip() == f"{data}/user-{USER_A}", done.stderr
    for base in (node / "run" / "enroot", node / "lib" / "enroot" / "cache", data):
        info = os.lstat(base / f"user-{USER_A}")
        assert stat.S_ISDIR(info.st_mode) and info.st_uid == USER_A and stat.S_IMODE(info.st_mode) == 0o700
    # and B can neither remove nor replace it (sticky base), nor write into it
    assert _as(USER_B, "mv", str(data / f"user-{USER_A}"), str(data / "stolen")).returncode != 0
    assert _as(USER_B, "touch", str(data / f"user-{USER_A}" / "x")).returncode != 0
    assert _enroot_config(node, USER_A, conf).returncode == 0  # the next run accepts A's own


@needs_root
def test_the_old_configuration_let_user_b_prepare_it(node: Path) -> None:
    """The configuration before the fix: `user-$(id -u)` under the same bases, no check."""
    old = "\n".join(f"{key} {base}/user-$(id -u)" for key, base in (
        ("ENROOT_RUNTIME_PATH", node / "run" / "enroot"), ("ENROOT_CACHE_PATH", node / "lib" / "enroot" / "cache"),
        ("ENROOT_DATA_PATH", node / "lib" / "enroot" / "data"))) + "\n"
    data = node / "lib" / "enroot" / "data"
    assert _as(USER_B, "mkdir", "-m", "0777", str(data / f"user-{USER_A}")).returncode == 0
    done = _enroot_config(node, USER_A, old)
    assert done.returncode == 0 and done.stdout.strip() == f"{data}/user-{USER_A}"
    assert os.lstat(data / f"user-{USER_A}").st_uid == USER_B  # A would unpack into B's directory


# ---- the role installs the check and the configuration naming it (ansible-playbook, paths under a temporary root)


@pytest.mark.skipif(kiln_playbook.ANSIBLE_PLAYBOOK is None, reason="needs ansible-playbook")
def test_the_role_installs_the_check_and_names_it_in_enroot_conf(tmp_path: Path) -> None:
    root = tmp_path / "node"
    hooks = root / "usr-share-enroot-hooks.d"
    hooks.mkdir(parents=True)
    for hook in ("50-slurm-pmi.sh", "50-slurm-pytorch.sh"):
        (hooks / hook).write_text("#!/bin/sh\n")
    variables = {
        "kiln_stack": {"enroot": "3.5.0"}, "enroot_runtime_base": str(root / "run" / "enroot"),
        "enroot_local_base": str(root / "var" / "lib" / "enroot"),
        "__enroot_user_dir_helper": str(root / "libexec" / "kiln" / "enroot-user-dir"),
        "__enroot_sysconf_dir": str(root / "etc" / "enroot"), "__enroot_extra_hooks_dir": str(hooks),
        "__enroot_tmpfiles_file": str(root / "kiln-enroot.conf"),
        "__enroot_environ_file": str(root / "etc" / "enroot" / "environ.d" / "50-nccl-rdma.env"),
    }
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    play = [{"name": "enroot configure", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "tasks": [{"name": "Configure", "ansible.builtin.include_role": {"name": "enroot", "tasks_from": "configure"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    runs = [kiln_playbook.run_playbook("-i", "localhost,", str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}",
                                       "-e", f"ansible_python_interpreter={sys.executable}", tmp_path=tmp_path)
            for _ in range(2)]
    assert runs[0].returncode == 0, runs[0].stdout[-3000:] + runs[0].stderr
    assert "changed=0" in runs[1].stdout, runs[1].stdout[-3000:]
    helper = root / "libexec" / "kiln" / "enroot-user-dir"
    assert helper.read_text() == HELPER.read_text() and stat.S_IMODE(helper.stat().st_mode) == 0o755
    conf = (root / "etc" / "enroot" / "enroot.conf").read_text()
    data = root / "var" / "lib" / "enroot" / "data"
    assert f"ENROOT_DATA_PATH           $({helper} {data} || echo /dev/null/kiln-refused-see-the-message-above)" in conf
    assert stat.S_IMODE(data.stat().st_mode) == 0o1777 and data.stat().st_uid == os.getuid()
