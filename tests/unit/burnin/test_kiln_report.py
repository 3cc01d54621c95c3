"""Report writers: summary.json, summary.md, JUnit, Prometheus textfile, SVG (module_utils/kiln/burnin/report.py)."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kiln_paths import REPO
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.nccl import parse as kiln_nccl  # noqa: E402
from kiln.burnin import report as kr  # noqa: E402
from kiln import verdict as kv  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "nccl-tests"
SCHEMA_FILE = REPO / "data" / "burnin_summary.schema.json"


def judged(name: str, floor: float, check_id: str = "nccl.single_node.all_reduce", **kw) -> dict:
    parsed = kiln_nccl.parse((FIXTURES / name).read_text())
    return kv.judge_nccl([{"parsed": parsed, "exit_code": 0}], floor, check_id=check_id,
                         artifact=f"raw/{name}", **kw)


@pytest.fixture(name="summary")
def fixture_summary() -> dict:
    nodes = {
        "gpu-01": [kv.make_check("gpu.count", "PASS", metric="gpus", value=8, floor=8, unit="GPUs"),
                   judged("nccl-tests-2.13-h100-16rank-2node.txt", 300.0)],
        "gpu-02": [kv.make_check("gpu.count", "PASS", metric="gpus", value=8, floor=8),
                   judged("derived-wrong-2.13-h100-16rank.txt", 300.0)],
        'gpu "03"|x': [kv.make_check("dcgm.diag.r2", "SKIP", detail="node failed an earlier phase"),
                       kv.make_check("nvlink.status", "FAIL", detail="GPU3 link 7 <inactive>")],
    }
    fabric = [dict(judged("nccl-tests-2.18.3-16rank-2node-mpi-noise.txt", 45.0, "nccl.fabric.all_reduce"),
                   nodes=["gpu-01", "gpu-02"], ranks=16,
                   reference={"metric": "iperf3", "value": 94.1, "unit": "Gbit/s", "ratio": 0.51})]
    return kr.build_summary(
        "2026-07-30T10:12:00Z-default-1", "default", nodes, fabric,
        fingerprint={"driver": "570.133.20", "nccl": "2.30.3", "nccl_tests": "2.18.3"},
        engine="nccl-tests", results_dir="results/2026-07-30T10:12:00Z-default-1/")


def test_build_summary_verdicts(summary: dict) -> None:
    assert summary["schema"] == "kiln.burnin/v1"
    assert summary["nodes"]["gpu-01"]["status"] == "PASS"
    assert summary["nodes"]["gpu-02"]["status"] == "FAIL"
    assert summary["nodes"]['gpu "03"|x']["status"] == "FAIL"
    assert summary["fabric"][0]["status"] == "PASS"
    assert summary["overall"] == {"status": "FAIL", "exit": 2, "nodes": 3, "passed": 1, "warned": 0,
                                  "failed": 2, "incomplete": 0, "fabric_failed": 0}
    assert summary["fingerprint"]["cuda"] is None
    assert kr.validate_summary(summary) == []


def test_json_round_trip_and_schema(summary: dict) -> None:
    loaded = json.loads(kr.render_json(summary))
    assert loaded == summary
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(loaded, schema)
    loaded["overall"]["status"] = "OK"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(loaded, schema)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.update(schema="burnin/v0"), "schema must be"),
        (lambda s: s.pop("run_id"), "run_id"),
        (lambda s: s["overall"].update(exit=0), "does not match"),
        (lambda s: s["nodes"]["gpu-01"]["checks"][0].update(status="OK"), "bad status"),
        (lambda s: s["fabric"][0].update(value="fast"), "must be a number"),
    ],
)
def test_validate_summary_errors(summary: dict, mutate, message: str) -> None:
    mutate(summary)
    assert any(message in e for e in kr.validate_summary(summary))


def test_markdown(summary: dict) -> None:
    text = kr.render_markdown(summary)
    assert text.startswith("# Burn-in 2026-07-30T10:12:00Z-default-1")
    assert "| gpu-02 | FAIL | nccl.single_node.all_reduce FAIL |" in text
    assert 'gpu "03"\\|x' in text  # pipes escaped inside cells
    assert "iperf3 94.10 Gbit/s (ratio 0.51)" in text
    assert text.rstrip().splitlines()[-1].startswith("RESULT: FAIL (exit 2)")
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| Node")]
    assert all(line.count(" | ") >= 2 for line in rows)


def test_junit(summary: dict) -> None:
    root = ET.fromstring(kr.render_junit(summary))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("7", "2", "0", "1")
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    assert len(cases) == 7
    assert cases[("burnin.gpu-02", "nccl.single_node.all_reduce")].find("failure").get("type") == "FAIL"
    assert cases[('burnin.gpu "03"|x', "dcgm.diag.r2")].find("skipped") is not None
    assert cases[("burnin.fabric", "nccl.fabric.all_reduce")].find("failure") is None


def test_junit_incomplete_is_error_and_warn_passes() -> None:
    nodes = {"n1": [kv.make_check("a", "INCOMPLETE", detail="timed out"), kv.make_check("b", "WARN", detail="x")]}
    root = ET.fromstring(kr.render_junit(kr.build_summary("r", "quick", nodes)))
    assert root.get("errors") == "1" and root.get("failures") == "0"
    assert root.find(".//testcase[@name='a']/error").get("type") == "INCOMPLETE"
    assert root.find(".//testcase[@name='b']/system-out").text.startswith("WARN")


PROM_LINE = re.compile(
    r'^(# (HELP|TYPE) kiln_burnin_[a-z_]+ .+|kiln_burnin_[a-z_]+(\{([a-z_]+="([^"\\\n]|\\["\\n])*",?)*\})? '
    r'(-?[0-9.e+-]+|NaN|[+-]Inf))$'
)


def test_prometheus_exposition(summary: dict) -> None:
    text = kr.render_prometheus(summary, timestamp=1785406320.0)
    for line in text.splitlines():
        assert PROM_LINE.match(line), line
    assert 'kiln_burnin_check_status{node="gpu-02",check="nccl.single_node.all_reduce"} 2' in text
    assert 'kiln_burnin_node_status{node="gpu \\"03\\"|x"} 2' in text
    assert 'kiln_burnin_check_floor{node="fabric",check="nccl.fabric.all_reduce",unit="GB/s"} 45.0' in text
    assert "kiln_burnin_overall_status 2" in text
    names = re.findall(r"^# TYPE (\S+) gauge$", text, re.M)
    assert len(names) == len(set(names)) == 7


def test_prometheus_per_node_file(summary: dict) -> None:
    text = kr.render_prometheus(summary, node="gpu-01")
    assert 'node="gpu-02"' not in text and 'node="gpu-01"' in text
    assert 'node="fabric"' in text  # gpu-01 took part in the fabric check
    other = kr.render_prometheus(summary, node='gpu "03"|x')
    assert 'node="fabric"' not in other


def test_svg(summary: dict) -> None:
    check = summary["nodes"]["gpu-01"]["checks"][1]
    svg = kr.render_svg({"gpu-01": check["series"], "gpu-<2>": check["series"]}, floor=300.0)
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{ns}polyline")
    assert len(lines) == 2 and lines[1].get("data-node") == "gpu-<2>"
    assert len(lines[0].get("points").split()) == 31
    floor = root.find(f"{ns}line[@class='floor']")
    assert floor is not None and floor.get("stroke-dasharray")
    assert "floor 300" in svg and "8G" in svg


def test_svg_empty_series() -> None:
    root = ET.fromstring(kr.render_svg({}, floor=None))
    assert root.tag.endswith("svg")


def test_write_reports(summary: dict, tmp_path: Path) -> None:
    written = kr.write_reports(summary, str(tmp_path), timestamp=1785406320.0)
    expected = {"summary.json", "summary.md", "junit.xml", "metrics/kiln_burnin.prom", "metrics/gpu-01.prom",
                "metrics/gpu-02.prom", "metrics/gpu__03__x.prom", "plots/busbw-nccl.single_node.all_reduce.svg",
                "plots/busbw-nccl.fabric.all_reduce.svg"}
    files = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    assert files == expected
    assert set(written.values()) == {str(tmp_path / f) for f in expected}
    assert json.loads((tmp_path / "summary.json").read_text())["overall"]["exit"] == 2
    assert not list(tmp_path.rglob(".tmp-*"))


def test_write_reports_refuses_invalid(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid burn-in summary"):
        kr.write_reports({"schema": "x"}, str(tmp_path))
    assert not list(tmp_path.iterdir())


def test_the_schema_allows_every_pair_status_the_pair_judge_gives() -> None:
    """A MARGINAL pair (between half the band and the band) once failed a real run's schema check."""
    from kiln.burnin import isolate as kiln_isolate
    schema = json.loads(SCHEMA_FILE.read_text())
    pair_status = schema["properties"]["pairs"]["properties"]["results"]["items"]["properties"]["status"]
    statuses = {getattr(kiln_isolate, name) for name in dir(kiln_isolate) if name.startswith("PAIR_")
                and isinstance(getattr(kiln_isolate, name), str)}
    assert statuses == {"PASS", "MARGINAL", "SLOW", "FAIL", "INCOMPLETE"}
    assert set(pair_status["enum"]) == statuses
