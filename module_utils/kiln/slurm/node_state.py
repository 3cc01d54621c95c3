# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one rule for every Slurm drain and resume kiln makes: nobody's drain but kiln's is ever changed.

Pure functions, standard library only. Importable as ``kiln.slurm.node_state`` and as
``ansible.module_utils.kiln.slurm.node_state``. Every caller reads ``sinfo --noheader --Node
--format '%N|%T|%E'`` immediately before it acts and lets :func:`plan` (or, per node,
:func:`decide`) say what to change:

* the ``node_state`` entry point of role slurm_controller (filter ``kiln_slurm_node_plan``):
  the rolling upgrade's batch drain and resume, the burn-in's FAIL drain and restore,
  ``playbooks/slurm_node_state.yml``;
* the burn-in's resume of drained swap targets inside its reservation (the plan,
  ``kiln_burnin_pair_phase.pair_start``, and the re-decision right before the scontrol in
  the burn-in's final phase, ``roles/burnin/tasks/final.yml``), and its verdict actions (``kiln_burnin.plan_actions``);
* the burn-in lock's restore of an interrupted run's drains (``library/kiln_burnin_lock.py``).

kiln's drains are those whose reason starts with one of :data:`KILN_REASON_PREFIXES`
(``BURNIN:``, ``UPGRADE:``, ``HEALTH:``). Anything else -- an RMA ticket, "bad PSU", Slurm's own "Not
responding" -- is a person's (or Slurm's) reason, and the node is **held**: reported
``held by operator: <reason>``, never re-drained with another reason, never resumed.

Drain (also a restore: a drain with the reason recorded before kiln lifted it), in order:

1. the node is drained (or down, or in a state kiln does not know) with exactly the
   requested reason: nothing to do (*unchanged*);
2. its reason is kiln's: drained again with the new reason (*change*);
3. it has any other reason: *held*;
4. no reason: a node in service (idle, allocated, mixed, ...) is drained (*change*); a
   drained, down or unrecognised node without a reason is *held* (nobody knows whose it is).

Resume (only kiln's drains; *prefix*, when given, narrows to one of kiln's prefixes), in order:

1. the node is not drained, down or failed: nothing to lift (*unchanged*);
2. it is drained with exactly the reason the caller recorded for it under an explicit
   operator opt-in (*operator_reason*, the burn-in's ``kiln_burnin_override_operator_drain``):
   *change* -- the caller has journalled that reason and puts it back unless the node passes;
3. its reason is not kiln's (or it has none): *held*;
4. its state is one kiln does not know: *left* alone (an unknown state is never resumed);
5. its reason is kiln's but lacks *prefix*: *kept* (e.g. the upgrade leaves a ``BURNIN:`` drain);
6. otherwise *change*.

A node sinfo does not list is *unknown* (the caller fails or reports it).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .sinfo import AVAILABLE, UNRECOGNISED, condition, parse_sinfo, resumable

__all__ = [
    "ACTIONS",
    "BURNIN_REASON_PREFIX",
    "CHANGE",
    "DRAIN",
    "HEALTH_REASON_PREFIX",
    "HELD",
    "KEPT",
    "KILN_REASON_PREFIXES",
    "LEFT",
    "OUTCOMES",
    "RESUME",
    "UNCHANGED",
    "UNKNOWN",
    "UPGRADE_REASON_PREFIX",
    "decide",
    "held_why",
    "kiln_reason",
    "plan",
]

#: The start of the burn-in's drain reasons (a node that failed, the swap targets it works around).
BURNIN_REASON_PREFIX = "BURNIN:"
#: The start of the rolling upgrade's drain reasons (a batch under upgrade).
UPGRADE_REASON_PREFIX = "UPGRADE:"
#: The start of kiln-health's drain reasons (a node that failed a health check between jobs, docs/health.md).
HEALTH_REASON_PREFIX = "HEALTH:"
#: Drain reasons kiln sets: the burn-in's, the rolling upgrade's and kiln-health's. Only these are ever
#: replaced or lifted (kiln-health itself acts on HEALTH: only; the upgrade holds a HEALTH: drain).
KILN_REASON_PREFIXES: Tuple[str, ...] = (BURNIN_REASON_PREFIX, UPGRADE_REASON_PREFIX, HEALTH_REASON_PREFIX)

DRAIN, RESUME = "drain", "resume"
ACTIONS = (DRAIN, RESUME)
CHANGE, UNCHANGED, HELD, KEPT, LEFT, UNKNOWN = "change", "unchanged", "held", "kept", "left", "unknown"
#: Every outcome :func:`decide` returns.
OUTCOMES = (CHANGE, UNCHANGED, HELD, KEPT, LEFT, UNKNOWN)


def kiln_reason(reason: Any, prefixes: Sequence[str] = KILN_REASON_PREFIXES) -> bool:
    """True when a Slurm reason is one kiln set (it starts with one of *prefixes*), not a person's: the
    one test of "is this drain kiln's" (the burn-in's verdicts, the rolling upgrade's plan)."""
    return str(reason or "").startswith(tuple(prefixes))


def held_why(reason: Any) -> str:
    """The one wording of a node kiln leaves alone because of someone else's reason."""
    return f"held by operator: {str(reason or '').strip() or 'no reason'}"


def decide(row: Optional[Mapping[str, Any]], action: str, reason: str = "", prefix: str = "",
           operator_reason: Optional[str] = None,
           prefixes: Sequence[str] = KILN_REASON_PREFIXES) -> Tuple[str, str]:
    """``(outcome, why)`` for one node from its sinfo row read just now (``{state, reason}`` or None).

    *action* ``drain`` (with *reason*, required) or ``resume`` (*prefix*: empty for any of
    *prefixes*, else one that starts with one of them; *operator_reason*: the exact reason of
    a person's drain the caller may lift under an explicit opt-in). Raises ValueError on a
    bad action, an empty drain reason or a resume prefix that is not kiln's.
    """
    if action not in ACTIONS:
        raise ValueError(f"action must be drain or resume, got {action!r}")
    if action == DRAIN and not str(reason or "").strip():
        raise ValueError("a drain needs a reason")
    if action == RESUME and prefix and not kiln_reason(prefix, prefixes):
        raise ValueError(f"a resume lifts only kiln's drains: prefix {prefix!r} does not start with "
                         + " or ".join(prefixes))
    if row is None:
        return UNKNOWN, "Slurm does not list this node"
    state = str(row.get("state") or "")
    current = str(row.get("reason") or "")
    kind = condition(state)
    mine = kiln_reason(current, prefixes)
    if action == DRAIN:
        if current == reason and (resumable(state) or kind == UNRECOGNISED):
            return UNCHANGED, f"{state} with this reason already"
        if mine:
            return CHANGE, f"{state or 'no state'} ({current}): kiln's drain, drained with the new reason"
        if current:
            return HELD, held_why(current)
        if kind == AVAILABLE:
            return CHANGE, f"{state}: in service, drained"
        return HELD, held_why(current) + f" ({state or 'no state'}; kiln drains only a node in service or its own)"
    if not resumable(state) and kind != UNRECOGNISED:
        return UNCHANGED, f"{state}: not drained, nothing to resume"
    if operator_reason is not None and current == operator_reason and resumable(state):
        return CHANGE, f"{state} ({current or 'no reason'}): a person's drain, lifted by explicit opt-in"
    if not mine:
        return HELD, held_why(current)
    if kind == UNRECOGNISED:
        return LEFT, f"{state}: a state kiln does not know, never resumed"
    if prefix and not current.startswith(prefix):
        return KEPT, f"{current}: kiln's drain without the prefix {prefix}, kept drained"
    return CHANGE, f"{state} ({current}): kiln's drain, resumed"


def plan(sinfo: Union[Mapping[str, Mapping[str, Any]], Iterable[Any], None], nodes: Iterable[Any], action: str,
         reason: str = "", prefix: str = "", operator_drains: Optional[Mapping[str, Any]] = None,
         prefixes: Sequence[str] = KILN_REASON_PREFIXES) -> Dict[str, Any]:
    """Decide a drain or resume of *nodes* from sinfo read just now (lines, or :func:`parse_sinfo` rows).

    Returns ``{change, unchanged, held, kept, left, unknown, unrecognised, why}``: the nodes to
    update (in request order, each once); those already as asked; ``held`` ``{node: reason}``
    (someone else's reason: never touched); ``kept`` ``"node (reason)"`` (kiln's drain without
    the resume's prefix); ``left`` (a resume of an unknown state); ``unknown`` (not listed);
    ``unrecognised`` ``"node (state)"`` for every requested node whose state kiln does not know;
    ``why`` ``{node: text}`` for every node. *operator_drains*: ``{node: exact reason}`` a resume
    may lift (explicit opt-in only). Raises ValueError as :func:`decide` does.
    """
    rows = sinfo if isinstance(sinfo, Mapping) else parse_sinfo(sinfo)
    allowed = {str(k): str(v if v is not None else "") for k, v in (operator_drains or {}).items()}
    out: Dict[str, Any] = {CHANGE: [], UNCHANGED: [], HELD: {}, KEPT: [], LEFT: [], UNKNOWN: [],
                           "unrecognised": [], "why": {}}
    seen: List[str] = []
    for node in [nodes] if isinstance(nodes, (str, bytes)) else nodes or []:
        name = str(node)
        if name in seen:
            continue
        seen.append(name)
        row = rows.get(name)
        outcome, why = decide(row, action, reason, prefix, allowed.get(name), prefixes)
        out["why"][name] = why
        if row is not None and condition(row.get("state")) == UNRECOGNISED:
            out["unrecognised"].append(f"{name} ({row.get('state') or 'no state'})")
        if outcome == HELD:
            out[HELD][name] = str(row.get("reason") or "") if row is not None else ""
        elif outcome == KEPT:
            out[KEPT].append(f"{name} ({(row or {}).get('reason') or 'none'})")
        else:
            out[outcome].append(name)
    return out
