"""Repository key pinning (module_utils/kiln/packages/repo_key.py, registry filter_plugins/kiln_repo_key_filters.py, roles/nvidia_repos/tasks/key.yml).

The rule: a downloaded key file is trusted only when it holds exactly one
primary key (one ``pub`` record) and that key's full fingerprint is the pin.
Recorded ``gpg --with-colons --show-keys`` listings run everywhere; the real
gpg tests (keys generated here, the role's own gpg command, the test bed's
fixture key) need gpg on PATH.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kiln.packages import repo_key as krk
import kiln_repo_key_filters
from kiln_compat_engine.repos import kiln_repo
from ansible.errors import AnsibleFilterError

from kiln_paths import REPO as ROOT
KEY_TASKS = ROOT / "roles" / "nvidia_repos" / "tasks" / "key.yml"

FPR_A = "B4D07F5E0A529FCFCC0C023B96F7B6C3B218E6E2"
FPR_B = "DF9DC78F3F2A656CFE3871C01248DC8AFBCC0E9E"
SUB_B = "0A1B2C3D4E5F60718293A4B5C6D7E8F901234567"
URL = "https://mirror.example.internal/nvidia/3bf863cc.pub"
VAR = "kiln_repos.cuda.fingerprint"

# Recorded from gpg 2.2.40 (`gpg --batch --no-default-keyring --keyring /dev/null --with-colons --show-keys`).
KEY_A = f"""pub:-:255:22:96F7B6C3B218E6E2:1796076833:::u:::scSC:::::ed25519:::0:
fpr:::::::::{FPR_A}:
uid:-::::1796076833::4BD47F01DF40E0E6BF7B77C6B5D64E1E79422E5B::A <a@invalid>::::::::::0:
"""
KEY_B_WITH_SUBKEY = f"""pub:-:255:22:1248DC8AFBCC0E9E:1796076833:::u:::scSC:::::ed25519:::0:
fpr:::::::::{FPR_B}:
uid:-::::1796076833::F3F628986862ECE78152A7E5466B8FE858A771EA::B <b@invalid>::::::::::0:
sub:-:255:18:C6D7E8F901234567:1796076833::::::e:::::cv25519::
fpr:::::::::{SUB_B}:
"""
SECRET_A = f"""sec:-:255:22:96F7B6C3B218E6E2:1796076833:::u:::scSC:::::ed25519:::0:
fpr:::::::::{FPR_A}:
grp:::::::::DB033054675D7BEF2CDC32DE66B206EB23D31E7F:
uid:-::::1796076833::4BD47F01DF40E0E6BF7B77C6B5D64E1E79422E5B::A <a@invalid>::::::::::0:
"""


def verdict(colons: str, pin: str = FPR_A, **kwargs):
    kwargs.setdefault("repo", "cuda")
    kwargs.setdefault("url", URL)
    kwargs.setdefault("variable", VAR)
    return krk.kiln_repo_key_verdict(colons, pin, **kwargs)


def assert_refused(result, *fragments: str) -> None:
    assert result["ok"] is False, result["msg"]
    assert result["reason"]
    for text in ("Repository cuda: refusing", URL, VAR, *fragments):
        assert text in result["msg"], (text, result["msg"])


# --------------------------------------------------------------------------
# the verdict, on recorded listings


def test_filter_exposed():
    assert kiln_repo_key_filters.FilterModule().filters() == {"kiln_repo_key_verdict": krk.kiln_repo_key_verdict}


def test_one_key_matching_is_accepted():
    result = verdict(KEY_A)
    assert result["ok"] is True, result["msg"]
    assert result["fingerprint"] == FPR_A and result["fingerprints"] == [FPR_A] and result["primary_keys"] == 1
    assert result["reason"] == ""
    assert FPR_A in result["msg"] and URL in result["msg"]


@pytest.mark.parametrize("pin", [FPR_A.lower(), " ".join(FPR_A[i:i + 4] for i in range(0, 40, 4))])
def test_pin_spacing_and_case_do_not_matter(pin):
    assert verdict(KEY_A, pin)["ok"] is True


def test_one_key_not_matching_is_refused():
    result = verdict(KEY_A, FPR_B)
    assert_refused(result, "not the pinned key", FPR_A, FPR_B)
    assert result["fingerprints"] == [FPR_A]


@pytest.mark.parametrize("pin", [FPR_A, FPR_B])
def test_two_key_file_is_refused_even_when_one_matches(pin):
    result = verdict(KEY_A + KEY_B_WITH_SUBKEY, pin)
    assert_refused(result, "2 primary keys", FPR_A, FPR_B)
    assert result["primary_keys"] == 2 and result["fingerprint"] == ""


def test_subkeys_do_not_count_as_primary_keys():
    result = verdict(KEY_B_WITH_SUBKEY, FPR_B)
    assert result["ok"] is True, result["msg"]
    assert result["primary_keys"] == 1 and result["fingerprints"] == [FPR_B]


def test_a_pin_naming_a_subkey_is_refused():
    assert_refused(verdict(KEY_B_WITH_SUBKEY, SUB_B), "subkey")


@pytest.mark.parametrize("colons", ["", "\n", "this is not gpg output\n", "<html>404 Not Found</html>", None])
def test_zero_keys_or_garbage_is_refused(colons):
    result = verdict(colons)
    assert_refused(result, "no OpenPGP key", "found: none")
    assert result["primary_keys"] == 0


def test_gpg_failure_is_refused_with_its_message():
    result = verdict(KEY_A, rc=2, stderr="gpg: no valid OpenPGP data found.\n")
    assert_refused(result, "rc 2", "no valid OpenPGP data found")


def test_secret_key_material_is_refused():
    assert_refused(verdict(SECRET_A), "secret")


@pytest.mark.parametrize("pin", ["", "3BF863CC", FPR_A[:-1], FPR_A + "0", "Z" * 40])
def test_a_pin_that_is_not_a_full_fingerprint_is_refused(pin):
    assert_refused(verdict(KEY_A, pin), "not a full fingerprint")


@pytest.mark.parametrize("colons, problem", [
    ("pub:-:255:22:96F7B6C3B218E6E2:1796076833:::u:::scSC:::::ed25519:::0:\n", "no fingerprint"),
    (f"sub:-:255:18:C6D7E8F901234567:1796076833::::::e:::::cv25519::\nfpr:::::::::{SUB_B}:\n" + KEY_A,
     "subkey record before any primary key"),
    (f"fpr:::::::::{FPR_A}:\n" + KEY_A, "belongs to no key"),
])
def test_malformed_listings_are_refused(colons, problem):
    assert_refused(verdict(colons), problem)


def test_parse_gpg_colons():
    keys, problems = krk.parse_gpg_colons(KEY_A + KEY_B_WITH_SUBKEY)
    assert problems == []
    assert [(k["record"], k["keyid"], k["fingerprint"], k["subkeys"]) for k in keys] == [
        ("pub", "96F7B6C3B218E6E2", FPR_A, []), ("pub", "1248DC8AFBCC0E9E", FPR_B, [SUB_B])]


def test_message_names_the_toolkit_variable():
    result = krk.kiln_repo_key_verdict(KEY_A, FPR_B, repo="nvidia-container-toolkit",
                                       url="https://nvidia.github.io/libnvidia-container/gpgkey",
                                       variable="kiln_repos.container_toolkit.fingerprint")
    assert result["msg"].startswith("Repository nvidia-container-toolkit: refusing")
    assert "kiln_repos.container_toolkit.fingerprint" in result["msg"]
    assert "https://nvidia.github.io/libnvidia-container/gpgkey" in result["msg"]


# --------------------------------------------------------------------------
# the role wires the verdict in before anything is written or trusted


def _tasks(path: Path) -> list[dict]:
    return yaml.safe_load(path.read_text())


def test_role_checks_before_it_trusts():
    key = _tasks(KEY_TASKS)
    names = [t["name"] for t in key]
    check = next(t for t in key if "ansible.builtin.assert" in t)
    assert "kiln_repo_key_verdict" in check["vars"]["__nvidia_repos_verdict"]
    assert check["ansible.builtin.assert"]["that"] == "__nvidia_repos_verdict.ok"
    # the key text becomes a fact (what the callers write and trust) only after the check
    keep = next(i for i, t in enumerate(key) if "ansible.builtin.set_fact" in t)
    assert keep > names.index(check["name"]) and keep == len(key) - 1
    for backend, trusting in (("apt", ("ansible.builtin.copy", "ansible.builtin.template")),
                              ("dnf", ("ansible.builtin.copy", "ansible.builtin.rpm_key",
                                       "ansible.builtin.yum_repository"))):
        tasks = _tasks(ROOT / "roles" / "nvidia_repos" / "tasks" / f"repo-{backend}.yml")
        # include_tasks, not import_tasks: a static import inside the dynamically included
        # repo-<backend>.yml makes Ansible template that include's path without the host's vars.
        imported = next(i for i, t in enumerate(tasks) if t.get("ansible.builtin.include_tasks") == "key.yml")
        for i, task in enumerate(tasks):
            if any(m in task for m in trusting):
                assert i > imported, (backend, task["name"])
    dnf = _tasks(ROOT / "roles" / "nvidia_repos" / "tasks" / "repo-dnf.yml")
    repo = next(t for t in dnf if "ansible.builtin.yum_repository" in t)["ansible.builtin.yum_repository"]
    assert repo["gpgkey"].startswith("file://"), "dnf must read the verified local copy, not the remote key file"
    rpm_key = next(t for t in dnf if "ansible.builtin.rpm_key" in t)["ansible.builtin.rpm_key"]
    assert not str(rpm_key["key"]).startswith(("http", "ftp", "file:")), "rpm_key imports the verified local copy"


def test_validate_names_the_pin_variable_per_repository():
    """The pin each repository is checked against, and the variable a refusal names, come from kiln_repos."""
    text = (ROOT / "roles" / "nvidia_repos" / "tasks" / "validate.yml").read_text()
    assert "'cuda' | kiln_repo(" in text and "'container_toolkit' | kiln_repo(" in text
    for name in ("cuda", "container_toolkit"):
        repo = kiln_repo(name, "debian-12", {name: {"fingerprint": FPR_A.lower()}})
        assert repo["fingerprint"] == FPR_A and repo["fingerprint_var"] == f"kiln_repos.{name}.fingerprint"
    with pytest.raises(AnsibleFilterError, match=r"kiln_repos.cuda.fingerprint is '96F7B6C3B218E6E2': not a full"):
        kiln_repo("cuda", "debian-12", {"cuda": {"fingerprint": "96F7B6C3B218E6E2"}})
    with pytest.raises(AnsibleFilterError, match=r"unknown repository 'cdua'. Did you mean 'cuda'"):
        kiln_repo("cuda", "debian-12", {"cdua": {"url": "https://m/"}})


# --------------------------------------------------------------------------
# real gpg: generated keys, the role's own gpg command, the fixture key

needs_gpg = pytest.mark.skipif(not shutil.which("gpg"), reason="needs gpg (apt-get install gnupg)")


def _role_gpg_argv() -> list[str]:
    task = next(t for t in _tasks(KEY_TASKS) if "kiln_command" in t)
    return [str(a) for a in task["kiln_command"]["argv"]]


def show_keys(data: bytes) -> subprocess.CompletedProcess:
    """Run the role's gpg command on a key file's bytes, with an empty home as on a fresh node."""
    with tempfile.TemporaryDirectory(prefix="kiln-gpg-") as home:
        env = dict(os.environ, GNUPGHOME=home)
        try:
            return subprocess.run(_role_gpg_argv(), input=data, env=env, capture_output=True, check=False)
        finally:
            subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True, check=False)


def real_verdict(data: bytes, pin: str):
    shown = show_keys(data)
    return verdict(shown.stdout.decode(), pin, rc=shown.returncode, stderr=shown.stderr.decode())


@pytest.fixture(scope="module")
def keys() -> Iterator[dict[str, object]]:
    """Two throwaway keys: A primary only (like the fixture key), B with an encryption subkey."""
    home = tempfile.mkdtemp(prefix="kiln-gpg-")
    env = dict(os.environ, GNUPGHOME=home)
    gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    try:
        out: dict[str, object] = {}
        for name, usage in (("a", "sign"), ("b", "default")):
            uid = f"kiln unit test {name} <{name}@invalid>"
            subprocess.run(gpg + ["--quick-gen-key", uid, "ed25519", usage, "never"], env=env, check=True,
                           capture_output=True)
            if usage == "default":  # ed25519 + "default" gives no subkey on every gpg: add one
                fpr = _fprs(env, uid)[0]
                subprocess.run(gpg + ["--quick-add-key", fpr, "cv25519", "encr", "never"], env=env, check=True,
                               capture_output=True)
            fprs = _fprs(env, uid)
            out[name] = subprocess.run(["gpg", "--batch", "--armor", "--export", fprs[0]], env=env, check=True,
                                       capture_output=True).stdout
            out[f"{name}_fpr"] = fprs[0]
            out[f"{name}_fprs"] = fprs
        yield out
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)


def _fprs(env: dict[str, str], uid: str) -> list[str]:
    listing = subprocess.run(["gpg", "--batch", "--with-colons", "--list-keys", uid], env=env, check=True,
                             capture_output=True, text=True).stdout
    return [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")]


@needs_gpg
def test_real_single_key_matching_is_accepted(keys):
    assert real_verdict(keys["a"], keys["a_fpr"])["ok"] is True


@needs_gpg
def test_real_single_key_not_matching_is_refused(keys):
    result = real_verdict(keys["a"], keys["b_fpr"])
    assert_refused(result, "not the pinned key", keys["a_fpr"])


@needs_gpg
@pytest.mark.parametrize("order", ["ab", "ba"])
def test_real_two_key_file_is_refused(keys, order):
    data = b"".join(keys[k] for k in order)
    shown = show_keys(data)
    assert [ln.split(":")[0] for ln in shown.stdout.decode().splitlines()].count("pub") == 2
    for pin in (keys["a_fpr"], keys["b_fpr"]):
        assert_refused(real_verdict(data, pin), "2 primary keys", keys["a_fpr"], keys["b_fpr"])


@needs_gpg
def test_real_subkey_does_not_count(keys):
    assert len(keys["b_fprs"]) == 2, "key b carries a subkey"
    shown = show_keys(keys["b"]).stdout.decode()
    assert "\nsub:" in shown
    result = real_verdict(keys["b"], keys["b_fpr"])
    assert result["ok"] is True, result["msg"]
    assert_refused(real_verdict(keys["b"], keys["b_fprs"][1]), "subkey")


@needs_gpg
@pytest.mark.parametrize("data", [b"", b"garbage, not a key\n", b"<html><body>404 Not Found</body></html>\n",
                                  b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nbm90IGEga2V5\n-----END PGP PUBLIC KEY BLOCK-----\n"])
def test_real_garbage_is_refused(data):
    result = real_verdict(data, FPR_A)
    assert result["ok"] is False and result["primary_keys"] == 0, result["msg"]
    assert VAR in result["msg"] and URL in result["msg"]


@needs_gpg
def test_fixture_repository_key_is_one_primary_key(tmp_path):
    """The test bed's throwaway key (tests/harness/fixture_repo.py) passes the rule against its fingerprint.txt."""
    sys.path.insert(0, str(ROOT / "tests" / "harness"))
    try:
        import fixture_repo
    finally:
        sys.path.remove(str(ROOT / "tests" / "harness"))
    repo_dir = tmp_path / "repo"
    repo_dir.mkdir()
    (repo_dir / "Release").write_text("Origin: kiln-fixture\n")
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    made = fixture_repo.make_key(str(home), tmp_path)
    fixture_repo.sign([repo_dir], tmp_path, str(home), made)
    fpr = (tmp_path / "fingerprint.txt").read_text().strip()
    assert fpr == made and (repo_dir / "InRelease").exists()
    result = real_verdict((tmp_path / "key.asc").read_bytes(), fpr)
    assert result["ok"] is True, result["msg"]
    assert result["primary_keys"] == 1
