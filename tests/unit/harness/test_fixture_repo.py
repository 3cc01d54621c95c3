"""The fixture of NVIDIA's repositories: real dpkg/apt formats, signed, names matching kiln_pkg."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kiln_paths import REPO as ROOT
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import fixture_repo  # noqa: E402

from kiln_compat_engine.packages import kiln_packages  # noqa: E402

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("dpkg-deb", "dpkg-scanpackages", "gpg", "gcc", "rpmbuild", "createrepo_c")),
    reason="needs dpkg-deb, dpkg-scanpackages, gpg, gcc, rpmbuild and createrepo_c (installed by tests/harness/testbed.sh)")


def synthetic_deb(cache: Path, package: str, version: str) -> Path:
    """A small stand-in for a Debian package a fixture package repacks (the unit stage runs before the
    test-bed image exists): the docker.io paths the manifest's include/exclude lists name, a conffile
    and maintainer scripts."""
    root = cache / f"src-{package}"
    for rel, text in (("usr/sbin/dockerd", "#!/bin/sh\necho dockerd\n"), ("usr/bin/docker", "#!/bin/sh\necho docker\n"),
                      ("lib/systemd/system/docker.service", "[Service]\nExecStart=/usr/sbin/dockerd\n"),
                      ("etc/default/docker", "# defaults\n"), ("usr/share/man/man1/docker.1.gz", "man"),
                      ("usr/share/bash-completion/completions/docker", "# completion\n"),
                      ("usr/bin/prometheus-node-exporter", "#!/bin/sh\necho node_exporter\n")):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
    (root / "DEBIAN").mkdir(exist_ok=True)
    (root / "DEBIAN" / "control").write_text(f"Package: {package}\nVersion: {version}\nArchitecture: amd64\n"
                                             f"Maintainer: x <x@invalid>\nDescription: stand-in\n")
    (root / "DEBIAN" / "conffiles").write_text("/etc/default/docker\n")
    (root / "DEBIAN" / "postinst").write_text("#!/bin/sh\nset -e\necho postinst-of-docker.io\n")
    (root / "DEBIAN" / "postinst").chmod(0o755)
    deb = cache / f"{package}_{version.split(':')[-1]}_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], check=True,
                   stdout=subprocess.DEVNULL)
    return deb


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    out = tmp_path_factory.mktemp("fixture") / "repo"
    cache = tmp_path_factory.mktemp("debs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fixture_repo, "fetch_deb", lambda package, version: synthetic_deb(cache, package, version))
        fixture_repo.build(out)
    return out


def packages_index(repo: Path, rel: str) -> dict[tuple[str, str], dict[str, str]]:
    out = {}
    for stanza in (repo / rel / "Packages").read_text().strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        out[(fields["Package"], fields["Version"])] = fields
    return out


def test_signed_and_verifiable(repo):
    fpr = (repo / "fingerprint.txt").read_text().strip()
    assert len(fpr) == 40
    for rel in ("compute/cuda/repos/debian12/x86_64", "libnvidia-container/stable/deb/amd64"):
        keyring = repo / "kr.gpg"
        subprocess.run(["gpg", "--batch", "--dearmor", "-o", str(keyring), "--yes", str(repo / "key.asc")], check=True)
        subprocess.run(["gpgv", "--keyring", str(keyring), str(repo / rel / "InRelease")], check=True,
                       capture_output=True)


def test_every_package_kiln_renders_for_the_test_stack_exists(repo):
    stack = {"os": "debian-12", "driver": "580.95.05", "cuda": "13.0.2", "cudnn": "9.17.1.4",
             "nccl": "2.28.7-1+cuda13.0", "container_toolkit": "1.20.0", "dcgm": "4.6.0",
             "dcgm_exporter": "4.6.0-4.8.3", "fabricmanager": "580.95.05"}
    index = {**packages_index(repo, "compute/cuda/repos/debian12/x86_64"),
             **packages_index(repo, "libnvidia-container/stable/deb/amd64")}
    for comp, specs in kiln_packages(stack).items():
        if comp not in ("driver", "driver_companions", "fabricmanager", "cuda", "cudnn", "nccl", "container_toolkit",
                        "dcgm", "dcgm_exporter"):
            continue  # distribution packages come from the Debian mirror, not the fixture repository
        for spec in specs:
            name, version = spec.split("=", 1)
            assert (name, version.split(":")[-1]) in {(n, v.split(":")[-1]) for n, v in index}, spec


def test_driver_module_carries_modinfo_version(repo, tmp_path):
    deb = next((repo / "compute/cuda/repos/debian12/x86_64").glob("nvidia-kernel-open-dkms_580.173.02-1_amd64.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    ko = tmp_path / "usr/src/nvidia-580.173.02/nvidia.ko"
    assert ko.read_bytes()[:4] == b"\x7fELF"
    assert b"version=580.173.02" in ko.read_bytes()


def test_el_repositories_signed_by_their_signers(repo):
    # NVIDIA's rhel9 repositories: the fixture's key; the distribution stand-in: a key of its own
    root_key = (repo / "key.asc").read_bytes()
    assert (repo / "compute/cuda/repos/rhel9/x86_64/key.asc").read_bytes() == root_key
    assert (repo / "libnvidia-container/stable/rpm/x86_64/key.asc").read_bytes() == root_key
    assert (repo / "el9/base/x86_64/key.asc").read_bytes() not in (b"", root_key)


def test_cuda_repository_published_for_ubuntu_too(repo):
    # NVIDIA's ubuntu2204/ubuntu2404 directories carry the same names and versions as debian12
    base = repo / "compute/cuda/repos/debian12/x86_64"
    for distro in ("ubuntu2204", "ubuntu2404"):
        other = repo / f"compute/cuda/repos/{distro}/x86_64"
        assert sorted(p.name for p in other.iterdir()) == sorted(p.name for p in base.iterdir())
        for name in ("InRelease", "Packages", "nvidia-open-590_590.48.01-1_amd64.deb"):
            assert (other / name).read_bytes() == (base / name).read_bytes()


def test_manifest_driver_releases_for_the_upgrade_and_the_branch_change():
    manifest = yaml.safe_load(fixture_repo.MANIFEST.read_text())
    branches = {rel["branch"]: rel["versions"] for rel in manifest["driver_branches"]}
    assert len(branches["580"]) == 2 and len(branches["590"]) == 1
    names = {spec["name"] for spec in fixture_repo.package_specs(manifest)}
    assert {"nvidia-open-580", "nvidia-open-590", "nvidia-fabricmanager-590", "libnvidia-nscq-590"} <= names


# ---- DOCA-Host repositories (sources: tests/fixtures/nvidia-repo/DOCA.md)

DEBIAN12_RDMA_CORE = "44.0-2"   # rdma-core family version in Debian 12's archive
FROM_DEBIAN_ARCHIVE = {"mstflint"}  # doca-ofed Depends satisfied by Debian's archive, by name
RDMA_FAMILY = ("rdma-core", "ibverbs-providers", "libibverbs1", "ibverbs-utils", "librdmacm1", "rdmacm-utils",
               "libibumad3", "libibmad5", "libibnetdisc5", "infiniband-diags", "ibacm", "srptools")


def doca_manifest() -> dict:
    return yaml.safe_load(fixture_repo.MANIFEST.read_text())


def doca_dirs() -> dict[str, str]:
    return {k: v["path"] for k, v in fixture_repo.repo_layout(doca_manifest()).items() if k.startswith("doca@")}


def version_ok(have: str, op: str, want: str) -> bool:
    ops = {"=": "eq", ">=": "ge", "<=": "le", ">>": "gt", "<<": "lt"}
    return subprocess.run(["dpkg", "--compare-versions", have, ops[op], want]).returncode == 0


def parse_depends(field: str) -> list[tuple[str, str | None, str | None]]:
    out = []
    for clause in field.split(","):
        clause = clause.strip()
        assert "|" not in clause, clause
        if "(" in clause:
            name, rest = clause.split("(", 1)
            op, ver = rest.rstrip(")").split()
            out.append((name.strip(), op, ver))
        else:
            out.append((clause, None, None))
    return out


def test_manifest_two_doca_releases_for_the_upgrade_test():
    releases = fixture_repo.doca_releases(doca_manifest())
    assert len(releases) == 2
    assert version_ok(releases[1]["profile"], ">>", releases[0]["profile"])
    assert version_ok(releases[1]["kernel"], ">>", releases[0]["kernel"])
    assert set(doca_dirs().values()) == {f"doca/{r['doca']}/debian12.5/x86_64" for r in releases}


def test_doca_repositories_signed_by_the_same_key(repo, tmp_path):
    keyring = tmp_path / "kr.gpg"
    subprocess.run(["gpg", "--batch", "--dearmor", "-o", str(keyring), "--yes", str(repo / "key.asc")], check=True)
    for rel in doca_dirs().values():
        for sig in (["InRelease"], ["Release.gpg", "Release"]):
            subprocess.run(["gpgv", "--keyring", str(keyring), *[str(repo / rel / s) for s in sig]], check=True,
                           capture_output=True)
        assert (repo / rel / "key.asc").read_bytes() == (repo / "key.asc").read_bytes()
        assert "Label: DOCA-HOST-" in (repo / rel / "Release").read_text()


def test_every_doca_ofed_dependency_resolves(repo):
    for key, rel in doca_dirs().items():
        index = packages_index(repo, rel)
        by_name: dict[str, list[str]] = {}
        for name, version in index:
            by_name.setdefault(name, []).append(version)
        (profile,) = [f for (n, _), f in index.items() if n == "doca-ofed"]
        assert profile["Version"] == next(r["profile"] for r in fixture_repo.doca_releases(doca_manifest())
                                          if key == f"doca@{r['doca']}")
        seen = set()
        todo = [profile]
        while todo:  # the whole closure, not only doca-ofed's direct Depends
            fields = todo.pop()
            for name, op, want in parse_depends(fields.get("Depends", "")) if fields.get("Depends") else []:
                if name in FROM_DEBIAN_ARCHIVE:
                    assert op is None, f"{name} comes from Debian's archive: no version pin"
                    continue
                assert name in by_name, f"{rel}: {fields['Package']} depends on {name}, not in the fixture"
                match = [v for v in by_name[name] if op is None or version_ok(v, op, want)]
                assert match, f"{rel}: {fields['Package']} needs {name} ({op} {want}); have {by_name[name]}"
                if name not in seen:
                    seen.add(name)
                    todo.append(index[(name, match[0])])
        assert {"mlnx-ofed-kernel-dkms", "mlnx-ofed-kernel-utils", "perftest", "infiniband-diags"} <= seen


def test_doca_rdma_core_family_replaces_debian_packages(repo):
    for rel in doca_dirs().values():
        index = packages_index(repo, rel)
        for name in RDMA_FAMILY:
            (version,) = [v for n, v in index if n == name]
            assert "mlnx" in version and version_ok(version, ">>", DEBIAN12_RDMA_CORE), (name, version)


@pytest.mark.skipif(not shutil.which("apt-get"), reason="needs apt-get")
def test_apt_installs_doca_ofed_from_the_signed_repository(repo, tmp_path):
    """apt itself verifies InRelease against the key and resolves the profile (mstflint given as installed)."""
    rel = doca_dirs()[f"doca@{fixture_repo.doca_releases(doca_manifest())[-1]['doca']}"]
    for sub in ("etc", "lists/partial", "cache/archives/partial"):
        (tmp_path / sub).mkdir(parents=True)
    subprocess.run(["gpg", "--batch", "--dearmor", "-o", str(tmp_path / "key.gpg"), str(repo / "key.asc")], check=True)
    (tmp_path / "etc" / "sources.list").write_text(f"deb [signed-by={tmp_path}/key.gpg] file://{repo}/{rel} ./\n")
    (tmp_path / "status").write_text("Package: mstflint\nStatus: install ok installed\nPriority: optional\n"
                                     "Section: net\nMaintainer: x <x@invalid>\nArchitecture: amd64\n"
                                     "Version: 4.23.0+1-1\nDescription: stand-in for Debian's package\n\n")
    opts = [f"-oDir::Etc={tmp_path}/etc", f"-oDir::State={tmp_path}", f"-oDir::State::Lists={tmp_path}/lists",
            f"-oDir::State::status={tmp_path}/status", f"-oDir::Cache={tmp_path}/cache", "-oAPT::Architecture=amd64",
            "-oDebug::NoLocking=1", "-oAPT::Sandbox::User=root"]
    update = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True)
    assert update.returncode == 0 and "E:" not in update.stdout + update.stderr, update.stdout + update.stderr
    sim = subprocess.run(["apt-get", *opts, "-s", "install", "doca-ofed"], capture_output=True, text=True)
    assert sim.returncode == 0, sim.stdout + sim.stderr
    installed = {line.split()[1] for line in sim.stdout.splitlines() if line.startswith("Inst ")}
    assert {"doca-ofed", "mlnx-ofed-kernel-dkms", "mlnx-ofed-kernel-utils", "rdma-core", "perftest"} <= installed


def test_ofed_info_and_openibd_stand_ins(repo, tmp_path):
    release = fixture_repo.doca_releases(doca_manifest())[-1]
    rel = repo / doca_dirs()[f"doca@{release['doca']}"]
    for name in ("ofed-scripts", "mlnx-ofed-kernel-utils"):
        (deb,) = rel.glob(f"{name}_*_amd64.deb")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    env = {"PATH": "/usr/bin:/bin", "KILN_OFED_VERSION_FILE": str(tmp_path / "usr/share/kiln-fixture/ofed.version"),
           "KILN_OPENIBD_STATE": str(tmp_path / "run"),
           "KILN_OPENIB_CONF": str(tmp_path / "etc/infiniband/openib.conf")}
    out = subprocess.run([str(tmp_path / "usr/bin/ofed_info"), "-s"], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == f"OFED-internal-{release['ofed']}:\n"
    missing = subprocess.run([str(tmp_path / "usr/bin/ofed_info"), "-s"], capture_output=True, text=True,
                             env={**env, "KILN_OFED_VERSION_FILE": str(tmp_path / "nope")})
    assert missing.returncode == 1 and "missing" in missing.stderr
    openibd = str(tmp_path / "etc/init.d/openibd")
    assert subprocess.run([openibd, "status"], env=env, capture_output=True).returncode == 3
    assert subprocess.run([openibd, "start", "bootid=0123"], env=env, capture_output=True).returncode == 0
    assert (tmp_path / "run" / "mlx5_core").exists() and (tmp_path / "run" / "ib_core").exists()
    assert subprocess.run([openibd, "status"], env=env, capture_output=True).returncode == 0
    assert subprocess.run([openibd, "stop"], env=env, capture_output=True).returncode == 0
    assert not (tmp_path / "run").exists()
    unit = (tmp_path / "usr/lib/systemd/system/openibd.service").read_text()
    assert "ExecStart=/etc/init.d/openibd start bootid=%b" in unit and "WantedBy=sysinit.target" in unit


def test_docker_repository_dists_layout_signed(repo, tmp_path):
    """Docker's repository layout (what kiln_repo('docker') points apt at): dists/bookworm/stable, pool/stable."""
    base = repo / "docker" / "linux" / "debian"
    keyring = tmp_path / "kr.gpg"
    subprocess.run(["gpg", "--batch", "--dearmor", "-o", str(keyring), "--yes", str(repo / "key.asc")], check=True)
    subprocess.run(["gpgv", "--keyring", str(keyring), str(base / "dists" / "bookworm" / "InRelease")], check=True,
                   capture_output=True)
    release = (base / "dists" / "bookworm" / "Release").read_text()
    assert "Suite: bookworm" in release and "Components: stable" in release
    index = packages_index(repo, "docker/linux/debian/dists/bookworm/stable/binary-amd64")
    stack = {"os": "debian-12", "container_engine": {"kind": "docker-ce", "version": "27.5.1"}}
    for spec in kiln_packages(stack)["container_engine"]:
        name, version = spec.split("=", 1)
        entry = index[(name, version)]
        assert entry["Filename"].startswith("pool/stable/"), entry
        assert (base / entry["Filename"]).is_file()
    assert "docker.io" in index[("docker-ce", "5:27.5.1-1~debian.12~bookworm")]["Conflicts"]


def test_repacked_engine_carries_the_debian_contents(repo, tmp_path):
    """docker-ce gets dockerd, the units, the conffile and the maintainer scripts; docker-ce-cli the CLI."""
    pool = repo / "docker" / "linux" / "debian" / "pool" / "stable"
    engine = subprocess.run(["dpkg-deb", "-c", str(next(pool.glob("docker-ce_*.deb")))], check=True,
                            capture_output=True, text=True).stdout
    cli = subprocess.run(["dpkg-deb", "-c", str(next(pool.glob("docker-ce-cli_*.deb")))], check=True,
                         capture_output=True, text=True).stdout
    assert "./usr/sbin/dockerd" in engine and "./lib/systemd/system/docker.service" in engine
    assert "./usr/bin/docker\n" not in engine and "man1" not in engine
    assert "./usr/bin/docker" in cli and "dockerd" not in cli
    ctl = tmp_path / "ctl"
    subprocess.run(["dpkg-deb", "-e", str(next(pool.glob("docker-ce_*.deb"))), str(ctl)], check=True)
    assert "postinst-of-docker.io" in (ctl / "postinst").read_text()
    assert (ctl / "conffiles").read_text().split() == ["/etc/default/docker"]
