# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The plan: a bill of materials per inventory group (resolved versions, packages, repositories).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import containers
from .errors import CompatError, need_list, need_mapping
from .inventory import kiln_hostlist
from .lookup import _os_entry
from .schema import show
from .gpudirect import kiln_gpudirect
from .packages import DISTRO_COMPONENTS, PACKAGE_COMPONENTS, kiln_distro_build, kiln_ofed_builds, kiln_pkg
from .repos import _check_repos, kiln_doca_repo, kiln_repo, kiln_torch_index
from .resolve import kiln_resolve_stack
from .stack import checked, stack_problems


def kiln_plan(stacks: Sequence[Mapping[str, Any]], groups: Mapping[str, Sequence[str]],
              repos: Any = None, arch: str = "x86_64") -> dict[str, Any]:
    """Bill of materials per inventory group from kiln_stacks_by_host output.

    Each group lists its distinct stacks with the hosts they cover, the resolved
    versions, the exact package strings for the stack's OS, and the repositories.
    Package rendering problems are reported per stack in ``errors`` (never raised).
    """
    stacks = need_list("kiln_plan", "the input (kiln_stacks_by_host's groups)", stacks)
    need_mapping("kiln_plan", "groups (inventory group -> hosts)", groups)
    for item in stacks:
        need_mapping("kiln_plan", "each group of kiln_stacks_by_host", item)
        if item.get("stack") is not None:
            need_mapping("kiln_plan", "a group's stack", item["stack"])
        need_list("kiln_plan", "a group's hosts", item.get("hosts") or [])
        for problem in need_list("kiln_plan", "a group's problems", item.get("problems") or []):
            if not isinstance(problem, Mapping) or not {"message", "fix"} <= set(problem):
                raise CompatError("kiln_plan: a group's problems must be {message, fix} mappings (kiln_stacks_by_host)")
    for group in groups:
        need_list("kiln_plan", f"the hosts of group {show(group)}", groups[group], one_ok=True)
    site = _check_repos(repos)
    cuda_base_url = (site.get("cuda") or {}).get("url")
    ctk_base_url = (site.get("container_toolkit") or {}).get("url")
    torch_base_url = (site.get("torch") or {}).get("url")
    rendered: list[dict[str, Any]] = []
    host_to_stack: dict[str, int] = {}
    for idx, item in enumerate(stacks):
        stack = item.get("stack") or {}
        entry: dict[str, Any] = {"stack": stack, "errors": []}
        problems = item.get("problems") or stack_problems(item.get("stack"))
        if problems:  # never render packages from (or echo) a malformed stack
            entry = {"stack": {}, "errors": [f"{p['message']} Fix: {p['fix']}" for p in problems]}
            rendered.append(entry)
            for h in item.get("hosts") or []:
                host_to_stack[str(h)] = idx
            continue
        try:
            raw, stack = stack, checked(stack)  # checked once; every helper below takes this value
            resolved = kiln_resolve_stack(stack)
            entry["resolved"] = {k: v for k, v in resolved.items() if k != "gpu_info"}
            if resolved.get("gpu_info"):
                gi = resolved["gpu_info"]
                entry["gpu"] = {k: gi.get(k) for k in ("model", "variant", "arch", "cc", "nvswitch", "tdp_w")}
            if stack.get("os") and resolved.get("pkg_mgr"):
                pk: dict[str, list[str]] = {}
                for comp in PACKAGE_COMPONENTS:
                    if comp in DISTRO_COMPONENTS and comp in ("munge", "pmix") and not stack.get("slurm"):
                        continue
                    try:
                        pkgs = kiln_pkg(stack, comp)
                    except CompatError as exc:
                        entry["errors"].append(f"{comp}: {exc}")
                        continue
                    if pkgs:
                        pk[comp] = pkgs
                entry["packages"] = pk
                # distribution packages without a recorded build: installed at the candidate, then held
                os_key = (_os_entry(stack["os"]) or ("",))[0]
                entry["candidates"] = [c for c in pk if c in DISTRO_COMPONENTS
                                       and not kiln_distro_build(stack, c, os_key)["recorded"]]
                if "ofed" in pk and not all(b["recorded"] for b in kiln_ofed_builds(stack, os_key).values()):
                    entry["candidates"].append("ofed")
                entry["repos"] = {"cuda": kiln_repo("cuda", stack["os"], site, arch)}
                if stack.get("container_toolkit"):
                    entry["repos"]["container_toolkit"] = kiln_repo("container_toolkit", stack["os"], site, arch)
                if (resolved.get("ofed") or {}).get("kind") == "doca":
                    try:
                        doca = kiln_doca_repo(stack, (site.get("doca") or {}).get("url"), arch)
                        doca.update({k: site["doca"][k] for k in ("key_url", "fingerprint") if site.get("doca", {}).get(k)})
                        entry["repos"]["doca"] = doca
                    except CompatError as exc:
                        entry["errors"].append(f"doca repository: {exc}")
                if site.get("distribution", {}).get("url"):  # a site mirror of the OS archive (docs/airgap.md)
                    try:
                        entry["repos"]["distribution"] = kiln_repo("distribution", stack["os"], site, arch)
                    except CompatError as exc:
                        entry["errors"].append(f"distribution repository: {exc}")
                if stack.get("slurm") and site.get("slurm", {}).get("url"):
                    entry["repos"]["slurm"] = kiln_repo("slurm", stack["os"], site, arch)
                if (resolved.get("container_engine") or {}).get("kind") == "docker-ce":
                    try:
                        entry["repos"]["docker"] = kiln_repo("docker", stack["os"], site, arch)
                    except CompatError as exc:
                        entry["errors"].append(f"docker repository: {exc}")
                if "container_engine" in pk and (resolved.get("container_engine") or {}).get("kind") == "distro" \
                        and not all(b["recorded"] for b in (containers.engine_versions(resolved) or {}).get("builds", {}).values()):
                    entry["candidates"].append("container_engine")
            elif raw:
                entry["errors"].append("no (known) kiln_stack.os: package strings cannot be rendered")
            if (resolved.get("ofed") or {}).get("kind"):
                entry["gpudirect"] = kiln_gpudirect(stack)
            if any(resolved.get(k) for k in ("container_engine", "enroot", "pyxis")):
                try:
                    entry["containers"] = containers.kiln_container_plan(stack)
                except CompatError as exc:
                    entry["errors"].append(f"containers: {exc}")
            if stack.get("torch"):
                try:
                    entry["pip"] = kiln_torch_index(stack, torch_base_url)
                except CompatError as exc:
                    entry["errors"].append(f"torch: {exc}")
        except CompatError as exc:
            entry["errors"].append(str(exc))
        rendered.append(entry)
        for h in item.get("hosts") or []:
            host_to_stack[str(h)] = idx
    plan_groups: dict[str, Any] = {}
    for group in sorted(groups, key=str):
        if group in ("all", "ungrouped"):
            continue
        members = [str(h) for h in need_list("kiln_plan", "a group's hosts", groups[group], one_ok=True)]
        per: dict[int, list[str]] = {}
        for h in members:
            if h in host_to_stack:
                per.setdefault(host_to_stack[h], []).append(h)
        if not per:
            continue
        plan_groups[group] = {
            "hosts": len(members),
            "stacks": [{"hosts": kiln_hostlist(hs), "host_count": len(hs), **rendered[i]} for i, hs in per.items()],
        }
    return {"groups": plan_groups, "distinct_stacks": len(rendered)}


def kiln_plan_text(plan: Mapping[str, Any]) -> list[str]:
    """Human-readable lines for a kiln_plan result (one block per group and stack)."""
    need_mapping("kiln_plan_text", "the input (a kiln_plan result)", plan)
    plan_groups = need_mapping("kiln_plan_text", "the plan's groups", plan.get("groups") or {})
    for info in plan_groups.values():
        need_mapping("kiln_plan_text", "each group of the plan", info)
        for st in need_list("kiln_plan_text", "a group's stacks", info.get("stacks") or []):
            need_mapping("kiln_plan_text", "each stack of a group", st)
    lines: list[str] = []
    order = ("gpu", "os", "kernel", "driver", "driver_flavor", "fabricmanager", "cuda", "cudnn", "nccl", "torch",
             "container_toolkit", "dcgm", "ofed", "hca", "slurm", "kubernetes", "container_engine", "containerd", "cdi",
             "enroot", "pyxis")
    for group, info in plan_groups.items():
        lines.append(f"== group {group} ({info.get('hosts')} hosts) ==")
        for st in info.get("stacks") or []:
            lines.append(f"  hosts: {st.get('hosts')} ({st.get('host_count')})")
            stack = st.get("stack") or {}
            res = st.get("resolved") or {}
            for key in order:
                if key not in stack:
                    continue
                val = stack[key]
                if isinstance(val, Mapping):
                    val = " ".join(f"{k}={v}" for k, v in val.items())
                elif isinstance(val, (list, tuple)):
                    val = ", ".join(str(v) for v in val)
                extra = ""
                if key == "cuda" and res.get("cuda_full") and res["cuda_full"] != str(stack[key]):
                    extra = f" -> {res['cuda_full']}"
                elif key in (res.get("resolved_from") or {}):
                    extra = f" -> {res[key]}"
                if key == "torch" and res.get("torch_variant"):
                    extra = f" ({res['torch_variant']})"
                if key == "gpu" and st.get("gpu"):
                    g = st["gpu"]
                    extra = f" ({g['arch']}, cc {g['cc']}{', NVSwitch' if g['nvswitch'] else ''}" \
                            f"{', ' + str(g['tdp_w']) + ' W' if g.get('tdp_w') else ''})"
                lines.append(f"    {key:<19} {val}{extra}")
            for comp, pkgs in (st.get("packages") or {}).items():
                note = "  (no recorded build: the repository's candidate, then held)" \
                    if comp in (st.get("candidates") or []) else ""
                lines.append(f"    pkg {comp:<15} {' '.join(pkgs)}{note}")
            for name, repo in (st.get("repos") or {}).items():
                lines.append(f"    repo {name:<14} {repo['url']}")
            if st.get("gpudirect"):
                gd = st["gpudirect"]
                lines.append(f"    {'gpudirect':<19} {gd['method']} (requested {gd['requested']}): {gd['why']}")
            if (st.get("containers") or {}).get("engine"):
                ce = st["containers"]
                eng, ctd = ce["engine"], ce["containerd"] or {}
                cdi = f"CDI on ({eng['cdi_mode']})" if ce["cdi"] else \
                    ("CDI off" if eng["cdi_mode"] else "no CDI in this engine")
                lines.append(f"    {'engine':<19} {eng['kind']} {eng['version']} from {eng['source']}; containerd "
                             f"{ctd.get('version')} (config version {ctd.get('config_version')}); {cdi}")
            if st.get("pip"):
                lines.append(f"    pip {'torch':<15} {st['pip']['requirement']} --index-url {st['pip']['index_url']}")
            for err in st.get("errors") or []:
                lines.append(f"    ! {err}")
    return lines
