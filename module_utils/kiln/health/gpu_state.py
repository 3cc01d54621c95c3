# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU state judges shared by the burn-in's passive checks and kiln-health: persistence mode,
Fabric Manager and GPU fabric registration, NVLink error-counter growth (one rule set, two callers).

Pure functions, standard library only. Importable as ``kiln.health.gpu_state`` and as
``ansible.module_utils.kiln.health.gpu_state``. The facts are ``ansible_facts['kiln_gpu']``
(``kiln.facts.hardware.summarize``); the rules the mapping from ``kiln.health.rules.load_health``
(``data/burnin_health.yml``, sections ``gpu_state`` and ``nvlink_errors``; see
:func:`kiln.health.rules.gpu_state_rules`). *smi* says whether the facts come from nvidia-smi
(``driver_loaded`` and ``source == "nvidia-smi"``).

``gpu.persistence_mode`` (:func:`persistence_check`)
    Every GPU reports persistence mode Enabled: PASS; Disabled: ``gpu_state.persistence_mode.disabled.status``;
    not reported: INCOMPLETE. No nvidia-smi data, or no GPU: SKIP.
``gpu.fabric`` (:func:`fabric_check`)
    NVSwitch boards only (``nvswitch_count > 0``; SKIP elsewhere). ``fabric_manager.present`` and
    ``fabric_manager.active == "active"``, else ``fabric.manager_inactive.status``; each GPU's
    ``fabric.state`` in ``registered.states`` with ``fabric.status`` in ``registered.statuses`` (PASS),
    in ``in_progress.states`` (its status), anything else ``not_registered.status``. GPUs whose
    architecture is not in ``registered.architectures`` (Ampere and older report no fabric state)
    are judged on the service alone. What the facts cannot say (no nvidia-smi data, the service's
    state not asked, a Hopper+ or unknown GPU without a state) is INCOMPLETE, never PASS.
``nvlink.errors`` (:func:`nvlink_errors_check`)
    Growth of each link's counters since *previous* (the snapshot the last call returned, or the
    burn-in's last passing run's): above ``nvlink_errors.counters.<name>.max_growth`` gives that
    rule's status. No *previous*: PASS, "baseline recorded". A counter lower than its baseline
    (driver reload, GPU reset, reboot) is not judged as growth: PASS with a note, and its current
    value is the new baseline. A value that is not an integer in ``0..limits.counter_max`` (None
    from ``N/A``, a string, a bool, a float, negative, implausibly large) is INCOMPLETE. No NVLink
    on the board: SKIP. GPUs are matched with *previous* by UUID (by ``gpu<index>`` only for a GPU
    without one), so a swapped GPU starts a new baseline.

Every judge returns records from ``kiln_verdict.make_check``; hostile facts give INCOMPLETE,
never an exception or a PASS. Only bad *rules* raise (KilnConfigError).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import verdict as kiln_verdict
from .memory import plausible_count
from .rules import (
    CHECK_FABRIC, CHECK_NVLINK_ERRORS, CHECK_PERSISTENCE, NO_SMI, NVLINK_COUNTERS, gpu_state_rules, is_int, show,
)

__all__ = ["CHECK_FABRIC", "CHECK_NVLINK_ERRORS", "CHECK_PERSISTENCE", "fabric_check", "nvlink_errors_check",
           "nvlink_snapshot_ok", "persistence_check"]

PASS, WARN, FAIL, INCOMPLETE, SKIP = (kiln_verdict.PASS, kiln_verdict.WARN, kiln_verdict.FAIL,
                                      kiln_verdict.INCOMPLETE, kiln_verdict.SKIP)
_UUID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
_LINK_RE = re.compile(r"\d{1,4}")
_MAX_REASONS = 40


# --------------------------------------------------------------------------- helpers
def _label(gpu: Any, position: int) -> str:
    index = gpu.get("index") if isinstance(gpu, Mapping) else None
    if is_int(index) and 0 <= index < 1_000_000:
        return f"GPU{index}"
    return f"GPU#{position}"


def _gpu_list(facts: Mapping[str, Any]) -> Tuple[Optional[List[Any]], Optional[str], Optional[str]]:
    """(gpus, None, None), or (None, status, why) when there is nothing to judge per GPU."""
    gpus = facts.get("gpus")
    if gpus is None or (isinstance(gpus, (list, tuple)) and not gpus):
        return None, SKIP, "no GPU reported by nvidia-smi"
    if not isinstance(gpus, (list, tuple)):
        return None, INCOMPLETE, f"GPU facts malformed: gpus is {type(gpus).__name__}, not a list"
    return list(gpus), None, None


def _worst(statuses: List[str]) -> str:
    return kiln_verdict.worst(statuses) or INCOMPLETE


def _sources(rules: Mapping[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for name, rule in rules.items():
        if isinstance(rule, Mapping) and "source" in rule:
            out[name] = {k: rule.get(k) for k in ("status", "max_growth", "states", "statuses", "source",
                                                  "confidence") if k in rule}
    return out


def _join(reasons: List[str]) -> str:
    text = "; ".join(reasons[:_MAX_REASONS])
    if len(reasons) > _MAX_REASONS:
        text += f"; and {len(reasons) - _MAX_REASONS} more"
    return text


def _nvswitches(facts: Mapping[str, Any]) -> Tuple[Optional[int], Optional[str]]:
    count = facts.get("nvswitch_count")
    if count is None:
        return 0, None
    if not is_int(count) or count < 0 or count > 4096:
        return None, f"nvswitch_count {show(count)} is not a count"
    return count, None


# --------------------------------------------------------------------------- gpu.persistence_mode
def persistence_check(gpu_facts: Mapping, rules: Mapping, smi: bool) -> dict:
    """``gpu.persistence_mode``: every GPU's persistence mode Enabled (module docstring)."""
    rule = gpu_state_rules(rules)["persistence_mode"]["disabled"]
    sources = _sources({"disabled": rule})
    if not smi:
        return kiln_verdict.make_check(CHECK_PERSISTENCE, SKIP, detail=NO_SMI, rules=sources)
    facts = gpu_facts if isinstance(gpu_facts, Mapping) else {}
    gpus, status, why = _gpu_list(facts)
    if gpus is None:
        return kiln_verdict.make_check(CHECK_PERSISTENCE, str(status), detail=str(why), rules=sources)
    statuses: List[str] = []
    reasons: List[str] = []
    per_gpu: Dict[str, str] = {}
    disabled = 0
    for position, gpu in enumerate(gpus):
        label = _label(gpu, position)
        value = gpu.get("persistence_mode") if isinstance(gpu, Mapping) else None
        if not isinstance(gpu, Mapping):
            result, reason = INCOMPLETE, f"{label}: malformed GPU entry ({type(gpu).__name__})"
        elif value is True:
            result, reason = PASS, None
        elif value is False:
            disabled += 1
            result, reason = rule["status"], f"{label} persistence mode Disabled (enable nvidia-persistenced)"
        elif value is None:
            result, reason = INCOMPLETE, f"{label} persistence mode not reported"
        else:
            result, reason = INCOMPLETE, f"{label} persistence mode {show(value)} is not Enabled/Disabled"
        statuses.append(result)
        per_gpu[label] = result
        if reason:
            reasons.append(reason)
    status = _worst(statuses)
    detail = (f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}: persistence mode Enabled" if status == PASS
              else _join(reasons))
    return kiln_verdict.make_check(CHECK_PERSISTENCE, status, detail=detail, metric="persistence_disabled",
                                   value=disabled if all(s != INCOMPLETE for s in statuses) else None,
                                   unit="GPUs", reasons=reasons, gpus=per_gpu, rules=sources)


# --------------------------------------------------------------------------- gpu.fabric
def _manager(facts: Mapping[str, Any], rule: Mapping[str, Any]) -> Tuple[str, Optional[str], Any]:
    """(status, reason, what the facts said) of the nvidia-fabricmanager service."""
    fm = facts.get("fabric_manager")
    if fm is None:
        return INCOMPLETE, "Fabric Manager state not in the facts (kiln_gpu_facts did not report it)", None
    if not isinstance(fm, Mapping):
        return INCOMPLETE, f"fabric_manager facts malformed ({type(fm).__name__})", None
    present, active = fm.get("present"), fm.get("active")
    shown = {"present": present if isinstance(present, bool) else show(present),
             "active": active if active is None or isinstance(active, str) else show(active)}
    if present is False:
        return rule["status"], "nvidia-fabricmanager is not installed (NVSwitch board)", shown
    if present is not True:
        return INCOMPLETE, f"fabric_manager.present {show(present)} is not true/false", shown
    if active is None:
        return INCOMPLETE, "nvidia-fabricmanager installed but its state is unknown (systemctl not asked)", shown
    if not isinstance(active, str) or not active.strip() or len(active) > 40:
        return INCOMPLETE, f"fabric_manager.active {show(active)} is not a systemd state", shown
    if active.strip() == "active":
        return PASS, None, shown
    return rule["status"], f"nvidia-fabricmanager is {active.strip()} (must be active on an NVSwitch board)", shown


def _registration(gpu: Any, label: str, fabric: Mapping[str, Any]) -> Tuple[str, Optional[str], Any]:
    """(status, reason, state shown) of one GPU's fabric registration; SKIP: not reported by its architecture."""
    if not isinstance(gpu, Mapping):
        return INCOMPLETE, f"{label}: malformed GPU entry ({type(gpu).__name__})", None
    info = gpu.get("fabric")
    if info is not None and not isinstance(info, Mapping):
        return INCOMPLETE, f"{label} fabric facts malformed ({type(info).__name__})", None
    state = (info or {}).get("state")
    status = (info or {}).get("status")
    registered, in_progress = fabric["registered"], fabric["in_progress"]
    shown = {"state": state if state is None or isinstance(state, str) else show(state),
             "status": status if status is None or isinstance(status, str) else show(status)}
    if state is None:
        arch = gpu.get("architecture")
        name = arch.strip().lower() if isinstance(arch, str) and arch.strip() else None
        if name is None:
            return INCOMPLETE, (f"{label} reports no fabric state and its architecture is unknown: cannot tell "
                                "whether it should"), shown
        if name.startswith(tuple(registered["architectures"])):
            return INCOMPLETE, f"{label} ({arch.strip()}) reports no fabric registration state", shown
        return SKIP, f"{label} ({arch.strip()}) reports no fabric state (judged on Fabric Manager alone)", shown
    if not isinstance(state, str) or not state.strip() or len(state) > 60:
        return INCOMPLETE, f"{label} fabric state {show(state)} is not a state name", shown
    word = state.strip().lower()
    if word in {s.lower() for s in in_progress["states"]}:
        return in_progress["status"], f"{label} fabric registration {state.strip()} (not complete yet)", shown
    if word not in {s.lower() for s in registered["states"]}:
        return fabric["not_registered"]["status"], f"{label} fabric state {state.strip()} (not registered)", shown
    if status is None:
        return INCOMPLETE, f"{label} fabric state {state.strip()} but no status reported", shown
    if not isinstance(status, str) or not status.strip() or len(status) > 80:
        return INCOMPLETE, f"{label} fabric status {show(status)} is not a status text", shown
    if status.strip().lower() in {s.lower() for s in registered["statuses"]}:
        return PASS, None, shown
    return (fabric["not_registered"]["status"],
            f"{label} fabric state {state.strip()} with status {status.strip()} (registration failed)", shown)


def fabric_check(gpu_facts: Mapping, rules: Mapping, smi: bool) -> dict:
    """``gpu.fabric``: Fabric Manager active and every GPU registered, on NVSwitch boards (module docstring)."""
    fabric = gpu_state_rules(rules)["fabric"]
    sources = _sources(fabric)
    facts = gpu_facts if isinstance(gpu_facts, Mapping) else {}
    switches, problem = _nvswitches(facts)
    if problem is not None:
        return kiln_verdict.make_check(CHECK_FABRIC, INCOMPLETE, detail=f"GPU facts malformed: {problem}",
                                       rules=sources)
    if not switches:
        return kiln_verdict.make_check(CHECK_FABRIC, SKIP, detail="no NVSwitch on this node: no Fabric Manager "
                                       "or NVSwitch fabric registration to check", rules=sources)
    statuses: List[str] = []
    reasons: List[str] = []
    fm_status, fm_reason, fm_shown = _manager(facts, fabric["manager_inactive"])
    statuses.append(fm_status)
    if fm_reason:
        reasons.append(fm_reason)
    per_gpu: Dict[str, str] = {}
    states: Dict[str, Any] = {}
    skipped: List[str] = []
    if not smi:
        # Like the other nvidia-smi checks: without its data the registration is not judged (SKIP), but the
        # service is -- a Fabric Manager that is down still FAILs, one that cannot be asked is INCOMPLETE.
        if fm_status == PASS:
            return kiln_verdict.make_check(CHECK_FABRIC, SKIP, detail=f"nvidia-fabricmanager active; {NO_SMI}: "
                                           "the GPUs' fabric registration is not judged", rules=sources,
                                           fabric_manager=fm_shown)
        statuses.append(SKIP)
    else:
        gpus, status, why = _gpu_list(facts)
        if gpus is None:
            statuses.append(INCOMPLETE)
            reasons.append(f"{why}: the GPUs' fabric registration is unknown on an NVSwitch board")
        for position, gpu in enumerate(gpus or []):
            label = _label(gpu, position)
            result, reason, shown = _registration(gpu, label, fabric)
            per_gpu[label] = result
            states[label] = shown
            if result == SKIP:
                skipped.append(str(reason))
                continue
            statuses.append(result)
            if reason:
                reasons.append(reason)
    status = _worst(statuses)
    judged = [g for g, s in per_gpu.items() if s != SKIP]
    if status == PASS:
        detail = (f"{switches} NVSwitch(es); nvidia-fabricmanager active; "
                  + (f"{len(judged)} GPU(s) registered ({', '.join(fabric['registered']['states'])}/"
                     f"{', '.join(fabric['registered']['statuses'])})" if judged else "no GPU reports a fabric state"))
    else:
        detail = _join(reasons)
    if skipped:
        detail += "; " + "; ".join(sorted(set(skipped))[:3])
    bad = sum(1 for s in per_gpu.values() if s in (WARN, FAIL))
    return kiln_verdict.make_check(CHECK_FABRIC, status, detail=detail, metric="gpus_not_registered",
                                   value=bad if all(s != INCOMPLETE for s in per_gpu.values()) and per_gpu else None,
                                   unit="GPUs", reasons=reasons, gpus=per_gpu, fabric_states=states,
                                   fabric_manager=fm_shown, rules=sources)


# --------------------------------------------------------------------------- nvlink.errors
def _gpu_key(gpu: Mapping[str, Any]) -> Optional[str]:
    """The snapshot key of a GPU: its UUID, else ``gpu<index>``; None when it has neither."""
    uuid = gpu.get("uuid")
    if isinstance(uuid, str) and _UUID_RE.fullmatch(uuid.strip()):
        return uuid.strip()
    index = gpu.get("index")
    if is_int(index) and 0 <= index < 1_000_000:
        return f"gpu{index}"
    return None


def _link_key(value: Any) -> Optional[str]:
    if is_int(value) and 0 <= value < 10000:
        return str(value)
    if isinstance(value, str) and _LINK_RE.fullmatch(value.strip()):
        return str(int(value.strip()))
    return None


def _nvlink_links(gpu: Mapping[str, Any]) -> Optional[int]:
    nvlink = gpu.get("nvlink")
    links = nvlink.get("links") if isinstance(nvlink, Mapping) else None
    return links if is_int(links) and links >= 0 else None


def nvlink_snapshot_ok(snapshot: Any, limit: int = 4294967294) -> bool:
    """Whether *snapshot* has the shape :func:`nvlink_errors_check` returns (for callers that store it):
    ``{gpu key: {link: {counter: int in 0..limit or None}}}``."""
    if not isinstance(snapshot, Mapping):
        return False
    for key, links in snapshot.items():
        if not isinstance(key, str) or not isinstance(links, Mapping):
            return False
        for link, counters in links.items():
            if _link_key(link) is None or not isinstance(counters, Mapping):
                return False
            for name, value in counters.items():
                if not isinstance(name, str) or (value is not None and (not is_int(value) or not 0 <= value <= limit)):
                    return False
    return True


def _previous_gpu(previous: Mapping[str, Any], key: Optional[str]) -> Tuple[Any, bool]:
    """(links of *key* in *previous*, found)."""
    if key is None or key not in previous:
        return None, False
    return previous[key], True


def _previous_link(links: Mapping[str, Any], link: str) -> Any:
    if link in links:
        return links[link]
    for other, value in links.items():
        if _link_key(other) == link:
            return value
    return None


def _judge_link(label: str, link: str, counters: Any, prev: Any, have_prev: bool, rules: Mapping[str, Any],
                limit: int) -> Dict[str, Any]:
    """One link: {status, reasons, notes, snapshot (valid current values), growth {counter: delta}}."""
    out: Dict[str, Any] = {"status": PASS, "reasons": [], "notes": [], "snapshot": {}, "growth": {},
                           "judged": False}
    where = f"{label} link {link}"
    if not isinstance(counters, Mapping):
        out.update(status=INCOMPLETE, reasons=[f"{where}: counters malformed ({type(counters).__name__})"])
        return out
    names = [n for n in rules if n in counters]
    canonical = [n for n in NVLINK_COUNTERS if n in counters]
    missing = [n for n in NVLINK_COUNTERS if n not in counters] if canonical else []
    statuses: List[str] = []
    for name in missing:
        statuses.append(INCOMPLETE)
        out["reasons"].append(f"{where} {name} not reported (the driver printed "
                              f"{', '.join(canonical)})")
    if not names:
        others = sorted(str(n)[:40] for n in counters)[:6]
        if others:
            out.update(status=SKIP, notes=[f"{where}: only counters the rules do not name ({', '.join(others)})"])
        else:
            out.update(status=INCOMPLETE, reasons=[f"{where}: no error counter reported"])
        return out
    prev_counters = prev if isinstance(prev, Mapping) else None
    if have_prev and prev is not None and prev_counters is None:
        statuses.append(INCOMPLETE)
        out["reasons"].append(f"{where}: previous snapshot malformed ({type(prev).__name__}): growth not judged")
    for name in names:
        value, problem = plausible_count(counters.get(name), limit)
        if problem is not None:
            statuses.append(INCOMPLETE)
            out["reasons"].append(f"{where} {name} {problem}")
            continue
        out["snapshot"][name] = value
        out["judged"] = True
        if prev_counters is None:
            statuses.append(PASS)
            continue
        before = prev_counters.get(name)
        if before is None:
            statuses.append(PASS)
            continue
        base, bad = plausible_count(before, limit)
        if bad is not None:
            statuses.append(INCOMPLETE)
            out["reasons"].append(f"{where} {name}: previous value {bad}: growth not judged")
            continue
        growth = value - int(base or 0)
        if growth < 0:
            statuses.append(PASS)
            out["notes"].append(f"{where} {name} went down {base} -> {value} (counters reset: driver reload, "
                                "GPU reset or reboot): new baseline, not judged")
            continue
        if growth:
            out["growth"][name] = growth
        rule = rules[name]
        if growth > rule["max_growth"]:
            statuses.append(rule["status"])
            out["reasons"].append(f"{where} {name} +{growth} ({base} -> {value}) > {rule['max_growth']}")
        else:
            statuses.append(PASS)
    out["status"] = _worst(statuses)
    return out


def nvlink_errors_check(gpu_facts: Mapping, previous: Any, rules: Mapping, smi: bool) -> tuple[dict, dict]:
    """``nvlink.errors`` and the snapshot to keep as the next *previous* (module docstring).

    The snapshot is ``{gpu key: {"<link>": {counter: value}}}`` (gpu key: the UUID, else
    ``gpu<index>``) with the values read now that are valid counters; a GPU or link that could
    not be read now keeps its *previous* entry, so a failed read never loses the baseline. Whether
    to store it is the caller's choice: the burn-in keeps the snapshot of a passing run only, so
    growth keeps showing until it is dealt with; kiln-health keeps each run's.
    """
    counter_rules = gpu_state_rules(rules)
    limit = counter_rules["counter_max"]
    nv_rules = counter_rules["nvlink_errors"]
    sources = _sources(nv_rules)
    facts = gpu_facts if isinstance(gpu_facts, Mapping) else {}
    prev_ok = previous is None or isinstance(previous, Mapping)
    prev_map: Mapping[str, Any] = previous if isinstance(previous, Mapping) else {}
    kept_prev = {str(k): v for k, v in prev_map.items() if isinstance(k, str)}

    def done(status: str, detail: str, snapshot: Optional[Dict[str, Any]] = None, **fields: Any
             ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        check = kiln_verdict.make_check(CHECK_NVLINK_ERRORS, status, detail=detail, metric="max_growth",
                                        unit="errors", rules=sources, **fields)
        return check, snapshot if snapshot is not None else (dict(kept_prev) if nvlink_snapshot_ok(kept_prev, limit)
                                                             else {})

    if not smi:
        return done(SKIP, NO_SMI)
    switches, problem = _nvswitches(facts)
    gpus, status, why = _gpu_list(facts)
    if problem is not None:
        return done(INCOMPLETE, f"GPU facts malformed: {problem}")
    if gpus is None:
        return done(str(status), str(why))
    board_nvlink = bool(switches)  # NVSwitches on PCI; a GPU passed through to a VM alone sees none
    has_nvlink = board_nvlink or any(
        isinstance(g, Mapping) and ((_nvlink_links(g) or 0) > 0
                                    or (isinstance(g.get("nvlink_errors"), Mapping) and bool(g["nvlink_errors"])))
        for g in gpus)
    if not has_nvlink:
        return done(SKIP, "no NVLink on this board")

    statuses: List[str] = []
    reasons: List[str] = []
    notes: List[str] = []
    per_gpu: Dict[str, str] = {}
    growth: Dict[str, Dict[str, Dict[str, int]]] = {}
    snapshot: Dict[str, Any] = {}
    links_read = 0
    if not prev_ok:
        statuses.append(INCOMPLETE)
        reasons.append(f"previous snapshot malformed ({type(previous).__name__}): growth not judged; the current "
                       "reading becomes the baseline")
    for position, gpu in enumerate(gpus):
        label = _label(gpu, position)
        if not isinstance(gpu, Mapping):
            per_gpu[label] = INCOMPLETE
            statuses.append(INCOMPLETE)
            reasons.append(f"{label}: malformed GPU entry ({type(gpu).__name__})")
            continue
        key = _gpu_key(gpu)
        links = gpu.get("nvlink_errors")
        expected_links = _nvlink_links(gpu)
        prev_links, have_prev = _previous_gpu(prev_map, key)
        if key is not None and have_prev:
            snapshot[key] = prev_links  # kept unless read now (below)
        if links is None or (isinstance(links, Mapping) and not links):
            if expected_links is None or expected_links > 0:
                # links > 0, or unknown on a board where NVLink exists: the counters were not read
                per_gpu[label] = INCOMPLETE
                statuses.append(INCOMPLETE)
                reasons.append(f"{label}: NVLink error counters not read"
                               + (f" ({expected_links} links)" if expected_links else ""))
            elif board_nvlink:
                per_gpu[label] = INCOMPLETE
                statuses.append(INCOMPLETE)
                reasons.append(f"{label}: no NVLink reported on an NVSwitch board: error counters not read")
            else:
                per_gpu[label] = SKIP
            continue
        if not isinstance(links, Mapping):
            per_gpu[label] = INCOMPLETE
            statuses.append(INCOMPLETE)
            reasons.append(f"{label}: nvlink_errors malformed ({type(links).__name__})")
            continue
        if key is None:
            per_gpu[label] = INCOMPLETE
            statuses.append(INCOMPLETE)
            reasons.append(f"{label}: no UUID and no index: its counters cannot be matched with a baseline")
            continue
        prev_gpu_ok = not have_prev or prev_links is None or isinstance(prev_links, Mapping)
        gpu_statuses: List[str] = []
        gpu_snapshot: Dict[str, Any] = {   # the baseline's well-formed links, replaced below by what is read now
            str(link): dict(counters) for link, counters in (prev_links.items() if isinstance(prev_links, Mapping) else ())
            if _link_key(link) == link and nvlink_snapshot_ok({"gpu": {link: counters}}, limit)}
        if not prev_gpu_ok:
            gpu_statuses.append(INCOMPLETE)
            reasons.append(f"{label}: previous snapshot for {key} malformed ({type(prev_links).__name__}): "
                           "growth not judged")
        elif not have_prev and previous is not None and prev_ok:
            notes.append(f"{label}: no baseline for {key[:40]} (new or swapped GPU): baseline recorded")
        for raw_link, counters in links.items():
            link = _link_key(raw_link)
            if link is None:
                gpu_statuses.append(INCOMPLETE)
                reasons.append(f"{label}: link {show(raw_link)} is not a link number")
                continue
            prev_link = _previous_link(prev_links, link) if isinstance(prev_links, Mapping) else None
            judged = _judge_link(label, link, counters, prev_link,
                                 have_prev and prev_gpu_ok and isinstance(prev_links, Mapping) and prev_link is not None,
                                 nv_rules, limit)
            if not prev_gpu_ok:
                judged["status"] = INCOMPLETE if judged["status"] != SKIP else SKIP
            gpu_statuses.append(judged["status"])
            reasons.extend(judged["reasons"])
            notes.extend(judged["notes"])
            if judged["growth"]:
                growth.setdefault(label, {})[link] = judged["growth"]
            if judged["snapshot"]:
                merged = dict(gpu_snapshot.get(link) or {}) if isinstance(gpu_snapshot.get(link), Mapping) else {}
                merged.update(judged["snapshot"])
                gpu_snapshot[link] = merged
            if judged["judged"]:
                links_read += 1
        judged_statuses = [s for s in gpu_statuses if s != SKIP]
        per_gpu[label] = _worst(judged_statuses) if judged_statuses else SKIP
        statuses.extend(judged_statuses)
        if judged_statuses or gpu_snapshot:
            snapshot[key] = gpu_snapshot
    if not nvlink_snapshot_ok(snapshot, limit):
        snapshot = {k: v for k, v in snapshot.items() if nvlink_snapshot_ok({k: v}, limit)}
    biggest = max((d for links in growth.values() for counters in links.values() for d in counters.values()),
                  default=0)
    if not statuses:
        why = "; ".join(sorted(set(notes))[:3]) or "no GPU reports NVLink error counters"
        return done(SKIP, why, snapshot, gpus=per_gpu)
    status = _worst(statuses)
    if status == PASS:
        if previous is None:
            gpus_read = sum(1 for s in per_gpu.values() if s == PASS)
            detail = f"baseline recorded: {links_read} link(s) on {gpus_read} GPU(s)"
        else:
            grew = sum(len(links) for links in growth.values())
            detail = (f"{links_read} link(s): no counter grew above its rule"
                      + (f" ({grew} link(s) grew within it, max +{biggest})" if grew else " (no growth)"))
    else:
        detail = _join(reasons)
    if notes:
        detail += "; " + _join(sorted(set(notes)))
    return done(status, detail, snapshot, value=biggest if status != INCOMPLETE else None, reasons=reasons,
                notes=notes, gpus=per_gpu, growth=growth,
                baseline="recorded" if previous is None else ("unusable" if not prev_ok else "compared"))
