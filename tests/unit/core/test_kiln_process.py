"""module_utils/kiln/process.py and library/kiln_command.py: a program's whole output, even what it wrote as it exited.

ansible.builtin.command loses the output of a program that writes just as run_command's one-second select
times out (ansible/ansible#51393): on the test bed ``sleep 2; echo`` came back empty in a third of the runs
(bench/run_command_race.py). These tests run the programs that land in that window -- silent for a
whole second, then output and exit -- and require every byte, through the function and through the real
module in a real ansible-playbook.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from kiln.process import run_argv
from kiln_playbook import ANSIBLE_PLAYBOOK, run_playbook

LATE = [sys.executable, "-c", "import sys, time; time.sleep(1.0); sys.stdout.write('x' * 70000); "
        "sys.stderr.write('done\\n')"]


def test_output_written_as_the_program_exits_is_kept():
    for _ in range(3):
        result = run_argv(LATE)
        assert result["rc"] == 0
        assert result["stdout"] == "x" * 70000  # more than one pipe buffer, written at the end
        assert result["stderr"] == "done"


def test_keys_and_values_of_ansible_builtin_command():
    result = run_argv([sys.executable, "-c", "print('a'); print('b\\n'); import sys; sys.exit(3)"])
    assert set(result) == {"cmd", "rc", "stdout", "stderr", "stdout_lines", "stderr_lines", "start", "end", "delta"}
    assert result["rc"] == 3
    assert result["stdout"] == "a\nb" and result["stdout_lines"] == ["a", "b"]  # trailing newlines removed
    assert result["cmd"][0] == sys.executable
    assert result["delta"].startswith("0:00:")


def test_argv_is_never_a_shell_and_stdin_is_sent():
    result = run_argv(["echo", "$(id)", ";", "ls"])
    assert result["stdout"] == "$(id) ; ls"
    assert run_argv(["cat"], stdin="secret line\n")["stdout"] == "secret line"
    assert run_argv(["cat"])["stdout"] == ""  # /dev/null, never the caller's stdin


def test_a_program_that_cannot_start_is_a_result_not_an_exception(tmp_path: Path):
    missing = run_argv(["/nonexistent/kiln-tool", "-x"])
    assert missing["rc"] == 127 and "not found" in missing["stderr"]
    script = tmp_path / "tool"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o600)
    denied = run_argv([str(script)])
    assert denied["rc"] == 126 and "cannot run" in denied["stderr"]
    with pytest.raises(ValueError):
        run_argv([])


def test_undecodable_bytes_are_replaced_never_raised():
    result = run_argv([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe end')"])
    assert result["stdout"].startswith("ok ") and result["stdout"].endswith(" end")


@pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")
def test_the_module_in_a_playbook_keeps_late_output_and_fails_like_command(tmp_path: Path):
    play = [{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [
            {"name": "late", "kiln_command": {"argv": LATE}, "register": "late", "loop": [1, 2, 3]},
            {"name": "fails", "kiln_command": {"argv": [sys.executable, "-c", "import sys; print('why'); sys.exit(2)"]},
             "register": "fails", "failed_when": False},
            {"name": "stdin", "kiln_command": {"argv": ["cat"], "stdin": "kiln-secret-4711"}, "register": "piped"},
            {"name": "check mode skips it", "kiln_command": {"argv": ["touch", str(tmp_path / "touched")]},
             "register": "checked", "check_mode": True},
            {"name": "save", "ansible.builtin.copy": {
                "dest": str(tmp_path / "r.json"), "mode": "0600",
                "content": "{{ {'late': late.results | map(attribute='stdout') | map('length') | list,"
                           " 'fails': fails, 'checked': checked, 'piped': piped} | to_json }}"}},
        ],
    }]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    proc = run_playbook("-i", "localhost,", str(tmp_path / "play.yml"),
                        "-e", f"ansible_python_interpreter={sys.executable}", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["late"] == [70000, 70000, 70000]
    assert data["fails"]["rc"] == 2 and data["fails"]["stdout"] == "why"
    assert data["fails"]["msg"] == "non-zero return code"
    assert data["checked"].get("skipped") is True and not (tmp_path / "touched").exists()
    assert data["piped"]["stdout"] == "kiln-secret-4711"  # stdin reaches the program

