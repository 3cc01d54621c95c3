"""Hostile kiln_stack input: every value a clear error naming the key, never a traceback or a silent accept.

One regression test per case found by the hostile-input review (issue 12, "Why"),
then property tests (hypothesis) over arbitrary YAML-shaped stacks. Values are
loaded with PyYAML where the YAML reading matters (12.10 -> 12.1, aliases).
"""

from __future__ import annotations

import datetime
import json
import math
import resource
import time
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_compat_engine import rules, schema
from kiln_compat_engine.errors import CompatError
from kiln_compat_engine.inventory import kiln_stacks_by_host
from kiln_compat_engine.packages import kiln_packages, kiln_pkg
from kiln_compat_engine.plan import kiln_plan, kiln_plan_text
from kiln_compat_engine.report import kiln_stack_report
from kiln_compat_engine.repos import kiln_torch_index
from kiln_compat_engine.resolve import kiln_resolve_stack
from kiln_compat_engine.rules import RULES, kiln_stack_violations
from kiln_compat_engine.stack import stack_problems
from kiln_compat_engine.versions import kiln_version_cmp

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    AnsibleFilterError = CompatError  # type: ignore[misc]

STACK_KEYS = sorted(schema.STACK_FIELDS)
MAX_MESSAGE = 1200  # characters: an echoed value is truncated, whatever its size


def violations(stack: Any, **kw: Any) -> list[dict[str, Any]]:
    return kiln_stack_violations(stack, **kw)


def invalid(stack: Any, **kw: Any) -> list[dict[str, Any]]:
    return [v for v in violations(stack, **kw) if v["rule"] == "invalid-stack"]


def one_invalid(stack: Any, key: str) -> dict[str, Any]:
    found = [v for v in invalid(stack) if v["components"] == [key]]
    assert found, (key, violations(stack))
    assert found[0]["severity"] == "error" and found[0]["allowed"] is False
    return found[0]


# ---------------------------------------------------------------------------
# 1. silent accepts


def test_unquoted_cuda_12_10_is_a_float_error_that_says_to_quote() -> None:
    stack = yaml.safe_load("cuda: 12.10\nos: ubuntu-24.04\n")
    assert stack["cuda"] == 12.1  # what YAML does
    v = one_invalid(stack, "kiln_stack.cuda")
    assert "YAML float 12.1" in v["message"] and "not a string" in v["message"]
    assert 'cuda: "12.10"' in v["fix"] and "Quote" in v["fix"]
    with pytest.raises(AnsibleFilterError, match="kiln_stack.cuda"):
        kiln_pkg(stack, "cuda")  # nothing is installed from it


def test_typo_key_is_an_error_with_did_you_mean() -> None:
    v = one_invalid({"drvier": "580.95.05"}, "kiln_stack.drvier")
    assert "unknown key 'drvier'" in v["message"] and "Did you mean 'driver'?" in v["message"]
    v = one_invalid({"ofed": {"knid": "doca"}}, "kiln_stack.ofed.knid")
    assert "Did you mean 'kind'?" in v["message"]


@pytest.mark.parametrize("os_id", ["rocky-9garbage", "ubuntu-24.04; touch X", "ubuntu-24", "plan9-1", "ubuntu-24.04.1",
                                   "ubuntu_24.04", "rhel-9\n", "ubuntu-２４.04"])
def test_os_must_be_a_known_id(os_id: str) -> None:
    v = one_invalid({"os": os_id}, "kiln_stack.os")
    assert "ubuntu-24.04" in v["message"] + v["fix"]  # the allowed list or the example


def test_os_aliases_and_minors_still_resolve() -> None:
    for os_id in ("rocky-9", "rocky-9.4", "Rocky-9", "almalinux-8", "rhel-10", "debian-12", "ubuntu-22.04"):
        assert invalid({"os": os_id}) == [], os_id
    assert kiln_resolve_stack({"os": "rocky-9.4"})["os"] == "rhel-9"


@pytest.mark.parametrize("key", ["driver", "cuda", "cudnn", "nccl", "torch", "dcgm", "gpu", "os", "driver_flavor"])
def test_empty_string_is_an_error(key: str) -> None:
    v = one_invalid({key: ""}, f"kiln_stack.{key}")
    assert "empty" in v["message"] and "Remove" in v["fix"]


def test_null_leaves_a_component_out() -> None:
    assert violations({"gpu": "H100", "cuda": None, "slurm": {"slurmd": None}}) == []


def test_unknown_detected_gpu_is_an_error_naming_the_pci_id() -> None:
    found = violations({"gpu": "H100"}, detected=["10de:ffff"])
    assert [(v["rule"], v["severity"]) for v in found] == [("gpu-detected-unknown", "error")]
    assert "10de:ffff" in found[0]["message"] and "H100" in found[0]["message"]
    # the inventory may say so: a warning that still names the PCI id
    allowed = violations({"gpu": "H100"}, detected=["10de:ffff"],
                         allow=[{"rule": "gpu-detected-unknown", "reason": "engineering sample, vendor ticket 42"}])
    assert [(v["rule"], v["severity"], v["allowed"]) for v in allowed] == [("gpu-detected-unknown", "warning", True)]
    assert "10de:ffff" in allowed[0]["message"]
    # and without an inventory gpu the unknown GPU is not quietly ignored either
    assert [v["rule"] for v in violations({"driver": "580.173.02"}, detected=["10de:ffff"])] == ["gpu-detected-unknown"]


def test_inventory_gpu_against_detected_gpu_names_both() -> None:
    found = violations({"gpu": "H100-PCIE"}, detected=["10de:2330"])
    assert [v["rule"] for v in found] == ["gpu-detected"]
    assert "H100-PCIE" in found[0]["message"] and "H100-SXM5-80GB" in found[0]["message"]
    assert violations({"gpu": "H100"}, detected=["10de:2330"]) == []  # a model covers its boards
    assert [v["rule"] for v in violations({"gpu": "H100"}, detected=["10de:2330", "10de:26b9"])] == ["gpu-detected"]


def test_unknown_detected_gpu_through_host_facts() -> None:
    hv = {"h1": {"kiln_stack": {"gpu": "H100"},
                 "ansible_facts": {"kiln_gpu": {"gpus": [{"pci_device_id": "10de:ffff"}, {"pci_device_id": "10de:ffff"}]}}}}
    report = kiln_stack_report(kiln_stacks_by_host(hv, ["h1"]))
    assert report["error_count"] == 1 and "[gpu-detected-unknown] h1 (1 host)" in report["errors"][0]
    assert "10de:ffff" in report["errors"][0]


# ---------------------------------------------------------------------------
# 2. former tracebacks


@pytest.mark.parametrize(("stack", "key"), [
    ({"ofed": {"kind": "doca", "version": "latest"}}, "kiln_stack.ofed.version"),
    ({"driver_flavor": "OPEN"}, "kiln_stack.driver_flavor"),
    ({"dcgm": "latest"}, "kiln_stack.dcgm"),
    ({"cuda": "1" * 5000}, "kiln_stack.cuda"),
    ({"driver": "9" * 5000}, "kiln_stack.driver"),
    ({"driver": 10 ** 5000}, "kiln_stack.driver"),
    ({"nccl": "2.21.5-1+cuda" + "1" * 5000}, "kiln_stack.nccl"),
])
def test_former_tracebacks_are_clear_errors(stack: dict[str, Any], key: str) -> None:
    v = one_invalid(stack, key)
    assert len(v["message"]) < MAX_MESSAGE
    for call in (lambda: kiln_resolve_stack(stack), lambda: kiln_packages({**stack, "os": "ubuntu-24.04"})):
        with pytest.raises(AnsibleFilterError, match="kiln_stack"):
            call()
    plan = kiln_plan([{"stack": stack, "allow": [], "hosts": ["h1"]}], {"gpu": ["h1"]})
    assert plan["groups"]["gpu"]["stacks"][0]["errors"], plan
    assert "packages" not in plan["groups"]["gpu"]["stacks"][0]


def test_ofed_needs_a_kind_from_the_data() -> None:
    assert "has no kind" in one_invalid({"ofed": {"version": "3.2.1"}}, "kiln_stack.ofed.kind")["message"]
    v = one_invalid({"ofed": {"kind": "Doca"}}, "kiln_stack.ofed.kind")
    assert "allowed: inbox, doca, mlnx" in v["message"] and "Did you mean 'doca'?" in v["message"]
    assert invalid({"ofed": "doca"}) == []


def test_driver_flavor_suggestion_is_the_lowercase_choice() -> None:
    assert "Did you mean 'open'?" in one_invalid({"driver_flavor": "OPEN"}, "kiln_stack.driver_flavor")["message"]


def test_version_filters_refuse_huge_input_cleanly() -> None:
    for bad in ("9" * 5000, 10 ** 5000):
        with pytest.raises(AnsibleFilterError):
            kiln_version_cmp(bad, "1.0")


# ---------------------------------------------------------------------------
# 3. floats that look like other versions


def test_unquoted_torch_2_10_says_yaml_read_a_float() -> None:
    stack = yaml.safe_load("torch: 2.10\n")
    v = one_invalid(stack, "kiln_stack.torch")
    assert "YAML float 2.1" in v["message"] and 'torch: "2.10"' in v["fix"]


@pytest.mark.parametrize("text", ["slurm: {slurmd: 25.11}", "kubernetes: {kubelet: 1.30}", "driver: 580", "dcgm: 4.6",
                                  "nccl: 2.21", "container_toolkit: 1.20"])
def test_every_unquoted_number_is_refused(text: str) -> None:
    found = invalid(yaml.safe_load(text))
    assert found and "not a string" in found[0]["message"] and "Quote" in found[0]["fix"]


# ---------------------------------------------------------------------------
# 4. size: echo bounded, aliases never expanded


def test_twenty_megabyte_value_is_not_echoed() -> None:
    huge = "1." + "2" * 20_000_000
    hv = {"h1": {"kiln_stack": {"cuda": huge}}}
    report = kiln_stack_report(kiln_stacks_by_host(hv, ["h1"]))
    assert report["error_count"] == 1
    assert len(json.dumps(report)) < 5000
    assert "65,536 characters" in report["errors"][0]
    # below the whole-stack cap the per-value cap names the key
    v = one_invalid({"cuda": "1." + "2" * 1000}, "kiln_stack.cuda")
    assert "(1,002 characters)" in v["message"] and len(v["message"]) < 300


BOMB = """
kiln_stack:
  gpu: H100
  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
  i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


@pytest.mark.parametrize("text", [BOMB, "kiln_stack: &s {gpu: H100, more: [*s]}",
                                  BOMB.replace("kiln_stack:", "kiln_stack_allow:\n  - {rule: cuda-driver, reason: x}\nx:")])
def test_alias_bomb_is_refused_in_linear_time(text: str) -> None:
    hostvars = yaml.safe_load(text)
    hostvars.setdefault("kiln_stack", {"gpu": "H100"})
    if "x" in hostvars:  # the bomb in kiln_stack_allow instead
        hostvars["kiln_stack_allow"] = hostvars.pop("x")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    hv = {f"h{i}": hostvars for i in range(200)}
    report = kiln_stack_report(kiln_stacks_by_host(hv, list(hv)))
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0, elapsed
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 100 * 1024  # KiB: < 100 MiB more
    assert report["evaluations"] == 1 and report["error_count"] == 1
    assert "[invalid-stack] h[0-199] (200 hosts)" in report["errors"][0]
    assert "YAML alias" in report["errors"][0] or "once YAML aliases are expanded" in report["errors"][0]


# ---------------------------------------------------------------------------
# 5. release identity


def test_three_part_cudnn_resolves_to_the_release() -> None:
    stack = {"os": "ubuntu-24.04", "cuda": "12.6", "cudnn": "9.5.1"}
    assert violations(stack) == []
    resolved = kiln_resolve_stack(stack)
    assert resolved["cudnn"] == "9.5.1.17" and resolved["resolved_from"] == {"cudnn": "9.5.1"}
    assert kiln_pkg(stack, "cudnn") == ["libcudnn9-cuda-12=9.5.1.17-1", "libcudnn9-dev-cuda-12=9.5.1.17-1"]
    plan = kiln_plan([{"stack": stack, "allow": [], "hosts": ["h1"]}], {"gpu": ["h1"]})
    assert "    cudnn               9.5.1 -> 9.5.1.17" in kiln_plan_text(plan)


def test_short_driver_resolves_and_fabricmanager_follows() -> None:
    stack = {"os": "ubuntu-24.04", "gpu": "H100-SXM5-80GB", "driver": "580.95", "fabricmanager": "580.95"}
    assert violations(stack) == []
    assert kiln_pkg(stack, "driver") == ["nvidia-open-580=580.95.05-1"]
    assert kiln_pkg(stack, "fabricmanager")[0] == "nvidia-fabricmanager-580=580.95.05-1"


def test_ambiguous_short_version_lists_the_candidates() -> None:
    found = violations({"dcgm": "4.6"})
    assert [v["rule"] for v in found] == ["ambiguous-version"]
    assert "4.6.0" in found[0]["message"] and "4.6.1" in found[0]["message"]
    with pytest.raises(AnsibleFilterError, match="4.6.0"):
        kiln_resolve_stack({"dcgm": "4.6"})
    found = violations({"driver": "580"})
    assert [v["rule"] for v in found] == ["ambiguous-version"] and "580.173.02" in found[0]["message"]


def test_unlisted_point_release_of_a_known_branch_is_a_warning() -> None:
    found = violations({"driver": "580.999.01"})
    assert [(v["rule"], v["severity"]) for v in found] == [("unknown-version", "warning")]
    assert "580.999.01" in found[0]["message"]


def test_allow_list_rules_are_checked() -> None:
    found = violations({"gpu": "H100"}, allow=[{"rule": "cuda-drvier", "reason": "x"}])
    assert found and "Did you mean 'cuda-driver'?" in found[0]["message"]
    found = violations({"gpu": "H100"}, allow=[{"rule": "invalid-stack", "reason": "no"}])
    assert found and found[0]["rule"] == "invalid-stack"  # a malformed stack can never be accepted


def test_every_rule_in_the_code_is_allowable_or_schema() -> None:
    import re
    from pathlib import Path

    engine = Path(rules.__file__).resolve().parents[1]
    source = "\n".join(p.read_text() for p in sorted(engine.rglob("*.py")))
    emitted = set(re.findall(r'_violation\(\s*"([a-z0-9-]+)"', source))
    emitted |= set(re.findall(r'_violation\(\n\s*"([a-z0-9-]+)"', source))
    assert len(emitted) >= 30, sorted(emitted)  # the scan reads every module of the engine
    assert emitted - {"invalid-stack", "ambiguous-version"} <= set(RULES)
    assert {"unknown-version", "gpu-detected-unknown"} <= set(RULES)


# ---------------------------------------------------------------------------
# 6. properties over arbitrary YAML-shaped input

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.builds(pow, st.just(10), st.just(5000)),  # 5,001 digits
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40), st.text(alphabet="0123456789.", max_size=12),
    st.sampled_from(["12.4", "580.173.02", "9.17.1.4", "2.21.5-1+cuda12.4", "H100", "ubuntu-24.04", "open", "doca",
                     "25.11", "1.33", "", " 12.4", "１２.4", "\u0000", "{{ x }}", "x" * 70_000]),
    st.dates(min_value=datetime.date(2000, 1, 1), max_value=datetime.date(2030, 1, 1)),
)
values = st.recursive(scalars, lambda ch: st.lists(ch, max_size=4) | st.dictionaries(
    st.one_of(st.text(max_size=12), st.sampled_from(["kind", "version", "slurmd", "kubelet"])), ch, max_size=4),
    max_leaves=12)
keys = st.one_of(st.sampled_from(STACK_KEYS), st.text(max_size=16), st.integers(), st.none(), st.booleans())
stacks_any = st.one_of(st.dictionaries(keys, values, max_size=6), values)
HOSTILE = settings(max_examples=300, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _names_a_key(text: str) -> bool:
    return "kiln_stack" in text or any(k in text for k in STACK_KEYS)


@HOSTILE
@given(stack=stacks_any)
def test_any_yaml_shaped_stack_gets_violations_or_a_clear_error(stack: Any) -> None:
    try:
        found = kiln_stack_violations(stack)
    except AnsibleFilterError as exc:  # allowed, if it names a key
        assert _names_a_key(str(exc)), str(exc)
        return
    assert isinstance(found, list)
    for v in found:
        assert v["severity"] in ("error", "warning") and v["message"] and v["fix"]
        assert len(v["message"]) < MAX_MESSAGE and len(v["fix"]) < 2 * MAX_MESSAGE
        if v["rule"] == "invalid-stack":
            assert v["components"][0].startswith("kiln_stack"), v
    if isinstance(stack, dict) and any(not isinstance(k, str) or k not in STACK_KEYS for k in stack):
        assert any(v["rule"] == "invalid-stack" and ("unknown key" in v["message"] or "does not expand" in v["message"])
                   for v in found), found
    if not isinstance(stack, (dict, type(None))):
        assert found and found[0]["rule"] == "invalid-stack"


@HOSTILE
@given(stack=stacks_any)
def test_every_stack_filter_fails_only_with_a_filter_error(stack: Any) -> None:
    for call in (lambda: kiln_resolve_stack(stack), lambda: kiln_packages(stack, "ubuntu-24.04"),
                 lambda: kiln_torch_index(stack)):
        try:
            call()
        except AnsibleFilterError as exc:
            assert "kiln" in str(exc) and len(str(exc)) < 6 * MAX_MESSAGE
    hv = {"h1": {"kiln_stack": stack}, "h2": {"kiln_stack": stack, "kiln_stack_allow": stack}}
    report = kiln_stack_report(kiln_stacks_by_host(hv, ["h1", "h2"]))
    assert not any("could not evaluate" in line for line in report["errors"]), report["errors"]
    if stack_problems(stack):  # a malformed stack is refused for the hosts that carry it, naming a key
        h1 = [line for line in report["errors"] if line.startswith("[invalid-stack] h1 ") or "h[1-2]" in line]
        assert h1 and all("kiln_stack" in line for line in h1), report["errors"]
    plan = kiln_plan(kiln_stacks_by_host(hv, ["h1", "h2"]), {"g": ["h1", "h2"]})
    kiln_plan_text(plan)


@HOSTILE
@given(key=st.sampled_from([k for k in STACK_KEYS if schema.STACK_FIELDS[k].version]),
       number=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers()))
def test_a_number_where_a_version_belongs_is_always_refused(key: str, number: float) -> None:
    found = invalid({key: number})
    assert found and found[0]["components"] == [f"kiln_stack.{key}"]
    assert "Quote" in found[0]["fix"]
    if isinstance(number, float) and math.isfinite(number):
        assert repr(number) in found[0]["message"]
