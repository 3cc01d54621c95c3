"""Files kiln_packages (library/kiln_packages.py) keeps on the managed host besides the package
database: the temporary policy-rc.d of an apt transaction, the apt cache's age, and the recorded
pins of each owner (<pins_dir>/<owner>.json)."""
from __future__ import annotations

import os
import shutil
from typing import Any

from .pkgdb import PkgError, parse_pins

POLICY_MARK = "# kiln: temporary policy-rc.d (kiln_packages)"
APT_LISTS = "/var/lib/apt/lists"


class PolicyRcD:
    """A temporary /usr/sbin/policy-rc.d for the length of an apt transaction.

    One left behind by an interrupted run (it carries POLICY_MARK) is cleared first,
    and a site's own policy-rc.d is put back afterwards.
    """

    def __init__(self, code: int | None, path: str) -> None:
        self.code = code
        self.path = path
        self.saved = path + ".kiln-saved"

    def recover(self) -> None:
        if os.path.exists(self.saved):
            os.replace(self.saved, self.path)
        elif os.path.exists(self.path):
            with open(self.path, encoding="utf-8", errors="replace") as handle:
                if POLICY_MARK in handle.read():
                    os.unlink(self.path)

    def __enter__(self) -> PolicyRcD:
        self.recover()
        if self.code is None:
            return self
        if os.path.exists(self.path):
            shutil.copy2(self.path, self.saved)
        tmp = self.path + ".kiln-tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(f"#!/bin/sh\n{POLICY_MARK}\nexit {int(self.code)}\n")
        os.chmod(tmp, 0o755)
        os.replace(tmp, self.path)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.code is None:
            return
        if os.path.exists(self.saved):
            os.replace(self.saved, self.path)
        elif os.path.exists(self.path):
            os.unlink(self.path)


def apt_cache_stale(valid_time: int, stamp: str, now: float) -> bool:
    """Whether the apt cache must be refreshed before an install."""
    try:
        lists = [n for n in os.listdir(APT_LISTS) if "_Packages" in n]
    except OSError:
        lists = []
    if not lists or not os.path.exists(stamp):
        return True
    return valid_time <= 0 or now - os.stat(stamp).st_mtime >= valid_time


def read_pins(pins_dir: str) -> dict[str, list[str]]:
    """owner -> pinned package strings of every ``<owner>.json`` under ``pins_dir`` (none: empty)."""
    pins: dict[str, list[str]] = {}
    if not pins_dir or not os.path.isdir(pins_dir):
        return pins
    for entry in sorted(os.listdir(pins_dir)):
        if not entry.endswith(".json"):
            continue
        path = os.path.join(pins_dir, entry)
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise PkgError(f"the pins record {path} cannot be read ({exc})") from exc
        owner, packages = parse_pins(path, text)
        pins[owner] = packages
    return pins
