# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Rule family containers: the engine against the OS, CDI, the toolkit and containerd; Enroot and Pyxis.

``engine-os`` (docker-ce on an OS Docker's repository does not serve at that
release; kind distro on an OS without docker.io), ``engine-cdi`` (CDI asked of
an engine without it), ``containerd-cdi`` (containerd's CRI has no CDI before
1.7), ``engine-toolkit`` (the Container Toolkit the engine needs: CDI
generation, containerd's config version 3), ``engine-containerd`` (a
containerd.io release the Docker release does not support), ``enroot-kernel``,
``pyxis-enroot`` and ``pyxis-slurm``. Unknown engine, Enroot and Pyxis releases
are ``unknown-version``.
"""

from __future__ import annotations

import re
from typing import Any

from .. import containers
from ..versions import _major, _mm, kiln_version_cmp, kiln_version_key
from ..violations import WARNING, _known, _unknown, _violation
from .context import Checker


def _resolve(ck: Checker) -> dict[str, Any] | None:
    """The stack's engine (containers.engine_versions) after the unknown-version checks; None to stop."""
    s = ck.s
    eng = containers.engine_versions(s)
    d = ck.d["container_engine"]
    if eng and eng["kind"] == "docker-ce":
        if not eng["version"]:
            ck.add(_violation("engine-os", ["container_engine.version"],
                              "kiln_stack.container_engine is kind docker-ce but names no release.",
                              f"Set kiln_stack.container_engine.version to a Docker Engine release, e.g. "
                              f"\"{max(d['docker_ce']['releases'], key=kiln_version_key)}\".",
                              None, "VERIFIED", "docs/containers.md"))
            return None
        if not eng["release"]:
            newest = max(d["docker_ce"]["releases"], key=kiln_version_key)
            ck.add(_unknown("container_engine.version", eng["version"], "known: " + _known(d["docker_ce"]["releases"]),
                            f"Set kiln_stack.container_engine.version to a release listed in data/compat.yml, e.g. "
                            f"\"{newest}\".", {"container_engine": {"kind": "docker-ce", "version": newest}}))
            return None
    for comp in ("enroot", "pyxis"):
        if comp in s and s[comp] not in ck.d[comp]["releases"]:
            ck.add(_unknown(comp, s[comp], "known: " + _known(ck.d[comp]["releases"]),
                            "Check that the release exists and record it in data/compat.yml with a source, or use a "
                            "listed one.", severity=WARNING))
    return eng


def _built_for(d: dict[str, Any], os_key: str) -> str | None:
    """The newest Docker Engine release of the data that Docker's repository builds for an OS, preferring
    releases whose data is not UNVERIFIED (None: none)."""
    repo = d["docker_ce"]["os"].get(os_key)
    if not repo:
        return None
    first, last = repo.get("first"), repo.get("last")
    rels = [r for r in d["docker_ce"]["releases"]
            if (not first or kiln_version_cmp(_mm(r), first) >= 0) and (not last or kiln_version_cmp(_mm(r), last) <= 0)]
    known = [r for r in rels if d["docker_ce"]["releases"][r].get("confidence") != "UNVERIFIED"] or rels
    return max(known, key=kiln_version_key) if known else None


def _newest(ck: Checker, component: str) -> str:
    return max(ck.d[component]["releases"], key=kiln_version_key)


def r_containers(ck: Checker) -> None:
    s = ck.s
    if not any(k in s for k in ("container_engine", "containerd", "cdi", "enroot", "pyxis")):
        return
    eng = _resolve(ck)
    if eng is not None:
        _engine_os(ck, eng)
        _engine_cdi(ck, eng)
        _engine_toolkit(ck, eng)
        _engine_containerd(ck, eng)
    elif "containerd" in s or s.get("cdi"):
        keys = [k for k in ("containerd", "cdi") if k in s]
        ck.add(_violation("engine-containerd", keys,
                          f"kiln_stack sets {' and '.join(keys)} but no container_engine: nothing would use it.",
                          "Add kiln_stack.container_engine ({kind: docker-ce, version: ...} or {kind: distro}), or "
                          f"remove {' and '.join('kiln_stack.' + k for k in keys)}.", None, "DERIVED", "docs/containers.md",
                          severity=WARNING))
    _enroot(ck)
    _pyxis(ck)


def _engine_os(ck: Checker, eng: dict[str, Any]) -> None:
    d = ck.d["container_engine"]
    if not ck.os:
        if "os" not in ck.s:
            ck.add(_violation("engine-os", ["container_engine", "os"],
                              "The container engine's packages are per OS, and kiln_stack has no os.",
                              "Set kiln_stack.os (e.g. ubuntu-24.04).", None, "VERIFIED", "docs/containers.md"))
        return
    os_key, os_entry = ck.os
    if eng["kind"] == "distro":
        if os_entry.get("family") not in d["distro"]["families"]:
            fit = _built_for(d, os_key)
            ck.add(_violation(
                "engine-os", ["container_engine", "os"],
                f"{os_key} does not package Docker (docker.io): its distribution ships podman instead.",
                (f"Set kiln_stack.container_engine to {{kind: docker-ce, version: \"{fit}\"}} (Docker's repository)."
                 if fit else "Use kind docker-ce with a Docker Engine release Docker's repository builds for this OS."),
                {"container_engine": {"kind": "docker-ce", "version": fit}} if fit else None,
                d["distro"]["confidence"], d["distro"]["source"]))
            return
        builds = eng["builds"]
        missing = [c for c in ("docker_io", "containerd", "runc") if not builds[c]["recorded"]]
        if missing:
            ck.add(_violation(
                "package-build", [f"builds.{c}" for c in missing],
                f"kiln records no {', '.join(missing)} build for {os_key}: the engine is installed at the repository's "
                f"candidate and held there, and CDI support cannot be judged.",
                f"Set kiln_stack.builds.{missing[0]} (and the others) to the exact package versions of your mirror "
                f"(apt-cache policy docker.io containerd runc).", None, "DERIVED", "data/compat.yml distro_builds",
                severity=WARNING))
        return
    repo = d["docker_ce"]["os"].get(os_key)
    version = eng["version"]
    if not repo:
        served = ", ".join(d["docker_ce"]["os"])
        ck.add(_violation(
            "engine-os", ["container_engine", "os"],
            f"Docker's repository serves no packages for {os_key} (it serves {served}).",
            "Use an OS Docker's repository serves, or kiln_stack.container_engine {kind: distro} where the OS packages "
            "docker.io.", None, "SECONDARY", d["docker_ce"]["os"][next(iter(d["docker_ce"]["os"]))]["source"]))
        return
    first, last = repo.get("first"), repo.get("last")
    too_old = first and kiln_version_cmp(_mm(version), first) < 0
    too_new = last and kiln_version_cmp(_mm(version), last) > 0
    if too_old or too_new:
        fit = _built_for(d, os_key)
        span = f"{first or '?'} .. {last or 'current'}"
        ck.add(_violation(
            "engine-os", ["container_engine.version", "os"],
            f"Docker Engine {version} has no packages for {os_key} in Docker's repository (it builds {span} for it).",
            (f"Set kiln_stack.container_engine.version to \"{fit}\"." if fit else
             f"No Docker Engine release kiln knows is built for {os_key}; record one in data/compat.yml."),
            {"container_engine": {"kind": "docker-ce", "version": fit}} if fit else None,
            repo.get("confidence"), repo.get("source")))


def _engine_cdi(ck: Checker, eng: dict[str, Any]) -> None:
    s, d = ck.s, ck.d["container_engine"]
    if not s.get("cdi"):
        return
    if not eng["version"]:
        ck.add(_violation(
            "engine-cdi", ["cdi", "container_engine"],
            "kiln_stack.cdi is true, but the distribution engine's version is not recorded, so CDI support cannot be judged.",
            "Set kiln_stack.builds.docker_io to the exact docker.io build, or drop kiln_stack.cdi.", None,
            "DERIVED", "docs/containers.md", severity=WARNING))
        return
    flag = d["docker_ce"]["cdi"]["features_flag_from"]
    if containers.cdi_mode(eng["version"]) is None:
        what = "the distribution's docker.io" if eng["kind"] == "distro" else "Docker Engine"
        ck.add(_violation(
            "engine-cdi", ["cdi", "container_engine"],
            f"kiln_stack.cdi is true, but {what} {eng['version']} has no CDI support (Docker has it from {flag['version']}).",
            f"Use Docker Engine >= {flag['version']} (kind docker-ce), or remove kiln_stack.cdi (the nvidia runtime "
            f"still works through --runtime=nvidia).", {"cdi": None}, flag["confidence"], flag["source"]))
        return
    ctd = eng["containerd"]
    cri = d["containerd"]["cri_cdi_from"]
    if ctd and kiln_version_cmp(_mm(ctd), cri["version"]) < 0:
        ck.add(_violation(
            "containerd-cdi", ["cdi", "containerd"],
            f"containerd {ctd}'s CRI plugin has no CDI (from {cri['version']}): Docker's CDI works, Kubernetes pods on "
            f"this containerd would not get CDI devices.",
            f"Use containerd >= {cri['version']} if Kubernetes runs on this node.", None, cri["confidence"], cri["source"],
            severity=WARNING))


def _engine_toolkit(ck: Checker, eng: dict[str, Any]) -> None:
    s, d = ck.s, ck.d["container_engine"]
    tk = s.get("container_toolkit")
    if not tk:
        ck.add(_violation(
            "engine-toolkit", ["container_engine", "container_toolkit"],
            "The stack has a container engine but no container_toolkit: containers on this node get no GPUs "
            "(no nvidia runtime, no CDI spec).",
            f"Set kiln_stack.container_toolkit (e.g. \"{_newest(ck, 'container_toolkit')}\").", None, "DERIVED",
            "docs/containers.md",
            severity=WARNING))
        return
    if tk not in ck.d["container_toolkit"]["releases"]:
        return  # unknown-version already
    need = d["toolkit"]
    if s.get("cdi") and kiln_version_cmp(tk, need["cdi_from"]["version"]) < 0:
        ck.add(_violation(
            "engine-toolkit", ["container_toolkit", "cdi"],
            f"CDI needs `nvidia-ctk cdi generate`, which the Container Toolkit has from {need['cdi_from']['version']}; "
            f"the stack's toolkit is {tk}.",
            f"Raise kiln_stack.container_toolkit to {need['cdi_from']['version']} or newer.",
            {"container_toolkit": _newest(ck, "container_toolkit")},
            need["cdi_from"]["confidence"], need["cdi_from"]["source"]))
    ctd = eng["containerd"]
    v3 = need["containerd_v3_from"]
    if ctd and _major(ctd) == "2" and kiln_version_cmp(tk, v3["version"]) < 0:
        newest = _newest(ck, "container_toolkit")
        ck.add(_violation(
            "engine-toolkit", ["container_toolkit", "containerd"],
            f"containerd {ctd} reads config version 3, which `nvidia-ctk runtime configure` writes from toolkit "
            f"{v3['version']}; the stack's toolkit {tk} would register the nvidia runtime in a format containerd "
            f"ignores.",
            f"Raise kiln_stack.container_toolkit to {newest} (>= {v3['version']}).", {"container_toolkit": newest},
            v3["confidence"], v3["source"]))


def _engine_containerd(ck: Checker, eng: dict[str, Any]) -> None:
    s = ck.s
    if "containerd" not in s:
        return
    if eng["kind"] == "distro":
        ck.add(_violation(
            "engine-containerd", ["containerd", "container_engine"],
            "kiln_stack.containerd names a containerd.io release, but the engine is the distribution's (kind distro), "
            "whose containerd is the OS's build.",
            "Remove kiln_stack.containerd, or pin the OS's build with kiln_stack.builds.containerd.",
            {"containerd": None}, "DERIVED", "docs/containers.md"))
        return
    rel = eng["release"] or {}
    minors = rel.get("containerd_minors") or []
    if _mm(s["containerd"]) not in minors:
        ck.add(_violation(
            "engine-containerd", ["containerd", "container_engine.version"],
            f"Docker Engine {eng['version']} supports containerd {', '.join(minors)}.x, not {s['containerd']}.",
            f"Remove kiln_stack.containerd (Docker {eng['version']} ships containerd.io {rel.get('containerd')}), or use "
            f"a {' / '.join(minors)} release.", {"containerd": rel.get("containerd")}, rel.get("confidence"),
            rel.get("source")))


def _enroot(ck: Checker) -> None:
    s = ck.s
    if "enroot" not in s or "kernel" not in s:
        return
    need = ck.d["enroot"]["min_kernel"]
    match = re.match(r"([0-9]+)\.([0-9]+)", s["kernel"], re.ASCII)
    if match and kiln_version_cmp(f"{match.group(1)}.{match.group(2)}", need["version"]) < 0:
        ck.add(_violation(
            "enroot-kernel", ["enroot", "kernel"],
            f"Enroot needs Linux >= {need['version']} (user namespaces, seccomp filters); the kernel is {s['kernel']}.",
            f"Run Enroot on a kernel >= {need['version']}, or remove kiln_stack.enroot.", {"enroot": None},
            need["confidence"], need["source"]))


def _pyxis(ck: Checker) -> None:
    s, d = ck.s, ck.d["pyxis"]
    if "pyxis" not in s:
        return
    slurm = s.get("slurm") or {}
    if not slurm.get("slurmd") and not slurm.get("slurmctld"):
        ck.add(_violation(
            "pyxis-slurm", ["pyxis", "slurm"],
            "kiln_stack.pyxis is set but the stack has no Slurm: Pyxis is a SPANK plugin, built against and loaded by "
            "Slurm.",
            "Add kiln_stack.slurm ({slurmctld: ..., slurmd: ...}), or remove kiln_stack.pyxis.", {"pyxis": None},
            "DERIVED", d["min_enroot"]["source"]))
    min_enroot = d["min_enroot"]
    enroot = s.get("enroot")
    if not enroot:
        ck.add(_violation(
            "pyxis-enroot", ["pyxis", "enroot"],
            "kiln_stack.pyxis is set without kiln_stack.enroot: Pyxis runs every container through Enroot, which kiln "
            "then does not install.",
            f"Set kiln_stack.enroot (>= {min_enroot['version']}), or make sure Enroot is installed on the compute nodes.",
            None, "DERIVED", min_enroot["source"], severity=WARNING))
    elif kiln_version_cmp(enroot, min_enroot["version"]) < 0:
        newest = _newest(ck, "enroot")
        ck.add(_violation(
            "pyxis-enroot", ["pyxis", "enroot"],
            f"Pyxis needs Enroot >= {min_enroot['version']}; the stack's Enroot is {enroot}.",
            f"Set kiln_stack.enroot to {newest}.", {"enroot": newest}, min_enroot["confidence"], min_enroot["source"]))
