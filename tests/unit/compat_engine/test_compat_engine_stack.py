"""A stack checked, normalised and canonicalised before any rule runs (module stack)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from kiln_compat_engine.stack import _canonical, _normalise_stack, stack_problems


def test_stack_problems_apply_the_data_dependent_checks() -> None:
    assert stack_problems({"os": "ubuntu-24.04", "ofed": {"kind": "doca"}}) == []
    (os_problem,) = stack_problems({"os": "plan9-1"})
    assert os_problem["key"] == "kiln_stack.os" and "not an operating system kiln knows" in os_problem["message"]
    (kind,) = stack_problems({"ofed": {"kind": "dcoa"}})
    assert kind["key"] == "kiln_stack.ofed.kind" and "Did you mean 'doca'?" in kind["message"]


def test_normalise_expands_shorthands_and_drops_nulls() -> None:
    assert _normalise_stack({"ofed": "inbox", "cuda": "12.4", "dcgm": None}) == {"ofed": {"kind": "inbox"}, "cuda": "12.4"}
    assert _normalise_stack(None) == {}
    with pytest.raises(AnsibleFilterError, match=r"^kiln: kiln_stack\.cuda"):
        _normalise_stack({"cuda": 12.4})


def test_canonical_resolves_a_unique_prefix_and_refuses_an_ambiguous_one() -> None:
    out, asked, problems = _canonical({"cudnn": "9.5.1", "cuda": "12.6"})
    assert out["cudnn"] == "9.5.1.17" and asked == {"cudnn": "9.5.1"} and problems == []
    assert out["cuda"] == "12.6"  # a CUDA minor names its series, never shortened
    out, asked, problems = _canonical({"cudnn": "9"})
    assert "cudnn" not in out and asked == {}
    assert [p["rule"] for p in problems] == ["ambiguous-version"] and "names" in problems[0]["message"]
