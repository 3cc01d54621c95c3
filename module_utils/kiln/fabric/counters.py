# -*- coding: utf-8 -*-
"""Burn-in fabric judges III: the RDMA ports' error counters, judged by port identity and direction.

Pure functions, standard library only. Importable as ``kiln_fabric_counters`` and
``ansible.module_utils.kiln.fabric.counters`` (``kiln_burnin_fabric_checks`` re-exports the public names).

* **Identity** (:func:`port_identity`): a port is its GUID -- the interface id of GID 0 (the port
  GUID on InfiniBand, the MAC-derived id on RoCE), else the HCA's node GUID and the port number --
  with the HCA's firmware and serial where the facts carry them. A history is kept per host name,
  but a counter baseline is only used for the port with the same GUID (found under any name).
* **Baseline** (:func:`counter_baseline`): the counter snapshot of the newest run that *passed*
  for the node, written only when fabric.counters and fabric.counters.during_run passed too
  (``kiln_burnin.history_records``). A FAIL or INCOMPLETE run never writes one, so an immediate
  re-run without a repair is judged against the same baseline and fails again.
* **Baseline reset**: a counter lower than its baseline (cleared, driver reload), a port whose GUID
  differs from the baseline's under the same name (HCA swapped, another machine's history under
  the host name), firmware or serial changed, GUID unknown, no baseline: the counter is judged on
  its **absolute** value (the same ``counters.<name>.warn/fail`` of ``data/burnin_fabric.yml``,
  read as "since the counters were last cleared"), never passed through a delta.
* **During the run** (:func:`during_run_check`): the counters read again after the run's own
  traffic (ib_write_bw, pairs, all-reduce); their growth is judged in the same run against
  ``counters.<name>.during_run``.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import verdict as kiln_verdict
from .base import (
    DURING_RUN_CHECK, ERROR_COUNTERS, FAIL, HCA_IDENTITY, INCOMPLETE, PASS, SKIP, WARN, _count, _read_facts,
    _show, _state, check,
)

__all__ = ["counter_baseline", "counter_deltas", "counter_identity", "counter_snapshot", "counter_check",
           "during_run_check", "port_identity"]

PASSING = ("PASS", "WARN")
_HEX4 = re.compile(r"^[0-9a-f]{1,4}$")
_GUID = re.compile(r"^[0-9a-f]{4}(:[0-9a-f]{4}){3}(#\d{1,3})?$")


# --------------------------------------------------------------------------- identity


def _norm_guid(value: Any) -> Optional[str]:
    """``0x58a2e10300dae626`` / ``58a2:e103:00da:e626`` -> ``58a2:e103:00da:e626``; None unless 64 bits, not 0."""
    if not isinstance(value, str):
        return None
    raw = value.strip().lower()
    raw = raw[2:] if raw.startswith("0x") else raw
    raw = raw.replace(":", "")
    if not re.fullmatch(r"[0-9a-f]{1,16}", raw) or int(raw, 16) == 0:
        return None
    raw = raw.zfill(16)
    return ":".join(raw[i:i + 4] for i in range(0, 16, 4))


def _gid_guid(gid: Any) -> Optional[str]:
    """The interface id (low 64 bits) of a GID in sysfs form ``fe80:0000:0000:0000:a088:c203:0000:1000``."""
    if not isinstance(gid, str):
        return None
    parts = gid.strip().lower().split(":")
    if len(parts) != 8 or not all(_HEX4.match(p) for p in parts):
        return None
    return _norm_guid("".join(p.zfill(4) for p in parts[4:]))


def port_identity(port: Mapping[str, Any]) -> Dict[str, Optional[str]]:
    """``{guid, node_guid, sys_image_guid, fw_ver, board_id, serial}`` of one port of ``_read_facts``;
    ``guid`` is GID 0's interface id, else ``<node GUID>#<port>``, else None (identity unknown)."""
    hca = port.get("hca_identity") if isinstance(port.get("hca_identity"), Mapping) else {}
    node_guid = _norm_guid(hca.get("node_guid"))
    guid = _gid_guid(port.get("gid0"))
    if guid is None and node_guid is not None and _count(port.get("ib_port")):
        guid = f"{node_guid}#{port['ib_port']}"
    out: Dict[str, Optional[str]] = {"guid": guid, "node_guid": node_guid,
                                     "sys_image_guid": _norm_guid(hca.get("sys_image_guid"))}
    for key in HCA_IDENTITY:
        if key not in out:
            value = hca.get(key)
            out[key] = value.strip()[:64] if isinstance(value, str) and value.strip() else None
    return out


def counter_identity(facts: Any) -> Dict[str, Dict[str, Optional[str]]]:
    """``{"mlx5_0/1": port_identity}`` for every port of the facts (kept next to a baseline's counters)."""
    found, _ = _read_facts(facts)
    return {name: port_identity(port) for name, port in (found or {}).items()}


def counter_snapshot(facts: Any, counter_max: int = 2 ** 64 - 1) -> Dict[str, Dict[str, int]]:
    """``{"mlx5_0/1": {"symbol_error": 0, ...}}``: the plausible error counters of every port."""
    found, _ = _read_facts(facts)
    out: Dict[str, Dict[str, int]] = {}
    for name, port in (found or {}).items():
        counters = port.get("counters") if isinstance(port.get("counters"), Mapping) else {}
        out[name] = {c: counters[c] for c in ERROR_COUNTERS
                     if _count(counters.get(c)) and 0 <= counters[c] <= counter_max}
    return out


def counter_deltas(current: Any, previous: Any) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """Per port and counter ``{value, previous, delta, reset}``: delta None without a usable previous
    value, and None with reset True when the counter went down (cleared or HCA replaced)."""
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    previous = previous if isinstance(previous, Mapping) else {}
    for port, counters in (current.items() if isinstance(current, Mapping) else ()):
        before = previous.get(port) if isinstance(previous.get(port), Mapping) else {}
        for name, value in (counters.items() if isinstance(counters, Mapping) else ()):
            if not _count(value):
                continue
            old = before.get(name) if _count(before.get(name)) and before.get(name) >= 0 else None
            reset = old is not None and value < old
            out.setdefault(port, {})[name] = {"value": value, "previous": old, "reset": reset,
                                              "delta": None if old is None or reset else value - old}
    return out


# --------------------------------------------------------------------------- baseline


def counter_baseline(records: Any) -> Dict[str, Any]:
    """The counter baseline in a node's history (kiln_baseline records, oldest first).

    ``{"counters", "identity", "run_id", "note"}``: the snapshot of the newest record that passed
    (PASS or WARN) and carries ``fabric.counters``; counters None (absolute judging) when there is
    none, or when that record has no port identity (recorded before kiln kept GUIDs). A FAIL or
    INCOMPLETE record's counters (older kiln wrote them) are never a baseline. Never raises.
    """
    none = {"counters": None, "identity": None, "run_id": None}
    if not isinstance(records, (list, tuple)):
        return dict(none, note="no history")
    for record in reversed(records):
        fabric = record.get("fabric") if isinstance(record, Mapping) else None
        if not isinstance(fabric, Mapping) or not isinstance(fabric.get("counters"), Mapping):
            continue
        if record.get("status") not in PASSING:
            continue  # a failing run's snapshot is never the next baseline
        run = str(record.get("run_id") or "?")[:60]
        identity = fabric.get("identity")
        if not isinstance(identity, Mapping) or not identity:
            return dict(none, run_id=run, note=f"the last counter baseline (run {run}) has no port GUIDs (recorded "
                                               "before kiln kept them): not used")
        return {"counters": dict(fabric["counters"]), "identity": dict(identity), "run_id": run, "note": None}
    return dict(none, note="no counter baseline in the history (no passing run recorded one)")


def _identity_of(value: Any) -> Dict[str, Optional[str]]:
    """A stored identity, each field a short string or None (a history file is input, not trusted)."""
    value = value if isinstance(value, Mapping) else {}
    out = {}
    for key in ("guid",) + HCA_IDENTITY:
        item = value.get(key)
        out[key] = item[:64] if isinstance(item, str) and item else None
    if out["guid"] is not None and not _GUID.match(out["guid"]):
        out["guid"] = None
    return out


def _resolve(previous: Any, wanted: Sequence[str], identity_now: Mapping[str, Any]
             ) -> Tuple[Dict[str, Optional[Mapping[str, Any]]], Dict[str, str], str, str]:
    """(baseline counters per wanted port or None, why each None is a reset, the lead text, 'since' text)."""
    absolute = "judged on absolute values since the counters were last cleared"
    if not isinstance(previous, Mapping) or not previous:
        return {p: None for p in wanted}, {}, f"no previous counter snapshot: {absolute}", ""
    if "counters" not in previous and "identity" not in previous:  # a bare snapshot: compared by port name
        return ({p: previous.get(p) if isinstance(previous.get(p), Mapping) else None for p in wanted}, {},
                "deltas since the last run (a snapshot without port identity, compared by name)", "since the last run")
    counters = previous.get("counters") if isinstance(previous.get("counters"), Mapping) else None
    run = str(previous.get("run_id") or "?")[:60]
    if counters is None:
        note = str(previous.get("note") or "no counter baseline")[:200]
        return {p: None for p in wanted}, {}, f"{note}: {absolute}", ""
    stored = {str(k): _identity_of(v) for k, v in (previous.get("identity") or {}).items()} \
        if isinstance(previous.get("identity"), Mapping) else {}
    by_guid: Dict[str, List[str]] = {}
    for name, ident in stored.items():
        if ident["guid"]:
            by_guid.setdefault(ident["guid"], []).append(name)
    now_guids: Dict[str, int] = {}
    for ident in identity_now.values():
        if isinstance(ident, Mapping) and ident.get("guid"):
            now_guids[ident["guid"]] = now_guids.get(ident["guid"], 0) + 1
    out: Dict[str, Optional[Mapping[str, Any]]] = {}
    resets: Dict[str, str] = {}
    for port in wanted:
        mine = _identity_of(identity_now.get(port))
        guid, out[port] = mine["guid"], None
        sources = by_guid.get(guid or "", [])
        if guid is None:
            resets[port] = "no port GUID in the facts: not provably the baseline's port"
        elif now_guids.get(guid, 0) > 1 or len(sources) > 1:
            resets[port] = f"GUID {guid} is on more than one port: ambiguous"
        elif sources:
            theirs = stored[sources[0]]
            changed = [f"{k} {theirs[k]} -> {mine[k]}" for k in ("fw_ver", "serial")
                       if theirs[k] and mine[k] and theirs[k] != mine[k]]
            base = counters.get(sources[0])
            if changed:
                resets[port] = "HCA " + ", ".join(changed) + " since the baseline"
            elif not isinstance(base, Mapping):
                resets[port] = "the baseline has no counters for this port"
            else:
                out[port] = base
                if sources[0] != port:
                    resets[port] = f"same GUID as {sources[0]} in the baseline (renamed): compared with it"
        elif port in stored:
            resets[port] = (f"GUID {stored[port]['guid'] or 'unknown'} in the baseline, {guid} now: HCA swapped, "
                            "or the history is another port's or another machine's under this host name")
        else:
            resets[port] = "no baseline for this port (GUID not in the baseline)"
    return out, resets, f"deltas since the baseline of run {run} (ports matched by GUID)", f"since run {run}"


def _level(rule: Mapping[str, Any], quantity: int) -> Tuple[str, str]:
    if rule.get("fail") is not None and quantity >= rule["fail"]:
        return FAIL, f"fail >= {rule['fail']}"
    if quantity >= rule["warn"]:
        return WARN, f"warn >= {rule['warn']}"
    return PASS, ""


def counter_check(found: Mapping[str, Mapping[str, Any]], wanted: Sequence[str], previous: Any,
                  rules: Mapping[str, Any]) -> Dict[str, Any]:
    """fabric.counters of the expected ports *wanted* (names in *found*, ``_read_facts``).

    *previous*: :func:`counter_baseline` (matched by GUID), a bare :func:`counter_snapshot`
    (compared by port name), or None. A delta is used only for a counter at or above its baseline on
    the same port; anything else is judged on its absolute value (module docstring).
    """
    limit = rules["limits"]["counter_max"]
    identity_now = {n: port_identity(found[n]) for n in wanted}
    bases, resets, lead, since = _resolve(previous, wanted, identity_now)
    bad: List[str] = []
    notes = [f"{p}: {why}" + ("" if bases.get(p) is not None else "; judged on absolute values")
             for p, why in resets.items()]
    statuses, worst = [PASS], 0
    for port in wanted:
        counters = found[port].get("counters") if isinstance(found[port].get("counters"), Mapping) else {}
        base = bases.get(port)
        for name in ERROR_COUNTERS:
            rule, value = rules["counters"][name], counters.get(name)
            if value is None:
                if rule.get("required"):
                    statuses.append(INCOMPLETE)
                    bad.append(f"{port} {name} not reported")
                continue
            if not _count(value) or not 0 <= value <= limit:
                statuses.append(INCOMPLETE)
                bad.append(f"{port} {name} {_show(value)} is not a plausible count")
                continue
            old = base.get(name) if isinstance(base, Mapping) else None
            old = old if _count(old) and 0 <= old <= limit else None
            if old is not None and value < old:
                quantity = value
                text = f"{port} {name} {value} < {old} before: counters cleared or HCA replaced; baseline restarts"
            elif old is not None:
                quantity, text = value - old, f"{port} {name} +{value - old} {since}"
            elif port in resets:
                quantity, text = value, f"{port} {name} {value} since the counters were cleared (baseline reset)"
            else:
                quantity, text = value, f"{port} {name} +{value} since the counters were cleared"
            worst = max(worst, quantity)
            status, words = _level(rule, quantity)
            if status != PASS:
                statuses.append(status)
                bad.append(f"{text} ({words})")
            elif old is not None and value < old:
                notes.append(text + f": {value} judged on its absolute value")
            elif old is not None and rule.get("bits") is not None and value >= 2 ** rule["bits"] - 1:
                statuses.append(WARN)
                bad.append(f"{port} {name} saturated at {value}: its growth is unknown; clear the counters "
                           "(perfquery -R or ibclearerrors) and re-run")
    status = kiln_verdict.worst(statuses) or INCOMPLETE
    detail = "; ".join(bad) if bad else f"no error counter at its warn threshold on {len(wanted)} port(s)"
    return check("fabric.counters", status, f"{detail} ({lead}{'; ' + '; '.join(notes) if notes else ''})",
                 metric="max_error_delta", value=worst, unit="errors", thresholds="data/burnin_fabric.yml",
                 baseline_reset=sorted(p for p in resets if bases.get(p) is None))


# --------------------------------------------------------------------------- during the run


def _counter_problems(problems: Sequence[str], wanted: Sequence[str]) -> List[str]:
    """The facts' problems about a counter of an expected port (``mlx5_3 port 1: counter ...``)."""
    where = [f"{p.split('/')[0]} port {p.split('/')[1]}" for p in wanted]
    return [p for p in problems if "counter" in p and any(w + ":" in p for w in where)]


def during_run_check(facts: Any, after: Any, expected: Mapping[str, Any], rules: Mapping[str, Any]
                     ) -> Dict[str, Any]:
    """fabric.counters.during_run: the expected ports' error counters read again after the run's own
    traffic (*after*: ``{"facts": kiln_fabric facts, "why": text}`` or None) against *facts*, the read
    before it. Growth is judged against ``counters.<name>.during_run``; an expected port gone or no
    longer ACTIVE after the traffic FAILs (WARN with the node's own weak expectation); a counter
    lower after than before (reset mid-run), a changed GUID or an unread counter is INCOMPLETE
    unless its absolute value already FAILs."""
    cid = DURING_RUN_CHECK
    found, _ = _read_facts(facts)
    wanted = [p["port"] for p in (expected.get("ports") or []) if isinstance(p, Mapping)
              and isinstance(p.get("port"), str) and p["port"] in (found or {})]
    if not wanted:
        return check(cid, INCOMPLETE if expected.get("count") else SKIP, "no expected port to read")
    after_facts = after.get("facts") if isinstance(after, Mapping) else None
    later, problems = _read_facts(after_facts)
    if later is None:
        why = str(after.get("why") or "") if isinstance(after, Mapping) else ""
        return check(cid, INCOMPLETE, "the counters were not read after the run's traffic"
                     + (f": {why[:200]}" if why else "") + ("; " + "; ".join(problems[:3]) if after_facts else ""))
    limit = rules["limits"]["counter_max"]
    weak = bool(expected.get("weak"))
    statuses, bad, worst = [PASS], [], 0
    for problem in _counter_problems(problems, wanted)[:8]:
        statuses.append(INCOMPLETE)
        bad.append(f"after the run: {problem}")
    for port in wanted:
        before, now = found[port], later.get(port)
        if now is None:
            statuses.append(WARN if weak else FAIL)
            bad.append(f"{port} gone after the run's traffic (present before it)")
            continue
        if _state(before)[0] and not _state(now)[0]:
            statuses.append(WARN if weak else FAIL)
            bad.append(f"{port} {_state(now)[1]} after the run's traffic (ACTIVE before it)")
        ident = (port_identity(before).get("guid"), port_identity(now).get("guid"))
        if ident[0] != ident[1]:
            statuses.append(INCOMPLETE)
            bad.append(f"{port} GUID {ident[0]} before the run, {ident[1]} after it: not the same port")
            continue
        old_counters = before.get("counters") if isinstance(before.get("counters"), Mapping) else {}
        new_counters = now.get("counters") if isinstance(now.get("counters"), Mapping) else {}
        for name in ERROR_COUNTERS:
            rule = rules["counters"][name]
            old, new = old_counters.get(name), new_counters.get(name)
            if old is None and new is None and not rule.get("required"):
                continue
            if not (_count(old) and 0 <= old <= limit and _count(new) and 0 <= new <= limit):
                statuses.append(INCOMPLETE)
                bad.append(f"{port} {name} {_show(old)} before, {_show(new)} after: not a plausible pair of counts")
                continue
            if new < old:
                status, words = _level(rule["during_run"], new)
                statuses.append(FAIL if status == FAIL else INCOMPLETE)
                bad.append(f"{port} {name} {new} after < {old} before: cleared or reset during the run, its growth "
                           f"unknown" + (f" (absolute {new}: {words})" if status == FAIL else ""))
                worst = max(worst, new)
                continue
            worst = max(worst, new - old)
            status, words = _level(rule["during_run"], new - old)
            if status != PASS:
                statuses.append(status)
                bad.append(f"{port} {name} +{new - old} during this run ({words})")
    status = kiln_verdict.worst(statuses) or INCOMPLETE
    detail = "; ".join(bad) if bad else f"no error counter grew to its threshold during the run on {len(wanted)} port(s)"
    return check(cid, status, detail + " (read before and after the run's ib_write_bw, pairs and all-reduce; "
                 "thresholds counters.<name>.during_run)", metric="max_error_growth", value=worst, unit="errors",
                 thresholds="data/burnin_fabric.yml")
