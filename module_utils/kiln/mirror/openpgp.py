# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""OpenPGP, only as far as a bundle's check needs it: ASCII armor, packet framing, key fingerprints and
the issuer of a signature (RFC 9580; version 4 keys and signatures, version 5 and 6 keys).

Why in Python: the mirror host runs ``gpgv`` only (Debian always has it, apt needs it), which cannot
list a key file or read an armored one. :func:`primary_keys` says which keys a site key file holds
(the rule that it holds exactly the pinned key is in ``signature``); :func:`dearmor` turns it into the
binary keyring ``gpgv --keyring`` reads; :func:`signature_issuer` names the key that made a signature
``gpgv`` could not check (another key than the pinned one). Nothing here decides that a signature is
valid: ``gpgv`` does.

Pure functions, standard library only; importable as ``kiln.mirror.openpgp`` and as
``ansible.module_utils.kiln.mirror.openpgp``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any, Dict, List, Tuple

__all__ = ["OpenPGPError", "dearmor", "packets", "key_fingerprint", "primary_keys", "signature_issuer"]

_TAG_SIGNATURE, _TAG_SECRET_KEY, _TAG_PUBLIC_KEY, _TAG_SECRET_SUBKEY, _TAG_PUBLIC_SUBKEY = 2, 5, 6, 7, 14
_SUBPACKET_ISSUER_KEYID, _SUBPACKET_ISSUER_FPR = 16, 33


class OpenPGPError(ValueError):
    """The data is not the OpenPGP a bundle's check expects (the message says where it breaks)."""


def _crc24(data: bytes) -> int:
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def dearmor(data: bytes) -> bytes:
    """The binary packets of *data*: the first ASCII-armored block decoded, or *data* itself when it is
    not armored (a binary key file). Raises :class:`OpenPGPError` for a damaged armor (bad base64,
    missing END line, wrong checksum)."""
    text = data.lstrip()
    if not text.startswith(b"-----BEGIN PGP "):
        return data
    lines = text.splitlines()
    kind = lines[0].strip()[len(b"-----BEGIN "):]
    end = b"-----END " + kind
    index = 1
    while index < len(lines) and b":" in lines[index] and lines[index].strip():
        index += 1  # armor headers (Version: ..., Comment: ...)
    body: List[bytes] = []
    checksum = b""
    for line in lines[index:]:
        line = line.strip()
        if line == end:
            break
        if line.startswith(b"=") and len(line) == 5:
            checksum = line[1:]
        elif line:
            body.append(line)
    else:
        raise OpenPGPError(f"the armor has no {end.decode('ascii', 'replace')} line (the file is cut short)")
    try:
        decoded = base64.b64decode(b"".join(body), validate=True)
        crc = base64.b64decode(checksum, validate=True) if checksum else b""
    except (binascii.Error, ValueError) as exc:
        raise OpenPGPError(f"the armor is not valid base64 ({exc})") from None
    if crc and int.from_bytes(crc, "big") != _crc24(decoded):
        raise OpenPGPError("the armor's checksum does not match its content (the file is damaged)")
    return decoded


def packets(data: bytes) -> List[Tuple[int, bytes]]:
    """``[(tag, body), ...]`` of the OpenPGP packets in binary *data* (old and new packet formats;
    partial body lengths, which key and signature files do not use, are refused)."""
    found: List[Tuple[int, bytes]] = []
    pos = 0
    size = len(data)
    try:
        while pos < size:
            ctb = data[pos]
            if not ctb & 0x80:
                raise OpenPGPError(f"not OpenPGP data (byte {pos} is 0x{ctb:02x})")
            if ctb & 0x40:  # new format
                tag = ctb & 0x3F
                first = data[pos + 1]
                if first < 192:
                    length, pos = first, pos + 2
                elif first < 224:
                    length, pos = ((first - 192) << 8) + data[pos + 2] + 192, pos + 3
                elif first == 255:
                    length, pos = int.from_bytes(data[pos + 2:pos + 6], "big"), pos + 6
                else:
                    raise OpenPGPError(f"packet at byte {pos} has a partial body length (not a key or signature file)")
            else:
                tag, kind = (ctb >> 2) & 0x0F, ctb & 0x03
                if kind == 3:
                    length, pos = size - pos - 1, pos + 1
                else:
                    width = (1, 2, 4)[kind]
                    length, pos = int.from_bytes(data[pos + 1:pos + 1 + width], "big"), pos + 1 + width
            if pos > size or pos + length > size:
                raise OpenPGPError(f"packet {len(found) + 1} runs past the end of the data (the file is cut short)")
            found.append((tag, bytes(data[pos:pos + length])))
            pos += length
    except IndexError:
        raise OpenPGPError(f"packet {len(found) + 1} is cut short") from None
    return found


def key_fingerprint(body: bytes) -> str:
    """The fingerprint (upper-case hex) of a public key or subkey packet's *body*."""
    if not body:
        raise OpenPGPError("an empty key packet")
    version = body[0]
    if version == 4:
        if len(body) > 0xFFFF:
            raise OpenPGPError("a version 4 key packet longer than 65535 bytes")
        return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()  # nosec - OpenPGP v4
    if version in (5, 6):
        prefix = b"\x9a" if version == 5 else b"\x9b"
        return hashlib.sha256(prefix + len(body).to_bytes(4, "big") + body).hexdigest().upper()
    raise OpenPGPError(f"a version {version} key (only versions 4, 5 and 6 are known)")


def primary_keys(data: bytes) -> List[Dict[str, Any]]:
    """The primary keys in binary *data*: ``[{fingerprint, secret, subkeys: [fingerprint, ...]}]``.

    A secret key (or secret subkey) marks its primary key ``secret`` (its fingerprint is then not
    computed: ``""``). User IDs, signatures and trust packets are skipped."""
    keys: List[Dict[str, Any]] = []
    for tag, body in packets(data):
        if tag == _TAG_PUBLIC_KEY:
            keys.append({"fingerprint": key_fingerprint(body), "secret": False, "subkeys": []})
        elif tag == _TAG_SECRET_KEY:
            keys.append({"fingerprint": "", "secret": True, "subkeys": []})
        elif tag in (_TAG_PUBLIC_SUBKEY, _TAG_SECRET_SUBKEY):
            if not keys:
                raise OpenPGPError("a subkey before any primary key")
            if tag == _TAG_SECRET_SUBKEY:
                keys[-1]["secret"] = True
            else:
                keys[-1]["subkeys"].append(key_fingerprint(body))
    return keys


def _subpackets(data: bytes) -> List[Tuple[int, bytes]]:
    found = []
    pos = 0
    while pos < len(data):
        first = data[pos]
        if first < 192:
            length, pos = first, pos + 1
        elif first < 255:
            length, pos = ((first - 192) << 8) + data[pos + 1] + 192, pos + 2
        else:
            length, pos = int.from_bytes(data[pos + 1:pos + 5], "big"), pos + 5
        if length < 1 or pos + length > len(data):
            raise OpenPGPError("a signature subpacket runs past its area")
        found.append((data[pos] & 0x7F, data[pos + 1:pos + length]))
        pos += length
    return found


def signature_issuer(data: bytes) -> str:
    """Who made the first signature in *data* (armored or binary): the issuer's fingerprint when the
    signature names it, else its 16-digit key ID, upper-case hex; ``""`` when it names neither."""
    for tag, body in packets(dearmor(data)):
        if tag != _TAG_SIGNATURE:
            continue
        try:
            version = body[0]
            if version == 4:
                width = 2
            elif version == 6:
                width = 4
            else:
                return ""
            hashed_len = int.from_bytes(body[4:4 + width], "big")
            hashed = body[4 + width:4 + width + hashed_len]
            rest = 4 + width + hashed_len
            unhashed = body[rest + width:rest + width + int.from_bytes(body[rest:rest + width], "big")]
            subpackets = _subpackets(hashed) + _subpackets(unhashed)
        except IndexError:
            raise OpenPGPError("the signature packet is cut short") from None
        for kind, value in subpackets:
            if kind == _SUBPACKET_ISSUER_FPR and len(value) > 1:
                return value[1:].hex().upper()
        for kind, value in subpackets:
            if kind == _SUBPACKET_ISSUER_KEYID and len(value) == 8:
                return value.hex().upper()
        return ""
    raise OpenPGPError("no signature packet")
