# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln's one filter error: :class:`FilterError`, and :func:`as_filter`, which turns a core error into it.

A function registered as a Jinja filter (filter_plugins/kiln_<area>_filters.py maps the name to
it) reports bad input by raising :class:`FilterError`. Where ansible-core is importable (always,
when Ansible loads a filter registry) it is a subclass of ``AnsibleFilterError``, so Ansible shows
the message alone and ``except AnsibleFilterError`` catches it. Imported on a node (as
``ansible.module_utils.kiln.errors``, shipped with a module) or without ansible-core it is a
plain ``Exception``: importing ``ansible.errors`` inside a module run by a controller's Python
would load controller code into the module and break its result. The compatibility engine's ``CompatError`` derives
from it. Standard library only; importable as ``kiln.errors`` and as
``ansible.module_utils.kiln.errors``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Tuple, Type


class _StandIn(Exception):
    """The base where ansible-core's controller side is not there (a node) or not installed."""


_Base: Type[Exception] = _StandIn
# Imported as ansible.module_utils.kiln.errors this file is in a module's payload on a node: importing
# ansible.errors there (a module run by a controller's Python) would load controller code into the module.
if not __name__.startswith("ansible."):
    try:
        from ansible.errors import AnsibleFilterError as _Base  # type: ignore[no-redef]
    except ImportError:  # pragma: no cover - only without ansible-core installed
        pass


class FilterError(_Base):
    """A kiln filter's error: the message says which filter, what is wrong and how to fix it."""


def as_filter(func: Callable[..., Any], errors: Tuple[Type[BaseException], ...], prefix: str = "",
              chain: bool = True) -> Callable[..., Any]:
    """*func* as a filter: any of *errors* it raises becomes :class:`FilterError` with the same
    message (after *prefix*, e.g. ``"kiln_run_id: "``); with *chain* false the cause is not kept."""

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except errors as exc:
            if chain:
                raise FilterError(f"{prefix}{exc}") from exc
            raise FilterError(f"{prefix}{exc}") from None

    return call
