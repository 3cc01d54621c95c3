"""The burn-in's one invariant, driven end to end with generated hostile inputs (issue 11, Done when):

  parse -> verdict -> assemble -> report (summary.json) -> tools/kiln-burnin-verdict -> tools/kiln-burnin

Overall PASS only when every node expected by the run has every check its mode requires, each with a
finite measured value judged against a finite floor or a documented relative rule; anything missing,
non-finite, contradictory or unparseable is INCOMPLETE or FAIL; no exception escapes (a configuration
error is exit 4, never a traceback); the wrapper's exit code is the worse of the verdict's and
ansible-playbook's.
"""

from __future__ import annotations

import json
import math
import os
import random
import stat
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kiln_paths import REPO
import kiln_data
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.burnin import baseline as kiln_baseline  # noqa: E402
from kiln.burnin import assemble as kb  # noqa: E402
from kiln.burnin import checks as kbc  # noqa: E402
from kiln import verdict as kv  # noqa: E402
from kiln_loader import load_source  # noqa: E402

TEXT = (REPO / "tests/fixtures/nccl-tests/nccl-tests-2.13-h100-16rank-2node.txt").read_text()
DCGM_R = {level: (REPO / f"tests/fixtures/dcgm/emulated-dcgmi-4.6-diag-r{level}-8gpu.json").read_text()
          for level in (2, 3)}
CPU_TEXT = (REPO / "tests/fixtures/nccl-tests/derived-kiln-cpu-engine-3node-example.txt").read_text()
FLOORS = kiln_data.floors()
OVERRIDES = {"h100-sxm/any/single_node": 300, "h100-sxm/tcp/two_node_ring": 0.05}


def _load_tool(name: str):
    return load_source(name.replace("-", "_"), REPO / "tools" / name)


VERDICT = _load_tool("kiln-burnin-verdict")

HOSTILE_NUMBERS = ["inf", "-inf", "nan", "1e999", "-1", "9" * 400, "0", "N/A", "Infinity", "1e-300"]


def mutate(text: str, rng: random.Random, how: str) -> str:
    lines = text.splitlines()
    rows = [i for i, line in enumerate(lines) if line.strip()[:1].isdigit()]
    if how == "number" and rows:
        i = rng.choice(rows)
        tokens = lines[i].split()
        tokens[rng.randrange(len(tokens))] = rng.choice(HOSTILE_NUMBERS)
        lines[i] = "  ".join(tokens)
    elif how == "drop_row" and rows:
        del lines[rng.choice(rows)]
    elif how == "dup_row" and rows:
        i = rng.choice(rows)
        lines.insert(i, lines[i])
    elif how == "reorder" and len(rows) > 1:
        a, b = rng.sample(rows, 2)
        lines[a], lines[b] = lines[b], lines[a]
    elif how == "truncate":
        cut = rng.randrange(len(text) + 1)
        return text[:cut]
    elif how == "mixed":
        return text + text[: rng.randrange(len(text))]
    elif how == "no_header":
        lines = [line for line in lines if not line.lstrip("# ").startswith("size")]
    elif how == "wrong_na":
        lines = [line.replace(" 0 ", " N/A ") if line.strip()[:1].isdigit() else line for line in lines]
    elif how == "garbage":
        return "".join(rng.choice("0123456789 .#\n-eEinfa") for _ in range(rng.randrange(400)))
    return "\n".join(lines) + "\n"


MUTATIONS = ["none", "number", "drop_row", "dup_row", "reorder", "truncate", "mixed", "no_header",
             "wrong_na", "garbage"]


@st.composite
def burnin_inputs(draw):
    """A run's raw data: healthy by default, with hostile values drawn into any part of it."""
    rng = random.Random(draw(st.integers(0, 2 ** 32)))
    hostile = draw(st.booleans())

    def pick(good, bad):
        return draw(st.sampled_from(bad)) if hostile and draw(st.booleans()) else good

    mode = draw(st.sampled_from(["quick", "default", "acceptance", "swap"]))
    level = kbc.DCGM_LEVELS.get(mode, 2)
    names = [f"n{i}" for i in range(draw(st.integers(1, 4)))]
    missing = pick([], [[names[0]], names[-1:]])
    nodes = {}
    for name in names:
        if name in missing:
            continue
        kind = pick("gpu", ["lost", "cpu"])
        how = pick("none", MUTATIONS)
        if kind == "cpu":
            nodes[name] = {"kiln_gpu": {"pci_gpu_count": 0}, "gpu_present": False, "engine": "cpu",
                           "xid_log": "", "nccl": {"ran": False, "why": "engine cpu"}}
            continue
        count = 8 if kind == "gpu" else 0
        nodes[name] = {
            "kiln_gpu": {"pci_gpu_count": count, "gpus": [{"index": i} for i in range(count)]},
            "gpu_present": count > 0, "expected_gpus": pick(8, [None, "8", 0, "x", 10 ** 6]),
            "history_gpus": pick(None, [8, 4]), "sku": "h100-sxm", "engine": "nccl-tests",
            "xid_log": pick("", ["NVRM: Xid (PCI:0000:18:00): 79, pid=1", "NVRM: Xid (PCI:0000:18:00): 13, x"]),
            "dcgm": {"present": pick(True, [False]), "rc": pick(0, [226, -1, None]),
                     "stdout": pick(DCGM_R[3 if level == 3 else 2],
                                    ["", "{", '{"category": []}', "| Diagnostic | Pass |", DCGM_R[2][:500]]),
                     "stderr": ""},
            "nccl": {"ran": True, "text": mutate(TEXT, rng, how), "rc": pick(0, [1, 124, None, "x"]),
                     "timed_out": pick(False, [True])}}
    pairs = {}
    if mode != "quick" and len(nodes) > 1:
        present = sorted(nodes)
        results = []
        for a, b in zip(present, present[1:] + present[:1]):
            if a == b:
                continue
            value = pick(draw(st.sampled_from([0.2, 0.21, 0.205])), [math.inf, math.nan, -1.0, None, 1e308, 0.05])
            results.append({"pair": [a, b], "round": 1, "verdict": pick("PASS", ["FAIL", "INCOMPLETE", "bogus"]),
                            "value": value})
        if pick(False, [True]):
            results = results[:-1]
        pairs = {"participants": present, "results": results, "band": 0.10, "targets": present}
    expected = names if pick(True, [False]) else sorted(nodes)
    return mode, nodes, pairs, expected


def required_ok(summary) -> bool:
    """The invariant, restated independently of kiln_burnin.enforce_checks."""
    mode = summary["mode"]
    expected = set(summary["scope"]["expected"])
    if not expected or expected - set(summary["nodes"]):
        return False
    for record in summary["nodes"].values():
        checks = record["checks"]
        if not checks:
            return False
        for item in checks:
            if item["status"] in ("FAIL", "INCOMPLETE"):
                return False
            for key in ("value", "floor"):
                if item["status"] in ("PASS", "WARN") and item.get(key) is not None:
                    if not (isinstance(item[key], (int, float)) and math.isfinite(item[key])):
                        return False
        ids = {c["id"]: c for c in checks}
        if mode != "quick" and len(expected) > 1 and ids.get("nccl.pair.all_reduce", {}).get("status") not in (
                "PASS", "WARN"):
            return False  # the run's pair phase is required of every node
        gpu = record.get("gpu_sku") is not None
        if gpu:
            for need in ("gpu.count", "xid.kernel_log", f"dcgm.diag.r{kbc.DCGM_LEVELS.get(mode, 2)}"):
                if need not in ids or ids[need]["status"] == "SKIP":
                    return False
    return True


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(burnin_inputs())
def test_pass_only_with_every_expected_measurement(tmp_path_factory, data):
    mode, nodes, pairs, expected = data
    try:
        assembled = kiln_data.assemble(nodes, mode=mode, floors=FLOORS, overrides=OVERRIDES, pairs=pairs,
                                expected=expected)
        result = kb.report("run", mode, assembled, "/nonexistent", write=False)
    except kv.KilnConfigError:
        return  # documented configuration error: exit 4
    summary = result["summary"]
    status = summary["overall"]["status"]
    if status in ("PASS", "WARN"):
        assert required_ok(summary), json.dumps(summary)[:3000]
    # the verdict tool agrees with the module, or is stricter
    path = tmp_path_factory.mktemp("s") / "summary.json"
    path.write_text(json.dumps(summary))
    code = VERDICT.main([str(path), "--quiet"])
    assert code in (0, 1, 2, 3, 4)
    assert code >= kv.exit_code(status) or code == 2, (code, status)


@st.composite
def tampered(draw):
    node = {"status": draw(st.sampled_from(["PASS", "WARN", "FAIL", "INCOMPLETE", "SKIP", "BOGUS", None, 3])),
            "checks": draw(st.one_of(
                st.just([]), st.just("PASS"), st.none(),
                st.lists(st.fixed_dictionaries({
                    "id": st.sampled_from(["gpu.count", "nccl.pair.all_reduce", 5]),
                    "status": st.sampled_from(["PASS", "FAIL", "INCOMPLETE", "SKIP", "WARN", "X"]),
                    "value": st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True),
                                       st.text(max_size=3))}), max_size=3)))}
    summary = {"schema": "kiln.burnin/v1", "run_id": "r", "mode": "default", "fingerprint": {},
               "nodes": {"a": node}, "fabric": [], "overall": {"status": "PASS", "exit": 0},
               "scope": {"expected": draw(st.sampled_from([["a"], ["a", "b"], "a", None]))}}
    return summary


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tampered())
@example({"schema": "kiln.burnin/v1", "run_id": "r", "mode": "default", "fingerprint": {},
          "nodes": {"a": {"status": "PASS", "checks": [{"id": "gpu.count", "status": "SKIP", "value": None},
                                                       {"id": "nccl.pair.all_reduce", "status": "PASS", "value": None}]}},
          "fabric": [], "overall": {"status": "PASS", "exit": 0}, "scope": {"expected": ["a"]}})
@example({"schema": "kiln.burnin/v1", "run_id": "r", "mode": "default", "fingerprint": {},
          "nodes": {"a": {"status": "PASS", "checks": [{"id": "gpu.count", "status": "SKIP", "value": None}]}},
          "fabric": [], "overall": {"status": "PASS", "exit": 0}, "scope": {"expected": ["a"]}})
def test_verdict_tool_never_trusts_stored_statuses(tmp_path, summary):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary, allow_nan=True))
    code = VERDICT.main([str(path), "--quiet"])
    checks = summary["nodes"]["a"]["checks"]
    # PASS is honest only from the checks themselves: every check PASS or SKIP (SKIP: not judged, a
    # hardware check without the hardware), at least one PASS, no non-finite value, one expected node.
    honest = (isinstance(checks, list) and checks and summary["scope"]["expected"] == ["a"]
              and all(isinstance(c, dict) and c["status"] in ("PASS", "SKIP") and isinstance(c["id"], str)
                      and (c["value"] is None or (isinstance(c["value"], float) and math.isfinite(c["value"])))
                      for c in checks)
              and any(c["status"] == "PASS" for c in checks)
              and summary["nodes"]["a"]["status"] == "PASS")
    if code == 0:
        assert honest, summary


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300), st.lists(st.sampled_from(["PASS", "FAIL", "WARN"]), max_size=3))
def test_torn_history_never_loses_the_next_record(tmp_path_factory, junk, statuses):
    state = tmp_path_factory.mktemp("h")
    path = Path(kiln_baseline.node_file(str(state), "n1"))
    path.write_bytes(junk)
    for index, status in enumerate(statuses):
        kiln_baseline.append(str(state), "n1", kiln_baseline.record(f"r{index}", "t", "default", status, {},
                                                                    {"pair": 0.2}))
    records = kiln_baseline.load(str(state), "n1")
    assert [r["run_id"] for r in records][-len(statuses):] == [f"r{i}" for i in range(len(statuses))] \
        if statuses else True


FAKE_PLAYBOOK = """#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
extra = dict(a.split("=", 1) for a in args if "=" in a and a.startswith("kiln_burnin_"))
run = extra["kiln_burnin_run_id"]; results = extra["kiln_burnin_results_dir"]
src = os.environ["FAKE_SUMMARY"]
if src != "none":
    os.makedirs(os.path.join(results, run), exist_ok=True)
    with open(src) as f, open(os.path.join(results, run, "summary.json"), "w") as g:
        g.write(f.read())
sys.exit(int(os.environ["FAKE_RC"]))
"""


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(["PASS", "WARN", "FAIL", "INCOMPLETE", "none"]), st.sampled_from([0, 2, 4, 99]))
def test_wrapper_exit_is_the_worse_of_verdict_and_playbook(tmp_path_factory, status, rc):
    tmp = tmp_path_factory.mktemp("w")
    fake = tmp / "bin" / "ansible-playbook"
    fake.parent.mkdir()
    fake.write_text(FAKE_PLAYBOOK)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    summary = tmp / "in.json"
    if status != "none":
        checks = [kv.make_check("gpu.count", status, value=8)]
        node = {"checks": checks, **kv.aggregate_node(checks)}
        doc = {"schema": "kiln.burnin/v1", "run_id": "x", "mode": "quick", "fingerprint": {}, "nodes": {"a": node},
               "fabric": [], "overall": kv.aggregate_overall({"a": node}), "scope": {"expected": ["a"]}}
        doc["overall"].update({"status": node["status"], "exit": kv.exit_code(node["status"])})
        summary.write_text(json.dumps(doc))
    env = dict(os.environ, PATH=f"{fake.parent}:{os.environ['PATH']}", FAKE_RC=str(rc),
               FAKE_SUMMARY=str(summary) if status != "none" else "none")
    out = subprocess.run([str(REPO / "tools" / "kiln-burnin"), "-e", f"kiln_burnin_results_dir={tmp}/r",
                          "-e", "kiln_burnin_run_id=x"], env=env, capture_output=True, text=True, timeout=60)
    assert "Traceback" not in out.stderr
    if status == "none":
        assert out.returncode == 4
        return
    verdict = kv.exit_code(status)
    if rc == 0:
        assert out.returncode == verdict
    elif status in ("PASS", "WARN"):
        assert out.returncode == 3, out
    else:
        assert out.returncode == verdict


def test_a_check_reported_twice_with_two_statuses_is_not_a_pass(tmp_path):
    """Found by the property test above: gpu.count PASS and SKIP in one node was PASS."""
    summary = {"schema": "kiln.burnin/v1", "run_id": "r", "mode": "default", "fingerprint": {},
               "nodes": {"a": {"status": "PASS", "checks": [{"id": "gpu.count", "status": "PASS", "value": None},
                                                           {"id": "gpu.count", "status": "SKIP", "value": None}]}},
               "fabric": [], "overall": {"status": "PASS", "exit": 0}, "scope": {"expected": ["a"]}}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    assert VERDICT.main([str(path), "--quiet"]) != 0
