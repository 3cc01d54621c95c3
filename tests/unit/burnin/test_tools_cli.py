"""tools/kiln-nccl-parse and tools/kiln-burnin-verdict, run as real processes without Ansible."""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_paths import REPO
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.burnin import report as kr  # noqa: E402
from kiln import verdict as kv  # noqa: E402

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
    return kr.build_summary("run-1", "quick", nodes, scope={"expected": sorted(nodes)})  # as kiln_burnin.report writes it


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


# --------------------------------------------------------------------------- hostile inputs


BURNIN = REPO / "tools" / "kiln-burnin"
GOOD_RUN = FIXTURES / "nccl-tests-2.18.3-gh200-8rank-2node-int8.txt"
CODES = {0, 1, 2, 3, 4}


def assert_clean(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode in CODES, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout


def hostile_file(tmp_path: Path, name: str, content) -> Path:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


@pytest.mark.parametrize(
    ("content", "args", "rc"),
    [
        (GOOD_RUN.read_text().replace("76.54", "inf", 1), [], 3),
        (GOOD_RUN.read_text().replace("76.54", "1e999", 1), ["--verdict", "--floor", "1", "--min-size", "1M"], 3),
        (GOOD_RUN.read_text().replace("101.70", "-101.70", 1), ["--verdict", "--floor", "1", "--min-size", "1M"], 3),
        (GOOD_RUN.read_text() * 2, ["--verdict", "--floor", "1", "--min-size", "1M"], 3),
        (GOOD_RUN.read_text() * 2, ["--split", "--verdict", "--floor", "1", "--min-size", "1M"], 0),
        (GOOD_RUN.read_text().replace("       0    ", "     N/A    "),
         ["--verdict", "--floor", "1", "--min-size", "1M"], 3),
        ("\n".join(GOOD_RUN.read_text().splitlines()[17:]), ["--verdict", "--floor", "1", "--min-size", "1M"], 3),
        (b"\xff\xfe\x00garbage\x00" * 100, [], 3),
        ("[" * 200000, ["--format", "json"], 3),
        ('{"results": [{"size": 8, "in_place": {"time": 1, "alg_bw": NaN, "bus_bw": Infinity, "nwrong": 0}}]}',
         ["--verdict", "--floor", "1", "--min-size", "1"], 3),
        ('{"results": {"size": []}, "config": [], "out_of_bounds": "x"}', [], 3),
        ("9" * 100000, ["--verdict", "--floor", "1"], 3),
        (GOOD_RUN.read_text(), ["--verdict", "--floor", "nan"], 4),
        (GOOD_RUN.read_text(), ["--verdict", "--floor", "inf"], 4),
        (GOOD_RUN.read_text(), ["--verdict", "--floor", "-3"], 4),
        (GOOD_RUN.read_text(), ["--verdict", "--floor", "1", "--warn-band", "nan"], 4),
        (GOOD_RUN.read_text(), ["--verdict", "--floor", "1", "--top-n", "9" * 5000], 4),
        (GOOD_RUN.read_text(), ["--verdict", "--floor", "1", "--top-n", "0"], 4),
        (GOOD_RUN.read_text(), ["--verdict", "--floor", "1", "--min-size", "9" * 5000], 4),
        (GOOD_RUN.read_text(), ["--verdict", "--floor", "1", "--min-size", "lots"], 4),
        (GOOD_RUN.read_text(), ["--no-such-option"], 4),
        (GOOD_RUN.read_text(), ["--format", "xml"], 4),
    ],
)
def test_parse_hostile_inputs_exit_codes(tmp_path: Path, content, args: list, rc: int) -> None:
    path = hostile_file(tmp_path, "out.txt", content)
    proc = cli(PARSE, str(path), *args)
    assert_clean(proc)
    assert proc.returncode == rc, proc.stderr
    if rc != 4:
        json.loads(proc.stdout)  # strict JSON: no NaN/Infinity


def test_parse_usage_error_is_4_not_2() -> None:
    proc = cli(PARSE)
    assert proc.returncode == 4 and "usage" in proc.stderr
    assert cli(PARSE, "--help").returncode == 0


def test_parse_refuses_huge_and_odd_files(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    with open(big, "wb") as handle:
        handle.truncate(65 * 1024 * 1024)
    proc = cli(PARSE, str(big))
    assert_clean(proc)
    assert proc.returncode == 4 and "64 MiB" in proc.stderr
    for odd in (str(tmp_path), "/nonexistent/x", "/dev/null"):
        proc = cli(PARSE, odd)
        assert_clean(proc)
        assert proc.returncode in (3, 4)


def test_parse_internal_error_is_one_line_and_4(monkeypatch) -> None:
    def boom(*_args, **_kwargs):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(PARSE_MOD.kiln_nccl, "parse", boom)
    proc = run_main(PARSE_MOD, str(GOOD_RUN))
    assert proc.returncode == 4
    assert proc.stderr.strip() == "kiln-nccl-parse: internal error: RuntimeError: simulated bug"


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=3000), st.sampled_from([[], ["--verdict", "--floor", "1", "--min-size", "1"],
                                                  ["--split", "--verdict", "--floor", "1", "--min-size", "1"],
                                                  ["--format", "json"]]))
def test_parse_random_input_exit_codes(tmp_path_factory, data: bytes, args: list) -> None:
    path = tmp_path_factory.mktemp("p") / "out"
    path.write_bytes(data)
    proc = run_main(PARSE_MOD, str(path), *args)
    assert proc.returncode in (3, 4) or data.strip() == b"" and proc.returncode == 3, proc.stderr
    assert "internal error" not in proc.stderr


# ---- kiln-burnin-verdict


def _good_summary(statuses=("PASS", "PASS"), **extra) -> dict:
    nodes = {f"n{i}": [kv.make_check("c", s, value=1.0)] for i, s in enumerate(statuses)}
    extra.setdefault("scope", {"expected": sorted(nodes)})  # as kiln_burnin.report writes it
    return json.loads(kr.render_json(kr.build_summary("run-1", "quick", nodes, **extra)))


def _verdict(tmp_path: Path, summary, *args: str, raw: bytes = None) -> subprocess.CompletedProcess:
    path = tmp_path / "summary.json"
    path.write_bytes(raw if raw is not None else json.dumps(summary).encode("utf-8"))
    return run_main(VERDICT_MOD, str(path), *args)


def _tamper(edit):
    summary = _good_summary()
    edit(summary)
    return summary


@pytest.mark.parametrize(
    ("summary", "rc", "stderr"),
    [
        (_tamper(lambda s: s.update(nodes=[1, 2])), 4, "nodes"),
        (_tamper(lambda s: s["nodes"]["n0"].update(checks="PASS")), 4, "checks"),
        (_tamper(lambda s: s["nodes"]["n0"]["checks"].append("x")), 4, "check"),
        (_tamper(lambda s: s["nodes"]["n0"]["checks"][0].update(status="GREAT")), 4, "GREAT"),
        (_tamper(lambda s: s["nodes"]["n0"]["checks"][0].update(status=["PASS"])), 4, "status"),
        (_tamper(lambda s: s["overall"].update(status=["PASS"])), 4, "summary"),
        (_tamper(lambda s: s["overall"].update(status={"a": 1})), 4, "summary"),
        (_tamper(lambda s: s.update(fabric={"id": "x"})), 4, "fabric"),
        (_tamper(lambda s: s.update(fabric=[{"id": "f", "status": 3}])), 4, "fabric"),
        (_tamper(lambda s: s.update(scope=["n0"])), 4, "scope"),
        (_tamper(lambda s: s.update(scope={"expected": "n0"})), 4, "scope.expected"),
        (_tamper(lambda s: s.update(scope={"expected": [1, 2]})), 4, "scope.expected"),
        (_tamper(lambda s: s.update(run_id=5)), 4, "run_id"),
        ([], 4, "not an object"),
        ("PASS", 4, "not an object"),
        (None, 4, "not an object"),
        # contradictions: at least INCOMPLETE
        (_tamper(lambda s: s["nodes"]["n0"].update(status="FAIL", exit=2)), 3, "disagrees with its checks"),
        (_tamper(lambda s: s["nodes"]["n0"].update(exit=0, status="WARN")), 3, "contradictory"),
        (_tamper(lambda s: s["nodes"]["n0"].update(exit=1)), 3, "stored exit"),
        (_tamper(lambda s: s["nodes"]["n0"].update(checks=[])), 3, "disagrees"),
        (_tamper(lambda s: s.update(scope={"expected": ["n0", "n1", "n2", "n3"]})), 3, "n2, n3"),
        (_tamper(lambda s: s["nodes"]["n0"]["checks"][0].update(value=float("nan"))), 3, "not a finite number"),
        (_tamper(lambda s: s["nodes"]["n0"]["checks"][0].update(value=float("inf"))), 3, "not a finite number"),
        (_tamper(lambda s: s.update(fabric=[{"id": "f", "status": "PASS", "value": float("nan")}])), 3,
         "not a finite number"),
        (_tamper(lambda s: s.update(fabric=[{"id": "f", "status": "PASS", "value": 10 ** 400}])), 3,
         "not a finite number"),
        (_tamper(lambda s: s.update(scope={"expected": ["n0", "n1"]})), 0, ""),
        (_tamper(lambda s: s.update(fabric=[{"id": "f", "status": "FAIL", "value": float("nan")}],
                                    overall=dict(s["overall"], status="FAIL", exit=2))), 2, ""),
    ],
)
def test_verdict_hostile_summaries(tmp_path: Path, summary, rc: int, stderr: str) -> None:
    proc = _verdict(tmp_path, summary)
    assert proc.returncode == rc, proc.stderr
    assert stderr in proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    if rc != 4:
        assert proc.stdout.startswith(f"RESULT: {['PASS', 'WARN', 'FAIL', 'INCOMPLETE'][rc]} (exit {rc})")


def test_verdict_node_status_tampered_with_failing_checks_stays_fail(tmp_path: Path) -> None:
    summary = _good_summary(("FAIL", "PASS"))
    summary["nodes"]["n0"].update(status="PASS", exit=0)
    summary["overall"].update(status="PASS", exit=0, failed=0, passed=2)
    proc = _verdict(tmp_path, summary)
    assert proc.returncode == 2 and "disagrees with its checks" in proc.stderr
    assert proc.stdout.startswith("RESULT: FAIL (exit 2)")


def test_verdict_missing_expected_nodes_count_as_incomplete(tmp_path: Path) -> None:
    summary = _good_summary(scope={"expected": ["n0", "n1", "gone"]})
    proc = _verdict(tmp_path, summary)
    assert proc.returncode == 3 and "gone" in proc.stderr
    assert proc.stdout.strip().endswith("passed=2 warned=0 failed=0 incomplete=1")


def test_verdict_markdown_shows_the_recomputed_verdict(tmp_path: Path) -> None:
    summary = _good_summary(scope={"expected": ["n0", "n1", "gone"]})
    proc = _verdict(tmp_path, summary, "--markdown")
    assert proc.returncode == 3 and "RESULT: INCOMPLETE (exit 3)" in proc.stdout


@pytest.mark.parametrize(
    "raw",
    [b"\xff\xfe\x00", b"[" * 100000 + b"]" * 100000, b'{"schema": ' + b"9" * 5000 + b"}", b"", b"NaN",
     b'{"a": Infinity}'],
)
def test_verdict_unreadable_summaries(tmp_path: Path, raw: bytes) -> None:
    proc = _verdict(tmp_path, None, raw=raw)
    assert proc.returncode == 4 and proc.stderr and "internal error" not in proc.stderr


def test_verdict_refuses_huge_files_and_usage_errors(tmp_path: Path) -> None:
    big = tmp_path / "summary.json"
    with open(big, "wb") as handle:
        handle.truncate(65 * 1024 * 1024)
    proc = cli(VERDICT, str(big))
    assert_clean(proc)
    assert proc.returncode == 4 and "64 MiB" in proc.stderr
    for args in ([], ["a", "b"], ["--bogus", "x"]):
        proc = cli(VERDICT, *args)
        assert_clean(proc)
        assert proc.returncode == 4, args


def test_verdict_internal_error_is_one_line_and_4(tmp_path: Path, monkeypatch) -> None:
    def boom(*_args, **_kwargs):
        raise KeyError("simulated")

    monkeypatch.setattr(VERDICT_MOD.kiln_verdict, "aggregate_node", boom)
    proc = _verdict(tmp_path, _good_summary())
    assert proc.returncode == 4
    assert proc.stderr.strip() == "kiln-burnin-verdict: internal error: KeyError: 'simulated'"


HOSTILE_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=6)
    | st.sampled_from(["PASS", "WARN", "FAIL", "INCOMPLETE", "SKIP"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["status", "checks", "value", "id", "exit", "expected", "nodes", "x"]), inner, max_size=3),
    max_leaves=10)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, prefix + (index,))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_verdict_mutated_summaries_exit_codes(tmp_path_factory, data) -> None:
    summary = _good_summary(tuple(data.draw(st.lists(st.sampled_from(["PASS", "WARN", "FAIL", "INCOMPLETE", "SKIP"]),
                                                     min_size=1, max_size=3))),
                            scope={"expected": ["n0"]})
    summary["fabric"] = [kv.make_check("f", data.draw(st.sampled_from(["PASS", "FAIL", "SKIP"])), value=2.0)]
    summary = kr.build_summary("run-1", "quick", {n: r["checks"] for n, r in summary["nodes"].items()},
                               summary["fabric"], scope=summary["scope"])
    summary = json.loads(json.dumps(summary))
    for _ in range(data.draw(st.integers(1, 3))):
        paths = list(_paths(summary))[1:]
        path = data.draw(st.sampled_from(paths))
        parent = summary
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = data.draw(HOSTILE_JSON)
    folder = tmp_path_factory.mktemp("v")
    proc = _verdict(folder, summary)
    assert proc.returncode in CODES and "internal error" not in proc.stderr, proc.stderr
    if proc.returncode == 0:  # PASS only for a summary that is consistent and complete
        nodes = summary["nodes"]
        scope = summary.get("scope")
        assert scope is None or isinstance(scope, dict)
        assert set((scope or {}).get("expected") or []) <= set(nodes)
        for record in nodes.values():
            statuses = [c["status"] for c in record["checks"]]
            assert record["status"] == "PASS" and "PASS" in statuses
            assert set(statuses) <= {"PASS", "SKIP"}
            assert all(c.get("value") is None or math.isfinite(c["value"]) for c in record["checks"]
                       if c["status"] == "PASS")
        for check in summary["fabric"]:
            assert check["status"] in ("PASS", "SKIP")
            assert check.get("value") is None or (check["status"] == "SKIP" or math.isfinite(check["value"]))
        assert summary["overall"]["status"] == "PASS"


# ---- tools/kiln-burnin (wrapper around ansible-playbook), with a fake ansible-playbook

FAKE_PLAYBOOK = r'''#!/usr/bin/env bash
# Fake ansible-playbook: copy $FAKE_SUMMARY to <results_dir>/<run_id>/summary.json, exit $FAKE_RC.
results=""; run_id=""
for arg in "$@"; do
  case "$arg" in
    kiln_burnin_results_dir=*) results="${arg#*=}" ;;
    kiln_burnin_run_id=*) run_id="${arg#*=}" ;;
  esac
done
printf '%s\n' "$@" > "${FAKE_ARGS_FILE:-/dev/null}"
if [[ -n "${FAKE_SUMMARY:-}" ]]; then
  mkdir -p "${results}/${run_id}"
  cp "$FAKE_SUMMARY" "${results}/${run_id}/summary.json"
fi
exit "${FAKE_RC:-0}"
'''


@pytest.fixture
def fake_ansible(tmp_path: Path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "ansible-playbook"
    fake.write_text(FAKE_PLAYBOOK)
    fake.chmod(0o755)
    (bindir / "python3").symlink_to(sys.executable)

    def run(summary, rc: int, run_id: str = "r1") -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PATH"] = f"{bindir}:{env.get('PATH', '/usr/bin:/bin')}"
        env["FAKE_RC"] = str(rc)
        env["FAKE_ARGS_FILE"] = str(tmp_path / "args.txt")
        env.pop("FAKE_SUMMARY", None)
        if summary is not None:
            source = tmp_path / "source-summary.json"
            source.write_text(summary if isinstance(summary, str) else json.dumps(summary))
            env["FAKE_SUMMARY"] = str(source)
        return subprocess.run(["bash", str(BURNIN), "-i", "inventories/x", "-e", f"kiln_burnin_run_id={run_id}",
                               "-e", f"kiln_burnin_results_dir={tmp_path / 'results'}"],
                              capture_output=True, text=True, env=env, cwd="/", timeout=60, check=False)

    return run


@pytest.mark.parametrize(
    ("statuses", "ansible_rc", "rc", "word"),
    [
        (("PASS", "PASS"), 0, 0, "PASS"),
        (("PASS", "WARN"), 0, 1, "WARN"),
        (("PASS", "FAIL"), 0, 2, "FAIL"),
        (("PASS", "INCOMPLETE"), 0, 3, "INCOMPLETE"),
        (("PASS", "PASS"), 2, 3, "INCOMPLETE"),
        (("PASS", "PASS"), 4, 3, "INCOMPLETE"),
        (("PASS", "WARN"), 2, 3, "INCOMPLETE"),
        (("PASS", "FAIL"), 2, 2, "FAIL"),
        (("PASS", "INCOMPLETE"), 4, 3, "INCOMPLETE"),
    ],
)
def test_burnin_wrapper_exit_is_the_worse_of_verdict_and_playbook(fake_ansible, statuses, ansible_rc, rc, word):
    proc = fake_ansible(_good_summary(statuses), ansible_rc)
    assert_clean(proc)
    assert proc.returncode == rc, proc.stdout + proc.stderr
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT:")]
    assert len(results) == 1 and results[0].startswith(f"RESULT: {word} (exit {rc})  run run-1  passed=")
    assert proc.stdout.rstrip().splitlines()[-1] == results[0]
    note = f"ansible-playbook exited {ansible_rc}: some hosts did not finish; the verdict cannot be PASS"
    assert (note in proc.stderr) == (ansible_rc != 0)


@pytest.mark.parametrize(("summary", "ansible_rc"), [(None, 0), (None, 2), (None, 4), ("not json", 0),
                                                     ("not json", 2), ('{"schema": "kiln.burnin/v1"}', 0)])
def test_burnin_wrapper_config_errors(fake_ansible, summary, ansible_rc):
    proc = fake_ansible(summary, ansible_rc)
    assert_clean(proc)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "RESULT:" not in proc.stdout


def test_burnin_wrapper_refuses_a_summary_left_by_an_earlier_run(fake_ansible, tmp_path: Path):
    proc = fake_ansible(_good_summary(), 0)
    assert proc.returncode == 0
    proc = fake_ansible(None, 2)              # same run id; the playbook died before writing
    assert proc.returncode == 4 and "earlier run" in proc.stderr


def test_burnin_wrapper_passes_its_arguments(fake_ansible, tmp_path: Path):
    proc = fake_ansible(_good_summary(), 0, run_id="with space")
    assert proc.returncode == 0, proc.stderr
    args = (tmp_path / "args.txt").read_text().splitlines()
    assert "kiln_burnin_run_id=with space" in args and "kiln_burnin_fail_play=false" in args


@pytest.mark.parametrize(("given", "passed"), [
    (["--limit", "gpu017"], ["--limit", "gpu017,localhost"]),
    (["-l", "gpu017,gpu016"], ["-l", "gpu017,gpu016,localhost"]),
    (["--limit=gpu01*"], ["--limit=gpu01*,localhost"]),
    (["-lgpu017"], ["-lgpu017,localhost"]),
    (["--limit", "gpu017,localhost"], ["--limit", "gpu017,localhost"]),
    (["--limit", "gpu_nodes:localhost"], ["--limit", "gpu_nodes:localhost"]),
    (["--limit", "@retry.txt"], ["--limit", "@retry.txt,localhost"]),
    (["--limit", "notlocalhost"], ["--limit", "notlocalhost,localhost"]),
    (["--limit", "*"], ["--limit", "*,localhost"]),  # a host pattern glob passes through as it is
    ([], []),
])
def test_burnin_wrapper_adds_localhost_to_a_limit(tmp_path: Path, given: list, passed: list) -> None:
    """The burn-in judges on localhost: `tools/kiln-burnin --limit gpu017` runs with gpu017,localhost (a plain
    ansible-playbook would skip every controller play), and a limit naming localhost is left as it is."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ansible-playbook").write_text(FAKE_PLAYBOOK)
    (bindir / "ansible-playbook").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FAKE_SUMMARY")}
    env.update(PATH=f"{bindir}:{env.get('PATH', '/usr/bin:/bin')}", FAKE_ARGS_FILE=str(tmp_path / "args.txt"))
    subprocess.run(["bash", str(BURNIN), "-i", "inventories/x", *given], capture_output=True, text=True, env=env,
                   cwd="/", timeout=60, check=False)
    args = (tmp_path / "args.txt").read_text().splitlines()
    limits = [a for i, a in enumerate(args) if a.startswith(("-l", "--limit")) or (i and args[i - 1] in ("-l", "--limit"))]
    assert limits == passed, args
