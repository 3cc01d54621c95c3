# -*- coding: utf-8 -*-
"""Burn-in fabric judges II: the NCCL environment, the floors' fabric key and the ib_write_bw
pair test, from the facts and expectations of ``kiln_burnin_fabric_checks``.

Pure functions, standard library only. Importable as ``kiln_burnin_fabric_pairs`` and
``ansible.module_utils.kiln.burnin.fabric_pairs``. Bad configuration raises
``kiln_burnin_fabric_checks.FabricError`` (a ``KilnConfigError``, exit 4).

rdma.write_bw, the blame rule (one check per node of the plan). A link is a plan entry;
it is *low* below the floor of its link key. Per HCA of a node (an *end*):

* every valid link of the end low -> the end is **blamed** (FAIL), e.g. ``mlx5_2: 180 Gb/s with
  c1 and c3, floor 360 Gb/s (NDR)``; with 2 nodes a low rail therefore blames both ends;
* a low link whose other end is blamed, while this end passed elsewhere -> explained (no blame);
* any other low link (the end passed with another partner, the partner is not blamed) -> both ends
  are **suspects** (WARN: cable, switch port or either HCA; rerun to confirm);
* a missing, unparseable, failed, timed-out or non-finite result, or a result from another HCA
  than planned -> INCOMPLETE naming the pair and HCA (FAIL still wins);
* a rail no pair measured (its own port down, or no other node with that rail ACTIVE: an
  ``unmeasured`` plan entry) -> INCOMPLETE naming the rail and why: a node never PASSes with a
  rail unmeasured, and a down port never shifts the rails of the others.

A node whose every link is at or above its floor is never blamed nor a suspect.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import verdict as kiln_verdict
from .pair_phase import fabric_key
from .fabric_checks import (
    FABRIC_KEYS, RDMA_ENGINES, TCP_ENGINES, EXPECT_VAR, FabricError, INCOMPLETE, FAIL, PASS, WARN, _IFNAME, _NAME, _count, _natural, _rate, _read_facts, _show, _state, check, expected_ports, validate_fabric_thresholds,
)

__all__ = ["fabric_key_from_facts", "judge_rdma_bw", "nccl_env", "rdma_pair_plan"]


# --------------------------------------------------------------------------- NCCL env and fabric key


def _usable(facts: Any, expected: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """Expected ports that are present, ACTIVE and LinkUp, never an excluded HCA."""
    found, _ = _read_facts(facts)
    exclude = set(expected.get("exclude") or []) if isinstance(expected, Mapping) else set()
    out = []
    for want in (expected.get("ports") or []) if isinstance(expected, Mapping) else []:
        have = (found or {}).get(want.get("port") if isinstance(want, Mapping) else None)
        if have and have["hca"] not in exclude and _state(have)[0]:
            out.append(dict(have, expected_rate=want.get("rate_gbps")))
    return sorted(out, key=lambda p: _natural(p["name"]))


def nccl_env(facts: Any, expected: Mapping[str, Any], socket_ifname: Optional[str] = None) -> Dict[str, Any]:
    """``{"env", "why"}``: NCCL_IB_HCA (exact list of the expected ACTIVE ports), NCCL_SOCKET_IFNAME,
    NCCL_IB_GID_INDEX (RoCE, only when the expectation names one), or NCCL_IB_DISABLE=1."""
    env: Dict[str, str] = {}
    why: List[str] = []
    if socket_ifname is not None:
        if not isinstance(socket_ifname, str) or not _IFNAME.match(socket_ifname):
            raise FabricError(f"NCCL socket interface {_show(socket_ifname)} is not an interface name (e.g. eth0)")
        env["NCCL_SOCKET_IFNAME"] = "=" + socket_ifname
        why.append(f"bootstrap over the management interface {socket_ifname}")
    else:
        why.append("NCCL_SOCKET_IFNAME not set: NCCL chooses the bootstrap interface")
    ports = _usable(facts, expected)
    layers = sorted({str(p.get("link_layer")) for p in ports})
    if len(layers) > 1:
        ports = [p for p in ports if p.get("link_layer") == "InfiniBand"]
        why.append("InfiniBand preferred over " + ", ".join(x for x in layers if x != "InfiniBand"))
    skipped = [p.get("port") for p in (expected.get("ports") or []) if isinstance(p, Mapping)
               and p.get("port") not in {q["name"] for q in ports}] if isinstance(expected, Mapping) else []
    if not ports:
        env["NCCL_IB_DISABLE"] = "1"
        why.append("no usable RDMA port (expected, present, ACTIVE, not excluded): NCCL uses TCP sockets")
        return {"env": env, "why": "; ".join(why)}
    env["NCCL_IB_HCA"] = "=" + ",".join(f"{p['hca']}:{p['ib_port']}" for p in ports)
    why.append(f"{len(ports)} expected ACTIVE {ports[0].get('link_layer') or 'RDMA'} port(s)")
    if skipped:
        why.append("left out (not usable): " + ", ".join(str(s) for s in skipped[:16]))
    if ports[0].get("link_layer") == "Ethernet":
        gid = expected.get("gid_index")
        if _count(gid) and 0 <= gid <= 255:
            env["NCCL_IB_GID_INDEX"] = str(gid)
            why.append(f"RoCE GID index {gid} from {EXPECT_VAR}")
        else:
            why.append("RoCE GID index left to NCCL's dynamic selection (NCCL_IB_GID_INDEX default -1)")
    return {"env": env, "why": "; ".join(why)}


def fabric_key_from_facts(facts_by_node: Mapping[str, Any], engine: str,
                          expected_by_node: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The floors' fabric key: ``tcp`` for an engine without RDMA; ``nvlink`` for one node;
    else kiln_burnin_pair_phase.fabric_key over each node's expected ACTIVE ports."""
    if engine in TCP_ENGINES:
        return {"key": "tcp", "why": f"the {engine} engine runs over TCP sockets whatever the HCAs"}
    if engine not in RDMA_ENGINES:
        raise FabricError(f"unknown all-reduce engine {_show(engine)}; known: {', '.join(TCP_ENGINES + RDMA_ENGINES)}")
    nodes = dict(facts_by_node) if isinstance(facts_by_node, Mapping) else {}
    if len(nodes) == 1:
        return {"key": "nvlink", "why": "one node: the all-reduce stays on NVLink/NVSwitch inside it"}
    ports = {}
    for node, facts in nodes.items():
        expected = (expected_by_node or {}).get(node) or expected_ports(facts, host=str(node))
        ports[node] = [{"port": p["name"], "link_layer": p.get("link_layer"), "state": "ACTIVE",
                        "rate": f"{_rate(p.get('rate_gbps')) or 0:g} Gb/sec"} for p in _usable(facts, expected)
                       if _rate(p.get("rate_gbps"))]
    result = dict(fabric_key(ports))
    if result["key"] not in FABRIC_KEYS + ("tcp",):
        return {"key": "tcp", "why": result["why"] + f"; {result['key']} has no floors, judged as tcp"}
    return result


# --------------------------------------------------------------------------- RDMA pair bandwidth


def _link_key(rate: Optional[float], layer: Optional[str]) -> Optional[str]:
    if rate is None:
        return None
    if layer == "InfiniBand":
        return next((f"ib_{g}" for r, g in ((800, "xdr"), (400, "ndr"), (200, "hdr"), (100, "edr"))
                     if rate >= r * 0.999), None)
    if layer == "Ethernet":
        return next((f"roce{r}" for r in (400, 200, 100) if rate >= r * 0.999), None)
    return None


def _rails(node: str, value: Any) -> List[Dict[str, Any]]:
    ports = value.get("ports") if isinstance(value, Mapping) else value
    if not isinstance(ports, list):
        raise FabricError(f"{node}: rails must be a list of ports (expected_ports()['ports'] or mlx5_0/1 names)")
    out = []
    for port in ports:
        port = port if isinstance(port, Mapping) else {"port": port}
        name = port.get("port")
        if isinstance(name, str) and "/" not in name and ":" not in name:
            name += "/1"
        name = name.replace(":", "/") if isinstance(name, str) else name
        if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}/\d{1,3}$", name):
            raise FabricError(f"{node}: rail {_show(port.get('port'))} is not an RDMA port like mlx5_0/1")
        active = port.get("active", True)
        if not isinstance(active, bool):
            raise FabricError(f"{node}: rail {name}: active must be true or false, got {_show(active)}")
        out.append({"hca": name.split("/")[0], "ib_port": int(name.split("/")[1]),
                    "rate": _rate(port.get("rate_gbps")), "layer": port.get("link_layer"), "active": active,
                    "why": str(port.get("why") or "not ACTIVE")[:120]})
    return out


def _gap(node: str, rail: int, mine: Mapping[str, Any], why: str) -> Dict[str, Any]:
    """A rail of *node* that no ib_write_bw measures (``unmeasured`` says why): judge_rdma_bw makes it
    INCOMPLETE. The runnable entries carry ``unmeasured: None`` (the playbook selects them by it)."""
    return {"client": node, "server": None, "client_hca": mine["hca"], "server_hca": None, "ib_port": mine["ib_port"],
            "server_ib_port": None, "tcp_port": None, "rail": rail, "rate_gbps": None, "link_key": None,
            "unmeasured": why, "down": not mine["active"]}


def rdma_pair_plan(nodes_ports: Mapping[str, Any], base_port: int = 18515) -> List[Dict[str, Any]]:
    """ib_write_bw pairs, rail-matched: rail k is the k-th *expected* port of each node (a down port
    keeps its rail, so it never shifts the others). Per rail, a ring over the sorted nodes whose rail k
    is ACTIVE (node i is the client of node i+1; one pair for 2 nodes), TCP port base_port + k.

    Each port may carry ``active`` (default true) and ``why``. With 2 or more nodes, every rail no pair
    measures is an entry with ``unmeasured`` (why) and ``down`` (its own port is not ACTIVE: fabric.ports
    names it) -- judge_rdma_bw makes it INCOMPLETE, so a node never PASSes rdma.write_bw with a rail
    unmeasured. Runnable entries have ``unmeasured: None``. One node (or none): ``[]``.
    """
    if not isinstance(nodes_ports, Mapping):
        raise FabricError("rdma_pair_plan: nodes_ports must map each node to its expected ports")
    nodes = sorted(str(n) for n in nodes_ports)
    if any(not _NAME.match(n) for n in nodes):
        raise FabricError(f"rdma_pair_plan: node names must be host names, got {', '.join(_show(n) for n in nodes)}")
    rails = {n: _rails(n, nodes_ports[n]) for n in nodes}
    width = max((len(r) for r in rails.values()), default=0)
    if not _count(base_port) or not 1024 <= base_port <= 65535 - width:
        raise FabricError(f"rdma_pair_plan: base_port must be a TCP port 1024-65535 leaving room for every rail, "
                          f"got {_show(base_port)}")
    if len(nodes) < 2:
        return []
    rings = {k: [n for n in nodes if k < len(rails[n]) and rails[n][k]["active"]] for k in range(width)}
    plan, gaps = [], []
    for client in nodes:
        for rail, mine in enumerate(rails[client]):
            ring = rings[rail]
            if not mine["active"]:
                gaps.append(_gap(client, rail, mine, f"its port {mine['hca']}/{mine['ib_port']} is {mine['why']} "
                                                     "(fabric.ports)"))
                continue
            if len(ring) < 2:
                down = [f"{n} {rails[n][rail]['hca']}" for n in nodes if n != client and rail < len(rails[n])]
                gaps.append(_gap(client, rail, mine, f"no other node has rail {rail} ACTIVE"
                                 + (f" ({', '.join(down)} not ACTIVE)" if down else " (the other nodes have fewer rails)")))
                continue
            if len(ring) == 2 and ring[0] != client:
                continue
            server = ring[(ring.index(client) + 1) % len(ring)]
            theirs = rails[server][rail]
            if mine["layer"] and theirs["layer"] and mine["layer"] != theirs["layer"]:
                raise FabricError(f"rail {rail}: {client} {mine['hca']} is {mine['layer']} but {server} "
                                  f"{theirs['hca']} is {theirs['layer']}; they cannot be paired")
            rates = [r for r in (mine["rate"], theirs["rate"]) if r is not None]
            plan.append({"client": client, "server": server, "client_hca": mine["hca"], "server_hca": theirs["hca"],
                         "ib_port": mine["ib_port"], "server_ib_port": theirs["ib_port"], "tcp_port": base_port + rail,
                         "rail": rail, "rate_gbps": min(rates) if len(rates) == 2 else None,
                         "link_key": _link_key(min(rates), mine["layer"] or theirs["layer"]) if len(rates) == 2
                         else None, "unmeasured": None})
    return plan + gaps


def _floor_table(floors: Any) -> Dict[str, float]:
    if isinstance(floors, Mapping) and "schema" in floors:
        floors = validate_fabric_thresholds(floors)["rdma_write_bw"]["floors"]
    if not isinstance(floors, Mapping):
        raise FabricError("judge_rdma_bw: floors must be load_fabric_thresholds() or {link key: Gb/s}")
    table = {}
    for key, entry in floors.items():
        value = _rate(entry.get("value") if isinstance(entry, Mapping) else entry)
        if key not in FABRIC_KEYS or value is None:
            raise FabricError(f"judge_rdma_bw: floor {_show(key)}: {_show(entry)} is not a link key with a finite Gb/s")
        table[key] = value
    return table


def _link_result(entry: Mapping[str, Any], result: Any, table: Mapping[str, float]) -> Dict[str, Any]:
    where = f"{entry['client']} {entry['client_hca']} -> {entry['server']} {entry['server_hca']}"
    floor = table.get(entry.get("link_key") or "")
    out = {"entry": entry, "where": where, "floor": floor, "value": None, "problem": None}
    if floor is None:
        out["problem"] = f"{where}: no ib_write_bw floor for link {_show(entry.get('link_key'))} (rate unknown?)"
    elif not isinstance(result, Mapping):
        out["problem"] = f"{where}: no result"
    elif result.get("timed_out") is True or (result.get("rc") not in (None, 0)):
        out["problem"] = f"{where}: ib_write_bw " + ("timed out" if result.get("timed_out") is True else
                                                     f"exit code {_show(result.get('rc'))}")
    elif result.get("ok") is not True or _rate(result.get("bw_avg_gbps")) is None:
        problems = result.get("problems") if isinstance(result.get("problems"), list) else []
        out["problem"] = f"{where}: unusable result (bw_avg_gbps {_show(result.get('bw_avg_gbps'))}" + (
            "; " + "; ".join(str(p)[:120] for p in problems[:3]) if problems else "") + ")"
    elif result.get("device") not in (None, entry["client_hca"]):
        out["problem"] = f"{where}: the result is from {_show(result.get('device'))}, not the planned HCA"
    else:
        out["value"] = _rate(result["bw_avg_gbps"])
    return out


def judge_rdma_bw(plan: Sequence[Mapping[str, Any]], results: Sequence[Any], floors: Any) -> Dict[str, List[Dict]]:
    """``{node: [rdma.write_bw check]}`` for every node of *plan*; the blame rule is in the module docstring.

    *results*: per plan entry (same order), a ``parse_perftest`` result plus ``rc``/``timed_out``.
    """
    table = _floor_table(floors)
    if not isinstance(plan, (list, tuple)) or not isinstance(results, (list, tuple)) or len(results) > len(plan):
        raise FabricError("judge_rdma_bw: plan and results must be lists, at most one result per plan entry")
    links, gaps = [], {}
    for index, entry in enumerate(plan):
        if isinstance(entry, Mapping) and entry.get("unmeasured") and isinstance(entry.get("client"), str) \
                and isinstance(entry.get("client_hca"), str):
            gaps.setdefault(entry["client"], []).append(
                f"{entry['client_hca']} (rail {_show(entry.get('rail'))}) not measured: {str(entry['unmeasured'])[:200]}")
            continue
        if not isinstance(entry, Mapping) or not all(isinstance(entry.get(k), str) for k in
                                                     ("client", "server", "client_hca", "server_hca")):
            raise FabricError(f"judge_rdma_bw: plan entry {index} is not from rdma_pair_plan: {_show(entry)}")
        links.append(_link_result(entry, results[index] if index < len(results) else None, table))
    ends: Dict[Tuple[str, str], List[Tuple[Dict[str, Any], Tuple[str, str]]]] = {}
    for link in links:
        a = (link["entry"]["client"], link["entry"]["client_hca"])
        b = (link["entry"]["server"], link["entry"]["server_hca"])
        ends.setdefault(a, []).append((link, b))
        ends.setdefault(b, []).append((link, a))

    def low(link: Mapping[str, Any]) -> bool:
        return link["value"] is not None and link["value"] < link["floor"]

    blamed = {end for end, mine in ends.items() if [lk for lk, _ in mine if lk["value"] is not None]
              and all(low(lk) for lk, _ in mine if lk["value"] is not None)}
    out: Dict[str, List[Dict[str, Any]]] = {}
    for node in sorted({e[0] for e in ends} | set(gaps)):
        statuses, reasons, values, floors_seen = [PASS], [], [], []
        if gaps.get(node):  # every rail measured, or not PASS: the unmeasured rail named
            statuses.append(INCOMPLETE)
            reasons += gaps[node]
        for end in sorted((e for e in ends if e[0] == node), key=lambda e: _natural(e[1])):
            for link, other in ends[end]:
                if link["value"] is not None:
                    values.append(link["value"])
                    floors_seen.append(link["floor"])
                elif link["problem"]:
                    statuses.append(INCOMPLETE)
                    reasons.append(link["problem"])
            lows = [(lk, o) for lk, o in ends[end] if low(lk)]
            if end in blamed:
                statuses.append(FAIL)
                worst_low = min(lk["value"] for lk, _ in lows)
                key = str(lows[0][0]["entry"].get("link_key"))
                label = key.split("_")[1].upper() if key.startswith("ib_") else f"RoCE {key[4:]}G"
                reasons.append(f"{end[1]}: {worst_low:g} Gb/s with {' and '.join(o[0] for _, o in lows)}, "
                               f"floor {lows[0][0]['floor']:g} Gb/s ({label})")
            for link, other in lows:
                if end not in blamed and other not in blamed:
                    statuses.append(WARN)
                    reasons.append(f"suspects {end[0]} {end[1]} and {other[0]} {other[1]}: {link['value']:g} Gb/s < "
                                   f"floor {link['floor']:g} between them only (cable, switch port or either HCA; "
                                   "each passed with another partner); rerun to confirm")
                elif end not in blamed:
                    reasons.append(f"{end[1]} low only with blamed {other[0]} {other[1]} ({link['value']:g} Gb/s)")
        status = kiln_verdict.worst(statuses) or INCOMPLETE
        detail = "; ".join(reasons) if reasons else f"{len(values)} link(s) at or above the floor"
        out[node] = [check("rdma.write_bw", status, detail, metric="ib_write_bw_avg_min", unit="Gb/s",
                           value=min(values) if values else None, floor=min(floors_seen) if floors_seen else None,
                           links=[{"client": lk["entry"]["client"], "client_hca": lk["entry"]["client_hca"],
                                   "server": lk["entry"]["server"], "server_hca": lk["entry"]["server_hca"],
                                   "gbps": lk["value"], "floor": lk["floor"], "problem": lk["problem"]}
                                  for lk in links if node in (lk["entry"]["client"], lk["entry"]["server"])])]
    for entry in plan:
        for node in (entry["client"], entry["server"]):
            if isinstance(node, str):
                out.setdefault(node, [check("rdma.write_bw", INCOMPLETE, "no link measured")])
    return out
