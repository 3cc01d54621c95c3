"""A task that registers a program's result runs it with kiln_command, never ansible.builtin.command or shell.

ansible.builtin.command can return rc 0 and an empty stdout for a program that wrote its output as it exited
(ansible/ansible#51393; module_utils/kiln/process.py, bench/run_command_race.py). The CI runs of 0d5cc97 and
925bb82 failed on it: a lost iperf3 JSON failed a node's task under a PASS verdict. Any registered result may
be read -- a state (sinfo, squeue before an upgrade drains), a measurement, a message a test asserts -- so
every registered run in roles, playbooks and the molecule scenarios goes through kiln_command, which reads the
pipes to their end. A task that needs an option kiln_command does not have (``creates``) is listed here with
why its output is never read.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from kiln_paths import REPO
from test_no_shell_interpolation import _Loader, walk_tasks

COMMAND = frozenset({"command", "ansible.builtin.command", "ansible.legacy.command",
                     "shell", "ansible.builtin.shell", "ansible.legacy.shell"})
#: (file, task name) -> why its registered result is never read for its output.
ALLOWED = {
    ("roles/munge/tasks/key.yml", "key | Generate the key once on the key host from /dev/urandom"):
        "uses creates (kiln_command has no creates); only changed is read",
    ("molecule/burnin/cases/04-interrupted-swap.yml", "Wait until c3's pair is running in Slurm"):
        "a pipeline polled with until: a lost read is read again a second later",
    ("molecule/burnin/cases/07-node-dies.yml", "Wait until c4's pair is running in Slurm"):
        "a pipeline polled with until: a lost read is read again a second later",
    ("molecule/slurm/side_effect.yml", "Converge kiln-slurm-c3 alone (-vvv)"):
        "the output goes to a file the test reads (the shell redirects it); only rc is registered",
    ("molecule/slurm/side_effect.yml", "Rotate the munge key on every node (-vvv)"):
        "the output goes to a file the test reads (the shell redirects it); only rc is registered",
}


def _files() -> list[Path]:
    files = []
    for pattern in ("roles/*/tasks/**/*.yml", "roles/*/handlers/*.yml", "playbooks/**/*.yml", "molecule/**/*.yml",
                    "tests/molecule/*.yml", "site.yml"):
        files += sorted(REPO.glob(pattern))
    return files


def _registered_commands() -> list[tuple[str, str]]:
    found = []
    for path in _files():
        rel = str(path.relative_to(REPO))
        for task in walk_tasks(yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)):  # noqa: S506 - SafeLoader
            if task.get("register") and COMMAND & set(task):
                found.append((rel, str(task.get("name"))))
    return found


def test_the_walk_sees_the_tree():
    files = {str(p.relative_to(REPO)) for p in _files()}
    assert "roles/burnin/tasks/iperf.yml" in files and "molecule/upgrade/side_effect.yml" in files


def test_every_registered_run_uses_kiln_command():
    offenders = [f"{file}: {name!r}" for file, name in _registered_commands() if (file, name) not in ALLOWED]
    assert offenders == [], ("use kiln_command (ansible.builtin.command can lose the output; "
                             "module_utils/kiln/process.py): " + "; ".join(offenders))


def test_the_allowed_list_names_only_tasks_that_exist():
    assert set(ALLOWED) <= set(_registered_commands()), set(ALLOWED) - set(_registered_commands())


def test_the_rule_catches_a_registered_command():
    tasks = [{"name": "x", "block": [{"name": "read", "ansible.builtin.command": {"argv": ["sinfo"]}, "register": "r"},
                                     {"name": "ok", "kiln_command": {"argv": ["sinfo"]}, "register": "s"}]}]
    assert [t.get("name") for t in walk_tasks(tasks) if t.get("register") and COMMAND & set(t)] == ["read"]
