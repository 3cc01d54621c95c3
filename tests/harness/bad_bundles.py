#!/usr/bin/env python3
"""Make bad copies of a good kiln mirror bundle, for molecule/airgap's side effect.

  bad_bundles.py GOOD.tar OUT_DIR   -> prints [{case, bundle, stacks}] as JSON

Cases: one byte changed in the first package file (manifest and signature intact); a file missing
from the archive; the manifest signed by another (throwaway) key; the good bundle offered to a site
whose inventory has another stack. Each must be refused by kiln's bundle check.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile


def _copy(good: str, out: str, case: str) -> str:
    stem = good[: -len(".tar")]
    dest = os.path.join(out, case)
    os.makedirs(dest, exist_ok=True)
    for ext in (".tar", ".manifest.json", ".manifest.json.asc"):
        shutil.copyfile(stem + ext, os.path.join(dest, os.path.basename(stem) + ext))
    return os.path.join(dest, os.path.basename(good))


def main(good: str, out: str) -> None:
    shutil.rmtree(out, ignore_errors=True)
    stacks = json.load(open(good[: -len(".tar")] + ".manifest.json", encoding="utf-8"))["stacks"]
    fprs = [s["fingerprint"] for s in stacks]
    cases = []
    # 1. one byte changed inside a package file
    bad = _copy(good, out, "one-byte")
    with tarfile.open(bad) as tar:
        member = next(m for m in tar.getmembers() if m.isfile() and m.name.endswith(".deb"))
        offset = member.offset_data + member.size // 2
    with open(bad, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x01]))
    cases.append({"case": "one-byte", "bundle": bad, "stacks": fprs})
    # 2. a file missing from the archive
    bad = _copy(good, out, "missing-file")
    with tarfile.open(good) as src, tarfile.open(bad + ".new", "w", format=tarfile.PAX_FORMAT) as dst:
        members = [m for m in src.getmembers()]
        dropped = next(m for m in members if m.isfile() and m.name.endswith(".deb"))
        for m in members:
            if m.name != dropped.name:
                dst.addfile(m, src.extractfile(m) if m.isfile() else None)
    os.replace(bad + ".new", bad)
    cases.append({"case": "missing-file", "bundle": bad, "stacks": fprs})
    # 3. the manifest signed by another key
    bad = _copy(good, out, "foreign-signature")
    with tempfile.TemporaryDirectory() as home:
        subprocess.run(["gpg", "--homedir", home, "--batch", "--passphrase", "", "--quick-gen-key",
                        "not the site key <other@example.invalid>", "ed25519", "sign", "never"],
                       check=True, capture_output=True)
        manifest = bad[: -len(".tar")] + ".manifest.json"
        subprocess.run(["gpg", "--homedir", home, "--batch", "--yes", "--armor", "--detach-sign",
                        "--output", manifest + ".asc", manifest], check=True, capture_output=True)
    cases.append({"case": "foreign-signature", "bundle": bad, "stacks": fprs})
    # 4. the good bundle, for a site whose stack it was not built for
    cases.append({"case": "other-stack", "bundle": _copy(good, out, "other-stack"), "stacks": fprs + ["0123456789ab"]})
    print(json.dumps(cases))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
