# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling upgrade's decisions (playbooks/upgrade.yml), as pure functions.

Standard library only; importable as ``kiln.upgrade.rollout`` and as
``ansible.module_utils.kiln.upgrade.rollout``; the filters are the section at the end
(registered by filter_plugins/kiln_upgrade_filters.py).

* :func:`stack_fingerprint` -- the short id of a resolved stack (what a node's stack
  record, ``/var/lib/kiln/stack/applied.json``, carries).
* :func:`batch_size` -- ``kiln_upgrade_batch`` (a count or a percentage) checked and
  turned into a number of nodes.
* :func:`rollback_target` and :func:`next_record` -- the stack a rollback returns a node to,
  remembered in the node's records across re-runs (an applied record written by a rollback
  carries ``rolled_back_from``), so a rollback run again finds the node done instead of
  "rolling it back" to the stack it left.
* :func:`plan` -- which nodes are done, which are to do (and in what order), which are
  held by a person or cannot be reached, from each node's stack record and Slurm state.
  Resumable by construction: the plan is made from what the nodes and Slurm say now.
* :func:`account` -- before a batch changes anything: every node of the earlier batches
  verified (or failed within ``kiln_upgrade_max_fail_percentage``), every node of this batch
  answering; a node that dropped out of its batch is "unreachable during batch N".
* :func:`batch_verdicts` -- each node of a batch from its burn-in summary; a missing or
  unreadable summary is INCOMPLETE for every node, never PASS.
* :func:`summary` -- the report: every node with its state (done, upgraded, failed,
  unreachable, held, not upgraded, not started) and why; ``complete`` only when every node to
  do was upgraded.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..errors import FilterError, as_filter
from ..slurm.node_state import HEALTH_REASON_PREFIX, UPGRADE_REASON_PREFIX, kiln_reason
from ..slurm.sinfo import DOWN, DRAINED, UNRECOGNISED, condition, parse_sinfo

#: The drain reason of a batch under upgrade (a kiln drain: kiln_node_state.KILN_REASON_PREFIXES).
REASON_PREFIX = UPGRADE_REASON_PREFIX
#: How a node of the rollout ends up.
DONE, TODO, HELD, UNREACHABLE = "done", "todo", "held", "unreachable"
#: A node's kiln_upgrade_status.state in a batch: set when its batch starts (before its drain),
#: replaced by upgraded / failed when the batch ends for it. A node still "started" after its
#: batch dropped out of it (unreachable): it is never taken for verified.
STARTED, UPGRADED, WOULD_UPGRADE, FAILED, NOT_STARTED = "started", "upgraded", "would upgrade", "failed", "not started"
#: The states that verify a node of an earlier batch ("would upgrade": the same, in check mode).
VERIFIED = (UPGRADED, WOULD_UPGRADE)
#: The key an applied record written by a rollback carries: the fingerprint it rolled back from.
ROLLED_BACK_FROM = "rolled_back_from"


class UpgradeConfigError(ValueError):
    """A variable of the rolling upgrade is wrong; the message names it and the fix."""


def stack_fingerprint(stack: Any) -> str:
    """12 hex of sha256 over the canonical JSON of a resolved stack (key order does not matter)."""
    if not isinstance(stack, Mapping) or not stack:
        raise UpgradeConfigError(f"a stack to fingerprint must be a non-empty mapping, not {type(stack).__name__}")
    text = json.dumps(stack, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def batch_size(value: Any, total: int) -> int:
    """kiln_upgrade_batch: a whole number >= 1 or a percentage "1%".."100%" of *total* nodes (at least 1)."""
    if isinstance(value, bool):
        raise UpgradeConfigError(f"kiln_upgrade_batch must be a count (e.g. 1) or a percentage (e.g. '10%'), not {value!r}")
    if isinstance(value, int):
        count = value
    elif isinstance(value, str) and re.fullmatch(r"\d{1,3}%", value.strip()):
        pct = int(value.strip()[:-1])
        if not 1 <= pct <= 100:
            raise UpgradeConfigError(f"kiln_upgrade_batch {value!r}: a percentage must be 1% to 100%")
        return max(1, math.ceil(pct * max(int(total), 0) / 100))
    elif isinstance(value, str) and re.fullmatch(r"\d{1,6}", value.strip()):
        count = int(value.strip())
    else:
        raise UpgradeConfigError(
            f"kiln_upgrade_batch must be a count (e.g. 1) or a percentage (e.g. '10%'), not {value!r} "
            f"({'str' if isinstance(value, str) else type(value).__name__}); a YAML float such as 0.1 is not a percentage -- write '10%'")
    if count < 1:
        raise UpgradeConfigError(f"kiln_upgrade_batch must be at least 1, not {count}")
    return count


def read_record(text: Any) -> Optional[Dict[str, Any]]:
    """A JSON document read from a node or the controller (a stack record, a burn-in summary), or
    None when it is empty, not JSON or not an object -- never an exception: the caller fails closed."""
    if isinstance(text, Mapping):
        return dict(text)
    if not isinstance(text, (str, bytes)) or not str(text if isinstance(text, str) else text.decode("utf-8", "replace")).strip():
        return None
    try:
        value = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def node_info(hostvars: Mapping[str, Any]) -> Dict[str, Any]:
    """What :func:`plan` needs of one node, from the facts the plan play set on it."""
    def get(key: str, default: Any) -> Any:
        try:
            return hostvars.get(key, default)
        except Exception:  # a fact that cannot be templated is treated as absent  # noqa: BLE001
            return default
    return {"reachable": bool(get("__upgrade_reachable", False)), "intended": get("__upgrade_intended", None),
            "applied": get("__upgrade_applied", None), "previous": get("__upgrade_previous", None)}


def _record_fp(record: Any) -> Optional[str]:
    if isinstance(record, Mapping) and isinstance(record.get("fingerprint"), str):
        return record["fingerprint"]
    return None


def rollback_target(applied: Any, previous: Any) -> Optional[Dict[str, Any]]:
    """The record of the stack a rollback returns this node to, or None (nothing to roll back to).

    A node whose applied record was written by a rollback (it carries ``rolled_back_from``) is
    already on the rollback's target: that record is the target, so a rollback run again --
    after an interruption or by mistake -- finishes or confirms it and never moves the node back
    to the stack it left (which its previous.json now holds). Otherwise the target is the
    previous record, the stack before the node's last change.
    """
    if _record_fp(applied) is not None and isinstance(applied.get(ROLLED_BACK_FROM), str) and applied[ROLLED_BACK_FROM]:
        return dict(applied)
    if _record_fp(previous) is not None:
        return dict(previous)
    return None


def next_record(new: Mapping[str, Any], old: Any = None, rollback: bool = False) -> Dict[str, Any]:
    """The applied record roles/stack_record writes: *new* (``{fingerprint, stack, resolved}``) and,
    when the write is a rollback that changes the fingerprint, ``rolled_back_from`` (the fingerprint
    it left). An unchanged fingerprint keeps the old record's ``rolled_back_from``: the node's last
    change is still that rollback, whatever converges it again. A change that is not a rollback
    drops it.
    """
    if _record_fp(new) is None:
        raise UpgradeConfigError(f"a stack record needs a fingerprint, not {type(new).__name__} {new!r:.80}")
    out = {k: v for k, v in new.items() if k != ROLLED_BACK_FROM}
    old_fp = _record_fp(old)
    if old_fp is None:
        return out
    if old_fp == out["fingerprint"]:
        if isinstance(old.get(ROLLED_BACK_FROM), str) and old[ROLLED_BACK_FROM]:
            out[ROLLED_BACK_FROM] = old[ROLLED_BACK_FROM]
    elif rollback:
        out[ROLLED_BACK_FROM] = old_fp
    return out


def plan(nodes: Sequence[str], info: Mapping[str, Mapping[str, Any]],
         sinfo: Optional[Mapping[str, Mapping[str, str]]] = None,
         slurm_names: Optional[Mapping[str, str]] = None, batch: Any = 1,
         rollback: bool = False) -> Dict[str, Any]:
    """The rollout from what is true now.

    *info*: ``{node: {"reachable": bool, "intended": fingerprint, "applied": record or None,
    "previous": record or None}}``. With *rollback*, a node's intended stack is its
    :func:`rollback_target` (``intended`` is not read): a node a rollback already moved is done
    (or, drained by kiln, continued on that stack), never moved back.
    *sinfo*: ``kiln_sinfo.parse_sinfo`` rows (None: no Slurm). A node is

    * ``unreachable`` -- not reachable, or down / in a state kiln does not know in Slurm (and, in a
      rollback, a node with nothing to roll back to);
    * ``held`` -- drained by a person (a reason kiln did not set): never touched;
    * ``done`` -- its applied stack is the intended one and it is not drained by kiln;
    * ``todo`` -- anything else. Nodes kiln drained (an interrupted or failed batch) come first,
      then the others in inventory order.
    """
    names = dict(slurm_names or {})
    out: Dict[str, Any] = {DONE: [], TODO: [], HELD: [], UNREACHABLE: [], "why": {}}
    first: List[str] = []
    later: List[str] = []
    for node in nodes:
        entry = info.get(node) or {}
        if not entry.get("reachable"):
            out[UNREACHABLE].append(node)
            out["why"][node] = "unreachable: not upgraded"
            continue
        row = None if sinfo is None else sinfo.get(names.get(node, node))
        kiln_drained = False
        if sinfo is not None:
            if row is None:
                out[UNREACHABLE].append(node)
                out["why"][node] = "Slurm does not list this node: not upgraded"
                continue
            state = condition(row.get("state"))
            if state in (DOWN, UNRECOGNISED):
                out[UNREACHABLE].append(node)
                out["why"][node] = f"{row.get('state')} in Slurm ({row.get('reason') or 'no reason'}): not upgraded"
                continue
            if state == DRAINED:
                if not kiln_reason(row.get("reason")):
                    out[HELD].append(node)
                    out["why"][node] = (f"held by operator: {row.get('reason') or 'no reason'}; left alone: "
                                        "resume it and re-run to upgrade it")
                    continue
                if kiln_reason(row.get("reason"), (HEALTH_REASON_PREFIX,)):
                    out[HELD].append(node)
                    out["why"][node] = (f"drained by kiln-health ({row.get('reason')}): a fault, left alone; repair "
                                        "it, run the burn-in's swap mode on it, then re-run to upgrade it")
                    continue
                kiln_drained = True
        applied = _record_fp(entry.get("applied"))
        if rollback:
            target = rollback_target(entry.get("applied"), entry.get("previous"))
            if target is None:
                out[UNREACHABLE].append(node)
                out["why"][node] = "no previous stack record: nothing to roll back to, not changed"
                continue
            intended = target["fingerprint"]
        else:
            intended = entry.get("intended")
        if applied == intended and not kiln_drained:
            out[DONE].append(node)
            out["why"][node] = f"on stack {intended} and in service" + (" (rolled back)" if rollback else "")
        elif kiln_drained:
            first.append(node)
            out["why"][node] = (f"drained by kiln ({row.get('reason') if row else ''}): continued first, "
                                f"stack {applied or 'not recorded'} -> {intended}")
        else:
            later.append(node)
            out["why"][node] = f"stack {applied or 'not recorded'} -> {intended}" + (" (rollback)" if rollback else "")
    out[TODO] = first + later
    out["order"] = list(nodes)
    out["rollback"] = bool(rollback)
    out["batch"] = batch_size(batch, len(out[TODO]) or 1)
    out["batches"] = [out[TODO][i:i + out["batch"]] for i in range(0, len(out[TODO]), out["batch"])]
    return out


def batch_verdicts(batch: Sequence[str], summary: Any) -> Dict[str, Dict[str, str]]:
    """``{node: {status, why}}`` for the nodes of a batch from the burn-in's summary.json (parsed).

    A node the summary does not judge, or a summary that is missing or not a burn-in
    summary, is INCOMPLETE -- a batch passes only on a PASS for each of its nodes.
    """
    nodes = summary.get("nodes") if isinstance(summary, Mapping) else None
    out: Dict[str, Dict[str, str]] = {}
    for node in batch:
        record = nodes.get(node) if isinstance(nodes, Mapping) else None
        if not isinstance(record, Mapping) or record.get("status") not in ("PASS", "WARN", "FAIL", "INCOMPLETE", "SKIP"):
            out[node] = {"status": "INCOMPLETE", "why": "no burn-in verdict for this node (summary missing or unreadable)"}
            continue
        status = str(record["status"])
        bad = [f"{c.get('id')} {c.get('status')}" for c in record.get("checks") or []
               if isinstance(c, Mapping) and c.get("status") in ("FAIL", "WARN", "INCOMPLETE")]
        action = record.get("action") if isinstance(record.get("action"), Mapping) else {}
        why = "; ".join(bad[:4]) or "every check passed"
        if action:
            why += f"; Slurm: {action.get('action')}" + (f" ({action.get('reason')})" if action.get("reason") else "")
        out[node] = {"status": status, "why": why}
    return out


def _state(status: Any) -> Optional[str]:
    return str(status["state"]) if isinstance(status, Mapping) and status.get("state") else None


def _batch_no(status: Any) -> Optional[int]:
    try:
        return int(status.get("batch")) if isinstance(status, Mapping) else None
    except (TypeError, ValueError):
        return None


def unreachable_why(batch: Any) -> str:
    """What the report says of a node that dropped out of batch *batch* before it was verified."""
    return (f"unreachable during batch {batch}: it dropped out of its batch before it was verified "
            "(it may be drained with kiln's UPGRADE: reason and half-installed); the rollout stopped. "
            "Bring it back, then re-run: it goes first")


def account(plan: Mapping[str, Any], statuses: Mapping[str, Any], batch: Sequence[str],
            unreachable: Sequence[str] = (), max_fail_percentage: Any = 0) -> Dict[str, Any]:
    """Whether the batch *batch* (its nodes still in the play) may start changing nodes.

    Run at a batch's start, before its drain; *unreachable*: the nodes of *batch* that did not
    answer its first contact. The batch is the plan's batch that holds *batch*. The rollout
    stops (``stop``) on any node it cannot account for:

    * a node of an earlier batch that is not verified (state ``upgraded``) or held (a person drained
      it after the plan: their decision, reported, not a failure): ``started`` means it
      dropped out of its batch -- "unreachable during batch N"; no status at all means its batch
      never ran for it; ``failed`` stops the rollout when the failed nodes of that batch are more
      than *max_fail_percentage* of it (0: any);
    * a node of this batch that did not answer, or is no longer in the play;
    * nodes that are not one planned batch (the play's batches do not match the plan).

    Returns ``{"batch": N (1-based) or None, "stop": bool, "nodes": {node: why},
    "statuses": {node: kiln_upgrade_status}, "lines": [...]}``: *statuses* is what each node of
    this batch is to record when the rollout stops here (``started`` for a node that did not
    answer, ``not started`` for the others: nothing in this batch changed).
    """
    batches = [list(b) for b in plan.get("batches") or []]
    members_now = [str(n) for n in batch or []]
    gone = {str(n) for n in unreachable or []}
    live = [n for n in members_now if n not in gone]
    try:
        limit = float(max_fail_percentage)
    except (TypeError, ValueError):
        raise UpgradeConfigError(
            f"kiln_upgrade_max_fail_percentage must be a number from 0 to 100, not {max_fail_percentage!r}") from None
    if not 0 <= limit <= 100:
        raise UpgradeConfigError(f"kiln_upgrade_max_fail_percentage must be from 0 to 100, not {max_fail_percentage!r}")
    index = next((i for i, b in enumerate(batches) if members_now and set(members_now) <= set(b)), None)
    if index is None:
        why = (f"the nodes of this batch ({', '.join(members_now) or 'none'}) are not one batch of the plan "
               f"({' | '.join(' '.join(b) for b in batches) or 'no batches'}): nothing is changed")
        return {"batch": None, "stop": True, "nodes": {n: why for n in members_now},
                "statuses": {n: {"state": NOT_STARTED, "why": why} for n in members_now}, "lines": [why]}
    problems: Dict[str, str] = {}
    for number, members in enumerate(batches[:index], start=1):
        failed = []
        for node in members:
            status = statuses.get(node)
            state = _state(status)
            if state in VERIFIED or state == HELD:  # held: a person drained it after the plan (reported)
                continue
            if state == FAILED:
                failed.append(node)
            elif state == STARTED:
                problems[node] = unreachable_why(_batch_no(status) or number)
            else:
                problems[node] = (f"no record of batch {number} for it (state {state or 'none'}): "
                                  "its batch did not finish for it, so it is not verified")
        if failed and 100.0 * len(failed) / len(members) > limit:
            for node in failed:
                problems[node] = (f"failed in batch {number} ({len(failed)} of {len(members)}, more than "
                                  f"kiln_upgrade_max_fail_percentage {max_fail_percentage}%): "
                                  f"{(statuses.get(node) or {}).get('why', '')}".rstrip(": "))
    number = index + 1
    missing = [n for n in batches[index] if n not in live]
    for node in missing:
        problems[node] = (f"unreachable during batch {number}: it did not answer at the start of its batch "
                          "(or its facts could not be gathered); nothing in this batch was changed")
    statuses_out: Dict[str, Dict[str, Any]] = {}
    if problems:
        names = ", ".join(f"{n} ({problems[n].split(':')[0]})" for n in problems)
        for node in batches[index]:
            if node in missing:
                statuses_out[node] = {"state": STARTED, "batch": number, "why": problems[node]}
            else:
                statuses_out[node] = {"state": NOT_STARTED, "batch": number,
                                      "why": f"the rollout stopped before batch {number} changed anything: {names}"}
    lines = [f"{n}: {problems[n]}" for n in problems]
    return {"batch": number, "stop": bool(problems), "nodes": problems, "statuses": statuses_out, "lines": lines}


def drain_reason(fingerprint: str, run_id: str) -> str:
    """The drain reason of a batch: kiln's (``UPGRADE:``), naming the stack and the run."""
    return f"{REASON_PREFIX} to stack {fingerprint} (kiln run {run_id})"[:200]


def summary(plan: Mapping[str, Any], statuses: Mapping[str, Any], run_id: str = "") -> Dict[str, Any]:
    """The rollout's report: every node of the plan with its state and why, one line each.

    *statuses*: ``{node: {"state": ..., "why": ..., "batch": N} or None}`` for the nodes of the run
    (what each batch recorded). A node to do still ``started`` dropped out of its batch before it
    was verified: ``unreachable`` ("unreachable during batch N"). A node to do without a status is
    ``not started`` (its batch did not run). ``complete`` is true only when every node to do was
    upgraded and none was unreachable (held nodes are a person's decision: reported, not counted
    against the run -- also a node to do that someone drained after the plan, which the batch's
    drain held: ``{"state": "held"}``).
    """
    nodes: Dict[str, Dict[str, str]] = {}
    why = plan.get("why") or {}
    for state, key in (("done", DONE), ("held", HELD), ("not upgraded", UNREACHABLE)):
        for node in plan.get(key) or []:
            nodes[node] = {"state": state, "why": str(why.get(node, ""))}
    todo = list(plan.get(TODO) or [])
    number = {n: i for i, b in enumerate(plan.get("batches") or [], start=1) for n in b}
    for node in todo:
        entry = statuses.get(node)
        state = _state(entry)
        if state == STARTED:
            text = str(entry.get("why") or "")
            nodes[node] = {"state": UNREACHABLE, "why": text if text.startswith("unreachable during batch")
                           else unreachable_why(_batch_no(entry) or number.get(node, "?"))}
        elif state:
            nodes[node] = {"state": state, "why": str(entry.get("why", ""))}
        else:
            nodes[node] = {"state": NOT_STARTED,
                           "why": f"its batch ({number.get(node, '?')}) did not run (the rollout stopped before it)"}
    order = [n for n in plan.get("order") or [] if n in nodes] or sorted(nodes)
    counts: Dict[str, int] = {}
    for entry in nodes.values():
        counts[entry["state"]] = counts.get(entry["state"], 0) + 1
    lines = [f"{n}: {nodes[n]['state'].upper()} -- {nodes[n]['why']}" for n in order]
    # Held nodes are a person's decision (reported, not a failure); a node that could not be reached
    # or is down in Slurm was not upgraded, so the run is not complete.
    complete = all(nodes[n]["state"] in (UPGRADED, HELD) for n in todo) and not plan.get(UNREACHABLE)
    headline = ", ".join(f"{k} {counts[k]}" for k in sorted(counts)) or "no nodes"
    return {"run_id": run_id, "nodes": nodes, "counts": counts, "headline": headline, "lines": lines,
            "complete": complete}


# --------------------------------------------------------------------------- the filters
# What filter_plugins/kiln_upgrade_filters.py registers: each input checked (one FilterError naming
# the filter and the input), then the functions above.

def _names(func: str, what: str, value: Any) -> list[str]:
    """*value* as a list of node names, or one FilterError naming the filter and the input."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(name, str) for name in value):
        raise FilterError(f"{func}: {what} must be a list of node names, got {type(value).__name__}")
    return list(value)


def _mapping(func: str, what: str, value: Any, values: tuple[type, ...] = ()) -> dict[Any, Any]:
    """*value* (none: empty) as a dict, its values of *values* types (or none) when given."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or (values and not all(v is None or isinstance(v, values) for v in value.values())):
        raise FilterError(f"{func}: {what} must be a mapping, got {type(value).__name__}")
    return dict(value)


def kiln_stack_fingerprint(stack: Any) -> str:
    """12 hex of sha256 over the canonical JSON of a resolved stack."""
    try:
        return stack_fingerprint(stack)
    except UpgradeConfigError as exc:
        raise FilterError(f"kiln_stack_fingerprint: {exc}") from exc


def kiln_upgrade_plan(nodes: Any, info: Any, sinfo_lines: Any = None, slurm_names: Any = None, batch: Any = 1,
                      rollback: Any = False) -> Any:
    """The rollout (done, todo, held, unreachable, batches) from stack records and sinfo lines (None: no Slurm)."""
    name = "kiln_upgrade_plan"
    nodes = _names(name, "the input (the nodes)", nodes)
    info = _mapping(name, "info (node -> {reachable, intended, applied})", info, (Mapping,))
    if sinfo_lines is not None and not isinstance(sinfo_lines, (list, tuple)):
        raise FilterError(f"{name}: the sinfo lines must be a list, got {type(sinfo_lines).__name__}")
    slurm_names = _mapping(name, "slurm_names (node -> Slurm name)", slurm_names, (str,))
    sinfo = None if sinfo_lines is None else parse_sinfo(sinfo_lines)
    return as_filter(plan, (UpgradeConfigError,))(nodes, info, sinfo, slurm_names, batch, _flag(rollback))


def kiln_upgrade_rollback_target(applied: Any, previous: Any) -> Any:
    """The record of the stack a rollback returns the node to (applied, when a rollback wrote it; else previous), or None."""
    for what, record in (("applied", applied), ("previous", previous)):
        if record is not None and not isinstance(record, Mapping):
            raise FilterError(f"kiln_upgrade_rollback_target: {what} must be a stack record (a mapping) or none, "
                              f"got {type(record).__name__}")
    return rollback_target(applied, previous)


def kiln_upgrade_next_record(new: Any, old: Any = None, rollback: Any = False) -> Any:
    """The applied record to write: *new*, plus rolled_back_from when a rollback changes the stack (kept while it stays)."""
    if not isinstance(new, Mapping):
        raise FilterError(f"kiln_upgrade_next_record: the input must be a stack record (a mapping), "
                          f"got {type(new).__name__}")
    if old is not None and not isinstance(old, Mapping):
        raise FilterError(f"kiln_upgrade_next_record: old must be a stack record (a mapping) or none, "
                          f"got {type(old).__name__}")
    try:
        return next_record(new, old, _flag(rollback))
    except UpgradeConfigError as exc:
        raise FilterError(f"kiln_upgrade_next_record: {exc}") from exc


def kiln_upgrade_account(plan: Any, hostvars: Any, batch: Any, unreachable: Any = (), max_fail_percentage: Any = 0) -> Any:
    """Whether this batch may start: every node of the earlier batches verified, every node of this one answering."""
    name = "kiln_upgrade_account"
    batch = _names(name, "batch (the nodes of this batch)", batch or [])
    unreachable = _names(name, "unreachable (node names)", unreachable or [])
    decide = as_filter(account, (UpgradeConfigError,))
    return decide(plan, _statuses(plan, hostvars, name), batch, unreachable, max_fail_percentage)


def kiln_upgrade_record(text: Any) -> Any:
    """A JSON object from text, or None (empty, not JSON, not an object)."""
    return read_record(text)


def kiln_upgrade_node_info(hostvars_of_node: Any) -> Any:
    """{reachable, intended, applied} of one node from the plan play's facts."""
    return node_info(hostvars_of_node)


def kiln_upgrade_verdicts(batch: Any, summary: Any) -> Any:
    """Each node of a batch from its burn-in summary; missing or unreadable -> INCOMPLETE."""
    return batch_verdicts(_names("kiln_upgrade_verdicts", "the input (the batch)", batch), summary)


def kiln_upgrade_reason(fingerprint: Any, run_id: Any) -> str:
    """The drain reason of a batch under upgrade (UPGRADE: ...)."""
    return drain_reason(str(fingerprint), str(run_id))


def kiln_upgrade_summary(plan: Any, hostvars: Any, run_id: Any = "") -> Any:
    """The rollout's report from the plan and each node's kiln_upgrade_status fact (hostvars)."""
    return summary(plan, _statuses(plan, hostvars, "kiln_upgrade_summary"), str(run_id))


def _statuses(plan: Any, hostvars: Any, name: str) -> dict[str, Any]:
    """{node: its kiln_upgrade_status fact or None} for the plan's nodes to do; wrong types refused naming *name*."""
    if not isinstance(plan, Mapping):
        raise FilterError(f"{name}: the plan must be a kiln_upgrade_plan result, got {type(plan).__name__}")
    for key in ("done", "todo", "held", "unreachable", "order"):
        _names(name, f"the plan's {key}", plan.get(key) or [])
    _mapping(name, "the plan's why", plan.get("why"))
    if not isinstance(hostvars, Mapping):
        raise FilterError(f"{name}: hostvars must be a mapping, got {type(hostvars).__name__}")
    statuses = {}
    for node in list(plan.get("todo") or []):
        try:
            statuses[node] = hostvars[node].get("kiln_upgrade_status")
        except (KeyError, AttributeError, TypeError):
            statuses[node] = None
    return statuses


def _flag(value: Any) -> bool:
    """A boolean flag as Ansible's bool filter reads it (a string 'false' is false)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)
