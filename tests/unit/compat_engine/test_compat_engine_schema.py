"""The input schema of kiln_stack / kiln_stack_allow: shapes, sizes, echoes (module schema).

The schema's behaviour on hostile input is exercised end to end (with hypothesis) in
test_compat_hostile.py; these tests pin the module's own functions.
"""

from __future__ import annotations

from kiln_compat_engine import schema


def test_show_truncates_and_describe_names_yaml_types() -> None:
    assert schema.show("x" * 100) == repr("x" * schema.SHOW) + "… (100 characters)"
    assert schema.show(2 ** 300).startswith("an integer of about ")
    assert schema.show({"a": 1}) == "a mapping with keys 'a'" and schema.show([1, 2]) == "a list of 2 items"
    assert schema.describe(12.1) == "the YAML float 12.1" and schema.describe(None) == "null"
    assert schema.describe(True) == "the YAML boolean True"


def test_measure_counts_aliases_once_walked_and_stops_at_the_cap() -> None:
    leaf = ["a"] * 10
    tree = [leaf] * 10  # one object referenced 10 times: 10 * 11 + 1 values once expanded
    assert schema.measure(tree).nodes == 111 and not schema.measure(tree).over()
    bomb: list = ["x"]
    for _ in range(30):
        bomb = [bomb, bomb]
    size = schema.measure(bomb)
    assert size.over() and size.nodes <= schema.MAX_NODES + 1
    loop: list = []
    loop.append(loop)
    assert schema.measure(loop).recursive
    assert "contains itself" in schema.too_large("kiln_stack", schema.measure(loop))["message"]
    assert schema.measure({"cuda": "{{ x }}"}).templated


def test_check_stack_names_the_key_and_suggests() -> None:
    assert schema.check_stack({"gpu": "H100", "cuda": "12.4"}) == []
    (typo,) = schema.check_stack({"cdua": "12.4"})
    assert typo["key"] == "kiln_stack.cdua" and "Did you mean 'cuda'?" in typo["message"]
    (num,) = schema.check_stack({"cuda": 12.1})
    assert num["key"] == "kiln_stack.cuda" and 'cuda: "12.1"' in num["fix"]


def test_check_allow_needs_known_rules_and_reasons() -> None:
    assert schema.check_allow([{"rule": "cuda-driver", "reason": "ticket 1"}], ["cuda-driver"]) == []
    problems = schema.check_allow([{"rule": "cuda-drvier", "reason": ""}], ["cuda-driver"])
    assert [p["key"] for p in problems] == ["kiln_stack_allow[0].rule", "kiln_stack_allow[0].reason"]
    assert "Did you mean 'cuda-driver'?" in problems[0]["message"]
    assert schema.suggest("CUDA", ["cuda", "os"]) == " Did you mean 'cuda'?" and schema.suggest("zz", ["cuda"]) == ""
