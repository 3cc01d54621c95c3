# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The air-gapped mirror's bundle: made from a mirror tree, checked on the far side, unpacked into releases.

A bundle is three files beside each other: ``<id>.tar`` (the mirror's files, uncompressed, regular
files only, sorted, with mtime, owner and mode normalised, so one tree gives one byte-identical tar),
``<id>.manifest.json`` (``manifest``) and ``<id>.manifest.json.asc`` (the site key's detached armored
signature of the manifest's bytes).

- :func:`scan_tree`, :func:`write_tar` (and ``manifest.build_manifest``, ``manifest.incremental``) make one;
- :func:`verify` checks one and collects *every* problem (never raises, never stops at the first);
- :func:`unpack` puts one in ``<dest>/releases/<id>/`` and switches the symlink ``<dest>/current``
  to it atomically, keeping the previous release for a rollback.

Standard library only; importable as ``kiln.mirror.bundle`` and as ``ansible.module_utils.kiln.mirror.bundle``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import tarfile
import tempfile
from typing import Any, BinaryIO, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .manifest import BundleError, build_manifest, incremental, parse_manifest, path_problem, read_manifest
from .signature import Runner, check_signature

__all__ = ["BundleError", "bundle_paths", "scan_tree", "write_tar", "build_manifest", "incremental", "verify",
           "current_release", "would_change", "unpack"]

_CHUNK = 1024 * 1024


def bundle_paths(tar_path: str) -> Tuple[str, str]:
    """``(manifest, signature)`` beside the bundle's tar: ``X.tar`` -> ``X.manifest.json``, ``X.manifest.json.asc``."""
    if not tar_path.endswith(".tar"):
        raise BundleError(f"{tar_path}: a bundle's archive is named <id>.tar (its manifest and signature beside it)")
    stem = tar_path[:-len(".tar")]
    return f"{stem}.manifest.json", f"{stem}.manifest.json.asc"


class _Hashing:
    """A file wrapper that hashes (sha256) and counts every byte read or written through it."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.sha, self.size = handle, hashlib.sha256(), 0

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.sha.update(data)
        self.size += len(data)
        return data

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.handle.write(data)

    def drain(self) -> None:
        while self.read(_CHUNK):
            pass


def _hash_stream(handle: Any) -> Tuple[str, int]:
    reader = _Hashing(handle)
    reader.drain()
    return reader.sha.hexdigest(), reader.size


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def scan_tree(root: str) -> List[Dict[str, Any]]:
    """Every file of the mirror tree at *root*: ``[{path, sha256, size}]`` sorted by path (relative, ``/``).

    Raises :class:`BundleError` naming every symlink, device, FIFO, socket or unusable name found (a
    bundle carries regular files only), and for a tree without files."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise BundleError(f"the mirror {root} is not a directory: give --mirror the mirror's top directory")
    files: List[Dict[str, Any]] = []
    refused: List[str] = []
    pending = [""]
    while pending:
        rel = pending.pop()
        with os.scandir(os.path.join(root, rel)) as entries:
            listed = sorted(entries, key=lambda e: e.name)
        for entry in listed:
            path = f"{rel}/{entry.name}" if rel else entry.name
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                pending.append(path)
            elif not stat.S_ISREG(mode):
                refused.append(f"{path} ({_kind(mode)})")
            elif path_problem(path):
                refused.append(f"{path!r} (its name {path_problem(path)})")
            else:
                fd = os.open(entry.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                with os.fdopen(fd, "rb") as handle:
                    sha, size = _hash_stream(handle)
                files.append({"path": path, "sha256": sha, "size": size})
    if refused:
        more = f" and {len(refused) - 20} more" if len(refused) > 20 else ""
        raise BundleError(f"the mirror {root} holds what a bundle cannot carry: {', '.join(sorted(refused)[:20])}{more}. "
                          "A bundle carries regular files only: replace each link by a copy of its file, remove the rest")
    if not files:
        raise BundleError(f"the mirror {root} holds no files: sync the mirror first")
    return sorted(files, key=lambda e: e["path"])


def write_tar(root: str, files: Sequence[Mapping[str, Any]], out_path: str) -> Dict[str, Any]:
    """Write *files* (from :func:`scan_tree`) of the tree at *root* into the uncompressed tar *out_path*.

    Members in path order, regular files only, mtime 0, uid/gid 0, no owner names, mode 0644: the same
    tree gives a byte-identical tar. Each file is hashed again as it is copied; a file that changed since
    the scan raises :class:`BundleError` (and no tar is left). Returns the manifest's ``archive``:
    ``{name, sha256, size}``."""
    root = os.path.abspath(root)
    part = f"{out_path}.part"
    try:
        with open(part, "wb") as raw:
            writer = _Hashing(raw)
            with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
                for entry in sorted(files, key=lambda e: e["path"]):
                    info = tarfile.TarInfo(entry["path"])
                    info.size, info.mtime, info.mode, info.type = entry["size"], 0, 0o644, tarfile.REGTYPE
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    fd = os.open(os.path.join(root, entry["path"]), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                    with os.fdopen(fd, "rb") as handle:
                        reader = _Hashing(handle)
                        try:
                            tar.addfile(info, reader)
                        except OSError:  # the file shrank: tarfile copies exactly info.size bytes
                            reader.size = -1
                        if reader.size != entry["size"] or reader.sha.hexdigest() != entry["sha256"] or handle.read(1):
                            raise BundleError(f"{entry['path']} in the mirror {root} changed while it was bundled: "
                                              "stop the mirror's sync and make the bundle again")
        os.replace(part, out_path)
    except BaseException:
        try:
            os.unlink(part)
        except OSError:
            pass
        raise
    return {"name": os.path.basename(out_path), "sha256": writer.sha.hexdigest(), "size": writer.size}


def _member_problem(member: tarfile.TarInfo) -> Optional[str]:
    if member.issym():
        return f"is a symbolic link (to {member.linkname}), not a file"
    if member.islnk():
        return f"is a hard link (to {member.linkname}), not a file"
    if member.isdir():
        return "is a directory entry (a bundle's tar holds files only)"
    if not member.isreg() or member.issparse():
        return "is a device, FIFO or sparse file, not a regular file"
    why = path_problem(member.name)
    return f"{why}" if why else None


def _check_archive(tar_path: str, view: Mapping[str, Any]) -> Tuple[List[str], List[str]]:
    """(archive problems, member problems) of one pass over the tar: its size and sha256 against the
    manifest's ``archive``, each member against ``files``."""
    name = os.path.basename(tar_path)
    files: Optional[Mapping[str, Mapping[str, Any]]] = view["files"]
    archive_problems: List[str] = []
    problems: List[str] = []
    seen: set = set()
    try:
        raw = open(tar_path, "rb")
    except OSError as exc:
        return [f"cannot read the archive {tar_path}: {exc.strerror or exc}"], []
    with raw:
        reader = _Hashing(raw)
        try:
            with tarfile.open(fileobj=reader, mode="r|") as tar:  # type: ignore[call-overload]
                for member in tar:
                    label = f"{name}: member {member.name!r}"
                    why = _member_problem(member)
                    if why:
                        problems.append(f"{label} {why}")
                        continue
                    if member.name in seen:
                        problems.append(f"{label} appears twice")
                        continue
                    seen.add(member.name)
                    if files is None:  # the manifest's list is unusable (a problem already): nothing to compare
                        continue
                    want = files.get(member.name)
                    if want is None:
                        problems.append(f"{label} is not in the manifest's files (an extra file)")
                        continue
                    sha, size = _hash_stream(tar.extractfile(member))
                    if size != want["size"]:
                        problems.append(f"{name}: {member.name}: {size} bytes, the manifest says {want['size']}")
                    elif sha != want["sha256"]:
                        problems.append(f"{name}: {member.name}: sha256 {sha} differs from the manifest's "
                                        f"{want['sha256']}: the file is damaged or was changed after signing")
        except Exception as exc:  # noqa: BLE001 - a truncated or hostile tar is a problem, never a traceback
            problems.append(f"{name}: unreadable after {reader.size} bytes ({type(exc).__name__}: {str(exc)[:200]}): "
                            "the archive is cut short or not a bundle's tar; copy the bundle again")
        reader.drain()
    if files is not None:
        missing = sorted(set(files) - seen)
        problems.extend(f"{name}: {path}: in the manifest's files but missing from the archive" for path in missing[:50])
        if len(missing) > 50:
            problems.append(f"{name}: {len(missing) - 50} more files missing from the archive")
    want_archive = view["archive"]
    if want_archive is not None:
        if want_archive["name"] != name:
            archive_problems.append(f"{tar_path}: the manifest is for {want_archive['name']}, not {name}")
        if reader.size != want_archive["size"]:
            archive_problems.append(f"{tar_path}: {reader.size} bytes, the manifest says {want_archive['size']}: "
                                    "the copy is incomplete or damaged; copy the bundle again")
        elif reader.sha.hexdigest() != want_archive["sha256"]:
            archive_problems.append(f"{tar_path}: sha256 {reader.sha.hexdigest()} differs from the manifest's "
                                    f"{want_archive['sha256']}: the archive was damaged or changed; copy the bundle again")
    return archive_problems, problems


def _hash_file(path: str) -> Tuple[Optional[str], str]:
    """(sha256, "") of a regular file (not followed through a link), else (None, why)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        return None, "missing" if exc.errno == errno.ENOENT else (exc.strerror or str(exc))
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None, "not a regular file"
        return _hash_stream(handle)[0], ""


def current_release(dest: str) -> Optional[str]:
    """The id of the release ``<dest>/current`` points at; None when there is no ``current`` yet."""
    link = os.path.join(dest, "current")
    try:
        target = os.readlink(link)
    except FileNotFoundError:
        return None
    except OSError:
        raise BundleError(f"{link} is not a symbolic link: kiln serves releases through it; move it away") from None
    parts = target.split("/")
    if len(parts) != 2 or parts[0] != "releases" or not parts[1] or parts[1].startswith("."):
        raise BundleError(f"{link} points at {target}, not releases/<bundle id>: it was changed by hand; "
                          "point it at a release (ln -sfn releases/<id> current) or remove it")
    return parts[1]


def _base_problems(view: Mapping[str, Any], base_dir: str) -> List[str]:
    base = view["base"]
    try:
        current = current_release(base_dir)
    except BundleError as exc:
        return [str(exc)]
    if current is None:
        return [f"the bundle is made on {base['id']}, but {base_dir} serves no release yet: unpack {base['id']} "
                "(a full bundle) first, or carry a full bundle"]
    if current not in (base["id"], view["id"]):
        return [f"the bundle is made on {base['id']}, but {base_dir} serves {current}: unpack the bundles in the "
                "order they were made, or carry a full bundle"]
    problems = []
    recorded = os.path.join(base_dir, "releases", f"{base['id']}.manifest.json")
    if current == base["id"]:
        sha, why = _hash_file(recorded)
        if sha is None:
            problems.append(f"{recorded}: {why}: the base release's manifest is not recorded, so the base cannot be "
                            "shown to be the one this bundle was made on; carry a full bundle")
        elif sha != base["manifest_sha256"]:
            problems.append(f"{base_dir} serves another bundle named {base['id']} (its manifest's sha256 is {sha}, "
                            f"this bundle was made on {base['manifest_sha256']}): carry a full bundle")
    release = os.path.join(base_dir, "releases", current)
    for path, entry in sorted((view["inherited"] or {}).items()):
        sha, why = _hash_file(os.path.join(release, path))
        if sha is None:
            problems.append(f"inherited {path}: {why} in {release}")
        elif sha != entry["sha256"]:
            problems.append(f"inherited {path}: sha256 {sha} in {release}, the manifest says {entry['sha256']}")
    return problems


def verify(tar_path: str, manifest_path: str, sig_path: str, fingerprint: str, *, key_file: str,
           expected_stacks: Optional[Iterable[str]] = None, base_dir: Optional[str] = None,
           gpg: Optional[Runner] = None) -> Dict[str, Any]:
    """Check a bundle and return ``{ok, problems, notes, id, files, bytes, inherited, stacks, base}``.

    In order, collecting every problem: the signature (``signature.check_signature``: made by the key of
    *key_file*, which must be exactly the pinned *fingerprint*); the manifest's schema, field by field;
    the archive's size and sha256; its members, exactly ``files``, each with its size and sha256 (no
    link, directory, absolute path, ``..`` or duplicate); every fingerprint of *expected_stacks* among
    the manifest's stacks; for an incremental bundle, that *base_dir* serves its base (or already this
    bundle) with every inherited file at its sha256 (without *base_dir* this is skipped, and a note says
    so). *gpg* runs ``gpgv`` (``kiln.process.run_argv`` by default). ``files``/``bytes`` count the files
    this tar carries. Never raises for bad input."""
    problems: List[str] = list(check_signature(sig_path, manifest_path, key_file, fingerprint, runner=gpg))
    notes: List[str] = []
    _, doc, manifest_problems = read_manifest(manifest_path)
    view, more = parse_manifest(doc) if not manifest_problems else (parse_manifest({})[0], [])
    problems += [f"{manifest_path}: {p}" for p in manifest_problems + more]
    archive_problems, member_problems = _check_archive(tar_path, view)
    problems += archive_problems + member_problems
    stacks = view["stacks"] or []
    for fpr in expected_stacks or []:
        if fpr not in stacks:
            problems.append(f"built for other stacks: missing {fpr} (the bundle carries {', '.join(stacks) or 'none'}): "
                            "make a bundle for this site's stacks (kiln-bundle create --stacks)")
    if view["base"] is not None:
        if base_dir is None:
            notes.append(f"incremental bundle on {view['base']['id']}: the base was not checked (no base directory)")
        else:
            problems += _base_problems(view, base_dir)
    files = view["files"] or {}
    return {"ok": not problems, "problems": problems, "notes": notes, "id": view["id"], "files": len(files),
            "bytes": sum(e["size"] for e in files.values()), "inherited": len(view["inherited"] or {}),
            "stacks": stacks, "base": (view["base"] or {}).get("id")}


def _extract(tar_path: str, files: Mapping[str, Mapping[str, Any]], into: str) -> None:
    written: set = set()
    try:
        with open(tar_path, "rb") as raw, tarfile.open(fileobj=raw, mode="r|") as tar:  # type: ignore[call-overload]
            for member in tar:
                want = files.get(member.name)
                if _member_problem(member) or want is None or member.name in written:
                    raise BundleError(f"{tar_path}: member {member.name!r} is not one of the manifest's files")
                target = os.path.join(into, member.name)
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
                with os.fdopen(fd, "wb") as out:
                    writer = _Hashing(out)
                    shutil.copyfileobj(tar.extractfile(member), writer, _CHUNK)
                    os.fchmod(out.fileno(), 0o644)
                if (writer.size, writer.sha.hexdigest()) != (want["size"], want["sha256"]):
                    raise BundleError(f"{tar_path}: {member.name} changed since the bundle was verified: copy it again")
                written.add(member.name)
    except (tarfile.TarError, EOFError) as exc:
        raise BundleError(f"{tar_path}: unreadable ({exc}): copy the bundle again") from None
    missing = sorted(set(files) - written)
    if missing:
        raise BundleError(f"{tar_path}: {len(missing)} of the manifest's files are missing (first {missing[0]})")


def _write_file(path: str, data: bytes) -> None:
    part = f"{path}.part"
    with open(part, "wb") as out:
        out.write(data)
        os.fchmod(out.fileno(), 0o644)
        os.fsync(out.fileno())
    os.replace(part, path)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _prune(releases: str, keep: Sequence[str]) -> List[str]:
    pruned = []
    for entry in sorted(os.listdir(releases)):
        stem = entry[:-len(".manifest.json")] if entry.endswith(".manifest.json") else entry
        if stem in keep:
            continue
        path = os.path.join(releases, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
        if not entry.startswith(".") and stem == entry:
            pruned.append(entry)
    return pruned


def _switch_needed(dest: str, ident: str, raw: bytes) -> bool:
    """False when ``<dest>/current`` serves release *ident* made from the manifest bytes *raw*; raises when it
    serves an *ident* made from another manifest (bundle ids are unique)."""
    if current_release(dest) != ident:
        return True
    sha, _ = _hash_file(os.path.join(dest, "releases", f"{ident}.manifest.json"))
    if sha == hashlib.sha256(raw).hexdigest():
        return False
    raise BundleError(f"{dest} already serves a release {ident} made from another manifest: bundle ids must be "
                      "unique; make the new bundle under a new --name")


def would_change(manifest_path: str, dest: str) -> bool:
    """Whether :func:`unpack` of the bundle of *manifest_path* into *dest* would change anything (check mode)."""
    raw, doc, problems = read_manifest(manifest_path)
    view, more = parse_manifest(doc) if not problems else ({}, [])
    if problems or more or raw is None:
        raise BundleError(f"{manifest_path}: " + "; ".join((problems + more)[:10]))
    return _switch_needed(os.path.abspath(dest), view["id"], raw)


def unpack(tar_path: str, manifest_path: str, dest: str) -> Dict[str, Any]:
    """Unpack a *verified* bundle into ``<dest>/releases/<id>/`` and serve it through ``<dest>/current``.

    The release is built in a temporary directory beside it (the tar's files, each hashed again, and
    the inherited files hard-linked from the current release), renamed into place, its manifest
    recorded as ``releases/<id>.manifest.json``; then ``current`` is switched with a new symlink renamed
    over it (atomic: a reader sees the old release or the new one). The previous release is kept (a
    rollback is ``ln -sfn releases/<previous> current``), older ones are removed. When ``current``
    already points at ``<id>`` with the same manifest nothing changes. Returns ``{changed, id,
    release_dir, previous, pruned}``; raises :class:`BundleError`."""
    raw, doc, problems = read_manifest(manifest_path)
    view, more = parse_manifest(doc) if not problems else ({}, [])
    if problems or more or raw is None:
        raise BundleError(f"{manifest_path}: " + "; ".join((problems + more)[:10]) + ": verify the bundle first")
    dest = os.path.abspath(dest)
    releases = os.path.join(dest, "releases")
    ident = view["id"]
    release = os.path.join(releases, ident)
    recorded = os.path.join(releases, f"{ident}.manifest.json")
    current = current_release(dest)
    if not _switch_needed(dest, ident, raw):
        return {"changed": False, "id": ident, "release_dir": release, "previous": None, "pruned": []}
    if view["base"] is not None and current != view["base"]["id"]:
        raise BundleError(f"{ident} is made on {view['base']['id']}, but {dest} serves {current or 'no release'}: "
                          "unpack the bundles in the order they were made (verify says so first)")
    os.makedirs(releases, mode=0o755, exist_ok=True)
    building = tempfile.mkdtemp(prefix=f".{ident}.", dir=releases)
    try:
        _extract(tar_path, view["files"], building)
        source = os.path.join(releases, current) if current else ""
        for path in sorted(view["inherited"]):
            target = os.path.join(building, path)
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            try:
                os.link(os.path.join(source, path), target, follow_symlinks=False)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                    raise BundleError(f"inherited {path}: cannot link it from {source} ({exc.strerror})") from None
                shutil.copyfile(os.path.join(source, path), target, follow_symlinks=False)
                os.chmod(target, 0o644)
        for top, dirs, _ in os.walk(building):
            for name in dirs:
                os.chmod(os.path.join(top, name), 0o755)
        os.chmod(building, 0o755)
        if os.path.lexists(release):  # an earlier, unfinished or rolled-back copy of this id: replace it
            shutil.rmtree(release)
        os.rename(building, release)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    _write_file(recorded, raw)
    link = os.path.join(dest, f".current.{os.getpid()}")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(f"releases/{ident}", link)
    os.replace(link, os.path.join(dest, "current"))
    _fsync_dir(dest)
    pruned = _prune(releases, [ident] + ([current] if current else []))
    return {"changed": True, "id": ident, "release_dir": release, "previous": current, "pruned": pruned}
