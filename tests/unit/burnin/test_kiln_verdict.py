"""Verdict rules, floors and aggregation (module_utils/kiln/verdict.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from kiln_paths import REPO
import kiln_data
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.nccl import parse as kiln_nccl  # noqa: E402
from kiln import verdict as kv  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "nccl-tests"


def parsed(name: str) -> dict:
    return kiln_nccl.parse((FIXTURES / name).read_text(encoding="utf-8"))


def run(name: str, rc=0, timed_out=False) -> dict:
    return {"parsed": parsed(name), "exit_code": rc, "timed_out": timed_out}


H100_16 = "nccl-tests-2.13-h100-16rank-2node.txt"


@pytest.mark.parametrize(
    ("floor", "status"),
    [
        (300.0, "PASS"),    # 330.51 >= 300 * 1.05
        (320.0, "WARN"),    # 320 <= 330.51 < 336
        (340.0, "FAIL"),    # 330.51 < 340 (8 x NDR 2-node Ring floor)
    ],
)
def test_floor_and_warn_band(floor: float, status: str) -> None:
    check = kv.judge_nccl([run(H100_16)], floor)
    assert check["status"] == status
    # median of the 3 largest sizes, each the lower of out-of-place / in-place: 318.40, 330.51, 337.35
    assert check["value"] == pytest.approx(330.51)
    assert check["sizes"] == [2147483648, 4294967296, 8589934592]


def test_metric_never_uses_the_avg_line() -> None:
    result = parsed(H100_16)
    assert result["avg_busbw"]["value"] == pytest.approx(70.742)
    metric = kv.busbw_metric(result)
    assert metric["value"] == pytest.approx(330.51)
    assert kv.busbw_metric(result, reducer="min")["value"] == pytest.approx(318.40)
    assert kv.busbw_metric(result, top_n=1)["value"] == pytest.approx(337.35)


def test_metric_none_below_min_size() -> None:
    assert kv.busbw_metric(parsed("nccl-tests-2.18.3-gh200-8rank-2node-int8.txt"), min_size="1G") is None


@pytest.mark.parametrize(
    ("runs", "status", "reason"),
    [
        ([run("derived-wrong-2.13-h100-16rank.txt")], "FAIL", "#wrong = 5"),
        ([run("nccl-tests-legacy-allgather-v100-12gpu-oob-failed.txt")], "FAIL", "Out of bounds values: 4 FAILED"),
        ([run(H100_16, rc=7)], "FAIL", "exit code 7"),
        ([run(H100_16, timed_out=True)], "FAIL", "timed out after result rows"),
        ([run(H100_16, rc=4)], "FAIL", "timed out"),
        ([run("derived-failure-lines-2.18.3-gh200.txt", rc=3)], "FAIL", "Test NCCL failure"),
        ([run("derived-truncated-2.18.3-gh200-int8.txt")], "INCOMPLETE", "truncated"),
        ([run("derived-truncated-json-v2.json")], "INCOMPLETE", "unparseable"),
        ([{"parsed": kiln_nccl.parse(""), "exit_code": 127}], "INCOMPLETE", "before any result row"),
        ([{"parsed": None, "exit_code": None, "timed_out": True}], "INCOMPLETE", "timed out before"),
        ([run("nccl-tests-2.18.3-gh200-8rank-2node-int8.txt")], "INCOMPLETE", "sweep too small"),
    ],
)
def test_never_pass_on_bad_runs(runs, status, reason) -> None:
    check = kv.judge_nccl(runs, 1.0)  # a floor every run clears: only the integrity rules decide
    assert check["status"] == status
    assert check["status"] != "PASS"
    assert any(reason in r for r in check["reasons"]), check["reasons"]


def test_wrong_fails_even_above_floor() -> None:
    check = kv.judge_nccl([run("derived-wrong-2.13-h100-16rank.txt")], 100.0)
    assert check["value"] > 100 and check["status"] == "FAIL"


def test_repeats_median_and_corruption_in_one_run() -> None:
    good = run(H100_16)
    check = kv.judge_nccl([good, good, good], 300.0)
    assert check["status"] == "PASS" and check["runs"] == 3 and check["run_values"] == [330.51] * 3
    bad = kv.judge_nccl([good, run("derived-wrong-2.13-h100-16rank.txt"), good], 300.0)
    assert bad["status"] == "FAIL" and bad["reasons"][0].startswith("run 2: #wrong")


def test_legacy_error_column_passes_on_oob_ok() -> None:
    check = kv.judge_nccl([run("nccl-tests-legacy-error-column-v100-12gpu-allreduce.txt")], 100.0)
    assert check["status"] == "PASS" and check["value"] == pytest.approx(123.49)


def test_json_and_cpu_engine_are_judged_alike() -> None:
    text = kv.judge_nccl([run("nccl-tests-2.18.3-gh200-8rank-2node-int8.txt")], 50.0, min_size="16M")
    js = kv.judge_nccl([run("derived-json-v2-from-2.18.3-gh200.json")], 50.0, min_size="16M")
    assert (text["status"], text["value"]) == (js["status"], js["value"]) == ("PASS", pytest.approx(84.14))
    floors = kiln_data.floors()
    cpu = kv.lookup_floor(floors, "cpu", "tcp", "fabric")
    check = kv.judge_nccl([run("derived-kiln-cpu-engine-3node-example.txt")], cpu)
    assert check["status"] == "PASS" and check["floor_confidence"] == "UNVERIFIED"
    assert check["series"][0] == {"size": 1048576, "busbw_oop": 0.28, "busbw_ip": 0.28}


@pytest.mark.parametrize("floor", [None, 0, -1, True, float("nan"), float("inf"), "1e999", "abc", [1]])
def test_floor_required(floor) -> None:
    """A missing, non-positive or non-finite floor is a configuration error (a nan floor once let a
    negative busbw pass)."""
    with pytest.raises(kv.KilnConfigError, match="busbw floor must be"):
        kv.judge_nccl([run(H100_16)], floor)


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(kv.KilnConfigError):
        kv.judge_nccl([], 1.0)
    with pytest.raises(kv.KilnConfigError):
        kv.busbw_metric(parsed(H100_16), reducer="mean")


@pytest.mark.parametrize(
    ("status", "code"), [("PASS", 0), ("WARN", 1), ("FAIL", 2), ("INCOMPLETE", 3), ("SKIP", 3)]
)
def test_exit_codes(status: str, code: int) -> None:
    assert kv.exit_code(status) == code
    assert kv.EXIT_CONFIG_ERROR == 4
    if status != "SKIP":
        assert kv.status_from_exit(code) == status


def test_unknown_status_and_exit() -> None:
    with pytest.raises(kv.KilnConfigError):
        kv.exit_code("OK")
    with pytest.raises(kv.KilnConfigError):
        kv.status_from_exit(4)


@pytest.mark.parametrize(
    ("statuses", "node"),
    [
        (["PASS", "PASS"], "PASS"),
        (["PASS", "WARN"], "WARN"),
        (["WARN", "INCOMPLETE"], "INCOMPLETE"),
        (["INCOMPLETE", "FAIL", "PASS"], "FAIL"),
        (["SKIP", "PASS"], "PASS"),
        (["SKIP"], "INCOMPLETE"),
        ([], "INCOMPLETE"),
    ],
)
def test_aggregate_node(statuses, node) -> None:
    checks = [kv.make_check(f"c{i}", s) for i, s in enumerate(statuses)]
    assert kv.aggregate_node(checks) == {"status": node, "exit": kv.exit_code(node)}


def test_aggregate_overall() -> None:
    nodes = {"a": {"status": "PASS"}, "b": {"status": "WARN"}, "c": {"status": "PASS"}}
    overall = kv.aggregate_overall(nodes, [kv.make_check("nccl.fabric", "PASS")])
    assert overall["status"] == "WARN" and overall["exit"] == 1
    assert (overall["passed"], overall["warned"], overall["failed"], overall["incomplete"]) == (2, 1, 0, 0)
    failed = kv.aggregate_overall(nodes, [kv.make_check("nccl.fabric", "FAIL")])
    assert failed["status"] == "FAIL" and failed["fabric_failed"] == 1
    with pytest.raises(kv.KilnConfigError, match="empty"):
        kv.aggregate_overall({})


# ------------------------------------------------------------------ floors


def test_floors_file_every_value_has_source_and_confidence() -> None:
    floors = kiln_data.floors()
    assert floors["schema"] == "kiln.burnin.floors/v1"
    count = 0
    for sku, spec in floors["skus"].items():
        if spec.get("relative_only"):
            assert spec["source"] and spec["confidence"] == "UNVERIFIED" and not spec.get("floors"), sku
            continue
        for fabric, tests in spec["floors"].items():
            for test, entry in tests.items():
                count += 1
                assert test in floors["tests"], (sku, fabric, test)
                assert entry["value"] > 0 and entry["source"] and entry["confidence"] in (
                    "DERIVED", "REPORTED", "UNVERIFIED")
    assert count >= 20


@pytest.mark.parametrize(
    ("sku", "fabric", "test", "value", "confidence", "key"),
    [
        ("h100-sxm", "ib_ndr", "single_node", 440, "DERIVED", "h100-sxm/any/single_node"),
        ("h100-sxm", "ib_ndr", "two_node_ring", 340, "DERIVED", "h100-sxm/ib_ndr/two_node_ring"),
        ("h200-sxm", "roce400", "two_node_ring", 300, "UNVERIFIED", "h200-sxm/roce400/two_node_ring"),
        ("a100-sxm", "ib_hdr", "two_node_ring", 170, "DERIVED", "a100-sxm/ib_hdr/two_node_ring"),
        ("b200", "ib_ndr", "single_node", 750, "UNVERIFIED", "b200/any/single_node"),
        ("gb200-nvl72", "any", "fabric", 760, "REPORTED", "gb200-nvl72/any/fabric"),
        ("cpu", "tcp", "fabric", 0.05, "UNVERIFIED", "cpu/tcp/fabric"),
    ],
)
def test_lookup_floor(sku, fabric, test, value, confidence, key) -> None:
    floor = kv.lookup_floor(kiln_data.floors(), sku, fabric, test)
    assert (floor["value"], floor["confidence"], floor["key"]) == (value, confidence, key)


def test_lookup_floor_metric_options() -> None:
    floors = kiln_data.floors()
    assert kv.lookup_floor(floors, "h100-sxm", "ib_ndr", "fabric")["min_size"] == 1 << 30
    cpu = kv.lookup_floor(floors, "cpu", "tcp", "fabric")
    assert cpu["min_size"] == 16 << 20 and cpu["top_n"] == 3 and cpu["warn_band"] == 0.05


@pytest.mark.parametrize(
    "overrides",
    [
        {"h100-sxm/ib_ndr/two_node_ring": 360},
        {"skus": {"h100-sxm": {"floors": {"ib_ndr": {"two_node_ring": 360}}}}},
        {"skus": {"h100-sxm": {"floors": {"ib_ndr": {"two_node_ring": {"value": 360}}}}}},
    ],
)
def test_group_vars_overrides(overrides) -> None:
    floors = kiln_data.floors()
    floor = kv.lookup_floor(floors, "h100-sxm", "ib_ndr", "two_node_ring", overrides=overrides)
    assert floor["value"] == 360 and floor["confidence"] == "SITE" and "group_vars" in floor["source"]
    # the data itself is untouched
    assert kv.lookup_floor(floors, "h100-sxm", "ib_ndr", "two_node_ring")["value"] == 340


def test_overrides_add_fabric_and_defaults() -> None:
    floors = kiln_data.floors()
    overrides = {"defaults": {"warn_band": 0.1, "top_n": 1},
                 "b200/ib_xdr/two_node_ring": {"value": 600, "source": "site run 2026-07-30", "confidence": "SITE"}}
    floor = kv.lookup_floor(floors, "b200", "ib_xdr", "two_node_ring", overrides=overrides)
    assert (floor["value"], floor["source"], floor["warn_band"], floor["top_n"]) == (600, "site run 2026-07-30", 0.1, 1)


def test_baseline_replaces_floor() -> None:
    floor = kv.lookup_floor(kiln_data.floors(), "h100-sxm", "ib_ndr", "fabric", baseline=382.0)
    assert floor["value"] == pytest.approx(343.8) and floor["confidence"] == "BASELINE"


@pytest.mark.parametrize(
    ("sku", "fabric", "test", "match"),
    [
        ("z9", "any", "single_node", "unknown GPU SKU"),
        ("h100-sxm", "ib_ndr", "alltoall", "unknown burn-in test"),
        ("b200", "ib_xdr", "two_node_ring", "no floor for b200/ib_xdr/two_node_ring"),
    ],
)
def test_lookup_floor_config_errors(sku, fabric, test, match) -> None:
    with pytest.raises(kv.KilnConfigError, match=match):
        kv.lookup_floor(kiln_data.floors(), sku, fabric, test)


def test_load_floors_rejects_entries_without_source(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "data" / "burnin_floors.yml").read_text())
    del data["skus"]["h100-sxm"]["floors"]["any"]["single_node"]["source"]
    path = tmp_path / "floors.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(kv.KilnConfigError, match="no source"):
        kv.load_floors(str(path))
    with pytest.raises(kv.KilnConfigError, match="cannot read"):
        kv.load_floors(str(tmp_path / "missing.yml"))


@pytest.mark.parametrize(
    ("name", "sku"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GB200", "gb200-nvl72"),
        ("NVIDIA GH200 120GB", "gh200"),
        ("Tesla V100-SXM3-32GB", "v100"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA L40", "l40"),
        ("NVIDIA A100-PCIE-40GB", "a100-pcie"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("Unknown GPU 9000", None),
        ("cpu", "cpu"),
    ],
)
def test_sku_from_gpu_name(name: str, sku) -> None:
    assert kv.sku_from_gpu_name(kiln_data.floors(), name) == sku
