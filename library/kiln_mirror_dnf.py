#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: build the dnf (EL) part of kiln's offline mirror for one target OS."""
from __future__ import annotations

DOCUMENTATION = r"""
module: kiln_mirror_dnf
short_description: Mirror the dependency closure of an EL target's kiln packages into site-signed rpm-md repositories
description:
  - Runs on the machine that builds the mirror (playbooks/mirror.yml, on the controller). For one dnf target of
    C(kiln_mirror_plan) it makes a private, empty dnf C(--installroot) under O(work_dir) with its own reposdir,
    cachedir, persistdir, vars and plugin configuration (nothing of the build machine's own dnf or rpm state is
    read or changed). Its only repositories are the target's upstreams, each C(gpgcheck=1), C(repo_gpgcheck=1)
    and C(gpgkey) a file holding only the key kiln pins for it; a key file is refused unless it holds exactly
    that one key.
  - Each upstream's C(repodata/repomd.xml) is verified against C(repomd.xml.asc) with C(gpgv) and the pinned key
    (recorded as C(upstream_checks)); its primary metadata (and module metadata) is checked against the sha256
    the signed repomd.xml gives.
  - The target's module streams are enabled in the installroot, then C(dnf download --resolve --alldeps)
    computes and fetches the closure of the requests (from nothing: every dependency down to glibc; no weak
    dependencies, as kiln installs). Every file must match the sha256 of its upstream's signed primary
    metadata and carry a package signature by that upstream's pinned key (C(rpmkeys --checksig) on a private
    rpm database holding only that key). A request missing from the closure fails the build.
  - The served tree is then rebuilt, one repository per upstream at its C(serve) path under O(mirror_dir):
    the packages re-signed by the site key O(site_key) (C(rpmsign --addsign)), indexed with C(createrepo_c),
    the module documents of the target's streams added with C(modifyrepo_c --mdtype=modules), and
    C(repodata/repomd.xml) signed by the site key (detached, armored C(repomd.xml.asc)). The key's public half
    is written to C(kiln-mirror.asc). Unchanged inputs leave the tree as it is (changed false).
  - Check mode computes the closure and says whether the tree would change; it writes nothing under O(mirror_dir).
options:
  target:
    description: One element of C(kiln_mirror_plan)'s targets (dnf only).
    type: dict
    required: true
  mirror_dir:
    description: Root of the mirror tree being built.
    type: path
    required: true
  work_dir:
    description: Private dnf installroots, the download cache, rpm databases and the state file (kept between runs).
    type: path
    required: true
  gpg_home:
    description: GnuPG home holding the site key's secret half.
    type: path
    required: true
  site_key:
    description: Full fingerprint of the site key that signs the mirror.
    type: str
    required: true
author: kiln
"""

EXAMPLES = r"""
- name: Build the dnf mirror of one EL OS
  kiln_mirror_dnf:
    target: "{{ item }}"
    mirror_dir: /srv/build/mirror
    work_dir: /srv/build/work
    gpg_home: /root/kiln-site-gnupg
    site_key: "{{ kiln_mirror_key }}"
  loop: "{{ kiln_mirror.targets | selectattr('pkg_mgr', 'eq', 'dnf') }}"
"""

RETURN = r"""
packages:
  description:
    - The closure, one entry per file ({name, version, release, arch, upstream, serve, filename, path, sha256, size,
      upstream_sha256, upstream_size}); C(sha256)/C(size) are the served (site-signed) file's, C(path) its path
      under O(mirror_dir).
  returned: always
  type: list
  elements: dict
upstream_checks:
  description: Per upstream, its signed repomd.xml verified ({repository, url, file, fingerprint, verified}).
  returned: always
  type: list
  elements: dict
modules:
  description: The module streams enabled for the closure and served with the cuda (or owning) repository.
  returned: always
  type: list
  elements: str
bytes:
  description: Total size of the served packages.
  returned: always
  type: int
"""

import gzip
import hashlib
import json
import lzma
import os
import shutil
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible.module_utils.kiln.mirror.apt import MirrorError, validsig
from ansible.module_utils.kiln.mirror.dnf import (
    check_fingerprint,
    check_stream,
    dnf_argv,
    key_listing_problem,
    missing_requests,
    parse_checksig,
    parse_primary,
    parse_repomd,
    primary_index,
    repo_enable_argv,
    repo_file,
    rpm_fields,
    select_modules,
)
from ansible.module_utils.kiln.mirror.build import fetch, run_checked, sha256_file
from ansible.module_utils.kiln.process import run_argv


def _fetch(url: str) -> bytes:
    return fetch(url, open_url, timeout=120)


def _unpack(data: bytes, href: str) -> bytes:
    if href.endswith(".gz"):
        return gzip.decompress(data)
    if href.endswith(".xz"):
        return lzma.decompress(data)
    if href.endswith((".zst", ".bz2")):
        raise MirrorError(f"{href}: {href.rsplit('.', 1)[-1]}-compressed metadata is not read by this build")
    return data


def _keys(up: dict[str, Any], keydir: str) -> tuple[str, str]:
    """The upstream's key, refused unless it is exactly the pinned one: (armored file for dnf/rpm, keyring for gpgv)."""
    name = up["name"]
    var = up.get("fingerprint_var") or f"kiln_mirror_upstreams.{name}.fingerprint"
    fpr = check_fingerprint(up.get("fingerprint"), var)
    if not up.get("key_url"):
        raise MirrorError(f"the {name} upstream has no key_url. Fix: set kiln_mirror_upstreams.{name}.key_url")
    try:
        data = _fetch(up["key_url"])
    except Exception as exc:  # noqa: BLE001 - any fetch failure is reported with the URL
        raise MirrorError(f"cannot read the {name} key {up['key_url']}: {exc}") from exc
    with tempfile.TemporaryDirectory() as home:
        keyfile = os.path.join(home, "key")
        with open(keyfile, "wb") as handle:
            handle.write(data)
        shown = run_argv(["gpg", "--homedir", home, "--batch", "--with-colons", "--show-keys", keyfile])
        problem = key_listing_problem(shown.get("stdout") or "", fpr)
        if problem:
            raise MirrorError(f"the {name} key {up['key_url']} {problem} ({var}): nothing is trusted. Fix: point "
                              f"kiln_mirror_upstreams.{name}.key_url at a file holding only the key that signs it")
        run_checked(["gpg", "--homedir", home, "--batch", "--quiet", "--import", keyfile], f"importing the {name} key")
        armored = os.path.join(keydir, f"{name}.asc")
        keyring = os.path.join(keydir, f"{name}.gpg")
        run_checked(["gpg", "--homedir", home, "--batch", "--yes", "--armor", "--output", armored, "--export", fpr],
             f"exporting the {name} key")
        run_checked(["gpg", "--homedir", home, "--batch", "--yes", "--output", keyring, "--export", fpr],
             f"exporting the {name} key")
    return armored, keyring


def _metadata(up: dict[str, Any], keyring: str, meta: str) -> tuple[dict[str, Any], dict[str, set[str]], str]:
    """repomd.xml verified by the pinned key; the primary index and the modules.yaml text it vouches for."""
    name, fpr = up["name"], check_fingerprint(up["fingerprint"], str(up.get("fingerprint_var")))
    base = up["url"].rstrip("/") + "/"
    os.makedirs(meta, exist_ok=True)
    files = {}
    for fname in ("repomd.xml", "repomd.xml.asc"):
        try:
            files[fname] = _fetch(base + "repodata/" + fname)
        except Exception as exc:  # noqa: BLE001 - reported with the URL
            raise MirrorError(f"cannot read {base}repodata/{fname} of the {name} upstream ({exc}); an upstream without a "
                              f"signed repomd.xml is not trusted (repo_gpgcheck)") from exc
        with open(os.path.join(meta, fname), "wb") as handle:
            handle.write(files[fname])
    res = run_argv(["gpgv", "--status-fd", "1", "--keyring", keyring, os.path.join(meta, "repomd.xml.asc"),
                    os.path.join(meta, "repomd.xml")])
    out = res.get("stdout") or ""
    if fpr not in validsig(out) or "[GNUPG:] BADSIG" in out:
        raise MirrorError(f"{base}repodata/repomd.xml of the {name} upstream is not signed by its pinned key {fpr} "
                          f"({up.get('fingerprint_var')}): refused")
    check = {"repository": name, "url": up["url"], "file": "repodata/repomd.xml", "fingerprint": fpr, "verified": True}
    repomd = parse_repomd(files["repomd.xml"])

    def part(kind: str) -> bytes:
        entry = repomd[kind]
        if entry["checksum_type"] != "sha256":
            raise MirrorError(f"the {name} repomd.xml gives {kind} a {entry['checksum_type'] or 'no'} checksum, not sha256")
        data = _fetch(base + entry["href"])
        if hashlib.sha256(data).hexdigest() != entry["checksum"]:
            raise MirrorError(f"{base}{entry['href']} does not match the sha256 of the signed repomd.xml: refused")
        return _unpack(data, entry["href"])

    index = primary_index(parse_primary(part("primary")))
    modules = part("modules").decode("utf-8", errors="replace") if "modules" in repomd else ""
    return check, index, modules


def _checksig(paths: list[str], up: dict[str, Any], key: str, dbpath: str) -> None:
    """Every file signed by the upstream's pinned key (a private rpm database holding only that key)."""
    shutil.rmtree(dbpath, ignore_errors=True)
    os.makedirs(dbpath)
    run_checked(["rpmkeys", "--dbpath", dbpath, "--import", key], f"importing the {up['name']} key into a private rpm database")
    res = run_argv(["rpmkeys", "--dbpath", dbpath, "--checksig"] + paths)
    verdict = parse_checksig(res.get("stdout") or "")
    for path in paths:
        if not verdict.get(path):
            raise MirrorError(f"{os.path.basename(path)} from the {up['name']} upstream ({up['url']}) carries no valid "
                              f"signature by the pinned key {up['fingerprint']} ({up.get('fingerprint_var')}): refused. "
                              f"Fix: pin the key that signs that repository's packages, or mirror another repository")


def _serve(target: dict[str, Any], packages: list[dict[str, Any]], modules: dict[str, str], mirror: str,
           gpg_home: str, key: str) -> None:
    """Rebuild each upstream's rpm-md repository from the checked files, re-signed and indexed under the site key."""
    for up in target["upstreams"]:
        out = os.path.join(mirror, up["serve"])
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        mine = [p for p in packages if p["upstream"] == up["name"]]
        for p in mine:
            shutil.copy2(p["source"], os.path.join(out, p["filename"]))
        if mine:
            run_checked(["rpmsign", "--define", f"__gpg {shutil.which('gpg') or '/usr/bin/gpg'}",
                  "--define", f"_gpg_name {key}", "--define", f"_gpg_path {gpg_home}",
                  "--define", "_gpg_digest_algo sha256", "--addsign"] + [os.path.join(out, p["filename"]) for p in mine],
                 f"signing the packages of {up['serve']}")
        for p in mine:
            path = os.path.join(out, p["filename"])
            p["sha256"], p["size"] = sha256_file(path), os.path.getsize(path)
        run_checked(["createrepo_c", "--quiet", "--no-database", "--simple-md-filenames", "--revision", "kiln-mirror", out],
             f"indexing {up['serve']}")
        if modules.get(up["name"]):
            with tempfile.TemporaryDirectory() as tmp:
                mod = os.path.join(tmp, "modules.yaml")
                with open(mod, "w", encoding="utf-8") as handle:
                    handle.write(modules[up["name"]])
                run_checked(["modifyrepo_c", "--mdtype=modules", "--simple-md-filenames", mod,
                      os.path.join(out, "repodata")], f"adding module metadata to {up['serve']}")
        repomd = os.path.join(out, "repodata", "repomd.xml")
        run_checked(["gpg", "--homedir", gpg_home, "--batch", "--yes", "--local-user", key, "--armor", "--detach-sign",
              "--output", repomd + ".asc", repomd], f"signing {up['serve']}/repodata/repomd.xml")


def build(module: AnsibleModule) -> dict[str, Any]:
    p = module.params
    target = p["target"]
    key = check_fingerprint(p["site_key"], "site_key (kiln_mirror_key)")
    if target.get("pkg_mgr") != "dnf":
        raise MirrorError(f"target {target.get('os')} is not a dnf target")
    streams = [str(s) for s in target.get("modules") or []]
    for s in streams:
        check_stream(s)
    work = os.path.join(p["work_dir"], "dnf", str(target["os"]))
    root = os.path.join(work, "root")
    shutil.rmtree(root, ignore_errors=True)  # empty every run: the closure is computed from nothing
    for sub in ("root", "repos.d", "cache", "persist", "log", "vars", "plugins", "keys", "meta", "rpmdb", "download"):
        os.makedirs(os.path.join(work, sub), exist_ok=True)
    with open(os.path.join(work, "dnf.conf"), "w", encoding="utf-8") as handle:
        handle.write("[main]\ngpgcheck=1\nrepo_gpgcheck=1\ninstall_weak_deps=0\nreposdir=" + os.path.join(work, "repos.d") + "\n")
    keys: dict[str, str] = {}
    checks: list[dict[str, Any]] = []
    indexes: dict[str, dict[str, set[str]]] = {}
    modules: dict[str, str] = {}
    lost_streams = set(streams)
    for up in target["upstreams"]:
        keys[up["name"]], keyring = _keys(up, os.path.join(work, "keys"))
        check, indexes[up["name"]], mod_text = _metadata(up, keyring, os.path.join(work, "meta", up["name"]))
        checks.append(check)
        mine = [s for s in streams if s in lost_streams]
        if mod_text and mine:
            body, lost = select_modules(mod_text, mine)
            if body:
                modules[up["name"]] = body
            lost_streams &= set(lost)
    if lost_streams:
        raise MirrorError(f"no upstream of {target['os']} carries the module stream(s) {', '.join(sorted(lost_streams))} "
                          f"in its module metadata: the driver cannot be mirrored")
    with open(os.path.join(work, "repos.d", "kiln-mirror.repo"), "w", encoding="utf-8") as handle:
        handle.write(repo_file(target["upstreams"], keys))
    dnf = dnf_argv(root, work, str(target.get("releasever") or ""), str(target["arch"])) + repo_enable_argv(target["upstreams"])
    if streams:
        run_checked(dnf + ["module", "enable"] + streams, f"enabling {', '.join(streams)} in the private {target['os']} installroot")
    dest = os.path.join(work, "download")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    requests = [str(r) for r in target["requests"]]
    run_checked(dnf + ["download", "--resolve", "--alldeps", f"--destdir={dest}", "--"] + requests,
         f"dnf download --resolve of the {target['os']} requests")
    packages: list[dict[str, Any]] = []
    by_up: dict[str, list[str]] = {}
    for fname in sorted(os.listdir(dest)):
        if not fname.endswith(".rpm"):
            continue
        path = os.path.join(dest, fname)
        name, version, release, arch = rpm_fields(fname)
        digest = sha256_file(path)
        owner = next((up for up in target["upstreams"] if digest in indexes[up["name"]].get(fname, set())), None)
        if owner is None:
            raise MirrorError(f"{fname} (sha256 {digest}) matches no package of the signed primary metadata of the "
                              f"{target['os']} upstreams: refused")
        by_up.setdefault(owner["name"], []).append(path)
        packages.append({"name": name, "version": version, "release": release, "arch": arch, "upstream": owner["name"],
                         "serve": owner["serve"], "filename": fname, "path": f"{owner['serve']}/{fname}",
                         "upstream_sha256": digest, "upstream_size": os.path.getsize(path), "source": path})
    lost = missing_requests(requests, packages)
    if lost:
        raise MirrorError(f"dnf's closure of the {target['os']} requests lacks {', '.join(lost[:10])}: the mirror would "
                          f"not serve them; nothing was built")
    for up in target["upstreams"]:
        if by_up.get(up["name"]):
            _checksig(by_up[up["name"]], up, keys[up["name"]], os.path.join(work, "rpmdb", up["name"]))
    state = hashlib.sha256(json.dumps({"key": key, "upstreams": target["upstreams"], "modules": modules,
                                       "files": sorted((pk["serve"], pk["filename"], pk["upstream_sha256"]) for pk in packages)},
                                      sort_keys=True).encode()).hexdigest()
    state_file = os.path.join(p["work_dir"], f"state-dnf-{target['os']}.json")
    served = all(os.path.isfile(os.path.join(p["mirror_dir"], up["serve"], "repodata", "repomd.xml.asc"))
                 for up in target["upstreams"])
    try:
        with open(state_file, encoding="utf-8") as handle:
            previous = json.load(handle)
        recorded = previous.get("served") if isinstance(previous, dict) else None
        same = (previous.get("state") == state and served and isinstance(recorded, dict)
                and all(pk["path"] in recorded and os.path.isfile(os.path.join(p["mirror_dir"], pk["path"]))
                        for pk in packages))
    except (OSError, ValueError, AttributeError):
        previous, same = {}, False
    if same:
        for pk in packages:
            pk["sha256"], pk["size"] = previous["served"][pk["path"]]
    elif not module.check_mode:
        os.makedirs(p["mirror_dir"], exist_ok=True)
        _serve(target, packages, modules, p["mirror_dir"], p["gpg_home"], key)
        pub = run_checked(["gpg", "--homedir", p["gpg_home"], "--batch", "--armor", "--export", key], "exporting the site key")
        with open(os.path.join(p["mirror_dir"], "kiln-mirror.asc"), "w", encoding="utf-8") as handle:
            handle.write(pub["stdout"])
        with open(state_file, "w", encoding="utf-8") as handle:
            json.dump({"state": state, "served": {pk["path"]: [pk["sha256"], pk["size"]] for pk in packages}}, handle,
                      sort_keys=True)
    else:  # check mode: the served files are not made; say what the upstream ones are
        for pk in packages:
            pk["sha256"], pk["size"] = pk["upstream_sha256"], pk["upstream_size"]
    return {"changed": not same, "packages": [{k: v for k, v in pk.items() if k != "source"} for pk in packages],
            "upstream_checks": checks, "modules": streams, "bytes": sum(pk["size"] for pk in packages)}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "target": {"type": "dict", "required": True},
            "mirror_dir": {"type": "path", "required": True},
            "work_dir": {"type": "path", "required": True},
            "gpg_home": {"type": "path", "required": True},
            "site_key": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**build(module))
    except (MirrorError, OSError, KeyError, ValueError, EOFError, lzma.LZMAError) as exc:
        module.fail_json(msg=f"kiln_mirror_dnf: {exc}")


if __name__ == "__main__":
    main()
