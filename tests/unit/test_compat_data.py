"""The data files and the filter registry keep their promises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import kiln_compat as kc

FILTER_DIR = Path(kc.__file__).resolve().parent
LEVELS = set(kc.CONFIDENCE_LEVELS)
ENTRY_TABLES = [
    ("cuda", "releases"), ("cuda", "majors"), ("drivers", "branches"), ("gpus",), ("cudnn", "releases"),
    ("nccl", "releases"), ("torch", "releases"), ("container_toolkit", "releases"), ("dcgm", "releases"),
    ("slurm", "releases"), ("architectures",), ("ofed", "kinds"), ("ofed", "doca_releases"), ("ofed", "mlnx_releases"),
]


def _table(path: tuple[str, ...]) -> dict[str, Any]:
    node: Any = kc.compat_data()
    for part in path:
        node = node[part]
    return node


def test_every_entry_has_source_and_confidence() -> None:
    for path in ENTRY_TABLES:
        for key, entry in _table(path).items():
            assert entry.get("source"), (path, key)
            assert entry.get("confidence") in LEVELS, (path, key)
    for key, entry in kc.compat_data()["os"].items():
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

    walk(kc.compat_data(), "compat")


def test_denylist_entries_are_sourced() -> None:
    for entry in kc.denylist_data():
        assert entry["link"].startswith("http") and entry["reason"] and entry["component"]
        assert bool(entry.get("version")) != bool(entry.get("range"))
        assert entry.get("confidence") in LEVELS


def test_cuda_min_driver_never_decreases_within_a_major() -> None:
    releases = kc.compat_data()["cuda"]["releases"]
    for major in ("11", "12", "13"):
        ordered = sorted((v for v in releases if v.split(".")[0] == major and v != "11.0.1"), key=kc.kiln_version_key)
        drivers = [releases[v]["min_driver"] for v in ordered]
        assert drivers == sorted(drivers, key=kc.kiln_version_key), major


def test_filters_match_sidecar_docs() -> None:
    filters = kc.FilterModule().filters()
    docs = {p.stem: p for p in FILTER_DIR.glob("kiln_*.yml")}
    assert set(filters) <= set(docs), set(filters) - set(docs)  # other plugin files document their own filters
    for name in filters:
        path = docs[name]
        doc = yaml.safe_load(path.read_text())
        assert doc["DOCUMENTATION"]["name"] == name
        assert doc["DOCUMENTATION"]["short_description"] and doc["EXAMPLES"].strip() and doc["RETURN"]["_value"]
        assert "_input" in doc["DOCUMENTATION"]["options"]


def test_documented_filter_names() -> None:
    assert sorted(kc.FilterModule().filters()) == sorted([
        "kiln_stack_violations", "kiln_recommend_stack", "kiln_resolve_stack", "kiln_gpu", "kiln_gpu_pci_models",
        "kiln_version_cmp", "kiln_version_compare", "kiln_version_sort", "kiln_version_key",
        "kiln_pkg", "kiln_packages", "kiln_distro_build", "kiln_tool", "kiln_repo", "kiln_repos_problems", "kiln_cuda_repo", "kiln_container_toolkit_repo", "kiln_torch_index",
        "kiln_stacks_by_host", "kiln_stack_report", "kiln_hostlist", "kiln_plan", "kiln_plan_text",
        "kiln_missing_python_libs",
    ])
    doc = (FILTER_DIR.parent / "docs" / "compat.md")
    if doc.exists():
        text = doc.read_text()
        for name in kc.FilterModule().filters():
            assert f"`{name}" in text, name
