"""Release data completeness: cuDNN, NCCL, CUDA and data center driver releases.

The "source tables" in tests/fixtures/release_tables/ are plain copies of the
release lists kiln's data was built from (PyPI release lists, NVIDIA redist
indexes, GPU Operator matrices); each starts with ``# source:`` and
``# retrieved:`` lines. This module checks that data/compat.yml

(a) lists every release map in ascending version order, without duplicates;
(b) has no gap against its source table, and lists nothing the table lacks in
    the table's range unless the entry says why (``source_table_exempt``);
(c) renders well-formed package strings for every release on every OS whose
    NVIDIA repository serves a CUDA major the release supports;
(d) gives every entry a source and a valid confidence.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from kiln_compat_engine.data import DATA_DIR
from kiln_compat_engine.packages import kiln_pkg
from kiln_compat_engine.versions import kiln_version_cmp, kiln_version_key
from kiln_compat_engine.violations import CONFIDENCE_LEVELS

REPO = DATA_DIR.parent
TABLES = REPO / "tests" / "fixtures" / "release_tables"
LEVELS = set(CONFIDENCE_LEVELS)
VERSION_RE = re.compile(r"^\d+(\.\d+)*$")
APT_RE = re.compile(r"^[a-z0-9][a-z0-9.+-]*=(\d+:)?\d[A-Za-z0-9.+~-]*$")
DNF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*-\d[A-Za-z0-9.+~]*-[A-Za-z0-9][A-Za-z0-9.+~]*$")


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice (PyYAML keeps the last one silently)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)

RAW: dict[str, Any] = yaml.load((DATA_DIR / "compat.yml").read_text(encoding="utf-8"), Loader=_StrictLoader)  # noqa: S506
CUDA = RAW["cuda"]["releases"]
CUDNN = RAW["cudnn"]["releases"]
NCCL = RAW["nccl"]["releases"]
BRANCHES = RAW["drivers"]["branches"]
OSES = {k: v for k, v in RAW["os"].items() if k != "os_aliases"}


def key(version: str) -> Any:
    return kiln_version_key(version)


def same(a: str, b: str) -> bool:
    return kiln_version_cmp(a, b) == 0


def major(version: str) -> str:
    return version.split(".")[0]


def minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def read_table(name: str) -> tuple[list[str], dict[str, list[str]]]:
    """Versions and ``# key: value`` header lines of one source table."""
    versions: list[str] = []
    meta: dict[str, list[str]] = {}
    for line in (TABLES / name).read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if not text:
            continue
        if text.startswith("#"):
            m = re.match(r"#\s*(source|retrieved|range):\s*(.+)$", text)
            if m:
                meta.setdefault(m.group(1), []).append(m.group(2))
            continue
        versions.append(text)
    return versions, meta


def driver_tables() -> list[str]:
    return sorted(p.stem.removeprefix("driver_") for p in TABLES.glob("driver_*.txt"))


# ---------------------------------------------------------------------------
# (a) order and duplicates


def assert_ascending_unique(versions: list[str], what: str) -> None:
    for v in versions:
        assert VERSION_RE.match(v), f"{what}: {v!r} is not a dotted version"
    keys = [key(v) for v in versions]
    assert len(set(keys)) == len(keys), f"{what}: duplicate versions {versions}"
    assert keys == sorted(keys), f"{what}: not ascending: {versions}"


@pytest.mark.parametrize("path", ["cuda.releases", "cudnn.releases", "nccl.releases", "drivers.branches"])
def test_release_maps_are_ascending_without_duplicates(path: str) -> None:
    node: Any = RAW
    for part in path.split("."):
        node = node[part]
    assert_ascending_unique(list(node), path)


@pytest.mark.parametrize("branch", list(BRANCHES))
def test_driver_point_releases_are_ascending_and_inside_their_branch(branch: str) -> None:
    releases = BRANCHES[branch].get("releases") or []
    assert_ascending_unique(releases, f"drivers.branches.{branch}.releases")
    assert all(r.split(".")[0] == branch for r in releases), releases


@pytest.mark.parametrize("ver", list(NCCL))
def test_nccl_builds_are_ascending_and_consistent(ver: str) -> None:
    rel = NCCL[ver]
    assert rel["builds"], f"NCCL {ver} has no known build"
    assert_ascending_unique(rel["builds"], f"nccl {ver} builds")
    assert not set(rel["builds"]) & set(rel.get("builds_seen_once") or []), ver
    known_majors = {major(b) for b in rel["builds"]}
    assert not known_majors & set(rel.get("builds_unknown_for") or []), ver


@pytest.mark.parametrize("ver", list(CUDNN))
def test_cudnn_ranges_are_well_formed(ver: str) -> None:
    rel = CUDNN[ver]
    assert rel["cuda"], ver
    for cmajor, (lo, hi) in rel["cuda"].items():
        assert major(lo) == major(hi) == cmajor and key(lo) <= key(hi), (ver, cmajor, lo, hi)
    if major(ver) == "8":
        assert set(rel["build_suffix"]) == set(rel["cuda"]), ver
        for cmajor, build in rel["build_suffix"].items():
            lo, hi = rel["cuda"][cmajor]
            assert key(lo) <= key(build) <= key(hi), (ver, build)
    else:
        assert "build_suffix" not in rel, ver


# ---------------------------------------------------------------------------
# (b) no gaps against the source tables


TABLE_FILES = ["cuda.txt", "cudnn.txt", "nccl.txt"] + [f"driver_{b}.txt" for b in driver_tables()]


@pytest.mark.parametrize("name", TABLE_FILES)
def test_source_table_is_well_formed(name: str) -> None:
    versions, meta = read_table(name)
    assert meta.get("source"), f"{name}: no '# source:' line"
    assert meta.get("retrieved") and all(re.match(r"\d{4}-\d{2}-\d{2} with ", r) for r in meta["retrieved"]), name
    assert versions, name
    assert_ascending_unique(versions, name)


def _check_map_against_table(table: list[str], data: dict[str, Any], what: str, alias: str | None = None) -> None:
    def matches(ver: str, t: str) -> bool:
        return same(ver, t) or bool(alias and data[ver].get(alias) and same(data[ver][alias], t))

    missing = [t for t in table if not any(matches(v, t) for v in data)]
    assert not missing, f"{what}: in the source table but not in data/compat.yml: {missing}"
    majors = {major(t) for t in table}
    in_range = [v for v in data if major(v) in majors and key(v) >= key(table[0])]
    extra = [v for v in in_range if not any(matches(v, t) for t in table) and not data[v].get("source_table_exempt")]
    assert not extra, f"{what}: in data/compat.yml but not in the source table (and no source_table_exempt): {extra}"


def test_cuda_has_every_patch_release_of_the_table() -> None:
    table, meta = read_table("cuda.txt")
    _check_map_against_table(table, CUDA, "cuda.releases")
    # the documented coverage limit: nothing past the table's last release (13.4/13.5 are deliberately absent)
    assert max(CUDA, key=key) == max(table, key=key) or same(max(CUDA, key=key), max(table, key=key))
    assert meta.get("range"), "cuda.txt must state its range"


def test_cudnn_has_every_release_of_the_table() -> None:
    table, _ = read_table("cudnn.txt")
    _check_map_against_table(table, CUDNN, "cudnn.releases", alias="pypi")


def test_nccl_has_every_release_of_the_table() -> None:
    table, _ = read_table("nccl.txt")
    _check_map_against_table(table, NCCL, "nccl.releases")


@pytest.mark.parametrize("branch", driver_tables())
def test_driver_branch_matches_its_table(branch: str) -> None:
    table, _ = read_table(f"driver_{branch}.txt")
    entry = BRANCHES[branch]
    assert entry.get("releases") == table, f"R{branch}: data {entry.get('releases')} != table {table}"
    assert entry.get("releases_source"), f"R{branch}: name where the releases come from (releases_source)"
    assert entry.get("releases_complete") in (True, False), f"R{branch}: say whether the list is complete"


def test_every_supported_branch_has_a_table() -> None:
    supported = [b for b, e in BRANCHES.items() if e.get("status") == "supported"]
    assert supported and set(supported) <= set(driver_tables()), (supported, driver_tables())


# ---------------------------------------------------------------------------
# (c) every release renders a package string for every OS that serves it


def newest_cuda(cmajor: str, lo: str, hi: str) -> str | None:
    """Newest CUDA release in the data of major ``cmajor`` whose minor lies in [lo, hi]."""
    fits = [c for c in CUDA if major(c) == cmajor and key(lo) <= key(minor(c)) <= key(hi)]
    return max(fits, key=key) if fits else None


def oses_serving(cmajor: str) -> list[str]:
    return [os_id for os_id, e in OSES.items() if cmajor in (e.get("cuda_majors") or [])]


def assert_well_formed(pkgs: list[str], os_id: str, must_contain: str, count: int) -> None:
    mgr = OSES[os_id]["pkg_mgr"]
    assert len(pkgs) == count, (os_id, pkgs)
    for pkg in pkgs:
        pattern = APT_RE if mgr == "apt" else DNF_RE
        assert pattern.match(pkg), f"{os_id}: malformed {mgr} package string {pkg!r}"
        assert must_contain in pkg, (os_id, pkg, must_contain)
        assert ("=" in pkg) == (mgr == "apt"), (os_id, pkg)


@pytest.mark.parametrize("ver", list(CUDA))
def test_every_cuda_release_renders(ver: str) -> None:
    oses = oses_serving(major(ver))
    assert oses, f"no OS repository serves CUDA {major(ver)}"
    dash = minor(ver).replace(".", "-")
    for os_id in oses:
        pkgs = kiln_pkg({"os": os_id, "cuda": ver}, "cuda")
        assert_well_formed(pkgs, os_id, f"{ver}-1", 1)
        assert pkgs[0].startswith(f"cuda-toolkit-{dash}"), pkgs


@pytest.mark.parametrize("ver", list(CUDNN))
def test_every_cudnn_release_renders(ver: str) -> None:
    rel = CUDNN[ver]
    rendered = 0
    for cmajor, (lo, hi) in rel["cuda"].items():
        cuda = newest_cuda(cmajor, lo, hi)
        assert cuda, f"cuDNN {ver}: no CUDA {cmajor} release in the data lies in {lo}..{hi}"
        for os_id in oses_serving(cmajor):
            pkgs = kiln_pkg({"os": os_id, "cuda": cuda, "cudnn": ver}, "cudnn")
            assert_well_formed(pkgs, os_id, ver, 2)
            if major(ver) == "8":
                assert all(p.endswith(f"cuda{rel['build_suffix'][cmajor]}") for p in pkgs), pkgs
            else:
                assert all(p.startswith("libcudnn9-") and f"-cuda-{cmajor}" in p for p in pkgs), pkgs
            rendered += 1
    assert rendered, f"cuDNN {ver} renders on no OS"


@pytest.mark.parametrize("ver", list(NCCL))
def test_every_nccl_release_renders(ver: str) -> None:
    rel = NCCL[ver]
    newest_minor = max((minor(c) for c in CUDA), key=key)
    rendered = 0
    for build in rel["builds"]:
        same_minor = [c for c in CUDA if minor(c) == build]
        if not same_minor:
            # only a build newer than every CUDA in the data (13.4: deliberately absent) may go unrendered
            assert key(build) > key(newest_minor) or major(build) not in {major(c) for c in CUDA}, (ver, build)
            continue
        cuda = max(same_minor, key=key)
        for os_id in oses_serving(major(build)):
            pkgs = kiln_pkg({"os": os_id, "cuda": cuda, "nccl": ver}, "nccl")
            assert_well_formed(pkgs, os_id, f"{ver}-1+cuda{build}", 2)
            rendered += 1
    if key(ver) >= key("2.18.1"):
        assert rendered, f"NCCL {ver}: no build renders on any OS"


DRIVER_CASES = [(b, r) for b, e in BRANCHES.items() for r in (e.get("releases") or [])]


@pytest.mark.parametrize(("branch", "rel"), DRIVER_CASES, ids=[r for _, r in DRIVER_CASES])
def test_every_driver_release_renders(branch: str, rel: str) -> None:
    entry = BRANCHES[branch]
    top = int(entry.get("max_cuda_major") or 0)
    oses = [o for o, e in OSES.items() if any(int(m) <= top for m in e.get("cuda_majors") or [])]
    flavors = ["proprietary"]
    if int(branch) >= int(RAW["drivers"]["flavors"]["both_from_branch"]):
        flavors.append("open")
    for os_id in oses:
        for flavor in flavors:
            pkgs = kiln_pkg({"os": os_id, "driver": rel, "driver_flavor": flavor}, "driver")
            assert_well_formed(pkgs, os_id, rel, 1)
        fm = kiln_pkg({"os": os_id, "driver": rel, "fabricmanager": rel}, "fabricmanager")
        assert_well_formed(fm, os_id, rel, 2)


# ---------------------------------------------------------------------------
# (d) source and confidence on every entry


ENTRIES = ([("cuda", v, e) for v, e in CUDA.items()] + [("cudnn", v, e) for v, e in CUDNN.items()]
           + [("nccl", v, e) for v, e in NCCL.items()] + [("driver", b, e) for b, e in BRANCHES.items()])


@pytest.mark.parametrize(("component", "ver", "entry"), ENTRIES, ids=[f"{c}-{v}" for c, v, _ in ENTRIES])
def test_every_release_has_source_and_confidence(component: str, ver: str, entry: dict[str, Any]) -> None:
    assert str(entry.get("source") or "").strip(), f"{component} {ver}: no source"
    assert entry.get("confidence") in LEVELS, f"{component} {ver}: confidence {entry.get('confidence')!r}"
    for k, v in entry.items():
        if k.endswith("_confidence"):
            assert v in LEVELS, f"{component} {ver}: {k}={v!r}"
            assert k.removesuffix("_confidence") in entry, f"{component} {ver}: {k} overrides a field that is absent"


# ---------------------------------------------------------------------------
# pinned versions elsewhere in the repository stay in the data


PIN_RE = re.compile(r"""\b(cudnn|nccl):\s*["']?(\d+(?:\.\d+)+)(?:-\d+\+cuda(\d+\.\d+))?["']?""")


def test_versions_pinned_in_molecule_and_inventories_are_in_the_data() -> None:
    found = 0
    for path in sorted([*REPO.glob("molecule/**/*.yml"), *REPO.glob("inventories/**/*.yml")]):
        for comp, ver, build in PIN_RE.findall(path.read_text(encoding="utf-8")):
            found += 1
            rel = (CUDNN if comp == "cudnn" else NCCL).get(ver)
            assert rel, f"{path.relative_to(REPO)}: {comp} {ver} is not in data/compat.yml"
            if build:
                assert build in rel["builds"], f"{path.relative_to(REPO)}: NCCL build +cuda{build} of {ver} is not known"
    assert found
