"""nvidia_repos and nvidia_container_toolkit: per-repository / per-runtime work done by looped tasks.

The shape (read from the task files): no include per repository or per runtime; every key is judged
before any key or source is written; a restart is notified only for the runtimes whose configuration
changed (a notify in a loop fires the handlers of *every* item once any item changed, so the notifying
task loops over the changed ones only).

The behaviour (real ansible-playbook on localhost, everything under tmp_path): the key tasks fetch
http:// and file:// keys, accept the pinned ones and refuse a wrong pin naming the repository; the
runtime tasks configure the runtimes present, with debug stand-ins for the restart handlers.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import kiln_playbook

from kiln_paths import REPO as ROOT
REPOS = ROOT / "roles" / "nvidia_repos"
TOOLKIT = ROOT / "roles" / "nvidia_container_toolkit"


def _tasks(path: Path) -> list[dict]:
    return yaml.safe_load(path.read_text())


def _module(task: dict) -> str:
    return next(k for k in task if k.startswith("ansible.builtin.") or k in ("kiln_files", "kiln_command"))


def _walk(tasks: list[dict]) -> Iterator[dict]:
    for task in tasks:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _walk(task.get(key) or [])


# --------------------------------------------------------------------------
# nvidia_repos: the shape


def test_repositories_are_configured_by_one_include():
    include = next(t for t in _tasks(REPOS / "tasks" / "main.yml") if "ansible.builtin.include_tasks" in t)
    assert include["ansible.builtin.include_tasks"] == "repo-{{ __nvidia_repos_backend }}.yml"
    assert "loop" not in include and "with_items" not in include
    assert include["when"] == "__nvidia_repos_list | length > 0"


def test_key_tasks_loop_and_judge_every_key_before_keeping_any():
    key = _tasks(REPOS / "tasks" / "key.yml")
    modules = [_module(t) for t in key]
    assert modules == ["ansible.builtin.uri", "ansible.builtin.slurp", "kiln_command",
                       "ansible.builtin.assert", "ansible.builtin.set_fact"]
    for task in key[:3]:
        assert "__nvidia_repos_list" in task["loop"], task["name"]
        assert task["loop_control"]["loop_var"] == "__nvidia_repos_item"
        assert task["check_mode"] is False, task["name"]  # keys are read in check mode too
    assert "rejectattr('key_url', 'match', 'file://')" in key[0]["loop"]
    assert "selectattr('key_url', 'match', 'file://')" in key[1]["loop"]
    assert key[0]["ansible.builtin.uri"]["return_content"] is True
    check = key[3]
    assert check["loop"] == "{{ __nvidia_repos_show.results }}"
    verdict = " ".join(check["vars"]["__nvidia_repos_verdict"].split())
    for arg in ("kiln_repo_key_verdict(__nvidia_repos_item.fingerprint", "repo=__nvidia_repos_item.name",
                "url=__nvidia_repos_item.key_url", "variable=__nvidia_repos_item.fingerprint_var",
                "rc=__nvidia_repos_shown.rc", "stderr=__nvidia_repos_shown.stderr"):
        assert arg in verdict, arg
    assert key[4]["ansible.builtin.set_fact"] == {"__nvidia_repos_keys": "{{ __nvidia_repos_fetched }}"}
    assert "when" not in key[4]


@pytest.mark.parametrize("backend, trusting", [
    ("apt", ["kiln_files"]),
    ("dnf", ["ansible.builtin.copy", "ansible.builtin.rpm_key", "ansible.builtin.yum_repository"]),
])
def test_backends_write_and_trust_in_loops_after_the_key_check(backend, trusting):
    tasks = _tasks(REPOS / "tasks" / f"repo-{backend}.yml")
    check = next(i for i, t in enumerate(tasks) if t.get("ansible.builtin.include_tasks") == "key.yml")
    later = tasks[check + 1:]
    assert [_module(t) for t in later] == trusting  # no include after the check, nothing before it trusts
    for task in later:
        if "kiln_files" in task:  # one task for every repository's key and sources (no loop needed)
            files = task["vars"]["__nvidia_repos_files"]
            assert "{%- for repo in __nvidia_repos_list -%}" in files
            assert "'content': __nvidia_repos_keys[repo.name]" in files
            assert "template_vars={'__nvidia_repos_item': repo}" in files
            continue
        assert "loop" in task, task["name"]
    for task in tasks:
        if "ansible.builtin.copy" in task:
            assert task["ansible.builtin.copy"]["content"] == "{{ __nvidia_repos_keys[__nvidia_repos_item.name] }}"


# --------------------------------------------------------------------------
# nvidia_container_toolkit: the shape


def test_toolkit_has_no_per_runtime_include():
    tasks = list(_walk(_tasks(TOOLKIT / "tasks" / "main.yml")))
    assert not any("ansible.builtin.include_tasks" in t for t in tasks)
    assert not (TOOLKIT / "tasks" / "runtime.yml").exists() and not (TOOLKIT / "tasks" / "cdi.yml").exists()
    # one search for every runtime's binary (a find, not a stat per runtime)
    look = next(t for t in tasks if t.get("register") == "__nvidia_container_toolkit_binaries")
    assert "ansible.builtin.find" in look and "loop" not in look
    assert "nvidia_container_toolkit_runtimes" in look["vars"]["__nvidia_container_toolkit_wanted"]
    report = next(t for t in tasks if t.get("name") == "Report the runtimes that are not installed")
    assert "'SKIPPED '" in report["ansible.builtin.debug"]["msg"]
    assert "': not installed on this host'" in report["ansible.builtin.debug"]["msg"]


def test_restarts_are_notified_only_for_changed_runtimes():
    tasks = list(_walk(_tasks(TOOLKIT / "tasks" / "main.yml")))
    notifying = [t for t in tasks if "notify" in t]
    assert len(notifying) == 1
    task = notifying[0]
    assert task["notify"] == "Restart {{ __nvidia_container_toolkit_runtime }}"
    assert task["loop"] == "{{ __nvidia_container_toolkit_after.results | selectattr('changed') | list }}"
    after = next(t for t in tasks if t.get("register") == "__nvidia_container_toolkit_after")
    assert "!=" in after["changed_when"]
    handlers = {h["name"] for h in _tasks(TOOLKIT / "handlers" / "main.yml")}
    choices = yaml.safe_load((TOOLKIT / "meta" / "argument_specs.yml").read_text())[
        "argument_specs"]["main"]["options"]["nvidia_container_toolkit_runtimes"]["choices"]
    assert handlers == {f"Restart {name}" for name in choices}


# --------------------------------------------------------------------------
# real ansible-playbook on localhost

needs_ansible = pytest.mark.skipif(kiln_playbook.ANSIBLE_PLAYBOOK is None, reason="needs ansible-playbook")
needs_gpg = pytest.mark.skipif(not shutil.which("gpg"), reason="needs gpg (apt-get install gnupg)")


def _play(tmp_path: Path, name: str, play: dict) -> Path:
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


def _local(**extra) -> dict:
    return {"hosts": "localhost", "connection": "local", "gather_facts": False,
            "vars": {"ansible_python_interpreter": sys.executable, **extra}}


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Iterator[dict[str, object]]:
    """Two throwaway public keys, served over http:// from their directory."""
    work = tmp_path_factory.mktemp("repo-keys")
    home = work / "home"
    home.mkdir(mode=0o700)
    env = dict(os.environ, GNUPGHOME=str(home))
    gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    out: dict[str, object] = {"dir": work}
    try:
        for name in ("a", "b"):
            uid = f"kiln loop test {name} <{name}@invalid>"
            subprocess.run(gpg + ["--quick-gen-key", uid, "ed25519", "sign", "never"], env=env, check=True,
                           capture_output=True)
            listing = subprocess.run(["gpg", "--batch", "--with-colons", "--list-keys", uid], env=env, check=True,
                                     capture_output=True, text=True).stdout
            out[f"{name}_fpr"] = next(ln.split(":")[9] for ln in listing.splitlines() if ln.startswith("fpr:"))
            text = subprocess.run(["gpg", "--batch", "--armor", "--export", uid], env=env, check=True,
                                  capture_output=True, text=True).stdout
            (work / f"{name}+key.asc").write_text(text)
            out[name] = text
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True, check=False)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(work))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    out["http"] = f"http://127.0.0.1:{server.server_port}"
    try:
        yield out
    finally:
        server.shutdown()
        server.server_close()


def _key_play(tmp_path: Path, keys: dict, pin_b: str) -> Path:
    """cuda's key over http:// (a percent-encoded '+'), the toolkit's as file:// (a literal '+')."""
    repos = [
        {"name": "cuda", "key_url": f"{keys['http']}/a%2Bkey.asc", "fingerprint": keys["a_fpr"],
         "fingerprint_var": "kiln_repos.cuda.fingerprint"},
        {"name": "nvidia-container-toolkit", "key_url": f"file://{keys['dir']}/b+key.asc", "fingerprint": pin_b,
         "fingerprint_var": "kiln_repos.container_toolkit.fingerprint"},
    ]
    play = _local(__nvidia_repos_list=repos, __expected={"cuda": keys["a"], "nvidia-container-toolkit": keys["b"]})
    play["tasks"] = [
        {"name": "Fetch and check the keys", "ansible.builtin.include_role": {"name": "nvidia_repos", "tasks_from": "key"}},
        {"name": "Check the kept keys are the files' exact text",
         "ansible.builtin.assert": {"that": "__nvidia_repos_keys == __expected", "success_msg": "KEPT BOTH"}},
    ]
    return _play(tmp_path, "keys", play)


@needs_ansible
@needs_gpg
def test_key_tasks_fetch_http_and_file_keys_and_keep_the_pinned_ones(tmp_path, keys):
    run = kiln_playbook.run_playbook("-i", "localhost,", str(_key_play(tmp_path, keys, keys["b_fpr"])), tmp_path=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "KEPT BOTH" in run.stdout


@needs_ansible
@needs_gpg
def test_key_tasks_refuse_a_wrong_pin_after_judging_every_repository(tmp_path, keys):
    run = kiln_playbook.run_playbook("-i", "localhost,", str(_key_play(tmp_path, keys, keys["a_fpr"])), tmp_path=tmp_path)
    assert run.returncode != 0
    out = run.stdout + run.stderr
    assert "Repository nvidia-container-toolkit: refusing the key file file://" in out
    assert "kiln_repos.container_toolkit.fingerprint" in out
    assert "ok: [localhost] => (item=cuda)" in out  # the other repository was judged too
    assert "KEPT" not in out  # nothing kept (so nothing written) after a refusal


@needs_ansible
def test_runtime_tasks_restart_only_what_changed(tmp_path, monkeypatch):
    """Fake nvidia-ctk and runtimes under tmp_path; the handlers are debug stand-ins (no systemd)."""
    roles = tmp_path / "roles"
    role = roles / "nvidia_container_toolkit"
    shutil.copytree(TOOLKIT, role)
    (role / "handlers" / "main.yml").write_text(yaml.safe_dump(
        [{"name": f"Restart {n}", "ansible.builtin.debug": {"msg": f"HANDLER {n}"}} for n in ("docker", "containerd", "crio")]))
    bin_dir, etc = tmp_path / "bin", tmp_path / "etc"
    bin_dir.mkdir()
    etc.mkdir()
    (bin_dir / "nvidia-ctk").write_text(
        "#!/bin/sh\nrt=${3#--runtime=}\n"
        f"if [ -e {tmp_path}/CHANGE_$rt ]; then echo nvidia >> {etc}/$rt.toml; fi\n")
    for name in ("nvidia-ctk", "dockerd", "containerd"):
        (bin_dir / name).touch()
        (bin_dir / name).chmod(0o755)
    info = {n: {"binary": b, "config": f"{etc}/{n}.toml", "service": n}
            for n, b in (("docker", "dockerd"), ("containerd", "containerd"), ("crio", "crio"))}
    play = _local(kiln_stack={"container_toolkit": "1.20.0"}, kiln_gpu_present=False)
    play["roles"] = ["nvidia_container_toolkit"]
    path = _play(tmp_path, "toolkit", play)
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"__nvidia_container_toolkit_runtime_info": info,
                                 "__nvidia_container_toolkit_bin_dirs": [str(bin_dir)]}))
    monkeypatch.setenv("ANSIBLE_ROLES_PATH", str(roles))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def run() -> str:
        done = kiln_playbook.run_playbook("-i", "localhost,", str(path), "-e", f"@{extra}",
                                          "--skip-tags", "nvidia_container_toolkit_install", tmp_path=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    (tmp_path / "CHANGE_containerd").touch()
    first = run()
    assert "SKIPPED crio: not installed on this host" in first
    assert "SKIPPED docker" not in first and "SKIPPED containerd" not in first
    assert "HANDLER containerd" in first
    assert "HANDLER docker" not in first and "HANDLER crio" not in first
    (tmp_path / "CHANGE_containerd").unlink()
    second = run()
    assert "HANDLER" not in second
    assert "changed=0" in second
