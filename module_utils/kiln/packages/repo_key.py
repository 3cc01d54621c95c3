# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln repository key pinning: is a downloaded key file exactly the pinned key?

A repository key file is trusted as a whole (apt's ``Signed-By`` keyring, rpm's
``--import``), so checking that the pinned fingerprint is merely *among* its
keys is not enough: a file carrying an extra key would smuggle that key in.
The rule: the file holds exactly one primary key (one ``pub`` record in
``gpg --show-keys --with-colons``), no secret key material, and that key's
full fingerprint equals the pin. Subkeys (``sub`` records) belong to their
primary key and do not count.

Pure functions, standard library only; importable as ``kiln.packages.repo_key`` and as
``ansible.module_utils.kiln.packages.repo_key``. ``kiln_repo_key_verdict`` is the filter of
the same name (registry filter_plugins/kiln_repo_key_filters.py, documented by
filter_plugins/kiln_repo_key_verdict.yml).
"""

from __future__ import annotations

import re
from typing import Any

_HEX_FPR = re.compile(r"^(?:[0-9A-F]{40}|[0-9A-F]{64})$")
_PRIMARY = ("pub", "sec")
_SUBKEY = ("sub", "ssb")


def normalize_fingerprint(value: Any) -> str:
    """A fingerprint as gpg prints it: no spaces, upper-case hex (``"ab 12"`` -> ``"AB12"``)."""
    return re.sub(r"\s+", "", str(value or "")).upper()


def parse_gpg_colons(colons: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The primary keys in ``gpg --with-colons --show-keys`` output, and what was malformed.

    Each key is ``{'record': 'pub'|'sec', 'keyid': str, 'fingerprint': str,
    'subkeys': [fingerprint, ...]}``; the fingerprint is the ``fpr`` record
    that follows the key's own record. Unknown record types (``uid``, ``grp``,
    ``sig``, ``rvk`` ...) are ignored.
    """
    keys: list[dict[str, Any]] = []
    problems: list[str] = []
    current: dict[str, Any] | None = None  # the key or subkey the next fpr belongs to
    for line in str(colons or "").splitlines():
        fields = line.strip().split(":")
        record = fields[0]
        if record in _PRIMARY:
            key: dict[str, Any] = {"record": record, "keyid": fields[4] if len(fields) > 4 else "",
                                   "fingerprint": "", "subkeys": []}
            keys.append(key)
            current = key
        elif record in _SUBKEY:
            if not keys:
                problems.append("a subkey record before any primary key")
                current = None
                continue
            current = {"record": record, "fingerprint": ""}
            keys[-1]["subkeys"].append(current)
        elif record == "fpr":
            value = normalize_fingerprint(fields[9] if len(fields) > 9 else "")
            if current is None or current["fingerprint"]:
                problems.append("a fingerprint record that belongs to no key")
            else:
                current["fingerprint"] = value
    for key in keys:
        if not key["fingerprint"]:
            problems.append(f"no fingerprint for key {key['keyid'] or '(unknown id)'}")
        key["subkeys"] = [sub["fingerprint"] for sub in key["subkeys"]]
    return keys, problems


def kiln_repo_key_verdict(colons: Any, pin: Any, repo: str = "", url: str = "", variable: str = "",
                          rc: Any = 0, stderr: Any = "") -> dict[str, Any]:
    """Judge a repository key file from ``gpg --with-colons --show-keys`` output against a pin.

    Accepted only when gpg read the file (``rc`` 0), it holds exactly one
    primary key, no secret key, and that key's fingerprint equals ``pin``
    (spaces and case ignored). ``repo``, ``url`` and ``variable`` (the
    variable holding the pin) only go into the message.

    Returns ``{'ok': bool, 'fingerprint': str, 'fingerprints': [...],
    'primary_keys': int, 'reason': str, 'msg': str}`` where ``fingerprints``
    are the primary keys' fingerprints found, ``reason`` is empty when ok and
    ``msg`` is a sentence fit for an assert's ``fail_msg``.
    """
    wanted = normalize_fingerprint(pin)
    keys, problems = parse_gpg_colons(colons)
    found = [key["fingerprint"] or f"(keyid {key['keyid']}, no fingerprint)" for key in keys]
    try:
        code = int(rc)
    except (TypeError, ValueError, OverflowError):  # not a return code (inf, a list): gpg did not say it read the file
        code = -1
    subkey_match = any(wanted in key["subkeys"] for key in keys)

    reason = ""
    if not _HEX_FPR.match(wanted):
        reason = f"the pin {pin!r} is not a full fingerprint (40 or 64 hex digits)"
    elif code != 0:
        detail = " ".join(str(stderr or "").split())
        reason = f"gpg could not read the file (rc {rc}{': ' + detail if detail else ''})"
    elif not keys:
        reason = "the file holds no OpenPGP key"
    elif any(key["record"] == "sec" for key in keys):
        reason = "the file holds secret key material"
    elif len(keys) > 1:
        reason = f"the file holds {len(keys)} primary keys; exactly one (the pinned key) is allowed"
    elif problems:
        reason = "gpg's listing is malformed: " + "; ".join(problems)
    elif keys[0]["fingerprint"] != wanted:
        reason = "its key is not the pinned key" + (
            " (the pin names one of its subkeys, not the primary key)" if subkey_match else "")

    name, where = repo or "(unnamed)", url or "(unknown URL)"
    listed = ", ".join(found) if found else "none"
    if reason:
        fix = (f"If the vendor rotated its key, verify the new key out of band and set "
               f"{variable or 'the pinned fingerprint'} to its full fingerprint; the key file must hold that one key only.")
        msg = (f"Repository {name}: refusing the key file {where}: {reason}. Primary key fingerprint(s) found: "
               f"{listed}; pinned: {wanted or '(empty)'}. {fix}")
    else:
        msg = f"Repository {name}: the key file {where} holds exactly one primary key, {wanted}, the pinned one."
    return {
        "ok": not reason,
        "fingerprint": keys[0]["fingerprint"] if len(keys) == 1 else "",
        "fingerprints": [key["fingerprint"] for key in keys],
        "primary_keys": len(keys),
        "reason": reason,
        "msg": msg,
    }

