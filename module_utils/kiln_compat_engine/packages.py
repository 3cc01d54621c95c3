# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Package strings: the exact pinned package names and versions of a stack, per package manager.

Templates live in ``data/compat.yml`` ``packages``; distribution builds (Slurm,
munge, PMIx, Open MPI, ...) in ``distro_builds`` or ``kiln_stack.builds``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from . import containers
from .data import compat_data
from .errors import CompatError
from .lookup import _doca_release, _driver_branch, _os_entry
from .resolve import kiln_resolve_stack
from .schema import show
from .stack import checked
from .versions import _major, _mm, _slurm_major


# NVIDIA components (versions from the stack) ...
NVIDIA_COMPONENTS = ("driver", "driver_companions", "fabricmanager", "cuda", "cudnn", "nccl", "container_toolkit", "dcgm", "dcgm_exporter", "ofed")
# ... and distribution packages (exact builds from data/compat.yml distro_builds or kiln_stack.builds).
DISTRO_COMPONENTS = ("slurmctld", "slurmd", "munge", "pmix", "openmpi", "openmpi_dev", "mpi4py", "node_exporter")
# ... and the container engine (Docker's packages or the distribution's, module ``containers``).
ENGINE_COMPONENTS = ("container_engine",)
PACKAGE_COMPONENTS = NVIDIA_COMPONENTS + DISTRO_COMPONENTS + ENGINE_COMPONENTS
# The build key of each distribution component (openmpi_dev is built with openmpi).
_BUILD_KEY = {"slurmctld": "slurm", "slurmd": "slurm", "munge": "munge", "pmix": "pmix", "openmpi": "openmpi",
              "openmpi_dev": "openmpi", "mpi4py": "mpi4py", "node_exporter": "node_exporter",
              # the inbox RDMA stack (rendered by kiln_pkg(stack, 'ofed'), not a component of their own)
              "rdma_core": "rdma_core", "perftest": "perftest"}
# The package groups of each RDMA stack kind (kiln_pkg(stack, 'ofed')).
OFED_GROUPS = {"inbox": ("rdma_core", "perftest"), "doca": ("doca_ofed",), "mlnx": ()}


def _pkg_mgr_and_el(target: str | None, stack: Mapping[str, Any]) -> tuple[str, str | None]:
    if target in ("apt", "dnf", "yum"):
        mgr = "dnf" if target == "yum" else target
        osx = _os_entry(stack["os"]) if stack.get("os") else None
        return mgr, (osx[1].get("el") if osx else None)
    os_id = target or stack.get("os")
    if not os_id:
        raise CompatError("kiln: need a package manager (apt|dnf) or an OS (kiln_stack.os) to render package strings")
    osx = _os_entry(os_id)
    if not osx:
        raise CompatError(f"kiln: unknown OS {show(os_id)} for package rendering")
    return osx[1]["pkg_mgr"], osx[1].get("el")


def _render(mgr: str, template_key: str, fields: dict[str, Any], os_key: str | None = None) -> list[str]:
    tpl = compat_data()["packages"][mgr].get(template_key)
    if tpl is None:
        return []
    names = [n.format(**fields) for n in (tpl.get("names_by_os") or {}).get(os_key, tpl["names"])]
    if tpl.get("version") is None or ("{build}" in tpl["version"] and not fields.get("build")):
        return names
    ver = tpl["version"].format(**fields)
    sep = "=" if mgr == "apt" else "-"
    return [f"{n}{sep}{ver}" for n in names]


def kiln_pkg(stack: Mapping[str, Any], component: str, pkg_mgr: str | None = None) -> list[str]:
    """Exact pinned package strings for one component of a stack.

    ``pkg_mgr`` is ``apt``, ``dnf`` or an OS id (default: ``stack.os``). apt strings are
    ``name=version``; dnf strings are ``name-version-release``. Returns ``[]`` when the
    component is absent from the stack (or, for ``ofed``, when it is inbox/mlnx, which
    are not installed from a package repository).
    """
    if not isinstance(component, str) or component not in PACKAGE_COMPONENTS:
        raise CompatError(f"kiln_pkg: unknown component {show(component)}; use one of {list(PACKAGE_COMPONENTS)}")
    stack = checked(stack)  # once: the helpers below take this value, never the raw input again
    r = kiln_resolve_stack(stack)
    mgr, el = _pkg_mgr_and_el(pkg_mgr, r)
    fields: dict[str, Any] = {"el": el or ""}
    if component in DISTRO_COMPONENTS:
        os_id = pkg_mgr if pkg_mgr not in (None, "apt", "dnf", "yum") else r.get("os")
        osx = _os_entry(os_id) if os_id else None
        os_key = osx[0] if osx else None
        build = kiln_distro_build(stack, component, os_key)["build"]
        if component in ("slurmctld", "slurmd") and not (r.get("slurm") or {}).get(component):
            return []
        fields.update(build=build)
        return _render(mgr, component, fields, os_key)
    if component == "container_engine":
        os_id = pkg_mgr if pkg_mgr not in (None, "apt", "dnf", "yum") else r.get("os")
        return containers.engine_packages(stack, mgr, el, os_id)
    if component == "dcgm_exporter":
        if not r.get("dcgm_exporter"):
            return []
        fields.update(version=r["dcgm_exporter"].lstrip("v"))
        return _render(mgr, "dcgm_exporter", fields)
    if component == "driver":
        if not r.get("driver"):
            return []
        if "driver_branch" not in r:
            raise CompatError(f"kiln_pkg: driver {r['driver']} is not a release of a known branch")
        if mgr == "dnf" and not el:
            raise CompatError("kiln_pkg: dnf driver packages need kiln_stack.os (for the .elN release)")
        fields.update(branch=r["driver_branch"], version=r["driver"])
        return _render(mgr, f"driver_{r['driver_flavor']}", fields)
    if component == "driver_companions":
        if not r.get("driver") or "driver_branch" not in r:
            return []
        fields.update(branch=r["driver_branch"], version=r["driver"])
        return _render(mgr, f"driver_{r['driver_flavor']}_companions", fields)
    if component == "fabricmanager":
        if not r.get("fabricmanager"):
            return []
        br = _driver_branch(r["fabricmanager"])
        if not br:
            raise CompatError(f"kiln_pkg: fabricmanager {r['fabricmanager']} is not a driver version of a known branch")
        fields.update(branch=br[0], version=r["fabricmanager"])
        return _render(mgr, "fabricmanager", fields)
    if component == "cuda":
        if not r.get("cuda"):
            return []
        if "cuda_full" not in r:
            raise CompatError(f"kiln_pkg: CUDA {r['cuda']} is not in data/compat.yml")
        c = r["cuda_full"]
        fields.update(cuda_full=c, cuda_dash=_mm(c).replace(".", "-"), cuda_major=_major(c))
        return _render(mgr, "cuda", fields)
    if component == "cudnn":
        if not r.get("cudnn"):
            return []
        ver = r["cudnn"]
        rel = compat_data()["cudnn"]["releases"].get(ver)
        if not rel:
            raise CompatError(f"kiln_pkg: cuDNN {ver} is not in data/compat.yml")
        if "cuda_full" not in r:
            raise CompatError("kiln_pkg: cuDNN packages are keyed by CUDA major: kiln_stack.cuda is required")
        major = _major(r["cuda_full"])
        if _major(ver) == "8":
            build = (rel.get("build_suffix") or {}).get(major)
            if not build:
                raise CompatError(f"kiln_pkg: cuDNN {ver} has no CUDA {major} build")
            fields.update(version=ver, build=build)
            return _render(mgr, "cudnn8", fields)
        fields.update(version=ver, cuda_major=major)
        return _render(mgr, "cudnn9", fields)
    if component == "nccl":
        if not r.get("nccl"):
            return []
        if "nccl_build" not in r:
            raise CompatError(
                f"kiln_pkg: no known build of NCCL {r['nccl']} for CUDA {r.get('cuda_full', '(absent)')}; "
                f"write kiln_stack.nccl as <version>-1+cuda<X.Y> or set kiln_stack.cuda")
        fields.update(version=r["nccl_version"], build=r["nccl_build"])
        return _render(mgr, "nccl", fields)
    if component == "container_toolkit":
        if not r.get("container_toolkit"):
            return []
        fields.update(version=r["container_toolkit"])
        return _render(mgr, "container_toolkit", fields)
    if component == "dcgm":
        if not r.get("dcgm"):
            return []
        ver = r["dcgm"]
        if _major(ver) == "3":
            fields.update(version=ver)
            return _render(mgr, "dcgm3", fields)
        if not r.get("dcgm_cuda_major"):
            raise CompatError("kiln_pkg: DCGM 4 packages are per CUDA major: set kiln_stack.driver or kiln_stack.cuda")
        fields.update(version=ver, dcgm_cuda=r["dcgm_cuda_major"])
        return _render(mgr, "dcgm4", fields)
    # ofed: inbox -> rdma-core's packages and perftest at their distribution builds; doca -> the
    # profile's metapackage at its exact version; mlnx -> [] (MLNX_OFED installs from NVIDIA's tarball
    # with mlnxofedinstall, not from a package repository kiln can pin).
    os_id = pkg_mgr if pkg_mgr not in (None, "apt", "dnf", "yum") else r.get("os")
    osx = _os_entry(os_id) if os_id else None
    builds = kiln_ofed_builds(stack, osx[0] if osx else None)
    ofed = r.get("ofed") or {}
    if ofed.get("kind") == "inbox":
        out: list[str] = []
        for group in OFED_GROUPS["inbox"]:
            out += _render(mgr, group, dict(fields, build=builds[group]["build"]), osx[0] if osx else None)
        return out
    if ofed.get("kind") == "doca":
        fields.update(profile=ofed.get("profile", "doca-ofed"), build=builds["doca_ofed"]["build"])
        return _render(mgr, "ofed_doca", fields)
    return []


def kiln_pkg_modules(stack: Mapping[str, Any], component: str, pkg_mgr: str | None = None) -> list[str]:
    """The dnf module streams a component's packages belong to, ``<module>:<stream>``: the driver's
    ``nvidia-driver:<branch>-open`` (open kernel modules) or ``nvidia-driver:<branch>-dkms``
    (proprietary) on EL 8/9, enabled before its packages install (they are invisible to dnf until
    then). ``[]`` on apt, on EL 10 (no modularity), for a component without a stream, or when the
    component is absent. A dnf target without an OS (``pkg_mgr='dnf'`` and no ``stack.os``) cannot
    say which EL it is: CompatError.
    ``pkg_mgr`` as for ``kiln_pkg``."""
    if not isinstance(component, str) or component not in PACKAGE_COMPONENTS:
        raise CompatError(f"kiln_pkg_modules: unknown component {show(component)}; use one of {list(PACKAGE_COMPONENTS)}")
    stack = checked(stack)
    r = kiln_resolve_stack(stack)
    mgr, el = _pkg_mgr_and_el(pkg_mgr, r)
    if component != "driver" or not r.get("driver") or "driver_branch" not in r:
        return []
    if mgr == "dnf" and not el:
        raise CompatError("kiln_pkg_modules: the driver's dnf module stream depends on the EL release: set kiln_stack.os")
    tpl = compat_data()["packages"][mgr].get(f"driver_{r['driver_flavor']}") or {}
    module = tpl.get("module")
    if not module or (el or "") not in (tpl.get("module_els") or []):
        return []  # apt, or an EL without modularity (10: nvidia-open installed and version-locked)
    return [module.format(branch=r["driver_branch"], version=r["driver"])]


def kiln_pkg_replaces(stack: Mapping[str, Any], component: str, pkg_mgr: str | None = None) -> list[str]:
    """Globs of the packages a component's pins replace when installed under other names: on apt the
    driver's metapackages and Fabric Manager carry the branch in their names (``nvidia-open-580``), so a
    branch change (or a flavor change) removes ``nvidia-open-[0-9]*``, ``cuda-drivers-[0-9]*``,
    ``nvidia-fabricmanager-[0-9]*`` and ``libnvidia-nscq-[0-9]*`` other than the new pins in the same
    transaction. ``[]`` where the names do not change (dnf: one ``nvidia-open`` across branches, the
    module stream switches) or the component is absent."""
    if not isinstance(component, str) or component not in PACKAGE_COMPONENTS:
        raise CompatError(f"kiln_pkg_replaces: unknown component {show(component)}; use one of {list(PACKAGE_COMPONENTS)}")
    stack = checked(stack)
    r = kiln_resolve_stack(stack)
    mgr, _el = _pkg_mgr_and_el(pkg_mgr, r)
    if component == "driver" and r.get("driver") and "driver_branch" in r:
        key = f"driver_{r['driver_flavor']}"
    elif component == "fabricmanager" and r.get("fabricmanager"):
        key = "fabricmanager"
    else:
        return []
    return list((compat_data()["packages"][mgr].get(key) or {}).get("replaces") or [])


def kiln_ofed_builds(stack: Mapping[str, Any], os_id: str | None = None) -> dict[str, dict[str, Any]]:
    """The exact build of each package group of the stack's RDMA stack: ``{group: {build, from, recorded}}``.

    inbox: ``rdma_core`` and ``perftest`` (kiln_distro_build: kiln_stack.builds, else distro_builds);
    doca: ``doca_ofed`` (kiln_stack.builds.doca_ofed, else the DOCA update's ``doca_ofed`` in
    data/compat.yml); mlnx or no ofed: ``{}``. ``build: None`` means the package is installed at the
    repository's candidate and held there (preflight plan lists it under ``candidates``).
    """
    s = stack = checked(stack)
    kind = (s.get("ofed") or {}).get("kind")
    if kind == "inbox":
        return {g: kiln_distro_build(stack, g, os_id) for g in OFED_GROUPS["inbox"]}
    if kind != "doca":
        return {}
    pinned = (s.get("builds") or {}).get("doca_ofed")
    if pinned:
        return {"doca_ofed": {"build": pinned, "from": "kiln_stack.builds.doca_ofed", "recorded": True}}
    found = _doca_release((s.get("ofed") or {}).get("version"))
    upd, entry = (found[2], found[3]) if found else (None, None)
    osx = _os_entry(os_id or s.get("os") or "")
    by_os = (entry or {}).get("doca_ofed_by_os") or {}
    if osx and by_os.get(osx[0]):
        return {"doca_ofed": {"build": by_os[osx[0]],
                              "from": f"data/compat.yml ofed.doca_releases.{found[0]}.updates.{upd}.doca_ofed_by_os.{osx[0]}",
                              "recorded": True, "confidence": entry.get("doca_ofed_confidence", entry.get("confidence"))}}
    if entry and entry.get("doca_ofed"):
        return {"doca_ofed": {"build": entry["doca_ofed"], "from": f"data/compat.yml ofed.doca_releases.{found[0]}.updates.{upd}",
                              "recorded": True, "confidence": entry.get("confidence")}}
    return {"doca_ofed": {"build": None, "from": None, "recorded": False}}


def kiln_distro_build(stack: Mapping[str, Any], component: str, os_id: str | None = None) -> dict[str, Any]:
    """The exact package build of a distribution component: ``{build, from, recorded}``.

    ``build`` comes from ``kiln_stack.builds`` (``slurmctld``/``slurmd`` before ``slurm``), else from
    ``data/compat.yml`` ``distro_builds[os]`` (Slurm: the entry for the stack's Slurm major), else it is
    ``None``: the package is installed at the repository's candidate and held there. A Slurm build whose
    version is not of the stack's Slurm major is an CompatError (the two cannot both be meant).
    """
    if not isinstance(component, str) or component not in _BUILD_KEY:
        raise CompatError(f"kiln_distro_build: unknown component {show(component)}; use one of {list(_BUILD_KEY)}")
    s = checked(stack)
    osx = _os_entry(os_id or s.get("os") or "")
    os_key = osx[0] if osx else None
    builds = s.get("builds") or {}
    key = _BUILD_KEY[component]
    data = (compat_data().get("distro_builds") or {}).get(os_key or "", {})
    if key == "slurm":
        want = (s.get("slurm") or {}).get(component) if component in ("slurmctld", "slurmd") else None
        for k in (component, "slurm"):
            if builds.get(k):
                if want and not (builds[k] == want or builds[k].split(":")[-1].startswith(_slurm_major(want) + ".")):
                    raise CompatError(
                        f"kiln: kiln_stack.builds.{k} is {show(builds[k])}, not a build of Slurm {want} "
                        f"(kiln_stack.slurm.{component}). Fix: Set kiln_stack.builds.{k} to the {_slurm_major(want)} build your "
                        f"repository carries, or kiln_stack.slurm.{component} to the release of that build.")
                return {"build": builds[k], "from": f"kiln_stack.builds.{k}", "recorded": True}
        entry = (data.get("slurm") or {}).get(_slurm_major(want)) if want else None
        if entry:
            return {"build": entry["build"], "from": f"data/compat.yml distro_builds.{os_key}.slurm",
                    "recorded": True, "confidence": entry.get("confidence")}
        return {"build": None, "from": None, "recorded": False,
                "carried": sorted((data.get("slurm") or {}))}
    if builds.get(key):
        return {"build": builds[key], "from": f"kiln_stack.builds.{key}", "recorded": True}
    entry = data.get(key)
    if entry:
        return {"build": entry["build"], "from": f"data/compat.yml distro_builds.{os_key}.{key}", "recorded": True,
                "confidence": entry.get("confidence")}
    return {"build": None, "from": None, "recorded": False}


def kiln_tool(name: str, version: str | None = None) -> dict[str, str]:
    """A source release kiln builds (data/compat.yml ``tools``): ``{version, url}``; ``version`` overrides the data's."""
    tools = compat_data().get("tools") or {}
    if not isinstance(name, str) or name not in tools:
        raise CompatError(f"kiln_tool: unknown tool {show(name)}; use one of {sorted(tools)}")
    ver = str(version or tools[name]["version"])
    if not re.fullmatch(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}", ver, re.ASCII):
        raise CompatError(f"kiln_tool: {name} version {show(ver)} is not a release number such as {tools[name]['version']}")
    return {"version": ver, "url": tools[name]["url"].format(version=ver)}


def kiln_packages(stack: Mapping[str, Any], os: str | None = None) -> dict[str, list[str]]:
    """All pinned package strings of a stack, keyed by component (absent components omitted).

    NVIDIA components appear when the stack names them; Slurm, munge and PMIx when it names Slurm;
    Open MPI, mpi4py and the node exporter (every kiln node runs them) whenever an OS is known.
    A distribution package without a recorded build is a bare name (see kiln_distro_build).
    """
    out: dict[str, list[str]] = {}
    s = stack = checked(stack)
    for comp in PACKAGE_COMPONENTS:
        if comp in DISTRO_COMPONENTS:
            if not (os or s.get("os")) or (comp in ("munge", "pmix") and not s.get("slurm")):
                continue
        pkgs = kiln_pkg(stack, comp, os)
        if pkgs:
            out[comp] = pkgs
    return out
