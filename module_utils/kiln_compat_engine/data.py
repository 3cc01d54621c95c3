# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Data loading: data/compat.yml and data/denylist.yml, parsed once per process.

All of kiln's compatibility knowledge lives in those two files; the rest of the
package only interprets them. :func:`compat_data` and :func:`denylist_data`
cache what they parse in ``_CACHE`` (tests clear it with :func:`_reset_cache`
after pointing ``DATA_DIR`` elsewhere, or patch its entries).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import yaml

from .errors import CompatError


DATA_DIR = Path(__file__).resolve().parents[2] / "data"
_CACHE: dict[str, Any] = {}

def _load_yaml(path: Path) -> Any:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        with path.open(encoding="utf-8") as handle:
            return yaml.load(handle, Loader=loader)  # noqa: S506 - SafeLoader/CSafeLoader only
    except OSError as exc:
        raise CompatError(f"kiln: cannot read data file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise CompatError(f"kiln: data file {path} is not valid YAML: {exc}") from exc


def compat_data() -> dict[str, Any]:
    """Return the parsed ``data/compat.yml`` (cached for the process)."""
    if "compat" not in _CACHE:
        _CACHE["compat"] = _load_yaml(DATA_DIR / "compat.yml")
    return _CACHE["compat"]


def mirror_data() -> dict[str, Any]:
    """Return the parsed ``data/mirror.yml`` (offline mirror: distribution archives, distribution packages)."""
    if "mirror" not in _CACHE:
        _CACHE["mirror"] = _load_yaml(DATA_DIR / "mirror.yml")
    return _CACHE["mirror"]


def denylist_data() -> list[dict[str, Any]]:
    """Return the entries of ``data/denylist.yml`` (cached for the process)."""
    if "denylist" not in _CACHE:
        entries = (_load_yaml(DATA_DIR / "denylist.yml") or {}).get("entries") or []
        for entry in entries:
            if not entry.get("link"):
                raise CompatError(f"kiln: denylist entry {entry.get('id')!r} has no link; every entry needs a source")
        _CACHE["denylist"] = entries
    return _CACHE["denylist"]


def _reset_cache() -> None:
    """Forget parsed data (tests use this after pointing DATA_DIR elsewhere)."""
    _CACHE.clear()
def _active_denylist(today: datetime.date | None = None) -> list[dict[str, Any]]:
    today = today or datetime.datetime.now(datetime.timezone.utc).date()  # UTC, as every kiln time
    active = []
    for entry in denylist_data():
        expires = entry.get("expires")
        if expires:
            exp = expires if isinstance(expires, datetime.date) else datetime.date.fromisoformat(str(expires))
            if today > exp:
                continue
        active.append(entry)
    return active
