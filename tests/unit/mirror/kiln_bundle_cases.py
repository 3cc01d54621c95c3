"""Shared by the bundle tests: throwaway OpenPGP keys (real gpg), mirror trees and signed bundles.

The keys are made once per test process (``gpg --quick-gen-key`` of an ed25519 key takes a few ms) in
a short-named private GNUPGHOME (gpg-agent's socket path must be short), killed and removed at exit.
A bundle is made with the library (scan_tree, write_tar, build_manifest) and signed by real gpg, as
tools/kiln-bundle does; its check runs the real gpgv unless a test passes :func:`fake_gpgv`.
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from kiln.mirror import bundle, manifest

GPG = shutil.which("gpg")
GPGV = shutil.which("gpgv")

TREE = {
    "dists/bookworm/Release": b"Origin: kiln\nSuite: bookworm\n",
    "dists/bookworm/main/binary-amd64/Packages": b"Package: chrony\nVersion: 4.3\n" * 20,
    "pool/main/c/chrony/chrony_4.3_amd64.deb": bytes(range(256)) * 40,
    "pool/main/n/nginx/nginx_1.22_amd64.deb": b"\x7fELF" + os.urandom(3000),
    "files/pyxis-0.20.0.tar.gz": b"\x1f\x8b" + b"pyxis" * 300,
    "kiln-mirror.asc": b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n...\n",
}
STACK = {"fingerprint": "stack-aaaa1111", "os": "debian-12", "driver": "580.95.05"}


@dataclass(frozen=True)
class Keys:
    """Two throwaway keys in one GNUPGHOME and their exported files."""
    home: str
    site: str            # the site key's fingerprint
    other: str           # another key's fingerprint
    site_pub: str        # armored public site key
    site_pub_binary: str  # binary public site key
    other_pub: str       # armored public other key
    both_pub: str        # both public keys in one file
    site_secret: str     # the site key's secret half, armored


def _gpg(home: str, *args: str) -> bytes:
    return subprocess.run([GPG or "gpg", "--homedir", home, "--batch", *args], check=True, capture_output=True).stdout


def _fingerprint(home: str, uid: str) -> str:
    out = _gpg(home, "--with-colons", "--list-keys", uid).decode()
    return next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))


@functools.lru_cache(maxsize=None)
def make_keys() -> Keys:
    home = tempfile.mkdtemp(prefix="kg")
    os.chmod(home, 0o700)

    def cleanup() -> None:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)

    atexit.register(cleanup)
    for uid in ("kiln site <site@example.invalid>", "not the site <other@example.invalid>"):
        _gpg(home, "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never")
    site, other = _fingerprint(home, "site@example.invalid"), _fingerprint(home, "other@example.invalid")
    files = {}
    for name, args in {"site.asc": ("--armor", "--export", site), "site.gpg": ("--export", site),
                       "other.asc": ("--armor", "--export", other), "both.asc": ("--armor", "--export", site, other),
                       "secret.asc": ("--pinentry-mode", "loopback", "--passphrase", "", "--armor",
                                      "--export-secret-keys", site)}.items():
        path = os.path.join(home, name)
        Path(path).write_bytes(_gpg(home, *args))
        files[name] = path
    return Keys(home, site, other, files["site.asc"], files["site.gpg"], files["other.asc"], files["both.asc"],
                files["secret.asc"])


@pytest.fixture(scope="session")
def keys() -> Keys:
    if GPG is None or GPGV is None:
        pytest.skip("gpg and gpgv are not installed")
    return make_keys()


def write_tree(root: Path, files: Dict[str, bytes]) -> Path:
    for path, data in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


def sign(keys: Keys, manifest_path: str, signer: Optional[str] = None) -> str:
    sig = f"{manifest_path}.asc"
    _gpg(keys.home, "--yes", "--local-user", signer or keys.site, "--armor", "--detach-sign", "--output", sig,
         manifest_path)
    return sig


@dataclass(frozen=True)
class Bundle:
    tar: str
    manifest: str
    sig: str
    doc: Dict[str, Any]


def make_bundle(keys: Keys, tree: Path, out: Path, name: str, *, stacks: Optional[List[dict]] = None,
                base_manifest: Optional[str] = None, signer: Optional[str] = None) -> Bundle:
    """A signed bundle of *tree* in *out* (incremental on *base_manifest* when given)."""
    out.mkdir(parents=True, exist_ok=True)
    files = bundle.scan_tree(str(tree))
    carried, inherited, base = files, [], None
    if base_manifest:
        doc, base = manifest.base_reference(base_manifest)
        carried, inherited = manifest.incremental(files, doc)
    tar = str(out / f"{name}.tar")
    archive = bundle.write_tar(str(tree), carried, tar)
    doc = manifest.build_manifest(name, carried, archive, kiln_commit="0" * 40, base=base,
                                  stacks=[STACK] if stacks is None else stacks,
                                  upstream_checks=[{"repository": "distribution", "url": "http://deb.example/debian",
                                                    "file": "Release", "fingerprint": "A" * 40, "verified": True}],
                                  inherited=inherited)
    manifest_path, _ = bundle.bundle_paths(tar)
    Path(manifest_path).write_bytes(manifest.manifest_bytes(doc))
    return Bundle(tar, manifest_path, sign(keys, manifest_path, signer), doc)


def fake_gpgv(pin: str):
    """A gpgv stand-in that says the signature is the pin's (for tests of everything but the signature)."""
    def run(argv):
        return {"rc": 0, "stderr": "", "stdout": f"[GNUPG:] GOODSIG {pin[-16:]} kiln\n"
                f"[GNUPG:] VALIDSIG {pin} 2026-12-07 0 0 4 0 22 8 00 {pin}\n"}
    return run


def check(b: Bundle, keys: Keys, **kwargs: Any) -> Dict[str, Any]:
    return bundle.verify(b.tar, b.manifest, b.sig, keys.site, key_file=keys.site_pub, **kwargs)


def rewrite_manifest(b: Bundle, keys: Keys, doc: Any, *, resign: bool = True) -> None:
    Path(b.manifest).write_bytes(manifest.manifest_bytes(doc) if isinstance(doc, dict) else json.dumps(doc).encode())
    if resign:
        sign(keys, b.manifest)
