"""A stack checked, normalised and canonicalised before any rule runs (module stack)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from kiln_compat_engine.stack import CheckedStack, _canonical, checked, stack_problems


def test_stack_problems_apply_the_data_dependent_checks() -> None:
    assert stack_problems({"os": "ubuntu-24.04", "ofed": {"kind": "doca"}}) == []
    (os_problem,) = stack_problems({"os": "plan9-1"})
    assert os_problem["key"] == "kiln_stack.os" and "not an operating system kiln knows" in os_problem["message"]
    (kind,) = stack_problems({"ofed": {"kind": "dcoa"}})
    assert kind["key"] == "kiln_stack.ofed.kind" and "Did you mean 'doca'?" in kind["message"]


def test_normalise_expands_shorthands_and_drops_nulls() -> None:
    assert dict(checked({"ofed": "inbox", "cuda": "12.4", "dcgm": None})) == {"ofed": {"kind": "inbox"}, "cuda": "12.4"}
    assert dict(checked(None)) == {}
    with pytest.raises(AnsibleFilterError, match=r"^kiln: kiln_stack\.cuda"):
        checked({"cuda": 12.4})


def test_canonical_resolves_a_unique_prefix_and_refuses_an_ambiguous_one() -> None:
    out, asked, problems = _canonical({"cudnn": "9.5.1", "cuda": "12.6"})
    assert out["cudnn"] == "9.5.1.17" and asked == {"cudnn": "9.5.1"} and problems == []
    assert out["cuda"] == "12.6"  # a CUDA minor names its series, never shortened
    out, asked, problems = _canonical({"cudnn": "9"})
    assert "cudnn" not in out and asked == {}
    assert [p["rule"] for p in problems] == ["ambiguous-version"] and "names" in problems[0]["message"]


# -- one check, one value flowing down (issue 32 item 4) ---------------------------------------------------------

STACK = {"gpu": "H100-SXM5-80GB", "os": "ubuntu-24.04", "driver": "580.95.05", "cuda": "12.8", "cudnn": "9.8.0.87",
         "nccl": "2.26.2", "container_toolkit": "1.17.8", "dcgm": "4.2.3", "ofed": {"kind": "inbox"},
         "slurm": {"slurmdbd": "24.11", "slurmctld": "24.11", "slurmd": "24.11"}}


def test_a_checked_stack_is_returned_as_it_is_and_reads_as_its_normal_form() -> None:
    c = checked(STACK)
    assert checked(c) is c
    assert isinstance(c, CheckedStack) and c.get("ofed") == {"kind": "inbox"} and "gpu" in c and len(c) == len(c.normal)
    assert dict(c) == dict(c.normal) and c.canonical["cudnn"] == "9.8.0.87"


def test_the_plan_checks_each_stack_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """kiln_plan renders ~20 package components, repositories, GPUDirect and containers from one stack:
    the schema runs once for it (it ran once per helper call before), and the stack resolves once."""
    from kiln_compat_engine import plan, resolve, stack as stack_mod

    calls = {"schema": 0, "resolve": 0}
    real_problems, real_resolve = stack_mod.stack_problems, resolve._resolve

    def counting_problems(value):
        calls["schema"] += 1
        return real_problems(value)

    def counting_resolve(value):
        calls["resolve"] += 1
        return real_resolve(value)

    monkeypatch.setattr(stack_mod, "stack_problems", counting_problems)
    monkeypatch.setattr(plan, "stack_problems", counting_problems)
    monkeypatch.setattr(resolve, "_resolve", counting_resolve)
    out = plan.kiln_plan([{"stack": STACK, "hosts": ["g1"]}], {"gpu": ["g1"]})
    stacks = out["groups"]["gpu"]["stacks"]
    assert stacks[0]["errors"] == [] and stacks[0]["packages"]["driver"]
    assert calls == {"schema": 2, "resolve": 1}  # plan's own problem listing, then checked() once


def test_a_resolved_stack_handed_out_is_a_copy() -> None:
    c = checked(STACK)
    first = resolve_of(c)
    first["driver_branch"] = "999"
    assert resolve_of(c)["driver_branch"] == "580"


def resolve_of(value):
    from kiln_compat_engine.resolve import kiln_resolve_stack
    return kiln_resolve_stack(value)
