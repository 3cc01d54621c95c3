# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The apt side of the offline mirror build: pure helpers for library/kiln_mirror_apt.py.

The module runs apt itself (a private apt root: the target OS's upstream sources, each signed-by
a keyring that holds only the key kiln pins, an empty or given dpkg status), so apt computes the
dependency closure against the target's own indexes and verifies every index signature. These
functions render that root, read apt's answers and decide where each package is served.
Standard library only.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_PRINT_URI = re.compile(r"^'(?P<uri>[^']+)' (?P<file>\S+) (?P<size>\d+) (?P<hash>\S*)$")
_WORD = re.compile(r"[A-Za-z0-9._/+~-]{1,128}", re.ASCII)
_FPR = re.compile(r"[0-9A-F]{40}", re.ASCII)


class MirrorError(Exception):
    """A problem that stops the mirror build, its message naming the input and the fix."""


def apt_options(root: str, status: str, deb_arch: str) -> list[str]:
    """apt-get/apt-cache options that confine apt to the private root *root*."""
    return [
        "-o", f"Dir::Etc={root}/etc/apt",
        "-o", f"Dir::Etc::sourcelist={root}/etc/apt/sources.list",
        "-o", "Dir::Etc::sourceparts=-",
        "-o", f"Dir::Etc::preferences={root}/etc/apt/preferences",
        "-o", "Dir::Etc::preferencesparts=-",
        "-o", f"Dir::State={root}/state",
        "-o", f"Dir::State::Lists={root}/lists",
        "-o", f"Dir::State::status={status}",
        "-o", f"Dir::Cache={root}/cache",
        "-o", f"Dir::Cache::archives={root}/archives",
        "-o", "Debug::NoLocking=1",
        "-o", f"APT::Architecture={deb_arch}",
        "-o", f"APT::Architectures::={deb_arch}",
        "-o", "Acquire::Languages=none",
        # indexes stored plain (a host may store them lz4- or gzip-compressed): the build reads their SHA256s
        "-o", "Acquire::GzipIndexes=false",
        "-o", "APT::Install-Recommends=false",
        "-o", "APT::Get::AllowUnauthenticated=false",
        # the private root is not readable by apt's _apt sandbox user (a build directory of any owner)
        "-o", "APT::Sandbox::User=root",
    ]


def source_lines(upstreams: Sequence[Mapping[str, Any]], keyring_dir: str) -> list[str]:
    """One-line apt sources for the upstreams, each ``signed-by`` its own pinned-key keyring."""
    lines = []
    for up in upstreams:
        name = str(up["name"])
        keyring = os.path.join(keyring_dir, f"{name}.gpg")
        url = str(up["url"]).rstrip("/")
        if any(c.isspace() for c in url):
            raise MirrorError(f"the {name} upstream URL {url!r} contains white space")
        if up["kind"] == "flat":
            lines.append(f"deb [signed-by={keyring}] {url}/ /")
            continue
        suites = list(up.get("suites") or [])
        comps = list(up.get("components") or [])
        for word in suites + comps:
            if not isinstance(word, str) or not _WORD.fullmatch(word):
                raise MirrorError(f"the {name} upstream has a suite or component {word!r} that is not a plain word")
        if not suites or not comps:
            raise MirrorError(f"the {name} upstream names no suites or components")
        for suite in suites:
            lines.append(f"deb [signed-by={keyring}] {url} {suite} {' '.join(comps)}")
    return lines


def parse_print_uris(text: str) -> list[dict[str, Any]]:
    """apt-get --print-uris lines -> [{uri, filename, size}]; anything else apt printed is ignored."""
    out = []
    for line in text.splitlines():
        m = _PRINT_URI.match(line.strip())
        if m and m.group("file").endswith(".deb"):
            out.append({"uri": m.group("uri"), "filename": m.group("file"), "size": int(m.group("size"))})
    return out


def parse_packages_index(text: str) -> Iterable[dict[str, str]]:
    """The stanzas of a Packages index (only the fields the mirror needs)."""
    stanza: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if stanza:
                yield stanza
            stanza = {}
            continue
        if line[0] in " \t":
            continue
        key, _, value = line.partition(":")
        if key in ("Package", "Version", "Architecture", "Filename", "Size", "SHA256"):
            stanza[key] = value.strip()
    if stanza:
        yield stanza


def index_hashes(stanzas: Iterable[Mapping[str, str]]) -> dict[str, set[tuple[int, str]]]:
    """basename of Filename -> {(size, sha256)} from signed indexes: what a downloaded file must match."""
    out: dict[str, set[tuple[int, str]]] = {}
    for st in stanzas:
        if st.get("Filename") and st.get("SHA256") and st.get("Size", "").isdigit():
            out.setdefault(os.path.basename(st["Filename"]), set()).add((int(st["Size"]), st["SHA256"].lower()))
    return out


def route(uri: str, upstreams: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], str]:
    """The upstream a package URI comes from (longest URL prefix) and the component it is served in."""
    best: Mapping[str, Any] | None = None
    plain = urllib.parse.unquote(uri)
    for up in upstreams:
        base = _norm(str(up["url"]))
        if _norm(plain).startswith(base.rstrip("/") + "/") and (best is None or len(base) > len(_norm(str(best["url"])))):
            best = up
    if best is None:
        raise MirrorError(f"apt chose {uri}, which is in none of the upstream repositories")
    comp = ""
    if best["kind"] == "dists":
        comps = list(best.get("components") or [])
        m = re.search(r"/pool/([^/]+)/", plain)
        comp = m.group(1) if m and m.group(1) in comps else comps[0]
    return dict(best), comp


def _norm(url: str) -> str:
    """file:///x and file:/x name the same path (apt prints the short form)."""
    if url.startswith("file://"):
        return "file:" + url[len("file://"):]
    return url


def deb_fields(filename: str) -> tuple[str, str, str]:
    """name, version, arch from a pool file name ``name_version_arch.deb`` (version unquoted)."""
    stem = filename[:-4] if filename.endswith(".deb") else filename
    parts = stem.split("_")
    if len(parts) != 3:
        raise MirrorError(f"{filename!r} is not a Debian package file name (name_version_arch.deb)")
    return parts[0], urllib.parse.unquote(parts[1]), parts[2]


def missing_requests(requests: Sequence[str], packages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The requests (``name`` or ``name=version``) no package of the closure satisfies.

    From an empty dpkg status every request must be in the closure; one that is not means apt's answer
    was not read (a changed output format), and a mirror built from it would lack the package. A pool
    file name carries no epoch, so ``1:4.6.0-1`` matches ``4.6.0-1``.
    """
    have = {(str(p["name"]), str(p["version"]).split(":", 1)[-1]) for p in packages}
    names = {n for n, _ in have}
    out = []
    for req in requests:
        name, _, version = str(req).partition("=")
        if (version and (name, version.split(":", 1)[-1]) not in have) or (not version and name not in names):
            out.append(str(req))
    return out


def pinned_key_listing(colons: str, fingerprint: str) -> tuple[bool, list[str]]:
    """From ``gpg --show-keys --with-colons``: whether the pinned key is there, and every primary key's fingerprint."""
    prim: list[str] = []
    want_fpr = False
    for line in colons.splitlines():
        fields = line.split(":")
        if fields[0] == "pub":
            want_fpr = True
        elif fields[0] == "fpr" and want_fpr and len(fields) > 9:
            prim.append(fields[9].upper())
            want_fpr = False
        elif fields[0] == "sub":
            want_fpr = False
    return fingerprint.upper() in prim, prim


def validsig(status: str) -> list[str]:
    """Fingerprints (signing key and primary) of the good signatures in gpgv's --status-fd output."""
    out = []
    for line in status.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "[GNUPG:]" and parts[1] == "VALIDSIG":
            out.append(parts[2].upper())
            if len(parts) >= 12 and _FPR.fullmatch(parts[-1].upper()):
                out.append(parts[-1].upper())
    return out


def reprepro_distributions(codename: str, components: Sequence[str], deb_arch: str, fingerprint: str) -> str:
    """reprepro's conf/distributions for one served suite, signed by the site key."""
    if not _FPR.fullmatch(fingerprint.upper()):
        raise MirrorError(f"the site key fingerprint {fingerprint!r} is not 40 hex digits")
    return (f"Origin: kiln-mirror\nLabel: kiln-mirror\nCodename: {codename}\nArchitectures: {deb_arch}\n"
            f"Components: {' '.join(components)}\nDescription: kiln offline mirror\nSignWith: {fingerprint.upper()}\n")
