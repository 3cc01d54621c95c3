# -*- coding: utf-8 -*-
"""Burn-in fabric judges: expected RDMA ports and the passive port, counter and GPUDirect checks.

Pure functions, standard library only (PyYAML lazily, for the rules file). Importable as
``kiln_burnin_fabric_checks`` and ``ansible.module_utils.kiln.burnin.fabric_checks``. Facts are
``ansible_facts['kiln_fabric']`` (schema ``kiln.fabric/v1``); rules are ``data/burnin_fabric.yml``.
Ports are named ``<hca>/<port>`` (``mlx5_0/1``). Hostile facts never raise: they make checks
INCOMPLETE. Bad configuration (``kiln_burnin_fabric_expect``, rules, plans) raises
:class:`FabricError`, a ``KilnConfigError`` (exit 4).

Expectation (:func:`expected_ports`), field by field: the inventory's
``kiln_burnin_fabric_expect``, else the node's last PASS in its history (``history_fabric``),
else the node itself (weaker: a port the node never had cannot be missed, its down ports only
WARN, and its rate is its own best active rate per link layer). Acceptance mode refuses the last:
the checks that depend on the expectation are INCOMPLETE naming the variable.

The shared base (constants, facts reader, rules file) is ``kiln_fabric_base``; the error counters
(identity, baseline, growth during the run) are ``kiln_fabric_counters``; both re-exported here.

The NCCL environment, the floors' fabric key and the ib_write_bw pair test are in
``kiln_burnin_fabric_pairs``.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import verdict as kiln_verdict
from ..fabric.base import (  # noqa: F401  (re-exported: kiln_burnin_fabric_pairs, filters, tests)
        _CHECKS, _CONFIDENCES, _EXPECT_KEYS, _IFNAME, _MAX_RATE, _NAME, DURING_RUN_CHECK, ERROR_COUNTERS, EXPECT_VAR,
        FABRIC_KEYS, FACTS_SCHEMA, FAIL, INCOMPLETE, LANE_SPEEDS, LINK_LAYERS, PASS, RDMA_ENGINES, SCHEMA, SKIP,
        TCP_ENGINES, WARN, WIDTHS, FabricError, _count, _describe, _natural, _rate, _read_facts, _show, _speed, _state,
        check, default_fabric_path, load_fabric_thresholds, validate_fabric_thresholds,
    )
from ..fabric.counters import (  # noqa: F401  (re-exported)
        counter_baseline, counter_check, counter_deltas, counter_identity, counter_snapshot, during_run_check,
        port_identity,
    )

__all__ = ["DURING_RUN_CHECK", "ERROR_COUNTERS", "FabricError", "SCHEMA", "counter_baseline", "counter_deltas",
           "counter_identity", "counter_snapshot", "during_run_check", "expected_ports", "history_fabric",
           "load_fabric_thresholds", "passive_fabric_checks", "validate_fabric_thresholds"]



# --------------------------------------------------------------------------- expectation


def _names(value: Any, what: str, host: str) -> List[str]:
    if not isinstance(value, list) or len(value) > 1024:
        raise FabricError(f"{host}: {EXPECT_VAR}.{what} must be a list of RDMA device names (e.g. [mlx5_8]), "
                          f"got {_show(value)}")
    out = []
    for item in value:
        if not isinstance(item, str) or not _NAME.match(item.replace(":", "_", 1).replace("/", "_", 1)):
            raise FabricError(f"{host}: {EXPECT_VAR}.{what} entry {_show(item)} is not a device name like mlx5_0 "
                              "(or mlx5_0:1 for one port)")
        out.append(item)
    return out


def _check_expect(expect: Any, host: str) -> Dict[str, Any]:
    """The inventory's expectation, validated; FabricError naming the variable, the host and the fix."""
    if not isinstance(expect, Mapping):
        raise FabricError(f"{host}: {EXPECT_VAR} must be a mapping like {{ports: 8, rate_gbps: 400, width: 4X, "
                          f"link_layer: InfiniBand}}, got {_show(expect)}")
    unknown = sorted(str(k) for k in expect if k not in _EXPECT_KEYS)
    if unknown:
        raise FabricError(f"{host}: {EXPECT_VAR} has unknown key(s) {', '.join(unknown)}; "
                          f"known: {', '.join(_EXPECT_KEYS)}")
    out: Dict[str, Any] = {}
    if expect.get("ports") is not None:
        if not _count(expect["ports"]) or not 0 <= expect["ports"] <= 1024:
            raise FabricError(f"{host}: {EXPECT_VAR}.ports must be a whole number of ports 0-1024, "
                              f"got {_show(expect['ports'])}")
        out["ports"] = expect["ports"]
    if expect.get("rate_gbps") is not None:
        out["rate_gbps"] = _rate(expect["rate_gbps"])
        if out["rate_gbps"] is None:
            raise FabricError(f"{host}: {EXPECT_VAR}.rate_gbps must be a finite link rate in Gb/s (0 < rate <= "
                              f"{_MAX_RATE:g}, e.g. 400 for NDR), got {_show(expect['rate_gbps'])}")
    for key, allowed in (("width", WIDTHS), ("link_layer", LINK_LAYERS)):
        if expect.get(key) is not None:
            if expect[key] not in allowed:
                raise FabricError(f"{host}: {EXPECT_VAR}.{key} must be one of {', '.join(allowed)}, "
                                  f"got {_show(expect[key])}")
            out[key] = expect[key]
    if expect.get("gid_index") is not None:
        if not _count(expect["gid_index"]) or not 0 <= expect["gid_index"] <= 255:
            raise FabricError(f"{host}: {EXPECT_VAR}.gid_index must be a GID table index 0-255 (RoCE only), "
                              f"got {_show(expect['gid_index'])}")
        out["gid_index"] = expect["gid_index"]
    out["exclude"] = _names(expect.get("exclude", []), "exclude", host)
    if expect.get("hcas") is not None:
        hcas = [re.sub(r"[:/](\d+)$", r"/\1", h) for h in _names(expect["hcas"], "hcas", host)]
        out["hcas"] = [h if "/" in h else h + "/1" for h in hcas]
        clash = sorted(h for h in out["hcas"] if h.split("/")[0] in out["exclude"])
        if clash or len(set(out["hcas"])) != len(out["hcas"]):
            raise FabricError(f"{host}: {EXPECT_VAR}.hcas names {', '.join(clash) or 'a port twice'}"
                              f"{' also in exclude' if clash else ''}; list each NCCL port once, storage ones in exclude")
        if out.get("ports") is not None and out["ports"] != len(out["hcas"]):
            raise FabricError(f"{host}: {EXPECT_VAR}.ports is {out['ports']} but hcas names {len(out['hcas'])}; "
                              "drop ports or make them agree")
    return out


def _history(history: Any) -> Tuple[Optional[Dict[str, Dict[str, Any]]], str]:
    """Ports of the last PASS record that has a fabric entry (a kiln_baseline record list or one entry)."""
    records = history if isinstance(history, list) else [{"status": "PASS", "fabric": history}]
    for record in reversed(records):
        if not isinstance(record, Mapping) or record.get("status") != "PASS" or not isinstance(
                record.get("fabric"), Mapping):
            continue
        ports: Dict[str, Dict[str, Any]] = {}
        for port in record["fabric"].get("ports") or []:
            name = port.get("port") if isinstance(port, Mapping) else None
            if not isinstance(name, str) or "/" not in name or not _NAME.match(name.replace("/", "_")) \
                    or _rate(port.get("rate_gbps")) is None or port.get("link_layer") not in LINK_LAYERS:
                return None, f"history entry {_show(port)} unusable: history ignored"
            ports[name] = {"rate_gbps": _rate(port["rate_gbps"]), "link_layer": port["link_layer"],
                           "width": port.get("width") if port.get("width") in WIDTHS else None}
        if ports:
            return ports, f"the last PASS in the history (run {str(record.get('run_id') or '?')[:60]})"
    return None, "no PASS with fabric ports in the history"


def expected_ports(facts: Any, expect: Any = None, history: Any = None, host: str = "this host") -> Dict[str, Any]:
    """Which ports the node must have, at what rate/width/link layer (see the module docstring).

    Returns ``{"source": inventory|history|node, "why", "weak", "count", "ports": [{port, hca,
    ib_port, rate_gbps, width, speed, link_layer, inferred}], "exclude", "gid_index", "notes"}``;
    ``inferred`` marks a name guessed for a port the node lacks (``ports: N`` without ``hcas``).
    """
    want = _check_expect(expect, host) if expect is not None else {}
    found, _ = _read_facts(facts)
    found = found or {}
    notes: List[str] = []
    hist, hist_why = _history(history) if history is not None else (None, "no history")
    if history is not None and hist is None:
        notes.append(hist_why)
    exclude = list(want.get("exclude") or [])
    layer = want.get("link_layer")
    mine = {n: p for n, p in found.items() if p["hca"] not in exclude  # an unknown link layer is judged, not dropped
            and (layer is None or p.get("link_layer") == layer or p.get("link_layer") not in LINK_LAYERS)}
    inferred: List[str] = []
    if want.get("hcas") is not None:
        names, source = list(want["hcas"]), "inventory"
    elif hist and want.get("ports") in (None, len([n for n in hist if n.split("/")[0] not in exclude])):
        names, source = [n for n in hist if n.split("/")[0] not in exclude], "history"
    else:
        names = sorted(mine, key=_natural)
        source = "inventory" if want.get("ports") is not None else "node"
        missing = (want.get("ports") or 0) - len(names)
        index = 0
        while missing > 0 and index < 4096:  # guess mlx5_<n> names for the ports the node lacks
            guess = f"mlx5_{index}/1"
            if f"mlx5_{index}" not in exclude and guess not in found:
                inferred.append(guess)
                missing -= 1
            index += 1
        names += inferred
    best: Dict[str, Tuple[float, Optional[str]]] = {}
    for port in mine.values():
        rate = _rate(port.get("rate_gbps"))
        if _state(port)[0] and rate is not None and rate > best.get(str(port.get("link_layer")), (0.0, None))[0]:
            best[str(port.get("link_layer"))] = (rate, port.get("width") if port.get("link_layer") == "InfiniBand"
                                                 else None)
    ports = []
    for name in names:
        have, past = found.get(name) or {}, (hist or {}).get(name) or {}
        link = layer or past.get("link_layer") or (have.get("link_layer") if have.get("link_layer") in LINK_LAYERS
                                                   else None)
        own = best.get(str(link), (None, None))
        rate = want.get("rate_gbps") or past.get("rate_gbps") or own[0]
        width = want.get("width") or past.get("width") or (own[1] if own[1] in WIDTHS else None)
        ports.append({"port": name, "hca": name.split("/")[0], "ib_port": int(name.split("/")[1]), "rate_gbps": rate,
                      "width": width, "speed": _speed(rate, width), "link_layer": link, "inferred": name in inferred})
    count = want.get("ports") if want.get("ports") is not None else len(ports)
    why = {"inventory": f"from {EXPECT_VAR}", "history": "from " + hist_why,
           "node": "from the node itself (no inventory expectation, no history): weaker, a port the node never "
                   "had cannot be missed"}[source]
    if source != "node" and not want.get("rate_gbps") and not (hist and source == "history"):
        why += "; rates from the node's own best active port (weaker)"
    return {"source": source, "why": why, "weak": source == "node", "count": count, "ports": ports,
            "exclude": exclude, "gid_index": want.get("gid_index"), "notes": notes}


def history_fabric(facts: Any, expected: Mapping[str, Any]) -> Dict[str, Any]:
    """What a PASS record keeps (``record["fabric"]``): the expected ports as measured ACTIVE now."""
    found, _ = _read_facts(facts)
    ports = []
    for want in expected.get("ports") or []:
        have = (found or {}).get(want.get("port")) or {}
        if have and _state(have)[0] and _rate(have.get("rate_gbps")) and have.get("link_layer") in LINK_LAYERS:
            ports.append({"port": want["port"], "rate_gbps": _rate(have["rate_gbps"]), "link_layer": have["link_layer"],
                          "width": have.get("width") if have.get("width") in WIDTHS else None})
    return {"ports": ports}


# --------------------------------------------------------------------------- passive checks


def _gpudirect_check(facts: Mapping[str, Any], plan: Any, gpu_node: bool) -> Dict[str, Any]:
    cid = "fabric.gpudirect"
    if plan is None:
        return check(cid, INCOMPLETE if gpu_node else SKIP, "no GPUDirect plan given for this GPU node: not judged"
                     if gpu_node else "no GPU on this node: GPUDirect RDMA not applicable")
    method = plan.get("method") if isinstance(plan, Mapping) else None
    if method not in ("dma_buf", "peermem", "none"):
        raise FabricError(f"GPUDirect plan method {_show(method)} is not dma_buf, peermem or none")
    if method == "none":
        return check(cid, WARN, "no GPUDirect path: NCCL copies through host memory", method=method)
    have = facts.get("gpudirect") if isinstance(facts.get("gpudirect"), Mapping) else {}
    needs = {"dma_buf": ("nvidia_loaded", "open_modules", "dma_buf_kernel"), "peermem": ("peermem_loaded",)}[method]
    words = {"nvidia_loaded": "nvidia module not loaded", "open_modules": "proprietary (not open) kernel modules",
             "dma_buf_kernel": f"kernel {str(have.get('kernel') or '?')[:40]} without DMA-BUF (needs >= 5.12)",
             "peermem_loaded": "nvidia_peermem not loaded"}
    unknown = [k for k in needs if not isinstance(have.get(k), bool)]
    if unknown:
        return check(cid, INCOMPLETE, f"planned {method}; the facts do not say {', '.join(unknown)}", method=method)
    missing = [words[k] for k in needs if not have[k]]
    return check(cid, FAIL if missing else PASS, f"planned {method}: " + ("; ".join(missing) if missing else
                 "present (" + ", ".join(needs) + ")"), method=method)


#: The checks whose verdict depends on what is expected (INCOMPLETE in acceptance mode without an expectation).
EXPECTATION_CHECKS = ("fabric.ports", "fabric.rate", "fabric.counters")


def expectation_missing(expected: Any) -> Optional[str]:
    """Why *expected* (:func:`expected_ports`) cannot carry an acceptance verdict, or None when it can:
    an expectation from the node itself cannot miss a vanished HCA or a fleet-wide half-rate link."""
    if isinstance(expected, Mapping) and expected.get("source") in ("inventory", "history"):
        return None
    return (f"acceptance mode needs an expectation of this node's fabric: set {EXPECT_VAR} (e.g. {{ports: 8, "
            "rate_gbps: 400, width: 4X, link_layer: InfiniBand, exclude: [mlx5_8]}; {ports: 0} for a node without "
            "RDMA) or let a default-mode PASS record it in the history; judged from the node itself, a vanished HCA "
            "or a fleet-wide half-rate link would pass")


def passive_fabric_checks(facts: Any, expected: Mapping[str, Any], previous_counters: Any,
                          thresholds: Mapping[str, Any], gpudirect: Any = None,
                          gpu_node: bool = False, require_expectation: bool = False) -> List[Dict[str, Any]]:
    """fabric.facts, fabric.ports, fabric.rate, fabric.counters and fabric.gpudirect for one node.

    *expected* is :func:`expected_ports`; *previous_counters* the node's counter baseline
    (:func:`counter_baseline`, matched by port GUID) or a bare :func:`counter_snapshot` (compared
    by port name); *thresholds* the rules :func:`load_fabric_thresholds` read (required);
    *gpudirect* the stack's plan ``{"method": dma_buf|peermem|none}``; *gpu_node*: the node has or
    should have GPUs (a GPU node without a plan is INCOMPLETE, never SKIP). *require_expectation*
    (acceptance mode): without an expectation from the inventory or the history, fabric.ports,
    fabric.rate and fabric.counters are INCOMPLETE naming ``kiln_burnin_fabric_expect``.
    """
    checks = _passive(facts, expected, previous_counters, thresholds, gpudirect, gpu_node)
    why = expectation_missing(expected) if require_expectation else None
    if why:
        for item in checks:
            if item["id"] in EXPECTATION_CHECKS:
                measured = f" (measured against the node itself: {item['status']} {item.get('detail') or ''})"
                item.update(status=INCOMPLETE, detail=why + measured[:400])
    return checks


def _passive(facts: Any, expected: Mapping[str, Any], previous_counters: Any, thresholds: Mapping[str, Any],
             gpudirect: Any, gpu_node: bool) -> List[Dict[str, Any]]:
    rules = validate_fabric_thresholds(thresholds)
    if not isinstance(expected, Mapping) or not isinstance(expected.get("ports"), list) \
            or not _count(expected.get("count")):
        return [check(cid, INCOMPLETE, "no expectation (expected_ports) to judge against") for cid in _CHECKS]
    found, problems = _read_facts(facts)
    wanted = [p for p in expected["ports"] if isinstance(p, Mapping) and isinstance(p.get("port"), str)]
    if found is None:
        if not expected["count"] and not wanted:
            return [check("fabric.facts", INCOMPLETE, "; ".join(problems))] + [
                check(cid, SKIP, "no fabric facts and no RDMA port expected") for cid in _CHECKS[1:]]
        return [check(cid, INCOMPLETE, "no usable fabric facts: " + "; ".join(problems)[:400]) for cid in _CHECKS]
    if not found and not expected["count"] and not wanted:
        skip = "no RDMA HCA on this node, and none expected"
        return [check(cid, SKIP, skip) for cid in _CHECKS]
    checks = [check("fabric.facts", INCOMPLETE if problems else PASS,
                    ("fabric facts report problems: " + "; ".join(problems[:8])) if problems else
                    f"{len(found)} RDMA port(s) read; expectation {expected.get('why') or '?'}", problems=problems[:50])]
    weak = bool(expected.get("weak"))
    present = [p for p in wanted if p["port"] in found]
    missing = [p["port"].split("/")[0] if p["port"].endswith("/1") else p["port"] for p in wanted
               if p["port"] not in found]
    statuses, bad, up = [PASS], [], []
    if len(present) + len(missing) < expected["count"] or missing:
        statuses.append(FAIL)
        more = expected["count"] - len(present) - len(missing)
        bad.append(f"expected {expected['count']}, found {len(present)}"
                   + (": " + ", ".join(f"{m} missing" for m in missing) if missing else "")
                   + (f" (and {more} more unnamed)" if more > 0 else ""))
    elif len(present) > expected["count"]:
        statuses.append(WARN)
        bad.append(f"found {len(present)} ports, expected {expected['count']}: add the storage or front-end HCAs "
                   f"to {EXPECT_VAR}.exclude")
    for port in present:
        ok, text = _state(found[port["port"]])
        if ok:
            up.append(port)
        else:
            statuses.append(INCOMPLETE if ok is None else (WARN if weak else FAIL))
            bad.append(f"{port['port']} {text}")
    note = " (expectation from the node itself: a down port only WARNs; set " + EXPECT_VAR + ")" if weak else ""
    checks.append(check("fabric.ports", kiln_verdict.worst(statuses) or INCOMPLETE,
                        ("; ".join(bad) + note) if bad else f"{len(up)} port(s) ACTIVE/LinkUp ({expected.get('why')})",
                        metric="active_ports", value=len(up), floor=expected["count"], unit="ports"))
    statuses, bad, rates = [PASS], [], []
    for port in present:
        have = found[port["port"]]
        rate, want = _rate(have.get("rate_gbps")), _rate(port.get("rate_gbps"))
        width = have.get("width") if isinstance(have.get("width"), str) else None
        speed = have.get("speed") if isinstance(have.get("speed"), str) else None
        if port not in up:
            statuses.append(INCOMPLETE)
            bad.append(f"{port['port']} rate not judged: port not ACTIVE")
        elif rate is None or want is None:
            statuses.append(INCOMPLETE)
            bad.append(f"{port['port']} rate {_show(have.get('rate_gbps'))} or its expectation {_show(want)} unknown")
        elif have.get("link_layer") not in LINK_LAYERS:
            statuses.append(INCOMPLETE)
            bad.append(f"{port['port']} link layer {_show(have.get('link_layer'))} unknown")
        elif have.get("link_layer") != port.get("link_layer"):
            statuses.append(FAIL)
            bad.append(f"{port['port']} link layer {_show(have.get('link_layer'))}, expected {port.get('link_layer')}")
        elif port.get("width") and width is None:
            statuses.append(INCOMPLETE)
            bad.append(f"{port['port']} width not reported, expected {port['width']}")
        elif rate < want * 0.999 or (port.get("width") and width != port["width"]):
            statuses.append(FAIL)
            bad.append(f"{port['port']} at {_describe(rate, width, speed)}, expected "
                       f"{_describe(want, port.get('width'), port.get('speed'))}")
        else:
            rates.append(rate)
    if not present:
        statuses.append(INCOMPLETE if expected["count"] else PASS)
    checks.append(check("fabric.rate", kiln_verdict.worst(statuses) or INCOMPLETE, "; ".join(bad) if bad else
                        f"{len(rates)} port(s) at the expected rate", metric="slowest_port_gbps",
                        value=min(rates) if rates and not bad else None, unit="Gb/s",
                        floor=min((p["rate_gbps"] for p in present if _rate(p.get("rate_gbps"))), default=None)))
    names = [p["port"] for p in present]
    checks.append(counter_check(found, names, previous_counters, rules) if names else
                  check("fabric.counters", INCOMPLETE if expected["count"] else SKIP, "no expected port to read"))
    checks.append(_gpudirect_check(facts, gpudirect, gpu_node) if expected["count"] or gpudirect is not None else
                  check("fabric.gpudirect", SKIP, "no RDMA port expected: GPUDirect RDMA not used"))
    return checks
