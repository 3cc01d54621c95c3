# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure parsers for GPU and HCA hardware facts: nvidia-smi XML, NVLink status, PCI and InfiniBand sysfs
(used by library/kiln_gpu_facts.py, which publishes the `kiln_gpu` fact from ``summarize``).

Nothing here runs a command or touches anything outside the paths it is given:
the module runs ``nvidia-smi`` through ``module.run_command`` and passes the text
in, and the sysfs scanners take the sysfs root as an argument so tests (and the
emulated test nodes) can point them at a fake tree.

Formats handled by ``parse_nvidia_smi_xml`` (see tests/fixtures/nvidia-smi):

* DTD v10/v11 (drivers <= 525): ``clocks_throttle_reasons``, ``power_readings``
  (``power_draw``/``power_limit``), ECC as ``single_bit``/``double_bit`` totals
  (Pascal/Volta) or ``sram_*``/``dram_*`` (Ampere+).
* DTD v12 (drivers >= 535): ``clocks_event_reasons``, ``gpu_power_readings``
  (``power_draw``/``current_power_limit``; 570+ ``instant_power_draw`` and
  ``average_power_draw``), ``sram_uncorrectable_parity``/``_secded`` (555+),
  ``fabric`` state on NVSwitch systems.

``nvidia-smi -q -x`` does not carry NVLink link states or error counters; those come from
``nvidia-smi nvlink -s`` and ``nvidia-smi nvlink -e`` (``parse_nvlink_status`` and
``parse_nvlink_errors`` of ``kiln.facts.nvlink``, importable from here too) and are merged by
``summarize``.

Per GPU, ``persistence_mode`` is True/False (None when not reported) and ``fabric`` is the
GPU's NVLink fabric registration (NVML ``nvmlGpuFabricInfo``, Hopper and later, NVSwitch
systems): ``{state, status, clique_id, cluster_uuid, health_summary}`` from ``<fabric>``
(``state``: Not Started / In Progress / Completed; ``status``: Success or an NVML error text;
``clique_id`` an int). Each is None when N/A (PCIe cards, Ampere, drivers before the fabric
API) through the same N/A list as every other value, so a state "Not Supported" or a status
"Unknown Error" also reads as None: a judge sees "not reported", never a pass.

ECC counts (``ecc``), per scope (``volatile`` since the last driver load, ``aggregate``
over the GPU's life):

* ``<scope>_correctable`` / ``<scope>_uncorrectable``: totals, as before (SRAM + DRAM
  on Ampere+, the ``single_bit``/``double_bit`` ``total`` on Pascal/Volta).
* ``<scope>_sram_uncorrectable``: on-chip SRAM. Ampere+: ``sram_uncorrectable``, or
  ``sram_uncorrectable_parity`` + ``sram_uncorrectable_secded`` (555+). Pascal/Volta:
  the sum of the ``double_bit`` on-chip units (``register_file``, ``l1_cache``,
  ``l2_cache``, ``texture_memory``, ``texture_shm``, ``cbu``).
* ``<scope>_dram_uncorrectable``: device memory (HBM/GDDR). Ampere+:
  ``dram_uncorrectable``; Pascal/Volta: ``double_bit/device_memory``.

A value the XML does not report (element absent or ``N/A``, e.g. ECC disabled) is None.
``memory_repair`` says how the GPU handles bad memory: ``row_remap`` (Ampere and
later), ``page_retirement`` (Kepler to Turing) or None (unknown); see ``memory_repair``.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from typing import Any, Iterable, Mapping, Optional

from .fabric import read_sysfs as _read_fabric_sysfs
# Re-exported: library/kiln_gpu_facts.py and the tests import the NVLink parsers from here.
from .nvlink import NVLINK_COUNTERS, parse_nvlink_errors, parse_nvlink_status  # noqa: F401

NVIDIA_VENDOR = "10de"
# PCI base class + subclass (upper 16 bits of the 24-bit class code).
GPU_CLASSES = frozenset({"0300", "0302"})  # VGA compatible, 3D controller
NVSWITCH_CLASS = "0680"  # bridge, other: NVSwitch exposes itself this way

# Keys every GPU entry carries, whatever the source (nvidia-smi or sysfs only).
GPU_KEYS: tuple[str, ...] = (
    "index", "minor_number", "name", "model", "architecture", "uuid", "serial", "vbios",
    "pci_bus_id", "pci_device_id", "pci_subsystem_id", "numa_node",
    "pcie", "persistence_mode", "ecc_mode", "ecc", "remapped_rows", "retired_pages",
    "nvlink", "nvlink_errors", "fabric", "clock_event_reasons_active", "clock_event_reasons_field",
    "performance_state", "temperature_c", "power_draw_w", "power_limit_w",
    "memory_total_mib", "mig_mode", "memory_repair",
)

#: Architectures (lower case, matched as a prefix of the name) and how they handle bad
#: device memory. Row remapping replaced dynamic page retirement with Ampere (NVIDIA
#: "A100 GPU memory error management" vs "Dynamic page retirement", burnin.md 3.4).
#: Ada and Blackwell are listed by family; a reported <remapped_rows> block or a
#: reported retired-page count always wins over this table.
ROW_REMAP_ARCHITECTURES = ("ampere", "ada", "hopper", "blackwell", "grace hopper", "grace blackwell", "rubin")
PAGE_RETIREMENT_ARCHITECTURES = ("kepler", "maxwell", "pascal", "volta", "turing")
ROW_REMAP = "row_remap"
PAGE_RETIREMENT = "page_retirement"

_NA = {"", "n/a", "na", "none", "not supported", "[n/a]", "[not supported]", "unknown error",
       "requested functionality has been deprecated", "insufficient permissions"}
_NUM_RE = re.compile(r"[-+]?\d+(?:\.\d+)?")


# --------------------------------------------------------------------------- helpers
def _text(node: Optional[ET.Element], path: str) -> Optional[str]:
    """Stripped text at ``path`` below ``node``; None when absent or N/A."""
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    if value.lower() in _NA:
        return None
    return value


def _first_text(node: Optional[ET.Element], *paths: str) -> Optional[str]:
    for path in paths:
        value = _text(node, path)
        if value is not None:
            return value
    return None


def _number(value: Optional[str]) -> Optional[float]:
    """First number in a value like ``'700.00 W'``, ``'30 C'`` or ``'16x'``."""
    if value is None:
        return None
    match = _NUM_RE.search(value)
    return float(match.group(0)) if match else None


def _int(value: Optional[str]) -> Optional[int]:
    num = _number(value)
    return int(num) if num is not None else None


def _yes(value: Optional[str]) -> Optional[bool]:
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("yes", "enabled", "active", "true", "on"):
        return True
    if lowered in ("no", "disabled", "not active", "false", "off"):
        return False
    return None


def _sum(values: Iterable[Optional[int]]) -> Optional[int]:
    """Sum of the known values; None when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def pci_id_from_smi(value: Optional[str]) -> Optional[str]:
    """``'233010DE'`` / ``'0x233010DE'`` (device, vendor) -> ``'10de:2330'``."""
    if not value:
        return None
    raw = value.strip().lower()
    if raw.startswith("0x"):
        raw = raw[2:]
    if not re.fullmatch(r"[0-9a-f]{8}", raw) or raw[:4] == "0000":
        return None  # malformed, or scrubbed (some captures zero the device half)
    return f"{raw[4:]}:{raw[:4]}"


def _blank_gpu() -> dict[str, Any]:
    return {key: None for key in GPU_KEYS}


# --------------------------------------------------------------------------- nvidia-smi -q -x
#: Pascal/Volta ``double_bit`` units that are on-chip SRAM (``device_memory`` is the DRAM).
_OLD_SRAM_UNITS = ("register_file", "l1_cache", "l2_cache", "texture_memory", "texture_shm", "cbu")
_NEW_SRAM_UNC = ("sram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded")


def _ecc(gpu: ET.Element) -> dict[str, Optional[int]]:
    """Correctable/uncorrectable counts, volatile and aggregate, across formats.

    Totals (``<scope>_correctable``, ``<scope>_uncorrectable``) plus the SRAM/DRAM split of
    the uncorrectable count (``<scope>_sram_uncorrectable``, ``<scope>_dram_uncorrectable``);
    see the module docstring for the mapping of each layout.
    """
    result: dict[str, Optional[int]] = {}
    for scope in ("volatile", "aggregate"):
        node = gpu.find(f"ecc_errors/{scope}")
        if node is None:
            corr = unc = sram = dram = None
        elif node.find("double_bit") is not None or node.find("single_bit") is not None:
            # Pascal/Volta layout: per-unit counts with a total.
            corr = _int(_text(node, "single_bit/total"))
            unc = _int(_text(node, "double_bit/total"))
            sram = _sum(_int(_text(node, f"double_bit/{unit}")) for unit in _OLD_SRAM_UNITS)
            dram = _int(_text(node, "double_bit/device_memory"))
        else:
            corr = _sum(_int(_text(node, tag)) for tag in ("sram_correctable", "dram_correctable"))
            sram = _sum(_int(_text(node, tag)) for tag in _NEW_SRAM_UNC)
            dram = _int(_text(node, "dram_uncorrectable"))
            unc = _sum((sram, dram))
        result[f"{scope}_correctable"] = corr
        result[f"{scope}_uncorrectable"] = unc
        result[f"{scope}_sram_uncorrectable"] = sram
        result[f"{scope}_dram_uncorrectable"] = dram
    return result


def memory_repair(architecture: Any = None, remapped_rows: Any = None, retired_pages: Any = None) -> Optional[str]:
    """How a GPU repairs bad device memory: ``row_remap``, ``page_retirement`` or None.

    Evidence first: a supported ``remapped_rows`` block means row remapping; a reported
    retired-page count or pending flag means page retirement. Otherwise the architecture
    name decides (``ROW_REMAP_ARCHITECTURES`` / ``PAGE_RETIREMENT_ARCHITECTURES``).
    None when nothing tells (unknown architecture, nothing reported). Never raises.
    """
    if isinstance(remapped_rows, Mapping) and remapped_rows.get("supported") is True:
        return ROW_REMAP
    if isinstance(retired_pages, Mapping) and any(
            retired_pages.get(key) is not None for key in ("single_bit", "double_bit", "pending")):
        return PAGE_RETIREMENT
    if isinstance(architecture, str):
        name = architecture.strip().lower()
        if name.startswith(ROW_REMAP_ARCHITECTURES):
            return ROW_REMAP
        if name.startswith(PAGE_RETIREMENT_ARCHITECTURES):
            return PAGE_RETIREMENT
    return None


def _remapped_rows(gpu: ET.Element) -> dict[str, Any]:
    node = gpu.find("remapped_rows")
    if node is None or len(node) == 0:
        # Absent, or "N/A" (pre-Ampere, or MIG enabled on A100).
        return {"supported": False, "correctable": None, "uncorrectable": None,
                "pending": None, "failure": None}
    return {
        "supported": True,
        "correctable": _int(_text(node, "remapped_row_corr")),
        "uncorrectable": _int(_text(node, "remapped_row_unc")),
        "pending": _yes(_text(node, "remapped_row_pending")),
        "failure": _yes(_text(node, "remapped_row_failure")),
    }


def _retired_pages(gpu: ET.Element) -> dict[str, Any]:
    node = gpu.find("retired_pages")
    return {
        "single_bit": _int(_text(node, "multiple_single_bit_retirement/retired_count")),
        "double_bit": _int(_text(node, "double_bit_retirement/retired_count")),
        "pending": _yes(_first_text(node, "pending_retirement", "pending_blacklist")),
    }


def _clock_reasons(gpu: ET.Element) -> tuple[list[str], Optional[str]]:
    """Active clock event (>= 535) or clock throttle (older) reasons, prefix stripped."""
    for field, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                          ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        node = gpu.find(field)
        if node is None:
            continue
        active = []
        for child in node:
            if (child.text or "").strip().lower() == "active":
                tag = child.tag
                active.append(tag[len(prefix):] if tag.startswith(prefix) else tag)
        return active, field
    return [], None


def _power(gpu: ET.Element) -> tuple[Optional[float], Optional[float]]:
    new = gpu.find("gpu_power_readings")
    if new is not None:
        draw = _number(_first_text(new, "power_draw", "instant_power_draw", "average_power_draw"))
        limit = _number(_first_text(new, "current_power_limit", "enforced_power_limit",
                                    "default_power_limit"))
        return draw, limit
    old = gpu.find("power_readings")
    draw = _number(_text(old, "power_draw"))
    limit = _number(_first_text(old, "enforced_power_limit", "power_limit", "default_power_limit"))
    return draw, limit


def _fabric(gpu: ET.Element) -> dict[str, Any]:
    """``<fabric>``: registration state and status, clique, cluster UUID and health summary (580+)."""
    node = gpu.find("fabric")
    clique = _text(node, "cliqueId")
    return {
        "state": _text(node, "state"),
        "status": _text(node, "status"),
        "clique_id": int(clique) if clique is not None and re.fullmatch(r"\d{1,10}", clique) else None,
        "cluster_uuid": _text(node, "clusterUuid"),
        "health_summary": _text(node, "health/summary"),
    }


def _parse_gpu(gpu: ET.Element, position: int) -> dict[str, Any]:
    entry = _blank_gpu()
    minor = _int(_text(gpu, "minor_number"))
    entry["index"] = position
    entry["minor_number"] = minor
    entry["name"] = _text(gpu, "product_name")
    entry["architecture"] = _text(gpu, "product_architecture")
    entry["uuid"] = _text(gpu, "uuid")
    entry["serial"] = _text(gpu, "serial")
    entry["vbios"] = _text(gpu, "vbios_version")
    entry["pci_bus_id"] = _text(gpu, "pci/pci_bus_id") or gpu.get("id")
    entry["pci_device_id"] = pci_id_from_smi(_text(gpu, "pci/pci_device_id"))
    entry["pci_subsystem_id"] = pci_id_from_smi(_text(gpu, "pci/pci_sub_system_id"))
    link = gpu.find("pci/pci_gpu_link_info")
    entry["pcie"] = {
        "gen_current": _int(_text(link, "pcie_gen/current_link_gen")),
        "gen_max": _int(_text(link, "pcie_gen/max_link_gen")),
        "width_current": _int(_text(link, "link_widths/current_link_width")),
        "width_max": _int(_text(link, "link_widths/max_link_width")),
        "replay_count": _int(_text(gpu, "pci/replay_counter")),
    }
    entry["persistence_mode"] = _yes(_text(gpu, "persistence_mode"))
    entry["ecc_mode"] = _text(gpu, "ecc_mode/current_ecc")
    entry["ecc"] = _ecc(gpu)
    entry["remapped_rows"] = _remapped_rows(gpu)
    entry["retired_pages"] = _retired_pages(gpu)
    entry["fabric"] = _fabric(gpu)
    reasons, field = _clock_reasons(gpu)
    entry["clock_event_reasons_active"] = reasons
    entry["clock_event_reasons_field"] = field
    entry["performance_state"] = _text(gpu, "performance_state")
    entry["temperature_c"] = _int(_text(gpu, "temperature/gpu_temp"))
    entry["power_draw_w"], entry["power_limit_w"] = _power(gpu)
    entry["memory_total_mib"] = _int(_text(gpu, "fb_memory_usage/total"))
    entry["mig_mode"] = _text(gpu, "mig_mode/current_mig")
    entry["memory_repair"] = memory_repair(entry["architecture"], entry["remapped_rows"], entry["retired_pages"])
    return entry


def parse_nvidia_smi_xml(text: str) -> dict[str, Any]:
    """Parse ``nvidia-smi -q -x`` output.

    Returns ``{driver_version, cuda_version, attached_gpus, gpus: [...]}``.
    Raises ValueError when the text is empty, not XML, or not an nvidia_smi_log.
    """
    if text is None or not text.strip():
        raise ValueError("nvidia-smi -q -x produced no output")
    try:
        # nvidia-smi prints a DOCTYPE naming an external DTD; expat does not fetch it.
        root = ET.fromstring(text.strip().encode("utf-8"))
    except ET.ParseError as exc:
        raise ValueError(f"nvidia-smi -q -x output is not well-formed XML: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"unexpected XML root <{root.tag}>, expected <nvidia_smi_log>")
    gpus = [_parse_gpu(gpu, position) for position, gpu in enumerate(root.findall("gpu"))]
    return {
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "attached_gpus": _int(_text(root, "attached_gpus")),
        "gpus": gpus,
    }


# --------------------------------------------------------------------------- sysfs
def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            value = handle.read().strip()
    except OSError:
        return None
    return value or None


def _hex4(value: Optional[str]) -> Optional[str]:
    if not value:
        return None
    raw = value.lower()
    raw = raw[2:] if raw.startswith("0x") else raw
    return raw.zfill(4)[-4:] if re.fullmatch(r"[0-9a-f]+", raw) else None


def scan_pci_sysfs(root: str = "/sys") -> list[dict[str, Any]]:
    """NVIDIA GPUs (class 0x0300/0x0302) and NVSwitches (class 0x0680) under ``root``.

    Each entry: ``{address, pci_id, vendor, device, class, kind ('gpu'|'nvswitch'),
    subsystem_id, numa_node}``, sorted by address. Missing tree -> ``[]``.
    """
    base = os.path.join(root, "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    found = []
    for name in names:
        dev = os.path.join(base, name)
        vendor = _hex4(_read(os.path.join(dev, "vendor")))
        if vendor != NVIDIA_VENDOR:
            continue
        device = _hex4(_read(os.path.join(dev, "device")))
        pci_class = (_read(os.path.join(dev, "class")) or "").lower()
        class_hex = pci_class[2:] if pci_class.startswith("0x") else pci_class
        base_sub = class_hex.zfill(6)[:4] if class_hex else ""
        if base_sub in GPU_CLASSES:
            kind = "gpu"
        elif base_sub == NVSWITCH_CLASS:
            kind = "nvswitch"
        else:
            continue  # audio functions, USB-C controllers on consumer boards, ...
        sub_vendor = _hex4(_read(os.path.join(dev, "subsystem_vendor")))
        sub_device = _hex4(_read(os.path.join(dev, "subsystem_device")))
        numa = _read(os.path.join(dev, "numa_node"))
        found.append({
            "address": name,
            "pci_id": f"{vendor}:{device}" if device else None,
            "vendor": vendor,
            "device": device,
            "class": f"0x{class_hex}" if class_hex else None,
            "kind": kind,
            "subsystem_id": f"{sub_vendor}:{sub_device}" if sub_vendor and sub_device else None,
            "numa_node": int(numa) if numa and re.fullmatch(r"-?\d+", numa) else None,
        })
    return found


def _split_code(value: Optional[str]) -> tuple[Optional[int], Optional[str]]:
    """``'4: ACTIVE'`` -> ``(4, 'ACTIVE')``."""
    if value is None:
        return None, None
    code, sep, label = value.partition(":")
    if sep and code.strip().isdigit():
        return int(code.strip()), label.strip() or None
    return None, value.strip()


def scan_infiniband_sysfs(root: str = "/sys") -> list[dict[str, Any]]:
    """HCAs under ``<root>/class/infiniband`` with their ports; ``[]`` when none.

    Delegates to ``kiln_fabric.read_sysfs`` (the one sysfs reader) and keeps this
    function's historical keys: name, fw_ver, board_id, node_guid, hca_type, pci_address,
    ports (port, state, state_code, phys_state, phys_state_code, rate, rate_gbps, link_layer).
    """
    hcas = []
    for hca in _read_fabric_sysfs(root)["hcas"]:
        hcas.append({
            "name": hca["name"],
            "fw_ver": hca["fw_ver"],
            "board_id": hca["board_id"],
            "node_guid": hca["node_guid"],
            "hca_type": hca["hca_type"],
            "pci_address": hca["pci_address"],
            "ports": [{key: port[key] for key in _IB_PORT_KEYS} for port in hca["ports"]],
        })
    return hcas


_IB_PORT_KEYS = ("port", "state", "state_code", "phys_state", "phys_state_code", "rate", "rate_gbps", "link_layer")


# --------------------------------------------------------------------------- summary
def _model_entry(pci_models: Mapping[str, Any], pci_id: Optional[str]) -> dict[str, Any]:
    if not pci_id:
        return {}
    entry = pci_models.get(pci_id.lower()) or pci_models.get(pci_id.upper()) or {}
    if not entry or not isinstance(entry, Mapping):
        return {}
    return {
        "model": entry.get("model", entry.get("name")),
        "architecture": entry.get("architecture", entry.get("arch")),
        "nvswitch": bool(entry.get("nvswitch", False)),
    }


def _norm_bus(address: Optional[str]) -> Optional[str]:
    """``'00000000:18:00.0'`` and ``'0000:18:00.0'`` -> ``'0000:18:00.0'`` (lower case)."""
    if not address:
        return None
    parts = address.strip().lower().split(":")
    if len(parts) == 3:
        return f"{parts[0][-4:].zfill(4)}:{parts[1]}:{parts[2]}"
    if len(parts) == 2:
        return f"0000:{parts[0]}:{parts[1]}"
    return address.strip().lower()


def summarize(pci_devices: list[dict[str, Any]],
              smi: Optional[dict[str, Any]] = None,
              hcas: Optional[list[dict[str, Any]]] = None,
              pci_models: Optional[Mapping[str, Any]] = None,
              nvlink: Optional[Mapping[int, dict[str, Any]]] = None,
              driver_loaded: bool = False,
              nvlink_errors: Optional[Mapping[int, Mapping[int, Mapping[str, Optional[int]]]]] = None,
              fabric_manager: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """Combine sysfs, nvidia-smi and NVLink data into the ``kiln_gpu`` fact.

    *nvlink_errors* (``parse_nvlink_errors``): each GPU's ``nvlink_errors`` becomes
    ``{"<link>": {counter: value}}`` (link numbers as strings, as JSON keeps them; ``{}`` for a
    GPU the output did not list); without it every GPU's ``nvlink_errors`` stays None (not read).
    *fabric_manager*: ``{present, active}`` of the ``nvidia-fabricmanager`` service, copied to
    the fact's ``fabric_manager`` (None: not asked).
    """
    models_map = {str(k).lower(): v for k, v in (pci_models or {}).items()}
    pci_gpus = [d for d in pci_devices if d.get("kind") == "gpu"]
    nvswitches = [d for d in pci_devices if d.get("kind") == "nvswitch"]
    pci_by_bus = {_norm_bus(d["address"]): d for d in pci_gpus}

    gpus: list[dict[str, Any]] = []
    smi_gpus = (smi or {}).get("gpus") or []
    if smi is not None and smi_gpus:
        source = "nvidia-smi"
        for entry in smi_gpus:
            gpu = dict(entry)
            pci = pci_by_bus.get(_norm_bus(gpu.get("pci_bus_id")))
            if pci is not None:
                gpu["numa_node"] = pci.get("numa_node")
                gpu["pci_device_id"] = gpu.get("pci_device_id") or pci.get("pci_id")
            gpus.append(gpu)
    elif pci_gpus:
        source = "sysfs"
        for position, pci in enumerate(pci_gpus):
            gpu = _blank_gpu()
            gpu.update(index=position, pci_bus_id=pci["address"], pci_device_id=pci["pci_id"],
                       pci_subsystem_id=pci.get("subsystem_id"), numa_node=pci.get("numa_node"))
            gpus.append(gpu)
    else:
        source = "none"

    unknown: list[str] = []
    model_nvswitch = False
    for gpu in gpus:
        info = _model_entry(models_map, gpu.get("pci_device_id"))
        if info:
            gpu["model"] = info["model"]
            gpu["architecture"] = info["architecture"] or gpu.get("architecture")
            model_nvswitch = model_nvswitch or info["nvswitch"]
        else:
            gpu["model"] = gpu.get("name")
            if gpu.get("pci_device_id") and gpu["pci_device_id"] not in unknown:
                unknown.append(gpu["pci_device_id"])
        if nvlink is not None:
            gpu["nvlink"] = _nvlink_for(gpu, nvlink)
        if nvlink_errors is not None:
            gpu["nvlink_errors"] = _nvlink_errors_for(gpu, nvlink_errors)
        else:
            gpu.setdefault("nvlink_errors", None)
        gpu["memory_repair"] = memory_repair(gpu.get("architecture"), gpu.get("remapped_rows"),
                                             gpu.get("retired_pages"))

    models = _distinct(g.get("model") for g in gpus)
    architectures = _distinct((g.get("architecture") or "").lower() or None for g in gpus)
    hca_list = list(hcas or [])
    return {
        "gpus": gpus,
        "gpu_count": len(gpus),
        "pci_gpu_count": len(pci_gpus),
        "smi_gpu_count": len(smi_gpus) if smi is not None else None,
        "driver_loaded": bool(driver_loaded),
        "driver_version": (smi or {}).get("driver_version"),
        "cuda_version": (smi or {}).get("cuda_version"),
        "nvswitch_count": len(nvswitches),
        "nvswitch_board": bool(nvswitches) or model_nvswitch,
        "models": models,
        "architecture": architectures[0] if len(architectures) == 1 else None,
        "architectures": architectures,
        "unknown_pci_ids": unknown,
        "hcas": hca_list,
        "hca_count": len(hca_list),
        "source": source,
        "fabric_manager": dict(fabric_manager) if isinstance(fabric_manager, Mapping) else None,
    }


def _nvlink_for(gpu: Mapping[str, Any], nvlink: Mapping[int, dict[str, Any]]) -> dict[str, Any]:
    match = None
    if gpu.get("uuid"):
        match = next((v for v in nvlink.values() if v.get("uuid") == gpu["uuid"]), None)
    if match is None:
        match = nvlink.get(gpu.get("index"))  # type: ignore[arg-type]
    if match is None:
        return {"links": 0, "active": 0, "inactive": 0}
    return {"links": match["links"], "active": match["active"], "inactive": match["inactive"]}


def _nvlink_errors_for(gpu: Mapping[str, Any], errors: Mapping[int, Mapping[int, Mapping[str, Optional[int]]]]
                       ) -> dict[str, dict[str, Optional[int]]]:
    """The GPU's counters from ``parse_nvlink_errors`` (matched by nvidia-smi index), link keys as strings."""
    links = errors.get(gpu.get("index"))  # type: ignore[arg-type]
    if not isinstance(links, Mapping):
        return {}
    return {str(link): dict(counters) for link, counters in links.items() if isinstance(counters, Mapping)}


def _distinct(values: Iterable[Optional[str]]) -> list[str]:
    seen: list[str] = []
    for value in values:
        if value and value not in seen:
            seen.append(value)
    return seen
