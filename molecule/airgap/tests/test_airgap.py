"""Verify the air-gapped converge: the node had no way out, and everything came from the site mirror.

What is real: podman's internal network (no gateway), apt/dpkg and its signature checks, nginx's access
log, the bundle's manifest and signature, Debian's real packages. What is a fixture: NVIDIA's
repositories (the signed test-bed fixture, mirrored like the real ones) and the GPUs.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "molecule"))
sys.path.insert(0, str(ROOT / "module_utils"))
from kiln_testinfra import podman_hosts  # noqa: E402

# the Debian GPU nodes (the EL node: test_airgap_el9.py)
testinfra_hosts = podman_hosts("slurm_compute")
MIRROR_HOST = "kiln-airgap-mirror"
OUT = ROOT / ".cache" / "airgap-mirror"


def _latest() -> dict:
    return json.loads((OUT / "bundles" / "latest.json").read_text())


def _manifest() -> dict:
    return json.loads(Path(_latest()["bundle"][: -len(".tar")] + ".manifest.json").read_text())


def _contents() -> dict:
    return json.loads((OUT / "work" / "contents.json").read_text())


def _podman(host: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", "exec", host, *argv], capture_output=True, text=True, timeout=60, check=False)


def test_no_route_out(host):
    routes = host.check_output("ip -4 route")
    assert "default" not in routes, routes
    # the archive the controller downloaded from is out of reach
    up = urllib.parse.urlsplit(os.environ.get("KILN_DEBIAN_MIRROR", "http://invalid.example/"))
    addr = socket.gethostbyname(up.hostname)
    probe = host.run(f"timeout 10 python3 -c 'import socket; socket.create_connection((\"{addr}\", 80), 5)'")
    assert probe.rc != 0, f"the node reached {addr}:80"


def test_apt_sources_name_only_the_mirror(host):
    text = host.check_output("cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list "
                             "2>/dev/null || true")
    urls = re.findall(r"^(?:deb\s+(?:\[[^]]*\]\s+)?(\S+)|URIs:\s*(\S+))", text, re.MULTILINE)
    found = [a or b for a, b in urls]
    assert found, text
    assert all(urllib.parse.urlsplit(u).hostname == MIRROR_HOST for u in found), found
    assert not host.file("/etc/apt/sources.list.d/debian.sources").exists
    update = host.run("apt-get update -q")
    assert update.rc == 0 and "Err:" not in update.stdout and "W:" not in update.stderr, update.stdout + update.stderr


def test_stack_installed_at_exact_versions_and_held(host):
    pins = {"nvidia-open-580": "580.95.05-1", "cuda-toolkit-13-0": "13.0.2-1", "libnccl2": "2.28.7-1+cuda13.0",
            "nvidia-container-toolkit": "1.19.1-1", "datacenter-gpu-manager-4-cuda13": "1:4.6.0-1"}
    held = set(host.check_output("apt-mark showhold").split())
    for name, version in pins.items():
        assert host.check_output(f"dpkg-query -W -f '${{Version}}' {name}") == version, name
        assert name in held, name


def _served() -> set[tuple[str, str]]:
    """(name, version) of every package file the bundle carries: the closure, and release files (Enroot's)."""
    out = {(p["name"], p["version"]) for p in _contents()["packages"]}
    for f in _contents()["files"]:
        name = f["serve"].rsplit("/", 1)[-1]
        if name.endswith(".deb"):
            pkg, version, _ = name[:-4].split("_")
            out.add((pkg, version))
    return out


def test_every_installed_package_came_from_the_mirror(host):
    """Each package apt installed (its history) is in the bundle at that exact version."""
    served = _served()
    history = host.check_output("cat /var/log/apt/history.log")
    installed = re.findall(r"([a-z0-9][a-z0-9+.-]*):[a-z0-9]+ \(([^,)]+)", "\n".join(
        line for line in history.splitlines() if line.startswith(("Install:", "Upgrade:"))))
    assert installed, "apt installed nothing?"
    missing = [f"{n}={v}" for n, v in installed if (n, v) not in served]
    assert not missing, missing


def test_mirror_log_shows_the_node_fetching():
    log = _podman(MIRROR_HOST, "cat", "/var/log/nginx/kiln-mirror.access.log")
    assert log.returncode == 0, log.stderr
    node_ip = _podman("kiln-airgap-gpu1", "hostname", "-I").stdout.split()[0]
    lines = [line for line in log.stdout.splitlines() if line.startswith(node_ip + " ")]
    paths = " ".join(lines)
    for path in ("/distribution/debian-12/pool/", "/cuda/debian12/x86_64/", "/files/enroot/3.5.0/", "/files/pyxis/0.20.0/"):
        assert path in paths, (path, lines[:20])
    assert all('" 200 ' in line or '" 304 ' in line or '" 404 ' in line for line in lines)


def test_bundle_holds_exactly_the_closure_of_what_site_yml_installs():
    """The manifest's packages are exactly apt's closure of the plan's requests, and every request is in it."""
    from kiln_compat_engine import inventory, mirror, plan  # noqa: PLC0415

    scenario = yaml.safe_load((Path(__file__).resolve().parents[1] / "molecule.yml").read_text())
    stack = scenario["provisioner"]["inventory"]["group_vars"]["cluster"]["kiln_stack"]
    contents = _contents()
    requests = set(contents["requests"]["debian-12"])
    # every pinned package of the stack is requested, and so is each distribution package the roles install
    stacks = inventory.kiln_stacks_by_host({"n": {"kiln_stack": stack}}, ["n"])
    pk = plan.kiln_plan(stacks, {"gpu_nodes": ["n"]})["groups"]["gpu_nodes"]["stacks"][0]["packages"]
    pinned = {p for pkgs in pk.values() for p in pkgs}
    assert pinned <= requests, pinned - requests
    distro = {n for names in mirror.mirror_data()["distro_packages"]["debian"].values() for n in names}
    # roles/pyxis builds against Slurm's headers at the installed Slurm's exact build
    client = next(p for p in pinned if p.startswith("slurm-client="))
    headers = {"libslurm-dev=" + client.split("=", 1)[1]} if stack.get("pyxis") else set()
    assert requests == pinned | distro | headers, requests ^ (pinned | distro | headers)
    served = {(p["name"], p["version"]) for p in contents["packages"]}
    for req in pinned:
        name, _, version = req.partition("=")
        assert not version or (name, version) in served, req
    # the bundle carries exactly those package files, the release files, plus indexes, signatures and the site key
    files = {f["serve"] for f in contents["files"]}
    assert {f["path"] for f in _manifest()["files"] if f["path"].startswith("files/")} == files
    assert {f["tool"] for f in contents["files"]} == {"enroot", "pyxis"}
    debs = {f["path"] for f in _manifest()["files"] if f["path"].endswith(".deb") and f["path"] not in files}
    apt_packages = [p for p in contents["packages"] if p["filename"].endswith(".deb")]
    closure = {p["serve"] + "/" for p in apt_packages}
    assert len(debs) == len(apt_packages), (len(debs), len(apt_packages))
    assert all(any(d.startswith(c) for c in closure) for d in debs)
    others = {f["path"] for f in _manifest()["files"]} - debs - files
    rpms = {f["path"] for f in _manifest()["files"] if f["path"].endswith(".rpm")}
    assert rpms == {p["path"] for p in contents["packages"] if p["filename"].endswith(".rpm")}
    others -= rpms
    assert all(re.search(r"(Packages(\.gz|\.xz)?|Release(\.gpg)?|InRelease|kiln-mirror\.asc|/repodata/[^/]+)$", o)
               for o in others), others


@pytest.mark.parametrize("case,reason", [
    ("one-byte", r"\.deb: sha256 [0-9a-f]+ differs"),
    ("missing-file", "missing from the archive"),
    ("foreign-signature", "not by the pinned site key"),
    ("other-stack", "built for other stacks"),
])
def test_bad_bundles_are_refused_by_the_tool_too(case, reason):
    """tools/kiln-bundle (the check an operator runs by hand) refuses each bad bundle for its own fault."""
    bundle = next((OUT / "bad" / case).glob("*.tar"))
    stacks = [s["fingerprint"] for s in _manifest()["stacks"]] + (["0123456789ab"] if case == "other-stack" else [])
    stack_file = OUT / "bad" / case / "expected-stacks.json"
    stack_file.write_text(json.dumps(stacks))
    res = subprocess.run([str(ROOT / "tools" / "kiln-bundle"), "verify", "--bundle", str(bundle),
                          "--key-file", str(OUT / "tree" / "kiln-mirror.asc"),
                          "--fingerprint", os.environ["KILN_SITE_FPR"], "--stacks", str(stack_file)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert re.search(reason, res.stdout + res.stderr), res.stdout + res.stderr


def test_a_job_runs_on_the_air_gapped_nodes():
    """Slurm, installed from the mirror, runs a job on both GPU nodes (srun from the controller)."""
    out = ""
    for _ in range(30):
        res = _podman("kiln-airgap-ctl", "timeout", "30", "srun", "-N2", "-w", "kiln-airgap-gpu[1-2]", "hostname")
        out = res.stdout
        if res.returncode == 0:
            break
        subprocess.run(["sleep", "2"], check=False)
    assert sorted(out.split()) == ["kiln-airgap-gpu1", "kiln-airgap-gpu2"], (out, res.stderr)


def _burnin_summary() -> dict:
    results = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "burnin-results"
    found = sorted(results.glob("*/summary.json"))
    assert len(found) == 1, found
    return json.loads(found[0].read_text())


def test_burn_in_passed_with_no_route_out():
    """site.yml's burn-in ran on the air-gapped nodes: pairs, the fabric all-reduce and every node PASS."""
    summary = _burnin_summary()
    assert summary["overall"]["status"] == "PASS", summary["overall"]
    assert sorted(summary["nodes"]) == ["kiln-airgap-gpu1", "kiln-airgap-gpu2"]
    assert summary["actions"] == []
    assert summary["fabric"][0]["status"] == "PASS" and summary["fabric"][0]["value"] > 0
    for name, node in summary["nodes"].items():
        checks = {c["id"]: c["status"] for c in node["checks"]}
        assert node["status"] == "PASS", (name, checks)
        assert checks.get("nccl.pair.all_reduce") == "PASS", (name, checks)


def test_fabric_from_the_mirror_judged_by_the_burn_in(host):
    """Debian's inbox RDMA stack came from the mirror at its pinned build, and the burn-in judged every HCA."""
    for pkg in ("rdma-core", "ibverbs-utils", "infiniband-diags", "perftest"):
        assert pkg in host.check_output("apt-mark showhold").split(), pkg
    node = _burnin_summary()["nodes"][host.backend.get_hostname()]
    checks = {c["id"]: c for c in node["checks"]}
    for cid in ("fabric.facts", "fabric.ports", "fabric.rate", "fabric.counters", "fabric.gpudirect", "rdma.write_bw"):
        assert checks[cid]["status"] == "PASS", checks.get(cid)


def test_enroot_and_pyxis_from_the_mirrors_files(host):
    assert host.check_output("dpkg-query -W -f '${Version}' enroot") == "3.5.0-1"
    assert "enroot" in host.check_output("apt-mark showhold").split()
    assert host.file("/etc/slurm/plugstack.conf.d").exists or host.file("/etc/slurm/plugstack.conf").exists


# --- the EL 9 part (built in the side effect by playbooks/mirror.yml from tests/playbooks/mirror_el9) ---------

EL_OUT = ROOT / ".cache" / "mirror-el9"


def _el_consumer(tmp: Path, key: Path) -> tuple[list[str], dict]:
    """dnf in an empty installroot whose only repositories are the served EL tree (file://), trusting only *key*:
    the argv prefix and the build's contents."""
    from kiln.mirror import dnf  # noqa: PLC0415

    tree = EL_OUT / "tree"
    contents = json.loads((EL_OUT / "work" / "contents.json").read_text())
    served = sorted(p.parent.parent for p in tree.rglob("repodata/repomd.xml"))
    ups = [{"name": f"served{i}", "url": f"file://{d}"} for i, d in enumerate(served)]
    work = tmp / "work"
    for sub in ("repos.d", "cache", "persist", "log", "vars", "plugins"):
        (work / sub).mkdir(parents=True)
    (work / "dnf.conf").write_text("[main]\ngpgcheck=1\nrepo_gpgcheck=1\n")
    (work / "repos.d" / "mirror.repo").write_text(dnf.repo_file(ups, {u["name"]: str(key) for u in ups}))
    return dnf.dnf_argv(str(tmp / "root"), str(work), "9", "x86_64") + dnf.repo_enable_argv(ups), contents


def test_el9_mirror_serves_every_request_to_dnf_trusting_only_the_site_key(tmp_path):
    """dnf (module stream enabled, gpgcheck and repo_gpgcheck on, only the site key) resolves and downloads every
    request from the served tree; every rpm carries the site key's signature; nothing outside the manifest."""
    site_key = EL_OUT / "tree" / "kiln-mirror.asc"
    argv, contents = _el_consumer(tmp_path, site_key)
    requests = contents["requests"]["rhel-9"]
    streams = []
    for gz in (EL_OUT / "tree").rglob("repodata/*modules.yaml.gz"):
        for doc in yaml.safe_load_all(gzip.decompress(gz.read_bytes())):
            if doc and doc.get("document") == "modulemd":
                streams.append(f"{doc['data']['name']}:{doc['data']['stream']}")
    assert streams, "the served tree carries no module metadata"
    run = subprocess.run(argv + ["module", "enable", *sorted(set(streams))], capture_output=True, text=True,
                         timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    dest = tmp_path / "dl"
    run = subprocess.run(argv + ["download", "--resolve", "--alldeps", f"--destdir={dest}", *requests],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    got = sorted(p.name for p in dest.glob("*.rpm"))
    assert set(got) <= {p["filename"] for p in contents["packages"]}, set(got) - {p["filename"] for p in contents["packages"]}
    for req in ("nvidia-open-", "slurm-slurmd", "libnccl-", "chrony"):
        assert any(g.startswith(req) for g in got), (req, got)
    db = tmp_path / "rpmdb"
    subprocess.run(["rpmkeys", f"--dbpath={db}", "--import", str(site_key)], check=True, timeout=60)
    sig = subprocess.run(["rpmkeys", f"--dbpath={db}", "--checksig", *[str(dest / g) for g in got]],
                         capture_output=True, text=True, timeout=120, check=False)
    assert sig.returncode == 0 and sig.stdout.count("digests signatures OK") == len(got), sig.stdout


def test_el9_mirror_is_refused_with_any_other_key(tmp_path):
    """The same dnf with NVIDIA's (fixture) key instead of the site key refuses the served repositories."""
    argv, _ = _el_consumer(tmp_path, Path(os.environ["KILN_FIXTURE_REPO"]) / "key.asc")
    run = subprocess.run(argv + ["makecache"], capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode != 0, run.stdout
    assert "repomd.xml GPG signature verification error" in run.stderr, run.stderr
