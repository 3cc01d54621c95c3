"""tools/kiln-nccl-parse and tools/kiln-burnin-verdict, run as real processes without Ansible."""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "module_utils"))

import kiln_report as kr  # noqa: E402
import kiln_verdict as kv  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "nccl-tests"
PARSE = REPO / "tools" / "kiln-nccl-parse"
VERDICT = REPO / "tools" / "kiln-burnin-verdict"


def cli(tool: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run the tool as a separate process, from /, without PYTHONPATH: proves it needs no Ansible setup."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(tool), *args], capture_output=True, text=True, input=stdin,
                          env=env, cwd="/", timeout=30, check=False)


def _load(tool: Path):
    loader = importlib.machinery.SourceFileLoader(tool.name.replace("-", "_"), str(tool))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


PARSE_MOD = _load(PARSE)
VERDICT_MOD = _load(VERDICT)


def run_main(module, *args: str) -> subprocess.CompletedProcess:
    """Call the tool's main() in-process (fast); same return shape as cli()."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = module.main(list(args))
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


@pytest.mark.parametrize(
    ("fixture", "rc", "status"),
    [
        ("nccl-tests-2.13-h100-16rank-2node.txt", 0, "ok"),
        ("derived-json-v2-from-2.18.3-gh200.json", 0, "ok"),
        ("derived-truncated-2.18.3-gh200-int8.txt", 3, "truncated"),
        ("derived-truncated-json-v2.json", 3, "unparseable"),
    ],
)
def test_parse_auto_detects_format(fixture: str, rc: int, status: str) -> None:
    proc = run_main(PARSE_MOD, str(FIXTURES / fixture))
    assert proc.returncode == rc, proc.stderr
    document = json.loads(proc.stdout)
    assert document["parsed"]["status"] == status
    assert document["parsed"]["format"] == ("json" if fixture.endswith(".json") else "text")


@pytest.mark.parametrize(
    ("fixture", "args", "rc", "status"),
    [
        ("nccl-tests-2.13-h100-16rank-2node.txt", ["--floor", "300"], 0, "PASS"),
        ("nccl-tests-2.13-h100-16rank-2node.txt", ["--floor", "320"], 1, "WARN"),
        ("nccl-tests-2.13-h100-16rank-2node.txt", ["--floor", "340"], 2, "FAIL"),
        ("nccl-tests-2.13-h100-16rank-2node.txt", ["--floor", "300", "--exit-code", "7"], 2, "FAIL"),
        ("derived-wrong-2.13-h100-16rank.txt", ["--floor", "1"], 2, "FAIL"),
        ("nccl-tests-legacy-allgather-v100-12gpu-oob-failed.txt", ["--floor", "1"], 2, "FAIL"),
        ("derived-truncated-2.18.3-gh200-int8.txt", ["--floor", "1", "--min-size", "1M"], 3, "INCOMPLETE"),
        ("nccl-tests-2.18.3-gh200-8rank-2node-int8.txt", ["--floor", "50", "--min-size", "16M"], 0, "PASS"),
        ("derived-kiln-cpu-engine-3node-example.txt", ["--floor", "0.05", "--min-size", "16M"], 0, "PASS"),
    ],
)
def test_parse_verdict(fixture: str, args: list, rc: int, status: str) -> None:
    proc = run_main(PARSE_MOD, str(FIXTURES / fixture), "--verdict", *args)
    assert proc.returncode == rc, proc.stderr
    assert json.loads(proc.stdout)["verdict"]["status"] == status


def test_parse_standalone_process() -> None:
    proc = cli(PARSE, str(FIXTURES / "derived-wrong-2.13-h100-16rank.txt"), "--verdict", "--floor", "300")
    assert proc.returncode == 2, proc.stderr
    assert json.loads(proc.stdout)["verdict"]["status"] == "FAIL"


def test_parse_stdin_and_split() -> None:
    text = (FIXTURES / "nccl-tests-2.18.3-gh200-8rank-2node-int8.txt").read_text()
    proc = cli(PARSE, "-", "--split", "--verdict", "--floor", "50", "--min-size", "16M", stdin=text * 3)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert len(document["runs"]) == 3 and document["verdict"]["runs"] == 3


@pytest.mark.parametrize("args", [["/nonexistent/out.txt"], ["{fixture}", "--verdict"]])
def test_parse_usage_errors(args: list) -> None:
    fixture = str(FIXTURES / "nccl-tests-2.13-h100-16rank-2node.txt")
    proc = run_main(PARSE_MOD, *[a.replace("{fixture}", fixture) for a in args])
    assert proc.returncode == 4
    assert proc.stderr


def _summary(statuses: list) -> dict:
    nodes = {f"n{i}": [kv.make_check("c", s)] for i, s in enumerate(statuses)}
    return kr.build_summary("run-1", "quick", nodes)


@pytest.mark.parametrize(
    ("statuses", "rc", "word"),
    [(["PASS", "PASS"], 0, "PASS"), (["PASS", "WARN"], 1, "WARN"), (["FAIL", "INCOMPLETE"], 2, "FAIL"),
     (["PASS", "INCOMPLETE"], 3, "INCOMPLETE")],
)
def test_verdict_exit_codes(tmp_path: Path, statuses: list, rc: int, word: str) -> None:
    path = tmp_path / "summary.json"
    path.write_text(kr.render_json(_summary(statuses)))
    proc = run_main(VERDICT_MOD, str(path))
    assert proc.returncode == rc, proc.stderr
    assert proc.stdout.startswith(f"RESULT: {word} (exit {rc})")
    assert run_main(VERDICT_MOD, str(path), "--quiet").stdout == ""
    assert "| Node | Status |" in run_main(VERDICT_MOD, str(path), "--markdown").stdout


def test_verdict_standalone_process(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text(kr.render_json(_summary(["PASS", "FAIL"])))
    proc = cli(VERDICT, str(path))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.startswith("RESULT: FAIL (exit 2)")


@pytest.mark.parametrize(
    "content",
    ["not json", json.dumps({"schema": "burnin/v1"}), "MISSING", "TAMPERED", "EMPTY"],
)
def test_verdict_config_errors(tmp_path: Path, content: str) -> None:
    path = tmp_path / "summary.json"
    if content == "TAMPERED":
        summary = _summary(["FAIL"])
        summary["overall"].update(status="PASS", exit=0)
        content = json.dumps(summary)
    if content == "EMPTY":
        summary = _summary(["PASS"])
        summary["nodes"] = {}
        content = json.dumps(summary)
    if content != "MISSING":
        path.write_text(content)
    proc = run_main(VERDICT_MOD, str(path))
    assert proc.returncode == 4
    assert proc.stderr
