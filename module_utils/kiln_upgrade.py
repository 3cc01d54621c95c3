# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling upgrade's decisions (playbooks/upgrade.yml), as pure functions.

Standard library only; importable as ``kiln_upgrade`` and as
``ansible.module_utils.kiln_upgrade`` (filter_plugins/kiln_upgrade_filters.py wraps it).

* :func:`stack_fingerprint` -- the short id of a resolved stack (what a node's stack
  record, ``/var/lib/kiln/stack/applied.json``, carries).
* :func:`batch_size` -- ``kiln_upgrade_batch`` (a count or a percentage) checked and
  turned into a number of nodes.
* :func:`plan` -- which nodes are done, which are to do (and in what order), which are
  held by a person or cannot be reached, from each node's stack record and Slurm state.
  Resumable by construction: the plan is made from what the nodes and Slurm say now.
* :func:`batch_verdicts` -- each node of a batch from its burn-in summary; a missing or
  unreadable summary is INCOMPLETE for every node, never PASS.
* :func:`summary` -- the report: every node with its state (done, upgraded, failed, held,
  not upgraded, not started) and why; ``complete`` only when every node to do was upgraded.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

try:
    from ansible.module_utils.kiln_burnin_pair_phase import kiln_drain
    from ansible.module_utils.kiln_sinfo import DOWN, DRAINED, UNRECOGNISED, condition
except ImportError:  # plain import (filters, unit tests)
    from kiln_burnin_pair_phase import kiln_drain  # type: ignore[no-redef]
    from kiln_sinfo import DOWN, DRAINED, UNRECOGNISED, condition  # type: ignore[no-redef]

#: The drain reason of a batch under upgrade (a kiln drain: kiln_burnin_pair_phase.KILN_REASON_PREFIXES).
REASON_PREFIX = "UPGRADE:"
#: How a node of the rollout ends up.
DONE, TODO, HELD, UNREACHABLE = "done", "todo", "held", "unreachable"


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
            "applied": get("__upgrade_applied", None)}


def _record_fp(record: Any) -> Optional[str]:
    if isinstance(record, Mapping) and isinstance(record.get("fingerprint"), str):
        return record["fingerprint"]
    return None


def plan(nodes: Sequence[str], info: Mapping[str, Mapping[str, Any]],
         sinfo: Optional[Mapping[str, Mapping[str, str]]] = None,
         slurm_names: Optional[Mapping[str, str]] = None, batch: Any = 1) -> Dict[str, Any]:
    """The rollout from what is true now.

    *info*: ``{node: {"reachable": bool, "intended": fingerprint, "applied": record or None}}``.
    *sinfo*: ``kiln_sinfo.parse_sinfo`` rows (None: no Slurm). A node is

    * ``unreachable`` -- not reachable, or down / in a state kiln does not know in Slurm;
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
                if not kiln_drain(row.get("reason")):
                    out[HELD].append(node)
                    out["why"][node] = (f"held by operator: {row.get('reason') or 'no reason'}; left alone: "
                                        "resume it and re-run to upgrade it")
                    continue
                kiln_drained = True
        intended = entry.get("intended")
        applied = _record_fp(entry.get("applied"))
        if applied == intended and not kiln_drained:
            out[DONE].append(node)
            out["why"][node] = f"on stack {intended} and in service"
        elif kiln_drained:
            first.append(node)
            out["why"][node] = f"drained by kiln ({row.get('reason') if row else ''}): continued first"
        else:
            later.append(node)
            out["why"][node] = f"stack {applied or 'not recorded'} -> {intended}"
    out[TODO] = first + later
    out["order"] = list(nodes)
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


def drain_reason(fingerprint: str, run_id: str) -> str:
    """The drain reason of a batch: kiln's (``UPGRADE:``), naming the stack and the run."""
    return f"{REASON_PREFIX} to stack {fingerprint} (kiln run {run_id})"[:200]


def summary(plan: Mapping[str, Any], statuses: Mapping[str, Any], run_id: str = "") -> Dict[str, Any]:
    """The rollout's report: every node of the plan with its state and why, one line each.

    *statuses*: ``{node: {"state": ..., "why": ...} or None}`` for the nodes of the run (what each
    batch recorded). A node to do without a status is ``not started`` (its batch did not run).
    ``complete`` is true only when every node to do was upgraded and none was unreachable (held
    nodes are a person's decision: reported, not counted against the run -- also a node to do that
    someone drained after the plan, which the batch's drain held: ``{"state": "held"}``).
    """
    nodes: Dict[str, Dict[str, str]] = {}
    why = plan.get("why") or {}
    for state, key in (("done", DONE), ("held", HELD), ("not upgraded", UNREACHABLE)):
        for node in plan.get(key) or []:
            nodes[node] = {"state": state, "why": str(why.get(node, ""))}
    todo = list(plan.get(TODO) or [])
    for node in todo:
        entry = statuses.get(node)
        if isinstance(entry, Mapping) and entry.get("state"):
            nodes[node] = {"state": str(entry["state"]), "why": str(entry.get("why", ""))}
        else:
            nodes[node] = {"state": "not started", "why": "its batch did not run (the rollout stopped before it)"}
    order = [n for n in plan.get("order") or [] if n in nodes] or sorted(nodes)
    counts: Dict[str, int] = {}
    for entry in nodes.values():
        counts[entry["state"]] = counts.get(entry["state"], 0) + 1
    lines = [f"{n}: {nodes[n]['state'].upper()} -- {nodes[n]['why']}" for n in order]
    # Held nodes are a person's decision (reported, not a failure); a node that could not be reached
    # or is down in Slurm was not upgraded, so the run is not complete.
    complete = all(nodes[n]["state"] in ("upgraded", HELD) for n in todo) and not plan.get(UNREACHABLE)
    headline = ", ".join(f"{k} {counts[k]}" for k in sorted(counts)) or "no nodes"
    return {"run_id": run_id, "nodes": nodes, "counts": counts, "headline": headline, "lines": lines,
            "complete": complete}
