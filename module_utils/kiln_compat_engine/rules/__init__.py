# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The rule engine: :func:`kiln_stack_violations` and the ids of its rules.

One module per rule family (``gpu``, ``fabricmanager``, ``cuda``, ``dcgm``,
``ofed``, ``cluster``, ``containers``, ``denylist``), each a set of functions of a
:class:`~.context.Checker`; :data:`CHECKS` runs them in a fixed order, so the
violations of a stack always come out in the same order.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from .. import schema
from ..errors import CompatError
from ..schema import show
from ..stack import _checked_well_formed, _problems_text, stack_problems
from ..violations import WARNING, _violation
from . import cluster, containers, cuda, dcgm, denylist, fabricmanager, gpu, ofed
from .context import Checker


RULES = (
    "unknown-version", "cuda-driver", "cuda-driver-mvc", "gpu-cuda-min", "gpu-cuda-max",
    "gpu-driver-min", "gpu-driver-max", "driver-flavor-branch", "driver-flavor-gpu", "fabricmanager-driver", "cuda-os",
    "cudnn-cuda", "cudnn-gpu", "nccl-cuda", "nccl-gpu", "torch-cuda", "torch-gpu", "torch-driver", "dcgm-driver",
    "dcgm-gpu", "dcgm-cuda", "dcgm-exporter", "ofed-mlnx-support", "gpudirect-flavor", "gpudirect-kernel",
    "ofed-mlnx-eol", "doca-version", "doca-os", "doca-kernel", "doca-profile", "ofed-hca", "hca-detected-unknown",
    "gpudirect-peermem-inbox", "gpudirect-dmabuf-flavor", "gpudirect-dmabuf-kernel", "gpudirect-dmabuf-cuda",
    "gpudirect-dmabuf-gpu",
    "engine-os", "engine-cdi", "containerd-cdi", "engine-toolkit", "engine-containerd", "enroot-kernel",
    "pyxis-enroot", "pyxis-slurm",
    "slurm-order", "slurm-skew", "kubernetes-kubelet-skew", "kubernetes-kubectl-skew", "driver-branch-eol",
    "gpu-detected", "gpu-detected-unknown", "denylist", "package-build",
)
"""Rule ids a kiln_stack_allow entry may accept (``invalid-stack`` never can)."""


CHECKS = (
    gpu.r_cuda_driver, gpu.r_gpu_cuda, gpu.r_gpu_driver, gpu.r_flavor, fabricmanager.r_fabricmanager,
    cuda.r_cuda_os, cuda.r_cudnn, cuda.r_nccl, cuda.r_torch, dcgm.r_dcgm, ofed.r_ofed, cluster.r_slurm,
    cluster.r_builds, cluster.r_kubernetes, containers.r_containers, gpu.r_driver_eol, gpu.r_gpu_detected, dcgm.r_dcgm_exporter,
    denylist.r_denylist,
)
"""The rule functions in the order they run (the order of the violations they report)."""


def run_checks(checker: Checker) -> list[dict[str, Any]]:
    """Resolve the checker's stack (unknown-version), then run every rule of :data:`CHECKS` on it."""
    checker.resolve()
    for rule in CHECKS:
        rule(checker)
    return checker.out


def _check_allow(allow: Any) -> list[dict[str, str]]:
    problems = schema.check_allow(allow, RULES)
    if problems:
        raise CompatError(f"kiln: {_problems_text(problems)}")
    return [{"rule": str(a["rule"]), "reason": str(a["reason"])} for a in (allow or [])]


def _invalid(problems: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    out = []
    for p in problems:
        v = _violation("invalid-stack", [p["key"]], p["message"], p["fix"], None, "VERIFIED", "docs/compat.md")
        v.update(allowed=False, allow_reason=None)
        out.append(v)
    return out


def _parse_today(today: Any) -> datetime.date | None:
    if not today:
        return None
    try:
        return datetime.date.fromisoformat(str(today)[:10])
    except ValueError as exc:
        raise CompatError(f"kiln: today must be a date YYYY-MM-DD, got {show(today)}") from exc


def kiln_stack_violations(stack: Mapping[str, Any] | None, allow: Sequence[Mapping[str, str]] | None = None,
                          today: str | None = None, detected: Sequence[str] | None = None,
                          detected_hcas: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Check a kiln_stack against the compatibility data.

    Returns a list of violation dicts (``rule``, ``components``, ``severity``,
    ``message``, ``fix``, ``fix_stack``, ``confidence``, ``source``, ``allowed``,
    ``allow_reason``); ``[]`` means the stack is compatible. The input schema is
    checked first: a malformed stack or allow list yields only ``invalid-stack``
    violations (one per problem, naming the key) and no rule runs. ``allow``
    turns violations of the listed rules into warnings (``allowed: true``).
    ``today`` (YYYY-MM-DD) pins the date used for denylist expiry. ``detected``
    lists the GPUs (PCI ids or names) the host reports, checked against ``gpu``; ``detected_hcas``
    the HCA generations it reports (``ansible_facts['kiln_fabric']['hcas'][*]['model']``), checked
    against the RDMA stack (``ofed-hca``) and the data (``hca-detected-unknown``).
    """
    problems = stack_problems(stack) + schema.check_allow(allow, RULES)
    if isinstance(detected, (str, bytes)):
        detected = [detected]
    if detected is not None and (not isinstance(detected, (list, tuple))
                                 or not all(isinstance(x, str) and len(x) <= schema.MAX_TEXT for x in detected)):
        problems.append({"key": "detected", "message": f"detected GPUs are {show(detected)}; expected a list of PCI ids.",
                         "fix": "Pass the host's GPU PCI ids (ansible_facts['kiln_gpu']['gpus'][*]['pci_device_id'])."})
    if isinstance(detected_hcas, (str, bytes)):
        detected_hcas = [detected_hcas]
    if detected_hcas is not None and (not isinstance(detected_hcas, (list, tuple)) or len(detected_hcas) > 64
                                      or not all(isinstance(x, str) and len(x) <= schema.MAX_TEXT for x in detected_hcas)):
        problems.append({"key": "detected_hcas", "message": f"detected HCAs are {show(detected_hcas)}; expected a list of "
                                                            f"HCA generation names.",
                         "fix": "Pass the host's HCA models (ansible_facts['kiln_fabric']['hcas'][*]['model'])."})
    if problems:
        return _invalid(problems)
    allow_list = _check_allow(allow)
    day = _parse_today(today)
    c = _checked_well_formed(stack)  # checked above; checked once
    result = [dict(v) for v in c.ambiguities] + run_checks(Checker(dict(c.canonical), day, detected or (),
                                                                   detected_hcas or ()))
    reasons = {a["rule"]: a["reason"] for a in allow_list}
    for v in result:
        if v["rule"] in reasons:
            v["allowed"], v["allow_reason"], v["severity"] = True, reasons[v["rule"]], WARNING
        else:
            v["allowed"], v["allow_reason"] = False, None
    return result
