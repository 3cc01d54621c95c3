# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Container runtimes: the engine plan and the engine's package strings.

``data/compat.yml`` ``container_engine`` holds the Docker Engine releases (the
containerd.io, buildx and compose releases each ships with, the containerd
minors it supports), how each turns CDI on, and per OS Docker's repository
layout; ``distro_builds`` holds the distribution's docker.io / containerd / runc
builds. :func:`kiln_container_plan` is what the docker_engine role configures
from; :func:`engine_packages` renders the pinned package strings
(``kiln_pkg(stack, 'container_engine')``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .data import compat_data
from .errors import CompatError
from .lookup import _os_entry
from .schema import show
from .stack import checked
from .versions import _ge, _major, _mm, kiln_version_key


def upstream_version(build: str) -> str:
    """The upstream release of a distribution build: ``20.10.24+dfsg1-1+deb12u1+b6`` -> ``20.10.24``."""
    text = build.split(":", 1)[-1]
    match = re.match(r"[0-9]+(?:\.[0-9]+)*", text, re.ASCII)
    return match.group(0) if match else text


def docker_release(version: str | None) -> tuple[str, dict[str, Any]] | None:
    """The data entry of a docker-ce release (a full version, or a minor naming its newest known patch)."""
    if not version:
        return None
    rels = compat_data()["container_engine"]["docker_ce"]["releases"]
    if version in rels:
        return version, rels[version]
    if version.count(".") == 1:
        fits = [r for r in rels if _mm(r) == version]
        if fits:
            best = max(fits, key=kiln_version_key)
            return best, rels[best]
    return None


def docker_os(os_id: str | None) -> tuple[str, dict[str, Any] | None]:
    """``(os key, Docker's repository entry for it or None)`` for an OS id."""
    osx = _os_entry(os_id) if os_id else None
    key = osx[0] if osx else (os_id or "")
    return key, (compat_data()["container_engine"]["docker_ce"]["os"].get(key))


def cdi_mode(version: str | None) -> str | None:
    """How a Docker Engine release turns CDI on: ``features.cdi`` (opt-in), ``default`` or None (no CDI)."""
    if not version:
        return None
    cdi = compat_data()["container_engine"]["docker_ce"]["cdi"]
    if _ge(_mm(version), cdi["default_from"]["version"]):
        return "default"
    if _ge(_mm(version), cdi["features_flag_from"]["version"]):
        return "features.cdi"
    return None


def _distro_builds(stack: Mapping[str, Any], os_key: str) -> dict[str, dict[str, Any]]:
    builds = stack.get("builds") or {}
    data = (compat_data().get("distro_builds") or {}).get(os_key, {})
    out: dict[str, dict[str, Any]] = {}
    for comp in ("docker_io", "containerd", "runc"):
        if builds.get(comp):
            out[comp] = {"build": builds[comp], "from": f"kiln_stack.builds.{comp}", "recorded": True}
        elif data.get(comp):
            out[comp] = {"build": data[comp]["build"], "from": f"data/compat.yml distro_builds.{os_key}.{comp}",
                         "recorded": True, "confidence": data[comp].get("confidence")}
        else:
            out[comp] = {"build": None, "from": None, "recorded": False}
    return out


def engine_versions(stack: Mapping[str, Any]) -> dict[str, Any] | None:
    """The engine of a normalised stack: ``{kind, version, containerd, release, builds}`` (None without an engine).

    docker-ce: ``version`` the stack's release (resolved to a known patch), ``containerd`` the stack's
    ``containerd`` or the release's containerd.io; distro: the upstream versions of the OS's docker.io
    and containerd builds (None where no build is recorded).
    """
    eng = stack.get("container_engine")
    if not eng:
        return None
    kind = eng.get("kind")
    if kind == "docker-ce":
        rel = docker_release(eng.get("version"))
        version = rel[0] if rel else eng.get("version")
        containerd = stack.get("containerd") or (rel[1]["containerd"] if rel else None)
        return {"kind": kind, "version": version, "containerd": containerd, "release": rel[1] if rel else None,
                "builds": {}}
    os_key = docker_os(stack.get("os"))[0]
    builds = _distro_builds(stack, os_key)
    dio, ctd = builds["docker_io"]["build"], builds["containerd"]["build"]
    return {"kind": kind, "version": upstream_version(dio) if dio else None,
            "containerd": upstream_version(ctd) if ctd else None, "release": None, "builds": builds}


def kiln_container_plan(stack: Mapping[str, Any]) -> dict[str, Any]:
    """What the container roles configure for a stack.

    ``{engine: {kind, version, cdi_mode, source} | None, containerd: {version, config_version, cdi} | None,
    cdi: bool, enroot: {version} | None, pyxis: {version, min_enroot} | None}``. ``cdi_mode`` is
    ``features.cdi`` (daemon.json ``"features": {"cdi": true}``), ``default`` or None (the engine has
    no CDI); ``cdi`` is true when the stack asks for it and the engine has it (preflight refuses the
    other case, rule engine-cdi). ``config_version`` is containerd's config format (2 for 1.x, 3 for 2.x).
    """
    s = checked(stack)
    d = compat_data()["container_engine"]
    eng = engine_versions(s)
    out: dict[str, Any] = {"engine": None, "containerd": None, "cdi": False, "enroot": None, "pyxis": None}
    if eng:
        if eng["kind"] == "docker-ce" and not eng["release"]:
            raise CompatError(f"kiln: kiln_stack.container_engine.version {show(eng['version'])} is not a Docker Engine "
                              f"release in data/compat.yml (known: {', '.join(d['docker_ce']['releases'])}). Fix: set it "
                              f"to one of those (preflight rule unknown-version).")
        mode = cdi_mode(eng["version"]) if eng["version"] else None
        source = ("Docker's repository (docker-ce, containerd.io)" if eng["kind"] == "docker-ce"
                  else "the distribution (docker.io, containerd, runc)")
        out["engine"] = {"kind": eng["kind"], "version": eng["version"], "cdi_mode": mode, "source": source}
        ctd = eng["containerd"]
        if ctd:
            conf = d["containerd"]["config_version"].get(_major(ctd))
            if conf is None:
                raise CompatError(f"kiln: containerd {show(ctd)} has no known config format (data/compat.yml "
                                  f"container_engine.containerd.config_version). Fix: set kiln_stack.containerd to a 1.x or 2.x release.")
            out["containerd"] = {"version": ctd, "config_version": int(conf),
                                 "cdi": _ge(_mm(ctd), d["containerd"]["cri_cdi_from"]["version"])}
        else:
            out["containerd"] = {"version": None, "config_version": 2, "cdi": False}
        out["cdi"] = bool(s.get("cdi")) and mode is not None
    if s.get("enroot"):
        out["enroot"] = {"version": s["enroot"]}
    if s.get("pyxis"):
        out["pyxis"] = {"version": s["pyxis"], "min_enroot": compat_data()["pyxis"]["min_enroot"]["version"]}
    return out


def engine_packages(stack: Mapping[str, Any], mgr: str, el: str | None, os_id: str | None) -> list[str]:
    """Pinned package strings of the stack's engine (``[]`` without one)."""
    s = checked(stack)
    eng = engine_versions(s)
    if not eng:
        return []
    tpl = compat_data()["packages"][mgr]
    sep = "=" if mgr == "apt" else "-"

    def render(key: str, fields: dict[str, Any]) -> list[str]:
        entry = tpl.get(key)
        if entry is None:
            raise CompatError(f"kiln_pkg: no {mgr} packages for {key} in data/compat.yml packages.{mgr}")
        names = entry["names"]
        if "{build}" in entry["version"] and not fields.get("build"):
            return list(names)  # installed at the repository's candidate, then held
        ver = entry["version"].format(**fields)
        return [f"{n}{sep}{ver}" for n in names]

    os_key, repo_os = docker_os(os_id or s.get("os"))
    if eng["kind"] == "distro":
        if mgr != "apt":
            raise CompatError(f"kiln_pkg: {os_key or 'this OS'} packages no docker.io (RHEL ships podman): "
                              f"use kiln_stack.container_engine {{kind: docker-ce, version: ...}} (preflight rule engine-os).")
        out: list[str] = []
        for comp in ("docker_io", "containerd", "runc"):
            out += render(f"engine_{comp}", {"build": eng["builds"][comp]["build"]})
        return out
    if not repo_os:
        raise CompatError(f"kiln_pkg: Docker's repository has no packages for {show(os_key or os_id)} "
                          f"(preflight rule engine-os); data/compat.yml container_engine.docker_ce.os lists those it serves.")
    rel = eng["release"]
    if not rel:
        raise CompatError(f"kiln_pkg: Docker Engine {show(eng['version'])} is not a release in data/compat.yml")
    fields = {"version": eng["version"], "containerd": eng["containerd"], "buildx": rel["buildx"], "compose": rel["compose"],
              "tag": repo_os.get("tag", ""), "suite": repo_os.get("suite", ""), "el": el or repo_os.get("el", "")}
    return (render("engine_docker_ce", fields) + render("engine_containerd_io", fields)
            + render("engine_buildx", fields) + render("engine_compose", fields))
