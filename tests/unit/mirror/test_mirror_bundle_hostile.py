"""Hostile input to the bundle check: a manifest with any JSON in any field, garbage manifest files,
garbage key and signature bytes. Each is reported as a problem naming the field or file, never an
exception (module_utils/kiln/mirror/manifest.py, openpgp.py, bundle.verify)."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln.mirror import bundle, manifest, openpgp
from kiln_bundle_cases import TREE, fake_gpgv, keys, make_bundle, write_tree  # noqa: F401

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 80, 2 ** 80) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)
HEXISH = st.text(alphabet="0123456789abcdefABCDEF xyz-", max_size=70)
HUGE = st.integers(2 ** 63, 2 ** 90) | st.integers(-2 ** 70, -1)

# (where, label in the problem) -> predicate: could this value be valid there?
_SHA = re.compile(r"^[0-9a-f]{64}$")


def _size_ok(v):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2 ** 63


FIELDS = {
    ("schema",): ("schema", lambda v: v == manifest.SCHEMA),
    ("id",): ("id", lambda v: isinstance(v, str) and manifest.id_problem(v) is None),
    ("created",): ("created", lambda v: isinstance(v, str)),
    ("kiln_commit",): ("kiln_commit", lambda v: v is None or (isinstance(v, str) and len(v) <= 200)),
    ("base",): ("base", lambda v: v is None),
    ("stacks",): ("stacks", lambda v: isinstance(v, list) and all(isinstance(s, dict) and isinstance(
        s.get("fingerprint"), str) and s["fingerprint"] for s in v)),
    ("stacks", 0): ("stacks[0]", lambda v: isinstance(v, dict) and isinstance(v.get("fingerprint"), str)
                    and bool(v["fingerprint"])),
    ("stacks", 0, "fingerprint"): ("stacks[0]", lambda v: isinstance(v, str) and bool(v)),
    ("upstream_checks",): ("upstream_checks", lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v)),
    ("upstream_checks", 0): ("upstream_checks[0]", lambda v: isinstance(v, dict)),
    ("files",): ("files", lambda v: v == []),
    ("files", 0): ("files[0]", lambda v: False),
    ("files", 0, "path"): ("files[0].path", lambda v: isinstance(v, str) and manifest.path_problem(v) is None),
    ("files", 0, "sha256"): ("files[0].sha256", lambda v: isinstance(v, str) and bool(_SHA.match(v))),
    ("files", 0, "size"): ("files[0].size", _size_ok),
    ("inherited",): ("inherited", lambda v: v == []),
    ("archive",): ("archive", lambda v: False),
    ("archive", "name"): ("archive.name", lambda v: v == "site-1.tar"),
    ("archive", "sha256"): ("archive.sha256", lambda v: isinstance(v, str) and bool(_SHA.match(v))),
    ("archive", "size"): ("archive.size", _size_ok),
}
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def good(tmp_path_factory, keys):  # noqa: F811
    root = tmp_path_factory.mktemp("hostile")
    return make_bundle(keys, write_tree(root / "tree", TREE), root / "out", "site-1")


def _replace(doc, where, value):
    doc = copy.deepcopy(doc)
    target = doc
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    return doc


def _named(label, problems):
    return any(p.startswith(label) or f" {label}" in p or p.startswith(label.split("[")[0] + ":") for p in problems)


@SETTINGS
@given(data=st.data())
def test_any_json_in_any_field_is_a_problem_naming_the_field(good, data):
    where = data.draw(st.sampled_from(sorted(FIELDS, key=str)))
    label, could_be_valid = FIELDS[where]
    extra = HUGE if where[-1] == "size" else HEXISH if where[-1] == "sha256" else st.nothing()
    value = data.draw(JSON | extra)
    doc = _replace(good.doc, where, value)
    view, problems = manifest.parse_manifest(json.loads(json.dumps(doc)) if _jsonable(doc) else doc)
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
    if not could_be_valid(value):
        assert _named(label, problems), (where, value, problems)


def _jsonable(doc):
    try:
        json.dumps(doc, allow_nan=True)
    except (TypeError, ValueError):
        return False
    return True


@pytest.mark.parametrize("where,value,expected", [
    (("files", 0, "size"), 2 ** 64, "files[0].size: 18446744073709551616 is not a size"),
    (("files", 0, "size"), True, "files[0].size: True is not a size"),
    (("files", 0, "size"), -1, "files[0].size: -1 is not a size"),
    (("files", 0, "size"), 1.5, "files[0].size: 1.5 is not a size"),
    (("files", 0, "sha256"), "Z" * 64, "files[0].sha256: "),
    (("files", 0, "sha256"), "AB" * 32, "files[0].sha256: "),
    (("files", 0, "path"), "/etc/passwd", "files[0].path: '/etc/passwd' is absolute"),
    (("files", 0, "path"), "a/../../b", "climbs out of the mirror"),
    (("files", 1, "path"), "dists/bookworm/Release", "is listed twice"),
    (("archive", "size"), "12", "archive.size: '12' is not a size"),
    (("id",), "../etc", "id: '../etc' is not a bundle id"),
    (("created",), "yesterday", "created: 'yesterday' is not an ISO 8601 time"),
    (("created",), "2026-12-07T05:44:18+02:00", "is not in UTC"),
    (("base",), [], "base: a list, not null or an object"),
    (("base",), {"id": "b0", "manifest_sha256": "x"}, "base.manifest_sha256: 'x'"),
    (("inherited",), [{"path": "a", "sha256": "0" * 64, "size": 1}], "inherited: lists files, but base is null"),
    (("schema",), "kiln-mirror-bundle/2", "schema: 'kiln-mirror-bundle/2', not kiln-mirror-bundle/1"),
    (("stacks",), {"fingerprint": "x"}, "stacks: an object, not a list"),
])
def test_wrong_fields_are_named(good, where, value, expected):
    _, problems = manifest.parse_manifest(_replace(good.doc, where, value))
    assert any(expected in p for p in problems), problems


def test_a_file_below_a_file_and_missing_fields_are_named(good):
    doc = copy.deepcopy(good.doc)
    doc["files"].append({"path": "kiln-mirror.asc/inner", "sha256": "0" * 64, "size": 1})
    del doc["archive"], doc["created"]
    _, problems = manifest.parse_manifest(doc)
    assert "archive: missing" in problems and "created: missing" in problems
    assert any("kiln-mirror.asc/inner: a file below another file" in p for p in problems), problems


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=JSON)
def test_any_json_document_is_refused_without_an_exception(doc):
    view, problems = manifest.parse_manifest(doc)
    assert problems and set(view) == {"id", "base", "stacks", "files", "inherited", "archive"}


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_verify_reports_a_hostile_manifest_never_raises(good, keys, tmp_path, data):  # noqa: F811
    where = data.draw(st.sampled_from(sorted(FIELDS, key=str)))
    doc = _replace(good.doc, where, data.draw(JSON))
    path = tmp_path / "hostile" / "site-1.manifest.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(doc))
    report = bundle.verify(good.tar, str(path), good.sig, keys.site, key_file=keys.site_pub,
                           gpg=fake_gpgv(keys.site), expected_stacks=["stack-aaaa1111"], base_dir=str(tmp_path))
    assert isinstance(report["ok"], bool) and all(isinstance(p, str) for p in report["problems"])
    assert isinstance(report["files"], int) and isinstance(report["bytes"], int)


@pytest.mark.parametrize("payload,expected", [
    (b"", "is not JSON"),
    (b"{not json", "is not JSON"),
    (b"\xff\xfe", "is not JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b"[]", "the manifest is a list, not a JSON object"),
    (b"null", "the manifest is null, not a JSON object"),
])
def test_a_garbage_manifest_file_is_a_problem(good, keys, tmp_path, payload, expected):  # noqa: F811
    path = tmp_path / "site-1.manifest.json"
    path.write_bytes(payload)
    report = bundle.verify(good.tar, str(path), good.sig, keys.site, key_file=keys.site_pub, gpg=fake_gpgv(keys.site))
    assert report["ok"] is False and any(expected in p for p in report["problems"]), report["problems"]
    report = bundle.verify(good.tar, str(tmp_path / "absent.json"), good.sig, keys.site, key_file=keys.site_pub,
                           gpg=fake_gpgv(keys.site))
    assert any("cannot read the manifest" in p for p in report["problems"])


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400) | st.builds(
    lambda body: b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n" + body + b"\n-----END PGP PUBLIC KEY BLOCK-----\n",
    st.binary(max_size=200)))
def test_garbage_openpgp_bytes_raise_only_openpgp_errors(data):
    for call in (openpgp.dearmor, lambda d: openpgp.primary_keys(openpgp.dearmor(d)), openpgp.signature_issuer):
        try:
            call(data)
        except openpgp.OpenPGPError:
            pass


def test_a_cut_key_file_is_refused(keys, tmp_path):  # noqa: F811
    from kiln.mirror import signature
    raw = Path(keys.site_pub_binary).read_bytes()
    cut = tmp_path / "cut.gpg"
    cut.write_bytes(raw[: len(raw) // 2])
    keyring, problems = signature.key_file_problems(str(cut), keys.site)
    assert keyring is None and "cut short" in problems[0]
    armored = Path(keys.site_pub).read_text().splitlines()
    damaged = tmp_path / "damaged.asc"
    damaged.write_text("\n".join(armored[:3] + [armored[3][::-1]] + armored[4:]) + "\n")
    assert signature.key_file_problems(str(damaged), keys.site)[0] is None
