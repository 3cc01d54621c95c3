"""Data truth (issue 33 #5): every (CUDA release x OS) kiln accepts has a cuDNN and an NCCL build it can install,
and every cuDNN or NCCL release kiln accepts next to a CUDA release installs a build that exists for it.

The whole product of the data, not a sample: each CUDA release of data/compat.yml on each OS whose NVIDIA
repository serves its major, with every cuDNN release and every NCCL release (some 33,000 engine calls).

- Accepted (no error from the rules) means installable: kiln_pkg renders a package whose build is one the
  release's entry names -- NCCL ``+cuda<X.Y>`` of the same CUDA major at or below the toolkit's minor; cuDNN 8
  the entry's ``build_suffix`` of that major, cuDNN 9 ``-cuda-<major>`` with a range for that major. The one
  exception: an NCCL release the data says is published for the CUDA major without naming the build's minor
  (``builds_unknown_for``) -- kiln_pkg refuses to guess, and the rules have warned, naming the fix (write the
  build). A release with no build for the major is an error whatever its confidence, so it never gets here.
- Every CUDA release the rules accept on an OS has at least one accepted, installable cuDNN and NCCL; one
  that has none must be refused for it (a denylisted release candidate is).
"""
from __future__ import annotations

from typing import Any

import pytest

from kiln_compat_engine.errors import CompatError
from kiln_compat_engine.packages import kiln_pkg
from kiln_compat_engine.rules import kiln_stack_violations
from test_compat_release_data import CUDA, CUDNN, NCCL, OSES, key, major, minor

CASES = [(cuda, os_id) for cuda in CUDA for os_id, entry in OSES.items()
         if major(cuda) in (entry.get("cuda_majors") or [])]


def _errors(stack: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in kiln_stack_violations(stack) if v["severity"] == "error"]


def _cudnn_problem(cuda: str, os_id: str, ver: str, warned: bool) -> str | None:
    rel = CUDNN[ver]
    try:
        pkgs = kiln_pkg({"os": os_id, "cuda": cuda, "cudnn": ver}, "cudnn")
    except CompatError as exc:
        return f"accepted but not installable (warned: {warned}): {exc}"
    if major(cuda) not in rel["cuda"]:
        return f"rendered {pkgs} but the entry has no CUDA {major(cuda)} range"
    if major(ver) == "8":
        want = f"cuda{rel['build_suffix'][major(cuda)]}"
        if not all(p.endswith(want) for p in pkgs):
            return f"rendered {pkgs}, not the entry's {want} build"
    elif not all(f"-cuda-{major(cuda)}" in p for p in pkgs):
        return f"rendered {pkgs}, not a CUDA {major(cuda)} build"
    return None


def _nccl_problem(cuda: str, os_id: str, ver: str, warned: bool) -> str | None:
    try:
        pkgs = kiln_pkg({"os": os_id, "cuda": cuda, "nccl": ver}, "nccl")
    except CompatError as exc:
        # only where the data says a build of this CUDA major exists with a minor it does not know
        if warned and major(cuda) in (NCCL[ver].get("builds_unknown_for") or []):
            return None
        return f"accepted but not installable (warned: {warned}): {exc}"
    build = pkgs[0].rsplit("+cuda", 1)[-1]
    if build not in NCCL[ver]["builds"] or major(build) != major(cuda) or key(build) > key(minor(cuda)):
        return f"rendered {pkgs}: build {build} is not one of {NCCL[ver]['builds']} at or below CUDA {minor(cuda)}"
    return None


@pytest.mark.parametrize(("cuda", "os_id"), CASES, ids=[f"{c}-{o}" for c, o in CASES])
def test_what_is_accepted_is_installable_and_every_accepted_cuda_has_both(cuda: str, os_id: str) -> None:
    base = {"os": os_id, "cuda": cuda}
    problems, cudnn_ok, nccl_ok = [], [], []
    for ver in CUDNN:
        found = kiln_stack_violations(dict(base, cudnn=ver))
        if any(v["severity"] == "error" for v in found):
            continue
        why = _cudnn_problem(cuda, os_id, ver, any(v["rule"].startswith("cudnn") for v in found))
        if why:
            problems.append(f"cuDNN {ver}: {why}")
        else:
            cudnn_ok.append(ver)
    for ver in NCCL:
        found = kiln_stack_violations(dict(base, nccl=ver))
        if any(v["severity"] == "error" for v in found):
            continue
        why = _nccl_problem(cuda, os_id, ver, any(v["rule"] == "nccl-cuda" for v in found))
        if why:
            problems.append(f"NCCL {ver}: {why}")
        else:
            nccl_ok.append(ver)
    assert problems == [], f"CUDA {cuda} on {os_id}: " + "; ".join(problems)
    if not _errors(base):
        installable_cudnn = [v for v in cudnn_ok if _renders(base, "cudnn", v)]
        installable_nccl = [v for v in nccl_ok if _renders(base, "nccl", v)]
        assert installable_cudnn and installable_nccl, (
            f"CUDA {cuda} is accepted on {os_id} but kiln can install no cuDNN ({len(installable_cudnn)}) "
            f"or no NCCL ({len(installable_nccl)}) for it: refuse it with the reason, or add the builds")


def _renders(base: dict[str, Any], component: str, ver: str) -> bool:
    try:
        kiln_pkg(dict(base, **{component: ver}), component)
    except CompatError:
        return False
    return True


def test_the_audit_covers_every_os_and_cuda_major() -> None:
    assert {o for _, o in CASES} == {o for o, e in OSES.items() if e.get("cuda_majors")}
    assert {major(c) for c, _ in CASES} == {major(c) for c in CUDA}
    assert len(CASES) > 100
