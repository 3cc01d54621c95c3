# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Is a bundle's manifest signed by the site key, exactly the pinned one? :func:`check_signature`.

Two rules, each its own problem list:

- the site's key file holds exactly one primary key, no secret key material, and that key's full
  fingerprint is the pin (the rule of ``kiln.packages.repo_key``: a key file is trusted as a whole, so
  an extra key in it would be trusted too); the file is read in Python (``openpgp``), since the
  mirror host has ``gpgv`` only;
- ``gpgv --status-fd 1 --keyring <that key, dearmored> SIG MANIFEST`` exits 0 and reports a
  ``[GNUPG:] VALIDSIG`` whose signing-key fingerprint or primary-key fingerprint (its last field) is
  the pin. A signature by another key is reported with that key's fingerprint (``ERRSIG``'s last
  field, else the signature's own issuer subpacket) beside the pin.

``gpgv`` runs through an injectable *runner* (``kiln.process.run_argv``'s signature and result:
``runner(argv) -> {rc, stdout, stderr}``), with ``--homedir`` set to a private temporary directory
so that no user's keyrings are read. Standard library only; importable as ``kiln.mirror.signature``
and as ``ansible.module_utils.kiln.mirror.signature``.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from ..process import run_argv
from .openpgp import OpenPGPError, dearmor, primary_keys, signature_issuer

__all__ = ["Runner", "normalize_fingerprint", "fingerprint_problem", "key_file_problems", "check_signature",
           "MAX_KEY_BYTES"]

#: runner(argv) -> {"rc": int, "stdout": str, "stderr": str}
Runner = Callable[[Sequence[str]], Mapping[str, Any]]

_FULL_FPR = re.compile(r"^(?:[0-9A-F]{40}|[0-9A-F]{64})$")
_ANY_FPR = re.compile(r"^(?:[0-9A-F]{16}|[0-9A-F]{40}|[0-9A-F]{64})$")
#: Largest key or signature file read (bytes).
MAX_KEY_BYTES = 1024 * 1024


def normalize_fingerprint(value: Any) -> str:
    """A fingerprint as gpg prints it: no spaces, upper-case hex (``"ab 12"`` -> ``"AB12"``)."""
    return re.sub(r"\s+", "", str(value if value is not None else "")).upper()


def fingerprint_problem(value: Any, what: str = "the pinned fingerprint") -> Optional[str]:
    """Why *value* is not a full fingerprint (40 hex digits, or 64 for a version 6 key); None when it is."""
    if _FULL_FPR.match(normalize_fingerprint(value)):
        return None
    return (f"{what} {str(value)[:80]!r} is not a full key fingerprint (40 hex digits): give the whole fingerprint "
            "of the site key (gpg --with-colons --fingerprint), not a key ID")


def _read(path: str, what: str) -> Tuple[Optional[bytes], Optional[str]]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_KEY_BYTES + 1)
    except OSError as exc:
        return None, f"cannot read the {what} {path}: {exc.strerror or exc}"
    if len(data) > MAX_KEY_BYTES:
        return None, f"the {what} {path} is larger than {MAX_KEY_BYTES} bytes: not a key or signature file"
    return data, None


def key_file_problems(key_file: str, pin: str) -> Tuple[Optional[bytes], List[str]]:
    """``(keyring, problems)``: the key file's binary packets when it holds exactly the pinned key, else
    None and why not (the key file named, the fingerprints found and the pin)."""
    data, problem = _read(key_file, "site key file")
    if problem:
        return None, [problem]
    wanted = normalize_fingerprint(pin)
    try:
        binary = dearmor(data or b"")
        keys = primary_keys(binary)
    except OpenPGPError as exc:
        return None, [f"the site key file {key_file} is not an OpenPGP public key ({exc}): export the site key with "
                      "gpg --armor --export <fingerprint>"]
    found = ", ".join(k["fingerprint"] or "(a secret key)" for k in keys) or "none"
    reason = ""
    if not keys:
        reason = "holds no OpenPGP key"
    elif any(k["secret"] for k in keys):
        reason = "holds secret key material (never carry the site's secret key to the mirror)"
    elif len(keys) > 1:
        reason = f"holds {len(keys)} primary keys; exactly one, the pinned site key, is allowed"
    elif keys[0]["fingerprint"] != wanted:
        reason = "holds another key than the pinned one" + (
            " (the pin names one of its subkeys: pin the primary key)" if wanted in keys[0]["subkeys"] else "")
    if reason:
        return None, [f"the site key file {key_file} {reason}: key fingerprint(s) {found}; pinned {wanted}. Export "
                      "exactly the site key (gpg --armor --export <fingerprint>), or, if the site key was replaced, "
                      "check the new key out of band and pin its fingerprint"]
    return binary, []


def _status(stdout: str, keyword: str) -> List[List[str]]:
    return [line.split()[2:] for line in stdout.splitlines()
            if line.startswith("[GNUPG:] ") and len(line.split()) > 1 and line.split()[1] == keyword]


def _issuer(sig_path: str, errsig: List[List[str]]) -> str:
    for fields in errsig:
        if fields and _FULL_FPR.match(fields[-1].upper()):
            return fields[-1].upper()
    data, _ = _read(sig_path, "signature")
    try:
        issuer = signature_issuer(data or b"")
    except OpenPGPError:
        issuer = ""
    if issuer:
        return issuer
    return next((f[0].upper() for f in errsig if f and _ANY_FPR.match(f[0].upper())), "(unknown)")


def check_signature(sig_path: str, manifest_path: str, key_file: str, fingerprint: str,
                    runner: Optional[Runner] = None, gpgv: str = "gpgv") -> List[str]:
    """The problems with *sig_path* as the site key's detached signature of *manifest_path*; [] when it is one.

    *key_file* is the site's public key (armored or binary), *fingerprint* the pin. Every problem names
    the file and the fix."""
    problem = fingerprint_problem(fingerprint)
    if problem:
        return [problem]
    pin = normalize_fingerprint(fingerprint)
    keyring, problems = key_file_problems(key_file, pin)
    if keyring is None:
        return problems
    home = tempfile.mkdtemp(prefix="kiln-gpgv-")
    try:
        ring = os.path.join(home, "site-key.gpg")
        with open(ring, "wb") as handle:
            handle.write(keyring)
        result = (runner or run_argv)([gpgv, "--homedir", home, "--status-fd", "1", "--keyring", ring, "--",
                                       sig_path, manifest_path])
    finally:
        shutil.rmtree(home, ignore_errors=True)
    rc = result.get("rc")
    stdout = str(result.get("stdout") or "")
    stderr = " ".join(str(result.get("stderr") or "").split())[:400]
    valid = _status(stdout, "VALIDSIG")
    if rc == 0 and valid and all(pin in (f[0].upper(), f[-1].upper()) for f in valid) \
            and not any(_status(stdout, k) for k in ("BADSIG", "ERRSIG", "REVKEYSIG")):
        return []
    if rc == 127:
        return [f"{gpgv} is not installed here, so the signature {sig_path} cannot be checked: install gpgv "
                "(Debian/Ubuntu: gpgv; EL: gnupg2)"]
    if _status(stdout, "BADSIG"):
        return [f"{sig_path}: the signature does not match {manifest_path}: the manifest was changed after it was "
                "signed (or the signature belongs to another bundle); make the bundle again with kiln-bundle create"]
    if _status(stdout, "REVKEYSIG"):
        return [f"{sig_path}: the site key {pin} that signed {manifest_path} is revoked (the key file carries its "
                "revocation): sign bundles with the site's new key and pin its fingerprint"]
    errsig = _status(stdout, "ERRSIG")
    if errsig or _status(stdout, "NO_PUBKEY"):
        issuer = _issuer(sig_path, errsig)
        return [f"{sig_path}: {manifest_path} is signed by key {issuer}, not by the pinned site key {pin}: sign "
                "bundles with the site key (kiln-bundle create --key <site fingerprint>), or, if the site key was "
                "replaced, check the new key out of band and pin its fingerprint"]
    others = sorted({fpr for f in valid for fpr in (f[0].upper(), f[-1].upper())} - {pin})
    if valid and others:
        return [f"{sig_path}: signed by key {', '.join(others)}, not by the pinned site key {pin}"]
    return [f"{sig_path}: gpgv did not accept the signature of {manifest_path} (rc {rc}"
            f"{': ' + stderr if stderr else ''}): make the bundle again with kiln-bundle create"]
