# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The dnf side of the offline mirror build: pure helpers for library/kiln_mirror_dnf.py.

The module runs dnf itself in a private, empty ``--installroot`` whose only repositories are the
target's upstreams (each ``gpgcheck=1``, ``repo_gpgcheck=1``, ``gpgkey`` the single key kiln pins
for it), enables the target's module streams there and lets ``dnf download --resolve --alldeps``
compute the closure. These functions render that configuration, read the rpm-md metadata
(repomd.xml, primary.xml, modules.yaml) and rpm's answers, and decide what is missing.
Standard library only.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET  # nosec B405 - signed repository metadata; expat fetches no entities
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .apt import MirrorError, pinned_key_listing

_FPR = re.compile(r"[0-9A-F]{40}", re.ASCII)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
_URL = re.compile(r"(?:https?|file)://[^\s\x00-\x1f\x7f]{1,2040}", re.ASCII)
_STREAM = re.compile(r"([A-Za-z0-9._+-]{1,64}):([A-Za-z0-9._+-]{1,64})", re.ASCII)
_SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)
_RPM_FILE = re.compile(r"(?P<name>.+)-(?P<version>[^-]+)-(?P<release>[^-]+)\.(?P<arch>[^.]+)\.rpm", re.ASCII)
_ARCHES = ("x86_64", "aarch64")
_REPO_NS = "{http://linux.duke.edu/metadata/repo}"
_COMMON_NS = "{http://linux.duke.edu/metadata/common}"
#: largest metadata document the build parses (primary.xml of a distribution is ~100 MiB uncompressed)
MAX_METADATA = 512 * 1024 * 1024


def check_fingerprint(value: Any, var: str) -> str:
    """A full 40-hex key fingerprint (spaces allowed, any case) as gpg writes it; MirrorError naming *var*."""
    text = value.replace(" ", "").upper() if isinstance(value, str) else ""
    if not _FPR.fullmatch(text):
        raise MirrorError(f"{var} is {value!r}: not a full 40-hex-digit key fingerprint (short key ids can be "
                          f"forged). Fix: gpg --show-keys --with-fingerprint <key file>")
    return text


def check_stream(value: Any) -> tuple[str, str]:
    """``module:stream`` (kiln_pkg_modules' form) -> (module, stream); MirrorError otherwise."""
    m = _STREAM.fullmatch(value) if isinstance(value, str) else None
    if not m:
        raise MirrorError(f"the module stream {value!r} is not <module>:<stream> (e.g. nvidia-driver:580-open)")
    return m.group(1), m.group(2)


def key_listing_problem(colons: str, fingerprint: str) -> str:
    """'' when ``gpg --show-keys --with-colons`` lists exactly one primary key, the pinned one; else the problem.

    A key file with a second key would make dnf and rpm trust that one too, so it is refused as well.
    """
    _, prim = pinned_key_listing(colons, fingerprint)
    if prim == [fingerprint.upper()]:
        return ""
    if not prim:
        return "holds no OpenPGP key"
    if fingerprint.upper() in prim:
        return f"holds {len(prim)} keys ({', '.join(prim)}), not only the pinned {fingerprint.upper()}"
    return f"holds {', '.join(prim)}, not the pinned {fingerprint.upper()}"


def repo_id(name: Any) -> str:
    """dnf's repository id of an upstream."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise MirrorError(f"the upstream name {name!r} is not a plain word")
    return f"kiln-{name}"


def repo_file(upstreams: Sequence[Mapping[str, Any]], key_files: Mapping[str, str]) -> str:
    """The private reposdir's only .repo file: every upstream verified by its own pinned key, nothing else."""
    parts = []
    for up in upstreams:
        name = up.get("name")
        rid = repo_id(name)
        url = up.get("url")
        if not isinstance(url, str) or not _URL.fullmatch(url):
            raise MirrorError(f"the {name} upstream URL {url!r} is not an http(s):// or file:// URL without white space")
        key = key_files.get(name)
        if not isinstance(key, str) or not key.startswith("/") or any(c.isspace() for c in key):
            raise MirrorError(f"the {name} upstream has no checked key file")
        parts.append(f"[{rid}]\nname=kiln mirror upstream {name}\nbaseurl={url.rstrip('/')}/\nenabled=1\n"
                     f"gpgcheck=1\nrepo_gpgcheck=1\ngpgkey=file://{key}\nskip_if_unavailable=0\n"
                     f"metadata_expire=0\n")
    return "\n".join(parts)


def dnf_argv(root: str, work: str, releasever: str, arch: str) -> list[str]:
    """``dnf`` and the options that confine it to the private installroot *root* (config, repos, cache, vars)."""
    if arch not in _ARCHES:
        raise MirrorError(f"unknown arch {arch!r}; use one of {list(_ARCHES)}")
    if not isinstance(releasever, str) or not re.fullmatch(r"[0-9]{1,3}(?:\.[0-9]{1,3})?", releasever, re.ASCII):
        raise MirrorError(f"the release version {releasever!r} is not a number such as 9")
    major = releasever.split(".", 1)[0]
    return [
        "dnf", "--quiet", "--assumeyes",
        f"--installroot={root}",
        f"--config={work}/dnf.conf",
        f"--releasever={releasever}",
        f"--forcearch={arch}",
        f"--setopt=reposdir={work}/repos.d",
        f"--setopt=cachedir={work}/cache",
        f"--setopt=persistdir={work}/persist",
        f"--setopt=logdir={work}/log",
        f"--setopt=varsdir={work}/vars",
        f"--setopt=pluginconfpath={work}/plugins",
        f"--setopt=module_platform_id=platform:el{major}",
        "--setopt=install_weak_deps=False",
        "--setopt=gpgcheck=True",
        "--setopt=repo_gpgcheck=True",
        "--setopt=localpkg_gpgcheck=True",
        "--setopt=keepcache=True",
        "--setopt=metadata_expire=0",
        "--setopt=skip_if_unavailable=False",
        # only the download plugin (dnf-plugins-core): no build-machine plugin configuration is read
        "--disableplugin=*",
        "--enableplugin=download",
        "--disablerepo=*",
    ]


def repo_enable_argv(upstreams: Sequence[Mapping[str, Any]]) -> list[str]:
    """``--enablerepo`` for exactly the target's upstreams (after ``--disablerepo=*``)."""
    return [f"--enablerepo={repo_id(up.get('name'))}" for up in upstreams]


def _xml(text: bytes | str, what: str) -> ET.Element:
    if len(text) > MAX_METADATA:
        raise MirrorError(f"{what} is larger than {MAX_METADATA} bytes: refused")
    try:
        return ET.fromstring(text)  # nosec B314 - see the import
    except ET.ParseError as exc:
        raise MirrorError(f"{what} is not well-formed XML ({exc}): refused") from exc


def parse_repomd(text: bytes | str) -> dict[str, dict[str, Any]]:
    """repomd.xml -> {type: {href, checksum_type, checksum, size}}; MirrorError when it is malformed."""
    root = _xml(text, "repomd.xml")
    if root.tag != f"{_REPO_NS}repomd":
        raise MirrorError(f"repomd.xml's root is {root.tag!r}, not repomd: refused")
    out: dict[str, dict[str, Any]] = {}
    for data in root.findall(f"{_REPO_NS}data"):
        kind = data.get("type") or ""
        loc = data.find(f"{_REPO_NS}location")
        csum = data.find(f"{_REPO_NS}checksum")
        size = data.find(f"{_REPO_NS}size")
        href = loc.get("href") if loc is not None else None
        if not kind or not href or csum is None or not (csum.text or "").strip():
            raise MirrorError(f"repomd.xml has a data entry {kind or '(no type)'} without location or checksum: refused")
        if href.startswith("/") or ".." in href.split("/") or "://" in href:
            raise MirrorError(f"repomd.xml points {kind} at {href!r}, outside the repository: refused")
        out[kind] = {"href": href, "checksum_type": (csum.get("type") or "").lower(),
                     "checksum": (csum.text or "").strip().lower(),
                     "size": int(size.text) if size is not None and (size.text or "").strip().isdigit() else None}
    if "primary" not in out:
        raise MirrorError("repomd.xml lists no primary metadata: refused")
    return out


def parse_primary(text: bytes | str) -> list[dict[str, Any]]:
    """primary.xml -> [{name, epoch, version, release, arch, href, sha256, size}] (sha256 packages only)."""
    root = _xml(text, "primary.xml")
    if root.tag != f"{_COMMON_NS}metadata":
        raise MirrorError(f"primary.xml's root is {root.tag!r}, not metadata: refused")
    out = []
    for pkg in root.findall(f"{_COMMON_NS}package"):
        if pkg.get("type") != "rpm":
            continue
        ver = pkg.find(f"{_COMMON_NS}version")
        loc = pkg.find(f"{_COMMON_NS}location")
        csum = pkg.find(f"{_COMMON_NS}checksum")
        size = pkg.find(f"{_COMMON_NS}size")
        name = (pkg.findtext(f"{_COMMON_NS}name") or "").strip()
        arch = (pkg.findtext(f"{_COMMON_NS}arch") or "").strip()
        if ver is None or loc is None or csum is None or not name:
            raise MirrorError(f"primary.xml has a package {name or '(no name)'} without version, location or checksum: refused")
        digest = (csum.text or "").strip().lower()
        if (csum.get("type") or "").lower() != "sha256" or not _SHA256.fullmatch(digest):
            continue  # a sha1/md5 entry proves nothing: the file is refused for want of a sha256
        package_size = size.get("package") if size is not None else None
        out.append({"name": name, "epoch": ver.get("epoch") or "0", "version": ver.get("ver") or "",
                    "release": ver.get("rel") or "", "arch": arch, "href": loc.get("href") or "",
                    "sha256": digest, "size": int(package_size) if package_size and package_size.isdigit() else None})
    return out


def primary_index(entries: Iterable[Mapping[str, Any]]) -> dict[str, set[str]]:
    """basename of each package's location -> {sha256}: what a downloaded file must match."""
    out: dict[str, set[str]] = {}
    for e in entries:
        href = str(e.get("href") or "")
        if href and e.get("sha256"):
            out.setdefault(href.rsplit("/", 1)[-1], set()).add(str(e["sha256"]))
    return out


def parse_checksig(text: str) -> dict[str, bool]:
    """``rpmkeys --checksig`` lines -> {file: signature verified}. Only ``digests signatures OK`` counts.

    An unsigned package prints ``digests OK`` (no signature checked), one signed by a key the private rpm
    database lacks ``digests SIGNATURES NOT OK``: both are False.
    """
    out: dict[str, bool] = {}
    for line in text.splitlines():
        path, sep, verdict = line.rstrip().rpartition(": ")
        if not sep or not path.endswith(".rpm"):
            continue
        words = verdict.split()
        out[path] = bool(words) and words[-1] == "OK" and "NOT" not in words and "signatures" in words
    return out


def rpm_fields(filename: str) -> tuple[str, str, str, str]:
    """name, version, release, arch of a package file name ``name-version-release.arch.rpm``."""
    m = _RPM_FILE.fullmatch(filename)
    if not m or "/" in filename:
        raise MirrorError(f"{filename!r} is not an rpm file name (name-version-release.arch.rpm)")
    return m.group("name"), m.group("version"), m.group("release"), m.group("arch")


def missing_requests(requests: Sequence[str], packages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The requests (``name``, ``name-version`` or ``name-version-release``, epoch optional) no package satisfies.

    dnf download --resolve from an empty installroot downloads every request; one missing means the
    closure was not read (or dnf skipped it), and a mirror built from it would lack the package.
    """
    have: set[str] = set()
    for p in packages:
        name, ver, rel = str(p.get("name")), str(p.get("version")), str(p.get("release"))
        have.update({name, f"{name}-{ver}", f"{name}-{ver}-{rel}"})
    out = []
    for req in requests:
        text = str(req)
        plain = re.sub(r"-[0-9]+:", "-", text, count=1)  # name-E:V-R -> name-V-R
        if text not in have and plain not in have:
            out.append(text)
    return out


def _documents(text: str) -> list[str]:
    docs, cur = [], []
    for line in text.splitlines():
        if line.strip() in ("---", "...") and not line.startswith(" "):
            if any(c.strip() for c in cur):
                docs.append("\n".join(cur))
            cur = []
            continue
        cur.append(line)
    if any(c.strip() for c in cur):
        docs.append("\n".join(cur))
    return docs


def _field(doc: str, key: str, indent: int) -> str:
    m = re.search(rf"^{' ' * indent}{key}:[ \t]*(.*?)[ \t]*$", doc, re.MULTILINE)
    return m.group(1).strip("'\"") if m else ""


def select_modules(text: str, streams: Sequence[str]) -> tuple[str, list[str]]:
    """The modulemd documents of exactly the *streams* (``module:stream``) from a modules.yaml, and those not found.

    Only ``document: modulemd`` entries whose data name and stream are wanted are kept (every context and
    version of them). modulemd-defaults and every other module are left out: the mirror serves only the
    packages of the streams the stacks enable, and a stream (or default) advertised without its packages
    would let dnf pick something the mirror cannot deliver.
    """
    wanted = [check_stream(s) for s in streams]
    if len(text) > MAX_METADATA:
        raise MirrorError(f"modules.yaml is larger than {MAX_METADATA} bytes: refused")
    kept: list[str] = []
    found: set[tuple[str, str]] = set()
    for doc in _documents(text):
        if _field(doc, "document", 0) != "modulemd":
            continue
        pair = (_field(doc, "name", 2), _field(doc, "stream", 2))
        if pair in wanted:
            kept.append(doc)
            found.add(pair)
    lost = [f"{m}:{s}" for m, s in wanted if (m, s) not in found]
    body = "".join(f"---\n{doc.strip(chr(10))}\n...\n" for doc in kept)
    return body, lost
