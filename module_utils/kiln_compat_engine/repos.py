# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Repositories: the NVIDIA CUDA / Container Toolkit repositories, kiln_repos overrides, the PyTorch index.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from . import schema
from .containers import docker_os
from .data import compat_data
from .errors import CompatError, need_list, need_mapping, need_text
from .inventory import _plain, kiln_hostlist
from .lookup import _doca_release, _os_entry
from .resolve import kiln_resolve_stack
from .schema import show


def _base(url: str | None, default: str) -> str:
    return (url or default).rstrip("/")


def kiln_cuda_repo(os: str, base_url: str | None = None, arch: str = "x86_64") -> dict[str, Any]:
    """NVIDIA CUDA repository for an OS: URL, key, keyring and (apt) source line or (dnf) .repo URL.

    ``base_url`` replaces ``https://developer.download.nvidia.com/compute/cuda/repos`` for mirrors.
    """
    osx = _os_entry(os)
    if not osx:
        raise CompatError(f"kiln_cuda_repo: unknown OS {show(os)}")
    repo = compat_data()["repos"]["cuda"]
    if arch not in repo["arch_dirs"]:
        raise CompatError(f"kiln_cuda_repo: unknown arch {show(arch)}; use one of {list(repo['arch_dirs'])}")
    key, entry = osx
    distro = entry["cuda_repo"]
    url = f"{_base(base_url, repo['base_url'])}/{distro}/{repo['arch_dirs'][arch]}/"
    out: dict[str, Any] = {"os": key, "distro": distro, "arch": arch, "pkg_mgr": entry["pkg_mgr"], "url": url}
    if entry["pkg_mgr"] == "apt":
        out.update(
            key_url=url + repo["deb_key_file"],
            keyring_path=repo["deb_keyring_path"],
            keyring_package=repo["deb_keyring_package"],
            keyring_package_url=url + repo["deb_keyring_package"],
            apt_line=f"deb [signed-by={repo['deb_keyring_path']}] {url} /",
        )
    else:
        out.update(
            key_url=url + repo["rpm_key_file"],
            repo_file_url=url + repo["rpm_repo_file"].format(distro=distro),
        )
    return out


def kiln_container_toolkit_repo(os: str, base_url: str | None = None, arch: str = "x86_64") -> dict[str, Any]:
    """NVIDIA Container Toolkit repository (stable channel) for an OS; ``base_url`` for mirrors."""
    osx = _os_entry(os)
    if not osx:
        raise CompatError(f"kiln_container_toolkit_repo: unknown OS {show(os)}")
    repo = compat_data()["repos"]["container_toolkit"]
    if arch not in repo["deb_arch_dirs"]:
        raise CompatError(f"kiln_container_toolkit_repo: unknown arch {show(arch)}; use one of {list(repo['deb_arch_dirs'])}")
    base = _base(base_url, repo["base_url"])
    key, entry = osx
    out: dict[str, Any] = {"os": key, "arch": arch, "pkg_mgr": entry["pkg_mgr"], "key_url": f"{base}/{repo['gpgkey']}"}
    if entry["pkg_mgr"] == "apt":
        url = f"{base}/stable/deb/{repo['deb_arch_dirs'][arch]}"
        out.update(url=url, keyring_path=repo["deb_keyring_path"],
                   apt_line=f"deb [signed-by={repo['deb_keyring_path']}] {url} /")
    else:
        out.update(url=f"{base}/stable/rpm/{arch}", repo_file_url=f"{base}/stable/rpm/nvidia-container-toolkit.repo")
    return out


def kiln_doca_repo(stack: Mapping[str, Any], base_url: str | None = None, arch: str = "x86_64") -> dict[str, Any]:
    """The DOCA-Host network repository of a stack's OS and DOCA version (``{}`` unless ofed kind is doca).

    ``{os, distro, arch, pkg_mgr, version, url, path, key_url, fingerprint, fingerprint_var, repo_package}``;
    apt adds ``suite`` (``./``), ``keyring_path`` and ``apt_line``. ``url`` is ``<base_url>/<path>``, ``path``
    ``<version>/<distro>/<arch>/``; ``base_url`` replaces the data's default for mirrors. ``fingerprint`` is
    None: kiln's sources give no full fingerprint, so ``kiln_repos.doca.fingerprint`` must pin it.
    ``repo_package`` is the doca-host local-repo package version of that update (None when unknown).
    """
    r = kiln_resolve_stack(stack)
    ofed = r.get("ofed") or {}
    if ofed.get("kind") != "doca":
        return {}
    repo = compat_data()["repos"]["doca"]
    if arch not in repo["arch_dirs"]:
        raise CompatError(f"kiln_doca_repo: unknown arch {show(arch)}; use one of {list(repo['arch_dirs'])}")
    if not r.get("os"):
        raise CompatError("kiln_doca_repo: the DOCA repository is per OS: set kiln_stack.os")
    ver = ofed.get("version")
    found = _doca_release(ver) if ver else None
    if not found:
        raise CompatError(f"kiln_doca_repo: DOCA {show(ver)} is not a release in data/compat.yml; set "
                          f"kiln_stack.ofed.version to one (e.g. \"3.2.1\")")
    key, rel, upd, upd_entry = found
    os_entry = (rel.get("os") or {}).get(r["os"])
    if not os_entry:
        raise CompatError(f"kiln_doca_repo: DOCA {ver} is not built for {r['os']} (preflight rule doca-os); "
                          f"DOCA {key} serves: {', '.join(rel.get('os') or {}) or 'no OS recorded'}")
    version = ver if ver.count(".") >= 2 else (upd or key)
    osx = _os_entry(r["os"])
    mgr = osx[1]["pkg_mgr"] if osx else r.get("pkg_mgr")
    base = _base(base_url, repo["base_url"])
    path = f"{version}/{os_entry['distro']}/{repo['arch_dirs'][arch]}/"
    url = f"{base}/{path}"
    out: dict[str, Any] = {"os": r["os"], "distro": os_entry["distro"], "arch": arch, "pkg_mgr": mgr, "version": version,
                           "url": url, "path": path, "key_url": f"{base}/{repo['key_file']}",
                           "fingerprint": repo.get("key_fingerprint"), "fingerprint_var": "kiln_repos.doca.fingerprint",
                           "repo_package": (upd_entry or {}).get("doca_host") if upd == version else None}
    if mgr == "apt":
        out.update(suite="./", keyring_path=repo["deb_keyring_path"],
                   apt_line=f"deb [signed-by={repo['deb_keyring_path']}] {url} ./")
    return out


REPO_NAMES = ("cuda", "container_toolkit", "slurm", "torch", "doca", "docker", "distribution", "epel")
_REPO_KEYS = ("url", "key_url", "fingerprint")
# kiln_repos.distribution (roles/distro_repos, a site mirror of the OS archive) also names what the mirror serves:
# on apt hosts its suites and components, on EL (dnf) hosts its rpm-md repositories (repos: [BaseOS, AppStream]).
# Lists of plain words. The engine cannot know a host's OS here: either set is accepted, never both (the role
# checks the exact set for the host's package manager). kiln_repos.epel (EL only) has the three plain keys.
_LIST_KEYS = {"distribution": ("suites", "components", "repos")}
# list keys that exclude each other within one entry: the apt set and the dnf set
_EXCLUSIVE = {"distribution": (("suites", "components"), ("repos",))}
_LIST_EXAMPLE = {"suites": "[bookworm]", "components": "[main]", "repos": "[BaseOS, AppStream, CRB]"}
_LIST_WORD = re.compile(r"[A-Za-z0-9._/-]{1,64}", re.ASCII)


def _check_exclusive(where: str, name: str, entry: Mapping[str, Any]) -> None:
    """Refuse an entry holding keys of two exclusive sets (kiln_repos.distribution with suites and repos)."""
    sets = [s for s in _EXCLUSIVE.get(name, ()) if any(k in entry for k in s)]
    if len(sets) > 1:
        given = [k for s in sets for k in s if k in entry]
        raise CompatError(f"kiln: {where}.{name} has {', '.join(given)}: suites and components describe an apt "
                          f"mirror, repos an EL (dnf) one, never both in one entry. Fix: set suites and components "
                          f"for apt hosts and repos for EL hosts, each in that OS group's group_vars.")


def _check_repos(repos: Any, where: str = "kiln_repos", extra_names: tuple[str, ...] = (),
                 extra_lists: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, dict[str, str]]:
    """kiln_repos (or another variable of its shape, named by *where*) as plain strings; CompatError naming the key.

    ``extra_names`` and ``extra_lists`` widen the shape for a variable that is not kiln_repos itself."""
    names = tuple(dict.fromkeys(REPO_NAMES + tuple(extra_names)))
    list_keys = {k: tuple(dict.fromkeys(_LIST_KEYS.get(k, ()) + tuple((extra_lists or {}).get(k, ()))))
                 for k in set(_LIST_KEYS) | set(extra_lists or {})}
    if repos is None or repos == "":
        return {}
    if schema.measure(repos).over():
        raise CompatError(f"kiln: {where} is too large to be a repository list.")
    if not isinstance(repos, Mapping):
        raise CompatError(f"kiln: {where} is {schema.describe(repos)}; it must be a mapping such as "
                                 "{cuda: {url: ..., key_url: ..., fingerprint: ...}}. Fix: see docs/compat.md \"Repositories\".")
    out: dict[str, dict[str, str]] = {}
    for name, entry in repos.items():
        if name not in names:
            raise CompatError(f"kiln: {where} has an unknown repository {show(name, 24)}.{schema.suggest(name, names)} "
                                     f"Fix: use {', '.join(names)}.")
        if entry is None:
            continue
        if not isinstance(entry, Mapping):
            raise CompatError(f"kiln: {where}.{name} is {schema.describe(entry)}; it must be a mapping with "
                                     f"{', '.join(_REPO_KEYS)}.")
        _check_exclusive(where, name, entry)
        out[name] = {}
        for key, value in entry.items():
            path = f"{where}.{name}.{key}"
            if key in list_keys.get(name, ()):
                if not isinstance(value, (list, tuple)) or not value or len(value) > 16 \
                        or not all(isinstance(v, str) and _LIST_WORD.fullmatch(v) for v in value):
                    raise CompatError(f"kiln: {path} is {schema.describe(value)}; it must be a non-empty list of words "
                                      f"such as {_LIST_EXAMPLE.get(str(key), '[main]')}. Fix: write it as a YAML list.")
                out[name][key] = list(value)  # type: ignore[assignment]
                continue
            if key not in _REPO_KEYS or (name == "torch" and key != "url"):
                allowed = ("url",) if name == "torch" else _REPO_KEYS + list_keys.get(name, ())
                raise CompatError(f"kiln: {where}.{name} has an unknown key {show(key, 24)}."
                                         f"{schema.suggest(key, allowed)} Fix: use {', '.join(allowed)}.")
            if value is None or value == "":
                continue
            if key == "fingerprint" and not isinstance(value, str):
                raise CompatError(f"kiln: {path} is {schema.describe(value)}, not a string (YAML reads unquoted digits "
                                  f"as a number). Fix: quote the key's full 40-hex-digit fingerprint, "
                                  f"fingerprint: \"<40 hex digits>\" (gpg --show-keys --with-fingerprint <key file>).")
            if not isinstance(value, str) or len(value) > 2048 or (
                    key != "fingerprint" and any(c.isspace() for c in value.strip())):
                raise CompatError(f"kiln: {path} is {schema.describe(value)}; it must be a URL or fingerprint string.")
            value = value.strip()
            if key == "fingerprint":
                value = value.replace(" ", "").upper()
                if not re.fullmatch(r"[0-9A-F]{40}", value, re.ASCII):
                    raise CompatError(f"kiln: {path} is {show(value)}: not a full 40-hex-digit key fingerprint "
                                             f"(short key ids can be forged). Fix: gpg --show-keys --with-fingerprint <key file>.")
            elif not re.match(r"(?:https?|file)://", value, re.ASCII):
                raise CompatError(f"kiln: {path} is {show(value)}: not an http(s):// or file:// URL.")
            out[name][key] = value
    return out


def kiln_repos_problems(hostvars: Mapping[str, Any], hosts: Sequence[str], var: str = "kiln_repos") -> list[str]:
    """``kiln_repos`` of each host checked once per distinct value: ``["<hosts>: <problem>"]``, ``[]`` when valid."""
    need_mapping("kiln_repos_problems", "the input (hostvars)", hostvars)
    hosts = need_list("kiln_repos_problems", "hosts", hosts)
    need_text("kiln_repos_problems", "the variable name", var)
    seen: dict[str, list[str]] = {}
    problems: dict[str, str] = {}
    for host in hosts:
        need_text("kiln_repos_problems", "each host", host)
        hv = hostvars.get(host)
        value = hv.get(var) if isinstance(hv, Mapping) else None
        try:
            key = json.dumps(_plain(value), sort_keys=True, default=str) if not schema.measure(value).over() else "(too large)"
        except (TypeError, ValueError):
            key = repr(type(value))
        seen.setdefault(key, []).append(str(host))
        if key not in problems:
            try:
                _check_repos(value if key != "(too large)" else [None] * (schema.MAX_NODES + 1))
                problems[key] = ""
            except CompatError as exc:
                problems[key] = str(exc).removeprefix("kiln: ")
    return [f"{kiln_hostlist(seen[k])}: {p}" for k, p in problems.items() if p]


def kiln_repo(name: str, os: str | None = None, repos: Any = None, arch: str = "x86_64") -> dict[str, Any]:
    """One repository, resolved for an OS from kiln_repos (the site's mirrors and keys) over data/compat.yml.

    ``cuda`` / ``container_toolkit``: what kiln_cuda_repo / kiln_container_toolkit_repo return, with
    ``key_url`` and ``fingerprint`` (the pin) taken from ``kiln_repos.<name>`` when set, and ``fingerprint_var``
    naming the variable to fix. ``slurm``, ``epel``: ``{}`` unless kiln_repos.<name>.url is set. ``distribution``:
    ``{}`` unless its url is set; ``suites`` and ``components`` (apt) or ``repos`` (EL). ``torch``: ``{url}``.
    """
    if not isinstance(name, str) or name not in REPO_NAMES:
        raise CompatError(f"kiln_repo: unknown repository {show(name)}; use one of {list(REPO_NAMES)}")
    site = _check_repos(repos).get(name, {})
    if name == "torch":
        return {"url": site.get("url") or compat_data()["torch"]["index_url"]}
    if name in ("slurm", "distribution", "epel"):
        # site repositories: nothing unless the inventory names one, then its key pin is required
        if not site.get("url"):
            return {}
        if not site.get("key_url") or not site.get("fingerprint"):
            raise CompatError(f"kiln: kiln_repos.{name} has a url but no key_url and fingerprint. Fix: give the "
                              f"{'repository' if name == 'slurm' else 'mirror'}'s signing key URL and its full "
                              f"fingerprint{'' if name == 'slurm' else ' (docs/airgap.md)'}.")
        out: dict[str, Any] = {"name": name, "url": site["url"], "key_url": site["key_url"],
                               "fingerprint": site["fingerprint"], "fingerprint_var": f"kiln_repos.{name}.fingerprint"}
        if name == "distribution" and site.get("repos"):  # an EL (dnf) mirror: <url>/<repo>/$basearch/os
            out["repos"] = list(site["repos"])
        elif name == "distribution":
            out.update(suites=list(site.get("suites") or []), components=list(site.get("components") or ["main"]))
        return out
    if name == "doca":
        raise CompatError("kiln_repo: the DOCA repository depends on the stack's DOCA version: use kiln_doca_repo(stack)")
    if name == "docker":
        return kiln_docker_repo(os, site, arch)
    if not os:
        raise CompatError(f"kiln_repo: the {name} repository needs an OS id (kiln_stack.os)")
    base = kiln_cuda_repo(os, site.get("url"), arch) if name == "cuda" else kiln_container_toolkit_repo(os, site.get("url"), arch)
    base.update(name=name, key_url=site.get("key_url") or base["key_url"],
                fingerprint=site.get("fingerprint") or compat_data()["repos"][name]["key_fingerprint"],
                fingerprint_var=f"kiln_repos.{name}.fingerprint")
    return base


def kiln_docker_repo(os: str | None, site: Mapping[str, str] | None = None, arch: str = "x86_64") -> dict[str, Any]:
    """Docker's package repository for an OS, ``site`` (``kiln_repos.docker``) over the data's defaults.

    apt: ``{name, os, distro, pkg_mgr, url: <base>/<distro>, suite: <codename>, components: [stable], key_url,
    fingerprint, fingerprint_var}``; dnf: ``url`` is ``<base>/rhel/<el>/$basearch/stable`` (no suite).
    ``kiln_repos.docker.url`` replaces the base (``https://download.docker.com/linux``) for mirrors.
    """
    site = dict(site or {})
    if not os:
        raise CompatError("kiln_repo: the docker repository needs an OS id (kiln_stack.os)")
    key, entry = docker_os(os)
    if not entry:
        served = ", ".join(compat_data()["container_engine"]["docker_ce"]["os"])
        raise CompatError(f"kiln_repo: Docker's repository has no packages for {show(os)} (it serves {served}; "
                          f"preflight rule engine-os)")
    repo = compat_data()["repos"]["docker"]
    if arch not in ("x86_64", "aarch64"):
        raise CompatError(f"kiln_repo: unknown arch {show(arch)}; use x86_64 or aarch64")
    base = _base(site.get("url"), repo["base_url"])
    distro_url = f"{base}/{entry['distro']}"
    out: dict[str, Any] = {"name": "docker", "os": key, "distro": entry["distro"], "arch": arch,
                           "key_url": site.get("key_url") or f"{distro_url}/{repo['key_file']}",
                           "fingerprint": site.get("fingerprint") or repo["key_fingerprint"],
                           "fingerprint_var": "kiln_repos.docker.fingerprint"}
    if entry["distro"] == "rhel":
        out.update(pkg_mgr="dnf", url=f"{distro_url}/{entry['el']}/$basearch/stable")
    else:
        out.update(pkg_mgr="apt", url=distro_url, suite=entry["suite"], components=list(repo["components"]))
    return out


def kiln_torch_index(stack: Mapping[str, Any], base_url: str | None = None) -> dict[str, Any]:
    """pip index URL and requirement for the stack's PyTorch wheel variant (``{}`` without torch)."""
    r = kiln_resolve_stack(stack)
    if not r.get("torch"):
        return {}
    if not r.get("torch_variant"):
        raise CompatError(f"kiln_torch_index: PyTorch {r['torch']} is not in data/compat.yml")
    ver = r["torch_version"]
    req = f"torch=={ver}" if ver.count(".") == 2 else f"torch=={ver}.*"
    return {"index_url": f"{_base(base_url, compat_data()['torch']['index_url'])}/{r['torch_variant']}",
            "variant": r["torch_variant"], "requirement": req}
