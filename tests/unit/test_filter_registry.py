"""The filter registries in filter_plugins/: every filter documented by a sidecar <name>.yml, and the reverse."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import yaml

import kiln_compat_filters as kc

FILTER_DIR = Path(kc.__file__).resolve().parent
MODULE_UTILS = FILTER_DIR.parent / "module_utils"


def _registries() -> dict[str, dict[str, Any]]:
    """Each filter_plugins/*.py file -> the filters its FilterModule registers."""
    out = {}
    for path in sorted(FILTER_DIR.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"kiln_registry_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out[path.name] = module.FilterModule().filters()
    return out


def test_every_documented_filter_is_registered_and_every_registered_filter_documented() -> None:
    registered: dict[str, str] = {}
    for file, filters in _registries().items():
        for name in filters:
            assert name not in registered, f"{name} is registered by {registered.get(name)} and {file}"
            registered[name] = file
    docs = {p.stem for p in FILTER_DIR.glob("*.yml")}
    assert set(registered) == docs, {"undocumented": sorted(set(registered) - docs),
                                     "documented, not registered": sorted(docs - set(registered))}
    for name in docs:
        doc = yaml.safe_load((FILTER_DIR / f"{name}.yml").read_text())
        assert doc["DOCUMENTATION"]["name"] == name


def test_no_filter_file_shadows_a_module_utils_name() -> None:
    # tests (and controller code) put both directories on sys.path: one name, one file
    filters = {p.stem for p in FILTER_DIR.glob("*.py")}
    shared = {p.stem for p in MODULE_UTILS.glob("*.py")} | {p.name for p in MODULE_UTILS.iterdir()
                                                            if (p / "__init__.py").exists()}
    assert not filters & shared, filters & shared


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
        "kiln_stack_violations", "kiln_recommend_stack", "kiln_resolve_stack", "kiln_gpu_spec", "kiln_gpu_pci_models",
        "kiln_version_cmp", "kiln_version_compare", "kiln_version_sort", "kiln_version_key",
        "kiln_pkg", "kiln_packages", "kiln_distro_build", "kiln_tool", "kiln_repo", "kiln_repos_problems", "kiln_cuda_repo", "kiln_container_toolkit_repo", "kiln_torch_index",
        "kiln_stacks_by_host", "kiln_stack_report", "kiln_hostlist", "kiln_plan", "kiln_plan_text",
        "kiln_missing_python_libs", "kiln_doca_repo", "kiln_gpudirect", "kiln_ofed_builds", "kiln_container_plan",
    ])
    doc = (FILTER_DIR.parent / "docs" / "compat.md")
    if doc.exists():
        text = doc.read_text()
        for name in kc.FilterModule().filters():
            assert f"`{name}" in text, name
