# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one parser of ``sinfo --noheader --Node --format '%N|%T|%E'`` rows and Slurm node states.

Pure functions, standard library only. Importable as ``kiln_sinfo``, as
``ansible.module_utils.kiln.slurm.sinfo`` (modules, other module_utils) and from the filter
plugins (docs/architecture.md "Python layout"). Used by the burn-in's
pair phase (``kiln_burnin_pair_phase.pair_start``) and by the ``kiln_slurm_node_plan`` filter
(drain/resume through scontrol).

A row is ``node|state|reason``. The state is what sinfo prints for ``%T`` (extended) or
``%t`` (compact): one or more base states joined by ``+`` (``mixed+drain``,
``idle+cloud``), each optionally followed by the flag suffixes of sinfo(1), "NODE STATE
CODES":

====== ==========================================================================
``*``  not responding (no jobs are allocated to it; it goes DOWN if it stays so)
``~``  powered off
``#``  powering up or being configured
``!``  pending power down
``%``  powering down
``$``  in a reservation with the MAINT flag
``@``  pending reboot
``^``  reboot issued
``-``  planned by the backfill scheduler for a higher-priority job
====== ==========================================================================

Every state kiln knows is in :data:`BASE_STATES` (long and compact spellings). A node's
*condition* (:func:`condition`) is, in this order of precedence:

``down``
    cannot run a test now: DOWN, FUTURE, UNKNOWN, INVAL, NOT_RESPONDING, REBOOT_ISSUED,
    the power-down/up states, or a not-responding, power or reboot-issued suffix
    (``* ~ # ! % ^``);
``unrecognised``
    a base state kiln does not know, or no state at all: reported, never treated as idle
    or usable;
``drained``
    DRAINED, DRAINING, DRAIN, FAIL, FAILING (drain flag set);
``available``
    anything else kiln knows (IDLE, MIXED, ALLOCATED, COMPLETING, RESERVED, MAINT, ...).

:func:`resumable` is what ``scontrol update State=RESUME`` undoes: a drain, down or fail
state (including the power-down states). Garbage rows (no two ``|``, no node name) are
skipped; the first row of a node wins; a reason of ``none`` is empty.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

__all__ = [
    "AVAILABLE",
    "BASE_STATES",
    "CONDITIONS",
    "DOWN",
    "DRAINED",
    "FLAGS",
    "UNRECOGNISED",
    "condition",
    "parse_sinfo",
    "parse_state",
    "resumable",
]

DOWN = "down"
UNRECOGNISED = "unrecognised"
DRAINED = "drained"
AVAILABLE = "available"
#: Every value :func:`condition` returns, most severe first.
CONDITIONS = (DOWN, UNRECOGNISED, DRAINED, AVAILABLE)

#: sinfo's state suffixes (sinfo(1), NODE STATE CODES) -> what they mean.
FLAGS: Dict[str, str] = {
    "*": "not_responding",
    "~": "powered_off",
    "#": "powering_up",
    "!": "pending_power_down",
    "%": "powering_down",
    "$": "maint_reservation",
    "@": "pending_reboot",
    "^": "reboot_issued",
    "-": "planned",
}
_UNAVAILABLE_FLAGS = frozenset({"*", "~", "#", "!", "%", "^"})

#: Base states (long %T and compact %t spellings) -> their condition.
BASE_STATES: Dict[str, str] = {
    # usable (by a burn-in that reserved the node)
    "idle": AVAILABLE, "mixed": AVAILABLE, "mix": AVAILABLE, "allocated": AVAILABLE, "alloc": AVAILABLE,
    "completing": AVAILABLE, "comp": AVAILABLE, "reserved": AVAILABLE, "resv": AVAILABLE,
    "maint": AVAILABLE, "planned": AVAILABLE, "plnd": AVAILABLE, "perfctrs": AVAILABLE, "npc": AVAILABLE,
    "cloud": AVAILABLE, "blocked": AVAILABLE, "block": AVAILABLE, "reboot_requested": AVAILABLE,
    "power_up": AVAILABLE,
    # drain flag set (a person or a burn-in took it out of service)
    "drained": DRAINED, "draining": DRAINED, "drain": DRAINED, "drng": DRAINED,
    "fail": DRAINED, "failing": DRAINED, "failg": DRAINED,
    # cannot run anything now
    "down": DOWN, "unknown": DOWN, "unk": DOWN, "future": DOWN, "futr": DOWN, "inval": DOWN,
    "not_responding": DOWN, "no_respond": DOWN, "reboot_issued": DOWN, "boot": DOWN,
    "power_down": DOWN, "powered_down": DOWN, "powering_down": DOWN, "powering_up": DOWN,
    "pow_dn": DOWN, "pow_up": DOWN,
}

#: Base states ``scontrol update State=RESUME`` acts on (drain, down, fail).
_RESUMABLE = frozenset({"drained", "draining", "drain", "drng", "fail", "failing", "failg", "down",
                        "power_down", "powered_down", "powering_down", "pow_dn"})
_MAX_FIELD = 4096


def parse_state(text: Any) -> Dict[str, Any]:
    """``'mixed+drain*'`` -> ``{state: 'mixed+drain*', bases: ['mixed', 'drain'], flags: ['*'], unknown: []}``.

    *state* is the text stripped and lower-cased (what kiln reports); *flags* the suffix
    characters (:data:`FLAGS`); *unknown* the base states kiln does not know, in order.
    Never raises.
    """
    state = str(text if text is not None else "").strip().lower()[:_MAX_FIELD]
    bases: List[str] = []
    flags: List[str] = []
    unknown: List[str] = []
    for part in state.split("+"):
        word = part.rstrip("".join(FLAGS))
        for char in part[len(word):]:
            if char not in flags:
                flags.append(char)
        word = word.strip()
        if not word:
            continue  # ``alloc+`` or a bare suffix: nothing to name (no base at all is unrecognised)
        bases.append(word)
        if word not in BASE_STATES:
            unknown.append(word)
    return {"state": state, "bases": bases, "flags": flags, "unknown": unknown}


def condition(state: Any) -> str:
    """The node's condition from its state text: down, unrecognised, drained or available."""
    parsed = parse_state(state)
    kinds = {BASE_STATES.get(b) for b in parsed["bases"]}
    if DOWN in kinds or any(f in _UNAVAILABLE_FLAGS for f in parsed["flags"]):
        return DOWN
    if parsed["unknown"] or not parsed["bases"]:
        return UNRECOGNISED
    if DRAINED in kinds:
        return DRAINED
    return AVAILABLE


def resumable(state: Any) -> bool:
    """True when a resume acts on the node: a drain, down or fail state (known states only)."""
    parsed = parse_state(state)
    return not parsed["unknown"] and any(b in _RESUMABLE for b in parsed["bases"])


def parse_sinfo(lines: Optional[Iterable[Any]]) -> Dict[str, Dict[str, str]]:
    """``sinfo --noheader --Node --format '%N|%T|%E'`` -> ``{node: {state, reason}}``.

    *state* lower-cased and stripped (:func:`condition` classifies it); *reason* stripped,
    ``none`` -> ``""``. Rows without two ``|`` or without a node name are skipped; the
    first row of a node wins (sinfo lists a node once per partition). Never raises.
    """
    out: Dict[str, Dict[str, str]] = {}
    for line in lines or []:
        parts = str(line).split("|", 2)
        if len(parts) == 3 and parts[0].strip():
            reason = parts[2].strip()
            out.setdefault(parts[0].strip(), {"state": parts[1].strip().lower(),
                                              "reason": "" if reason == "none" else reason})
    return out
