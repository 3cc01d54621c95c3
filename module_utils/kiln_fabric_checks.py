# -*- coding: utf-8 -*-
"""Burn-in fabric judges: expected RDMA ports and the passive port, counter and GPUDirect checks.

Pure functions, standard library only (PyYAML lazily, for the rules file). Importable as
``kiln_fabric_checks`` and ``ansible.module_utils.kiln_fabric_checks``. Facts are
``ansible_facts['kiln_fabric']`` (schema ``kiln.fabric/v1``); rules are ``data/burnin_fabric.yml``.
Ports are named ``<hca>/<port>`` (``mlx5_0/1``). Hostile facts never raise: they make checks
INCOMPLETE. Bad configuration (``kiln_burnin_fabric_expect``, rules, plans) raises
:class:`FabricError`, a ``KilnConfigError`` (exit 4).

Expectation (:func:`expected_ports`), field by field: the inventory's
``kiln_burnin_fabric_expect``, else the node's last PASS in its history (``history_fabric``),
else the node itself (weaker: a port the node never had cannot be missed, its down ports only
WARN, and its rate is its own best active rate per link layer).

The NCCL environment, the floors' fabric key and the ib_write_bw pair test are in
``kiln_fabric_pairs``.
"""

from __future__ import annotations

import copy
import math
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

try:
    from ansible.module_utils import kiln_verdict
except ImportError:  # imported as a top-level module (unit tests)
    import kiln_verdict  # type: ignore[no-redef]

__all__ = ["ERROR_COUNTERS", "FabricError", "SCHEMA", "counter_deltas", "counter_snapshot", "expected_ports",
           "history_fabric", "load_fabric_thresholds", "passive_fabric_checks", "validate_fabric_thresholds"]

PASS, WARN, FAIL, INCOMPLETE, SKIP = (kiln_verdict.PASS, kiln_verdict.WARN, kiln_verdict.FAIL,
                                      kiln_verdict.INCOMPLETE, kiln_verdict.SKIP)
SCHEMA = "kiln.burnin.fabric/v1"
FACTS_SCHEMA = "kiln.fabric/v1"
EXPECT_VAR = "kiln_burnin_fabric_expect"
#: sysfs counters/ names of the error counters (data counters such as port_xmit_data are not errors).
ERROR_COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors", "link_error_recovery", "port_xmit_discards",
                  "port_rcv_remote_physical_errors", "local_link_integrity_errors", "excessive_buffer_overrun_errors",
                  "port_xmit_constraint_errors", "port_rcv_constraint_errors", "VL15_dropped")
FABRIC_KEYS = ("ib_xdr", "ib_ndr", "ib_hdr", "ib_edr", "roce400", "roce200", "roce100")
LINK_LAYERS = ("InfiniBand", "Ethernet")
WIDTHS = ("1X", "2X", "4X", "8X", "12X")
#: InfiniBand lane speeds (Gb/s per lane) -> name, for the detail texts.
LANE_SPEEDS = ((200, "XDR"), (100, "NDR"), (50, "HDR"), (25, "EDR"), (14, "FDR"), (10, "QDR"), (5, "DDR"), (2.5, "SDR"))
TCP_ENGINES = ("cpu", "kiln-cpu", "gloo", "mpi", "tcp")
RDMA_ENGINES = ("nccl-tests", "nccl")
_CONFIDENCES = ("VERIFIED", "DERIVED", "REPORTED", "UNVERIFIED", "SITE")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_IFNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,14}$")
_EXPECT_KEYS = ("ports", "rate_gbps", "width", "link_layer", "exclude", "hcas", "gid_index")
_MAX_RATE = 10000.0
_CHECKS = ("fabric.facts", "fabric.ports", "fabric.rate", "fabric.counters", "fabric.gpudirect")


class FabricError(kiln_verdict.KilnConfigError):
    """A configuration problem of the fabric checks (inventory, rules file, plan): exit code 4."""


def check(check_id: str, status: str, detail: str = "", **fields: Any) -> Dict[str, Any]:
    return kiln_verdict.make_check(check_id, status, detail=detail, **fields)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rate(value: Any) -> Optional[float]:
    """A plausible link rate in Gb/s (finite, 0 < r <= 10000), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        rate = float(value)
    except OverflowError:
        return None
    return rate if math.isfinite(rate) and 0 < rate <= _MAX_RATE else None


def _natural(name: str) -> Tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(name)))


def _speed(rate: Optional[float], width: Optional[str]) -> Optional[str]:
    lanes = int(width[:-1]) if isinstance(width, str) and width in WIDTHS else None
    if rate is None or not lanes:
        return None
    return next((name for per_lane, name in LANE_SPEEDS if abs(rate / lanes - per_lane) < 0.01 * per_lane), None)


def _describe(rate: Optional[float], width: Optional[str], speed: Optional[str]) -> str:
    text = "unknown rate" if rate is None else f"{rate:g} Gb/s"
    extra = " ".join(str(p) for p in (width, speed) if p)
    return f"{text} ({extra})" if extra else text


# --------------------------------------------------------------------------- facts


def _read_facts(facts: Any) -> Tuple[Optional[Dict[str, Dict[str, Any]]], List[str]]:
    """(ports by name, problems); ports None when the facts are unusable as a whole."""
    if not isinstance(facts, Mapping):
        return None, [f"no fabric facts (got {type(facts).__name__}): run the fabric_facts role first"]
    raw = facts.get("problems") if facts.get("problems") is not None else []
    problems = [str(p)[:200] for p in raw] if isinstance(raw, list) else [f"facts problems is not a list: {_show(raw)}"]
    if facts.get("schema") != FACTS_SCHEMA:
        return None, problems + [f"fabric facts schema {_show(facts.get('schema'))}, expected {FACTS_SCHEMA!r}"]
    hcas = facts.get("hcas")
    if not isinstance(hcas, list):
        return None, problems + [f"fabric facts hcas is not a list: {_show(hcas)}"]
    ports: Dict[str, Dict[str, Any]] = {}
    for position, hca in enumerate(hcas):
        name = hca.get("name") if isinstance(hca, Mapping) else None
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(f"HCA #{position}: name {_show(name)} is not an RDMA device name")
            continue
        hca_ports = hca.get("ports")
        if not isinstance(hca_ports, list):
            problems.append(f"{name}: ports is not a list: {_show(hca_ports)}")
            continue
        for port in hca_ports:
            number = port.get("port") if isinstance(port, Mapping) else None
            if not _count(number) or not 0 < number < 256:
                problems.append(f"{name}: port number {_show(number)} is not 1-255")
                continue
            key = f"{name}/{number}"
            if key in ports:
                problems.append(f"{key}: listed twice (contradictory facts)")
            ports[key] = dict(port, hca=name, ib_port=number, name=key)
    return ports, problems


def _state(port: Mapping[str, Any]) -> Tuple[Optional[bool], str]:
    """(ACTIVE and LinkUp?, 'DOWN (Polling)'-style text); None when unknown or contradictory."""
    state, phys = port.get("state"), port.get("phys_state")
    text = f"{state if isinstance(state, str) else _show(state)} ({phys if isinstance(phys, str) else _show(phys)})"
    if not isinstance(state, str) or not isinstance(phys, str):
        return None, text + ": state not reported"
    active, up = state.strip().upper() == "ACTIVE", phys.strip().lower() == "linkup"
    for code, want, flag in (("state_code", 4, active), ("phys_state_code", 5, up)):
        value = port.get(code)
        if value is not None and (not _count(value) or (value == want) != flag):
            return None, text + f": contradicts {code} {_show(value)}"
    return active and up, text


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


# --------------------------------------------------------------------------- rules file


def default_fabric_path() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(here), "data", "burnin_fabric.yml")


def _rule_meta(where: str, rule: Mapping[str, Any]) -> None:
    if rule.get("confidence") not in _CONFIDENCES:
        raise FabricError(f"{where}: confidence {_show(rule.get('confidence'))} is not one of {', '.join(_CONFIDENCES)}")
    if not isinstance(rule.get("source"), str) or not rule["source"].strip():
        raise FabricError(f"{where}: no source (say where the value comes from)")


def validate_fabric_thresholds(data: Any, where: str = "fabric rules") -> Dict[str, Any]:
    """Check a loaded rules document (types, finite, warn <= fail); FabricError naming the entry."""
    if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
        raise FabricError(f"{where}: not a kiln fabric rules file (schema must be {SCHEMA!r})")
    limit = (data.get("limits") or {}).get("counter_max") if isinstance(data.get("limits"), Mapping) else None
    if not _count(limit) or limit < 1:
        raise FabricError(f"{where}: limits.counter_max must be a positive integer, got {_show(limit)}")
    counters = data.get("counters")
    if not isinstance(counters, Mapping):
        raise FabricError(f"{where}: no 'counters' mapping")
    for name in counters:
        if name not in ERROR_COUNTERS:
            raise FabricError(f"{where}: counters.{_show(name)} is not an error counter ({', '.join(ERROR_COUNTERS)})")
    for name in ERROR_COUNTERS:
        rule, at = counters.get(name), f"{where}: counters.{name}"
        if not isinstance(rule, Mapping):
            raise FabricError(f"{at}: missing or not a mapping")
        extra = sorted(str(k) for k in rule if k not in ("warn", "fail", "bits", "required", "confidence", "source"))
        if extra:
            raise FabricError(f"{at}: unknown key(s) {', '.join(extra)}")
        _rule_meta(at, rule)
        warn, fail, bits = rule.get("warn"), rule.get("fail"), rule.get("bits")
        if not _count(warn) or not 1 <= warn < limit:
            raise FabricError(f"{at}.warn must be a whole number 1..counter_max, got {_show(warn)}")
        if fail is not None and (not _count(fail) or not warn <= fail < limit):
            raise FabricError(f"{at}.fail must be null or a whole number >= warn ({warn}), got {_show(fail)}")
        if bits is not None and (not _count(bits) or not 1 <= bits <= 64):
            raise FabricError(f"{at}.bits must be 1-64, got {_show(bits)}")
        if not isinstance(rule.get("required", False), bool):
            raise FabricError(f"{at}.required must be true or false")
    rdma = data.get("rdma_write_bw")
    floors = rdma.get("floors") if isinstance(rdma, Mapping) else None
    if not isinstance(floors, Mapping) or not floors:
        raise FabricError(f"{where}: no rdma_write_bw.floors mapping")
    for key, entry in floors.items():
        at = f"{where}: rdma_write_bw.floors.{_show(key)}"
        if key not in FABRIC_KEYS or not isinstance(entry, Mapping):
            raise FabricError(f"{at}: keys are {', '.join(FABRIC_KEYS)}, each {{value, confidence, source}}")
        _rule_meta(at, entry)
        if _rate(entry.get("value")) is None:
            raise FabricError(f"{at}.value must be a finite rate in Gb/s (0 < value <= {_MAX_RATE:g}), "
                              f"got {_show(entry.get('value'))}")
    return copy.deepcopy(dict(data))


def load_fabric_thresholds(path: Optional[str] = None) -> Dict[str, Any]:
    """Load and validate ``data/burnin_fabric.yml`` (or *path*); FabricError on a bad file."""
    path = path or default_fabric_path()
    return validate_fabric_thresholds(kiln_verdict.read_yaml(path, "fabric rules", FabricError), path)


# --------------------------------------------------------------------------- counters


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


def _counter_check(found: Mapping[str, Dict[str, Any]], wanted: Sequence[str], previous: Any,
                   rules: Mapping[str, Any]) -> Dict[str, Any]:
    limit = rules["limits"]["counter_max"]
    bad, notes, statuses = [], [], [PASS]
    have_previous = isinstance(previous, Mapping) and bool(previous)
    current = {n: dict(found[n].get("counters")) if isinstance(found[n].get("counters"), Mapping) else {}
               for n in wanted}
    deltas = counter_deltas(current, previous if have_previous else {})
    worst_delta = 0
    for port in wanted:
        for name in ERROR_COUNTERS:
            rule, value = rules["counters"][name], current[port].get(name)
            if value is None:
                if rule.get("required"):
                    statuses.append(INCOMPLETE)
                    bad.append(f"{port} {name} not reported")
                continue
            if not _count(value) or not 0 <= value <= limit:
                statuses.append(INCOMPLETE)
                bad.append(f"{port} {name} {_show(value)} is not a plausible count")
                continue
            entry = deltas[port][name]
            if entry["reset"]:
                notes.append(f"{port} {name} {value} < {entry['previous']} before: counters cleared or HCA replaced; "
                             "baseline restarts")
                continue
            delta = entry["delta"] if entry["delta"] is not None else value
            since = "since the last run" if entry["delta"] is not None else "since the counters were cleared"
            worst_delta = max(worst_delta, delta)
            saturated = rule.get("bits") is not None and value >= 2 ** rule["bits"] - 1
            if rule.get("fail") is not None and delta >= rule["fail"]:
                statuses.append(FAIL)
                bad.append(f"{port} {name} +{delta} {since} (fail >= {rule['fail']})")
            elif delta >= rule["warn"]:
                statuses.append(WARN)
                bad.append(f"{port} {name} +{delta} {since} (warn >= {rule['warn']})")
            elif saturated:
                statuses.append(WARN)
                bad.append(f"{port} {name} saturated at {value}: its growth is unknown; clear the counters "
                           "(perfquery -R or ibclearerrors) and re-run")
    status = kiln_verdict.worst(statuses) or INCOMPLETE
    lead = "deltas since the last run" if have_previous else \
        "no previous counter snapshot: judged on absolute values since the counters were last cleared"
    detail = "; ".join(bad) if bad else f"no error counter at its warn threshold on {len(wanted)} port(s)"
    return check("fabric.counters", status, f"{detail} ({lead}{'; ' + '; '.join(notes) if notes else ''})",
                 metric="max_error_delta", value=worst_delta, unit="errors", thresholds="data/burnin_fabric.yml")


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


def passive_fabric_checks(facts: Any, expected: Mapping[str, Any], previous_counters: Any = None,
                          thresholds: Optional[Mapping[str, Any]] = None, gpudirect: Any = None,
                          gpu_node: bool = False) -> List[Dict[str, Any]]:
    """fabric.facts, fabric.ports, fabric.rate, fabric.counters and fabric.gpudirect for one node.

    *expected* is :func:`expected_ports`; *previous_counters* the node's last
    :func:`counter_snapshot`; *thresholds* :func:`load_fabric_thresholds` (loaded when None);
    *gpudirect* the stack's plan ``{"method": dma_buf|peermem|none}``; *gpu_node*: the node has or
    should have GPUs (a GPU node without a plan is INCOMPLETE, never SKIP).
    """
    rules = validate_fabric_thresholds(thresholds) if thresholds is not None else load_fabric_thresholds()
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
    checks.append(_counter_check(found, names, previous_counters, rules) if names else
                  check("fabric.counters", INCOMPLETE if expected["count"] else SKIP, "no expected port to read"))
    checks.append(_gpudirect_check(facts, gpudirect, gpu_node) if expected["count"] or gpudirect is not None else
                  check("fabric.gpudirect", SKIP, "no RDMA port expected: GPUDirect RDMA not used"))
    return checks
