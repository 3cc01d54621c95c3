"""Package-state planning filters shared by every kiln role that pins packages.

kiln roles install exact package strings rendered by ``kiln_pkg`` (apt
``name=version``, dnf ``name-version-release``). These filters compare them
with what a host has installed so the shared ``common`` entry point
``pinned_install`` can unhold, install and hold again only what must change,
and say what changes.

The pure functions live in ``module_utils/kiln_pkgdb.py``, shared with the
module that installs (``library/kiln_packages.py``: it reads the package
database in-process, parses it with ``kiln_pkgdb_parse`` and plans with
``kiln_pkg_plan``); these filters expose them to templates and tests.
``kiln_pkg_plan`` also takes ``ansible_facts['packages']`` from ``package_facts``.
"""
from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

# kiln's one import mechanism for code shared by controller plugins and modules
# (docs/architecture.md "Python layout"): the pure functions live in module_utils/,
# which AnsiballZ ships to hosts; controller code puts that directory on sys.path.
_KILN_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
if _KILN_MODULE_UTILS not in sys.path:
    sys.path.insert(0, _KILN_MODULE_UTILS)

import kiln_pkgdb as _core  # noqa: E402  (module_utils put on sys.path just above)

_KERNEL_NUM = re.compile(r"\d+")

VERSIONLOCK_MARKER = _core.VERSIONLOCK_MARKER


def _filter(func: Callable[..., Any]) -> Callable[..., Any]:
    """The core function as a filter: its PkgError becomes AnsibleFilterError (same message)."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except _core.PkgError as exc:
            raise AnsibleFilterError(str(exc)) from None
    return wrapper


kiln_pkg_split = _filter(_core.kiln_pkg_split)
kiln_pkgdb_parse = _filter(_core.kiln_pkgdb_parse)
kiln_pkg_plan = _filter(_core.kiln_pkg_plan)
kiln_pinned_covered = _filter(_core.pinned_covered)


def kiln_kernel_key(kernel: str) -> tuple[int, ...]:
    """Numeric sort key of a kernel release string (6.1.0-28-amd64 -> (6, 1, 0, 28))."""
    return tuple(int(n) for n in _KERNEL_NUM.findall(str(kernel).split("+")[0]))


def kiln_kernels_to_check(running: str, installed: Sequence[str]) -> list[str]:
    """The running kernel plus every installed kernel newer than it (what may boot next)."""
    if not isinstance(running, str) or not running:
        raise AnsibleFilterError(f"kiln_kernels_to_check: the running kernel must be a release string, "
                                 f"got {type(running).__name__}")
    if isinstance(installed, (str, Mapping)) or not isinstance(installed, Sequence) \
            or not all(isinstance(k, str) for k in installed):
        raise AnsibleFilterError(f"kiln_kernels_to_check: the installed kernels must be a list of release strings, "
                                 f"got {type(installed).__name__}")
    newer = [k for k in installed if k != running and kiln_kernel_key(k) > kiln_kernel_key(running)]
    return [running] + sorted(set(newer), key=kiln_kernel_key)


def kiln_format_change(change: Mapping[str, Any]) -> str:
    """One line for a planned change: ``name from -> to`` or ``name (new) -> to``."""
    try:
        return str(_core.format_change(change))
    except _core.PkgError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    """kiln package planning filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_pkg_split": kiln_pkg_split,
            "kiln_pkg_plan": kiln_pkg_plan,
            "kiln_pkgdb_parse": kiln_pkgdb_parse,
            "kiln_kernel_key": kiln_kernel_key,
            "kiln_kernels_to_check": kiln_kernels_to_check,
            "kiln_format_change": kiln_format_change,
            "kiln_pinned_covered": kiln_pinned_covered,
        }
