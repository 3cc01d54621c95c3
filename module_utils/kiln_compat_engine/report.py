# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The preflight report: each distinct stack evaluated once, one line per violation naming its hosts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import CompatError, need_list, need_mapping
from .inventory import kiln_hostlist
from .rules import _invalid, kiln_stack_violations
from .schema import show
from .violations import ERROR


def kiln_stack_report(stacks: Sequence[Mapping[str, Any]], today: str | None = None) -> dict[str, Any]:
    """Evaluate each distinct stack once (output of kiln_stacks_by_host).

    Returns ``{stacks: [{stack, allow, hosts, hostlist, violations}], errors: [str],
    warnings: [str], error_count, warning_count, evaluations}``; ``errors`` and
    ``warnings`` are one line per violation naming the hosts it applies to.
    """
    stacks = need_list("kiln_stack_report", "the input (kiln_stacks_by_host's groups)", stacks)
    out: list[dict[str, Any]] = []
    errors: list[str] = []
    warnings: list[str] = []
    for item in stacks:
        need_mapping("kiln_stack_report", "each group of kiln_stacks_by_host", item)
        hosts = need_list("kiln_stack_report", "a group's hosts", item.get("hosts") or [])
        hostlist = kiln_hostlist(hosts)
        try:
            if item.get("problems"):
                viols = _invalid(item["problems"])
            else:
                viols = kiln_stack_violations(item.get("stack"), item.get("allow"), today, item.get("detected_gpus"),
                                              item.get("detected_hcas"))
        except CompatError as exc:
            viols = _invalid([{"key": "kiln_stack", "message": f"{exc}".replace("kiln: ", "")[:2000],
                               "fix": "Fix kiln_stack / kiln_stack_allow for these hosts (see docs/compat.md)."}])
        except Exception as exc:  # noqa: BLE001 - fail closed with a message, never a traceback
            viols = _invalid([{"key": "kiln_stack",
                               "message": f"kiln could not evaluate this stack ({type(exc).__name__}: {show(str(exc), 200)}).",
                               "fix": "This is a kiln bug: report it with the stack; preflight refuses the stack meanwhile."}])
        where = f"{hostlist} ({len(hosts)} host{'s' if len(hosts) != 1 else ''})"
        for v in viols:
            line = f"[{v['rule']}] {where}: {v['message']} Fix: {v['fix']}"
            if v.get("fix_stack"):
                line += f" (kiln_stack: {json.dumps(v['fix_stack'], sort_keys=True)})"
            if v.get("allowed"):
                line += f" [allowed: {v['allow_reason']}]"
            (errors if v["severity"] == ERROR else warnings).append(line)
        out.append({"stack": item.get("stack"), "allow": item.get("allow") or [], "hosts": hosts,
                    "hostlist": hostlist, "violations": viols, "problems": item.get("problems") or [],
                    **({"detected_gpus": item["detected_gpus"]} if item.get("detected_gpus") else {}),
                    **({"detected_hcas": item["detected_hcas"]} if item.get("detected_hcas") else {})})
    return {"stacks": out, "errors": errors, "warnings": warnings, "error_count": len(errors),
            "warning_count": len(warnings), "evaluations": len(out)}
