# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""A bundle's manifest (schema ``kiln-mirror-bundle/1``): built, written, read and checked field by field.

The manifest says what a bundle carries and what it was made for::

    {"schema": "kiln-mirror-bundle/1", "id": "<name>", "created": "<UTC ISO 8601>",
     "kiln_commit": str | null, "base": null | {"id": str, "manifest_sha256": hex64},
     "stacks": [{"fingerprint": str, ...}], "upstream_checks": [{...}],
     "files": [{"path", "sha256", "size"}], "inherited": [{"path", "sha256", "size"}],
     "archive": {"name": "<name>.tar", "sha256": hex64, "size": int}}

``files`` are the files inside the tar, ``inherited`` the files of the base bundle that this mirror
still serves without carrying them (empty for a full bundle), both sorted by path. :func:`parse_manifest`
never raises on hostile JSON: it returns what it could use and one problem per wrong field, naming it.

Standard library only; importable as ``kiln.mirror.manifest`` and as
``ansible.module_utils.kiln.mirror.manifest``.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

__all__ = ["SCHEMA", "BundleError", "MAX_MANIFEST_BYTES", "path_problem", "id_problem", "parse_manifest",
           "read_manifest", "build_manifest", "manifest_bytes", "incremental", "stack_fingerprints",
           "base_reference", "utc_now"]

SCHEMA = "kiln-mirror-bundle/1"
#: Largest manifest read (bytes): about a million files.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024
#: Largest file size a manifest may state (a tar member's size field).
MAX_SIZE = 2 ** 63 - 1
#: Problems listed per list field before the rest are counted.
MAX_LISTED = 50

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_FIELDS = ("schema", "id", "created", "kiln_commit", "base", "stacks", "upstream_checks", "files", "inherited",
           "archive")


class BundleError(Exception):
    """A bundle cannot be made, read or unpacked: the message names the file and the fix."""


def utc_now() -> str:
    """The current UTC time as the manifest's ``created`` writes it (``2026-12-07T05:44:18Z``)."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


def path_problem(path: Any) -> Optional[str]:
    """Why *path* cannot be a file of a bundle (a relative POSIX path of plain names); None when it can."""
    if not isinstance(path, str):
        return f"is {_kind(path)}, not a string"
    if not path:
        return "is empty"
    if path.startswith("/"):
        return "is absolute"
    parts = path.split("/")
    if ".." in parts:
        return "climbs out of the mirror (..)"
    if any(part in ("", ".") for part in parts):
        return "is not a plain relative path (an empty or '.' component)"
    if any(ord(c) < 32 or c in "\x7f\\" for c in path):
        return "holds a control character or a backslash"
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if len(encoded) > 4096 or any(len(part.encode("utf-8")) > 255 for part in parts):
        return "is too long (4096 bytes, 255 per name)"
    return None


def id_problem(value: Any) -> Optional[str]:
    """Why *value* cannot be a bundle id (it names the release directory); None when it can."""
    if isinstance(value, str) and _ID.match(value):
        return None
    return (f"{_short(value)} is not a bundle id (1 to 128 letters, digits, '.', '_', '-', starting with a letter "
            "or digit)")


def _sha_size(where: str, entry: Mapping[str, Any], problems: List[str]) -> bool:
    ok = True
    sha = entry.get("sha256")
    if not isinstance(sha, str) or not _HEX64.match(sha):
        problems.append(f"{where}.sha256: {_short(sha)} is not a sha256 (64 lower-case hex digits)")
        ok = False
    size = entry.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_SIZE:
        problems.append(f"{where}.size: {_short(size)} is not a size in bytes (an integer from 0 to 2^63-1)")
        ok = False
    return ok


def _entries(field: str, value: Any, problems: List[str]) -> Optional[Dict[str, Dict[str, Any]]]:
    """path -> entry of a files/inherited list; its wrong entries are problems (the first MAX_LISTED)."""
    if not isinstance(value, list):
        problems.append(f"{field}: {_kind(value)}, not a list of {{path, sha256, size}}")
        return None
    found: Dict[str, Dict[str, Any]] = {}
    own: List[str] = []
    for index, entry in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(entry, dict):
            own.append(f"{where}: {_kind(entry)}, not an object {{path, sha256, size}}")
            continue
        path = entry.get("path")
        why = path_problem(path)
        ok = _sha_size(where, entry, own)
        if why:
            own.append(f"{where}.path: {_short(path)} {why}")
        elif path in found:
            own.append(f"{where}.path: {path} is listed twice")
        elif ok:
            found[path] = {"path": path, "sha256": entry["sha256"], "size": entry["size"]}
    problems.extend(own[:MAX_LISTED])
    if len(own) > MAX_LISTED:
        problems.append(f"{field}: {len(own) - MAX_LISTED} more wrong entries")
    return found


def _created_problem(value: Any) -> Optional[str]:
    if not isinstance(value, str):
        return f"created: {_kind(value)}, not a UTC time (2026-12-07T05:44:18Z)"
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return f"created: {_short(value)} is not an ISO 8601 time"
    if when.utcoffset() != datetime.timedelta(0):
        return f"created: {_short(value)} is not in UTC"
    return None


def parse_manifest(doc: Any) -> Tuple[Dict[str, Any], List[str]]:
    """``(view, problems)`` of a loaded manifest; never raises.

    *view* holds what passed its check, None where a field failed: ``id``, ``base`` ({id,
    manifest_sha256} or None), ``stacks`` (their fingerprints), ``files`` and ``inherited`` (path ->
    entry), ``archive`` ({name, sha256, size}). Each problem names its field (``files[3].sha256``)."""
    view: Dict[str, Any] = {"id": None, "base": None, "stacks": None, "files": None, "inherited": None,
                            "archive": None}
    if not isinstance(doc, dict):
        return view, [f"the manifest is {_kind(doc)}, not a JSON object"]
    problems = [f"{name}: missing" for name in _FIELDS if name not in doc]
    if "schema" in doc and doc["schema"] != SCHEMA:
        problems.append(f"schema: {_short(doc['schema'])}, not {SCHEMA} (made by another kiln version?)")
    if "id" in doc:
        why = id_problem(doc["id"])
        if why:
            problems.append(f"id: {why}")
        else:
            view["id"] = doc["id"]
    if "created" in doc:
        why = _created_problem(doc["created"])
        if why:
            problems.append(why)
    commit = doc.get("kiln_commit")
    if commit is not None and (not isinstance(commit, str) or len(commit) > 200):
        problems.append(f"kiln_commit: {_short(commit)}, not null or a commit id")
    base = doc.get("base")
    if isinstance(base, dict):
        before = len(problems)
        why = id_problem(base.get("id"))
        if why:
            problems.append(f"base.id: {why}")
        sha = base.get("manifest_sha256")
        if not isinstance(sha, str) or not _HEX64.match(sha):
            problems.append(f"base.manifest_sha256: {_short(sha)} is not a sha256 (64 lower-case hex digits)")
        if len(problems) == before:
            view["base"] = {"id": base["id"], "manifest_sha256": sha}
    elif base is not None:
        problems.append(f"base: {_kind(base)}, not null or an object {{id, manifest_sha256}}")
    stacks = doc.get("stacks", [])
    if isinstance(stacks, list):
        bad = [i for i, s in enumerate(stacks) if not isinstance(s, dict) or not isinstance(s.get("fingerprint"), str)
               or not s["fingerprint"]]
        problems.extend(f"stacks[{i}]: not an object with a fingerprint (a string)" for i in bad[:MAX_LISTED])
        if not bad:
            view["stacks"] = [s["fingerprint"] for s in stacks]
    else:
        problems.append(f"stacks: {_kind(stacks)}, not a list of objects")
    checks = doc.get("upstream_checks", [])
    if not isinstance(checks, list):
        problems.append(f"upstream_checks: {_kind(checks)}, not a list of objects")
    else:
        problems.extend(f"upstream_checks[{i}]: {_kind(c)}, not an object"
                        for i, c in enumerate(checks) if not isinstance(c, dict))
    files = _entries("files", doc["files"], problems) if "files" in doc else None
    inherited = _entries("inherited", doc["inherited"], problems) if "inherited" in doc else None
    if inherited and "base" in doc and base is None:
        problems.append("inherited: lists files, but base is null (a full bundle carries every file)")
    if files is not None and inherited is not None:
        both = sorted(set(files) & set(inherited))
        problems.extend(f"{p}: both carried (files) and inherited" for p in both[:MAX_LISTED])
        paths = set(files) | set(inherited)
        under = sorted({p for p in paths for i in range(1, p.count("/") + 1)
                        if p.rsplit("/", i)[0] in paths})
        problems.extend(f"{p}: a file below another file ({p.split('/')[0]}...)" for p in under[:MAX_LISTED])
        if not both and not under:
            view["files"], view["inherited"] = files, inherited
    archive = doc.get("archive")
    if isinstance(archive, dict):
        before = len(problems)
        name = archive.get("name")
        if not isinstance(name, str) or (view["id"] is not None and name != f"{view['id']}.tar"):
            problems.append(f"archive.name: {_short(name)}, not the bundle id with .tar")
        _sha_size("archive", archive, problems)
        if len(problems) == before:
            view["archive"] = {"name": name, "sha256": archive["sha256"], "size": archive["size"]}
    elif "archive" in doc:
        problems.append(f"archive: {_kind(archive)}, not an object {{name, sha256, size}}")
    return view, problems


def read_manifest(path: str) -> Tuple[Optional[bytes], Any, List[str]]:
    """``(raw, doc, problems)``: the manifest file's bytes, its JSON (None when unreadable) and why not."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        return None, None, [f"cannot read the manifest {path}: {exc.strerror or exc}"]
    if len(raw) > MAX_MANIFEST_BYTES:
        return None, None, [f"the manifest {path} is larger than {MAX_MANIFEST_BYTES} bytes: not a bundle manifest"]
    try:
        return raw, json.loads(raw.decode("utf-8")), []
    except RecursionError:
        return raw, None, [f"the manifest {path}: JSON nested too deeply"]
    except (ValueError, UnicodeDecodeError) as exc:
        return raw, None, [f"the manifest {path} is not JSON ({str(exc)[:200]}): copy the bundle again"]


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    """The manifest as written and signed: sorted keys, one key per line, ASCII, a final newline."""
    return (json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode("ascii")


def base_reference(path: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(manifest, base)`` of a base bundle's manifest file: its JSON and the ``base`` object a bundle
    made on it records ({id, manifest_sha256 of the file's bytes})."""
    raw, doc, problems = read_manifest(path)
    view, more = parse_manifest(doc) if not problems else ({}, [])
    problems += more
    if problems or raw is None:
        raise BundleError(f"the base manifest {path} cannot be used: " + "; ".join(problems[:10]))
    return doc, {"id": view["id"], "manifest_sha256": hashlib.sha256(raw).hexdigest()}


def incremental(files: Sequence[Mapping[str, Any]], base_manifest: Mapping[str, Any]
                ) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """``(carried, inherited)``: a file whose path and sha256 the base serves (its ``files`` or its own
    ``inherited``) is inherited, any other is carried. Both sorted by path."""
    view, problems = parse_manifest(base_manifest)
    if problems or view["files"] is None:
        raise BundleError("the base manifest cannot be used: " + "; ".join(problems[:10]))
    served = {(e["path"], e["sha256"]) for e in list(view["files"].values()) + list(view["inherited"].values())}
    carried, inherited = [], []
    for entry in sorted(files, key=lambda e: e["path"]):
        item = {"path": entry["path"], "sha256": entry["sha256"], "size": entry["size"]}
        (inherited if (item["path"], item["sha256"]) in served else carried).append(item)
    return carried, inherited


def build_manifest(name: str, files: Iterable[Mapping[str, Any]], archive: Mapping[str, Any], *,
                   created: Optional[str] = None, kiln_commit: Optional[str] = None,
                   base: Optional[Mapping[str, Any]] = None, stacks: Iterable[Mapping[str, Any]] = (),
                   upstream_checks: Iterable[Mapping[str, Any]] = (),
                   inherited: Iterable[Mapping[str, Any]] = ()) -> Dict[str, Any]:
    """The manifest of bundle *name* carrying *files* in *archive* ({name, sha256, size}); raises
    :class:`BundleError` when it would not pass :func:`parse_manifest` (a bad stack or upstream entry)."""
    def entries(items: Iterable[Mapping[str, Any]]) -> List[Dict[str, Any]]:
        return sorted(({"path": e["path"], "sha256": e["sha256"], "size": e["size"]} for e in items),
                      key=lambda e: e["path"])

    manifest = {
        "schema": SCHEMA, "id": name, "created": created or utc_now(), "kiln_commit": kiln_commit,
        "base": dict(base) if base is not None else None,
        "stacks": [dict(s) for s in stacks], "upstream_checks": [dict(c) for c in upstream_checks],
        "files": entries(files), "inherited": entries(inherited),
        "archive": {"name": archive["name"], "sha256": archive["sha256"], "size": archive["size"]},
    }
    _, problems = parse_manifest(json.loads(manifest_bytes(manifest)))
    if problems:
        raise BundleError(f"bundle {name}: the manifest would be invalid: " + "; ".join(problems[:10]))
    return manifest


def stack_fingerprints(data: Any, where: str = "stacks") -> List[str]:
    """The stack fingerprints in *data*: a list of fingerprints, a list of stacks ({fingerprint, ...}),
    or an object (a plan) with such a list under ``stacks``. Raises :class:`BundleError` otherwise."""
    if isinstance(data, dict) and "stacks" in data:
        data = data["stacks"]
    if not isinstance(data, list):
        raise BundleError(f"{where}: {_kind(data)}, not a list of stack fingerprints or a plan with stacks")
    found = []
    for index, item in enumerate(data):
        value = item.get("fingerprint") if isinstance(item, dict) else item
        if not isinstance(value, str) or not value:
            raise BundleError(f"{where}[{index}]: not a fingerprint (a string) or a stack with one")
        found.append(value)
    return found
