"""As-built records, the drift gate and the burn-in's mixed-version refusal (module_utils/kiln/packages/drift.py)."""
from __future__ import annotations

import json
import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_paths import REPO
import kiln_data
from kiln.burnin import assemble as kb  # noqa: E402
from kiln.packages import drift as kd  # noqa: E402
from kiln.packages import pkgdb as kiln_pkgdb  # noqa: E402

OLD, NEW = "580.95.05-1", "580.173.02-1"
FIX = REPO / "tests" / "fixtures" / "nccl-tests"


def pins(driver: str = NEW) -> dict:
    return {"nvidia-driver": [f"nvidia-open-580={driver}", f"nvidia-smi={driver}"],
            "cuda": ["libnccl2=2.28.7-1+cuda13.0", "cuda-toolkit-13-0=13.0.2-1"],
            "rdma-stack": ["rdma-core=44.0-2"]}


def db(driver: str = NEW, nccl: str = "2.28.7-1+cuda13.0") -> dict:
    return {"nvidia-open-580": [driver], "nvidia-smi": [driver], "libnccl2": [nccl],
            "cuda-toolkit-13-0": ["13.0.2-1"], "rdma-core": ["44.0-2"], "bash": ["5.2.15-2+b2"]}


HELD = ["nvidia-open-580", "nvidia-smi", "libnccl2", "cuda-toolkit-13-0", "rdma-core"]


def record(host: str, driver: str = NEW, installed: str | None = None, held=HELD, stack_fp: str = "aaaaaaaaaaaa",
           kernel: str = "6.1.0-28-amd64", nccl: str = "2.28.7-1+cuda13.0") -> dict:
    gpu = {"driver_version": (installed or driver).split("-")[0], "cuda_version": "13.0", "pci_gpu_count": 8,
           "gpus": [{"vbios": "96.00.74.00.01"}] * 8}
    fabric = {"hcas": [{"name": "mlx5_0", "hca_type": "MT4129", "fw_ver": "28.39.1002"}]}
    return kd.as_built(host, "apt", db(installed or driver, nccl), held, pins(driver), kernel=kernel,
                       os_id="debian-12", gpu=gpu, fabric=fabric, applied={"fingerprint": stack_fp})


def test_as_built_records_pins_installed_running_and_a_fingerprint():
    rec = record("c1")
    assert rec["schema"] == kd.SCHEMA and rec["host"] == "c1" and rec["kernel"] == "6.1.0-28-amd64"
    drv = {p["name"]: p for p in rec["components"]["nvidia-driver"]["packages"]}
    assert drv["nvidia-open-580"] == {"name": "nvidia-open-580", "pinned": NEW, "spec": f"nvidia-open-580={NEW}",
                                      "installed": NEW, "held": True}
    assert rec["running"]["driver"] == "580.173.02" and rec["running"]["vbios"] == ["96.00.74.00.01"]
    assert rec["running"]["hca_fw"] == ["MT4129 28.39.1002"] and rec["running"]["gpus"] == 8
    assert rec["versions"] == {"driver": "580.173.02", "nccl": "2.28.7-1+cuda13.0", "doca": "44.0-2",
                               "kernel": "6.1.0-28-amd64"}
    assert rec["stack_fingerprint"] == "aaaaaaaaaaaa" and len(rec["fingerprint"]) == 12
    # not a package kiln pinned: not in the record
    assert "bash" not in json.dumps(rec)


def test_fingerprint_follows_what_is_installed_not_what_is_pinned():
    assert record("c1")["fingerprint"] == record("c2")["fingerprint"]
    assert record("c1")["fingerprint"] != record("c1", installed=OLD)["fingerprint"]
    assert record("c1")["fingerprint"] != record("c1", kernel="6.1.0-29-amd64")["fingerprint"]


@pytest.mark.parametrize("bad, where", [
    ({"packages": "x"}, "package database"),
    ({"held": "nvidia-smi"}, "held"),
    ({"pins": ["a"]}, "pins"),
    ({"pins": {"cuda": "libnccl2=2.28.7-1"}}, "pins of cuda"),
    ({"pins": {"cuda": ["libnccl2==2"]}}, "owner cuda"),
])
def test_as_built_refuses_bad_input_naming_the_host(bad, where):
    args = {"packages": db(), "held": HELD, "pins": pins()}
    args.update(bad)
    with pytest.raises(kd.DriftError, match=f"c7.*{where}"):
        kd.as_built("c7", "apt", args["packages"], args["held"], args["pins"])


def test_node_drift_names_a_hand_changed_package_with_intended_and_actual():
    rows = kd.node_drift("c2", record("c2", installed=OLD))
    assert {(r["kind"], r["component"], r["package"], r["intended"], r["actual"]) for r in rows} == {
        ("pin", "nvidia-driver", "nvidia-open-580", NEW, OLD), ("pin", "nvidia-driver", "nvidia-smi", NEW, OLD)}
    assert all("re-run" in r["fix"] for r in rows)


def test_node_drift_hold_missing_and_stack():
    rows = kd.node_drift("c1", record("c1", held=[n for n in HELD if n != "libnccl2"]), "bbbbbbbbbbbb")
    kinds = {(r["kind"], r["package"]) for r in rows}
    assert ("hold", "libnccl2") in kinds and ("stack", None) in kinds
    stack = next(r for r in rows if r["kind"] == "stack")
    assert stack["intended"] == "bbbbbbbbbbbb" and stack["actual"] == "aaaaaaaaaaaa"
    gone = dict(record("c1"))
    gone["components"] = {"cuda": {"packages": [{"name": "libnccl2", "spec": "libnccl2=2.28.7-1+cuda13.0",
                                                 "pinned": "2.28.7-1+cuda13.0", "installed": None, "held": False}]}}
    assert [(r["kind"], r["actual"]) for r in kd.node_drift("c1", gone)] == [("pin", "not installed")]


def test_clean_cluster_is_clean_and_exit_table_says_so():
    recs = {h: record(h) for h in ("c1", "c2", "c3")}
    rep = kd.report(recs, {h: "aaaaaaaaaaaa" for h in recs}, {}, "r1")
    assert rep["status"] == "clean" and rep["rows"] == [] and rep["counts"] == {"clean": 3, "drift": 0, "unknown": 0}
    assert rep["table"] == ["drift gate: CLEAN -- 3 clean, 0 drifted, 0 without a record"]


def test_one_hand_changed_node_is_named_with_component_intended_actual():
    recs = {"c1": record("c1"), "c2": record("c2", installed=OLD), "c3": record("c3")}
    rep = kd.report(recs, {h: "aaaaaaaaaaaa" for h in recs}, {h: "gpu" for h in recs}, "r2")
    assert rep["status"] == "drift"
    assert {h for h, n in rep["nodes"].items() if n["status"] == "drift"} == {"c2"}
    pin = [r for r in rep["rows"] if r["kind"] == "pin"]
    assert {(r["node"], r["package"], r["intended"], r["actual"]) for r in pin} == {
        ("c2", "nvidia-open-580", NEW, OLD), ("c2", "nvidia-smi", NEW, OLD)}
    # the running driver differs from the partition's majority; the pinned packages are not named twice
    peers = [r for r in rep["rows"] if r["kind"] == "peers"]
    assert [(r["node"], r["component"], r["actual"]) for r in peers] == [("c2", "driver", "580.95.05")]
    assert "580.173.02 (partition gpu)" in peers[0]["intended"]
    assert any(line.startswith("c2") and "nvidia-open-580" in line and NEW in line and OLD in line
               for line in rep["table"])
    assert any("c2 nvidia-driver nvidia-open-580: intended 580.173.02-1, actual 580.95.05-1 (pin)" == line
               for line in rep["lines"])


def test_peers_are_compared_within_a_partition_only():
    recs = {"a1": record("a1"), "a2": record("a2"), "b1": record("b1", driver=OLD), "b2": record("b2", driver=OLD)}
    parts = {"a1": "a", "a2": "a", "b1": "b", "b2": "b"}
    assert kd.report(recs, {}, parts)["status"] == "clean"
    assert kd.report(recs, {}, {})["status"] == "drift"  # one partition: a tie, every node named
    tie = kd.report(recs, {}, {})
    assert {r["node"] for r in tie["rows"]} == {"a1", "a2", "b1", "b2"}
    assert all("no majority" in r["intended"] for r in tie["rows"])


def test_a_node_without_a_record_is_never_clean():
    rep = kd.report({"c1": record("c1"), "c2": None})
    assert rep["status"] == "incomplete" and rep["nodes"]["c2"]["status"] == "unknown"
    assert rep["rows"][0]["kind"] == "record" and rep["rows"][0]["node"] == "c2"
    with pytest.raises(kd.DriftError, match="no nodes"):
        kd.report({})
    with pytest.raises(kd.DriftError, match="c9.*not a kiln.as-built/v1"):
        kd.report({"c9": {"schema": "x"}})


def test_prometheus_per_node_and_escaped():
    recs = {"c1": record("c1"), "c2": record("c2", installed=OLD), "c3": None}
    rep = kd.report(recs)
    text = kd.prometheus(rep, timestamp=1700000000)
    assert 'kiln_drift_node{node="c1"' in text and text.count("kiln_drift_node{") == 3
    assert 'node="c3",fingerprint=""} NaN' in text
    assert 'kiln_drift{node="c2",kind="pin",component="nvidia-driver",package="nvidia-open-580",' in text
    assert "kiln_drift_last_run_timestamp_seconds 1700000000" in text
    mine = kd.prometheus(rep, node="c1")
    assert 'node="c2"' not in mine and 'kiln_drift_node{node="c1"' in mine and mine.endswith("\n")
    weird = {"rows": [{"node": 'x"y\\z\n', "kind": "pin", "component": "c", "package": None, "intended": "1",
                       "actual": "2"}], "nodes": {}}
    assert 'node="x\\"y\\\\z\\n"' in kd.prometheus(weird)


def test_mixed_versions():
    vers = {"a": {"driver": "580.95.05", "nccl": "2.28.7"}, "b": {"driver": "580.173.02", "nccl": "2.28.7"},
            "c": {"driver": "580.95.05", "nccl": "2.28.7"}}
    mixed = kd.mixed_versions(vers, ["a", "b", "c"])
    assert mixed == [{"component": "driver", "versions": {"580.173.02": ["b"], "580.95.05": ["a", "c"]}}]
    assert kd.mixed_versions(vers, ["a", "c"]) == []
    # a member with no versions at all is unknown, which differs
    assert kd.mixed_versions(vers, ["a", "zz"])[0]["versions"]["unknown"] == ["zz"]
    assert kd.mixed_text(mixed) == "driver 580.173.02 on b; 580.95.05 on a, c"


_version = st.sampled_from(["580.95.05-1", "580.173.02-1", "570.195.03-1"])


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["n1", "n2", "n3", "n4"]),
                       st.one_of(st.none(), st.tuples(_version, _version)), min_size=1))
def test_report_properties(spec):
    """Clean only when every node has a record and is at its pins; every row names node, component, intended, actual."""
    recs = {h: None if v is None else record(h, driver=v[0], installed=v[1]) for h, v in spec.items()}
    rep = kd.report(recs, partitions={h: "p" for h in recs})
    at_pins = all(v is not None and v[0] == v[1] for v in spec.values())
    same = len({v[1] for v in spec.values() if v is not None}) <= 1
    assert (rep["status"] == "clean") == (at_pins and same)
    if any(v is None for v in spec.values()):
        assert rep["status"] != "clean"
    for row in rep["rows"]:
        assert row["node"] in spec and row["component"] and row["intended"] is not None and row["actual"] is not None
    for h, v in spec.items():
        if v is not None and v[0] != v[1]:
            assert rep["nodes"][h]["status"] == "drift"
    prom = kd.prometheus(rep)
    assert prom.count("kiln_drift{") == len(rep["rows"])


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=6), st.one_of(
    st.none(), st.integers(), st.floats(), st.text(max_size=8), st.dictionaries(
        st.sampled_from(["driver", "nccl", "doca"]),
        st.one_of(st.none(), st.text(max_size=6), st.floats(), st.booleans()))), max_size=5))
def test_mixed_versions_never_raises_and_partitions_the_members(versions):
    members = list(versions)
    for entry in kd.mixed_versions(versions, members):
        named = sorted(n for ns in entry["versions"].values() for n in ns)
        assert named == sorted(set(members)) and len(entry["versions"]) > 1


# --------------------------------------------------------------------------- the burn-in


def _stack(rec: dict, rows: list | None = None) -> dict:
    return {"versions": rec["versions"], "as_built": rec["fingerprint"], "drift": rows or []}


def _cpu_nodes(stacks: dict) -> dict:
    tools = {"kiln-cpu-allreduce": "/usr/local/bin/kiln-cpu-allreduce", "mpirun": "/usr/bin/mpirun",
             "iperf3": "/usr/bin/iperf3", "required": ["kiln-cpu-allreduce", "mpirun", "iperf3"]}
    return {n: {"tools": tools, "kiln_gpu": {"pci_gpu_count": 0}, "nccl": {"ran": False}, "stack": s}
            for n, s in stacks.items()}


def _fabric(members: list) -> list:
    text = (FIX / "derived-kiln-cpu-engine-3node-example.txt").read_text()
    return [{"id": "nccl.fabric.all_reduce", "ran": True, "nodes": members, "text": text, "rc": 0, "sku": "cpu"}]


def test_burnin_refuses_pass_for_a_fabric_test_across_mixed_versions(tmp_path):
    recs = {"c1": record("c1"), "c2": record("c2", driver=OLD), "c3": record("c3")}
    nodes = _cpu_nodes({h: _stack(r) for h, r in recs.items()})
    same = kiln_data.assemble(_cpu_nodes({h: _stack(record(h)) for h in recs}), _fabric(list(recs)), mode="quick")
    assert same["fabric"][0]["status"] == "PASS" and "mixed_versions" not in same["fabric"][0]
    assert {n: r["status"] for n, r in same["nodes"].items()} == {"c1": "PASS", "c2": "PASS", "c3": "PASS"}
    out = kiln_data.assemble(nodes, _fabric(list(recs)), mode="quick")
    fab = out["fabric"][0]
    assert fab["status"] == "INCOMPLETE" and "driver 580.173.02 on c1, c3; 580.95.05 on c2" in fab["detail"]
    assert "kiln_burnin_allow_mixed_versions" in fab["detail"]
    assert out["nodes"]["c2"]["status"] == "WARN" and out["nodes"]["c1"]["status"] == "PASS"
    check = next(c for c in out["nodes"]["c2"]["checks"] if c["id"] == "stack.versions")
    assert "driver 580.95.05 (other nodes: 580.173.02)" in check["detail"] and check["as_built"] == recs["c2"]["fingerprint"]
    allowed = kiln_data.assemble(nodes, _fabric(list(recs)), mode="quick", allow_mixed=True)
    assert allowed["fabric"][0]["status"] == "PASS" and "mixed versions allowed" in allowed["fabric"][0]["detail"]
    assert allowed["nodes"]["c2"]["status"] == "PASS"
    # a fabric test over the equal nodes only is judged as usual
    assert kiln_data.assemble(nodes, _fabric(["c1", "c3"]), mode="quick")["fabric"][0]["status"] == "PASS"


def test_burnin_warns_for_packages_not_at_kilns_pins_even_when_mixed_is_allowed():
    rec = record("c2", installed=OLD)
    rows = kd.node_drift("c2", rec)
    out = kiln_data.assemble(_cpu_nodes({"c2": _stack(rec, rows)}), [], mode="quick", allow_mixed=True)
    check = next(c for c in out["nodes"]["c2"]["checks"] if c["id"] == "stack.versions")
    assert check["status"] == "WARN" and f"nvidia-open-580: {OLD} (kiln intends {NEW})" in check["detail"]


# --------------------------------------------------------------------------- the pins records (kiln_pkgdb)


def test_pins_record_round_trip_and_refusals():
    text = kiln_pkgdb.pins_record("cuda", ["libnccl2=2.28.7-1+cuda13.0", "cuda-toolkit-13-0=13.0.2-1"])
    assert text == kiln_pkgdb.pins_record("cuda", ["cuda-toolkit-13-0=13.0.2-1", "libnccl2=2.28.7-1+cuda13.0"])
    assert kiln_pkgdb.parse_pins("/p/cuda.json", text) == (
        "cuda", ["cuda-toolkit-13-0=13.0.2-1", "libnccl2=2.28.7-1+cuda13.0"])
    with pytest.raises(kiln_pkgdb.PkgError, match="/p/x.json cannot be read"):
        kiln_pkgdb.parse_pins("/p/x.json", "{truncated")
    for bad in ({"owner": "x", "packages": [1.5]}, {"owner": "Bad Owner", "packages": []}, ["cuda"],
                {"owner": "x", "packages": "libnccl2=1"}):
        with pytest.raises(kiln_pkgdb.PkgError, match="/p/x.json is not"):
            kiln_pkgdb.parse_pins("/p/x.json", json.dumps(bad))


def test_filters_refuse_what_is_not_their_input():
    from ansible.errors import AnsibleFilterError

    from kiln.packages import drift as kf  # the drift filters (registry: filter_plugins/kiln_drift_filters.py)

    with pytest.raises(AnsibleFilterError, match="c1.*pkg_mgr apt or dnf"):
        kf.kiln_as_built({"packages": {}, "held": [], "pins": {}}, "c1")
    with pytest.raises(AnsibleFilterError, match="timestamp 'soon'"):
        kf.kiln_drift_prom(kd.report({"c1": record("c1")}), None, "soon")
    with pytest.raises(AnsibleFilterError, match="expected a kiln_drift_report"):
        kf.kiln_drift_prom("text")
    rec = kf.kiln_as_built({"packages": db(), "held": HELD, "pins": pins(), "pkg_mgr": "apt"}, "c1")
    assert rec["components"]["cuda"]["packages"][0]["installed"] == "2.28.7-1+cuda13.0"



# --------------------------------------------------------------------------- pins: never clean without evidence

import yaml  # noqa: E402

SETTINGS = yaml.safe_load((REPO / "roles" / "drift_settings" / "defaults" / "main.yml").read_text())
OWNERS = SETTINGS["kiln_drift_pin_owners"]
# what kiln_packages gives for the upgrade scenario's stack (debian-12, no ofed, no container engine)
COMPONENTS = ["driver", "driver_companions", "cuda", "cudnn", "nccl", "container_toolkit", "dcgm", "dcgm_exporter",
              "slurmctld", "slurmd", "munge", "pmix", "openmpi", "openmpi_dev", "mpi4py", "node_exporter"]
GPU_OWNERS = ["cuda", "dcgm", "munge", "node-exporter", "nvidia-container-toolkit", "nvidia-driver", "slurm-compute"]


def full_pins(driver: str = NEW) -> dict:
    out = pins(driver)
    del out["rdma-stack"]  # no ofed in this stack
    out.update({"nvidia-container-toolkit": ["nvidia-container-toolkit=1.19.1-1"],
                "dcgm": ["datacenter-gpu-manager-4-cuda13=1:4.6.0-1"], "node-exporter": [],
                "munge": ["munge=0.5.15-2+deb12u1"], "slurm-compute": ["slurmd=22.05.8-4+deb12u3"]})
    return out


def full_db() -> dict:
    out = db()
    out.update({"nvidia-container-toolkit": ["1.19.1-1"], "datacenter-gpu-manager-4-cuda13": ["1:4.6.0-1"],
                "munge": ["0.5.15-2+deb12u1"], "slurmd": ["22.05.8-4+deb12u3"]})
    return out


FULL_HELD = HELD + ["nvidia-container-toolkit", "datacenter-gpu-manager-4-cuda13", "munge", "slurmd"]


def gpu_record(host: str, pinned: dict | None = None, packages: dict | None = None, held=FULL_HELD,
               pins_dir_present: bool = True) -> dict:
    return kd.as_built(host, "apt", full_db() if packages is None else packages, held,
                       full_pins() if pinned is None else pinned, kernel="6.1.0-28-amd64", os_id="debian-12",
                       gpu={"driver_version": "580.173.02"}, pins_dir="/var/lib/kiln/pins",
                       pins_dir_present=pins_dir_present)


def test_expected_owners_follow_the_groups_and_the_stack():
    assert kd.expected_owners(OWNERS, ["gpu_nodes", "slurm_compute", "emulated_gpu"], COMPONENTS) == GPU_OWNERS
    assert kd.expected_owners(OWNERS, ["slurm_controller"], COMPONENTS) == ["munge", "slurm-controller"]
    assert kd.expected_owners(OWNERS, ["gpu_nodes"], COMPONENTS + ["ofed", "container_engine"]) == [
        "cuda", "dcgm", "docker-engine", "node-exporter", "nvidia-container-toolkit", "nvidia-driver", "rdma-stack"]
    assert kd.expected_owners(OWNERS, ["login"], COMPONENTS) == []
    assert kd.expected_owners(OWNERS, ["gpu_nodes"], {}) == []  # no stack: nothing the stack says
    assert kd.expected_owners({"x": {"groups": ["g"]}}, ["g"], []) == ["x"]  # no components: always
    for owners, groups, comps, match in (
            (["nvidia-driver"], [], [], "kiln_drift_pin_owners must map"),
            ({"x": "gpu_nodes"}, [], [], "kiln_drift_pin_owners.x must be"),
            ({"x": {"groups": "gpu_nodes"}}, [], [], "kiln_drift_pin_owners.x.groups must be a list"),
            (OWNERS, "gpu_nodes", [], "the node's groups must be a list"),
            (OWNERS, [], [1], "the stack's components must be a list")):
        with pytest.raises(kd.DriftError, match=match):
            kd.expected_owners(owners, groups, comps)


def test_the_default_owners_are_the_roles_owners_on_the_groups_of_their_plays():
    """kiln_drift_pin_owners mirrors site.yml: each owner is a role's <role>_pinned owner, on its play's groups."""
    role_of = {}
    for vars_file in (REPO / "roles").glob("*/vars/main.yml"):
        data = yaml.safe_load(vars_file.read_text()) or {}
        role = vars_file.parent.parent.name
        pinned = data.get(f"{role}_pinned")
        if isinstance(pinned, dict):
            role_of[pinned["owner"]] = role
    hosts_of: dict[str, set] = {}
    for book in ("gpu", "fabric", "slurm", "containers"):
        for play in yaml.safe_load((REPO / "playbooks" / f"{book}.yml").read_text()):
            text = yaml.safe_dump(play)
            for imported in re.findall(r"import_tasks: (tasks/\S+\.yml)", text):
                text += (REPO / "playbooks" / imported).read_text()
            for role in re.findall(r"(?:name|role): ([a-z_]+)\n", text):
                hosts_of.setdefault(role, set()).update(play["hosts"].split(":"))
    for owner, rule in OWNERS.items():
        assert owner in role_of, f"{owner}: no role publishes it as <role>_pinned.owner"
        assert set(rule["groups"]) == hosts_of[role_of[owner]], (owner, role_of[owner])


def test_a_node_without_pin_records_is_drift_even_with_a_package_removed_and_unheld():
    """Issue 31 #10: the pins directory gone, a pinned package removed and unheld -- the gate said clean."""
    packages = {k: v for k, v in full_db().items() if k != "libnccl2"}
    held = [n for n in FULL_HELD if n != "libnccl2"]
    bare = gpu_record("c2", pinned={}, packages=packages, held=held, pins_dir_present=False)
    recs = {"c1": gpu_record("c1"), "c2": bare, "c3": gpu_record("c3")}
    expected = {h: GPU_OWNERS for h in recs}
    rep = kd.report(recs, {}, {h: "p" for h in recs}, "r", expected)
    assert rep["status"] == "drift" and rep["nodes"]["c2"]["status"] == "drift"
    assert {h for h, n in rep["nodes"].items() if n["status"] == "clean"} == {"c1", "c3"}
    pins_rows = [r for r in rep["rows"] if r["kind"] == "pins"]
    assert sorted(r["component"] for r in pins_rows) == GPU_OWNERS  # each owner once, no peer duplicate
    assert {r["actual"] for r in pins_rows} == {"none (/var/lib/kiln/pins is missing)"}
    assert all(r["node"] == "c2" and "re-run the play that owns" in r["fix"] for r in pins_rows)
    assert "c2 nvidia-driver: intended the pins of nvidia-driver, actual none (/var/lib/kiln/pins is missing) (pins)" \
        in rep["lines"]
    assert 'kiln_drift{node="c2",kind="pins",component="nvidia-driver"' in kd.prometheus(rep)
    # without expectations (an old caller) the node is still not clean: the peers' owners, then no pins at all
    alone = kd.report(recs, {}, {h: "p" for h in recs})
    assert alone["nodes"]["c2"]["status"] == "drift"
    assert {r["component"] for r in alone["rows"] if r["kind"] == "pins"} == set(GPU_OWNERS)
    single = kd.report({"c2": bare})
    assert single["status"] == "drift"
    assert [(r["kind"], r["component"], r["actual"]) for r in single["rows"]] == [
        ("pins", "pins", "none (/var/lib/kiln/pins is missing)")]
    empty_dir = kd.report({"c2": gpu_record("c2", pinned={}, pins_dir_present=True)})
    assert empty_dir["rows"][0]["actual"] == "none in /var/lib/kiln/pins"


def test_with_pins_a_removed_package_is_pin_drift_and_an_unheld_one_hold_drift():
    packages = {k: v for k, v in full_db().items() if k != "libnccl2"}
    held = [n for n in FULL_HELD if n not in ("libnccl2", "munge")]
    rec = gpu_record("c2", packages=packages, held=held)
    rows = kd.node_drift("c2", rec, None, GPU_OWNERS)
    assert {(r["kind"], r["component"], r["package"], r["actual"]) for r in rows} == {
        ("pin", "cuda", "libnccl2", "not installed"), ("hold", "munge", "munge", "not held")}
    assert kd.report({"c2": rec}, expected={"c2": GPU_OWNERS})["status"] == "drift"


def test_one_missing_owner_is_named_by_the_expectation_and_by_the_peers():
    partial = {k: v for k, v in full_pins().items() if k != "dcgm"}
    recs = {"c1": gpu_record("c1"), "c2": gpu_record("c2", pinned=partial), "c3": gpu_record("c3")}
    rows = kd.node_drift("c2", recs["c2"], None, GPU_OWNERS)
    assert [(r["kind"], r["component"], r["actual"]) for r in rows] == [("pins", "dcgm", "none in /var/lib/kiln/pins")]
    assert kd.node_drift("c2", recs["c2"]) == []  # the burn-in's view (no expectations): recorded pins only
    by_peers = kd.report(recs, partitions={h: "p" for h in recs})
    row = next(r for r in by_peers["rows"] if r["kind"] == "pins")
    assert (row["node"], row["component"]) == ("c2", "dcgm") and "as on 2 of 3 nodes (partition p)" in row["intended"]
    # another partition's owners are not expected
    assert kd.report(recs, partitions={"c1": "a", "c2": "b", "c3": "a"})["status"] == "clean"
    assert kd.report({h: gpu_record(h) for h in recs}, expected={h: GPU_OWNERS for h in recs})["status"] == "clean"


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["n1", "n2", "n3"]), st.sets(st.sampled_from(GPU_OWNERS)), min_size=1))
def test_report_is_never_clean_while_an_expected_owner_has_no_pins(dropped):
    recs = {h: gpu_record(h, pinned={o: p for o, p in full_pins().items() if o not in gone})
            for h, gone in dropped.items()}
    # one partition per node: the expectations alone (the peers' rule is tested above)
    rep = kd.report(recs, partitions={h: h for h in recs}, expected={h: GPU_OWNERS for h in recs})
    for host, gone in dropped.items():
        assert (rep["nodes"][host]["status"] == "clean") == (not gone)
        assert {r["component"] for r in rep["rows"] if r["node"] == host and r["kind"] == "pins"} == gone
    assert (rep["status"] == "clean") == (not any(dropped.values()))


def test_drift_filters_pass_the_expectations_and_refuse_bad_input_in_one_line():
    from ansible.errors import AnsibleFilterError

    from kiln.packages import drift as kf  # the drift filters (registry: filter_plugins/kiln_drift_filters.py)

    assert kf.kiln_drift_expected_pins(OWNERS, ["slurm_controller"], {"munge": [], "slurmctld": []}) == [
        "munge", "slurm-controller"]
    bare = gpu_record("c2", pinned={}, pins_dir_present=False)
    rep = kf.kiln_drift_report({"c2": bare, "c1": gpu_record("c1")}, None, None, "r", {"c2": ["cuda"]})
    assert {(r["node"], r["component"]) for r in rep["rows"] if r["kind"] == "pins"} >= {("c2", "cuda")}
    assert kf.kiln_node_drift(bare, "c2", None, ["cuda"])[0]["kind"] == "pins"
    read = {"packages": {}, "held": [], "pins": {}, "pkg_mgr": "apt", "pins_dir": "/p", "pins_dir_present": False}
    rec = kf.kiln_as_built(read, "c2")
    assert rec["pins_dir"] == "/p" and rec["pins_dir_present"] is False
    for args, match in ((([1],), "kiln_drift_report: the input"), (({"c": None}, "x"), "kiln_drift_report: intended"),
                        (({"c": None}, None, None, "", ["c"]), "kiln_drift_report: expected")):
        with pytest.raises(AnsibleFilterError, match=match) as err:
            kf.kiln_drift_report(*args)
        assert "\n" not in str(err.value)
    with pytest.raises(AnsibleFilterError, match="kiln_drift_expected_pins: kiln_drift_pin_owners must map"):
        kf.kiln_drift_expected_pins(None, [])
