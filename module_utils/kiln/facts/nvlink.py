# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure parsers of ``nvidia-smi nvlink -s`` (link states) and ``nvidia-smi nvlink -e`` (error
counters), merged into the ``kiln_gpu`` fact by ``kiln.facts.hardware.summarize`` (which re-exports
them). Standard library only; never raise on odd text.
"""

from __future__ import annotations

import re
from typing import Any, Optional

_NUM_RE = re.compile(r"[-+]?\d{1,30}(?:\.\d{1,30})?")


def _number(value: str) -> Optional[float]:
    """First number in a state like ``'26.562 GB/s'``."""
    match = _NUM_RE.search(value)
    return float(match.group(0)) if match else None


# --------------------------------------------------------------------------- nvidia-smi nvlink -s
_NVL_GPU_RE = re.compile(r"^GPU\s+(\d{1,6}):\s*(.*?)(?:\s+\(UUID:\s*([^)]+)\))?\s*$")
_NVL_LINK_RE = re.compile(r"^Link\s+(\d+):\s*(.*)$")


def parse_nvlink_status(text: Optional[str]) -> dict[int, dict[str, Any]]:
    """Parse ``nvidia-smi nvlink -s``: ``{gpu_index: {links, active, inactive, uuid, speeds_gbps}}``.

    A link with a bandwidth figure is active; ``<inactive>`` or anything else is
    inactive. A GPU whose block has no ``Link`` lines (PCIe cards, or "all links
    are inActive" messages) reports zero links.
    """
    result: dict[int, dict[str, Any]] = {}
    current: Optional[dict[str, Any]] = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        gpu_match = _NVL_GPU_RE.match(line)
        if gpu_match:
            index = int(gpu_match.group(1))
            current = result.setdefault(index, {"links": 0, "active": 0, "inactive": 0,
                                                "uuid": gpu_match.group(3), "speeds_gbps": []})
            continue
        link_match = _NVL_LINK_RE.match(line)
        if link_match and current is not None:
            state = link_match.group(2).strip()
            current["links"] += 1
            speed = _number(state) if "gb/s" in state.lower() else None
            if speed is not None and speed > 0:
                current["active"] += 1
                current["speeds_gbps"].append(speed)
            else:
                current["inactive"] += 1
    return result


# --------------------------------------------------------------------------- nvidia-smi nvlink -e
_NVE_GPU_RE = re.compile(r"^GPU\s+(\d{1,6}):")
_NVE_LINK_RE = re.compile(r"^Link\s+(\d{1,4}):\s*(.*)$")
_NVE_INT_RE = re.compile(r"[-+]?[0-9]{1,40}")
#: ``nvidia-smi nvlink -e`` counter names (lower case, non-alphanumerics as ``_``) kiln names itself.
NVLINK_COUNTERS = {"replay_errors": "replay", "recovery_errors": "recovery", "crc_errors": "crc"}


def _counter_name(label: str) -> Optional[str]:
    name = re.sub(r"[^a-z0-9]+", "_", label.strip().lower()).strip("_")[:64]
    return NVLINK_COUNTERS.get(name, name) or None


def _counter_value(text: str) -> Optional[int]:
    """An integer counter; None for N/A, a ratio (BER) or anything else."""
    value = text.strip().replace(",", "")
    return int(value) if _NVE_INT_RE.fullmatch(value) else None


def parse_nvlink_errors(text: Optional[str]) -> dict[int, dict[int, dict[str, Optional[int]]]]:
    """Parse ``nvidia-smi nvlink -e``: ``{gpu_index: {link: {"replay": n, "recovery": n, "crc": n}}}``.

    The layout (drivers up to the Hopper generation)::

        GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
                 Link 0: Replay Errors: 0
                 Link 0: Recovery Errors: 0
                 Link 0: CRC Errors: 0

    ``Replay Errors``, ``Recovery Errors`` and ``CRC Errors`` become ``replay``, ``recovery``
    and ``crc``; any other counter (NVLink 5 drivers print ``Rx Errors``, ``Link recovery
    failed events``, ``FEC Errors - 3`` ... instead) is kept under its name in lower case with
    ``_`` for other characters (``link_recovery_failed_events``, ``fec_errors_3``). A counter
    is present only when its line is printed; its value is None when it is not an integer
    (``N/A``, a BER ratio). Unknown lines are ignored; a GPU line with no link lines gives
    ``{}``. Never raises.
    """
    result: dict[int, dict[int, dict[str, Optional[int]]]] = {}
    current: Optional[dict[int, dict[str, Optional[int]]]] = None
    for raw in str(text or "").splitlines():
        line = raw.strip()
        gpu_match = _NVE_GPU_RE.match(line)
        if gpu_match:
            current = result.setdefault(int(gpu_match.group(1)), {})
            continue
        link_match = _NVE_LINK_RE.match(line)
        if not link_match or current is None:
            continue
        label, sep, value = link_match.group(2).rpartition(":")
        name = _counter_name(label) if sep else None
        if name is None:
            continue
        current.setdefault(int(link_match.group(1)), {})[name] = _counter_value(value)
    return result
