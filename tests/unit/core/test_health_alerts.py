"""The node-health alert rules (module_utils/kiln/health/alerts.py, catalogue.py), their filter
(filter_plugins/kiln_health_filters.py) and tools/kiln-health-alert-rules; promtool checks the rules and
fires each alert on synthetic series (tests/harness/promtool.sh fetches promtool into .cache/promtool/).

The expectations here are written from kiln-health's textfile contract (issue 35), not from the
generator: the metric names and labels, and the numbers read from data/burnin_health.yml.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_loader import load_source
from kiln_paths import REPO

from kiln import verdict as kiln_verdict
from kiln.health import alerts as kiln_alerts
from kiln.health import catalogue as kiln_catalogue
from kiln.health import rules as kiln_rules

DATA = REPO / "data" / "burnin_health.yml"
TOOL = REPO / "tools" / "kiln-health-alert-rules"
PROMTOOL = REPO / ".cache" / "promtool" / "promtool"
HYPOTHESIS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The contract's per-GPU series behind each memory threshold alert: metric, its selector labels, the rule.
THRESHOLD_SERIES: dict[str, tuple[str, dict[str, str], tuple[str, str]]] = {
    "KilnHealthEccSramUncorrectable": ("kiln_health_gpu_ecc_volatile_uncorrectable", {"kind": "sram"},
                                       ("ecc_uncorrectable", "volatile_sram_uncorrectable")),
    "KilnHealthEccDramUncorrectable": ("kiln_health_gpu_ecc_volatile_uncorrectable", {"kind": "dram"},
                                       ("ecc_uncorrectable", "volatile_dram_uncorrectable")),
    "KilnHealthEccUncorrectable": ("kiln_health_gpu_ecc_volatile_uncorrectable", {"kind": "total"},
                                   ("ecc_uncorrectable", "volatile_uncorrectable")),
    "KilnHealthRemappedRowsPending": ("kiln_health_gpu_remapped_rows_pending", {}, ("remapped_rows", "pending")),
    "KilnHealthRemappedRowsFailure": ("kiln_health_gpu_remapped_rows_failure", {}, ("remapped_rows", "failure")),
    "KilnHealthRetiredPagesDoubleBit": ("kiln_health_gpu_retired_pages", {"cause": "double_bit"},
                                        ("retired_pages", "double_bit")),
    "KilnHealthRetiredPagesSingleBit": ("kiln_health_gpu_retired_pages", {"cause": "single_bit"},
                                        ("retired_pages", "single_bit")),
}
STATUSES = ("PASS", "WARN", "FAIL", "UNKNOWN", "SKIP")


def raw_data() -> dict[str, Any]:
    return yaml.safe_load(DATA.read_text(encoding="utf-8"))


DATA_LOADED = raw_data()


def by_name(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rules = document["groups"][0]["rules"]
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names)), "an alert name twice"
    return {rule["alert"]: rule for rule in rules}


# --------------------------------------------------------------------------- generation from the real data

def test_catalogue_of_the_real_data_file() -> None:
    data = raw_data()
    checks = kiln_catalogue.catalogue(data)
    assert list(checks) == list(data["node_health"]["checks"])
    assert checks["xid.kernel_log"] == {"hooks": ["check", "prolog", "epilog"], "severity": "critical",
                                        "summary": "a critical XID in the kernel log since the last run"}
    assert set(checks) <= set(kiln_catalogue.KNOWN_CHECKS)
    assert all(set(spec) == {"hooks", "severity", "summary"} for spec in checks.values())


def test_one_alert_per_check_from_the_catalogue() -> None:
    data = raw_data()
    rules = by_name(kiln_alerts.alert_rules(data, 60, 3))
    xid = rules["KilnHealthXidKernelLog"]
    assert xid["expr"] == 'kiln_health_check_status{check="xid.kernel_log",status="FAIL"} == 1'
    assert xid["labels"] == {"severity": "critical", "check": "xid.kernel_log"}
    assert xid["for"] in ("0m", "1m")
    for check_id, spec in data["node_health"]["checks"].items():
        camel = "".join(p[:1].upper() + p[1:] for p in re.split(r"[._]", check_id))
        rule = rules[f"KilnHealth{camel}"]
        assert rule["expr"] == f'kiln_health_check_status{{check="{check_id}",status="FAIL"}} == 1'
        assert rule["labels"] == {"severity": spec["severity"], "check": check_id}
        assert rule["annotations"]["summary"] == spec["summary"]
        assert "{{ $labels.instance }}" in rule["annotations"]["description"]
        assert check_id in rule["annotations"]["description"]
        warn = rules.get(f"KilnHealth{camel}Warn")
        assert (warn is not None) == (spec["severity"] == "critical"), check_id
        if warn:
            assert warn["expr"] == f'kiln_health_check_status{{check="{check_id}",status="WARN"}} == 1'
            assert warn["labels"] == {"severity": "warning", "check": check_id}


def test_unknown_stale_and_thresholds_from_the_data() -> None:
    data = raw_data()
    rules = by_name(kiln_alerts.alert_rules(data, 90, 4, group="site-health"))
    assert kiln_alerts.alert_rules(data, 90, 4, group="site-health")["groups"][0]["name"] == "site-health"
    assert rules["KilnHealthCheckUnknown"]["expr"] == "kiln_health_unknown_runs >= 4"
    assert rules["KilnHealthStale"]["expr"] == 'time() - kiln_health_last_run_timestamp_seconds{hook="check"} > 270'
    memory = data["memory"]
    for alert, (metric, labels, (section, name)) in THRESHOLD_SERIES.items():
        rule = memory[section][name]
        expr = rules[alert]["expr"]
        selector = metric + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
        assert expr.startswith(f"{selector} > {rule['max']}" if "max" in rule else f"{selector} == 1"), (alert, expr)
        assert rules[alert]["labels"]["severity"] == "critical"  # FAIL rules of critical checks
    assert "unless ignoring(kind)" in rules["KilnHealthEccUncorrectable"]["expr"]
    # every generated alert is a check alert, one of the two above or a threshold of the contract
    checks = {n for n, r in rules.items() if r["expr"].startswith("kiln_health_check_status")}
    assert set(rules) == checks | {"KilnHealthCheckUnknown", "KilnHealthStale"} | set(THRESHOLD_SERIES)


def test_every_memory_rule_has_a_threshold_alert_or_is_named_as_not_exported() -> None:
    table = {(section, name) for _, section, name, *_ in kiln_alerts.THRESHOLDS}
    assert table | set(kiln_alerts.NOT_EXPORTED) == {(s, n) for s, n, _ in kiln_rules._MEMORY_RULES}
    assert not table & set(kiln_alerts.NOT_EXPORTED)


def test_a_threshold_change_in_the_data_changes_the_alert() -> None:
    data = raw_data()
    data["memory"]["retired_pages"]["double_bit"]["max"] = 5
    data["memory"]["ecc_uncorrectable"]["volatile_sram_uncorrectable"]["max"] = 2
    data["memory"]["remapped_rows"]["pending"]["status"] = "WARN"
    data["node_health"]["checks"]["gpu.count"]["summary"] = "GPUs gone"
    data["node_health"]["checks"]["gpu.count"]["severity"] = "warning"
    rules = by_name(kiln_alerts.alert_rules(data, 60, 3))
    assert rules["KilnHealthRetiredPagesDoubleBit"]["expr"] == 'kiln_health_gpu_retired_pages{cause="double_bit"} > 5'
    assert "max 5" in rules["KilnHealthRetiredPagesDoubleBit"]["annotations"]["description"]
    assert rules["KilnHealthEccSramUncorrectable"]["expr"].endswith(" > 2")
    assert rules["KilnHealthRemappedRowsPending"]["labels"]["severity"] == "warning"
    assert rules["KilnHealthGpuCount"]["labels"]["severity"] == "warning"
    assert rules["KilnHealthGpuCount"]["annotations"]["summary"] == "GPUs gone"
    assert "KilnHealthGpuCountWarn" not in rules


def test_a_check_left_out_of_the_catalogue_has_no_alerts() -> None:
    data = raw_data()
    del data["node_health"]["checks"]["memory.retired_pages"]
    del data["node_health"]["checks"]["fabric.rate"]
    rules = by_name(kiln_alerts.alert_rules(data, 60, 3))
    assert not {"KilnHealthMemoryRetiredPages", "KilnHealthFabricRate", "KilnHealthRetiredPagesDoubleBit",
                "KilnHealthRetiredPagesSingleBit"} & set(rules)
    assert "KilnHealthEccSramUncorrectable" in rules


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("bad", [0, -1, True, False, 60.0, 1.5, "60", None, [60], {"s": 60}])
def test_interval_and_unknown_runs_must_be_positive_integers(bad: Any) -> None:
    data = raw_data()
    with pytest.raises(kiln_verdict.KilnConfigError, match="node_health_interval"):
        kiln_alerts.alert_rules(data, bad, 3)
    with pytest.raises(kiln_verdict.KilnConfigError, match="node_health_unknown_drain_after"):
        kiln_alerts.alert_rules(data, 60, bad)


@pytest.mark.parametrize(("edit", "match"), [
    (lambda nh: nh["checks"].update({"gpu.cout": nh["checks"]["gpu.count"]}), r"'gpu\.cout' is not a check"),
    (lambda nh: nh["checks"]["gpu.count"].update(severity="page"), r"node_health\.checks\.gpu\.count\.severity"),
    (lambda nh: nh["checks"]["gpu.count"].update(severity="CRITICAL"), r"gpu\.count\.severity"),
    (lambda nh: nh["checks"]["pcie.link"].update(hooks=["check", "job"]), r"node_health\.checks\.pcie\.link\.hooks"),
    (lambda nh: nh["checks"]["pcie.link"].update(hooks=[]), r"pcie\.link\.hooks"),
    (lambda nh: nh["checks"]["pcie.link"].update(hooks="check"), r"pcie\.link\.hooks"),
    (lambda nh: nh["checks"]["pcie.link"].update(hooks=["check", "check"]), r"pcie\.link\.hooks"),
    (lambda nh: nh["checks"]["dcgm.health"].update(summary=""), r"dcgm\.health\.summary"),
    (lambda nh: nh["checks"]["dcgm.health"].update(summary="two\nlines"), r"dcgm\.health\.summary"),
    (lambda nh: nh["checks"]["dcgm.health"].pop("summary"), r"dcgm\.health\.summary"),
    (lambda nh: nh["checks"]["dcgm.health"].update(severty="warning"), r"dcgm\.health: unknown key 'severty'"),
    (lambda nh: nh["checks"].update({"dcgm.health": None}), r"node_health\.checks\.dcgm\.health"),
    (lambda nh: nh.update(checks={}), r"node_health\.checks"),
    (lambda nh: nh.update(checks=["gpu.count"]), r"node_health\.checks"),
    (lambda nh: nh.pop("confidence"), r"node_health\.confidence"),
    (lambda nh: nh.update(confidence="GUESS"), r"node_health\.confidence"),
    (lambda nh: nh.update(source=" "), r"node_health\.source"),
    (lambda nh: nh["checks"].update({7: {}}), r"node_health\.checks: 7 is not a check"),
])
def test_a_bad_catalogue_is_refused_naming_the_key(edit: Any, match: str) -> None:
    data = raw_data()
    edit(data["node_health"])
    with pytest.raises(kiln_verdict.KilnConfigError, match=match):
        kiln_catalogue.catalogue(data)
    with pytest.raises(kiln_verdict.KilnConfigError, match=match):
        kiln_alerts.alert_rules(data, 60, 3)


def test_a_bad_memory_rule_or_group_is_refused() -> None:
    data = raw_data()
    data["memory"]["retired_pages"]["double_bit"]["max"] = "ten"
    with pytest.raises(kiln_verdict.KilnConfigError, match=r"memory\.retired_pages\.double_bit"):
        kiln_alerts.alert_rules(data, 60, 3)
    for group in ("", " ", "a\nb", None, 3):
        with pytest.raises(kiln_verdict.KilnConfigError, match="group"):
            kiln_alerts.alert_rules(raw_data(), 60, 3, group=group)
    for health in (None, [], "node_health", {"node_health": None}):
        with pytest.raises(kiln_verdict.KilnConfigError, match="node_health"):
            kiln_alerts.alert_rules(health, 60, 3)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=12)
    | st.sampled_from(["check", "prolog", "epilog", "critical", "warning", "SITE", "gpu.count", "FAIL", "WARN"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["hooks", "severity", "summary", "checks", "confidence", "source", "max", "status"])
        | st.text(max_size=8), inner, max_size=5),
    max_leaves=20)
SPECS = st.fixed_dictionaries({}, optional={
    "hooks": st.lists(st.sampled_from(["check", "prolog", "epilog", "job", ""]), max_size=4) | JSONISH,
    "severity": st.sampled_from(["critical", "warning", "info", ""]) | JSONISH,
    "summary": st.text(max_size=20) | JSONISH,
    "note": JSONISH,
})


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@HYPOTHESIS
@given(interval=JSONISH | st.integers(-5, 10**12), unknown=JSONISH | st.integers(-5, 100))
def test_any_interval_or_run_count_is_accepted_or_refused_by_name(interval: Any, unknown: Any) -> None:
    if not _positive(interval):
        with pytest.raises(kiln_verdict.KilnConfigError, match="^node_health_interval must be a positive integer"):
            kiln_alerts.alert_rules(DATA_LOADED, interval, unknown)
    elif not _positive(unknown):
        with pytest.raises(kiln_verdict.KilnConfigError, match="^node_health_unknown_drain_after must be"):
            kiln_alerts.alert_rules(DATA_LOADED, interval, unknown)
    else:
        rules = by_name(kiln_alerts.alert_rules(DATA_LOADED, interval, unknown))
        assert rules["KilnHealthStale"]["expr"].endswith(f"> {3 * interval}")
        assert rules["KilnHealthCheckUnknown"]["expr"] == f"kiln_health_unknown_runs >= {unknown}"


@HYPOTHESIS
@given(checks=st.dictionaries(st.sampled_from(kiln_catalogue.KNOWN_CHECKS) | st.text(max_size=10) | st.integers(),
                              SPECS | JSONISH, max_size=5),
       section=st.fixed_dictionaries({}, optional={"confidence": JSONISH | st.just("SITE"),
                                                   "source": JSONISH | st.just("site")}))
def test_a_hostile_catalogue_is_a_config_error_never_a_traceback(checks: dict[Any, Any], section: dict[str, Any]) -> None:
    data = copy.deepcopy(DATA_LOADED)
    data["node_health"] = dict(section, checks=checks)
    try:
        document = kiln_alerts.alert_rules(data, 60, 3)
    except kiln_verdict.KilnConfigError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 1000
        return
    assert set(checks) <= set(kiln_catalogue.KNOWN_CHECKS)
    assert all(spec["severity"] in ("critical", "warning") for spec in checks.values())
    assert by_name(document)


@HYPOTHESIS
@given(health=JSONISH, memory=JSONISH)
def test_a_hostile_rules_document_is_a_config_error_never_a_traceback(health: Any, memory: Any) -> None:
    for value in (health, dict(copy.deepcopy(DATA_LOADED), memory=memory)):
        with contextlib.suppress(kiln_verdict.KilnConfigError):
            kiln_alerts.alert_rules(value, 60, 3)


# --------------------------------------------------------------------------- the filter and the tool

def test_the_filter_returns_the_rules_and_raises_filter_errors() -> None:
    import kiln_health_filters

    flt = kiln_health_filters.FilterModule().filters()["kiln_health_alert_rules"]
    assert flt(raw_data(), 60, 3) == kiln_alerts.alert_rules(raw_data(), 60, 3)
    assert flt(raw_data(), 60, 3, "g")["groups"][0]["name"] == "g"
    with pytest.raises(AnsibleFilterError, match=r"^kiln_health_alert_rules: node_health_interval must be"):
        flt(raw_data(), "60", 3)
    with pytest.raises(AnsibleFilterError, match=r"kiln_health_alert_rules: node_health\.checks"):
        flt({"node_health": {"confidence": "SITE", "source": "x", "checks": {"nope": {}}}}, 60, 3)


def _tool_main(*args: str) -> tuple[int, str, str]:
    module = load_source("kiln_health_alert_rules_tool", TOOL)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = module.main(list(args))
    return rc, out.getvalue(), err.getvalue()


def test_the_tool_prints_the_generated_rules(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, str(TOOL), "--rules", str(DATA), "--interval", "60", "--unknown-runs", "3"],
                         capture_output=True, text=True, env=env, cwd="/", timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("# Generated by tools/kiln-health-alert-rules")
    assert yaml.safe_load(run.stdout) == kiln_alerts.alert_rules(kiln_rules.load_health(str(DATA)), 60, 3)
    out = tmp_path / "rules.yml"
    assert _tool_main("--interval", "120", "--unknown-runs", "2", "-o", str(out))[0] == 0
    assert by_name(yaml.safe_load(out.read_text()))["KilnHealthStale"]["expr"].endswith("> 360")


@pytest.mark.parametrize(("args", "match"), [
    (["--interval", "0", "--unknown-runs", "3"], "node_health_interval"),
    (["--interval", "60", "--unknown-runs", "-1"], "node_health_unknown_drain_after"),
    (["--interval", "x", "--unknown-runs", "3"], "--interval"),
    (["--unknown-runs", "3"], "--interval"),
    (["--interval", "60", "--unknown-runs", "3", "--rules", "/nonexistent/health.yml"], "cannot read"),
    (["--interval", "60", "--unknown-runs", "3", "-o", "/nonexistent/dir/rules.yml"], "cannot write"),
])
def test_the_tool_refuses_bad_input_with_exit_4(args: list[str], match: str) -> None:
    rc, out, err = _tool_main(*args)
    assert rc == 4 and out == "" and match in err and "Traceback" not in err


# --------------------------------------------------------------------------- promtool

def promtool() -> Path:
    """.cache/promtool/promtool; the test fails (never skips) without it."""
    if not (PROMTOOL.is_file() and os.access(PROMTOOL, os.X_OK)):
        pytest.fail(f"promtool is missing ({PROMTOOL.relative_to(REPO)}): run tests/harness/promtool.sh "
                    "(make unit and make test do)")
    return PROMTOOL


def _series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    return {"series": metric + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "values": values}


def _expected(rule: dict[str, Any], labels: dict[str, str], value: str) -> dict[str, Any]:
    """The alert promtool must see: the series' labels plus the rule's, the annotations rendered."""
    def render(text: str) -> str:
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text).replace("{{ $value }}", value)
        assert "{{" not in text, text
        return text

    return {"exp_labels": {**labels, **rule["labels"]},
            "exp_annotations": {k: render(v) for k, v in rule["annotations"].items()}}


def _one_hot(check_id: str, status: str, instance: str, steps: int) -> list[dict[str, str]]:
    return [_series("kiln_health_check_status", {"instance": instance, "job": "node", "hook": "check",
                                                 "check": check_id, "status": s}, f"{int(s == status)}x{steps}")
            for s in STATUSES]


def promtool_tests(data: dict[str, Any], interval: int, unknown_runs: int) -> list[dict[str, Any]]:
    """promtool unit-test groups: per alert, a series that fires it and a healthy one that does not;
    then a fleet of healthy series that fires nothing."""
    rules = by_name(kiln_alerts.alert_rules(data, interval, unknown_runs))
    checks = data["node_health"]["checks"]
    end = 4 * interval // 60 + 2  # samples, one a minute, past the stale check's evaluation
    at = f"{4 * interval}s"
    groups: list[dict[str, Any]] = []
    covered: set[str] = set()
    healthy: list[dict[str, str]] = []
    for check_id in checks:
        name = kiln_alerts.alert_name(check_id)
        fail = {"instance": "fail", "job": "node", "hook": "check", "check": check_id, "status": "FAIL"}
        warn = dict(fail, instance="warn", status="WARN")
        tests = [{"eval_time": "2m", "alertname": name, "exp_alerts": [_expected(rules[name], fail, "1")]}]
        covered.add(name)
        if f"{name}Warn" in rules:
            covered.add(f"{name}Warn")
            tests.append({"eval_time": "2m", "alertname": f"{name}Warn",
                          "exp_alerts": [_expected(rules[f"{name}Warn"], warn, "1")]})
        groups.append({"interval": "1m", "input_series": _one_hot(check_id, "FAIL", "fail", 5)
                       + _one_hot(check_id, "WARN", "warn", 5) + _one_hot(check_id, "PASS", "ok", 5)
                       + _one_hot(check_id, "SKIP", "skip", 5) + _one_hot(check_id, "UNKNOWN", "unknown", 5),
                       "alert_rule_test": tests})
        healthy += _one_hot(check_id, "PASS", "healthy", end)
    # UNKNOWN for unknown_runs runs fires; one run fewer does not
    base = {"job": "node", "check": "dcgm.health"}
    groups.append({"interval": "1m", "input_series": [
        _series("kiln_health_unknown_runs", dict(base, instance="blind"), f"{unknown_runs}x5"),
        _series("kiln_health_unknown_runs", dict(base, instance="once"), f"{unknown_runs - 1}x5")],
        "alert_rule_test": [{"eval_time": "2m", "alertname": "KilnHealthCheckUnknown", "exp_alerts": [
            _expected(rules["KilnHealthCheckUnknown"], dict(base, instance="blind"), str(unknown_runs))]}]})
    healthy.append(_series("kiln_health_unknown_runs", dict(base, instance="healthy"), f"0x{end}"))
    # the last check run at t=0 is stale at 4 intervals; one at t=interval is exactly 3 intervals old (not
    # stale); one every minute is fresh; a stale prolog file is not the periodic check
    stamp = {"job": "node", "hook": "check"}
    groups.append({"interval": "1m", "input_series": [
        _series("kiln_health_last_run_timestamp_seconds", dict(stamp, instance="stopped"), f"0x{end}"),
        _series("kiln_health_last_run_timestamp_seconds", dict(stamp, instance="late"), f"{interval}x{end}"),
        _series("kiln_health_last_run_timestamp_seconds", dict(stamp, instance="fresh"), f"0+60x{end}"),
        _series("kiln_health_last_run_timestamp_seconds", dict(stamp, instance="idle", hook="prolog"), f"0x{end}")],
        "alert_rule_test": [{"eval_time": at, "alertname": "KilnHealthStale", "exp_alerts": [
            _expected(rules["KilnHealthStale"], dict(stamp, instance="stopped"), "")]}]})
    covered |= {"KilnHealthCheckUnknown", "KilnHealthStale"}
    healthy.append(_series("kiln_health_last_run_timestamp_seconds", dict(stamp, instance="healthy"), f"0+60x{end}"))
    # memory thresholds: max + 1 fires, max does not (flags: 1 fires, 0 does not)
    for alert, (metric, selector, (section, rule_name)) in THRESHOLD_SERIES.items():
        if alert not in rules:
            continue
        rule = data["memory"][section][rule_name]
        bad, good = (rule["max"] + 1, rule["max"]) if "max" in rule else (1, 0)
        gpu = {"job": "node", "gpu": "3", **selector}
        series = [_series(metric, dict(gpu, instance="bad"), f"{bad}x5"),
                  _series(metric, dict(gpu, instance="ok"), f"{good}x5")]
        if alert == "KilnHealthEccUncorrectable":  # the total judges only a GPU without the SRAM/DRAM split
            series += [_series(metric, dict(gpu, instance="split"), f"{bad}x5"),
                       _series(metric, dict(gpu, instance="split", kind="sram"), "0x5"),
                       _series(metric, dict(gpu, instance="split", kind="dram"), "0x5")]
        groups.append({"interval": "1m", "input_series": series, "alert_rule_test": [
            {"eval_time": "2m", "alertname": alert,
             "exp_alerts": [_expected(rules[alert], dict(gpu, instance="bad"), str(bad))]}]})
        covered.add(alert)
        healthy.append(_series(metric, dict(gpu, instance="healthy"), f"{good}x{end}"))
    assert covered == set(rules), f"alerts without a firing test: {sorted(set(rules) - covered)}"
    groups.append({"interval": "1m", "input_series": healthy, "alert_rule_test": [
        {"eval_time": when, "alertname": name, "exp_alerts": []} for name in sorted(rules) for when in ("2m", at)]})
    return groups


@pytest.mark.parametrize(("interval", "unknown_runs"), [(60, 3), (300, 1)])
def test_promtool_checks_the_rules_and_fires_each_alert(tmp_path: Path, interval: int, unknown_runs: int) -> None:
    tool = promtool()
    data = raw_data()
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(kiln_alerts.alert_rules(data, interval, unknown_runs),
                                                       sort_keys=False, width=1000))
    check = subprocess.run([str(tool), "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(by_name(kiln_alerts.alert_rules(data, interval, unknown_runs)))} rules found" in check.stdout
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m",
             "tests": promtool_tests(data, interval, unknown_runs)}
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests, sort_keys=False, width=1000))
    run = subprocess.run([str(tool), "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    assert "SUCCESS" in run.stdout + run.stderr


def test_promtool_catches_an_alert_that_does_not_fire(tmp_path: Path) -> None:
    """The harness is not vacuous: a rule whose threshold moved up no longer fires on max + 1."""
    tool = promtool()
    data = raw_data()
    tests = promtool_tests(data, 60, 3)
    moved = raw_data()
    moved["memory"]["retired_pages"]["double_bit"]["max"] += 1
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(kiln_alerts.alert_rules(moved, 60, 3), sort_keys=False))
    (tmp_path / "tests.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                                                        "tests": tests}, sort_keys=False, width=1000))
    run = subprocess.run([str(tool), "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode != 0
    assert "KilnHealthRetiredPagesDoubleBit" in run.stdout + run.stderr
