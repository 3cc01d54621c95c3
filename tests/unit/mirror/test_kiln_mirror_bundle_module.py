"""library/kiln_mirror_bundle.py: verify, then unpack, on the mirror host (real gpgv; AnsibleModule's exits patched).

What the role relies on: a refused bundle fails with every problem and changes nothing; an accepted one
is unpacked and served, a second run changes nothing; check mode verifies and says whether it would
change, writing nothing; state verified only checks.
"""
from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from kiln_bundle_cases import TREE, keys, make_bundle, write_tree  # noqa: F401
from kiln_loader import load_source, ship_module_utils
from kiln_paths import REPO

# The module imports ansible.module_utils.kiln.mirror.bundle: serve module_utils/kiln under that name first.
ship_module_utils()
module = load_source("kiln_mirror_bundle", REPO / "library" / "kiln_mirror_bundle.py")


class AnsibleExitJson(Exception):
    pass


class AnsibleFailJson(Exception):
    pass


def _exit_json(self, **kwargs):
    raise AnsibleExitJson(kwargs)


def _fail_json(self, **kwargs):
    kwargs["failed"] = True
    raise AnsibleFailJson(kwargs)


@pytest.fixture(autouse=True)
def _patch_exits(monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)


@pytest.fixture
def site(tmp_path, keys):  # noqa: F811
    tree = write_tree(tmp_path / "tree", TREE)
    b = make_bundle(keys, tree, tmp_path / "incoming", "site-1")
    return {"bundle": b.tar, "key_file": keys.site_pub, "fingerprint": keys.site, "dest": str(tmp_path / "srv"),
            "expected_stacks": ["stack-aaaa1111"]}


def _main(args: dict, check_mode: bool = False) -> dict:
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args), pytest.raises((AnsibleExitJson, AnsibleFailJson)) as caught:
        module.main()
    return caught.value.args[0]


def test_unpacks_then_changes_nothing(site):
    first = _main(site)
    assert first["changed"] is True and "failed" not in first, first
    assert first["bundle_id"] == "site-1" and first["release_dir"] == os.path.join(site["dest"], "releases", "site-1")
    assert first["problems"] == [] and first["files"] == len(TREE) and first["previous"] is None
    assert os.readlink(os.path.join(site["dest"], "current")) == "releases/site-1"
    second = _main(site)
    assert second["changed"] is False and "failed" not in second


def test_check_mode_verifies_reports_and_writes_nothing(site):
    result = _main(site, check_mode=True)
    assert result["changed"] is True and result["msg"] == "would serve bundle site-1"
    assert not os.path.exists(site["dest"])
    _main(site)
    assert _main(site, check_mode=True)["changed"] is False


def test_state_verified_only_checks(site):
    result = _main(dict(site, state="verified"))
    assert result["changed"] is False and result["msg"] == "bundle site-1 verified"
    assert not os.path.exists(site["dest"])


def test_a_refused_bundle_fails_with_every_problem_and_changes_nothing(site, keys):  # noqa: F811
    _main(site)
    tree = Path(site["dest"]).parent / "tree"
    (tree / "pool" / "added.deb").write_bytes(b"new")
    bad = make_bundle(keys, tree, Path(site["dest"]).parent / "bad", "site-2")
    raw = bytearray(Path(bad.tar).read_bytes())
    with tarfile.open(bad.tar) as tar:
        raw[tar.getmembers()[0].offset_data] ^= 1
    Path(bad.tar).write_bytes(bytes(raw))
    result = _main(dict(site, bundle=bad.tar, expected_stacks=["stack-other"]))
    assert result["failed"] is True and result["changed"] is False
    assert len(result["problems"]) == 3, result["problems"]  # archive sha256, the file, the stack
    assert result["msg"].startswith(f"bundle {bad.tar} refused, nothing changed; 3 problem(s): ")
    assert all(p in result["msg"] for p in result["problems"])
    assert os.readlink(os.path.join(site["dest"], "current")) == "releases/site-1"
    assert sorted(os.listdir(os.path.join(site["dest"], "releases"))) == ["site-1", "site-1.manifest.json"]


def test_a_bundle_not_named_tar_and_a_foreign_key_fail(site, keys):  # noqa: F811
    result = _main(dict(site, bundle=site["bundle"][:-4] + ".tgz"))
    assert result["failed"] is True and "named <id>.tar" in result["msg"]
    result = _main(dict(site, key_file=keys.other_pub))
    assert result["failed"] is True and "holds another key than the pinned one" in result["msg"]


def test_run_bundle_takes_a_gpgv_stand_in(site):
    calls = []

    def gpgv(argv):
        calls.append(argv)
        return {"rc": 2, "stdout": "[GNUPG:] ERRSIG 0123456789ABCDEF 22 8 00 0 9\n[GNUPG:] NO_PUBKEY 0123456789ABCDEF\n",
                "stderr": ""}

    result = module.run_bundle(dict(site, state="unpacked"), check_mode=False, gpg=gpgv)
    assert result["failed"] is True and calls and calls[0][0] == "gpgv"
    assert "signed by key" in result["problems"][0] and not os.path.exists(site["dest"])
