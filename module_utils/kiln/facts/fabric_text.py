# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fabric facts, the text tools: parsers of ``ibstat``, ``ibv_devinfo [-v]``, ``perfquery [-x]`` and
perftest (``ib_write_bw`` / ``ib_read_bw`` / ``ib_send_bw``) output, each returning a ``problems`` list
(formats: module_utils/kiln/facts/fabric.py's docstring; recorded outputs in tests/fixtures/rdma/recorded).

Pure functions, standard library only (ships to managed hosts through AnsiballZ). The sysfs reader,
the shared normalisers and ``merge_sources`` are in ``kiln_fabric``. ``kiln_fabric_port_lines`` (one
line per port of the facts, for the operator) is the filter of that name.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Optional

from .fabric import (  # noqa: F401
        HCA_MODELS, PERFQUERY_TO_SYSFS, _LINK_LAYERS, _clip, _int_value, _text_input, normalize_guid, normalize_phys_state, normalize_state,
    )


# --------------------------------------------------------------------------- ibstat
_IBSTAT_CA = re.compile(r"^CA '([^']{1,64})'\s*$")
_IBSTAT_PORT = re.compile(r"^\s+Port (\d{1,3}):\s*$")
_IBSTAT_FIELD = re.compile(r"^\s+([A-Za-z][A-Za-z ]*?):\s*(.*?)\s*$")


def _ibstat_hca(name: str) -> dict[str, Any]:
    return {"name": name, "hca_type": None, "model": None, "ports_declared": None, "fw_ver": None,
            "hw_ver": None, "node_guid": None, "sys_image_guid": None, "ports": []}


def _ibstat_port(number: int) -> dict[str, Any]:
    return {"port": number, "state": None, "phys_state": None, "rate_gbps": None, "lid": None, "lmc": None,
            "sm_lid": None, "capability_mask": None, "port_guid": None, "link_layer": None}


def _finish_ibstat(hca: dict[str, Any], problems: list[str]) -> None:
    where = hca["name"]
    if hca["hca_type"] is None:
        problems.append(f"ibstat {where}: no 'CA type' line")
    elif hca["model"] is None:
        problems.append(f"ibstat {where}: CA type {_clip(hca['hca_type'])} is not in HCA_MODELS")
    if hca["ports_declared"] is not None and hca["ports_declared"] != len(hca["ports"]):
        problems.append(f"ibstat {where}: says {hca['ports_declared']} ports but lists {len(hca['ports'])} "
                        f"(truncated output?)")
    for port in hca["ports"]:
        missing = [k for k in ("state", "phys_state", "rate_gbps", "link_layer") if port[k] is None]
        if missing:
            problems.append(f"ibstat {where} port {port['port']}: no {', '.join(missing)} (truncated or unparseable output)")


#: ibstat's ``Rate:`` value: Gb/s, with the speed in brackets where ibstat adds it (``40 (FDR10)``).
_IBSTAT_RATE = re.compile(r"^\s*(\d{1,6}(?:\.\d{1,6})?)\s*(?:\(\s*[A-Za-z0-9]{2,8}\s*\))?\s*$")


def parse_ibstat(text: Any) -> dict[str, Any]:
    """``ibstat`` text -> ``{'hcas': [{name, hca_type, model, fw_ver, ..., ports: [...]}], 'problems'}``.

    Port ``state`` and ``phys_state`` use the sysfs labels (``ACTIVE``, ``LinkUp``); GUIDs the
    sysfs ``xxxx:xxxx:xxxx:xxxx`` form; ``rate_gbps`` is ibstat's ``Rate`` (Gb/s, no width or speed).
    """
    problems: list[str] = []
    body = _text_input(text, "ibstat", problems)
    if body is None:
        return {"hcas": [], "problems": problems}
    hcas: list[dict[str, Any]] = []
    hca: Optional[dict[str, Any]] = None
    port: Optional[dict[str, Any]] = None
    for number, line in enumerate(body.splitlines(), 1):
        if not line.strip():
            continue
        match = _IBSTAT_CA.match(line)
        if match:
            if hca is not None:
                _finish_ibstat(hca, problems)
            hca, port = _ibstat_hca(match.group(1)), None
            hcas.append(hca)
            continue
        match = _IBSTAT_PORT.match(line)
        if match and hca is not None:
            port = _ibstat_port(int(match.group(1)))
            hca["ports"].append(port)
            continue
        match = _IBSTAT_FIELD.match(line)
        if not match or hca is None:
            problems.append(f"ibstat line {number}: unexpected {_clip(line.strip())}")
            continue
        key, value = match.group(1).strip().lower(), match.group(2)
        if port is None:
            if key == "ca type":
                hca["hca_type"] = value or None
                hca["model"] = HCA_MODELS.get(value)
            elif key == "number of ports":
                hca["ports_declared"] = _int_value(value)
            elif key == "firmware version":
                hca["fw_ver"] = value or None
            elif key == "hardware version":
                hca["hw_ver"] = value or None
            elif key in ("node guid", "system image guid"):
                guid = normalize_guid(value)
                if guid is None:
                    problems.append(f"ibstat {hca['name']}: {match.group(1)} {_clip(value)} is not a GUID")
                hca["node_guid" if key == "node guid" else "sys_image_guid"] = guid
            continue
        where = f"ibstat {hca['name']} port {port['port']}"
        if key == "state":
            port["state"] = normalize_state(value)
            if port["state"] is None:
                problems.append(f"{where}: state {_clip(value)} is not a port state")
        elif key == "physical state":
            port["phys_state"] = normalize_phys_state(value)
            if port["phys_state"] is None:
                problems.append(f"{where}: physical state {_clip(value)} is not known")
        elif key == "rate":
            # "400", or with the speed ibstat names when the rate alone is ambiguous: "40 (FDR10)"
            match = _IBSTAT_RATE.match(value)
            try:
                rate = float(match.group(1)) if match else float("nan")
            except ValueError:
                rate = float("nan")
            if not math.isfinite(rate) or rate <= 0 or rate > 100000:
                problems.append(f"{where}: rate {_clip(value)} is not a number of Gb/s")
            else:
                port["rate_gbps"] = rate
        elif key in ("base lid", "lmc", "sm lid"):
            parsed = _int_value(value)
            if parsed is None or parsed > 0xFFFF:
                problems.append(f"{where}: {match.group(1)} {_clip(value)} is not an integer")
            else:
                port[{"base lid": "lid", "lmc": "lmc", "sm lid": "sm_lid"}[key]] = parsed
        elif key == "capability mask":
            port["capability_mask"] = value if re.fullmatch(r"0x[0-9a-fA-F]{1,8}", value) else None
        elif key == "port guid":
            port["port_guid"] = normalize_guid(value)
        elif key == "link layer":
            port["link_layer"] = _LINK_LAYERS.get(value.lower())
            if port["link_layer"] is None:
                problems.append(f"{where}: link layer {_clip(value)} is neither InfiniBand nor Ethernet")
    if hca is not None:
        _finish_ibstat(hca, problems)
    if not hcas:
        problems.append("ibstat: no \"CA '<name>'\" block found")
    return {"hcas": hcas, "problems": problems}


# --------------------------------------------------------------------------- ibv_devinfo
_DEVINFO_HCA = re.compile(r"^hca_id:\s*(\S{1,64})\s*$")
_DEVINFO_PORT = re.compile(r"^\s+port:\s*(\d{1,3})\s*$")
_DEVINFO_FIELD = re.compile(r"^\s+([A-Za-z_][A-Za-z0-9_ ]*?|GID\[\s*\d+\]):\s*(.*?)\s*$")
_CODED = re.compile(r"^(.*?)\s*\((\w+)\)$")


def parse_ibv_devinfo(text: Any) -> dict[str, Any]:
    """``ibv_devinfo`` / ``ibv_devinfo -v`` text -> ``{'hcas': [...], 'problems'}``.

    Per HCA: name, transport, fw_ver, node_guid, sys_image_guid, vendor_id, vendor_part_id,
    hca_type (``MT<vendor_part_id>``), model, board_id, phys_port_cnt, ports; per port: state,
    state_code, phys_state, phys_state_code (``-v``), active_mtu, sm_lid, lid, link_layer, width
    and speed (``-v``), gids (``-v``: index -> text).
    """
    problems: list[str] = []
    body = _text_input(text, "ibv_devinfo", problems)
    if body is None:
        return {"hcas": [], "problems": problems}
    hcas: list[dict[str, Any]] = []
    hca: Optional[dict[str, Any]] = None
    port: Optional[dict[str, Any]] = None
    orphan = 0
    for number, line in enumerate(body.splitlines(), 1):
        if not line.strip():
            continue
        match = _DEVINFO_HCA.match(line)
        if match:
            hca = {"name": match.group(1), "transport": None, "fw_ver": None, "node_guid": None,
                   "sys_image_guid": None, "vendor_id": None, "vendor_part_id": None, "hca_type": None,
                   "model": None, "board_id": None, "phys_port_cnt": None, "ports": []}
            port = None
            hcas.append(hca)
            continue
        if hca is None:
            orphan += 1
            continue
        match = _DEVINFO_PORT.match(line)
        if match:
            port = {"port": int(match.group(1)), "state": None, "state_code": None, "phys_state": None,
                    "phys_state_code": None, "active_mtu": None, "sm_lid": None, "lid": None,
                    "link_layer": None, "width": None, "speed": None, "gids": {}}
            hca["ports"].append(port)
            continue
        match = _DEVINFO_FIELD.match(line)
        if not match:
            continue  # continuation lines of -v flag lists (BAD_PKEY_CNTR, ...) carry no fact
        key, value = match.group(1).strip(), match.group(2)
        if port is None:
            if key in ("transport", "fw_ver", "board_id", "vendor_id"):
                hca[key] = value or None
            elif key in ("node_guid", "sys_image_guid"):
                hca[key] = normalize_guid(value)
                if hca[key] is None:
                    problems.append(f"ibv_devinfo {hca['name']}: {key} {_clip(value)} is not a GUID")
            elif key == "vendor_part_id":
                part = _int_value(value)
                hca["vendor_part_id"] = part
                if part is not None:
                    hca["hca_type"] = f"MT{part}"
                    hca["model"] = HCA_MODELS.get(hca["hca_type"])
            elif key == "phys_port_cnt":
                hca["phys_port_cnt"] = _int_value(value)
            continue
        where = f"ibv_devinfo {hca['name']} port {port['port']}"
        coded = _CODED.match(value)
        label, code = (coded.group(1), coded.group(2)) if coded else (value, None)
        if key == "state":
            port["state"] = normalize_state(label)
            port["state_code"] = int(code) if code and code.isdigit() else None
            if port["state"] is None:
                problems.append(f"{where}: state {_clip(value)} is not a port state")
        elif key == "phys_state":
            port["phys_state"] = normalize_phys_state(label)
            port["phys_state_code"] = int(code) if code and code.isdigit() else None
        elif key == "active_mtu":
            port["active_mtu"] = _int_value(label)
        elif key in ("sm_lid", "port_lid"):
            port["sm_lid" if key == "sm_lid" else "lid"] = _int_value(label)
        elif key == "link_layer":
            port["link_layer"] = _LINK_LAYERS.get(label.lower())
            if port["link_layer"] is None:
                problems.append(f"{where}: link_layer {_clip(value)} is neither InfiniBand nor Ethernet")
        elif key == "active_width":
            port["width"] = label if re.fullmatch(r"\d+X", label) else None
        elif key == "active_speed":
            port["speed"] = label or None
        elif key.startswith("GID["):
            index = int(re.sub(r"\D", "", key))
            port["gids"][index] = value
    if orphan:
        problems.append(f"ibv_devinfo: {orphan} line(s) before the first 'hca_id:' (a fragment of a longer "
                        f"output?); they are not attributed to any HCA")
    for entry in hcas:
        if entry["vendor_part_id"] is None:
            problems.append(f"ibv_devinfo {entry['name']}: no vendor_part_id; the HCA generation is unknown")
        elif entry["model"] is None:
            problems.append(f"ibv_devinfo {entry['name']}: vendor_part_id {entry['vendor_part_id']} "
                            f"(hca_type {entry['hca_type']}) is not in HCA_MODELS")
        declared = entry["phys_port_cnt"]
        if declared is not None and declared != len(entry["ports"]):
            problems.append(f"ibv_devinfo {entry['name']}: phys_port_cnt is {declared} but {len(entry['ports'])} "
                            f"port block(s) follow (truncated output?)")
        for port in entry["ports"]:
            if port["state"] is None or port["link_layer"] is None:
                problems.append(f"ibv_devinfo {entry['name']} port {port['port']}: no state or link_layer (truncated?)")
    if not hcas:
        problems.append("ibv_devinfo: no 'hca_id:' block found")
    return {"hcas": hcas, "problems": problems}


# --------------------------------------------------------------------------- perfquery
_PQ_HEADER = re.compile(r"^# Port (extended )?counters: Lid (\d{1,5}) port (\d{1,3})"
                        r"(?: \(CapMask: (0x[0-9a-fA-F]+)(?:\s+CapMask2:\s*(0x[0-9a-fA-F]+))?\))?\s*$")
_PQ_FIELD = re.compile(r"^([A-Za-z0-9]+):\.*(\S+)\s*$")
_PQ_BASIC_SATURATED = {"PortXmitData": 2 ** 32 - 1, "PortRcvData": 2 ** 32 - 1, "PortXmitPkts": 2 ** 32 - 1,
                       "PortRcvPkts": 2 ** 32 - 1, "SymbolErrorCounter": 2 ** 16 - 1,
                       "LinkDownedCounter": 2 ** 8 - 1, "LinkErrorRecoveryCounter": 2 ** 8 - 1,
                       "PortRcvErrors": 2 ** 16 - 1, "PortXmitDiscards": 2 ** 16 - 1}


def parse_perfquery(text: Any) -> dict[str, Any]:
    """``perfquery [-x]`` text -> ``{'ports': [{lid, port, extended, capmask, counters, raw}], 'problems'}``.

    ``counters`` uses the sysfs names (``PERFQUERY_TO_SYSFS``); ``raw`` keeps every field as printed.
    A header wrapped onto two lines is joined; a header-less block is kept with lid/port None and a
    problem (it cannot be matched to a port). Counters of the basic (non ``-x``) layout that sit at
    their width's maximum are saturated: the value is kept and a problem says to use ``-x``.
    """
    problems: list[str] = []
    body = _text_input(text, "perfquery", problems)
    if body is None:
        return {"ports": [], "problems": problems}
    lines = body.splitlines()
    ports: list[dict[str, Any]] = []
    current: Optional[dict[str, Any]] = None
    index = 0
    while index < len(lines):
        line = lines[index].rstrip()
        index += 1
        if not line.strip():
            continue
        if line.startswith("# Port"):
            if "(" in line and not line.endswith(")") and index < len(lines) and lines[index].rstrip().endswith(")"):
                line = f"{line} {lines[index].strip()}"
                index += 1
            match = _PQ_HEADER.match(line)
            if not match:
                problems.append(f"perfquery: header {_clip(line)} is not '# Port counters: Lid L port P (CapMask: ...)'")
                current = {"lid": None, "port": None, "extended": "extended" in line, "capmask": None,
                           "counters": {}, "raw": {}}
            else:
                current = {"lid": int(match.group(2)), "port": int(match.group(3)), "extended": bool(match.group(1)),
                           "capmask": match.group(4), "counters": {}, "raw": {}}
            ports.append(current)
            continue
        if line.startswith("#"):
            continue
        if current is None:
            problems.append("perfquery: counters without a '# Port counters: Lid L port P' header; "
                            "they cannot be matched to a port")
            current = {"lid": None, "port": None, "extended": False, "capmask": None, "counters": {}, "raw": {}}
            ports.append(current)
        match = _PQ_FIELD.match(line.strip())
        value = _int_value(match.group(2)) if match else None
        if not match or value is None:
            problems.append(f"perfquery: line {_clip(line.strip())} is not 'Name:....<integer>' (truncated output?)")
            continue
        name = match.group(1)
        current["raw"][name] = value
        if name in PERFQUERY_TO_SYSFS:
            current["counters"][PERFQUERY_TO_SYSFS[name]] = value
    for entry in ports:
        where = f"perfquery Lid {entry['lid']} port {entry['port']}"
        if not entry["counters"]:
            problems.append(f"{where}: no counters")
        if not entry["extended"]:
            for name, limit in _PQ_BASIC_SATURATED.items():
                if entry["raw"].get(name) == limit:
                    problems.append(f"{where}: {name} = {limit} is saturated in the basic layout; use perfquery -x")
    if not ports:
        problems.append("perfquery: no counters found")
    return {"ports": ports, "problems": problems}


# --------------------------------------------------------------------------- perftest
_PT_TEST = re.compile(r"^\s*((?:RDMA_Write|RDMA_Read|Send|Atomic \w+)(?: [A-Za-z ]+?)? BW) Test\s*$")
_PT_PAIR = re.compile(r"([A-Za-z][A-Za-z .*]*?)\s*:\s*(\S+)")
_PT_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[(Gb/sec|MB/sec)\]\s+BW average\[(Gb/sec|MB/sec)\]"
                        r"\s+MsgRate\[Mpps\]")
_PT_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")
_PT_ERROR = re.compile(r"(Port number \d+ state is|Couldn't|Unable to|Failed to|failed|error|ERROR|Conflicting)")
MIB = 1048576


def _to_gbps(value: float, units: str) -> float:
    return value if units == "Gb/sec" else value * MIB * 8 / 1e9


def parse_perftest(text: Any) -> dict[str, Any]:
    """perftest BW output (``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``; server or client) -> contract dict.

    ``ok`` is False, with problems, when there is no result row, a number is not finite or is
    negative, the table is cut short (a row with missing columns, or no closing dashed line), or
    the tool printed an error. ``bw_*_gbps`` are those of the largest message size, in Gb/s
    (MB/sec is MiB/s: value * 2**20 * 8 / 10**9).
    """
    problems: list[str] = []
    result: dict[str, Any] = {"ok": False, "problems": problems, "test": None, "device": None, "ib_port": None,
                              "link_type": None, "units": None, "rows": [], "bw_avg_gbps": None, "bw_peak_gbps": None}
    body = _text_input(text, "perftest", problems)
    if body is None:
        return result
    in_table = closed = False
    for number, raw in enumerate(body.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if in_table:
            if re.fullmatch(r"\s*-{10,}\s*", line):
                in_table, closed = False, True
                continue
            match = _PT_ROW.match(line)
            if not match:
                problems.append(f"perftest line {number}: result row {_clip(line.strip())} is incomplete (truncated output?)")
                continue
            try:
                peak, avg, rate = (float(match.group(i)) for i in (3, 4, 5))
            except ValueError:
                problems.append(f"perftest line {number}: {_clip(line.strip())} has a value that is not a number")
                continue
            if not all(math.isfinite(v) and 0 <= v < 1e9 for v in (peak, avg, rate)):
                problems.append(f"perftest line {number}: {_clip(line.strip())} has a non-finite, negative or huge value")
                continue
            result["rows"].append({"bytes": int(match.group(1)), "iterations": int(match.group(2)),
                                   "bw_peak": peak, "bw_avg": avg, "msg_rate_mpps": rate})
            continue
        match = _PT_HEADER.match(line)
        if match:
            if match.group(1) != match.group(2):
                problems.append(f"perftest line {number}: peak and average in different units")
            result["units"] = match.group(2)
            in_table, closed = True, False
            continue
        match = _PT_TEST.match(line)
        if match and result["test"] is None:
            result["test"] = match.group(1)
            continue
        if line.lstrip().startswith(("Dual-port", "Number of qps", "Link type", "Connection type")) or "Device" in line:
            for key, value in _PT_PAIR.findall(line):
                key = key.strip()
                if key == "Device":
                    result["device"] = value
                elif key == "Link type":
                    result["link_type"] = value if value in ("IB", "Ethernet") else None
                    if result["link_type"] is None:
                        problems.append(f"perftest line {number}: link type {_clip(value)} is neither IB nor Ethernet")
            continue
        if _PT_ERROR.search(line) and not line.lstrip().startswith("WARNING"):
            problems.append(f"perftest reported: {line.strip()[:200]}")
    if result["units"] is None:
        problems.append("perftest: no '#bytes #iterations BW peak[...] BW average[...]' header; no result")
    elif not result["rows"]:
        problems.append("perftest: no result row under the header")
    elif in_table and not closed:
        problems.append("perftest: the result table has no closing dashed line (truncated output?)")
    if result["test"] is None:
        problems.append("perftest: no '<name> BW Test' title; not a perftest bandwidth report")
    if result["rows"]:
        largest = max(result["rows"], key=lambda r: r["bytes"])
        result["bw_avg_gbps"] = round(_to_gbps(largest["bw_avg"], result["units"]), 6)
        result["bw_peak_gbps"] = round(_to_gbps(largest["bw_peak"], result["units"]), 6)
    result["ok"] = not problems and bool(result["rows"])
    return result


def kiln_fabric_port_lines(hcas: Any) -> list[str]:
    """One line per RDMA port: ``mlx5_0/1 ConnectX-7 InfiniBand ACTIVE/LinkUp 400 Gb/sec (4X NDR) ibp26s0``."""
    lines = []
    for hca in hcas if isinstance(hcas, list) else []:
        if not isinstance(hca, Mapping):
            continue
        for port in hca.get("ports") or []:
            if not isinstance(port, Mapping):
                continue
            netdevs = ",".join(str(n) for n in port.get("netdevs") or []) or "-"
            lines.append(f"{hca.get('name')}/{port.get('port')} {hca.get('model') or hca.get('hca_type') or '?'} "
                         f"{port.get('link_layer') or '?'} {port.get('state') or '?'}/{port.get('phys_state') or '?'} "
                         f"{port.get('rate') or '?'} fw {hca.get('fw_ver') or '?'} {netdevs}")
    return lines
