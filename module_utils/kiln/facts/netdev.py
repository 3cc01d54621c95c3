# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Netdev (network interface) names, checked before they become part of a path, a unit name or an argv.

Pure function, standard library only; ships to managed hosts (``kiln_fabric`` flags a hostile
name in the fabric facts) and is the filter ``kiln_netdev_problems`` (role ``rdma_node`` refuses
one before it reaches a tmpfiles.d path or a ``kiln-roce-qos@<netdev>`` unit). Importable as
``kiln_netdev`` and ``ansible.module_utils.kiln.facts.netdev``.
"""

from __future__ import annotations

import re
from typing import Any, List, Optional

__all__ = ["IFNAMSIZ", "kiln_netdev_problems", "netdev_problem"]

#: Linux IFNAMSIZ is 16 bytes with the terminating NUL: a netdev name has at most 15 characters.
IFNAMSIZ = 16
_NETDEV_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _clip(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"


def netdev_problem(name: Any) -> Optional[str]:
    """Why *name* may not be used as a netdev name in a path or a unit name, or None when it may.

    The kernel's own rule (net/core/dev.c ``dev_valid_name``): not empty, shorter than IFNAMSIZ
    (at most 15 characters), not ``.`` or ``..``, no ``/``, ``:`` or whitespace. kiln is stricter,
    since the name becomes part of a file path (``/sys/class/net/<name>/...`` in tmpfiles.d), a systemd
    instance name and an argument: letters, digits, ``_``, ``.`` and ``-`` only, and no leading ``-``
    or ``.`` (an option, a hidden or relative path).
    """
    if not isinstance(name, str):
        return f"{_clip(name)} is not a string"
    if not name:
        return "the name is empty"
    if len(name) >= IFNAMSIZ:
        return f"{_clip(name)} has {len(name)} characters; Linux allows at most {IFNAMSIZ - 1} (IFNAMSIZ {IFNAMSIZ})"
    if "/" in name or "\\" in name:
        return f"{_clip(name)} contains a path separator"
    if any(ch.isspace() for ch in name) or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return f"{_clip(name)} contains whitespace or a control character"
    if name.startswith("-"):
        return f"{_clip(name)} starts with '-' (it would be read as an option)"
    if name.startswith("."):
        return f"{_clip(name)} starts with '.' (a hidden or relative path)"
    if not _NETDEV_RE.fullmatch(name):
        return f"{_clip(name)} has a character other than letters, digits, '_', '.' and '-'"
    return None


def kiln_netdev_problems(names: Any, host: Any = "this host") -> List[str]:
    """One sentence per netdev name that may not reach a path, unit name or argv (module_utils/kiln/facts/netdev.py:
    at most 15 characters (Linux IFNAMSIZ), letters, digits, ``_ . -``, no leading ``-`` or ``.``), naming
    the host and the name; ``[]`` when every name is usable. *names*: a list (or one name)."""
    items = names if isinstance(names, list) else [names]
    out = []
    for name in items:
        why = netdev_problem(name)
        if why:
            out.append(f"{host}: netdev name {why}")
    return out
