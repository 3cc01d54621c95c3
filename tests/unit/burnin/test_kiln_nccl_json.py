"""module_utils/kiln/nccl/json_doc.py: nccl-tests -J documents, recorded and hostile (hypothesis)."""

from __future__ import annotations

import json
import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_paths import REPO
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.nccl import parse as kiln_nccl  # noqa: E402
from kiln_nccl_cases import FIXTURES, assert_fail_closed, good_text, load, set_limit  # noqa: E402

JSON_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
                | st.text(max_size=10) | st.sampled_from(["nan", "inf", "-inf", "Infinity", "1e999", "true", "N/A"]))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
HOSTILE_MEASURE = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.none(),
                            st.sampled_from(["nan", "inf", "Infinity", "-1", "1e999", "", "x", 10 ** 400]), JSON_VALUES)


def test_json_matches_text_of_the_same_run() -> None:
    text = load("nccl-tests-2.18.3-gh200-8rank-2node-int8.txt")
    js = load("derived-json-v2-from-2.18.3-gh200.json")
    assert js["format"] == "json" and js["status"] == "ok"
    assert js["nccl_version"] == "2.30.4"
    assert js["rows"] == text["rows"]
    assert js["hosts"] == text["hosts"] and js["nranks"] == 8
    assert js["out_of_bounds"] == {"count": 0, "ok": True}
    assert js["avg_busbw"] == {"value": 17.8617, "check": None, "informational": True}
    assert js["config"]["blocking_collectives"] is False
    assert js["collective"] == "all_reduce_perf"


def _json_doc(oop: dict, ip=None) -> dict:
    return {
        "version": 2, "nccl_version": 22703, "config": {"devices": []},
        "results": [{"size": 1024, "count": 256, "type": "float", "redop": "sum", "root": "    -1",
                     "out_of_place": oop, "in_place": ip}],
        "out_of_bounds": {"count": 3, "okay": "false"},
        "average_bus_bandwidth": {"bandwidth": 2.0, "okay": "false"},
        "errors": ["remote process exited"],
    }


def test_json_string_booleans_and_missing_placement() -> None:
    result = kiln_nccl.parse(json.dumps(_json_doc({"time": 1.0, "alg_bw": 1.0, "bus_bw": 2.0, "nwrong": 3.0})))
    assert result["rows"][0]["out_of_place"] == {"time_us": 1.0, "algbw": 1.0, "busbw": 2.0, "wrong": 3, "error": None}
    assert result["rows"][0]["in_place"] is None and result["rows"][0]["root"] == -1
    assert result["out_of_bounds"] == {"count": 3, "ok": False}
    assert result["avg_busbw"]["check"] == "FAILED"
    assert result["failures"] == ["# error: remote process exited"]
    assert result["concluded"] is False
    assert result["status"] == "ok" and result["data_check"] is True


def test_json_nan_string_rejects_the_row() -> None:
    # Changed by the fail-closed rule: nccl-tests writes NaN as "nan"; such a row used to be
    # kept with algbw None, it is now rejected (never a measurement) and the status is invalid.
    result = kiln_nccl.parse(json.dumps(_json_doc({"time": 1.0, "alg_bw": "nan", "bus_bw": 2.0, "nwrong": 3.0})))
    assert result["rows"] == [] and result["status"] == "invalid"
    assert result["rejected_rows"][0]["size"] == 1024 and result["rejected_rows"][0]["wrong"] == 3
    assert "alg_bw is not a finite number" in result["rejected_rows"][0]["reason"]
    assert result["out_of_bounds"] == {"count": 3, "ok": False}
    assert result["failures"] == ["# error: remote process exited"]


def test_json_rejects_other_documents() -> None:
    with pytest.raises(kiln_nccl.ParseError, match="no 'results'"):
        kiln_nccl.parse_json({"version": 1})
    assert kiln_nccl.parse("{}")["status"] == "unparseable"


@st.composite
def hostile_json(draw):
    def cell():
        return draw(st.one_of(st.none(), JSON_VALUES, st.fixed_dictionaries(
            {"time": HOSTILE_MEASURE, "alg_bw": HOSTILE_MEASURE, "bus_bw": HOSTILE_MEASURE,
             "nwrong": HOSTILE_MEASURE})))

    entries = [draw(st.one_of(JSON_VALUES, st.fixed_dictionaries(
        {"size": HOSTILE_MEASURE, "count": HOSTILE_MEASURE, "root": HOSTILE_MEASURE, "type": JSON_VALUES,
         "out_of_place": st.just(None), "in_place": st.just(None)})))
        for _ in range(draw(st.integers(0, 4)))]
    for entry in entries:
        if isinstance(entry, dict) and "size" in entry:
            entry["out_of_place"], entry["in_place"] = cell(), cell()
    doc = {"results": draw(st.one_of(st.just(entries), JSON_VALUES))}
    for key in ("version", "nccl_version", "config", "devices", "args", "env", "out_of_bounds",
                "average_bus_bandwidth", "errors", "end_time"):
        if draw(st.booleans()):
            doc[key] = draw(JSON_VALUES)
    return doc


@settings(max_examples=300, deadline=None)
@given(hostile_json())
def test_hostile_json_never_raises(doc: dict) -> None:
    for text in (json.dumps(doc, default=str), json.dumps(doc, default=str)[: len(json.dumps(doc, default=str)) // 2]):
        assert_fail_closed(kiln_nccl.parse(text))
    try:
        result = kiln_nccl.parse_json(doc)
    except kiln_nccl.ParseError:
        return
    assert_fail_closed(result)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["time", "alg_bw", "bus_bw", "nwrong"]),
       st.sampled_from([math.inf, -math.inf, math.nan, -1.0, 2e6, "nan", "inf", "Infinity", 10 ** 400, [1], {}]))
def test_json_hostile_measurement_rejects_the_row(key: str, value) -> None:
    if value == 2e6:  # absurd as GB/s only
        value = 2.5 if key == "nwrong" else (2e6 if key in ("alg_bw", "bus_bw") else 2e13)
    doc = {"config": {"validation": 1}, "results": [
        {"size": 1024, "count": 256, "out_of_place": {"time": 1.0, "alg_bw": 1.0, "bus_bw": 1.0, "nwrong": 0},
         "in_place": {"time": 1.0, "alg_bw": 1.0, "bus_bw": 1.0, "nwrong": 0}}],
        "out_of_bounds": {"count": 0, "okay": "true"}}
    doc["results"][0]["in_place"][key] = value
    for result in (kiln_nccl.parse_json(doc), kiln_nccl.parse(json.dumps(doc))):
        assert_fail_closed(result)
        assert result["rows"] == [] and result["status"] == "invalid"
        assert result["rejected_rows"][0]["size"] == 1024


def test_json_nan_and_infinity_literals_are_rejected() -> None:
    base = ('{"results":[{"size":8,"out_of_place":{"time":1,"alg_bw":1,"bus_bw":%s,"nwrong":0},'
            '"in_place":null}],"out_of_bounds":{"count":0,"okay":"true"}}')
    assert kiln_nccl.parse(base % "1.5")["status"] == "ok"
    for literal in ("NaN", "Infinity", "-Infinity", "1e999"):
        result = kiln_nccl.parse(base % literal)
        assert result["status"] == "invalid" and result["rows"] == [], literal
        json.dumps(result, allow_nan=False)


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000, '{"results": ' + "[" * 5000 + "]" * 5000 + "}",
                                  '{"results": ' + "9" * 5000 + "}", '{"results": [{"size": ' + "9" * 5000 + "}]}"])
def test_json_deep_or_huge_is_a_problem_not_an_exception(text: str) -> None:
    result = kiln_nccl.parse(text)
    assert_fail_closed(result)
    assert result["status"] != "ok"


@pytest.mark.parametrize(
    "doc",
    [{"results": {"a": 1}}, {"results": "x"}, {"results": [{"size": {}}]}, {"results": [{"size": 8, "in_place": "1"}]},
     {"results": [{"size": "8", "out_of_place": {"time": "1", "alg_bw": [], "bus_bw": {}, "nwrong": "x"}}]},
     {"results": [], "config": [1], "devices": "x", "args": 5, "env": {"a": 1}, "out_of_bounds": [],
      "errors": 3, "average_bus_bandwidth": [1], "nccl_version": {"x": 1}},
     {"results": [{"size": 8, "in_place": {"time": 1, "alg_bw": 1, "bus_bw": 1, "nwrong": 0}}],
      "out_of_bounds": {"count": "many", "okay": []}, "config": {"devices": [{"hostname": 5}, {"hostname": "a"}]}}],
)
def test_json_wrong_types_are_problems(doc: dict) -> None:
    result = kiln_nccl.parse_json(doc)
    assert_fail_closed(result)
    assert result["status"] != "ok" and result["problems"]


def test_json_data_check_disabled() -> None:
    doc = json.loads((FIXTURES / "derived-json-v2-from-2.18.3-gh200.json").read_text())
    doc["config"]["validation"] = 0
    for entry in doc["results"]:
        entry["out_of_place"]["nwrong"] = entry["in_place"]["nwrong"] = None
    result = kiln_nccl.parse_json(doc)
    assert result["status"] == "ok" and result["data_check"] is False
    assert "data check disabled (-c 0): results unverified" in result["problems"]
