"""kiln_burnin_fabric_checks and kiln_burnin_fabric_pairs: expected ports, passive fabric checks, NCCL env, fabric key, ib_write_bw pairs."""

from __future__ import annotations

import copy
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln.burnin import fabric_checks as fc
import kiln_data
from kiln.burnin import fabric_pairs as fp
from kiln import verdict as kiln_verdict
from kiln.verdict import KilnConfigError

RULES = kiln_data.fabric_rules()
HOSTILE = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def port(number=1, state="ACTIVE", phys="LinkUp", rate=400.0, width="4X", speed="NDR", layer="InfiniBand", **counters):
    values = {c: 0 for c in fc.ERROR_COUNTERS}
    values.update(counters)
    return {"port": number, "state": state, "state_code": {"ACTIVE": 4, "DOWN": 1, "INIT": 2}.get(state),
            "phys_state": phys, "phys_state_code": {"LinkUp": 5, "Polling": 2, "Disabled": 3}.get(phys),
            "rate": f"{rate:g} Gb/sec ({width} {speed})", "rate_gbps": rate, "width": width, "speed": speed,
            "link_layer": layer, "lid": 1, "sm_lid": 1, "gid0": None, "netdevs": [], "counters": values}


def facts(n=8, storage=True, overrides=None, gpudirect=None):
    """An 8 x NDR node (+ one storage port mlx5_8); overrides: {hca index: port kwargs}."""
    hcas = []
    for index in range(n + (1 if storage else 0)):
        kwargs = dict((overrides or {}).get(index, {}))
        if storage and index == n:
            kwargs.setdefault("rate", 200.0)
            kwargs.setdefault("speed", "HDR")
        hcas.append({"name": f"mlx5_{index}", "hca_type": "MT4129", "model": "ConnectX-7", "fw_ver": "28.39.1002",
                     "board_id": "MT_0000000838", "node_guid": "a088:c203:0000:1000", "ports": [port(**kwargs)]})
    return {"schema": "kiln.fabric/v1", "sysfs_root": "/sys", "hcas": hcas, "problems": [],
            "gpudirect": gpudirect or {"kernel": "6.1.0-28-amd64", "nvidia_loaded": True, "open_modules": True,
                                       "peermem_loaded": False, "dma_buf_kernel": True}}


EXPECT = {"ports": 8, "rate_gbps": 400, "width": "4X", "link_layer": "InfiniBand", "exclude": ["mlx5_8"]}
DMA_BUF = {"method": "dma_buf"}


def judge(node_facts, expect=EXPECT, previous=None, plan=DMA_BUF, history=None):
    expected = fc.expected_ports(node_facts, expect, history, host="gpu01")
    return {c["id"]: c for c in fc.passive_fabric_checks(node_facts, expected, previous, RULES, plan, gpu_node=True)}


# --------------------------------------------------------------------------- rules file


def test_rules_file_loads_with_sources():
    assert RULES["schema"] == fc.SCHEMA
    assert set(RULES["counters"]) == set(fc.ERROR_COUNTERS)
    assert RULES["rdma_write_bw"]["floors"]["ib_ndr"]["value"] == 360
    assert RULES["rdma_write_bw"]["floors"]["ib_hdr"]["confidence"] == "VERIFIED"


@pytest.mark.parametrize("path, value, words", [
    (("counters", "symbol_error", "fail"), 5, "fail must be null or a whole number >= warn"),
    (("counters", "symbol_error", "warn"), float("nan"), "warn must be a whole number"),
    (("counters", "link_downed", "confidence"), "MAYBE", "confidence"),
    (("counters", "link_downed", "source"), "", "no source"),
    (("rdma_write_bw", "floors", "ib_ndr", "value"), float("inf"), "finite rate"),
    (("rdma_write_bw", "floors", "ib_ndr", "value"), "360", "finite rate"),
    (("limits", "counter_max"), -1, "counter_max"),
])
def test_bad_rules_are_named(path, value, words):
    data = copy.deepcopy(RULES)
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(fc.FabricError, match=words):
        fc.validate_fabric_thresholds(data, "rules.yml")


def test_rules_file_errors(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("schema: [unclosed\n")
    with pytest.raises(fc.FabricError, match="not valid YAML"):
        fc.load_fabric_thresholds(str(bad))
    with pytest.raises(fc.FabricError, match="cannot read"):
        fc.load_fabric_thresholds(str(tmp_path / "missing.yml"))
    data = copy.deepcopy(RULES)
    data["counters"]["port_xmit_data"] = data["counters"]["symbol_error"]
    with pytest.raises(fc.FabricError, match="not an error counter"):
        fc.validate_fabric_thresholds(data)


# --------------------------------------------------------------------------- expectation


def test_expected_from_inventory():
    expected = fc.expected_ports(facts(), EXPECT, host="gpu01")
    assert expected["source"] == "inventory" and not expected["weak"]
    assert [p["port"] for p in expected["ports"]] == [f"mlx5_{i}/1" for i in range(8)]
    assert {p["speed"] for p in expected["ports"]} == {"NDR"}


@pytest.mark.parametrize("expect, words", [
    ({"ports": "8"}, "ports must be a whole number"),
    ({"ports": 8, "colour": "red"}, "unknown key"),
    ({"rate_gbps": float("nan")}, "rate_gbps must be a finite"),
    ({"rate_gbps": 1e300}, "rate_gbps must be a finite"),
    ({"width": "5X"}, "width must be one of"),
    ({"link_layer": "ib"}, "link_layer must be one of"),
    ({"exclude": "mlx5_8"}, "exclude must be a list"),
    ({"hcas": ["mlx5_0; rm -rf /"]}, "not a device name"),
    ({"hcas": ["mlx5_0"], "exclude": ["mlx5_0"]}, "also in exclude"),
    ({"hcas": ["mlx5_0", "mlx5_1"], "ports": 3}, "make them agree"),
    ({"gid_index": True}, "gid_index"),
    ("8 ports", "must be a mapping"),
])
def test_expect_validated_strictly(expect, words):
    with pytest.raises(fc.FabricError, match=words) as info:
        fc.expected_ports(facts(), expect, host="gpu07")
    assert "gpu07" in str(info.value) and "kiln_burnin_fabric_expect" in str(info.value)
    assert isinstance(info.value, KilnConfigError)


def test_expected_from_history_and_node():
    healthy = facts()
    record = {"run_id": "r1", "status": "PASS", "fabric": fc.history_fabric(healthy, fc.expected_ports(healthy, EXPECT))}
    degraded = facts(overrides={3: {"rate": 200.0, "speed": "HDR"}})
    expected = fc.expected_ports(degraded, None, [{"run_id": "r0", "status": "FAIL"}, record])
    assert expected["source"] == "history" and "run r1" in expected["why"]
    assert next(p for p in expected["ports"] if p["port"] == "mlx5_3/1")["rate_gbps"] == 400
    checks = {c["id"]: c for c in fc.passive_fabric_checks(degraded, expected, None, RULES, DMA_BUF, True)}
    assert checks["fabric.rate"]["status"] == "FAIL" and "mlx5_3/1 at 200 Gb/s (4X HDR)" in checks["fabric.rate"]["detail"]
    own = fc.expected_ports(degraded)
    assert own["source"] == "node" and own["weak"] and "from the node itself" in own["why"]
    assert len(own["ports"]) == 9  # without an expectation the storage port is expected too


def test_unusable_history_falls_back_with_a_note():
    bad = [{"run_id": "r1", "status": "PASS", "fabric": {"ports": [{"port": "mlx5_0/1", "rate_gbps": "fast"}]}}]
    expected = fc.expected_ports(facts(), None, bad)
    assert expected["source"] == "node" and any("history ignored" in n for n in expected["notes"])


# --------------------------------------------------------------------------- passive checks


def test_healthy_node_passes():
    checks = judge(facts(), previous=fc.counter_snapshot(facts()))
    assert {c: checks[c]["status"] for c in checks} == {c: "PASS" for c in fc._CHECKS}
    assert checks["fabric.ports"]["value"] == 8 and checks["fabric.rate"]["value"] == 400


def test_port_down_missing_and_hdr_rate_are_named():
    checks = judge(facts(overrides={5: {"state": "DOWN", "phys": "Polling"}, 3: {"rate": 200.0, "speed": "HDR"}}))
    assert checks["fabric.ports"]["status"] == "FAIL" and "mlx5_5/1 DOWN (Polling)" in checks["fabric.ports"]["detail"]
    assert "mlx5_3/1 at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR)" in checks["fabric.rate"]["detail"]
    assert checks["fabric.rate"]["status"] == "FAIL"
    seven = facts(n=7, storage=False)
    checks = judge(seven, expect={"ports": 8, "rate_gbps": 400, "width": "4X", "link_layer": "InfiniBand"})
    assert checks["fabric.ports"]["status"] == "FAIL"
    assert "expected 8, found 7: mlx5_7 missing" in checks["fabric.ports"]["detail"]


def test_node_self_expectation_only_warns_on_a_down_port():
    node = facts(overrides={5: {"state": "DOWN", "phys": "Polling"}})
    checks = judge(node, expect=None)
    assert checks["fabric.ports"]["status"] == "WARN" and "kiln_burnin_fabric_expect" in checks["fabric.ports"]["detail"]


def test_counters_deltas_thresholds_and_reset():
    before = fc.counter_snapshot(facts(overrides={1: {"symbol_error": 30, "link_downed": 4}}))
    now = facts(overrides={1: {"symbol_error": 150, "link_downed": 2}})
    checks = judge(now, previous=before)
    detail = checks["fabric.counters"]["detail"]
    assert checks["fabric.counters"]["status"] == "FAIL"
    assert "mlx5_1/1 symbol_error +120 since the last run (fail >= 100)" in detail
    assert "link_downed 2 < 4 before: counters cleared or HCA replaced; baseline restarts" in detail
    warn = judge(facts(overrides={2: {"symbol_error": 12}}), previous=fc.counter_snapshot(facts()))
    assert warn["fabric.counters"]["status"] == "WARN" and "(warn >= 10)" in warn["fabric.counters"]["detail"]
    first = judge(facts(overrides={2: {"symbol_error": 3}}))
    assert first["fabric.counters"]["status"] == "PASS" and "absolute values" in first["fabric.counters"]["detail"]
    saturated = judge(facts(overrides={2: {"link_downed": 255}}), previous=fc.counter_snapshot(
        facts(overrides={2: {"link_downed": 255}})))
    assert saturated["fabric.counters"]["status"] == "WARN" and "saturated" in saturated["fabric.counters"]["detail"]


@pytest.mark.parametrize("value", [None, "12", float("nan"), -1, 2 ** 65, True, 1.5])
def test_bad_counter_is_incomplete(value):
    node = facts()
    node["hcas"][4]["ports"][0]["counters"]["symbol_error"] = value
    if value is None:
        del node["hcas"][4]["ports"][0]["counters"]["symbol_error"]
    checks = judge(node)
    assert checks["fabric.counters"]["status"] == "INCOMPLETE"
    assert "mlx5_4/1 symbol_error" in checks["fabric.counters"]["detail"]


def test_gpudirect():
    assert judge(facts())["fabric.gpudirect"]["status"] == "PASS"
    proprietary = facts(gpudirect={"kernel": "6.1", "nvidia_loaded": True, "open_modules": False,
                                   "peermem_loaded": False, "dma_buf_kernel": True})
    result = judge(proprietary)["fabric.gpudirect"]
    assert result["status"] == "FAIL" and "proprietary" in result["detail"]
    assert judge(facts(), plan={"method": "peermem"})["fabric.gpudirect"]["status"] == "FAIL"
    assert "host memory" in judge(facts(), plan={"method": "none"})["fabric.gpudirect"]["detail"]
    assert judge(facts(), plan=None)["fabric.gpudirect"]["status"] == "INCOMPLETE"  # a GPU node without a plan
    unknown = facts(gpudirect={"nvidia_loaded": True})
    assert judge(unknown)["fabric.gpudirect"]["status"] == "INCOMPLETE"
    with pytest.raises(fc.FabricError):
        judge(facts(), plan={"method": "magic"})
    expected = fc.expected_ports(facts())
    cpu = {c["id"]: c for c in fc.passive_fabric_checks(facts(), expected, None, RULES, None, gpu_node=False)}
    assert cpu["fabric.gpudirect"]["status"] == "SKIP"


def test_no_hca_and_none_expected_skips_and_missing_facts_are_incomplete():
    empty = dict(facts(), hcas=[])
    checks = fc.passive_fabric_checks(empty, fc.expected_ports(empty), None, RULES)
    assert {c["status"] for c in checks} == {"SKIP"}
    assert "none expected" in checks[0]["detail"]
    expected = fc.expected_ports(None, EXPECT)
    checks = {c["id"]: c for c in fc.passive_fabric_checks(None, expected, None, RULES, DMA_BUF, True)}
    assert {c["status"] for c in checks.values()} == {"INCOMPLETE"}
    problems = dict(facts(), problems=["mlx5_3 port 1: rate 'garbage' is not '<N> Gb/sec (<width> <speed>)'"])
    got = judge(problems)["fabric.facts"]
    assert got["status"] == "INCOMPLETE" and "garbage" in got["detail"]


# --------------------------------------------------------------------------- NCCL env and fabric key


def test_nccl_env():
    node = facts(overrides={5: {"state": "DOWN", "phys": "Polling"}})
    out = fp.nccl_env(node, fc.expected_ports(node, EXPECT), "eno1")
    assert out["env"]["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8) if i != 5)
    assert out["env"]["NCCL_SOCKET_IFNAME"] == "=eno1" and "mlx5_5/1" in out["why"]
    roce = facts(n=2, storage=False, overrides={i: {"layer": "Ethernet"} for i in range(2)})
    expect = {"ports": 2, "link_layer": "Ethernet"}
    assert "NCCL_IB_GID_INDEX" not in fp.nccl_env(roce, fc.expected_ports(roce, expect))["env"]
    got = fp.nccl_env(roce, fc.expected_ports(roce, dict(expect, gid_index=3)))
    assert got["env"]["NCCL_IB_GID_INDEX"] == "3" and got["env"]["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    off = fp.nccl_env(dict(facts(), hcas=[]), fc.expected_ports(dict(facts(), hcas=[])))
    assert off["env"] == {"NCCL_IB_DISABLE": "1"} and "no usable RDMA port" in off["why"]
    with pytest.raises(fc.FabricError):
        fp.nccl_env(facts(), fc.expected_ports(facts()), "eth0; reboot")


def test_fabric_key_from_facts():
    nodes = {"a": facts(), "b": facts(), "c": facts(overrides={i: {"rate": 200.0, "speed": "HDR"} for i in range(8)})}
    assert fp.fabric_key_from_facts(nodes, "cpu")["key"] == "tcp"
    expected = {n: fc.expected_ports(f, EXPECT) for n, f in nodes.items()}
    assert fp.fabric_key_from_facts(nodes, "nccl-tests", expected)["key"] == "ib_hdr"
    assert fp.fabric_key_from_facts({"a": facts(), "b": facts()}, "nccl-tests")["key"] == "ib_ndr"
    assert fp.fabric_key_from_facts({"a": facts()}, "nccl-tests")["key"] == "nvlink"
    roce = {n: facts(n=2, storage=False, overrides={i: {"layer": "Ethernet"} for i in range(2)}) for n in "ab"}
    assert fp.fabric_key_from_facts(roce, "nccl-tests")["key"] == "roce400"
    assert fp.fabric_key_from_facts({"a": facts(), "b": dict(facts(), hcas=[])}, "nccl-tests")["key"] == "tcp"
    with pytest.raises(fc.FabricError):
        fp.fabric_key_from_facts(nodes, "carrier-pigeon")


# --------------------------------------------------------------------------- RDMA pairs


def ports_of(n=2, rate=400.0):
    return {"ports": [{"port": f"mlx5_{i}/1", "rate_gbps": rate, "link_layer": "InfiniBand"} for i in range(n)]}


def ok(gbps, device=None):
    return {"ok": True, "problems": [], "test": "RDMA_Write BW", "device": device, "bw_avg_gbps": gbps,
            "bw_peak_gbps": gbps, "rc": 0, "timed_out": False}


def test_plan_is_a_rail_matched_ring():
    plan = fp.rdma_pair_plan({n: ports_of() for n in ("c1", "c2", "c3")})
    assert [(e["client"], e["server"], e["client_hca"], e["server_hca"]) for e in plan] == [
        ("c1", "c2", "mlx5_0", "mlx5_0"), ("c1", "c2", "mlx5_1", "mlx5_1"), ("c2", "c3", "mlx5_0", "mlx5_0"),
        ("c2", "c3", "mlx5_1", "mlx5_1"), ("c3", "c1", "mlx5_0", "mlx5_0"), ("c3", "c1", "mlx5_1", "mlx5_1")]
    assert {e["link_key"] for e in plan} == {"ib_ndr"}
    for server in ("c1", "c2", "c3"):
        tcp = [e["tcp_port"] for e in plan if e["server"] == server]
        assert len(tcp) == len(set(tcp)) == 2
    assert len(fp.rdma_pair_plan({"a": ports_of(), "b": ports_of()})) == 2
    assert fp.rdma_pair_plan({"a": ports_of()}) == []
    with pytest.raises(fc.FabricError):
        fp.rdma_pair_plan({"a": {"ports": ["mlx5_0/1; id"]}, "b": ports_of()})


def test_slow_hca_is_blamed_with_both_partners():
    plan = fp.rdma_pair_plan({n: ports_of() for n in ("c1", "c2", "c3")})
    results = [ok(180.0) if "c2" in (e["client"], e["server"]) and e["rail"] == 1 and
               (e["client"] == "c2" and e["client_hca"] == "mlx5_1" or e["server"] == "c2") else ok(390.0)
               for e in plan]
    out = fp.judge_rdma_bw(plan, results, RULES)
    assert out["c2"][0]["status"] == "FAIL"
    assert "mlx5_1: 180 Gb/s with c1 and c3, floor 360 Gb/s (NDR)" in out["c2"][0]["detail"]
    assert out["c1"][0]["status"] == "PASS" and out["c3"][0]["status"] == "PASS"
    assert "low only with blamed c2 mlx5_1" in out["c1"][0]["detail"]


def test_one_low_link_names_suspects_and_two_nodes_name_both_ends():
    plan = fp.rdma_pair_plan({n: ports_of(1) for n in ("c1", "c2", "c3")})
    out = fp.judge_rdma_bw(plan, [ok(200.0), ok(390.0), ok(390.0)], RULES)
    assert out["c1"][0]["status"] == out["c2"][0]["status"] == "WARN" and out["c3"][0]["status"] == "PASS"
    assert "suspects c1 mlx5_0 and c2 mlx5_0" in out["c1"][0]["detail"]
    pair = fp.rdma_pair_plan({"a": ports_of(1), "b": ports_of(1)})
    both = fp.judge_rdma_bw(pair, [ok(100.0)], RULES)
    assert both["a"][0]["status"] == both["b"][0]["status"] == "FAIL"


@pytest.mark.parametrize("result, words", [
    (None, "no result"), ({"ok": False, "problems": ["truncated"], "bw_avg_gbps": None}, "truncated"),
    (dict(ok(390.0), timed_out=True), "timed out"), (dict(ok(390.0), rc=1), "exit code 1"),
    (ok(float("nan")), "unusable"), (ok(390.0, device="mlx5_7"), "not the planned HCA"),
])
def test_bad_results_are_incomplete_naming_the_pair(result, words):
    plan = fp.rdma_pair_plan({"a": ports_of(1), "b": ports_of(1)})
    out = fp.judge_rdma_bw(plan, [result], RULES)
    for node in ("a", "b"):
        assert out[node][0]["status"] == "INCOMPLETE"
        assert words in out[node][0]["detail"] and "a mlx5_0 -> b mlx5_0" in out[node][0]["detail"]


# --------------------------------------------------------------------------- properties


@FAST
@given(st.integers(min_value=2, max_value=7), st.integers(min_value=1, max_value=4),
       st.lists(st.one_of(st.floats(min_value=0, max_value=500), st.none(), st.just(float("nan"))), max_size=40))
def test_every_plan_node_gets_one_check_and_good_nodes_are_never_blamed(nodes, rails, values):
    names = [f"n{i}" for i in range(nodes)]
    plan = fp.rdma_pair_plan({n: ports_of(rails) for n in names})
    results = [ok(values[i]) if i < len(values) and values[i] is not None else None for i in range(len(plan))]
    out = fp.judge_rdma_bw(plan, results, RULES)
    assert sorted(out) == names and all(len(v) == 1 and v[0]["id"] == "rdma.write_bw" for v in out.values())
    for node in names:
        mine = [r for e, r in zip(plan, results) if node in (e["client"], e["server"])]
        if all(r is not None and math.isfinite(r["bw_avg_gbps"]) and r["bw_avg_gbps"] >= 360 for r in mine):
            assert out[node][0]["status"] == "PASS"
        if any(r is None or not math.isfinite(r["bw_avg_gbps"]) for r in mine):
            assert out[node][0]["status"] in ("INCOMPLETE", "FAIL")


@FAST
@given(st.dictionaries(st.integers(min_value=0, max_value=8),
                       st.fixed_dictionaries({}, optional={"state": st.sampled_from(["ACTIVE", "DOWN", "INIT", ""]),
                                                           "phys": st.sampled_from(["LinkUp", "Polling", "Disabled"]),
                                                           "layer": st.sampled_from(["InfiniBand", "Ethernet"])})),
       st.lists(st.sampled_from([f"mlx5_{i}" for i in range(9)]), max_size=4, unique=True))
def test_nccl_ib_hca_never_has_excluded_or_inactive_ports(overrides, exclude):
    node = facts(overrides=overrides)
    for expect in (None, {"exclude": exclude}, {"ports": 8, "exclude": exclude}):
        out = fp.nccl_env(node, fc.expected_ports(node, expect))
        listed = out["env"].get("NCCL_IB_HCA", "=").lstrip("=").split(",")
        for item in filter(None, listed):
            hca = item.split(":")[0]
            settings_of = overrides.get(int(hca.split("_")[1]), {})
            assert hca not in (expect or {}).get("exclude", [])
            assert settings_of.get("state", "ACTIVE") == "ACTIVE" and settings_of.get("phys", "LinkUp") == "LinkUp"
        assert ("NCCL_IB_HCA" in out["env"]) != ("NCCL_IB_DISABLE" in out["env"])


@FAST
@given(st.sampled_from(["rate_gbps", "width", "link_layer", "state", "phys_state", "counters", "port"]),
       st.integers(min_value=0, max_value=7), HOSTILE)
def test_hostile_port_values_never_pass_silently(field, index, value):
    node = facts()
    node["hcas"][index]["ports"][0][field] = value
    checks = judge(node)
    original = facts()["hcas"][index]["ports"][0][field]
    legit = (field == "port" and type(value) is int and 0 < value < 256) or (
        field == "rate_gbps" and type(value) in (int, float) and 400 <= value <= 10000)
    if not legit and (value != original or type(value) is not type(original)):
        worst = kiln_verdict.worst(c["status"] for c in checks.values())
        assert worst != "PASS", f"{field}={value!r} judged PASS"
    for item in checks.values():
        if item["status"] in ("PASS", "WARN") and item["value"] is not None:
            assert math.isfinite(item["value"])


@FAST
@given(HOSTILE, HOSTILE, HOSTILE)
def test_hostile_shapes_raise_only_the_modules_error(a, b, c):
    for call in (lambda: fc.passive_fabric_checks(a, fc.expected_ports(a), b, RULES, None),
                 lambda: fc.passive_fabric_checks(facts(), a, b, RULES),
                 lambda: fp.nccl_env(a, b),
                 lambda: fc.counter_deltas(a, b), lambda: fc.counter_snapshot(a),
                 lambda: fc.expected_ports(facts(), None, a),
                 lambda: fp.fabric_key_from_facts({"x": a, "y": b}, "nccl-tests"),
                 lambda: fp.judge_rdma_bw(fp.rdma_pair_plan({"p": ports_of(1), "q": ports_of(1)}), [a], RULES),
                 lambda: fp.rdma_pair_plan({"p": a, "q": b}, c), lambda: fc.expected_ports(facts(), a)):
        try:
            result = call()
        except fc.FabricError:
            continue
        if isinstance(result, list) and result and isinstance(result[0], dict) and "status" in result[0]:
            assert all(item["status"] != "PASS" for item in result) or isinstance(a, dict) and not a


@FAST
@given(st.lists(st.sampled_from(fc.ERROR_COUNTERS), min_size=1, max_size=3, unique=True),
       st.integers(min_value=0, max_value=7), HOSTILE)
def test_no_counter_check_passes_with_a_missing_or_bad_required_counter(names, index, value):
    node = facts()
    counters = node["hcas"][index]["ports"][0]["counters"]
    for name in names:
        counters[name] = value
    status = judge(node)["fabric.counters"]["status"]
    valid = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2 ** 64 - 1
    if not valid and any(RULES["counters"][n]["required"] for n in names) or not valid and value is not None:
        assert status != "PASS"
