"""distro_repos: the node's distribution sources pointed at a site mirror (issue 34 item 3).

The shape (read from the task files): validation first and always, the mirror's key judged by
kiln_repo_key_verdict before one kiln_files task writes the key, the deb822 source and the
comment-only sources.list; the role runs first in the "Prepare nodes" play.

The behaviour (real ansible-playbook on localhost, everything under tmp_path):

- validation, one run with one inventory host per hostile kiln_repos.distribution: every refusal
  names the variable and the host; an unset entry changes nothing;
- as root with gpg (skipped otherwise): a converge writes the files under tmp_path (the role's paths
  overridden by extra vars, its apt handler a debug stand-in), removes the image's default deb822
  sources, is idempotent and check-mode clean, and apt reads the signed file:// mirror through the
  written source; a wrong pin or a node without gpg writes nothing.
"""
from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path

import pytest
import yaml

import kiln_playbook
from kiln_paths import REPO

ROLE = REPO / "roles" / "distro_repos"
VAR = "kiln_repos.distribution"
FPR = "0123456789ABCDEF0123456789ABCDEF01234567"
GOOD = {"url": "http://mirror.site.internal/debian", "key_url": "http://mirror.site.internal/kiln-mirror.asc",
        "fingerprint": FPR, "suites": ["bookworm"], "components": ["main"]}
EL_GOOD = {"url": "http://mirror.site.internal/distribution/rocky-9", "key_url": "http://mirror.site.internal/kiln-mirror.asc",
           "fingerprint": FPR, "repos": ["BaseOS", "AppStream", "CRB"]}
EPEL_GOOD = {"url": "http://mirror.site.internal/epel/9/x86_64", "key_url": "http://mirror.site.internal/kiln-mirror.asc",
             "fingerprint": FPR}
#: an EL host, as the validation play's facts read it
ELH = {"kiln_test_pkg_mgr": "dnf", "kiln_test_os_family": "RedHat"}


def _tasks(path: Path) -> list[dict]:
    return yaml.safe_load(path.read_text())


def _walk(tasks: list[dict]) -> Iterator[dict]:
    for task in tasks:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _walk(task.get(key) or [])


def _module(task: dict) -> str:
    return next(k for k in task if k.startswith("ansible.builtin.") or k in ("kiln_files", "kiln_command"))


# --------------------------------------------------------------------------
# the shape


def test_prepare_nodes_runs_distro_repos_first():
    plays = yaml.safe_load((REPO / "playbooks" / "common.yml").read_text())
    play = next(p for p in plays if p["name"] == "Prepare nodes")
    roles = [r["role"] if isinstance(r, dict) else r for r in play["roles"]]
    assert roles[:2] == ["distro_repos", "common"]


def test_main_validates_then_checks_keys_then_writes_then_flushes():
    main = _tasks(ROLE / "tasks" / "main.yml")
    assert [_module(t) for t in main] == ["ansible.builtin.import_tasks", "ansible.builtin.include_tasks",
                                         "ansible.builtin.include_tasks", "ansible.builtin.meta"]
    assert main[0]["ansible.builtin.import_tasks"] == "validate.yml"
    assert main[0]["tags"] == ["always"]
    assert main[1]["ansible.builtin.include_tasks"]["file"] == "key.yml"
    assert main[1]["loop"] == "{{ __distro_repos_keyfiles }}"
    assert main[1]["loop_control"]["loop_var"] == "__distro_repos_keyfile"
    assert main[2]["ansible.builtin.include_tasks"]["file"] == "{{ __distro_repos_tasks }}"  # apt.yml or dnf.yml (OS vars)
    for task in main[1:3]:
        assert task["when"] == "distro_repos_enabled | bool"
    assert main[-1]["ansible.builtin.meta"] == "flush_handlers"
    validate = _tasks(ROLE / "tasks" / "validate.yml")
    assert len(validate) == 2 and "ansible.builtin.assert" in validate[0] and "block" in validate[1]
    assert validate[0]["when"] == "__distro_repos_epel is not none"
    assert "kiln_repos.epel" in validate[0]["ansible.builtin.assert"]["fail_msg"]
    block = validate[1]["block"]
    assert validate[1]["when"] == "distro_repos_enabled | bool"
    # the package manager first, then the OS vars (the exact keys), then the checks
    assert "__distro_repos_families" in block[0]["ansible.builtin.assert"]["that"]
    assert "ansible.builtin.include_vars" in block[1]
    asserts = [validate[0]] + block[:1] + block[2:]
    for task in asserts:
        assert task["ansible.builtin.assert"]["quiet"] is True
        assert "inventory_hostname" in task["ansible.builtin.assert"]["fail_msg"], task["name"]
    families = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__distro_repos_families"]
    assert families == {"Debian": "apt", "RedHat": "dnf"}
    for family, tasks in (("Debian", "apt.yml"), ("RedHat", "dnf.yml")):
        assert yaml.safe_load((ROLE / "vars" / f"{family}.yml").read_text())["__distro_repos_tasks"] == tasks


def test_key_is_judged_before_anything_is_written():
    key = _tasks(ROLE / "tasks" / "key.yml")
    assert [_module(t) for t in key] == [
        "kiln_command", "ansible.builtin.assert",  # gpg is there (it cannot be installed yet)
        "ansible.builtin.uri", "ansible.builtin.slurp", "kiln_command", "ansible.builtin.assert",
        "ansible.builtin.set_fact"]
    for task in (key[0], key[2], key[3], key[4]):  # read-only, so run in check mode too
        assert task["check_mode"] is False, task["name"]
    for task in (key[0], key[4]):
        assert task["changed_when"] is False and task["failed_when"] is False
    assert "add gnupg to the base image" in key[1]["ansible.builtin.assert"]["fail_msg"]
    nvidia = next(t for t in _tasks(REPO / "roles" / "nvidia_repos" / "tasks" / "key.yml") if "kiln_command" in t)
    assert key[4]["kiln_command"]["argv"] == nvidia["kiln_command"]["argv"]  # the same gpg listing
    verdict = " ".join(key[5]["vars"]["__distro_repos_verdict"].split())
    assert "kiln_repo_key_verdict(__distro_repos_entry.fingerprint" in verdict
    assert "variable=__distro_repos_fingerprint_var" in verdict
    main_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert main_vars["__distro_repos_fingerprint_var"] == "kiln_repos.{{ __distro_repos_keyfile.name }}.fingerprint"
    # only the checked text is kept, keyed by the file it is written to
    assert "combine({__distro_repos_keyfile.path: __distro_repos_fetched})" in \
        key[6]["ansible.builtin.set_fact"]["__distro_repos_verified"]
    # no other task file fetches or lists a key: one mechanism for apt and dnf
    for name in ("apt.yml", "dnf.yml"):
        assert not {"ansible.builtin.uri", "ansible.builtin.slurp", "kiln_command"} & {_module(t) for t in _tasks(ROLE / "tasks" / name)}
    handlers = [h["name"] for h in _tasks(ROLE / "handlers" / "main.yml")]
    apt = _tasks(ROLE / "tasks" / "apt.yml")
    assert [_module(t) for t in apt] == ["kiln_files", "ansible.builtin.file"]
    assert apt[0]["notify"] == apt[1]["notify"] == handlers[0] == "Refresh the apt cache from the site mirror"
    dnf = _tasks(ROLE / "tasks" / "dnf.yml")
    assert [_module(t) for t in dnf] == ["kiln_files", "ansible.builtin.rpm_key", "ansible.builtin.file"]
    assert dnf[0]["notify"] == dnf[2]["notify"] == handlers[1] == "Refresh the dnf cache from the site mirror"
    assert _tasks(ROLE / "handlers" / "main.yml")[1]["ansible.builtin.dnf"] == {"update_cache": True}
    assert dnf[1]["ansible.builtin.rpm_key"]["fingerprint"].startswith("{{ __distro_repos_given[__distro_repos_keyfile.name].fingerprint")
    assert dnf[1]["loop"] == "{{ __distro_repos_keyfiles }}"


def test_one_kiln_files_task_writes_key_source_and_sources_list():
    task = next(t for t in _tasks(ROLE / "tasks" / "apt.yml") if "kiln_files" in t)
    files = task["kiln_files"]["files"]
    assert [f["path"] for f in files] == ["{{ __distro_repos_key_dir }}", "{{ __distro_repos_key_file }}",
                                         "{{ __distro_repos_sources_file }}", "{{ __distro_repos_sources_list }}"]
    assert files[0] == {"path": "{{ __distro_repos_key_dir }}", "state": "directory", "mode": "0755"}
    assert files[1]["content"] == "{{ __distro_repos_verified[__distro_repos_key_file] }}"  # the verified text only
    assert all(f["mode"] == "0644" for f in files[1:])
    debian = yaml.safe_load((ROLE / "vars" / "Debian.yml").read_text())
    assert debian["__distro_repos_keys"] == {"distribution": ["url", "key_url", "fingerprint", "suites", "components"]}
    assert debian["__distro_repos_sources_file"] == "/etc/apt/sources.list.d/kiln-distribution.sources"
    assert debian["__distro_repos_key_dir"] == "{{ distro_repos_key_dir }}"
    assert debian["__distro_repos_key_file"] == "{{ distro_repos_key_dir }}/kiln-distribution.asc"
    assert debian["__distro_repos_keyfiles"] == [{"name": "distribution", "path": "{{ __distro_repos_key_file }}"}]
    assert debian["__distro_repos_sources_list"] == "/etc/apt/sources.list"
    assert debian["__distro_repos_default_sources"] == ["/etc/apt/sources.list.d/debian.sources",
                                                        "/etc/apt/sources.list.d/ubuntu.sources"]
    assert yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["distro_repos_key_dir"] == "/etc/apt/keyrings"


def test_el_vars_name_the_repo_file_the_keys_and_the_default_repo_files():
    redhat = yaml.safe_load((ROLE / "vars" / "RedHat.yml").read_text())
    assert redhat["__distro_repos_keys"] == {"distribution": ["url", "key_url", "fingerprint", "repos"],
                                             "epel": ["url", "key_url", "fingerprint"]}
    assert list(redhat["__distro_repos_list_keys"]) == ["repos"]
    assert redhat["__distro_repos_sources_file"] == "/etc/yum.repos.d/kiln-distribution.repo"
    assert redhat["__distro_repos_key_file"] == "/etc/pki/rpm-gpg/kiln-distribution.asc"
    assert redhat["__distro_repos_epel_key_file"] == "/etc/pki/rpm-gpg/kiln-epel.asc"
    defaults = redhat["__distro_repos_default_sources"]
    for name in ("rocky", "rocky-addons", "rocky-devel", "rocky-extras", "redhat", "epel", "epel-testing",
                 "epel-cisco-openh264", "almalinux-baseos", "almalinux-appstream"):
        assert f"/etc/yum.repos.d/{name}.repo" in defaults
    assert all(p.startswith("/etc/yum.repos.d/") and not p.startswith("/etc/yum.repos.d/kiln-") for p in defaults)
    dnf = next(t for t in _tasks(ROLE / "tasks" / "dnf.yml") if "kiln_files" in t)
    assert "kiln-distribution.repo.j2" in dnf["kiln_files"]["files"]


# --------------------------------------------------------------------------
# validation: one run, one host per input

needs_ansible = pytest.mark.skipif(kiln_playbook.ANSIBLE_PLAYBOOK is None, reason="needs ansible-playbook")

#: host -> (its variables, what its refusal must say; None: validation passes)
CASES: dict[str, tuple[dict, list[str] | None]] = {
    "missing_key": ({"kiln_repos": {"distribution": {k: v for k, v in GOOD.items() if k != "fingerprint"}}},
                    [f"{VAR} is missing the key(s) fingerprint"]),
    "typo_key": ({"kiln_repos": {"distribution": {**{k: v for k, v in GOOD.items() if k != "suites"}, "suite": ["bookworm"]}}},
                 [f"{VAR} has the unknown key(s) suite (did you mean suites?)"]),
    "int_fingerprint": ({"kiln_repos": {"distribution": {**GOOD, "fingerprint": 1234567890123}}},
                        [f"{VAR}.fingerprint is the number 1234567890123", "40 hex digits", "gpg --show-keys"]),
    "short_fingerprint": ({"kiln_repos": {"distribution": {**GOOD, "fingerprint": "96F7B6C3B218E6E2"}}},
                          [f'{VAR}.fingerprint is "96F7B6C3B218E6E2"', "short key id"]),
    "suites_string": ({"kiln_repos": {"distribution": {**GOOD, "suites": "bookworm"}}},
                      [f'{VAR}.suites is "bookworm": a single string: write a list, e.g. suites: [bookworm]']),
    "suites_empty": ({"kiln_repos": {"distribution": {**GOOD, "suites": []}}},
                     [f"{VAR}.suites is []: it must be a non-empty list"]),
    "component_space": ({"kiln_repos": {"distribution": {**GOOD, "components": ["main", "non free"]}}},
                        [f'{VAR}.components is ["main", "non free"]']),
    "bad_scheme": ({"kiln_repos": {"distribution": {**GOOD, "url": "ftp://mirror.site.internal/debian"}}},
                   [f'{VAR}.url is "ftp://mirror.site.internal/debian"', "http://, https:// or file://"]),
    "key_url_newline": ({"kiln_repos": {"distribution": {**GOOD, "key_url": "http://m/k.asc\n"}}},
                        [f"{VAR}.key_url is", "without spaces"]),
    "not_mapping": ({"kiln_repos": {"distribution": "http://mirror.site.internal/debian"}},
                    [f'{VAR} is "http://mirror.site.internal/debian", not a mapping']),
    "enabled_unset": ({"distro_repos_enabled": True}, [f"{VAR} is not set, but distro_repos_enabled is true"]),
    # unknown keys are named as given (the inventory file sorts them)
    "el_apt_keys": ({"kiln_repos": {"distribution": GOOD}, **ELH},
                    [f"{VAR} has the unknown key(s) components, suites (did you mean repos?)",
                     "on this host (dnf) its keys are exactly url, key_url, fingerprint, repos"]),
    "apt_el_keys": ({"kiln_repos": {"distribution": EL_GOOD}},
                    [f"{VAR} has the unknown key(s) repos (did you mean suites, components?)"]),
    "el_repos_string": ({"kiln_repos": {"distribution": {**EL_GOOD, "repos": "BaseOS"}}, **ELH},
                        [f'{VAR}.repos is "BaseOS": a single string: write a list, e.g. repos: [BaseOS]']),
    "el_repos_slash": ({"kiln_repos": {"distribution": {**EL_GOOD, "repos": ["BaseOS/x"]}}, **ELH},
                       [f'{VAR}.repos is ["BaseOS/x"]', "repos: [BaseOS, AppStream, CRB]"]),
    "el_repos_twice": ({"kiln_repos": {"distribution": {**EL_GOOD, "repos": ["BaseOS", "baseos"]}}, **ELH},
                       [f'{VAR}.repos is ["BaseOS", "baseos"]', "distinct"]),
    "el_float_fingerprint": ({"kiln_repos": {"distribution": {**EL_GOOD, "fingerprint": 1.5}}, **ELH},
                             [f"{VAR}.fingerprint is the number 1.5"]),
    "el_epel_typo": ({"kiln_repos": {"distribution": EL_GOOD, "epel": {**EPEL_GOOD, "urls": "x"}}, **ELH},
                     ["kiln_repos.epel has the unknown key(s) urls"]),
    "el_epel_short": ({"kiln_repos": {"distribution": EL_GOOD, "epel": {**EPEL_GOOD, "fingerprint": "3228467C"}}, **ELH},
                      ['kiln_repos.epel.fingerprint is "3228467C"']),
    "el_epel_string": ({"kiln_repos": {"distribution": EL_GOOD, "epel": "http://m/epel"}, **ELH},
                       ['kiln_repos.epel is "http://m/epel", not a mapping']),
    "epel_alone": ({"kiln_repos": {"epel": EPEL_GOOD}, **ELH},
                   ["kiln_repos.epel is set, but kiln_repos.distribution is not", "Fix: set kiln_repos.distribution"]),
    "epel_on_apt": ({"kiln_repos": {"distribution": GOOD, "epel": EPEL_GOOD}},
                    ["kiln_repos.epel is set, but this host is Debian (apt): EPEL is for EL (dnf) hosts only"]),
    "zypper": ({"kiln_repos": {"distribution": GOOD}, "kiln_test_pkg_mgr": "zypper", "kiln_test_os_family": "Suse"},
               [f"{VAR} is set, but this host's package manager (zypper on OS family Suse)",
                f"leave {VAR} unset"]),
    "el_good": ({"kiln_repos": {"distribution": EL_GOOD, "epel": EPEL_GOOD}, **ELH}, None),
    "good": ({"kiln_repos": {"distribution": GOOD}}, None),
    "unset": ({}, None),
    "null": ({"kiln_repos": {"distribution": None, "cuda": {"url": "http://m/cuda"}}}, None),
}
RESULT = re.compile(r"^(?:fatal|failed): \[(?P<host>[a-z_]+)\](?: \(item=[^)]*\))?(?:: FAILED!)? => (?P<json>\{.*\})$", re.M)


@pytest.fixture(scope="module")
def validation(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    tmp = tmp_path_factory.mktemp("distro-repos-validate")
    hosts = {name: variables for name, (variables, _) in CASES.items()}
    (tmp / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}, "hosts": hosts}}))
    facts = {"ansible_facts": {"pkg_mgr": "{{ kiln_test_pkg_mgr | default('apt') }}",
                               "os_family": "{{ kiln_test_os_family | default('Debian') }}"}}
    plays = [
        {"name": "Validate", "hosts": "all", "gather_facts": False, "vars": facts,
         "tasks": [{"name": "Validate", "ansible.builtin.include_role": {"name": "distro_repos", "tasks_from": "validate"}}]},
        # the whole role where kiln_repos.distribution is unset or null: every task skips
        {"name": "Whole role", "hosts": "unset:null", "gather_facts": False, "vars": facts, "roles": ["distro_repos"]},
    ]
    (tmp / "validate.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    run = kiln_playbook.run_playbook("-i", str(tmp / "hosts.yml"), str(tmp / "validate.yml"), "--check",
                                     tmp_path=tmp, env={"ANSIBLE_CALLBACK_RESULT_FORMAT": "json"})
    messages: dict[str, str] = {}
    for match in RESULT.finditer(run.stdout):
        messages.setdefault(match["host"], json.loads(match["json"])["msg"])
    return run, messages


@needs_ansible
@pytest.mark.parametrize("host", [h for h, (_, says) in CASES.items() if says is not None])
def test_hostile_input_is_refused_naming_the_variable_and_host(validation, host):
    run, messages = validation
    assert host in messages, run.stdout[-4000:] + run.stderr[-2000:]
    message = messages[host]
    assert message.startswith(f"{host}: kiln_repos.{'epel' if 'epel' in host else 'distribution'}"), message
    for part in CASES[host][1]:
        assert part in message, (part, message)


@needs_ansible
def test_valid_or_unset_input_passes_and_unset_changes_nothing(validation):
    run, messages = validation
    for host in ("good", "el_good", "unset", "null"):
        assert host not in messages, messages.get(host)
    recap = dict(re.findall(r"^(\w+)\s+: (ok=.*)$", run.stdout, flags=re.M))
    for host in ("unset", "null"):
        assert "changed=0" in recap[host] and "failed=0" in recap[host], recap[host]
    whole = run.stdout.split("PLAY [Whole role]", 1)[1]
    for host in ("unset", "null"):  # only the argument-spec check ran: every task of the role skipped
        assert whole.count(f"ok: [{host}]") == 1 and f"changed: [{host}]" not in whole, whole[-3000:]
        assert f"skipping: [{host}]" in whole


# --------------------------------------------------------------------------
# a converge on localhost, under tmp_path (root and gpg)

needs_root_gpg = pytest.mark.skipif(not shutil.which("gpg") or os.geteuid() != 0,
                                    reason="needs gpg and root (kiln_files writes root-owned files)")


def _gpg(env: dict[str, str], *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", "", *args],
                          env=env, input=data, check=True, capture_output=True).stdout


def _mirror(root: Path, env: dict[str, str], fpr: str) -> None:
    """A one-suite apt mirror (empty Packages) signed by the key *fpr*: dists/bookworm/InRelease."""
    dist = root / "dists" / "bookworm"
    index = dist / "main" / "binary-amd64" / "Packages"
    index.parent.mkdir(parents=True)
    index.write_bytes(b"")
    sha = hashlib.sha256(b"").hexdigest()
    release = (f"Origin: kiln-test\nSuite: bookworm\nCodename: bookworm\nDate: {formatdate(usegmt=True)}\n"
               f"Architectures: amd64\nComponents: main\nSHA256:\n {sha} 0 main/binary-amd64/Packages\n")
    (dist / "Release").write_text(release)
    (dist / "InRelease").write_bytes(_gpg(env, "--local-user", fpr, "--clearsign", data=release.encode()))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[dict[str, object]]:
    """Two throwaway keys (the mirror's and another), the mirror signed by the first, the keys served over http."""
    work = tmp_path_factory.mktemp("distro-repos-site")
    home = work / "gnupg"
    home.mkdir(mode=0o700)
    env = dict(os.environ, GNUPGHOME=str(home))
    out: dict[str, object] = {"dir": work}
    try:
        for name in ("mirror", "other"):
            uid = f"kiln {name} test <{name}@invalid>"
            _gpg(env, "--quick-gen-key", uid, "ed25519", "sign", "never")
            listing = subprocess.run(["gpg", "--batch", "--with-colons", "--list-keys", uid], env=env, check=True,
                                     capture_output=True, text=True).stdout
            out[f"{name}_fpr"] = next(ln.split(":")[9] for ln in listing.splitlines() if ln.startswith("fpr:"))
            (work / f"{name}.asc").write_bytes(_gpg(env, "--armor", "--export", uid))
        _mirror(work / "mirror", env, str(out["mirror_fpr"]))
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True, check=False)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(work))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out["http"] = f"http://127.0.0.1:{server.server_port}"
    try:
        yield out
    finally:
        server.shutdown()
        server.server_close()


class Node:
    """A node's /etc/apt under tmp_path, the role copied with a debug stand-in for its apt handler."""

    def __init__(self, tmp_path: Path, site: dict[str, object], **entry: object) -> None:
        self.tmp = tmp_path
        self.apt = tmp_path / "etc" / "apt"
        (self.apt / "sources.list.d").mkdir(parents=True)
        (self.apt / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
        for name in ("debian", "ubuntu"):
            (self.apt / "sources.list.d" / f"{name}.sources").write_text(f"Types: deb\nURIs: http://{name}.invalid/\n")
        (self.apt / "sources.list.d" / "site-own.list").write_text("# the site's own, left alone\n")
        roles = tmp_path / "roles"
        shutil.copytree(ROLE, roles / "distro_repos")
        handler = _tasks(ROLE / "handlers" / "main.yml")[0]["name"]
        (roles / "distro_repos" / "handlers" / "main.yml").write_text(yaml.safe_dump(
            [{"name": handler, "ansible.builtin.debug": {"msg": "HANDLER apt update"}}]))
        self.key = self.apt / "keyrings" / "kiln-distribution.asc"
        self.source = self.apt / "sources.list.d" / "kiln-distribution.sources"
        self.entry = {"url": f"file://{site['dir']}/mirror", "key_url": f"{site['http']}/mirror.asc",
                      "fingerprint": site["mirror_fpr"], "suites": ["bookworm"], "components": ["main"], **entry}
        extra = {"kiln_repos": {"distribution": self.entry}, "distro_repos_key_dir": str(self.apt / "keyrings"),
                 "__distro_repos_key_file": str(self.key), "__distro_repos_sources_file": str(self.source),
                 "__distro_repos_sources_list": str(self.apt / "sources.list"),
                 "__distro_repos_default_sources": [str(self.apt / "sources.list.d" / f"{n}.sources")
                                                    for n in ("debian", "ubuntu")]}
        (tmp_path / "extra.json").write_text(json.dumps(extra))

    def run(self, *args: str, play: dict | None = None) -> subprocess.CompletedProcess[str]:
        book = {"hosts": "localhost", "connection": "local", "gather_facts": False,
                "vars": {"ansible_python_interpreter": sys.executable,
                         "ansible_facts": {"pkg_mgr": "apt", "os_family": "Debian"}},
                "roles": ["distro_repos"], **(play or {})}
        path = self.tmp / "converge.yml"
        path.write_text(yaml.safe_dump([book], sort_keys=False))
        return kiln_playbook.run_playbook("-i", "localhost,", str(path), "-e", f"@{self.tmp / 'extra.json'}", *args,
                                          tmp_path=self.tmp, env={"ANSIBLE_ROLES_PATH": str(self.tmp / "roles")})


def _apt_update(node: Node) -> subprocess.CompletedProcess[str]:
    """apt-get update through the written sources only, state and cache under tmp_path."""
    state = node.tmp / "apt-state"
    (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (state / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    opts = {"Dir::Etc::sourcelist": node.apt / "sources.list", "Dir::Etc::sourceparts": node.apt / "sources.list.d",
            "Dir::Etc::trusted": node.tmp / "none.gpg", "Dir::Etc::trustedparts": node.tmp / "no-trusted.d",
            "Dir::State::lists": state / "lists", "Dir::Cache": state / "cache", "APT::Sandbox::User": "root",
            "APT::Architecture": "amd64", "APT::Architectures": "amd64"}
    argv = ["apt-get", "-q"] + [a for k, v in opts.items() for a in ("-o", f"{k}={v}")] + ["update"]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


@needs_ansible
@needs_root_gpg
def test_converge_writes_the_mirror_is_idempotent_and_check_clean(tmp_path, site):
    node = Node(tmp_path, site)
    first = node.run()
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    assert "HANDLER apt update" in first.stdout
    assert node.key.read_text() == (Path(str(site["dir"])) / "mirror.asc").read_text()
    assert oct(node.key.stat().st_mode & 0o777) == "0o644"
    assert oct((node.apt / "keyrings").stat().st_mode & 0o777) == "0o755"
    source = node.source.read_text()
    assert source.startswith("# Managed by kiln (roles/distro_repos)")
    assert (f"Types: deb\nURIs: file://{site['dir']}/mirror\nSuites: bookworm\nComponents: main\n"
            f"Signed-By: {node.key}\n") in source
    sources_list = (node.apt / "sources.list").read_text()
    assert all(line.startswith("#") for line in sources_list.splitlines()), sources_list
    assert "kiln-distribution.sources" in sources_list and "kiln_repos.distribution" in sources_list
    assert sorted(p.name for p in (node.apt / "sources.list.d").iterdir()) == ["kiln-distribution.sources", "site-own.list"]
    second = node.run()
    assert second.returncode == 0 and "changed=0" in second.stdout, second.stdout[-3000:]
    assert "HANDLER" not in second.stdout
    check = node.run("--check", "--diff")
    assert check.returncode == 0 and "changed=0" in check.stdout, check.stdout[-3000:]
    if shutil.which("apt-get"):  # apt verifies the mirror's InRelease with the written Signed-By key
        update = _apt_update(node)
        assert update.returncode == 0 and "W:" not in update.stdout + update.stderr, update.stdout + update.stderr
        assert "bookworm InRelease" in update.stdout


@needs_ansible
@needs_root_gpg
@pytest.mark.parametrize("scheme", ["file", "http"])
def test_a_wrong_pin_writes_nothing(tmp_path, site, scheme):
    key_url = f"file://{site['dir']}/other.asc" if scheme == "file" else f"{site['http']}/other.asc"
    node = Node(tmp_path, site, key_url=key_url)
    run = node.run()
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "Repository distribution: refusing the key file" in out and f"{VAR}.fingerprint" in out, out[-3000:]
    assert not node.key.exists() and not node.source.exists()
    assert (node.apt / "sources.list.d" / "debian.sources").exists()
    assert (node.apt / "sources.list").read_text().startswith("deb ")


@needs_ansible
@needs_root_gpg
def test_a_node_without_gpg_is_told_to_add_gnupg(tmp_path, site):
    node = Node(tmp_path, site)
    run = node.run(play={"environment": {"PATH": str(tmp_path / "no-such-bin")}})
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "localhost: kiln_repos.distribution is set, but gpg cannot run on this node" in out, out[-3000:]
    assert "add gnupg to the base image" in out
    assert not node.key.exists() and not node.source.exists()


# --------------------------------------------------------------------------
# EL (dnf): a converge on localhost, under tmp_path (root and gpg)

class ELNode:
    """A node's /etc/yum.repos.d and /etc/pki/rpm-gpg under tmp_path; the role copied with debug stand-ins for its
    handlers and for rpm_key (this machine's rpm database is not the test's to change)."""

    def __init__(self, tmp_path: Path, site: dict[str, object], epel: bool = True, **entry: object) -> None:
        self.tmp = tmp_path
        self.repos = tmp_path / "etc" / "yum.repos.d"
        self.repos.mkdir(parents=True)
        self.pki = tmp_path / "etc" / "pki" / "rpm-gpg"
        for name in ("rocky", "rocky-extras", "epel", "site-own"):
            (self.repos / f"{name}.repo").write_text(f"[{name}]\nbaseurl=http://{name}.invalid/\n")
        roles = tmp_path / "roles"
        shutil.copytree(ROLE, roles / "distro_repos")
        handlers = [h["name"] for h in _tasks(ROLE / "handlers" / "main.yml")]
        (roles / "distro_repos" / "handlers" / "main.yml").write_text(yaml.safe_dump(
            [{"name": h, "ansible.builtin.debug": {"msg": f"HANDLER {h}"}} for h in handlers]))
        dnf = _tasks(ROLE / "tasks" / "dnf.yml")
        for task in dnf:
            if "ansible.builtin.rpm_key" in task:
                args = task.pop("ansible.builtin.rpm_key")
                task["ansible.builtin.debug"] = {"msg": f"RPM_KEY {args['key']} {args['fingerprint']}"}
        (roles / "distro_repos" / "tasks" / "dnf.yml").write_text(yaml.safe_dump(dnf, sort_keys=False))
        self.key = self.pki / "kiln-distribution.asc"
        self.epel_key = self.pki / "kiln-epel.asc"
        self.repo_file = self.repos / "kiln-distribution.repo"
        key = {"key_url": f"{site['http']}/mirror.asc", "fingerprint": site["mirror_fpr"]}
        repos: dict[str, object] = {"distribution": {"url": f"file://{site['dir']}/el/", "repos": ["BaseOS", "AppStream"],
                                                     **key, **entry}}
        if epel:
            repos["epel"] = {"url": f"file://{site['dir']}/el/epel", "key_url": f"file://{site['dir']}/mirror.asc",
                             "fingerprint": str(site["mirror_fpr"]).lower()}
        extra = {"kiln_repos": repos, "__distro_repos_key_dir": str(self.pki), "__distro_repos_key_file": str(self.key),
                 "__distro_repos_epel_key_file": str(self.epel_key), "__distro_repos_sources_file": str(self.repo_file),
                 "__distro_repos_default_sources": [str(self.repos / f"{n}.repo") for n in ("rocky", "rocky-extras", "epel")]}
        (tmp_path / "extra.json").write_text(json.dumps(extra))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        book = {"hosts": "localhost", "connection": "local", "gather_facts": False,
                "vars": {"ansible_python_interpreter": sys.executable,
                         "ansible_facts": {"pkg_mgr": "dnf", "os_family": "RedHat"}},
                "roles": ["distro_repos"]}
        path = self.tmp / "converge.yml"
        path.write_text(yaml.safe_dump([book], sort_keys=False))
        return kiln_playbook.run_playbook("-i", "localhost,", str(path), "-e", f"@{self.tmp / 'extra.json'}", *args,
                                          tmp_path=self.tmp, env={"ANSIBLE_ROLES_PATH": str(self.tmp / "roles"),
                                                                  "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"})


@needs_ansible
@needs_root_gpg
def test_el_converge_writes_the_repo_file_and_keys_is_idempotent_and_check_clean(tmp_path, site):
    import configparser  # noqa: PLC0415

    node = ELNode(tmp_path, site)
    first = node.run()
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-4000:]
    assert "HANDLER Refresh the dnf cache from the site mirror" in out and "HANDLER Refresh the apt" not in out
    mirror_key = (Path(str(site["dir"])) / "mirror.asc").read_text()
    assert node.key.read_text() == mirror_key and node.epel_key.read_text() == mirror_key
    assert oct(node.key.stat().st_mode & 0o777) == "0o644"
    fpr = str(site["mirror_fpr"]).upper()
    assert f"RPM_KEY {node.key} {fpr}" in out and f"RPM_KEY {node.epel_key} {fpr}" in out
    text = node.repo_file.read_text()
    assert text.startswith("# Managed by kiln (roles/distro_repos)")
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    assert parser.sections() == ["kiln-distribution-baseos", "kiln-distribution-appstream", "kiln-epel"]
    base = parser["kiln-distribution-baseos"]
    assert base["baseurl"] == f"file://{site['dir']}/el/BaseOS/$basearch/os"
    assert parser["kiln-distribution-appstream"]["baseurl"] == f"file://{site['dir']}/el/AppStream/$basearch/os"
    assert parser["kiln-epel"]["baseurl"] == f"file://{site['dir']}/el/epel"
    assert parser["kiln-epel"]["gpgkey"] == f"file://{node.epel_key}"
    for name in parser.sections():
        section = parser[name]
        assert (section["enabled"], section["gpgcheck"], section["repo_gpgcheck"]) == ("1", "1", "1"), name
    assert base["gpgkey"] == f"file://{node.key}"
    assert sorted(p.name for p in node.repos.iterdir()) == ["kiln-distribution.repo", "site-own.repo"]
    second = node.run()
    assert second.returncode == 0 and "changed=0" in second.stdout, second.stdout[-3000:]
    assert "HANDLER" not in second.stdout
    check = node.run("--check", "--diff")
    assert check.returncode == 0 and "changed=0" in check.stdout, check.stdout[-3000:]


@needs_ansible
@needs_root_gpg
def test_el_without_epel_writes_no_epel_section_and_a_wrong_pin_writes_nothing(tmp_path, site):
    node = ELNode(tmp_path / "a", site, epel=False)
    run = node.run()
    assert run.returncode == 0, run.stdout[-3000:]
    assert "[kiln-epel]" not in node.repo_file.read_text() and not node.epel_key.exists()
    bad = ELNode(tmp_path / "b", site, key_url=f"{site['http']}/other.asc")
    run = bad.run()
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "Repository distribution: refusing the key file" in out and f"{VAR}.fingerprint" in out, out[-3000:]
    assert not bad.key.exists() and not bad.repo_file.exists()
    assert (bad.repos / "rocky.repo").exists()
