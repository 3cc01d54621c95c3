# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The offline mirror's plan: from kiln_plan's bill of materials, what a site mirror must hold.

:func:`kiln_mirror_plan` turns a :func:`plan.kiln_plan` result (computed with the *upstream*
repositories as its ``kiln_repos``) into one target per OS and architecture: the package requests
whose dependency closure the mirror carries (every pinned package of every stack on that OS, plus
the distribution packages kiln's roles install by name, ``data/mirror.yml``), the upstream
repositories to read them from (each with the key fingerprint kiln pins) and where the mirror
serves each one; plus the downloaded files (source releases) with their pinned sha256.
An EL (dnf) target reads rpm-md repositories (kind ``rpm``): the distribution's (per
``data/mirror.yml``), EPEL (Slurm, munge, the node exporter) and the vendors'; it carries the dnf
module streams the stacks enable (the driver's ``nvidia-driver:<branch>-open``), so the closure is
computed with them enabled.
:func:`kiln_mirror_site_repos` is the ``kiln_repos`` a site sets to point every role at the mirror.
Nothing here touches a host: playbooks/mirror.yml runs the closure and the downloads
(library/kiln_mirror_apt.py, library/kiln_mirror_dnf.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .data import compat_data, mirror_data
from .errors import CompatError, need_list, need_mapping, need_text
from .lookup import _os_entry
from .packages import PACKAGE_COMPONENTS, kiln_pkg_modules, kiln_tool
from .repos import _check_repos
from .schema import show

#: apt architecture names
DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
_SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)
_EL_OS = re.compile(r"([a-z]+)-([0-9]{1,3})(?:\.[0-9]{1,2})?", re.ASCII)
_REPO_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,47}", re.ASCII)


def mirror_stack_fingerprint(os_key: str, packages: Mapping[str, Sequence[str]]) -> str:
    """12 hex of sha256 over the OS and the package strings: what the mirror serves for a stack."""
    text = json.dumps({"os": os_key, "packages": {k: list(v) for k, v in packages.items()}},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _distribution_pin(label: str, data: Mapping[str, Any], up: Mapping[str, Any], var: str, signs: str,
                      example: str) -> str:
    """The upstream entry's url and key pin (the entry's own fingerprint, else kiln's verified one), checked;
    CompatError naming *var* (kiln_mirror_upstreams.distribution or kiln_mirror_distributions.<os>)."""
    if not up.get("url"):
        raise CompatError(f"kiln_mirror_plan: no upstream for the {label}. Fix: set {var}.url ({example}).")
    fpr = up.get("fingerprint") or data.get("key_fingerprint")
    if not fpr:
        raise CompatError(f"kiln_mirror_plan: kiln has no verified key for the {label}. Fix: set {var}.fingerprint to "
                          f"the full fingerprint of the key that signs {signs}, and {var}.key_url to that key.")
    return str(fpr)


def _distribution_upstream(os_key: str, site: Mapping[str, Any],
                           var: str = "kiln_mirror_upstreams.distribution") -> dict[str, Any]:
    data = (mirror_data().get("distribution") or {}).get(os_key)
    if not data:
        raise CompatError(f"kiln_mirror_plan: kiln has no distribution archive data for {show(os_key)} "
                          f"(data/mirror.yml distribution); the mirror cannot be built for it.")
    up = dict(site.get("distribution") or {})
    fpr = _distribution_pin(f"{os_key} distribution archive", data, up, var, "its InRelease",
                            "the archive the build machine reads, e.g. your distribution mirror's URL")
    return {"name": "distribution", "kind": "dists", "url": up["url"].rstrip("/"),
            "suites": list(up.get("suites") or data["suites"]), "components": list(up.get("components") or data["components"]),
            "key_url": up.get("key_url", ""), "fingerprint": fpr, "fingerprint_var": f"{var}.fingerprint",
            "serve": f"distribution/{os_key}", "serve_suite": data["codename"]}


def el_distribution(stack_os: str) -> str:
    """The distribution as kiln_stack.os names it, for data/mirror.yml: ``rocky-9.4`` -> ``rocky-9``, ``redhat-9`` -> ``rhel-9``."""
    m = _EL_OS.fullmatch(str(stack_os).strip().lower())
    if not m:
        raise CompatError(f"kiln_mirror_plan: {show(stack_os)} is not an OS id such as rocky-9")
    name = "rhel" if m.group(1) == "redhat" else m.group(1)
    return f"{name}-{m.group(2)}"


def _fill(layout: str, **values: str) -> str:
    """A layout's {url} {repo} {arch} {releasever} replaced (str.format is never run on a site's string)."""
    out = layout
    for key, value in values.items():
        out = out.replace("{" + key + "}", value)
    return out


def _el_distribution_upstreams(distro: str, site: Mapping[str, Any], arch: str,
                               var: str = "kiln_mirror_upstreams.distribution") -> list[dict[str, Any]]:
    """The distribution's rpm-md repositories (BaseOS, AppStream, CRB for Rocky 9) as upstreams."""
    data = (mirror_data().get("distribution") or {}).get(distro)
    if not data or not data.get("repos"):
        raise CompatError(f"kiln_mirror_plan: kiln has no repository data for the {distro} distribution "
                          f"(data/mirror.yml distribution); the mirror cannot be built for it.")
    up = dict(site.get("distribution") or {})
    fpr = _distribution_pin(f"{distro} repositories", data, up, var, "its packages and repomd.xml",
                            f"e.g. https://dl.rockylinux.org/pub/rocky/9 for rocky-9: the repositories are read at "
                            f"{data['layout']}")
    if not up.get("key_url"):
        raise CompatError(f"kiln_mirror_plan: no key for the {distro} repositories. Fix: set "
                          f"{var}.key_url (the key of {fpr}).")
    url = str(up["url"]).rstrip("/")
    layout = url if "{repo}" in url else data["layout"]
    out = []
    for repo in up.get("repos") or data["repos"]:
        if not isinstance(repo, str) or not _REPO_WORD.fullmatch(repo):
            raise CompatError(f"kiln_mirror_plan: kiln_mirror_upstreams.distribution.repos has {show(repo)}: not a "
                              f"repository name such as BaseOS")
        out.append({"name": f"distribution-{repo.lower()}", "repo": repo, "kind": "rpm",
                    "url": _fill(layout, url=url, repo=repo, arch=arch, releasever=str(data["releasever"])),
                    "key_url": up["key_url"], "fingerprint": fpr,
                    "fingerprint_var": f"{var}.fingerprint",
                    "serve": f"distribution/{distro}/{repo}/{arch}/os"})
    return out


def _epel_upstream(el: str, site: Mapping[str, Any], arch: str) -> dict[str, Any]:
    """EPEL for an EL major: where Slurm, munge, PMIx and the node exporter come from on EL."""
    data = (mirror_data().get("epel") or {}).get(el) or {}
    up = dict(site.get("epel") or {})
    if not up.get("url") or not up.get("key_url"):
        raise CompatError(f"kiln_mirror_plan: no EPEL {el} upstream (EPEL carries Slurm, munge and the node "
                          f"exporter on EL). Fix: set kiln_mirror_upstreams.epel.url (the directory holding repodata/, "
                          f"e.g. https://dl.fedoraproject.org/pub/epel/{el}/Everything/{arch}/) and "
                          f"kiln_mirror_upstreams.epel.key_url (RPM-GPG-KEY-EPEL-{el}).")
    fpr = up.get("fingerprint") or data.get("key_fingerprint")
    if not fpr:
        raise CompatError(f"kiln_mirror_plan: kiln has no verified EPEL {el} key. Fix: set "
                          f"kiln_mirror_upstreams.epel.fingerprint to its full fingerprint.")
    return {"name": "epel", "kind": "rpm", "url": str(up["url"]).rstrip("/"), "key_url": up["key_url"],
            "fingerprint": fpr, "fingerprint_var": "kiln_mirror_upstreams.epel.fingerprint", "serve": f"epel/{el}/{arch}"}


def _repo_upstream(name: str, repo: Mapping[str, Any], os_key: str, arch: str, pkg_mgr: str = "apt") -> dict[str, Any]:
    """One vendor repository of the plan as an upstream, with the path the mirror serves it under."""
    common = {"name": name, "key_url": repo.get("key_url", ""), "fingerprint": repo.get("fingerprint") or "",
              "fingerprint_var": repo.get("fingerprint_var") or f"kiln_mirror_upstreams.{name}.fingerprint"}
    if not common["fingerprint"]:
        raise CompatError(f"kiln_mirror_plan: the {name} repository has no pinned key fingerprint. "
                          f"Fix: set kiln_mirror_upstreams.{name}.fingerprint (and key_url).")
    if pkg_mgr == "dnf":
        return _rpm_repo_upstream(common, name, repo, arch)
    if name == "cuda":
        return {**common, "kind": "flat", "url": repo["url"],
                "serve": f"cuda/{repo['distro']}/{compat_data()['repos']['cuda']['arch_dirs'][arch]}"}
    if name == "container_toolkit":
        return {**common, "kind": "flat", "url": repo["url"],
                "serve": f"libnvidia-container/stable/deb/{compat_data()['repos']['container_toolkit']['deb_arch_dirs'][arch]}"}
    if name == "docker":
        return {**common, "kind": "dists", "url": repo["url"], "suites": [repo["suite"]],
                "components": list(repo["components"]), "serve": f"docker/linux/{repo['distro']}",
                "serve_suite": repo["suite"]}
    if name == "doca":
        tail = repo["url"].rstrip("/").split("/")[-3:]
        return {**common, "kind": "flat", "url": repo["url"], "serve": "doca/" + "/".join(tail)}
    raise CompatError(f"kiln_mirror_plan: the {name} repository is not mirrored by kiln yet "
                      f"(an apt site repository for Slurm: serve it yourself and set kiln_repos.{name}).")


def _rpm_repo_upstream(common: dict[str, Any], name: str, repo: Mapping[str, Any], arch: str) -> dict[str, Any]:
    """A vendor rpm-md repository (EL): served at the path its URL has upstream, under the repository's name."""
    url = str(repo["url"]).rstrip("/")
    if name == "cuda":
        serve = f"cuda/{repo['distro']}/{compat_data()['repos']['cuda']['arch_dirs'][arch]}"
    elif name == "container_toolkit":
        serve = f"libnvidia-container/stable/rpm/{arch}"
    elif name == "doca":
        serve = "doca/" + "/".join(url.split("/")[-3:])
    elif name == "docker" and "/linux/" in url:
        serve = "docker/linux/" + url.split("/linux/", 1)[1]
    else:
        raise CompatError(f"kiln_mirror_plan: the {name} repository is not mirrored by kiln yet "
                          f"(an EL site repository: serve it yourself and set kiln_repos.{name}).")
    return {**common, "kind": "rpm", "url": url, "serve": serve}


def _modules(stacks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The dnf module streams the stacks enable before installing (kiln_pkg_modules, per component)."""
    out: set[str] = set()
    for st in stacks:
        for comp in (st.get("packages") or {}):
            if comp in PACKAGE_COMPONENTS:
                out.update(kiln_pkg_modules(st.get("stack") or {}, comp, "dnf"))
    return sorted(out)


def _requests(os_key: str, family: str, stacks: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every package string the stacks install on this OS, plus the roles' distribution packages."""
    out: set[str] = set()
    for st in stacks:
        for comp, pkgs in (st.get("packages") or {}).items():
            out.update(str(p) for p in pkgs)
        slurm_client = [p for p in (st.get("packages") or {}).get("slurmd", []) if p.startswith("slurm-client=")]
        if (st.get("stack") or {}).get("pyxis") and slurm_client:
            # roles/pyxis builds against the installed Slurm's headers, at its exact build
            out.add("libslurm-dev=" + slurm_client[0].split("=", 1)[1])
        slurm_el = [p for p in (st.get("packages") or {}).get("slurmd", [])
                    if p == "slurm" or (p.startswith("slurm-") and p[6:7].isdigit())]
        if (st.get("stack") or {}).get("pyxis") and slurm_el and family == "redhat":
            # roles/pyxis: slurm-devel at the installed slurm's version-release
            out.add("slurm-devel" + slurm_el[0][len("slurm"):])
    for names in ((mirror_data().get("distro_packages") or {}).get(family) or {}).values():
        out.update(names)
    return sorted(out)


def _files(stacks: Sequence[Mapping[str, Any]], checksums: Mapping[str, Any],
           file_urls: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Source releases the roles download (pyxis, nccl-tests, enroot), each with the site's pinned sha256.

    ``file_urls`` replaces a tool's upstream (kiln_tool's URL: a file for pyxis and nccl_tests, the release
    directory for enroot) where the build machine reads another copy.
    """
    out: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    wanted: list[tuple[str, str, str]] = []
    for st in stacks:
        stack = st.get("stack") or {}
        if stack.get("pyxis"):
            wanted.append(("pyxis", str(stack["pyxis"]), "pyxis_source_sha256"))
        if stack.get("enroot"):
            wanted.append(("enroot", str(stack["enroot"]), "enroot_artifacts_sha256"))
    if checksums.get("nccl_tests"):
        wanted.append(("nccl_tests", "", "burnin_tools_nccl_tests_sha256"))
    for tool, version, var in wanted:
        try:
            rel = kiln_tool(tool, version or None)
        except CompatError as exc:
            errors.append(str(exc))
            continue
        pins = checksums.get(tool)
        url = file_urls.get(tool)
        if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://", "file://"))):
            errors.append(f"kiln_mirror_file_urls.{tool} is {show(url)}: not an http(s):// or file:// URL")
            continue
        if url:
            rel = {**rel, "url": url}
        if tool == "enroot":
            arch = "amd64"
            names = [f"enroot_{rel['version']}-1_{arch}.deb", f"enroot+caps_{rel['version']}-1_{arch}.deb"]
            pins = pins if isinstance(pins, Mapping) else {}
            items = [(n, rel["url"].rstrip("/") + "/" + n, pins.get(n)) for n in names]
        else:
            items = [(rel["url"].rsplit("/", 1)[-1], rel["url"], pins)]
        for name, url, sha in items:
            if not isinstance(sha, str) or not _SHA256.fullmatch(sha.lower()):
                errors.append(f"{tool} {rel['version']}: no sha256 for {name}. Fix: set {var} (the roles refuse "
                              f"the download without it, and so does the mirror).")
                continue
            serve = f"files/{tool}/{rel['version']}/{name}"
            out[serve] = {"tool": tool, "version": rel["version"], "url": url, "sha256": sha.lower(), "serve": serve}
    return [out[k] for k in sorted(out)], errors


def _check_plan_stack(group: Any, st: Mapping[str, Any]) -> None:
    """A kiln_plan stack entry's shape (stack, packages, repos, errors), before anything reads it."""
    where = f"a stack of group {show(group)}"
    need_mapping("kiln_mirror_plan", f"{where}: stack", st.get("stack") or {})
    for comp, pkgs in need_mapping("kiln_mirror_plan", f"{where}: packages", st.get("packages") or {}).items():
        if not all(isinstance(p, str) for p in need_list("kiln_mirror_plan", f"{where}: packages {show(comp)}", pkgs)):
            raise CompatError(f"kiln_mirror_plan: {where}: packages {show(comp)} must be package strings")
    for name, repo in need_mapping("kiln_mirror_plan", f"{where}: repos", st.get("repos") or {}).items():
        need_mapping("kiln_mirror_plan", f"{where}: repository {show(name)}", repo)
    if not all(isinstance(e, str) for e in need_list("kiln_mirror_plan", f"{where}: errors", st.get("errors") or [])):
        raise CompatError(f"kiln_mirror_plan: {where}: errors must be strings")
    if not isinstance(st.get("hosts", ""), (str, int)):
        raise CompatError(f"kiln_mirror_plan: {where}: hosts must be a host list string")


def _site_for(site: Mapping[str, Any], distributions: Mapping[str, Any], *keys: str) -> tuple[Mapping[str, Any], str]:
    """The upstreams as one OS sees them, and the variable its distribution comes from:
    kiln_mirror_distributions.<key> (an OS key such as debian-12, or an EL distribution such as rocky-9) replaces
    kiln_mirror_upstreams.distribution for that OS (a mixed site's build)."""
    for key in keys:
        if key in distributions:
            return {**site, "distribution": distributions[key]}, f"kiln_mirror_distributions.{key}"
    return site, "kiln_mirror_upstreams.distribution"


def _check_distributions(value: Any) -> dict[str, Any]:
    """kiln_mirror_distributions: {OS key: a distribution upstream, kiln_repos' shape}."""
    value = need_mapping("kiln_mirror_plan", "kiln_mirror_distributions", value or {})
    known = set(mirror_data().get("distribution") or {})
    out: dict[str, Any] = {}
    for key, entry in value.items():
        if key not in known:
            raise CompatError(f"kiln_mirror_plan: kiln_mirror_distributions has {show(key)}, not an OS of "
                              f"data/mirror.yml distribution ({', '.join(sorted(known))}). Fix: key each entry by "
                              f"the OS it serves, e.g. debian-12 or rocky-9.")
        out[key] = _check_repos({"distribution": entry}, f"kiln_mirror_distributions.{key}", (),
                                {"distribution": ("repos",)})["distribution"]
    return out


def kiln_mirror_plan(plan: Mapping[str, Any], upstreams: Any = None, checksums: Any = None,
                     arch: str = "x86_64", file_urls: Any = None, distributions: Any = None) -> dict[str, Any]:
    """What an offline mirror holds for a kiln_plan result: targets per OS, files, stacks, errors.

    ``plan`` is kiln_plan computed with ``upstreams`` as its repositories (the repositories the
    build machine reads); ``upstreams.distribution`` names the distribution archive (url, and for
    an OS whose archive key kiln has not verified, key_url and fingerprint). ``checksums`` maps a
    tool (pyxis, nccl_tests: a sha256; enroot: file name -> sha256) to the pins the roles use;
    ``file_urls`` (kiln_mirror_file_urls) replaces a download's upstream URL; ``distributions``
    (kiln_mirror_distributions, by OS key) replaces ``upstreams.distribution`` for that OS, so one
    build serves a site with several OSes.
    Problems are collected in ``errors`` (the playbook refuses to build while any remain).
    """
    need_mapping("kiln_mirror_plan", "the input (a kiln_plan result)", plan)
    site = _check_repos(upstreams, "kiln_mirror_upstreams", ("epel",), {"distribution": ("repos",)})
    distributions = _check_distributions(distributions)
    if checksums is None:
        checksums = {}
    need_mapping("kiln_mirror_plan", "checksums", checksums)
    file_urls = need_mapping("kiln_mirror_plan", "file_urls (kiln_mirror_file_urls)", file_urls or {})
    if not isinstance(arch, str) or arch not in DEB_ARCH:
        raise CompatError(f"kiln_mirror_plan: unknown arch {show(arch)}; use one of {list(DEB_ARCH)}")
    by_fpr: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    for gname, group in (need_mapping("kiln_mirror_plan", "the plan's groups", plan.get("groups") or {})).items():
        need_mapping("kiln_mirror_plan", f"group {show(gname)} of the plan", group)
        for st in need_list("kiln_mirror_plan", f"the stacks of group {show(gname)}", group.get("stacks") or []):
            need_mapping("kiln_mirror_plan", f"a stack of group {show(gname)}", st)
            _check_plan_stack(gname, st)
            if st.get("errors"):
                errors.extend(f"group {gname}, hosts {st.get('hosts')}: {e}" for e in st["errors"])
            stack = st.get("stack") or {}
            if not stack.get("os") or not st.get("packages"):
                continue
            osx = _os_entry(stack["os"])
            if not osx:
                errors.append(f"group {gname}: unknown OS {show(stack['os'])}")
                continue
            fpr = mirror_stack_fingerprint(osx[0], st["packages"])
            entry = by_fpr.setdefault(fpr, {"fingerprint": fpr, "os": osx[0], "stack_os": str(stack["os"]), "hosts": [], "st": st})
            entry["hosts"].append(str(st.get("hosts")))
    targets: dict[str, dict[str, Any]] = {}
    for fpr, entry in sorted(by_fpr.items()):
        os_key, st = entry["os"], entry["st"]
        osd = _os_entry(os_key)[1]
        tgt = targets.setdefault(os_key, {"os": os_key, "pkg_mgr": osd["pkg_mgr"], "family": osd["family"],
                                          "arch": arch, "deb_arch": DEB_ARCH[arch], "stacks": [], "_st": [],
                                          "upstreams": {}})
        tgt["stacks"].append(fpr)
        tgt["_st"].append(st)
        if osd["pkg_mgr"] == "dnf":
            _el_target(tgt, entry, site, arch, errors, distributions)
            continue
        if osd["pkg_mgr"] != "apt":
            errors.append(f"{os_key}: mirror.yml builds apt and dnf mirrors only; {osd['pkg_mgr']} is not mirrored.")
            continue
        try:
            tgt["upstreams"].setdefault("distribution",
                                        _distribution_upstream(os_key, *_site_for(site, distributions, os_key)))
        except CompatError as exc:
            errors.append(str(exc))
        for name, repo in (st.get("repos") or {}).items():
            try:
                tgt["upstreams"].setdefault(name, _repo_upstream(name, repo, os_key, arch))
            except (CompatError, KeyError) as exc:
                errors.append(f"{os_key}: {exc}")
    out_targets = []
    all_stacks = [st for t in targets.values() for st in t["_st"]]
    for os_key in sorted(targets):
        tgt = targets[os_key]
        if tgt["pkg_mgr"] == "dnf":
            tgt["modules"] = _modules(tgt["_st"])
        tgt["requests"] = _requests(os_key, tgt["family"], tgt.pop("_st"))
        tgt["upstreams"] = [tgt["upstreams"][k] for k in sorted(tgt["upstreams"])]
        out_targets.append(tgt)
    files, file_errors = _files(all_stacks, checksums, file_urls)
    errors.extend(file_errors)
    stacks = [{"fingerprint": f, "os": e["os"], "hosts": ", ".join(e["hosts"])} for f, e in sorted(by_fpr.items())]
    return {"targets": out_targets, "files": files, "stacks": stacks, "errors": errors}


def _el_target(tgt: dict[str, Any], entry: Mapping[str, Any], site: Mapping[str, Any], arch: str,
               errors: list[str], distributions: Mapping[str, Any]) -> None:
    """Fill an EL target (one per OS key): its distribution, EPEL and the plan's vendor repositories."""
    os_key, st = entry["os"], entry["st"]
    osd = _os_entry(os_key)[1]
    try:
        distro = el_distribution(entry["stack_os"])
    except CompatError as exc:
        errors.append(str(exc))
        return
    if tgt.setdefault("distro", distro) != distro:
        errors.append(f"{os_key}: the inventory names both {tgt['distro']} and {distro}; one mirror build serves one "
                      f"EL distribution per release. Fix: build each with its own inventory (ansible_limit).")
        return
    tgt["releasever"] = str(((mirror_data().get("distribution") or {}).get(distro) or {}).get("releasever")
                            or osd.get("el") or "")
    tgt["el"] = str(osd.get("el") or "")
    if "distribution-" not in " ".join(tgt["upstreams"]):
        try:
            el_site, el_var = _site_for(site, distributions, distro, os_key)
            for up in _el_distribution_upstreams(distro, el_site, arch, el_var):
                tgt["upstreams"][up["name"]] = up
        except CompatError as exc:
            errors.append(str(exc))
    if "epel" not in tgt["upstreams"]:
        try:
            tgt["upstreams"]["epel"] = _epel_upstream(tgt["el"], site, arch)
        except CompatError as exc:
            errors.append(str(exc))
    for name, repo in (st.get("repos") or {}).items():
        try:
            tgt["upstreams"].setdefault(name, _repo_upstream(name, repo, os_key, arch, "dnf"))
        except (CompatError, KeyError) as exc:
            errors.append(f"{os_key}: {exc}")


def kiln_mirror_site_repos(mirror_plan: Mapping[str, Any], url: str, fingerprint: str) -> dict[str, Any]:
    """The ``kiln_repos`` (per OS) that point every role at a mirror served at ``url``, signed by ``fingerprint``."""
    need_mapping("kiln_mirror_site_repos", "the input (a kiln_mirror_plan result)", mirror_plan)
    need_text("kiln_mirror_site_repos", "url", url)
    need_text("kiln_mirror_site_repos", "fingerprint", fingerprint)
    for tgt in need_list("kiln_mirror_site_repos", "targets", mirror_plan.get("targets") or []):
        need_mapping("kiln_mirror_site_repos", "a target", tgt)
        for up in need_list("kiln_mirror_site_repos", "a target's upstreams", tgt.get("upstreams") or []):
            if not isinstance(up, Mapping) or not isinstance(up.get("name"), str) or not isinstance(up.get("serve"), str):
                raise CompatError("kiln_mirror_site_repos: each upstream must be a kiln_mirror_plan upstream "
                                  "(a mapping with name and serve)")
    base = str(url).rstrip("/")
    key = f"{base}/kiln-mirror.asc"
    out: dict[str, Any] = {}
    for tgt in mirror_plan.get("targets") or []:
        repos: dict[str, Any] = {}
        if tgt.get("pkg_mgr") == "dnf":
            out[tgt["os"]] = _el_site_repos(tgt, base, key, fingerprint)
            continue
        for up in tgt.get("upstreams") or []:
            entry = {"key_url": key, "fingerprint": fingerprint}
            if up["name"] == "distribution":
                entry.update(url=f"{base}/{up['serve']}", suites=[str(up.get("serve_suite") or "")],
                             components=[str(c) for c in up.get("components") or []])
            elif up["name"] == "cuda":
                entry["url"] = f"{base}/cuda"
            elif up["name"] == "container_toolkit":
                entry["url"] = f"{base}/libnvidia-container"
            elif up["name"] == "docker":
                entry["url"] = f"{base}/docker/linux"
            elif up["name"] == "doca":
                entry["url"] = f"{base}/doca"
            repos[up["name"]] = entry
        out[tgt["os"]] = repos
    return out


def _el_site_repos(tgt: Mapping[str, Any], base: str, key: str, fingerprint: str) -> dict[str, Any]:
    """An EL target's kiln_repos: the distribution's served repositories, the served EPEL and the vendors' bases.

    ``distribution`` is ``{url: <mirror>/distribution/<distro>, key_url, fingerprint, repos: [served names]}``
    (roles/distro_repos writes ``<url>/<repo>/$basearch/os`` per repository), ``epel`` the served EPEL (written
    by roles/distro_repos too; roles/slurm_install then does not install epel-release).
    """
    repos: dict[str, Any] = {}
    served: list[str] = []
    roots: set[str] = set()
    for up in tgt.get("upstreams") or []:
        entry = {"key_url": key, "fingerprint": fingerprint}
        if up["name"].startswith("distribution-"):
            # served at distribution/<distro>/<repo>/<arch>/os: the entry's url is distribution/<distro>
            parts = up["serve"].split("/")
            if len(parts) != 5 or parts[0] != "distribution" or parts[4] != "os":
                raise CompatError(f"kiln_mirror_site_repos: the upstream {show(up['name'])} is served at "
                                  f"{show(up['serve'])}, not distribution/<distro>/<repo>/<arch>/os")
            roots.add("/".join(parts[:2]))
            served.append(parts[2])
            continue
        entry["url"] = {"cuda": f"{base}/cuda", "container_toolkit": f"{base}/libnvidia-container",
                        "docker": f"{base}/docker/linux", "doca": f"{base}/doca"}.get(up["name"], f"{base}/{up['serve']}")
        repos[up["name"]] = entry
    if len(roots) > 1:
        raise CompatError(f"kiln_mirror_site_repos: an EL target serves several distributions ({', '.join(sorted(roots))}); "
                          f"one target serves one")
    if served:
        repos = {"distribution": {"url": f"{base}/{roots.pop()}", "key_url": key, "fingerprint": fingerprint,
                                  "repos": served}, **repos}
    return repos
