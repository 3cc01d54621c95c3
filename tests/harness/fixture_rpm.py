"""EL9 (Rocky/RHEL 9) RPM repositories of kiln's fixture of NVIDIA's repositories.

Reads tests/fixtures/nvidia-repo/manifest-el9.yml (passed in as a dict), builds every package with rpmbuild
(one spec per package, rendered here; contents staged from the same sources as the Debian fixture:
fixture_repo.content_for, fixture_repo.fake_module), signs them with rpmsign and the fixture's throwaway key,
writes each repository's repodata with createrepo_c, adds modules.yaml (modulemd v2, the nvidia-driver
streams) with modifyrepo_c where the manifest defines modules, and signs repodata/repomd.xml (detached,
armored: repodata/repomd.xml.asc) as NVIDIA's repositories are. Called by fixture_repo.build; the
repositories go to compute/cuda/repos/rhel9/x86_64/, libnvidia-container/stable/rpm/x86_64/ and
el9/base/x86_64/ (stand-ins of the distribution's packages) under the fixture root.

Test fixture only: nothing here is shipped by a role.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

import fixture_repo

ARCH = "x86_64"
# Shell text: never str.format-expanded.
SCRIPT_KEYS = ("pre", "post", "preun")
STANDIN_DIR = "/usr/share/kiln-fixture/el9-standin"
# Reproducible where cheap: build time and file mtimes from this epoch (2026-01-01).
SOURCE_DATE_EPOCH = "1767225600"


def expand(value: Any, fields: dict[str, str]) -> Any:
    """str.format every string of value (dicts, lists), with fields."""
    if isinstance(value, str):
        return value.format(**fields)
    if isinstance(value, dict):
        return {expand(k, fields): expand(v, fields) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v, fields) for v in value]
    return value


def expand_entry(entry: dict[str, Any], fields: dict[str, str]) -> dict[str, Any]:
    """A manifest package entry with its fields formatted; scriptlets (shell text) are kept as written."""
    out = expand({k: v for k, v in entry.items() if k not in SCRIPT_KEYS}, fields)
    out.update({k: entry[k] for k in SCRIPT_KEYS if k in entry})
    return out


def nevra(pkg: dict[str, Any]) -> str:
    """name-epoch:version-release.arch as modulemd artifacts spell it (no package has an Epoch: 0)."""
    return f"{pkg['name']}-0:{pkg['version']}-{pkg['release']}.{pkg.get('arch', ARCH)}"


def standin_entry(item: dict[str, Any]) -> dict[str, Any]:
    """A package of manifest `base_standins`: the EL name and version, a marker file only."""
    name = item["name"]
    return {"repo": item.get("repo", "base"), "name": name, "version": str(item["version"]),
            "release": str(item["release"]), "arch": "noarch", "provides": list(item.get("provides") or []),
            "requires": list(item.get("requires") or []), "license": item.get("license", "MIT"),
            "files": {f"{STANDIN_DIR}/{name}": f"text:kiln fixture stand-in of the EL9 package {name}"},
            "description": item.get("description", f"Stand-in of the distribution's {name}"),
            "fixture_note": f"Stand-in: carries only the marker {STANDIN_DIR}/{name}; the programs are the "
                            "node's own (its root is Debian's)."}


def package_entries(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every package to build: per_driver entries once per driver version of each branch (fields v, branch;
    release driver_release unless given), per_toolkit entries once per toolkit version (field t), then the
    base stand-ins. A per_driver package keeps its `branch` (module streams select by it)."""
    out: list[dict[str, Any]] = []
    for entry in manifest["packages"]:
        if entry.get("per_driver"):
            for branch in manifest["driver_branches"]:
                for version in branch["versions"]:
                    pkg = expand_entry(entry, {"v": str(version), "branch": str(branch["branch"])})
                    pkg.setdefault("release", str(manifest["driver_release"]))
                    pkg["branch"] = str(branch["branch"])
                    out.append(pkg)
        elif entry.get("per_toolkit"):
            for version in manifest["toolkit_versions"]:
                out.append(expand_entry(entry, {"t": str(version)}))
        else:
            out.append(expand_entry(entry, {}))
    out += [standin_entry(item) for item in manifest.get("base_standins") or []]
    for pkg in out:
        pkg["version"], pkg["release"] = str(pkg["version"]), str(pkg["release"])
        if "-" in pkg["version"] or "-" in pkg["release"]:
            raise ValueError(f"{pkg['name']}: an RPM version/release cannot carry a hyphen: "
                             f"{pkg['version']}-{pkg['release']}")
    return out


def kmod_dir(pkg: dict[str, Any]) -> str:
    return f"/usr/src/nvidia-{pkg['version']}"


def file_list(pkg: dict[str, Any]) -> list[str]:
    """The paths a package ships (files, symlinks, repacked files, the kmod's module and dkms.conf)."""
    paths = list(pkg.get("files") or {}) + list(pkg.get("links") or {})
    paths += list((pkg.get("repack") or {}).get("files") or {})
    if pkg.get("kmod"):
        paths += [f"{kmod_dir(pkg)}/nvidia.ko", f"{kmod_dir(pkg)}/dkms.conf"]
    return sorted(paths)


def dir_list(pkg: dict[str, Any]) -> list[str]:
    """Directories the package owns (%dir)."""
    return sorted(list(pkg.get("dirs") or []) + ([kmod_dir(pkg)] if pkg.get("kmod") else []))


def scriptlets(pkg: dict[str, Any]) -> dict[str, str]:
    """%pre/%post/%preun bodies. kmod: %post copies the module as DKMS would build it, for the running kernel
    and every kernel under /lib/modules; %preun removes it on erase only ($1 = 0; an upgrade's new %post runs
    before the old %preun, which gets $1 = 1), and only when it is this package's module (sha256
    pkg['kmod_sha256']): when the open and proprietary flavors are swapped in one transaction the new %post
    runs before the old %preun."""
    out: dict[str, str] = {}
    if pkg.get("kmod"):
        src = f"{kmod_dir(pkg)}/nvidia.ko"
        out["post"] = (f"for k in $(uname -r) $(ls /lib/modules 2>/dev/null); do\n"
                       f"  mkdir -p /lib/modules/$k/extra\n"
                       f"  cp {src} /lib/modules/$k/extra/nvidia.ko\n"
                       f"  depmod -a $k 2>/dev/null || true\n"
                       f"done\n")
        out["preun"] = (f'if [ "$1" = 0 ]; then\n'
                        f"  for ko in /lib/modules/*/extra/nvidia.ko; do\n"
                        f'    [ -f "$ko" ] || continue\n'
                        f'    echo "{pkg.get("kmod_sha256", "")}  $ko" | sha256sum -c --status - || continue\n'
                        f'    rm -f "$ko"\n'
                        f'    depmod -a "$(echo "$ko" | cut -d/ -f4)" 2>/dev/null || true\n'
                        f"  done\n"
                        f"fi\n")
    if pkg.get("alternatives"):
        # update-alternatives, not EL's `alternatives` (same arguments): the node's root is Debian's.
        out["post"] = "".join(f"update-alternatives --install /usr/local/{name} {name} {target} 130\n"
                              for name, target in pkg["alternatives"].items())
        out["preun"] = ('if [ "$1" = 0 ]; then\n'
                        + "".join(f"  update-alternatives --remove {name} {target}\n"
                                  for name, target in pkg["alternatives"].items())
                        + "fi\n")
    for key in SCRIPT_KEYS:
        if pkg.get(key):
            out[key] = pkg[key]
    return out


def render_spec(pkg: dict[str, Any]) -> str:
    """The .spec of one package entry (as package_entries gives it). Files are copied in %install from the
    staging tree named by the macro kiln_stage (rpmbuild --define "kiln_stage DIR")."""
    lines = ["%define debug_package %{nil}", "%define __os_install_post %{nil}", "%define _build_id_links none",
             "%define _binary_payload w2.xzdio", "",
             f"Name: {pkg['name']}", f"Version: {pkg['version']}", f"Release: {pkg['release']}",
             f"Summary: {pkg['description'].splitlines()[0]}", f"License: {pkg.get('license', 'NVIDIA Proprietary')}",
             f"BuildArch: {pkg.get('arch', ARCH)}", "AutoReqProv: no"]
    for field in ("requires", "provides", "conflicts"):
        lines += [f"{field.capitalize()}: {dep}" for dep in pkg.get(field) or []]
    note = pkg.get("fixture_note", "contents are stand-ins (emulators, placeholders).")
    lines += ["", "%description", pkg["description"], "",
              "kiln test fixture: same name and version as the real package;", note, "",
              "%install", "mkdir -p %{buildroot}", "cp -a %{kiln_stage}/. %{buildroot}/", "",
              "%files", "%defattr(-,root,root,-)"]
    lines += [f"%dir {d}" for d in dir_list(pkg)]
    lines += file_list(pkg)
    for key, body in scriptlets(pkg).items():
        lines += ["", f"%{key}", body.rstrip("\n")]
    return "\n".join(lines) + "\n"


def render_modules(manifest: dict[str, Any]) -> dict[str, str]:
    """modules.yaml text (modulemd v2) per repository key: one document per module, driver branch and stream,
    whose artifacts are every built version (of that branch) of the stream's packages."""
    packages = package_entries(manifest)
    docs: dict[str, list[dict[str, Any]]] = {}
    for name, module in (manifest.get("modules") or {}).items():
        for branch in manifest["driver_branches"]:
            fields = {"branch": str(branch["branch"])}
            for stream in module["streams"]:
                stream_name = stream["stream"].format(**fields)
                wanted = set(stream["artifacts"])
                artifacts = sorted(nevra(p) for p in packages
                                   if p["name"] in wanted and p.get("branch") == fields["branch"])
                text = {"stream": stream_name, **fields}
                docs.setdefault(module["repo"], []).append({"document": "modulemd", "version": 2, "data": {
                    "name": name, "stream": stream_name, "version": int(module["version"]),
                    "context": hashlib.sha256(f"{name}:{stream_name}".encode()).hexdigest()[:8], "arch": ARCH,
                    "summary": module["summary"].format(**text), "description": module["description"].format(**text),
                    "license": {"module": list(module["license"])},
                    "profiles": {p: {"rpms": list(rpms)} for p, rpms in stream["profiles"].items()},
                    "artifacts": {"rpms": artifacts}}})
    return {repo: yaml.safe_dump_all(d, explicit_start=True, explicit_end=True, sort_keys=False, width=1000)
            for repo, d in docs.items()}


def rpm_name(pkg: dict[str, Any]) -> str:
    return f"{pkg['name']}-{pkg['version']}-{pkg['release']}.{pkg.get('arch', ARCH)}.rpm"


def stage(pkg: dict[str, Any], root: Path, workdir: Path) -> None:
    """Write the package's files into root (its future /); sets pkg['kmod_sha256'] for a kmod."""
    root.mkdir(parents=True)
    fixture_repo.stage_files(pkg, root, pkg["version"])
    for d in pkg.get("dirs") or []:
        (root / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
    if pkg.get("kmod"):
        src = root / kmod_dir(pkg).lstrip("/")
        src.mkdir(parents=True)
        module = fixture_repo.fake_module(pkg["version"], pkg["kmod"], workdir)
        (src / "nvidia.ko").write_bytes(module)
        (src / "dkms.conf").write_text(f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{pkg["version"]}"\n'
                                       'AUTOINSTALL="yes"\n')
        pkg["kmod_sha256"] = hashlib.sha256(module).hexdigest()
    if pkg.get("repack"):
        src = pkg["repack"]
        deb = fixture_repo.fetch_deb(src["package"], src["version"])
        with tempfile.TemporaryDirectory(prefix="repack-", dir=workdir) as tmp:
            subprocess.run(["dpkg-deb", "-x", str(deb), tmp], check=True)
            for dest, inside in src["files"].items():
                found = Path(tmp) / inside.lstrip("/")
                if not found.is_file():
                    raise FileNotFoundError(f"{pkg['name']}: {inside} is not in {deb.name}")
                path = root / dest.lstrip("/")
                path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(found, path)
    epoch = int(SOURCE_DATE_EPOCH)
    for path in [root, *root.rglob("*")]:
        os.utime(path, (epoch, epoch), follow_symlinks=False)


def rpmbuild(spec: Path, stage_dir: Path, topdir: Path, rpmdir: Path) -> None:
    defines = {"_topdir": str(topdir), "_build_id_links": "none", "kiln_stage": str(stage_dir),
               "_rpmdir": str(rpmdir), "_build_name_fmt": "%%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm",
               "use_source_date_epoch_as_buildtime": "1", "clamp_mtime_to_source_epoch": "1",
               "_buildhost": "kiln-fixture.invalid"}
    argv = ["rpmbuild", "-bb", "--quiet"]
    for key, value in defines.items():
        argv += ["--define", f"{key} {value}"]
    env = dict(os.environ, SOURCE_DATE_EPOCH=SOURCE_DATE_EPOCH, LC_ALL="C")
    result = subprocess.run(argv + [str(spec)], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"rpmbuild {spec.name} failed:\n{result.stdout}{result.stderr}")


def build_el(manifest: dict[str, Any], out: Path, workdir: Path, gnupghome: str, fpr: str,
             signers: dict[str, tuple[str, str]] | None = None) -> int:
    """Build, sign and index the EL repositories of manifest under out (the fixture root), signing with the
    key fpr of the gpg home gnupghome -- or, for a repository whose manifest entry names a `signer`, with
    that signer's (gpg home, fingerprint) from signers (the distribution stand-in has its own key, as Rocky's
    repositories have Rocky's). Each repository gets its signer's public key as key.asc. Returns the number of
    packages built."""
    for tool in ("rpmbuild", "rpmsign", "createrepo_c", "modifyrepo_c", "dpkg-deb", "gpg"):
        if not shutil.which(tool):
            raise SystemExit(f"[kiln-fixture] {tool} is missing: run tests/harness/testbed.sh (it installs rpm, "
                             "createrepo-c)")
    repos = {key: out / repo["path"] for key, repo in manifest["repos"].items()}
    keys = {key: key_of(repo, gnupghome, fpr, signers or {}) for key, repo in manifest["repos"].items()}
    packages = package_entries(manifest)
    jobs: list[tuple[Path, Path, Path, Path]] = []
    for pkg in packages:
        base = workdir / pkg["repo"] / rpm_name(pkg)[:-len(".rpm")]
        stage(pkg, base / "root", workdir)
        spec = base / f"{pkg['name']}.spec"
        spec.write_text(render_spec(pkg))
        repos[pkg["repo"]].mkdir(parents=True, exist_ok=True)
        jobs.append((spec, base / "root", base / "rpmbuild", repos[pkg["repo"]]))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(lambda job: rpmbuild(*job), jobs))
    for key in repos:
        rpms = [str(repos[p["repo"]] / rpm_name(p)) for p in packages if p["repo"] == key]
        if rpms:
            home, signer = keys[key]
            subprocess.run(["rpmsign", "--define", f"_gpg_name {signer}", "--define", "__gpg /usr/bin/gpg",
                            "--addsign", *rpms], env=dict(os.environ, GNUPGHOME=home), check=True,
                           capture_output=True)
    modules = render_modules(manifest)
    for key, path in repos.items():
        if not path.is_dir():
            continue
        home, signer = keys[key]
        env = dict(os.environ, GNUPGHOME=home)
        subprocess.run(["createrepo_c", "-q", "--general-compress-type=gz", str(path)], check=True)
        if key in modules:
            text = workdir / f"modules-{key}" / "modules.yaml"
            text.parent.mkdir(parents=True)
            text.write_text(modules[key])
            subprocess.run(["modifyrepo_c", "--mdtype=modules", "--compress-type=gz", str(text),
                            str(path / "repodata")], check=True, stdout=subprocess.DEVNULL)
        repomd = path / "repodata" / "repomd.xml"
        subprocess.run(["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", "",
                        "--local-user", signer, "--armor", "--detach-sign", "-o", f"{repomd}.asc", str(repomd)],
                       env=env, check=True)
        (path / "key.asc").write_bytes(subprocess.run(["gpg", "--batch", "--armor", "--export", signer], env=env,
                                                      check=True, capture_output=True).stdout)
    return len(packages)


def key_of(repo: dict[str, Any], gnupghome: str, fpr: str, signers: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """(gpg home, fingerprint) that signs a repository: its manifest `signer`'s, else the fixture's key."""
    name = repo.get("signer")
    if name is None:
        return gnupghome, fpr
    if name not in signers:
        raise ValueError(f"repository {repo.get('path')} names signer {name!r}, which the build does not have "
                         f"({sorted(signers) or 'none'})")
    return signers[name]
