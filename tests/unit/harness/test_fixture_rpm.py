"""The EL9 RPM repositories of the fixture: spec and modules.yaml rendering, and one real rpmbuild/createrepo_c
build of a small manifest (tests/harness/fixture_rpm.py)."""
from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kiln_paths import REPO as ROOT
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import fixture_repo  # noqa: E402
import fixture_rpm  # noqa: E402


def el_manifest() -> dict:
    return yaml.safe_load(fixture_repo.MANIFEST_EL.read_text())


def entries() -> dict[tuple[str, str], dict]:
    return {(p["name"], p["version"]): p for p in fixture_rpm.package_entries(el_manifest())}


def spec_fields(spec: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in spec.splitlines():
        if ": " in line and not line.startswith((" ", "%", "#")) and line.split(":", 1)[0].isalpha():
            key, value = line.split(": ", 1)
            out.setdefault(key, []).append(value)
    return out


def section(spec: str, name: str) -> str:
    """The body of a %section (up to the next blank line)."""
    lines = spec.split("\n")
    start = lines.index(name) + 1
    end = next((i for i in range(start, len(lines)) if lines[i] == ""), len(lines))
    return "\n".join(lines[start:end])


# ---- the manifest

def test_el_manifest_matches_the_debian_fixture_versions():
    debian = yaml.safe_load(fixture_repo.MANIFEST.read_text())
    el = el_manifest()
    assert el["driver_branches"] == debian["driver_branches"]
    assert el["toolkit_versions"] == debian["toolkit_versions"]


def test_expansion_per_driver_and_per_toolkit():
    got = entries()
    for version in ("580.95.05", "580.173.02"):
        for name in ("nvidia-open", "cuda-drivers", "kmod-nvidia-open-dkms", "kmod-nvidia-latest-dkms",
                     "nvidia-driver-cuda", "nvidia-driver-cuda-libs", "nvidia-persistenced"):
            pkg = got[(name, version)]
            assert pkg["release"] == "1.el9" and pkg["branch"] == "580" and pkg["repo"] == "cuda"
    assert got[("nvidia-open", "580.95.05")]["requires"] == [
        "kmod-nvidia-open-dkms = 580.95.05-1.el9", "nvidia-driver-cuda = 580.95.05-1.el9"]
    for version in ("1.19.1", "1.20.0"):
        for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                     "libnvidia-container1"):
            assert got[(name, version)]["release"] == "1" and got[(name, version)]["repo"] == "container_toolkit"
    assert got[("nvidia-container-toolkit", "1.20.0")]["requires"][0] == "nvidia-container-toolkit-base = 1.20.0-1"
    assert got[("libnccl", "2.28.7")]["release"] == "1+cuda13.0"
    assert not any(name.startswith("datacenter-gpu-manager-exporter") for name, _ in got)
    assert len(got) == len(fixture_rpm.package_entries(el_manifest()))  # no duplicate name-version


def test_scriptlets_are_not_formatted():
    pkg = entries()[("golang-github-prometheus-node-exporter", "1.7.0")]
    assert "groupadd -r prometheus" in pkg["pre"]
    unit = pkg["files"]["/usr/lib/systemd/system/node_exporter.service"]
    assert "ExecStart=/usr/bin/node_exporter $ARGS" in unit
    assert "EnvironmentFile=-/etc/default/prometheus-node-exporter" in unit and "User=prometheus" in unit


def test_hyphen_in_an_rpm_version_is_refused():
    manifest = {"packages": [{"repo": "cuda", "name": "x", "version": "4.6.0-4.8.3", "release": "1",
                              "description": "d"}]}
    with pytest.raises(ValueError, match="hyphen"):
        fixture_rpm.package_entries(manifest)


# ---- spec rendering

def test_spec_of_a_metapackage():
    spec = fixture_rpm.render_spec(entries()[("cuda-drivers", "580.173.02")])
    fields = spec_fields(spec)
    assert fields["Name"] == ["cuda-drivers"] and fields["Version"] == ["580.173.02"]
    assert fields["Release"] == ["1.el9"] and fields["BuildArch"] == ["x86_64"]
    assert fields["AutoReqProv"] == ["no"]
    assert fields["Requires"] == ["kmod-nvidia-latest-dkms = 580.173.02-1.el9", "nvidia-driver-cuda = 580.173.02-1.el9"]
    assert "Epoch" not in fields
    assert section(spec, "%files") == "%defattr(-,root,root,-)"
    assert "cp -a %{kiln_stage}/. %{buildroot}/" in spec
    assert "%define __os_install_post %{nil}" in spec and "%define debug_package %{nil}" in spec


def test_spec_of_a_kmod():
    pkg = dict(entries()[("kmod-nvidia-open-dkms", "580.95.05")], kmod_sha256="a" * 64)
    spec = fixture_rpm.render_spec(pkg)
    fields = spec_fields(spec)
    assert fields["Requires"] == ["dkms"] and fields["Conflicts"] == ["kmod-nvidia-latest-dkms"]
    assert section(spec, "%files").splitlines()[1:] == [
        "%dir /usr/src/nvidia-580.95.05", "/usr/src/nvidia-580.95.05/dkms.conf", "/usr/src/nvidia-580.95.05/nvidia.ko"]
    post = section(spec, "%post")
    assert "for k in $(uname -r) $(ls /lib/modules 2>/dev/null); do" in post
    assert "cp /usr/src/nvidia-580.95.05/nvidia.ko /lib/modules/$k/extra/nvidia.ko" in post
    assert "depmod -a $k 2>/dev/null || true" in post
    preun = section(spec, "%preun")
    assert preun.startswith('if [ "$1" = 0 ]; then') and "a" * 64 in preun and 'rm -f "$ko"' in preun


def test_kmod_preun_removes_only_its_own_module_on_erase(tmp_path):
    """The %preun body as sh runs it: upgrade ($1=1) keeps the module, erase ($1=0) removes it only when it is
    this package's (a flavor swap runs the new %post first)."""
    ko = tmp_path / "lib" / "modules" / "6.1.0-kiln" / "extra" / "nvidia.ko"
    ko.parent.mkdir(parents=True)
    pkg = dict(entries()[("kmod-nvidia-open-dkms", "580.95.05")], kmod_sha256=hashlib.sha256(b"mine").hexdigest())
    body = fixture_rpm.scriptlets(pkg)["preun"].replace("/lib/modules", f"{tmp_path}/lib/modules")
    body = body.replace("cut -d/ -f4", f"cut -d/ -f{4 + len(tmp_path.parts) - 1}")
    for arg, content, kept in (("1", b"mine", True), ("0", b"other", True), ("0", b"mine", False)):
        ko.write_bytes(content)
        subprocess.run(["sh", "-c", body, "preun", arg], check=True, env={"PATH": "/usr/bin:/bin"})
        assert ko.exists() == kept, (arg, content)


def test_spec_of_files_links_and_alternatives():
    got = entries()
    spec = fixture_rpm.render_spec(got[("nvidia-driver-cuda-libs", "580.95.05")])
    assert section(spec, "%files").splitlines()[1:] == ["/usr/lib64/libcuda.so.1", "/usr/lib64/libcuda.so.580.95.05"]
    spec = fixture_rpm.render_spec(got[("cuda-toolkit-13-0-config-common", "13.0.96")])
    assert "%dir /usr/local/cuda-13.0" in section(spec, "%files")
    assert "update-alternatives --install /usr/local/cuda cuda /usr/local/cuda-13.0 130" in section(spec, "%post")
    assert 'if [ "$1" = 0 ]; then' in section(spec, "%preun")
    assert "update-alternatives --remove cuda-13 /usr/local/cuda-13.0" in section(spec, "%preun")
    spec = fixture_rpm.render_spec(got[("libcudnn9-devel-cuda-13", "9.17.1.4")])
    assert spec_fields(spec)["Requires"] == ["libcudnn9-cuda-13 = 9.17.1.4-1"]
    assert "/usr/include/cudnn_version_v9.h" in section(spec, "%files")


def test_spec_of_a_base_standin_and_the_node_exporter():
    got = entries()
    spec = fixture_rpm.render_spec(got[("rocky-release", "9.4")])
    fields = spec_fields(spec)
    assert fields["Release"] == ["1.7.el9"] and fields["BuildArch"] == ["noarch"]
    assert fields["Provides"] == ["system-release(releasever) = 9", "system-release = 9.4"]
    assert section(spec, "%files").splitlines()[1:] == ["/usr/share/kiln-fixture/el9-standin/rocky-release"]
    assert "Stand-in" in section(spec, "%description") or "stand-in" in spec
    spec = fixture_rpm.render_spec(got[("golang-github-prometheus-node-exporter", "1.7.0")])
    assert section(spec, "%files").splitlines()[1:] == ["/usr/bin/node_exporter",
                                                        "/usr/lib/systemd/system/node_exporter.service"]
    pre = section(spec, "%pre")
    assert "getent group prometheus >/dev/null || groupadd -r prometheus" in pre
    assert "useradd -r -g prometheus -d /var/lib/prometheus -s /usr/sbin/nologin prometheus" in pre


# ---- modules.yaml rendering

def test_modules_yaml():
    texts = fixture_rpm.render_modules(el_manifest())
    assert set(texts) == {"cuda"}
    docs = list(yaml.safe_load_all(texts["cuda"]))
    streams = {d["data"]["stream"]: d for d in docs}
    assert set(streams) == {"580-open", "580-dkms", "590-open", "590-dkms"}
    names = {p["name"] for p in fixture_rpm.package_entries(el_manifest())}
    # a branch's stream lists that branch's releases only (the switch to 590 is a stream change)
    assert not [a for a in streams["590-open"]["data"]["artifacts"]["rpms"] if "580." in a]
    assert "nvidia-open-0:590.48.01-1.el9.x86_64" in streams["590-open"]["data"]["artifacts"]["rpms"]
    for doc in docs:
        data = doc["data"]
        assert doc["document"] == "modulemd" and doc["version"] == 2
        assert data["name"] == "nvidia-driver" and data["arch"] == "x86_64"
        assert isinstance(data["version"], int) and len(data["context"]) == 8
        int(data["context"], 16)
        assert data["license"]["module"] == ["MIT"] and data["summary"] and data["description"]
        for nevra in data["artifacts"]["rpms"]:
            name, evr = nevra.rsplit("-0:", 1)
            assert name in names and evr.endswith("-1.el9.x86_64"), nevra
    open_, dkms = streams["580-open"]["data"], streams["580-dkms"]["data"]
    assert open_["profiles"] == {"default": {"rpms": ["nvidia-open"]}}
    assert dkms["profiles"] == {"default": {"rpms": ["cuda-drivers"]}}
    for version in ("580.95.05", "580.173.02"):
        for name in ("nvidia-open", "kmod-nvidia-open-dkms", "nvidia-driver-cuda", "nvidia-driver-cuda-libs",
                     "nvidia-persistenced"):
            assert f"{name}-0:{version}-1.el9.x86_64" in open_["artifacts"]["rpms"]
        for name in ("cuda-drivers", "kmod-nvidia-latest-dkms", "nvidia-driver-cuda"):
            assert f"{name}-0:{version}-1.el9.x86_64" in dkms["artifacts"]["rpms"]
    assert not any(a.startswith(("cuda-drivers-", "kmod-nvidia-latest")) for a in open_["artifacts"]["rpms"])
    assert len(open_["artifacts"]["rpms"]) == len(dkms["artifacts"]["rpms"]) == 10


def test_a_second_branch_gets_its_own_streams():
    manifest = el_manifest()
    manifest["driver_branches"].append({"branch": "590", "versions": ["590.44.01"]})
    docs = list(yaml.safe_load_all(fixture_rpm.render_modules(manifest)["cuda"]))
    by_stream = {d["data"]["stream"]: d["data"]["artifacts"]["rpms"] for d in docs}
    assert set(by_stream) == {"580-open", "580-dkms", "590-open", "590-dkms"}
    assert "nvidia-open-0:590.44.01-1.el9.x86_64" in by_stream["590-open"]
    assert not any("590." in a for a in by_stream["580-open"])


# ---- a real build

SMALL = """
repos:
  cuda: {path: compute/cuda/repos/rhel9/x86_64}
  base: {path: el9/base/x86_64}
driver_branches: [{branch: "580", versions: ["580.95.05"]}]
driver_release: "1.el9"
toolkit_versions: []
modules:
  nvidia-driver:
    repo: cuda
    version: 1
    license: [MIT]
    summary: "Nvidia driver for {stream} branch"
    description: "kiln test"
    streams:
      - {stream: "{branch}-open", artifacts: [nvidia-open, kmod-nvidia-open-dkms], profiles: {default: [nvidia-open]}}
packages:
  - {repo: cuda, per_driver: true, name: nvidia-open, version: "{v}",
     requires: ["kmod-nvidia-open-dkms = {v}-1.el9"], description: "meta"}
  - {repo: cuda, per_driver: true, name: kmod-nvidia-open-dkms, version: "{v}", kmod: open,
     requires: [dkms], conflicts: [kmod-nvidia-latest-dkms], description: "kmod"}
base_standins:
  - {name: dkms, version: "3.1.0", release: "1.el9"}
"""


@pytest.mark.skipif(not all(shutil.which(t) for t in ("rpmbuild", "rpmsign", "createrepo_c", "modifyrepo_c", "gpg",
                                                      "gcc", "dpkg-deb")),
                    reason="needs rpmbuild, rpmsign, createrepo_c, modifyrepo_c, gpg, gcc (tests/harness/testbed.sh)")
def test_build_el_small_manifest(tmp_path):
    out, home = tmp_path / "out", tmp_path / "gpg"
    out.mkdir()
    home.mkdir(mode=0o700)
    fpr = fixture_repo.make_key(str(home), out)
    count = fixture_rpm.build_el(yaml.safe_load(SMALL), out, tmp_path / "work", str(home), fpr)
    assert count == 3
    cuda, base = out / "compute/cuda/repos/rhel9/x86_64", out / "el9/base/x86_64"
    qf = "%{NAME}|%{EPOCH}|%{VERSION}|%{RELEASE}|%{ARCH}|[%{REQUIRENAME} %{REQUIREFLAGS:depflags} %{REQUIREVERSION},]"
    kmod = cuda / "kmod-nvidia-open-dkms-580.95.05-1.el9.x86_64.rpm"
    meta = cuda / "nvidia-open-580.95.05-1.el9.x86_64.rpm"
    dkms = base / "dkms-3.1.0-1.el9.noarch.rpm"

    def query(rpm: Path, fmt: str) -> str:
        return subprocess.run(["rpm", "-qp", "--nosignature", "--qf", fmt, str(rpm)], check=True,
                              capture_output=True, text=True).stdout

    head, requires = query(meta, qf).rsplit("|", 1)
    assert head == "nvidia-open|(none)|580.95.05|1.el9|x86_64"
    assert [r for r in requires.split(",") if r and not r.startswith("rpmlib(")] == [
        "kmod-nvidia-open-dkms = 580.95.05-1.el9"]  # AutoReqProv: no -- nothing generated
    assert query(kmod, "%{CONFLICTNAME}") == "kmod-nvidia-latest-dkms"
    assert query(dkms, "%{NAME}-%{VERSION}-%{RELEASE}.%{ARCH}") == "dkms-3.1.0-1.el9.noarch"
    listing = subprocess.run(["rpm", "-qpl", "--nosignature", str(kmod)], check=True, capture_output=True,
                             text=True).stdout.split()
    assert listing == ["/usr/src/nvidia-580.95.05", "/usr/src/nvidia-580.95.05/dkms.conf",
                       "/usr/src/nvidia-580.95.05/nvidia.ko"]
    scripts = subprocess.run(["rpm", "-qp", "--nosignature", "--scripts", str(kmod)], check=True,
                             capture_output=True, text=True).stdout
    assert "postinstall scriptlet" in scripts and "/lib/modules/$k/extra/nvidia.ko" in scripts
    # signed with the fixture key (EdDSA: the header signature is in the DSA slot)
    sig = query(kmod, "%{DSAHEADER:pgpsig}")
    assert fpr[-16:].lower() in sig.lower(), sig
    # repodata: primary, modules, signed repomd.xml
    repomd = (cuda / "repodata" / "repomd.xml").read_text()
    assert 'type="primary"' in repomd and 'type="modules"' in repomd
    assert 'type="modules"' not in (base / "repodata" / "repomd.xml").read_text()
    keyring = tmp_path / "kr.gpg"
    subprocess.run(["gpg", "--batch", "--dearmor", "-o", str(keyring), str(out / "key.asc")], check=True)
    for repo in (cuda, base):
        subprocess.run(["gpgv", "--keyring", str(keyring), str(repo / "repodata" / "repomd.xml.asc"),
                        str(repo / "repodata" / "repomd.xml")], check=True, capture_output=True)
        assert (repo / "key.asc").read_bytes() == (out / "key.asc").read_bytes()
    (modules_gz,) = (cuda / "repodata").glob("*modules.yaml.gz")
    (doc,) = list(yaml.safe_load_all(gzip.decompress(modules_gz.read_bytes())))
    assert doc["data"]["stream"] == "580-open"
    assert sorted(doc["data"]["artifacts"]["rpms"]) == ["kmod-nvidia-open-dkms-0:580.95.05-1.el9.x86_64",
                                                        "nvidia-open-0:580.95.05-1.el9.x86_64"]


def test_key_of_picks_the_repositorys_signer():
    assert fixture_rpm.key_of({"path": "a"}, "/home", "FPR", {}) == ("/home", "FPR")
    assert fixture_rpm.key_of({"path": "b", "signer": "distribution"}, "/home", "FPR",
                              {"distribution": ("/dist", "DFPR")}) == ("/dist", "DFPR")
    with pytest.raises(ValueError, match="names signer 'vendor', which the build does not have"):
        fixture_rpm.key_of({"path": "c", "signer": "vendor"}, "/home", "FPR", {})
