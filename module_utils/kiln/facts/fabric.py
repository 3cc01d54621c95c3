# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fabric facts: InfiniBand / RoCE HCAs from sysfs, ibstat, ibv_devinfo, perfquery, and perftest results.

Pure functions (standard library only; this file ships to managed hosts through AnsiballZ).
The text parsers (ibstat, ibv_devinfo, perfquery, perftest) are in ``kiln_fabric_text``.
Nothing here runs a command: library/kiln_fabric_facts.py runs the tools and passes their
text in. Every parser returns a ``problems`` list; missing, unparseable or contradictory data
is a problem, never a silent default (fail closed).

The sysfs reader has two layers: ``collect_sysfs(root)`` reads the files it needs into a
mapping of relative path -> text (symlink targets under ``<path>@link``, as the basename the
link resolves to), and ``parse_sysfs_files(files)`` builds the ``hcas`` list from that mapping
alone, so it is testable without a tree. ``read_sysfs(root)`` is both.

Formats (tests/fixtures/rdma/recorded, SOURCES.md there):

* sysfs ``class/infiniband/<hca>/ports/<n>/state`` is ``'4: ACTIVE'``, ``phys_state``
  ``'5: LinkUp'``, ``rate`` ``'400 Gb/sec (4X NDR)'``, ``lid``/``sm_lid`` hex (``'0x1a'``),
  ``counters/<name>`` decimal integers (``port_xmit_data`` / ``port_rcv_data`` in 4-octet units).
* ``ibstat``: ``CA 'mlx5_0'`` blocks, ``Port N:`` sub-blocks, ``State: Active``, ``Rate: 400``.
* ``ibv_devinfo [-v]``: ``hca_id: mlx5_0`` blocks, ``port:   1`` sub-blocks,
  ``state: PORT_ACTIVE (4)``; ``-v`` adds ``active_width: 4X (2)``, ``phys_state: LINK_UP (5)``,
  ``GID[  0]: ...``.
* ``perfquery [-x]``: ``# Port [extended ]counters: Lid L port P (CapMask: 0x...)`` then
  dotted ``Name:....value`` lines.
* perftest ``ib_write_bw`` / ``ib_read_bw`` / ``ib_send_bw``: the ``#bytes #iterations BW peak[Gb/sec]
  BW average[Gb/sec] MsgRate[Mpps]`` table. Gb/sec is 10**9 bit/s; MB/sec is MiB/s
  (perftest's ``format_factor`` is 0x100000 for MB/sec and 125000000 for Gb/sec).
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Mapping, Optional

from .netdev import netdev_problem

SCHEMA = "kiln.fabric/v1"

#: sysfs ``hca_type`` -> HCA generation. The number is the PCI device id in decimal
#: (MT4129 = 0x1021). Source: the PCI ID repository's vendor 15b3 entries
#: (pci.ids: 1003 ConnectX-3, 1007 ConnectX-3 Pro, 1013 ConnectX-4, 1015 ConnectX-4 Lx,
#: 1017 ConnectX-5, 1019 ConnectX-5 Ex, 101b ConnectX-6, 101d ConnectX-6 Dx, 101f ConnectX-6 Lx,
#: 1021 ConnectX-7, 1023 ConnectX-8, a2d2 BlueField, a2d6 BlueField-2, a2dc BlueField-3; the
#: virtual functions clouds pass through: 1014 ConnectX-4 VF, 1016 ConnectX-4 Lx VF, 1018
#: ConnectX-5 VF, 101a ConnectX-5 Ex VF, 101c ConnectX-6 VF -- Azure ND A100 v4 shows MT4124) and
#: the drivers' id tables (mlx5 ``mlx5_core_pci_table``, mlx4 ``mlx4_pci_table``); mlx5_ib and
#: mlx4_ib print ``hca_type`` as ``MT%d`` of the PCI device id. A virtual function is its
#: physical generation here (same driver, same OFED support); 101e ("ConnectX Family mlx5Gen
#: Virtual Function", MT4126) names no single generation and stays unknown.
HCA_MODELS: dict[str, str] = {
    "MT4099": "ConnectX-3",
    "MT4103": "ConnectX-3 Pro",
    "MT4115": "ConnectX-4",
    "MT4116": "ConnectX-4",
    "MT4118": "ConnectX-4 Lx",
    "MT4120": "ConnectX-5",
    "MT4122": "ConnectX-5 Ex",
    "MT4124": "ConnectX-6",
    "MT4117": "ConnectX-4 Lx",
    "MT4119": "ConnectX-5",
    "MT4121": "ConnectX-5 Ex",
    "MT4123": "ConnectX-6",
    "MT4125": "ConnectX-6 Dx",
    "MT4127": "ConnectX-6 Lx",
    "MT4129": "ConnectX-7",
    "MT4131": "ConnectX-8",
    "MT41682": "BlueField",
    "MT41686": "BlueField-2",
    "MT41692": "BlueField-3",
}

#: The port counters of the contract (sysfs ``counters/`` file names).
COUNTER_NAMES: tuple[str, ...] = (
    "symbol_error", "link_downed", "port_rcv_errors", "link_error_recovery", "port_xmit_discards",
    "port_rcv_remote_physical_errors", "local_link_integrity_errors", "excessive_buffer_overrun_errors",
    "port_xmit_constraint_errors", "port_rcv_constraint_errors", "VL15_dropped", "port_xmit_wait",
    "port_xmit_data", "port_rcv_data",
)
#: Counters that only count traffic (not errors): they grow on a healthy link.
TRAFFIC_COUNTERS = frozenset({"port_xmit_wait", "port_xmit_data", "port_rcv_data",
                              "port_xmit_packets", "port_rcv_packets", "unicast_xmit_packets",
                              "unicast_rcv_packets", "multicast_xmit_packets", "multicast_rcv_packets"})

#: perfquery field name -> sysfs counter name.
PERFQUERY_TO_SYSFS: dict[str, str] = {
    "SymbolErrorCounter": "symbol_error",
    "LinkDownedCounter": "link_downed",
    "PortRcvErrors": "port_rcv_errors",
    "LinkErrorRecoveryCounter": "link_error_recovery",
    "PortXmitDiscards": "port_xmit_discards",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors",
    "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "VL15Dropped": "VL15_dropped",
    "PortXmitWait": "port_xmit_wait",
    "PortXmitData": "port_xmit_data",
    "PortRcvData": "port_rcv_data",
}

# Port state names: sysfs label (upper case) and the spellings ibstat / ibv_devinfo use.
_STATE_ALIASES = {"down": "DOWN", "port_down": "DOWN", "init": "INIT", "initializing": "INIT",
                  "port_init": "INIT", "armed": "ARMED", "port_armed": "ARMED", "active": "ACTIVE",
                  "port_active": "ACTIVE", "active_defer": "ACTIVE_DEFER", "port_active_defer": "ACTIVE_DEFER",
                  "nop": "NOP", "port_nop": "NOP"}
_PHYS_ALIASES = {"sleep": "Sleep", "polling": "Polling", "disabled": "Disabled",
                 "portconfigurationtraining": "PortConfigurationTraining", "port_configuration_training": "PortConfigurationTraining",
                 "linkup": "LinkUp", "link_up": "LinkUp", "linkerrorrecovery": "LinkErrorRecovery",
                 "link_error_recovery": "LinkErrorRecovery", "phytest": "Phy Test", "phy test": "Phy Test",
                 "phy_test": "Phy Test", "nop": "NOP"}
_LINK_LAYERS = {"infiniband": "InfiniBand", "ethernet": "Ethernet"}

_MAX_TEXT = 4 * 1024 * 1024      # parsers refuse larger inputs (a runaway tool, not real output)
_MAX_FILE = 4096                 # a sysfs attribute is one short line
_MAX_HCAS = 256
_MAX_PORTS = 64
_MAX_COUNTERS = 512
_COUNTER_MAX = 2 ** 64 - 1       # sysfs counters are at most 64-bit
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec\s*\(\s*(\d+X)\s*([A-Za-z0-9]+)?\s*\)\s*$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def _clip(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"


def _text_input(text: Any, what: str, problems: list[str]) -> Optional[str]:
    """The text to parse, or None with a problem when it is not a usable string."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str):
        problems.append(f"{what}: expected the tool's text output, got {type(text).__name__}; pass stdout as a string")
        return None
    if len(text) > _MAX_TEXT:
        problems.append(f"{what}: output is {len(text)} characters, over the {_MAX_TEXT} limit; not parsed")
        return None
    if not text.strip():
        problems.append(f"{what}: output is empty; run the tool again and check that it found the HCAs")
        return None
    return text


# --------------------------------------------------------------------------- small value parsers
def rate_parts(rate_text: Any) -> tuple[Optional[float], Optional[str], Optional[str]]:
    """``'400 Gb/sec (4X NDR)'`` -> ``(400.0, '4X', 'NDR')``; ``(None, None, None)`` when unparseable."""
    if not isinstance(rate_text, str):
        return None, None, None
    match = _RATE_RE.match(rate_text)
    if not match:
        return None, None, None
    gbps = float(match.group(1))
    if not math.isfinite(gbps) or gbps <= 0 or gbps > 100000:
        return None, None, None
    return gbps, match.group(2), match.group(3)


def split_code(value: Any) -> tuple[Optional[int], Optional[str]]:
    """``'4: ACTIVE'`` -> ``(4, 'ACTIVE')``; ``(None, None)`` when not of that form."""
    if not isinstance(value, str):
        return None, None
    code, sep, label = value.strip().partition(":")
    if sep and code.strip().isdigit() and label.strip() and len(code.strip()) <= 3:
        return int(code.strip()), label.strip()
    return None, None


def normalize_state(value: Any) -> Optional[str]:
    """A port state in any tool's spelling -> the sysfs label (``ACTIVE``, ``DOWN``, ...)."""
    if not isinstance(value, str):
        return None
    key = value.strip().split("(")[0].strip().lower().replace(" ", "_")
    return _STATE_ALIASES.get(key)


def normalize_phys_state(value: Any) -> Optional[str]:
    """A physical state in any tool's spelling -> the sysfs label (``LinkUp``, ``Polling``, ...)."""
    if not isinstance(value, str):
        return None
    key = value.strip().split("(")[0].strip().lower()
    return _PHYS_ALIASES.get(key) or _PHYS_ALIASES.get(key.replace(" ", ""))


def normalize_guid(value: Any) -> Optional[str]:
    """``'0x58a2e10300dae626'`` or ``'58a2:e103:00da:e626'`` -> ``'58a2:e103:00da:e626'``."""
    if not isinstance(value, str):
        return None
    raw = value.strip().lower()
    if raw.startswith("0x"):
        raw = raw[2:]
    raw = raw.replace(":", "")
    if not re.fullmatch(r"[0-9a-f]{1,16}", raw):
        return None
    raw = raw.zfill(16)
    return ":".join(raw[i:i + 4] for i in range(0, 16, 4))


def _int_value(value: Any) -> Optional[int]:
    """Decimal or ``0x`` hex integer text -> int; None otherwise."""
    if not isinstance(value, str):
        return None
    raw = value.strip()
    try:
        if re.fullmatch(r"0[xX][0-9a-fA-F]{1,16}", raw):
            return int(raw, 16)
        if re.fullmatch(r"\d{1,20}", raw):
            return int(raw)
    except ValueError:
        return None
    return None


def _sort_key(name: str) -> tuple:
    parts = re.split(r"(\d+)", name)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts if p)


# --------------------------------------------------------------------------- sysfs
_HCA_FILES = ("fw_ver", "board_id", "node_guid", "sys_image_guid", "hca_type", "node_type", "device/numa_node")
_PORT_FILES = ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid", "gids/0", "gid_attrs/ndevs/0",
               "gid_attrs/types/0")


def _read_file(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_FILE + 1)
    except OSError:
        return None
    return data.decode("utf-8", "replace")


def _listdir(path: str, limit: int) -> list[str]:
    try:
        names = sorted(os.listdir(path), key=_sort_key)
    except OSError:
        return []
    return names[:limit]


def collect_sysfs(root: str = "/sys") -> dict[str, str]:
    """The sysfs files ``parse_sysfs_files`` needs, as relative path -> text.

    Symlinks appear as ``<path>@link`` -> basename of the target (the PCI address for
    ``class/infiniband/<hca>/device``). Directories listed but empty appear as ``<path>/`` -> ''.
    """
    files: dict[str, str] = {}
    base_rel = "class/infiniband"
    base = os.path.join(root, base_rel)
    for hca in _listdir(base, _MAX_HCAS):
        rel = f"{base_rel}/{hca}"
        hdir = os.path.join(root, rel)
        files[rel + "/"] = ""
        for name in _HCA_FILES:
            text = _read_file(os.path.join(hdir, name))
            if text is not None:
                files[f"{rel}/{name}"] = text
        device = os.path.join(hdir, "device")
        if os.path.lexists(device):
            files[f"{rel}/device@link"] = os.path.basename(os.path.realpath(device))
        for netdev in _listdir(os.path.join(device, "net"), 64):
            text = _read_file(os.path.join(device, "net", netdev, "dev_port"))
            files[f"{rel}/device/net/{netdev}/dev_port"] = "" if text is None else text
        for port in _listdir(os.path.join(hdir, "ports"), _MAX_PORTS):
            prel = f"{rel}/ports/{port}"
            pdir = os.path.join(root, prel)
            files[prel + "/"] = ""
            for name in _PORT_FILES:
                text = _read_file(os.path.join(pdir, name))
                if text is not None:
                    files[f"{prel}/{name}"] = text
            for group in ("counters", "hw_counters"):
                for counter in _listdir(os.path.join(pdir, group), _MAX_COUNTERS):
                    text = _read_file(os.path.join(pdir, group, counter))
                    if text is not None:
                        files[f"{prel}/{group}/{counter}"] = text
    return files


def _children(files: Mapping[str, str], prefix: str) -> list[str]:
    """Distinct next path components below ``prefix`` (which ends in '/')."""
    seen: set[str] = set()
    for key in files:
        if key.startswith(prefix):
            rest = key[len(prefix):]
            head = rest.split("/", 1)[0]
            if head and not head.endswith("@link"):
                seen.add(head)
    return sorted(seen, key=_sort_key)


def _get(files: Mapping[str, str], key: str) -> Optional[str]:
    value = files.get(key)
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value or None


def _parse_counters(files: Mapping[str, str], prefix: str, where: str, problems: list[str]) -> dict[str, int]:
    counters: dict[str, int] = {}
    for name in _children(files, prefix):
        raw = _get(files, prefix + name)
        value = _int_value(raw) if raw is not None and not raw.startswith("0x") else None
        if value is None or value > _COUNTER_MAX:
            problems.append(f"{where}: counter {name} = {_clip(raw)} is not a non-negative integer; "
                            f"check {prefix}{name}")
            continue
        counters[name] = value
    return counters


def _parse_port(files: Mapping[str, str], hca: str, port_name: str, netdev_ports: Mapping[int, list[str]],
                problems: list[str]) -> Optional[dict[str, Any]]:
    prefix = f"class/infiniband/{hca}/ports/{port_name}/"
    if not port_name.isdigit() or not 0 < int(port_name) < 256:
        problems.append(f"{hca}: port directory {port_name!r} is not a port number; ignored")
        return None
    port = int(port_name)
    where = f"{hca} port {port}"
    state_raw = _get(files, prefix + "state")
    state_code, state = split_code(state_raw)
    if state_raw is None:
        problems.append(f"{where}: no state file ({prefix}state); the port cannot be judged")
    elif state is None:
        problems.append(f"{where}: state {_clip(state_raw)} is not '<code>: <STATE>'")
    phys_raw = _get(files, prefix + "phys_state")
    phys_code, phys = split_code(phys_raw)
    if phys_raw is None:
        problems.append(f"{where}: no phys_state file ({prefix}phys_state)")
    elif phys is None:
        problems.append(f"{where}: phys_state {_clip(phys_raw)} is not '<code>: <State>'")
    rate = _get(files, prefix + "rate")
    gbps, width, speed = rate_parts(rate)
    if rate is None:
        problems.append(f"{where}: no rate file ({prefix}rate)")
    elif gbps is None:
        problems.append(f"{where}: rate {_clip(rate)} is not '<N> Gb/sec (<width> <speed>)'")
    link_raw = _get(files, prefix + "link_layer")
    link_layer = _LINK_LAYERS.get(link_raw.lower()) if link_raw else None
    if link_raw is not None and link_layer is None:
        problems.append(f"{where}: link_layer {_clip(link_raw)} is neither InfiniBand nor Ethernet")
    lids: dict[str, Optional[int]] = {}
    for key in ("lid", "sm_lid"):
        raw = _get(files, prefix + key)
        lids[key] = _int_value(raw) if raw is not None else None
        if raw is not None and (lids[key] is None or lids[key] > 0xFFFF):
            problems.append(f"{where}: {key} {_clip(raw)} is not a 16-bit LID")
            lids[key] = None
    netdevs = set(netdev_ports.get(port, []))
    ndev = _get(files, prefix + "gid_attrs/ndevs/0")
    if ndev is not None:
        netdevs.add(ndev)
    for netdev in sorted(netdevs, key=_sort_key):
        why = netdev_problem(netdev)
        if why:  # kept, so that a consumer that builds paths from it refuses naming it (role rdma_node)
            problems.append(f"{where}: netdev name {why}; not usable in a path or unit name")
    counters = _parse_counters(files, prefix + "counters/", where, problems)
    entry: dict[str, Any] = {
        "port": port,
        "state": state, "state_code": state_code,
        "phys_state": phys, "phys_state_code": phys_code,
        "rate": rate, "rate_gbps": gbps, "width": width, "speed": speed,
        "link_layer": link_layer,
        "lid": lids["lid"], "sm_lid": lids["sm_lid"],
        "gid0": _get(files, prefix + "gids/0"),
        "netdevs": sorted(netdevs, key=_sort_key),
        "counters": counters,
    }
    hw = _parse_counters(files, prefix + "hw_counters/", where, problems)
    if hw:
        entry["hw_counters"] = hw
    return entry


def parse_sysfs_files(files: Mapping[str, str]) -> dict[str, Any]:
    """``{'hcas': [...], 'problems': [...]}`` from a mapping of sysfs relative path -> text."""
    problems: list[str] = []
    if not isinstance(files, Mapping):
        return {"hcas": [], "problems": [f"sysfs: expected a mapping of path -> text, got {type(files).__name__}"]}
    files = {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}
    hcas: list[dict[str, Any]] = []
    for hca in _children(files, "class/infiniband/")[:_MAX_HCAS]:
        if not _NAME_RE.match(hca):
            problems.append(f"sysfs: HCA directory name {_clip(hca)} is not a device name; ignored")
            continue
        prefix = f"class/infiniband/{hca}/"
        netdev_ports: dict[int, list[str]] = {}
        for netdev in _children(files, prefix + "device/net/"):
            raw = _get(files, f"{prefix}device/net/{netdev}/dev_port")
            dev_port = _int_value(raw) if raw is not None else 0
            if dev_port is None or dev_port > 255:
                problems.append(f"{hca}: netdev {netdev} dev_port {_clip(raw)} is not a port index; not mapped")
                continue
            netdev_ports.setdefault(dev_port + 1, []).append(netdev)
        hca_type = _get(files, prefix + "hca_type")
        model = HCA_MODELS.get(hca_type) if hca_type else None
        if hca_type is None:
            problems.append(f"{hca}: no hca_type file; the HCA generation is unknown")
        elif model is None:
            problems.append(f"{hca}: hca_type {_clip(hca_type)} is not in HCA_MODELS; add it to "
                            f"module_utils/kiln/facts/fabric.py with its source")
        numa_raw = _get(files, prefix + "device/numa_node")
        numa = None
        if numa_raw is not None:
            if re.fullmatch(r"-?\d{1,4}", numa_raw):
                numa = int(numa_raw)
            else:
                problems.append(f"{hca}: numa_node {_clip(numa_raw)} is not an integer")
        pci = _get(files, prefix + "device@link")
        ports = []
        for port_name in _children(files, prefix + "ports/")[:_MAX_PORTS]:
            port = _parse_port(files, hca, port_name, netdev_ports, problems)
            if port is not None:
                ports.append(port)
        if not ports:
            problems.append(f"{hca}: no ports under {prefix}ports")
        node_type_raw = _get(files, prefix + "node_type")
        node_type = split_code(node_type_raw)[1] if node_type_raw else None
        hcas.append({
            "name": hca,
            "hca_type": hca_type,
            "model": model,
            "fw_ver": _get(files, prefix + "fw_ver"),
            "board_id": _get(files, prefix + "board_id"),
            "node_guid": normalize_guid(_get(files, prefix + "node_guid")) or _get(files, prefix + "node_guid"),
            "sys_image_guid": normalize_guid(_get(files, prefix + "sys_image_guid")),
            "node_type": node_type,
            "pci_address": pci if pci and re.fullmatch(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d", pci) else None,
            "numa_node": numa,
            "ports": ports,
        })
    return {"hcas": hcas, "problems": problems}


def read_sysfs(sysfs_root: str = "/sys") -> dict[str, Any]:
    """``{'sysfs_root', 'hcas', 'problems'}`` for every HCA under ``<sysfs_root>/class/infiniband``."""
    parsed = parse_sysfs_files(collect_sysfs(sysfs_root))
    return {"sysfs_root": sysfs_root, "hcas": parsed["hcas"], "problems": parsed["problems"]}


# --------------------------------------------------------------------------- GPUDirect
def parse_nvidia_version(text: Any) -> Optional[bool]:
    """``/proc/driver/nvidia/version`` -> True (open kernel modules), False (proprietary), None (unknown)."""
    if not isinstance(text, str) or not text.strip():
        return None
    first = text.strip().splitlines()[0]
    if not first.startswith("NVRM version:"):
        return None
    if "Open Kernel Module" in first:
        return True
    if "Kernel Module" in first:
        return False
    return None


def kernel_version(kernel: Any) -> Optional[tuple[int, int]]:
    """``'6.1.0-28-amd64'`` -> ``(6, 1)``; None when it does not start with ``<major>.<minor>``."""
    if not isinstance(kernel, str):
        return None
    match = re.match(r"^(\d{1,3})\.(\d{1,3})", kernel.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def gpudirect_facts(sysfs_root: str, proc_root: str, kernel: Any) -> dict[str, Any]:
    """The contract's ``gpudirect`` block plus ``problems`` (popped by ``merge_sources``).

    Loaded modules are the directories ``<sysfs_root>/module/<name>``; the driver flavour is the
    first line of ``<proc_root>/driver/nvidia/version``; DMA-BUF needs kernel 5.12 or later.
    """
    problems: list[str] = []
    module_dir = os.path.join(sysfs_root, "module")
    nvidia = os.path.isdir(os.path.join(module_dir, "nvidia"))
    peermem = os.path.isdir(os.path.join(module_dir, "nvidia_peermem"))
    version_path = os.path.join(proc_root, "driver", "nvidia", "version")
    version_text = _read_file(version_path)
    open_modules = parse_nvidia_version(version_text)
    if nvidia and open_modules is None:
        first = (version_text.strip().splitlines() or [""])[0] if version_text is not None else None
        seen = "missing" if first is None else f"first line {_clip(first)}"
        problems.append(f"gpudirect: nvidia is loaded but {version_path} does not say open or proprietary "
                        f"kernel modules ({seen}); the GPUDirect method cannot be chosen")
    parsed = kernel_version(kernel)
    if parsed is None:
        problems.append(f"gpudirect: kernel release {_clip(kernel)} is not '<major>.<minor>...'; DMA-BUF support unknown")
    return {
        "kernel": kernel if isinstance(kernel, str) else None,
        "nvidia_loaded": nvidia,
        "open_modules": open_modules,
        "peermem_loaded": peermem,
        "dma_buf_kernel": parsed is not None and parsed >= (5, 12),
        "problems": problems,
    }


# --------------------------------------------------------------------------- merge
def _compare(problems: list[str], where: str, what: str, primary: Any, other: Any, source: str) -> None:
    if primary is not None and other is not None and primary != other:
        problems.append(f"{where}: {what}: sysfs says {primary!r}, {source} says {other!r}")


def _merge_ibstat(hcas: list[dict[str, Any]], ibstat: Mapping[str, Any], problems: list[str]) -> None:
    problems.extend(str(p) for p in ibstat.get("problems") or [])
    theirs = {h.get("name"): h for h in ibstat.get("hcas") or [] if isinstance(h, Mapping)}
    ours = {h["name"]: h for h in hcas}
    for name in sorted(set(theirs) - set(ours), key=lambda n: _sort_key(str(n))):
        problems.append(f"{name}: ibstat lists it but sysfs has no such HCA")
    for name in sorted(set(ours) - set(theirs), key=_sort_key):
        problems.append(f"{name}: in sysfs but ibstat does not list it")
    for name in sorted(set(ours) & set(theirs), key=_sort_key):
        hca, other = ours[name], theirs[name]
        for key in ("hca_type", "fw_ver", "node_guid", "sys_image_guid"):
            _compare(problems, name, key, hca.get(key), other.get(key), "ibstat")
        other_ports = {p.get("port"): p for p in other.get("ports") or [] if isinstance(p, Mapping)}
        for port in hca["ports"]:
            theirs_port = other_ports.get(port["port"])
            where = f"{name} port {port['port']}"
            if theirs_port is None:
                problems.append(f"{where}: in sysfs but ibstat does not list it")
                continue
            for key in ("state", "phys_state", "rate_gbps", "link_layer"):
                _compare(problems, where, key, port.get(key), theirs_port.get(key), "ibstat")
            if port.get("link_layer") == "InfiniBand":
                for key in ("lid", "sm_lid"):
                    _compare(problems, where, key, port.get(key), theirs_port.get(key), "ibstat")
        for number in sorted(set(other_ports) - {p["port"] for p in hca["ports"]}, key=lambda n: (str(type(n)), n)):
            problems.append(f"{name} port {number}: ibstat lists it but sysfs has no such port")


def _merge_perfquery(hcas: list[dict[str, Any]], perfquery: Mapping[str, Any], problems: list[str]) -> None:
    problems.extend(str(p) for p in perfquery.get("problems") or [])
    by_lid: dict[tuple[int, int], dict[str, Any]] = {}
    for hca in hcas:
        for port in hca["ports"]:
            if port.get("lid"):
                by_lid[(port["lid"], port["port"])] = port
                port.setdefault("_name", f"{hca['name']} port {port['port']}")
    for entry in perfquery.get("ports") or []:
        if not isinstance(entry, Mapping) or entry.get("lid") is None:
            continue  # already a problem of the parse
        port = by_lid.get((entry.get("lid"), entry.get("port")))
        if port is None:
            problems.append(f"perfquery Lid {entry.get('lid')} port {entry.get('port')}: no sysfs port has that LID")
            continue
        where = port.pop("_name", "port")
        for name, value in (entry.get("counters") or {}).items():
            mine = port["counters"].get(name)
            if mine is None:
                port["counters"][name] = value
                port.setdefault("counter_sources", {})[name] = "perfquery"
            elif name not in TRAFFIC_COUNTERS and mine != value:
                problems.append(f"{where}: counter {name}: sysfs says {mine}, perfquery says {value}")
    for hca in hcas:
        for port in hca["ports"]:
            port.pop("_name", None)


def merge_sources(sysfs: Mapping[str, Any], ibstat: Optional[Mapping[str, Any]] = None,
                  perfquery: Optional[Mapping[str, Any]] = None,
                  gpudirect: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The ``kiln_fabric`` fact: sysfs as the primary source, ibstat / perfquery (parsed) as second sources.

    A second source that disagrees with sysfs adds a problem naming both values; sysfs's value stays.
    Error counters sysfs lacks are taken from perfquery (``counter_sources`` says so); traffic
    counters (data, packets, wait) are not compared, they move between the two reads.
    """
    problems: list[str] = []
    if not isinstance(sysfs, Mapping):
        sysfs = {"hcas": [], "problems": [f"sysfs: expected the read_sysfs result, got {type(sysfs).__name__}"]}
    hcas = [dict(h, ports=[dict(p, counters=dict(p.get("counters") or {})) for p in h.get("ports") or []])
            for h in sysfs.get("hcas") or [] if isinstance(h, Mapping)]
    problems.extend(str(p) for p in sysfs.get("problems") or [])
    if ibstat is not None:
        if isinstance(ibstat, Mapping):
            _merge_ibstat(hcas, ibstat, problems)
        else:
            problems.append(f"ibstat: expected the parse_ibstat result, got {type(ibstat).__name__}")
    if perfquery is not None:
        if isinstance(perfquery, Mapping):
            _merge_perfquery(hcas, perfquery, problems)
        else:
            problems.append(f"perfquery: expected the parse_perfquery result, got {type(perfquery).__name__}")
    facts: dict[str, Any] = {"schema": SCHEMA, "sysfs_root": sysfs.get("sysfs_root", "/sys"), "hcas": hcas}
    if gpudirect is not None:
        block = dict(gpudirect)
        problems.extend(str(p) for p in block.pop("problems", []) or [])
        facts["gpudirect"] = block
    facts["problems"] = problems
    return facts
