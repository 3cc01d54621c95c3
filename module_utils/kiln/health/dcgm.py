# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Burn-in health check of one ``dcgmi diag -r <level>`` run: ``dcgm.diag.r<level>``.

Pure functions, standard library only (the rules come loaded, from ``kiln.health.rules.load_health``). Importable as ``kiln.health.dcgm`` and as ``ansible.module_utils.kiln.health.dcgm``.
The output is parsed by ``kiln.health.dcgm_diag.parse_dcgm_diag``; the levels' stress tests come from
``dcgm.levels`` in ``data/burnin_health.yml``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import verdict as kiln_verdict
from .dcgm_diag import UNKNOWN, worse_status, parse_dcgm_diag
from .rules import is_int, show, validate_health

__all__ = ["DCGM_RC", "dcgm_check"]

PASS, WARN, FAIL, INCOMPLETE, SKIP = (kiln_verdict.PASS, kiln_verdict.WARN, kiln_verdict.FAIL,
                                      kiln_verdict.INCOMPLETE, kiln_verdict.SKIP)

#: dcgmi exit statuses (dcgmReturn_t modulo 256, dcgm_structs.h) worth naming in a detail.
DCGM_RC = {
    0: "DCGM_ST_OK",
    205: "DCGM_ST_NVVS_ISOLATE_ERROR (-51): a failure that calls for isolating the GPU",
    226: "DCGM_ST_NVVS_ERROR (-30): the diagnostic reported an error",
    235: "DCGM_ST_CONNECTION_NOT_VALID (-21): host engine unreachable",
    255: "DCGM_ST_BADPARAM (-1)",
    124: "timed out (timeout(1))",
    137: "killed (SIGKILL, e.g. a timeout)",
}


def _rc_text(rc: Any) -> str:
    if is_int(rc):
        meaning = DCGM_RC.get(rc)
        return f"rc {rc}" + (f" ({meaning})" if meaning and rc else "")
    return "rc unknown" if rc is None else f"rc {show(rc)} (not an integer)"


def _stress_spec(health: Optional[Mapping[str, Any]], level: int, require_stress: bool) -> Tuple[List[str], str]:
    if not require_stress:
        return [], "any"
    if health is None:
        raise kiln_verdict.KilnConfigError(f"dcgm.diag.r{level}: require_stress needs the health rules (load_health)")
    data = validate_health(health, "health rules")
    spec = data["dcgm"]["levels"].get(level)
    if not spec or not spec["stress"]:
        raise kiln_verdict.KilnConfigError(
            f"dcgm.diag.r{level}: require_stress needs dcgm.levels.{level}.stress in the health rules")
    return list(spec["stress"]), data["dcgm"].get("stress_rule", "any")


def dcgm_check(level: int, result: Optional[Mapping[str, Any]], gpu_present: bool, require_stress: bool = False,
               artifact: Optional[str] = None, *, health: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Verdict for one ``dcgmi diag -r <level> [-j]`` run: check ``dcgm.diag.r<level>``.

    *result* is ``{present, rc, stdout, stderr}`` (``timed_out`` optional). In order:
    no GPU -> SKIP; dcgmi missing -> INCOMPLETE; any parsed test Fail -> FAIL (whatever
    the rc); nothing parsed, rc not 0, a timeout, an unknown status, every test skipped, or
    (with *require_stress*) none of the level's stress tests run (``dcgm.levels`` in
    *health*, the rules ``load_health`` read: required with *require_stress*) -> INCOMPLETE; a Warn -> WARN; else PASS.
    The record carries ``tests`` (name, key, category, status per test) and ``problems``.
    """
    if not is_int(level):
        raise kiln_verdict.KilnConfigError(f"DCGM diag level must be an integer, not {level!r}")
    cid = f"dcgm.diag.r{level}"
    stress, stress_rule = _stress_spec(health, level, bool(require_stress))
    if not gpu_present:
        return kiln_verdict.make_check(cid, SKIP, detail="no NVIDIA GPU on this node", artifact=artifact)
    if not isinstance(result, Mapping) or not result.get("present"):
        return kiln_verdict.make_check(cid, INCOMPLETE, detail="dcgmi not installed", artifact=artifact)
    rc = result.get("rc")
    parsed = parse_dcgm_diag(result.get("stdout"), result.get("stderr"))
    tests = parsed["tests"]
    summary = [{"name": t["name"], "key": t["key"], "category": t["category"], "status": t["status"]}
               for t in tests]
    fields: Dict[str, Any] = {"artifact": artifact, "tests": summary, "problems": parsed["problems"],
                              "parse_format": parsed["format"], "rc": rc if is_int(rc) else None,
                              "level": level, "require_stress": bool(require_stress),
                              "dcgm_version": parsed["version"]}
    head = f"dcgmi diag -r {level}"

    failed = [t for t in tests if t["status"] == FAIL]
    if failed:
        parts = []
        for t in failed[:12]:
            bad = [g for g, s in t["gpus"].items() if s == FAIL]
            parts.append(t["name"] + (f" [{', '.join(bad[:8])}]" if bad else "") +
                         (f" ({t['detail']})" if t["detail"] else ""))
        detail = f"{head} {_rc_text(rc)}: failed: " + "; ".join(parts)
        return kiln_verdict.make_check(cid, FAIL, detail=detail, **fields)

    reasons: List[str] = []
    if not tests:
        why = parsed.get("runtime_error") or "; ".join(parsed["problems"][:3]) or "no test result found"
        reasons.append(f"output unparseable ({why})")
    if tests and parsed.get("runtime_error"):
        reasons.append("dcgmi reported a runtime error: " + parsed["runtime_error"])
    if result.get("timed_out"):
        reasons.append("timed out")
    if not (is_int(rc) and rc == 0):
        reasons.append(_rc_text(rc) + (" although no test reported Fail" if tests else ""))
    unknown = [t["name"] for t in tests if t["status"] == UNKNOWN]
    if unknown:
        reasons.append("unrecognised status for " + ", ".join(unknown[:12]))
    if tests and all(t["status"] == SKIP for t in tests):
        reasons.append("every test was skipped")
    stress_state: Dict[str, str] = {}
    if require_stress:
        by_key: Dict[str, str] = {}
        for t in tests:
            by_key[t["key"]] = worse_status(by_key.get(t["key"]), t["status"])
        for key in stress:
            state = by_key.get(key)
            stress_state[key] = "absent" if state is None else ("skipped" if state == SKIP else state)
        ran = [k for k, s in stress_state.items() if s in (PASS, WARN)]
        missing = [f"{k} ({s})" for k, s in stress_state.items() if s in ("absent", "skipped")]
        if tests and (not ran if stress_rule == "any" else missing):
            reasons.append(("no stress/hardware test ran: " if not ran else "stress/hardware tests not run: ")
                           + ", ".join(missing))
        fields["stress_tests"] = stress_state
    listing = ", ".join(f"{t['name']} {t['status']}" for t in tests[:40])
    if reasons:
        detail = f"{head}: " + "; ".join(reasons) + (f" [{listing}]" if listing else "")
        return kiln_verdict.make_check(cid, INCOMPLETE, detail=detail, **fields)
    warned = [t for t in tests if t["status"] == WARN]
    if warned:
        detail = f"{head}: warnings: " + "; ".join(
            t["name"] + (f" ({t['detail']})" if t["detail"] else "") for t in warned[:12]) + f" [{listing}]"
        return kiln_verdict.make_check(cid, WARN, detail=detail, **fields)
    skipped = [t["name"] for t in tests if t["status"] == SKIP]
    partial = [f"{t['name']} [{', '.join(g for g, s in t['gpus'].items() if s == SKIP)}]"
               for t in tests if t["status"] == PASS and SKIP in t["gpus"].values()]
    detail = f"{head}: {sum(1 for t in tests if t['status'] == PASS)} of {len(tests)} tests passed [{listing}]"
    if skipped:
        detail += "; skipped: " + ", ".join(skipped[:12])
    if partial:
        detail += "; skipped on some GPUs: " + ", ".join(partial[:12])
    return kiln_verdict.make_check(cid, PASS, detail=detail, **fields)
