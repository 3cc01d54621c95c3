# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Rule family Slurm / Kubernetes: slurm-order, slurm-skew, package-build, kubernetes-kubelet-skew,
kubernetes-kubectl-skew.
"""

from __future__ import annotations

import re

from ..errors import CompatError
from ..packages import kiln_distro_build
from ..versions import _slurm_major, kiln_version_cmp
from ..violations import _set_fix, _violation
from .context import Checker


def r_slurm(ck: Checker) -> None:
    sl = ck.s.get("slurm")
    if not sl:
        return
    rel = ck.d["slurm"]["releases"]
    order = ("slurmdbd", "slurmctld", "slurmd")
    known = {k: v for k, v in sl.items() if re.match(r"^\d{2}\.\d{2}", v) and _slurm_major(v) in rel}
    for i, newer in enumerate(order):
        for older in order[i + 1:]:
            if newer not in known or older not in known:
                continue
            vn, vo = known[newer], known[older]
            mn, mo = _slurm_major(vn), _slurm_major(vo)
            if kiln_version_cmp(vn, vo) < 0:
                ck.add(_violation(
                    "slurm-order", [f"slurm.{newer}", f"slurm.{older}"],
                    f"{older} {vo} is newer than {newer} {vn}; Slurm requires slurmdbd >= slurmctld >= slurmd.",
                    f"Set kiln_stack.slurm.{older} to {vn} (or upgrade {newer} first).",
                    _set_fix(ck.s, f"slurm.{older}", vn), rel[mn]["confidence"], rel[mn]["source"]))
            elif mn != mo and mo not in rel[mn]["compatible_prior"]:
                ck.add(_violation(
                    "slurm-skew", [f"slurm.{newer}", f"slurm.{older}"],
                    f"{newer} {vn} talks only to releases {', '.join(rel[mn]['compatible_prior'])} and older "
                    f"{older} {vo} is outside that window.",
                    f"Set kiln_stack.slurm.{older} to {vn}, or upgrade through intermediate releases.",
                    _set_fix(ck.s, f"slurm.{older}", vn), rel[mn]["confidence"], rel[mn]["source"]))


def r_builds(ck: Checker) -> None:
    """package-build: kiln_stack.builds names a Slurm build of another major than the stack's Slurm.

    A component without a recorded build is not a violation: kiln_plan lists it under ``candidates``
    (installed at the repository's candidate, then held)."""
    if not (ck.s.get("builds") and ck.s.get("slurm")):
        return
    os_key = ck.os[0] if ck.os else None
    for comp in ("slurmctld", "slurmd"):
        if not ck.s["slurm"].get(comp):
            continue
        try:
            kiln_distro_build(ck.s, comp, os_key)
        except CompatError as exc:
            message, _, fix = str(exc).removeprefix("kiln: ").partition(" Fix: ")
            ck.add(_violation("package-build", ["builds.slurm", f"slurm.{comp}"], message, fix, None,
                                "VERIFIED", "docs/compat.md"))


def r_kubernetes(ck: Checker) -> None:
    k8s = ck.s.get("kubernetes")
    if not k8s or "apiserver" not in k8s:
        return
    kd = ck.d["kubernetes"]

    def minor(v: str) -> int | None:
        m = re.match(r"^v?1\.(\d+)", v)
        return int(m.group(1)) if m else None

    api = minor(k8s["apiserver"])
    if api is None:
        return
    kl = minor(k8s.get("kubelet", "")) if "kubelet" in k8s else None
    if kl is not None:
        max_older = kd["kubelet"]["max_older"] if kl >= 25 else kd["kubelet"]["max_older_before_1_25"]
        if kl > api or api - kl > max_older:
            ck.add(_violation(
                "kubernetes-kubelet-skew", ["kubernetes.kubelet", "kubernetes.apiserver"],
                f"kubelet {k8s['kubelet']} must not be newer than kube-apiserver {k8s['apiserver']} nor more than "
                f"{max_older} minors older.",
                f"Set kiln_stack.kubernetes.kubelet to {k8s['apiserver']}.",
                _set_fix(ck.s, "kubernetes.kubelet", k8s["apiserver"]), kd["kubelet"]["confidence"],
                kd["kubelet"]["source"]))
    kc = minor(k8s.get("kubectl", "")) if "kubectl" in k8s else None
    if kc is not None and abs(kc - api) > kd["kubectl"]["skew"]:
        ck.add(_violation(
            "kubernetes-kubectl-skew", ["kubernetes.kubectl", "kubernetes.apiserver"],
            f"kubectl {k8s['kubectl']} must be within {kd['kubectl']['skew']} minor of kube-apiserver {k8s['apiserver']}.",
            f"Set kiln_stack.kubernetes.kubectl to {k8s['apiserver']}.",
            _set_fix(ck.s, "kubernetes.kubectl", k8s["apiserver"]), kd["kubectl"]["confidence"], kd["kubectl"]["source"]))
