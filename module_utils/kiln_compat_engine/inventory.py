# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Inventory-wide input: hosts grouped by their distinct stacks, and the Slurm hostlist compressor.

:func:`kiln_stacks_by_host` walks hostvars once and size-checks each distinct
input object once, so preflight over thousands of hosts evaluates each distinct
stack once (``report``); :func:`kiln_hostlist` names the hosts of a group.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import schema
from .errors import CompatError, need_list, need_mapping, need_text
from .lookup import _gpu_entry
from .rules import RULES
from .schema import show
from .stack import _schema_extra


def _plain(value: Any) -> Any:
    """Strip Ansible's tagged/lazy containers and scalars down to plain Python data.

    Only called on values :func:`schema.measure` has bounded, so aliases expand
    to at most MAX_NODES values. Types other than str/bool/int/float/None/list/
    dict are kept as they are, so the schema can say what YAML made of them.
    """
    if isinstance(value, Mapping):
        return {(str(k) if isinstance(k, str) else k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def _detected_gpus(facts: Any) -> list[str]:
    """Distinct GPUs (PCI ids, else names) a host's facts report, in order; [] without facts."""
    if not isinstance(facts, Mapping):
        return []
    candidates: list[Any] = []
    for key in ("kiln_gpu", "kiln_gpus"):
        if facts.get(key):
            candidates.append(facts[key])
    local = facts.get("ansible_local")
    if isinstance(local, Mapping):
        for key in ("kiln_gpu", "kiln"):
            sub = local.get(key)
            if isinstance(sub, Mapping):
                candidates.extend(sub.get(k) for k in ("gpus", "gpu", "model") if sub.get(k))
    found: list[str] = []
    for cand in candidates[:1]:  # the first source that reports anything is the authority
        if isinstance(cand, Mapping) and isinstance(cand.get("gpus"), (list, tuple)):
            cand = cand["gpus"]  # library/kiln_gpu_facts: ansible_facts.kiln_gpu.gpus
        items = cand if isinstance(cand, (list, tuple)) else [cand]
        for item in items[:64]:
            if isinstance(item, Mapping):
                item = item.get("pci_device_id") or item.get("pci_id") or item.get("model") or item.get("name")
            if isinstance(item, str) and item and item not in found:
                found.append(item[:schema.MAX_TEXT])
    return found


def _detected_hcas(facts: Any) -> list[str]:
    """Distinct HCA generations a host's facts report (``kiln_fabric.hcas[*].model``), in order; [] without.

    An HCA whose model the fact module could not name is reported by its ``hca_type`` (``hca_type MT4133``),
    so a generation the data does not know is a warning (``hca-detected-unknown``), never silent.
    """
    if not isinstance(facts, Mapping):
        return []
    fabric = facts.get("kiln_fabric")
    hcas = fabric.get("hcas") if isinstance(fabric, Mapping) else None
    if not isinstance(hcas, (list, tuple)):
        return []
    found: list[str] = []
    for hca in hcas[:64]:
        if not isinstance(hca, Mapping):
            continue
        model = hca.get("model")
        if not isinstance(model, str) or not model:
            kind = hca.get("hca_type")
            model = f"hca_type {kind[:24]}" if isinstance(kind, str) and kind else "an HCA with no hca_type"
        model = model[:schema.MAX_TEXT]
        if model not in found:
            found.append(model)
    return found


def _input(stack_raw: Any, allow_raw: Any, var: str, allow_var: str) -> tuple[Any, Any, bool, list[dict[str, str]]]:
    """Bound, copy and pre-check one host's (kiln_stack, kiln_stack_allow): (stack, allow, templated, problems)."""
    problems: list[dict[str, str]] = []
    sizes = {}
    for name, raw in ((var, stack_raw), (allow_var, allow_raw)):
        sizes[name] = schema.measure(raw)
        if sizes[name].over():
            problems.append(schema.too_large(name, sizes[name]))
    if problems:
        return None, None, False, problems
    stack = _plain(stack_raw) if stack_raw is not None else {}
    allow = _plain(allow_raw) if allow_raw else []
    templated = sizes[var].templated or sizes[allow_var].templated
    problems = schema.check_stack(stack, _schema_extra, var) + schema.check_allow(allow, RULES, allow_var)
    return stack, allow, templated, problems


def kiln_stacks_by_host(hostvars: Mapping[str, Any], hosts: Sequence[str], var: str = "kiln_stack",
                        allow_var: str = "kiln_stack_allow") -> list[dict[str, Any]]:
    """Group hosts by their distinct (stack, allow list, detected GPUs).

    Walks ``hostvars`` once for ``hosts`` and returns ``[{stack, allow, hosts,
    detected_gpus, problems}]`` in order of first appearance; stacks are compared
    by canonical JSON. Each distinct input object is size-checked once before it
    is copied (an alias bomb is refused, not expanded: ``problems``). GPUs reported
    by host facts (``ansible_facts.kiln_gpu`` / ``kiln_gpus`` / ``ansible_local``)
    go to ``detected_gpus``; the first known one becomes ``stack.gpu`` when the
    inventory names none. HCA generations reported by ``ansible_facts.kiln_fabric``
    go to ``detected_hcas`` (checked by the rules ``ofed-hca`` / ``hca-detected-unknown``).
    """
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, Iterable):
        raise CompatError(f"kiln_stacks_by_host: hosts must be a list of host names, got {show(hosts)}")
    need_mapping("kiln_stacks_by_host", "the input (hostvars)", hostvars)
    need_text("kiln_stacks_by_host", "the stack variable's name", var)
    need_text("kiln_stacks_by_host", "the allow list variable's name", allow_var)
    hosts = list(hosts) if not isinstance(hosts, Mapping) else hosts
    if isinstance(hosts, Mapping) or not all(isinstance(h, str) for h in hosts):
        raise CompatError(f"kiln_stacks_by_host: hosts must be a list of host names, got {show(hosts)}")
    raw_get = getattr(hostvars, "raw_get", None)
    groups: dict[str, dict[str, Any]] = {}
    # id() -> (stack object, allow object, prepared input). Holding the objects keeps
    # their ids stable; hosts sharing a group_vars dict then cost one dict lookup each.
    by_id: dict[tuple[int, int], tuple[Any, Any, tuple[Any, Any, bool, list[dict[str, str]]]]] = {}
    for host in hosts:
        if raw_get is not None:
            hv = raw_get(host)
            if not isinstance(hv, Mapping):
                raise CompatError(f"kiln_stacks_by_host: host {show(host)} is not in the inventory")
        else:
            hv = hostvars.get(host)
            if not isinstance(hv, Mapping):
                raise CompatError(f"kiln_stacks_by_host: host {show(host)} has no variables in the input (hostvars)")
        stack_raw = hv.get(var)
        allow_raw = hv.get(allow_var)
        ident = (id(stack_raw), id(allow_raw))
        cached = by_id.get(ident)
        if cached is not None and cached[0] is stack_raw and cached[1] is allow_raw:
            prepared = cached[2]
        else:
            prepared = _input(stack_raw, allow_raw, var, allow_var)
            by_id[ident] = (stack_raw, allow_raw, prepared)
        stack, allow, templated, problems = prepared
        if templated and raw_get is not None:  # render this host's templates, then check what they became
            templated_vars = hostvars[host]
            stack, allow, _t, problems = _input(templated_vars.get(var), templated_vars.get(allow_var), var, allow_var)
        facts = hv.get("ansible_facts") if "ansible_facts" in hv else None
        detected = _detected_gpus(facts) if facts else []
        hcas = _detected_hcas(facts) if facts else []
        if problems:
            key = "!" + json.dumps(problems, sort_keys=True)
            item = {"stack": None, "allow": [], "problems": problems}
        else:
            if detected and isinstance(stack, dict) and not stack.get("gpu"):
                known = next((d for d in detected if _gpu_entry(d)), None)
                if known:
                    stack = dict(stack, gpu=known)
            try:
                key = json.dumps([stack, allow, detected, hcas], sort_keys=True, default=repr)
            except (TypeError, ValueError):  # keys YAML made non-strings: still one group per distinct input
                key = repr([stack, allow, detected, hcas])
            item = {"stack": stack, "allow": allow, "problems": []}
        if key not in groups:
            groups[key] = {**item, "hosts": [], **({"detected_gpus": detected} if detected else {}),
                           **({"detected_hcas": hcas} if hcas else {})}
        groups[key]["hosts"].append(str(host))
    return list(groups.values())


def kiln_hostlist(hosts: Sequence[str]) -> str:
    """Compress host names Slurm-style: ``gpu01,gpu02,gpu03,gpu07`` -> ``gpu[01-03,07]``."""
    hosts = need_list("kiln_hostlist", "the input (host names)", hosts, one_ok=True)
    # (prefix, suffix) -> digit strings, in order of first appearance
    families: dict[tuple[str, str], list[str]] = {}
    order: list[tuple[str, Any]] = []
    for host in hosts:
        m = re.match(r"^(.*?)(\d+)(\D*)$", str(host))
        if not m:
            order.append(("plain", str(host)))
            continue
        fam = (m.group(1), m.group(3))
        if fam not in families:
            families[fam] = []
            order.append(("family", fam))
        families[fam].append(m.group(2))
    parts: list[str] = []
    for kind, item in order:
        if kind == "plain":
            parts.append(item)
            continue
        prefix, suffix = item
        buckets: dict[int, set[int]] = {}
        padded = {len(d) for d in families[item] if d.startswith("0") and len(d) > 1}
        for digits in families[item]:
            is_padded = digits.startswith("0") and len(digits) > 1
            if is_padded:
                width = len(digits)
            elif len(padded) == 1 and len(digits) >= next(iter(padded)):
                width = next(iter(padded))  # 10000 prints the same with or without :05d
            else:
                width = 0
            buckets.setdefault(width, set()).add(int(digits))
        for width, numbers in buckets.items():
            nums = sorted(numbers)
            fmt = f"{{:0{width}d}}" if width else "{}"
            ranges: list[str] = []
            start = prev = nums[0]
            for n in nums[1:] + [None]:
                if n is not None and n == prev + 1:
                    prev = n
                    continue
                ranges.append(fmt.format(start) if start == prev else f"{fmt.format(start)}-{fmt.format(prev)}")
                if n is not None:
                    start = prev = n
            inner = ranges[0] if len(nums) == 1 else f"[{','.join(ranges)}]"
            parts.append(f"{prefix}{inner}{suffix}")
    return ",".join(parts)
