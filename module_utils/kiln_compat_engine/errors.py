# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The package's one error class, and the checks of a filter's input that raise it.

:class:`CompatError` is what every function of the package raises for bad
input. It derives from kiln's one filter error (``kiln_filter_error.FilterError``):
where ansible-core is importable (always, when Ansible loads the filter registry)
that is an ``AnsibleFilterError``, so a filter's error reads exactly as before and
``except AnsibleFilterError`` still catches it; without ansible-core the package
stays usable and CompatError is a plain Exception.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Any

try:  # kiln's one filter error (module_utils/kiln/errors.py)
    from ansible.module_utils.kiln.errors import FilterError
except ImportError:  # imported as a top-level module (controller, unit tests)
    from kiln.errors import FilterError  # type: ignore[no-redef]


class CompatError(FilterError):
    """A kiln compatibility-engine error: the message says what is wrong and how to fix it."""


# Checks at a filter's boundary: a wrong-typed input is one CompatError naming the filter and the input,
# never a TypeError or AttributeError from deep inside (issue 31 #11b).


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {int: "an integer", float: "a float", str: "a string", list: "a list", dict: "a mapping"}.get(
        type(value), f"a {type(value).__name__}")


def need_list(func: str, what: str, value: Any, one_ok: bool = False) -> list[Any]:
    """*value* as a list; with *one_ok* a single string counts as a list of one."""
    if isinstance(value, (str, bytes)) and one_ok:
        return [value]
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (Sequence, Set)):
        raise CompatError(f"{func}: {what} must be a list, got {_kind(value)}")
    return list(value)


def need_mapping(func: str, what: str, value: Any) -> Mapping[Any, Any]:
    """*value* itself when it is a mapping."""
    if not isinstance(value, Mapping):
        raise CompatError(f"{func}: {what} must be a mapping, got {_kind(value)}")
    return value


def need_text(func: str, what: str, value: Any) -> str:
    """*value* itself when it is a string."""
    if not isinstance(value, str):
        raise CompatError(f"{func}: {what} must be a string, got {_kind(value)}")
    return value
