#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: build the apt part of kiln's offline mirror for one target OS."""
from __future__ import annotations

DOCUMENTATION = r"""
module: kiln_mirror_apt
short_description: Mirror the dependency closure of a target OS's kiln packages into site-signed apt repositories
description:
  - Runs on the machine that builds the mirror (playbooks/mirror.yml, on the controller). For one target of
    C(kiln_mirror_plan) it makes a private apt root (nothing of the build machine's own apt state is read or
    changed) whose sources are the target's upstream repositories, each C(signed-by) a keyring holding only the
    key kiln pins for it; the key file is refused unless it carries that full fingerprint.
  - C(apt-get update) there verifies every upstream index signature; the module records, per upstream, the
    signed index and the primary fingerprint C(gpgv) reports. C(apt-get install --print-uris) with an empty (or
    the given base) dpkg status computes the dependency closure of the requests against the target's own
    indexes, without recommends (as kiln's installs); each file is downloaded by apt (or copied, for file://
    upstreams) and checked against the size and SHA256 of the signed index.
  - The served tree is then rebuilt from those files, each upstream at its path under O(mirror_dir) in its own
    layout (flat repositories with C(apt-ftparchive), dists/pool ones with C(reprepro)), every Release signed
    by the site key O(site_key) from O(gpg_home); the key's public half is written to C(kiln-mirror.asc).
    Unchanged inputs (the same files, layout and key) leave the tree as it is (changed false).
  - Check mode computes the closure and says whether the tree would change; it writes nothing under O(mirror_dir).
options:
  target:
    description: One element of C(kiln_mirror_plan)'s targets (apt only).
    type: dict
    required: true
  mirror_dir:
    description: Root of the mirror tree being built.
    type: path
    required: true
  work_dir:
    description: Private apt roots, the download cache and reprepro databases (kept between runs).
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
  local_debs:
    description:
      - Package files the mirror carries as downloads (Enroot's release packages): not served from a repository,
        but their dependencies are part of the closure, which apt computes from the files themselves.
    type: list
    elements: path
    default: []
  base_status:
    description:
      - A dpkg status file of the site's base image: packages it already has (at those versions) are left out
        of the closure. Empty (the default) computes the closure from nothing: every dependency down to libc.
    type: path
    default: ""
author: kiln
"""

EXAMPLES = r"""
- name: Build the apt mirror of one OS
  kiln_mirror_apt:
    target: "{{ item }}"
    mirror_dir: /srv/build/mirror
    work_dir: /srv/build/work
    gpg_home: /root/kiln-site-gnupg
    site_key: "{{ kiln_mirror_key }}"
  loop: "{{ kiln_mirror.targets }}"
"""

RETURN = r"""
packages:
  description: The closure, one entry per file ({name, version, arch, upstream, serve, path, sha256, size}).
  returned: always
  type: list
  elements: dict
upstream_checks:
  description: Per upstream, each signed index verified ({repository, url, file, fingerprint, verified}).
  returned: always
  type: list
  elements: dict
bytes:
  description: Total size of the packages.
  returned: always
  type: int
"""

import hashlib
import json
import os
import shutil
import tempfile
import urllib.parse
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible.module_utils.kiln.mirror.apt import (
    MirrorError,
    apt_options,
    deb_fields,
    index_hashes,
    missing_requests,
    parse_packages_index,
    parse_print_uris,
    pinned_key_listing,
    reprepro_distributions,
    route,
    source_lines,
    validsig,
)
from ansible.module_utils.kiln.mirror.build import fetch, run_checked, sha256_file
from ansible.module_utils.kiln.process import run_argv


def _fetch(url: str) -> bytes:
    return fetch(url, open_url, timeout=60)


def _keyring(up: dict[str, Any], root: str) -> str:
    """The upstream's key, checked against its pin, exported alone into <root>/keyrings/<name>.gpg."""
    name, fpr = up["name"], str(up["fingerprint"]).upper()
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
        found, prims = pinned_key_listing(shown.get("stdout") or "", fpr)
        if not found:
            raise MirrorError(f"the {name} key {up['key_url']} holds {prims or 'no key'}, not the pinned {fpr} "
                              f"({up.get('fingerprint_var')}): nothing is trusted")
        run_checked(["gpg", "--homedir", home, "--batch", "--quiet", "--import", keyfile], f"importing the {name} key")
        out = os.path.join(root, "keyrings", f"{name}.gpg")
        run_checked(["gpg", "--homedir", home, "--batch", "--yes", "--output", out, "--export", fpr], f"exporting the {name} key")
    return out


def _checks(target: dict[str, Any], root: str, keyrings: dict[str, str]) -> list[dict[str, Any]]:
    """gpgv over every signed index apt fetched: which upstream's pinned key signed it."""
    lists = os.path.join(root, "lists")
    checks = []
    for up in target["upstreams"]:
        fpr = str(up["fingerprint"]).upper()
        for fname in sorted(os.listdir(lists)):
            if not fname.endswith("_InRelease"):
                continue
            res = run_argv(["gpgv", "--status-fd", "1", "--keyring", keyrings[up["name"]], os.path.join(lists, fname)])
            # An index may carry other signatures too (Debian's: the previous release's key, absent from this
            # keyring, so gpgv exits non-zero): what counts is a good one by the pinned key and no bad one.
            out = res.get("stdout") or ""
            if fpr in validsig(out) and "[GNUPG:] BADSIG" not in out:
                checks.append({"repository": up["name"], "url": up["url"], "file": fname, "fingerprint": fpr, "verified": True})
        if not any(c["repository"] == up["name"] for c in checks):
            raise MirrorError(f"no index of the {up['name']} upstream {up['url']} is signed by its pinned key {fpr} "
                              f"(or it serves no InRelease)")
    return checks


def _serve(target: dict[str, Any], packages: list[dict[str, Any]], mirror: str, work: str,
           gpg_home: str, key: str) -> None:
    """Rebuild each upstream's served tree from the checked files, signed by the site key."""
    for up in target["upstreams"]:
        out = os.path.join(mirror, up["serve"])
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        mine = [p for p in packages if p["upstream"] == up["name"]]
        if up["kind"] == "flat":
            for p in mine:
                shutil.copy2(p["path"], os.path.join(out, p["filename"]))
            pk = run_checked(["apt-ftparchive", "packages", out], f"indexing {up['serve']}")["stdout"]
            pk = pk.replace(f"Filename: {out}/", "Filename: ./")
            with open(os.path.join(out, "Packages"), "w", encoding="utf-8") as handle:
                handle.write(pk)
            rel = run_checked(["apt-ftparchive", "-o", "APT::FTPArchive::Release::Origin=kiln-mirror",
                        "-o", "APT::FTPArchive::Release::Label=kiln-mirror", "release", out], f"Release of {up['serve']}")
            with open(os.path.join(out, "Release"), "w", encoding="utf-8") as handle:
                handle.write(rel["stdout"])
            gpg = ["gpg", "--homedir", gpg_home, "--batch", "--yes", "--local-user", key]
            run_checked(gpg + ["--clearsign", "--output", os.path.join(out, "InRelease"), os.path.join(out, "Release")],
                 f"signing {up['serve']}")
            run_checked(gpg + ["--armor", "--detach-sign", "--output", os.path.join(out, "Release.gpg"),
                        os.path.join(out, "Release")], f"signing {up['serve']}")
            continue
        base = os.path.join(work, "reprepro", up["serve"])
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(os.path.join(base, "conf"))
        with open(os.path.join(base, "conf", "distributions"), "w", encoding="utf-8") as handle:
            handle.write(reprepro_distributions(up["serve_suite"], up["components"], target["deb_arch"], key))
        for comp in up["components"]:
            debs = [p["path"] for p in mine if p["component"] == comp]
            argv = ["reprepro", "--silent", "--basedir", base, "--outdir", out, "--gnupghome", gpg_home]
            if debs:
                run_checked(argv + ["-C", comp, "includedeb", up["serve_suite"]] + debs, f"adding packages to {up['serve']}")
            else:
                run_checked(argv + ["export", up["serve_suite"]], f"exporting {up['serve']}")


def build(module: AnsibleModule) -> dict[str, Any]:
    p = module.params
    target, key = p["target"], str(p["site_key"]).upper()
    if target.get("pkg_mgr") != "apt":
        raise MirrorError(f"target {target.get('os')} is not an apt target")
    root = os.path.join(p["work_dir"], "apt", target["os"])
    for sub in ("etc/apt", "state", "lists/partial", "cache", "archives/partial", "keyrings"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    keyrings = {up["name"]: _keyring(up, root) for up in target["upstreams"]}
    with open(os.path.join(root, "etc/apt/sources.list"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(source_lines(target["upstreams"], os.path.join(root, "keyrings"))) + "\n")
    open(os.path.join(root, "etc/apt/preferences"), "w", encoding="utf-8").close()
    status = os.path.join(root, "status")
    if p["base_status"]:
        shutil.copyfile(p["base_status"], status)
    else:
        open(status, "w", encoding="utf-8").close()
    opts = apt_options(root, status, target["deb_arch"])
    run_checked(["apt-get"] + opts + ["-q", "update"], f"apt-get update of the {target['os']} upstreams")
    checks = _checks(target, root, keyrings)
    # --print-uris leaves out what the archive cache already holds: ask with an empty cache directory
    empty = os.path.join(root, "no-archives")
    os.makedirs(os.path.join(empty, "partial"), exist_ok=True)
    wanted = list(target["requests"]) + [os.path.abspath(d) for d in p["local_debs"]]
    uris = parse_print_uris(run_checked(["apt-get"] + opts + ["-o", f"Dir::Cache::archives={empty}", "install", "--print-uris",
                                                       "-qq", "-y"] + wanted,
                                 f"the dependency closure of {target['os']}")["stdout"])
    stanzas = []
    for fname in os.listdir(os.path.join(root, "lists")):
        if fname.endswith("_Packages"):
            with open(os.path.join(root, "lists", fname), encoding="utf-8", errors="replace") as handle:
                stanzas.extend(parse_packages_index(handle.read()))
    hashes = index_hashes(stanzas)
    packages: list[dict[str, Any]] = []
    for entry in uris:
        up, comp = route(entry["uri"], target["upstreams"])
        name, version, arch = deb_fields(entry["filename"])
        path = os.path.join(root, "archives", entry["filename"])  # apt's name for it (epoch quoted)
        if entry["uri"].startswith("file:"):
            path = urllib.parse.unquote(entry["uri"][len("file:"):])
            while path.startswith("//"):
                path = path[1:]
        packages.append({"name": name, "version": version, "arch": arch, "upstream": up["name"], "component": comp,
                         "serve": up["serve"], "filename": os.path.basename(urllib.parse.unquote(entry["uri"])),
                         "path": path, "size": entry["size"]})
    if any(pk["path"].startswith(root) for pk in packages):  # http(s) upstreams: apt downloads (cached)
        run_checked(["apt-get"] + opts + ["install", "--download-only", "-qq", "-y"] + wanted,
             f"downloading the {target['os']} packages")
    if not p["base_status"]:  # from nothing, every request is in the closure (else apt's answer was misread)
        lost = missing_requests(target["requests"], packages)
        if lost:
            raise MirrorError(f"apt's closure of the {target['os']} requests lacks {', '.join(lost[:10])}: the mirror would "
                              f"not serve them; nothing was built")
    for pk in packages:
        if not os.path.isfile(pk["path"]):
            raise MirrorError(f"{pk['filename']} was not downloaded ({pk['path']})")
        pk["sha256"] = sha256_file(pk["path"])
        if (pk["size"], pk["sha256"]) not in hashes.get(pk["filename"], set()):
            raise MirrorError(f"{pk['filename']} (sha256 {pk['sha256']}) matches no signed index entry: refused")
    state = hashlib.sha256(json.dumps({"key": key, "upstreams": target["upstreams"], "local": wanted,
                                       "files": sorted((pk["serve"], pk["filename"], pk["sha256"]) for pk in packages)},
                                      sort_keys=True).encode()).hexdigest()
    state_file = os.path.join(p["work_dir"], f"state-{target['os']}.txt")
    served = all(os.path.isdir(os.path.join(p["mirror_dir"], up["serve"])) for up in target["upstreams"])
    try:
        with open(state_file, encoding="utf-8") as handle:
            same = handle.read().strip() == state and served
    except OSError:
        same = False
    if not same and not module.check_mode:
        os.makedirs(p["mirror_dir"], exist_ok=True)
        _serve(target, packages, p["mirror_dir"], p["work_dir"], p["gpg_home"], key)
        pub = run_checked(["gpg", "--homedir", p["gpg_home"], "--batch", "--armor", "--export", key], "exporting the site key")
        with open(os.path.join(p["mirror_dir"], "kiln-mirror.asc"), "w", encoding="utf-8") as handle:
            handle.write(pub["stdout"])
        with open(state_file, "w", encoding="utf-8") as handle:
            handle.write(state + "\n")
    return {"changed": not same, "packages": [{k: v for k, v in pk.items() if k != "path"} for pk in packages],
            "upstream_checks": checks, "bytes": sum(pk["size"] for pk in packages)}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "target": {"type": "dict", "required": True},
            "mirror_dir": {"type": "path", "required": True},
            "work_dir": {"type": "path", "required": True},
            "gpg_home": {"type": "path", "required": True},
            "site_key": {"type": "str", "required": True},
            "base_status": {"type": "path", "default": ""},
            "local_debs": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**build(module))
    except (MirrorError, OSError, KeyError) as exc:
        module.fail_json(msg=f"kiln_mirror_apt: {exc}")


if __name__ == "__main__":
    main()
