"""Every registered filter, given wrong-typed input at any positional argument, raises AnsibleFilterError with a
one-line message naming the filter or the kiln input (or returns normally) -- never a raw TypeError, AttributeError, KeyError... (issue 31 #11b).

The filters are enumerated from every FilterModule in filter_plugins/*.py (test_filter_registry's mechanism), so a
new filter is covered without being listed here.
"""
from __future__ import annotations

import inspect
import math
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from test_filter_registry import _registries

# JSON/YAML-shaped values of every type a template can pass, and nested garbage
WRONG: list[Any] = [
    None, 0, 7, -1, 1.5, math.nan, math.inf, True, False, "", "x", "garbage: [", "1.2.3",
    [], [None], [1, "a", {}], [[]], [{"a": 1}], [{"hosts": None, "stack": 5, "name": []}],
    {}, {"a": None}, {1: [2]}, {"a": {"b": [None, 1.5]}}, {"a": [1]}, [[{"x": [None]}]],
    {"groups": {"a": None}, "nodes": [1], "rows": [None], "hosts": 3, "stack": "x"},
]
# The filters, each with the number of positional arguments it takes (required, all)
FILTERS = sorted((name, func) for filters in _registries().values() for name, func in filters.items())


def _arity(func: Any) -> tuple[int, int]:
    params = [p for p in inspect.signature(func).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return sum(1 for p in params if p.default is p.empty), len(params)


def _calls(func: Any) -> list[list[Any]]:
    """Each positional argument in turn takes every wrong value, the others every wrong value too
    (argument counts from the required ones up to all)."""
    required, total = _arity(func)
    out = []
    for count in range(max(required, 1), total + 1):
        for index in range(count):
            for value in WRONG:
                for filler in WRONG:
                    args = [filler] * count
                    args[index] = value
                    out.append(args)
    return out


def test_every_filter_is_covered():
    assert len(FILTERS) >= 60
    assert all(_arity(func)[1] >= 1 for _, func in FILTERS)


@pytest.mark.parametrize(("name", "func"), FILTERS, ids=[n for n, _ in FILTERS])
def test_wrong_typed_input_raises_one_line_filter_errors_only(name: str, func: Any) -> None:
    raw: dict[str, list[str]] = {}
    for args in _calls(func):
        try:
            func(*args)
        except AnsibleFilterError as exc:
            text = str(exc.message if hasattr(exc, "message") else exc).strip()
            if not text or "\n" in text or len(text) > 2000:
                raw.setdefault("not one line", []).append(f"{args!r:.120} -> {text[:200]!r}")
            elif "kiln" not in text.lower():  # "kiln_<filter>: ..." or "kiln: kiln_stack.<key> ...": where it comes from
                raw.setdefault("names neither the filter nor a kiln input", []).append(f"{args!r:.120} -> {text[:200]!r}")
        except Exception as exc:  # noqa: BLE001 - what the test looks for
            raw.setdefault(type(exc).__name__, []).append(f"{args!r:.120} -> {exc!s:.160}")
    assert not raw, f"{name}: " + "; ".join(f"{kind} x{len(v)}, e.g. {v[0]}" for kind, v in raw.items())
