"""The data files keep their promises, as the loader reads them (module data)."""

from __future__ import annotations

from typing import Any

from kiln_compat_engine.data import compat_data, denylist_data
from kiln_compat_engine.versions import kiln_version_key
from kiln_compat_engine.violations import CONFIDENCE_LEVELS

LEVELS = set(CONFIDENCE_LEVELS)
ENTRY_TABLES = [
    ("cuda", "releases"), ("cuda", "majors"), ("drivers", "branches"), ("gpus",), ("cudnn", "releases"),
    ("nccl", "releases"), ("torch", "releases"), ("container_toolkit", "releases"), ("dcgm", "releases"),
    ("slurm", "releases"), ("architectures",), ("ofed", "kinds"), ("ofed", "doca_releases"), ("ofed", "mlnx_releases"),
]


def _table(path: tuple[str, ...]) -> dict[str, Any]:
    node: Any = compat_data()
    for part in path:
        node = node[part]
    return node


def test_every_entry_has_source_and_confidence() -> None:
    for path in ENTRY_TABLES:
        for key, entry in _table(path).items():
            assert entry.get("source"), (path, key)
            assert entry.get("confidence") in LEVELS, (path, key)
    for key, entry in compat_data()["os"].items():
        if key != "os_aliases":
            assert entry.get("source") and entry.get("confidence") in LEVELS, key


def test_every_confidence_field_is_valid() -> None:
    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "confidence" or k.endswith("_confidence"):
                    assert v in LEVELS, f"{where}.{k}={v}"
                walk(v, f"{where}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")

    walk(compat_data(), "compat")


def test_denylist_entries_are_sourced() -> None:
    for entry in denylist_data():
        assert entry["link"].startswith("http") and entry["reason"] and entry["component"]
        assert bool(entry.get("version")) != bool(entry.get("range"))
        assert entry.get("confidence") in LEVELS


def test_cuda_min_driver_never_decreases_within_a_major() -> None:
    releases = compat_data()["cuda"]["releases"]
    for major in ("11", "12", "13"):
        ordered = sorted((v for v in releases if v.split(".")[0] == major and v != "11.0.1"), key=kiln_version_key)
        drivers = [releases[v]["min_driver"] for v in ordered]
        assert drivers == sorted(drivers, key=kiln_version_key), major
