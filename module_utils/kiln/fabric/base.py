# -*- coding: utf-8 -*-
"""Burn-in fabric judges, the shared base: constants, the facts reader, port states and the rules file
(``data/burnin_fabric.yml``).

Pure functions, standard library only (PyYAML lazily, for the rules file). Importable as
``kiln_fabric_base`` and ``ansible.module_utils.kiln.fabric.base``. ``kiln_burnin_fabric_checks`` re-exports
every name here; the expectation and the passive checks are there, the error counters in
``kiln_fabric_counters``, the ib_write_bw pairs in ``kiln_burnin_fabric_pairs``.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import verdict as kiln_verdict
from ..datafiles import data_path

__all__ = ["ERROR_COUNTERS", "EXPECT_VAR", "FabricError", "SCHEMA", "check", "default_fabric_path",
           "load_fabric_thresholds", "validate_fabric_thresholds"]

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
#: The error counters' growth between the reads before and after the run's own traffic (final verdict only).
DURING_RUN_CHECK = "fabric.counters.during_run"
#: HCA facts that identify the hardware behind a port (with the port's GUID): a counter baseline
#: recorded under other values is not this port's (``kiln_fabric_counters``). ``serial``: where the
#: facts carry one (sysfs has none; a site's fact module may add it).
HCA_IDENTITY = ("node_guid", "sys_image_guid", "fw_ver", "board_id", "serial")


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
            ports[key] = dict(port, hca=name, ib_port=number, name=key,
                              hca_identity={k: hca.get(k) for k in HCA_IDENTITY if isinstance(hca.get(k), str)})
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


# --------------------------------------------------------------------------- rules file


def default_fabric_path() -> str:
    return data_path("burnin_fabric.yml")


def _rule_meta(where: str, rule: Mapping[str, Any]) -> None:
    if rule.get("confidence") not in _CONFIDENCES:
        raise FabricError(f"{where}: confidence {_show(rule.get('confidence'))} is not one of {', '.join(_CONFIDENCES)}")
    if not isinstance(rule.get("source"), str) or not rule["source"].strip():
        raise FabricError(f"{where}: no source (say where the value comes from)")


def _levels(at: str, rule: Mapping[str, Any], limit: int) -> None:
    warn, fail = rule.get("warn"), rule.get("fail")
    if not _count(warn) or not 1 <= warn < limit:
        raise FabricError(f"{at}.warn must be a whole number 1..counter_max, got {_show(warn)}")
    if fail is not None and (not _count(fail) or not warn <= fail < limit):
        raise FabricError(f"{at}.fail must be null or a whole number >= warn ({warn}), got {_show(fail)}")


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
        extra = sorted(str(k) for k in rule if k not in ("warn", "fail", "bits", "required", "confidence", "source",
                                                          "during_run"))
        if extra:
            raise FabricError(f"{at}: unknown key(s) {', '.join(extra)}")
        _rule_meta(at, rule)
        _levels(at, rule, limit)
        during = rule.get("during_run")
        if not isinstance(during, Mapping):
            raise FabricError(f"{at}.during_run: missing or not a mapping {{warn, fail, confidence, source}} (the "
                              "growth between the reads before and after the run's own traffic)")
        extra = sorted(str(k) for k in during if k not in ("warn", "fail", "confidence", "source"))
        if extra:
            raise FabricError(f"{at}.during_run: unknown key(s) {', '.join(extra)}")
        _rule_meta(at + ".during_run", during)
        _levels(at + ".during_run", during, limit)
        bits = rule.get("bits")
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


def load_fabric_thresholds(path: str) -> Dict[str, Any]:
    """Load and validate the fabric rules file at *path* (the module's fabric_path; on the controller
    and in tests :func:`default_fabric_path`, ``data/burnin_fabric.yml``); FabricError on a bad file."""
    if not path or not isinstance(path, str):
        raise FabricError(f"load_fabric_thresholds: the fabric rules file's path is required, not {path!r}")
    return validate_fabric_thresholds(kiln_verdict.read_yaml(path, "fabric rules", FabricError), path)
