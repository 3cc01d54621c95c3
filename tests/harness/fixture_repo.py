#!/usr/bin/env python3
"""Build kiln's fixture of NVIDIA's Debian 12 and EL9 package repositories.

Reads tests/fixtures/nvidia-repo/manifest.yml, builds every package with
dpkg-deb, writes flat APT repositories (Packages, Packages.gz, Release) laid
out like NVIDIA's (compute/cuda/repos/debian12/x86_64/,
libnvidia-container/stable/deb/amd64/ and, one per DOCA-Host release,
doca/<version>/debian12.5/x86_64/), plus Docker's repository in its
dists/pool layout (docker/linux/debian: dists/bookworm/stable/binary-amd64/,
pool/stable/; its docker-ce and docker-ce-cli carry the contents of Debian's
real docker.io, fetched once into .cache/debs/ with apt-get download inside the
test-bed image: manifest key `repack`), and signs them (InRelease,
Release.gpg) with a throwaway key generated for this build. The public key
(key.asc) and its fingerprint (fingerprint.txt) are written next to the
repositories so a scenario can pass them as the pinned key.

The same build makes the EL9 (Rocky/RHEL 9) RPM repositories of
tests/fixtures/nvidia-repo/manifest-el9.yml (fixture_rpm.py: rpmbuild,
createrepo_c, modifyrepo_c): compute/cuda/repos/rhel9/x86_64/ (with the
nvidia-driver module streams in modules.yaml), libnvidia-container/stable/rpm/
x86_64/ and el9/base/x86_64/ (stand-ins of the distribution's packages, one
of them Debian's prometheus-node-exporter repacked), every RPM signed with
rpmsign and each repodata/repomd.xml signed (repomd.xml.asc) with the same
throwaway key.

Release artifacts that sites download by URL rather than from a package
repository (manifest section `releases`) go under releases/: Enroot's two
packages per release (releases/enroot/v<version>/enroot_<version>-1_amd64.deb,
enroot+caps_<version>-1_amd64.deb) and a clearly named stand-in of Pyxis's
source archive (releases/pyxis/v<version>.tar.gz, from
tests/fixtures/pyxis-standin). Their sha256 are computed here and written to
releases/SHA256SUMS (sha256sum -c format) and releases/sha256sums.json
({tool: {version: {file: sha256}}}), which scenarios read as the checksums a
site would pin.

    fixture_repo.py OUTDIR      build into OUTDIR (skips when OUTDIR/.complete exists)
    fixture_repo.py --hash      print the hash of everything the build reads

Test fixture only: nothing here is shipped by a role.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
FIXTURES = Path(os.environ.get("KILN_FIXTURES_DIR", HERE.parent / "fixtures"))
MANIFEST = FIXTURES / "nvidia-repo" / "manifest.yml"
MANIFEST_EL = FIXTURES / "nvidia-repo" / "manifest-el9.yml"
MAINTAINER = "kiln test fixture <kiln-fixture@invalid>"
# Fixture trees read by the `releases` section of the manifest (besides emulators/).
RELEASE_INPUTS = ("enroot-release", "pyxis-standin")


def inputs() -> list[Path]:
    """Every file whose content changes the built repository."""
    script = Path(__file__)
    # fixture_rpm.py (the EL9 build) sits next to this script; the EL manifest in the fixtures tree.
    files = [script, *[p for p in (script.with_name("fixture_rpm.py"),) if p.is_file()], MANIFEST,
             FIXTURES / "nvidia-repo" / MANIFEST_EL.name]
    for sub in ("nvidia-repo", "gpu-emulator", "emulators") + RELEASE_INPUTS:
        root = FIXTURES / sub
        if root.is_dir():
            files += sorted(p for p in root.rglob("*")
                            if p.is_file() and "__pycache__" not in p.parts and p not in files)
    return files


def input_hash() -> str:
    digest = hashlib.sha256()
    for path in inputs():
        digest.update(str(path.relative_to(FIXTURES.parent)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def expand(value: Any, fields: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**fields)
    if isinstance(value, dict):
        return {expand(k, fields): expand(v, fields) for k, v in value.items()}
    return value


def doca_releases(manifest: dict[str, Any]) -> list[dict[str, str]]:
    """The DOCA-Host releases of the fixture, each a dict of version fields."""
    return [{k: str(v) for k, v in rel.items()} for rel in manifest.get("doca_releases") or []]


def repo_layout(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Repository key -> {path, release[, suite, component]}; a per_release repository gives one key per
    DOCA release. A repository with a suite and a component is laid out as dists/<suite>/<component>/
    binary-amd64/ (the index) and pool/<component>/ (the packages), like Docker's; the others are flat."""
    out: dict[str, dict[str, Any]] = {}
    for name, repo in manifest["repos"].items():
        if repo.get("per_release"):
            for rel in doca_releases(manifest):
                out[f"{name}@{rel['doca']}"] = {"path": repo["path"].format(**rel),
                                                "release": expand(repo.get("release") or {}, rel)}
        else:
            out[name] = {"path": repo["path"], "release": repo.get("release") or {}}
            if repo.get("suite"):
                out[name].update(suite=repo["suite"], component=repo.get("component", "main"))
    return out


def pool_dir(root: Path, repo: dict[str, Any]) -> Path:
    """Where a repository's packages go: pool/<component>/ (dists layout) or the flat directory."""
    return root / repo["path"] / "pool" / repo["component"] if repo.get("suite") else root / repo["path"]


def release_dir(root: Path, repo: dict[str, Any]) -> Path:
    """Where a repository's Release (and its signatures) go: dists/<suite>/ or the flat directory."""
    return root / repo["path"] / "dists" / repo["suite"] if repo.get("suite") else root / repo["path"]


def package_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    specs: list[dict[str, Any]] = []
    branches = manifest["driver_branches"]
    branch = branches[0]["branch"]  # of the packages not built per driver release
    for entry in manifest["packages"]:
        if entry.get("per_driver"):
            for rel in branches:
                for version in rel["versions"]:
                    specs.append(expand(entry, {"v": version, "branch": rel["branch"]}))
        elif entry.get("per_toolkit"):
            for version in manifest["toolkit_versions"]:
                specs.append(expand(entry, {"t": version, "branch": branch}))
        elif entry.get("per_doca"):
            # One package per DOCA release, into that release's repository.
            for rel in doca_releases(manifest):
                spec = expand(entry, rel)
                spec["repo"] = f"{entry['repo']}@{rel['doca']}"
                specs.append(spec)
        else:
            specs.append(expand(entry, {"branch": branch}))
    return specs


def fake_module(version: str, flavor: str, workdir: Path) -> bytes:
    """An ELF object carrying the nvidia module's modinfo fields (not loadable)."""
    license_ = "Dual MIT/GPL" if flavor == "open" else "NVIDIA"
    src = workdir / "nvidia-modinfo.c"
    fields = [f"version={version}", f"license={license_}", "name=nvidia",
              "description=kiln fixture stand-in for the NVIDIA kernel module (not loadable)"]
    body = "\\0".join(fields)
    src.write_text(f'__attribute__((section(".modinfo"), used)) static const char info[] = "{body}";\n')
    obj = workdir / "nvidia.ko"
    subprocess.run(["gcc", "-c", str(src), "-o", str(obj)], check=True)
    return obj.read_bytes()


def content_for(kind: str, pkg_version: str) -> tuple[bytes, int]:
    """Content and mode of a file given its manifest source string."""
    if kind.startswith("emulator:"):
        return (FIXTURES / kind.split(":", 1)[1]).read_bytes(), 0o755
    if kind.startswith("unit:"):
        return (FIXTURES / "nvidia-repo" / "units" / f"{kind.split(':', 1)[1]}.service").read_bytes(), 0o644
    if kind.startswith("file:"):
        return (FIXTURES / kind.split(":", 1)[1]).read_bytes(), 0o644
    if kind.startswith("text:"):
        return (kind.split(":", 1)[1] + "\n").encode(), 0o644
    if kind == "placeholder":
        return b"kiln fixture placeholder: no real library here\n", 0o644
    if kind == "placeholder-exec":
        return b"#!/bin/sh\necho 'kiln fixture placeholder' >&2\nexit 0\n", 0o755
    if kind.startswith("dkms-conf:"):
        name, ver = kind.split(":", 2)[1:]
        return (f'PACKAGE_NAME="{name}"\nPACKAGE_VERSION="{ver}"\nAUTOINSTALL="yes"\n'
                "# kiln fixture: no module sources here, nothing is built\n").encode(), 0o644
    if kind.startswith("cuda-version-json:"):
        ver = kind.split(":", 1)[1]
        return (json.dumps({"cuda": {"name": "CUDA SDK", "version": ver}}, indent=3) + "\n").encode(), 0o644
    if kind.startswith("cudnn-version-h:"):
        major, minor, patch = kind.split(":", 1)[1].split(".")
        text = (f"#ifndef CUDNN_VERSION_H_\n#define CUDNN_VERSION_H_\n#define CUDNN_MAJOR {major}\n"
                f"#define CUDNN_MINOR {minor}\n#define CUDNN_PATCHLEVEL {patch}\n"
                "#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n#endif\n")
        return text.encode(), 0o644
    if kind.startswith("nccl-h:"):
        major, minor, patch = kind.split(":", 1)[1].split(".")
        text = (f"#ifndef NCCL_H_\n#define NCCL_H_\n#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n"
                f"#define NCCL_PATCH {patch}\n#define NCCL_SUFFIX \"\"\n"
                f"#define NCCL_VERSION_CODE {int(major) * 10000 + int(minor) * 100 + int(patch)}\n#endif\n")
        return text.encode(), 0o644
    raise ValueError(f"unknown file source {kind!r}")


def maintainer_scripts(spec: dict[str, Any]) -> dict[str, str]:
    scripts: dict[str, str] = {}
    version = spec["version"].split(":")[-1].rsplit("-", 1)[0]
    if spec.get("kmod"):
        # Emulates the DKMS build: a module for the running kernel and for
        # every kernel installed under /lib/modules.
        scripts["postinst"] = f"""#!/bin/sh
set -e
if [ "$1" = configure ]; then
  for k in $(uname -r) $(ls /lib/modules 2>/dev/null); do
    mkdir -p /lib/modules/$k/updates/dkms
    cp /usr/src/nvidia-{version}/nvidia.ko /lib/modules/$k/updates/dkms/nvidia.ko
    depmod -a $k 2>/dev/null || true
  done
fi
"""
        scripts["prerm"] = """#!/bin/sh
set -e
for k in $(ls /lib/modules 2>/dev/null); do
  rm -f /lib/modules/$k/updates/dkms/nvidia.ko
  depmod -a $k 2>/dev/null || true
done
"""
    if spec.get("postinst"):
        scripts["postinst"] = spec["postinst"]
    if spec.get("alternatives"):
        lines = ["#!/bin/sh", "set -e", 'if [ "$1" = configure ]; then']
        for name, target in spec["alternatives"].items():
            lines.append(f"  update-alternatives --install /usr/local/{name} {name} {target} 130")
        lines += ["fi", ""]
        scripts["postinst"] = "\n".join(lines)
        pre = ["#!/bin/sh", "set -e", 'if [ "$1" = remove ]; then']
        for name, target in spec["alternatives"].items():
            pre.append(f"  update-alternatives --remove {name} {target}")
        pre += ["fi", ""]
        scripts["prerm"] = "\n".join(pre)
    return scripts


# Debian packages whose real contents a fixture package carries (spec key `repack`), fetched once
# from Debian's archive inside the test-bed image and cached here.
DEB_CACHE = Path(os.environ.get("KILN_DEB_CACHE", HERE.parents[1] / ".cache" / "debs"))


def fetch_deb(package: str, version: str, cache: Path = DEB_CACHE) -> Path:
    """Debian's own .deb of package=version (apt-get download in the test-bed image, $KILN_IMAGE); cached."""
    name = f"{package}_{version.split(':')[-1]}_amd64.deb"
    found = cache / name
    if found.exists():
        return found
    image = os.environ.get("KILN_IMAGE")
    if not image:
        raise SystemExit(f"[kiln-fixture] {name} is not cached in {cache} and KILN_IMAGE is not set: "
                         f"run make testbed (it builds the image, then this repository)")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kiln-dl-", dir=cache) as tmp:
        subprocess.run(["podman", "run", "--rm", "--network", os.environ.get("KILN_NET_NAME", "kiln-testbed"),
                        "-v", f"{tmp}:/out", image, "sh", "-c",
                        'apt-get update -qq >/dev/null && cd /out && apt-get download -qq "$1"', "sh",
                        f"{package}={version}"], check=True)
        shutil.move(str(Path(tmp) / name), found)
    return found


def repack(spec: dict[str, Any], root: Path, workdir: Path) -> list[str]:
    """Unpack the Debian package spec['repack'] names into root, keeping only its `include` paths (prefixes,
    default all) minus its `exclude` paths, and its maintainer scripts when `scripts` is true.
    Returns the conffiles kept."""
    src = spec["repack"]
    deb = fetch_deb(src["package"], src["version"])
    tree = workdir / f"repack-{spec['name']}"
    if tree.exists():
        shutil.rmtree(tree)
    subprocess.run(["dpkg-deb", "-R", str(deb), str(tree)], check=True)
    include = [p.strip("/") for p in src.get("include") or [""]]
    exclude = [p.strip("/") for p in src.get("exclude") or []]

    def kept(rel: str) -> bool:
        return any(rel == p or rel.startswith(p + "/") or p == "" for p in include) and \
            not any(rel == p or rel.startswith(p + "/") for p in exclude)

    for path in sorted(tree.rglob("*")):
        rel = str(path.relative_to(tree))
        if rel.startswith("DEBIAN") or path.is_dir() and not path.is_symlink() or not kept(rel):
            continue
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest, follow_symlinks=False)
    if src.get("scripts"):
        for name in ("preinst", "postinst", "prerm", "postrm", "templates", "config"):
            if (tree / "DEBIAN" / name).exists():
                shutil.copy2(tree / "DEBIAN" / name, root / "DEBIAN" / name)
    conffiles = (tree / "DEBIAN" / "conffiles").read_text().split() if (tree / "DEBIAN" / "conffiles").exists() else []
    return [c for c in conffiles if kept(c.strip("/"))]


def stage_files(spec: dict[str, Any], root: Path, version: str) -> None:
    """Write a package's `files` (content_for sources) and `links` into root, its future /; the
    .deb builder and the .rpm builder (fixture_rpm.stage) share it."""
    for dest, kind in (spec.get("files") or {}).items():
        data, mode = content_for(kind, version)
        path = root / dest.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    for link, target in (spec.get("links") or {}).items():
        path = root / link.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)


def build_deb(spec: dict[str, Any], outdir: Path, workdir: Path) -> Path:
    # One tree per repository: two DOCA releases may carry the same name and version.
    root = workdir / spec["repo"].replace("@", "_") / f"{spec['name']}_{spec['version'].replace(':', '_')}"
    (root / "DEBIAN").mkdir(parents=True)
    conffiles = repack(spec, root, workdir) if spec.get("repack") else []
    if conffiles:
        (root / "DEBIAN" / "conffiles").write_text("\n".join(conffiles) + "\n")
    upstream = spec["version"].split(":")[-1].rsplit("-", 1)[0]
    stage_files(spec, root, upstream)
    if spec.get("kmod"):
        src = root / "usr" / "src" / f"nvidia-{upstream}"
        src.mkdir(parents=True)
        (src / "nvidia.ko").write_bytes(fake_module(upstream, spec["kmod"], workdir))
        (src / "dkms.conf").write_text(f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{upstream}"\nAUTOINSTALL="yes"\n')
    control = [f"Package: {spec['name']}", f"Version: {spec['version']}", "Architecture: amd64",
               f"Maintainer: {MAINTAINER}", "Section: multiverse/libs", "Priority: optional"]
    for field in ("depends", "conflicts", "provides", "replaces"):
        if spec.get(field):
            control.append(f"{field.capitalize()}: {spec[field]}")
    control.append(f"Description: {spec['description']}")
    control.append(" kiln test fixture: same name and version as the vendor's package;")
    control.append(" " + spec.get("fixture_note", "contents are stand-ins (emulators, placeholders)."))
    (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    for name, body in maintainer_scripts(spec).items():
        script = root / "DEBIAN" / name
        script.write_text(body)
        script.chmod(0o755)
    deb = outdir / f"{spec['name']}_{spec['version'].split(':')[-1]}_amd64.deb"
    # A repacked Debian package is large (the Docker engine: ~140 MB): fast gzip, not xz.
    compress = ["-Zgzip", "-z1"] if spec.get("repack") else ["-Zxz"]
    subprocess.run(["dpkg-deb", "--root-owner-group", *compress, "--build", str(root), str(deb)],
                   check=True, stdout=subprocess.DEVNULL)
    return deb


def write_index(root: Path, repo: dict[str, Any]) -> Path:
    """Write a repository's Packages, Packages.gz and Release; returns the directory of its Release."""
    base = root / repo["path"]
    if repo.get("suite"):
        # dists layout: Filename: pool/<component>/<deb>, index under dists/<suite>/<component>/binary-amd64/
        scan = subprocess.run(["dpkg-scanpackages", "--multiversion", f"pool/{repo['component']}", "/dev/null"],
                              cwd=base, check=True, capture_output=True, text=True).stdout
        index_rel = f"{repo['component']}/binary-amd64"
        rel_dir = release_dir(root, repo)
    else:
        scan = subprocess.run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=base,
                              check=True, capture_output=True, text=True).stdout
        index_rel, rel_dir = "", base
    index_dir = rel_dir / index_rel if index_rel else rel_dir
    index_dir.mkdir(parents=True, exist_ok=True)
    (index_dir / "Packages").write_text(scan)
    with gzip.GzipFile(index_dir / "Packages.gz", "wb", mtime=0) as handle:
        handle.write(scan.encode())
    fields = {"Origin": "kiln-fixture", "Label": "kiln fixture of a vendor repository"}
    if repo.get("suite"):
        fields.update(Suite=repo["suite"], Codename=repo["suite"], Components=repo["component"])
    fields.update({k.capitalize(): v for k, v in (repo.get("release") or {}).items()})
    lines = [f"{k}: {v}" for k, v in fields.items()]
    lines += ["Architectures: amd64", "Date: Thu, 01 Jan 2026 00:00:00 UTC", "SHA256:"]
    for name in ("Packages", "Packages.gz"):
        rel_name = f"{index_rel}/{name}" if index_rel else name
        data = (rel_dir / rel_name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {rel_name}")
    (rel_dir / "Release").write_text("\n".join(lines) + "\n")
    return rel_dir


def release_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Release artifacts of the manifest's `releases` section, one dict per file:
    {tool, version, path (relative to the fixture root), kind: deb|tarball, spec (deb) | source, top (tarball)}."""
    out: list[dict[str, Any]] = []
    for tool, entry in (manifest.get("releases") or {}).items():
        for version in entry["versions"]:
            fields = {"version": str(version)}
            for deb in entry.get("debs") or []:
                spec = {k: v for k, v in deb.items() if k != "postinst"}
                spec = expand(spec, fields)
                if deb.get("postinst"):
                    spec["postinst"] = deb["postinst"]  # shell text: not a format string
                spec["repo"] = f"releases-{tool}"
                name = f"{spec['name']}_{spec['version'].split(':')[-1]}_amd64.deb"
                out.append({"tool": tool, "version": str(version), "kind": "deb", "spec": spec,
                            "path": f"{entry['dir'].format(**fields)}/{name}"})
            if entry.get("tarball"):
                out.append({"tool": tool, "version": str(version), "kind": "tarball", "source": entry["source"],
                            "top": entry["top"].format(**fields), "path": entry["tarball"].format(**fields)})
    return out


def source_tarball(src: Path, top: str, dest: Path) -> Path:
    """A reproducible .tar.gz of the files under src, inside directory `top` (as GitHub's source archives)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    files = sorted(p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts)

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 0
        info.mode = 0o755 if info.isdir() or info.mode & 0o100 else 0o644
        return info

    with open(dest, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({p.parent for p in files if p.parent != src} | {src})
        for d in dirs:
            tar.add(d, arcname=str(Path(top) / d.relative_to(src)) if d != src else top, recursive=False,
                    filter=clean)
        for path in files:
            tar.add(path, arcname=str(Path(top) / path.relative_to(src)), filter=clean)
    return dest


def build_releases(manifest: dict[str, Any], out: Path, workdir: Path) -> dict[str, dict[str, dict[str, str]]]:
    """Build the release artifacts into out/ and write releases/SHA256SUMS and releases/sha256sums.json.
    Returns {tool: {version: {file name: sha256}}}."""
    sums: dict[str, dict[str, dict[str, str]]] = {}
    lines: list[str] = []
    for item in release_specs(manifest):
        dest = out / item["path"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        if item["kind"] == "deb":
            built = build_deb(item["spec"], dest.parent, workdir)
            if built != dest:
                raise ValueError(f"release package {built.name} does not match its manifest path {item['path']}")
        else:
            source_tarball(FIXTURES / item["source"], item["top"], dest)
        digest = hashlib.sha256(dest.read_bytes()).hexdigest()
        sums.setdefault(item["tool"], {}).setdefault(item["version"], {})[dest.name] = digest
        lines.append(f"{digest}  {Path(item['path']).relative_to('releases')}")
    if sums:
        (out / "releases" / "SHA256SUMS").write_text("\n".join(lines) + "\n")
        (out / "releases" / "sha256sums.json").write_text(json.dumps(sums, indent=2, sort_keys=True) + "\n")
    return sums


GPG = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]


def make_key(home: str, out: Path, uid: str = "kiln fixture repository signing key (throwaway)") -> str:
    """Generate a throwaway signing key in the (empty) gpg home `home`; write key.asc and fingerprint.txt
    to out. Returns the fingerprint."""
    env = dict(os.environ, GNUPGHOME=home)
    subprocess.run(GPG + ["--quick-gen-key", uid, "ed25519", "sign", "never"], env=env, check=True,
                   capture_output=True)
    listing = subprocess.run(["gpg", "--batch", "--with-colons", "--list-keys"], env=env, check=True,
                             capture_output=True, text=True).stdout
    fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    key = subprocess.run(["gpg", "--batch", "--armor", "--export", fpr], env=env, check=True,
                         capture_output=True).stdout
    (out / "key.asc").write_bytes(key)
    (out / "fingerprint.txt").write_text(fpr + "\n")
    return fpr


def sign(repo_dirs: list[Path], out: Path, home: str, fpr: str) -> None:
    """Sign the APT repositories (InRelease, Release.gpg) with the key make_key made."""
    env = dict(os.environ, GNUPGHOME=home)
    for repo_dir in repo_dirs:
        subprocess.run(GPG + ["--local-user", fpr, "--clearsign", "-o", str(repo_dir / "InRelease"),
                              str(repo_dir / "Release")], env=env, check=True)
        subprocess.run(GPG + ["--local-user", fpr, "--armor", "--detach-sign", "-o",
                              str(repo_dir / "Release.gpg"), str(repo_dir / "Release")], env=env, check=True)
        shutil.copy(out / "key.asc", repo_dir / "key.asc")


def publish_for_other_distros(manifest: dict[str, Any], root: Path) -> list[Path]:
    """Publish a signed flat repository under the other distributions' directories its manifest entry
    names (`also: [<path>...]`): NVIDIA builds the same names and versions for Debian 12 and Ubuntu
    22.04/24.04 (compute/cuda/repos/ubuntu2404/x86_64/ carries nvidia-open-580=580.95.05-1 as
    debian12/ does). Hard links, so the copies cost no space. Returns the directories made."""
    made: list[Path] = []
    for repo in manifest["repos"].values():
        for other in repo.get("also") or []:
            src, dest = root / repo["path"], root / other
            dest.mkdir(parents=True)
            for path in sorted(src.iterdir()):
                os.link(path, dest / path.name)
            made.append(dest)
    return made


def build(out: Path) -> None:
    if (out / ".complete").exists():
        print(f"[kiln-fixture] repository {out} is current: reusing it", file=sys.stderr)
        return
    import fixture_rpm  # here, not at the top: it imports this module

    manifest = yaml.safe_load(MANIFEST.read_text())
    tmp_out = Path(tempfile.mkdtemp(prefix="kiln-repo-", dir=out.parent))
    with tempfile.TemporaryDirectory(prefix="kiln-debs-") as work, \
            tempfile.TemporaryDirectory(prefix="kiln-gpg-") as home:
        # One throwaway key for everything: the RPMs are signed as they are built, the APT repositories last.
        fpr = make_key(home, tmp_out)
        layout = repo_layout(manifest)
        repo_dirs = {name: pool_dir(tmp_out, repo) for name, repo in layout.items()}
        for path in repo_dirs.values():
            path.mkdir(parents=True)
        specs = package_specs(manifest)
        for spec in specs:
            build_deb(spec, repo_dirs[spec["repo"]], Path(work))
        # The EL distribution stand-in (Rocky's BaseOS/AppStream, EPEL) is signed by a key of its own, as
        # Rocky's are: the node trusts it from its image, and kiln imports NVIDIA's key itself.
        dist_home = Path(work) / "gnupg-distribution"
        dist_home.mkdir(mode=0o700)
        dist_fpr = make_key(str(dist_home), dist_home, "kiln fixture distribution signing key (throwaway)")
        # its fingerprint, for the inventories that pin it (tests/playbooks/mirror_el9)
        (tmp_out / "el9").mkdir(parents=True, exist_ok=True)
        (tmp_out / "el9" / "fingerprint.txt").write_text(dist_fpr + "\n")
        el_count = fixture_rpm.build_el(yaml.safe_load(MANIFEST_EL.read_text()), tmp_out, Path(work) / "el9",
                                        home, fpr, {"distribution": (str(dist_home), dist_fpr)})
        release_dirs = [write_index(tmp_out, repo) for repo in layout.values()]
        sign(release_dirs, tmp_out, home, fpr)
        publish_for_other_distros(manifest, tmp_out)
        build_releases(manifest, tmp_out, Path(work))
    (tmp_out / ".complete").write_text(f"{len(specs)} packages, {el_count} EL9 packages\n")
    if out.exists():
        shutil.rmtree(out)
    tmp_out.rename(out)
    print(f"[kiln-fixture] built {len(specs)} Debian and {el_count} EL9 packages into {out}", file=sys.stderr)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "--hash":
        print(input_hash())
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1]).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    build(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
