# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Rule family GPU architecture / driver: cuda-driver(-mvc), gpu-cuda-*, gpu-driver-*, driver-flavor-*,
driver-branch-eol, gpu-detected(-unknown).
"""

from __future__ import annotations

from ..choose import _newest_driver_for
from ..lookup import _cuda_release, _gpu_entry
from ..schema import show
from ..versions import _ge, _major, _mm, kiln_version_cmp, kiln_version_key
from ..violations import WARNING, _violation, _worst_conf
from .context import Checker


def r_cuda_driver(ck: Checker) -> None:
    if not (ck.cuda and ck.driver):
        return
    cuda_full, rel = ck.cuda
    drv = ck.s["driver"]
    major = _major(cuda_full)
    maj = ck.d["cuda"]["majors"].get(major)
    if maj and not _ge(drv, maj["mvc_floor"]):
        target = _newest_driver_for(rel["min_driver"], max_branch=ck.gpu_max_branch(), min_major=int(major))
        ck.add(_violation(
            "cuda-driver", ["cuda", "driver"],
            f"CUDA {ck.cuda_txt()} needs driver >= {maj['mvc_floor']} (the CUDA {major}.x floor) "
            f"but the driver is {drv}, so no CUDA {major} program can run.",
            f"Raise kiln_stack.driver to {target} or newer (CUDA {cuda_full} ships with {rel['min_driver']}), "
            f"or lower kiln_stack.cuda to a release the driver supports.",
            ck.driver_fix(target) if target else None, maj["confidence"], maj["source"]))
    elif not _ge(drv, rel["min_driver"]):
        target = _newest_driver_for(rel["min_driver"], max_branch=ck.gpu_max_branch(), min_major=int(major))
        ck.add(_violation(
            "cuda-driver-mvc", ["cuda", "driver"],
            f"CUDA {ck.cuda_txt()} was released with driver {rel['min_driver']}; driver {drv} runs it only "
            f"through minor-version compatibility (no PTX JIT, newer APIs fail with cudaErrorCallRequiresNewerDriver).",
            f"Raise kiln_stack.driver to {target} or newer, or allow rule cuda-driver-mvc if every workload ships SASS "
            f"for its GPUs.",
            ck.driver_fix(target) if target else None, rel["confidence"], rel["source"], severity=WARNING))


def r_gpu_cuda(ck: Checker) -> None:
    if not (ck.gpu and ck.cuda):
        return
    g, cuda_full = ck.gpu, ck.cuda[0]
    if g.get("min_cuda") and kiln_version_cmp(_mm(cuda_full), g["min_cuda"]) < 0:
        target = _cuda_release(g["min_cuda"])
        ck.add(_violation(
            "gpu-cuda-min", ["gpu", "cuda"],
            f"{g['name']} ({g['arch']}, compute capability {g['cc']}) needs CUDA >= {g['min_cuda']}, but CUDA is {ck.s['cuda']}.",
            f"Raise kiln_stack.cuda to {g['min_cuda']} or newer.",
            {"cuda": target[0]} if target else None, g["min_cuda_confidence"], g["source"]))
    if g.get("max_cuda_major") and int(_major(cuda_full)) > int(g["max_cuda_major"]):
        best = max((v for v in ck.d["cuda"]["releases"] if int(_major(v)) <= int(g["max_cuda_major"])),
                   key=kiln_version_key)
        ck.add(_violation(
            "gpu-cuda-max", ["gpu", "cuda"],
            f"{g['name']} ({g['arch']}, compute capability {g['cc']}) is not supported by CUDA {_major(cuda_full)}.x "
            f"(CUDA {ck.s['cuda']} dropped it); the last usable major is {g['max_cuda_major']}.",
            f"Set kiln_stack.cuda to {best} or another {g['max_cuda_major']}.x release.",
            {"cuda": best}, "VERIFIED", ck.d["architectures"][g["arch"]]["source"]))


def r_gpu_driver(ck: Checker) -> None:
    if not (ck.gpu and ck.driver):
        return
    g, drv = ck.gpu, ck.s["driver"]
    floor, conf, src = None, None, None
    if g.get("min_driver"):
        floor, conf, src = g["min_driver"], g["confidence"], g.get("min_driver_source") or g["source"]
    elif g.get("min_cuda"):
        rel = _cuda_release(g["min_cuda"])
        if rel:
            ga = min((v for v in ck.d["cuda"]["releases"] if _mm(v) == _mm(rel[0])), key=kiln_version_key)
            floor = ck.d["cuda"]["releases"][ga]["min_driver"]
            conf = _worst_conf("DERIVED", g["min_cuda_confidence"])
            src = g["source"]
    if floor and not _ge(drv, floor):
        target = _newest_driver_for(floor, max_branch=ck.gpu_max_branch())
        ck.add(_violation(
            "gpu-driver-min", ["gpu", "driver"],
            f"{g['name']} needs driver >= {floor}, but the driver is {drv}.",
            f"Raise kiln_stack.driver to {target} or newer.", ck.driver_fix(target) if target else None, conf, src))
    if g.get("last_branch") and int(ck.driver[0]) > int(g["last_branch"]):
        target = _newest_driver_for("0", max_branch=int(g["last_branch"]))
        ck.add(_violation(
            "gpu-driver-max", ["gpu", "driver"],
            f"{g['name']} ({g['arch']}) is supported only up to driver branch R{g['last_branch']}; driver {drv} "
            f"(R{ck.driver[0]}) does not run on it.",
            f"Set kiln_stack.driver to an R{g['last_branch']} release such as {target}.",
            ck.driver_fix(target) if target else None, "VERIFIED", ck.d["architectures"][g["arch"]]["source"]))


def r_flavor(ck: Checker) -> None:
    flavor = ck.s.get("driver_flavor")
    if flavor not in ("open", "proprietary"):
        return
    fl = ck.d["drivers"]["flavors"]
    if ck.driver and flavor == "open" and int(ck.driver[0]) < int(fl["both_from_branch"]):
        ck.add(_violation(
            "driver-flavor-branch", ["driver_flavor", "driver"],
            f"Open kernel modules ship from R{fl['both_from_branch']}; driver {ck.s['driver']} (R{ck.driver[0]}) has "
            f"only the proprietary flavor, so driver_flavor {flavor} is impossible.",
            "Set kiln_stack.driver_flavor to proprietary, or raise the driver.",
            {"driver_flavor": "proprietary"}, fl["confidence"], fl["source"]))
    if not ck.gpu:
        return
    g = ck.gpu
    if g["open_modules"] == "required" and flavor != "open":
        ck.add(_violation(
            "driver-flavor-gpu", ["driver_flavor", "gpu"],
            f"{g['name']} ({g['arch']}) requires the open kernel modules; driver_flavor {flavor} is unsupported on it.",
            "Set kiln_stack.driver_flavor to open.", {"driver_flavor": "open"}, "VERIFIED", g["source"]))
    if g["open_modules"] == "unsupported" and flavor == "open":
        ck.add(_violation(
            "driver-flavor-gpu", ["driver_flavor", "gpu"],
            f"{g['name']} ({g['arch']}) predates the GSP that the open kernel modules need; driver_flavor {flavor} "
            f"cannot drive it.",
            "Set kiln_stack.driver_flavor to proprietary.", {"driver_flavor": "proprietary"}, "VERIFIED",
            ck.d["drivers"]["flavors"]["source"]))


def r_driver_eol(ck: Checker) -> None:
    if not ck.driver:
        return
    branch, entry = ck.driver
    if entry.get("status") in ("eol", "superseded", "eol (NFB)"):
        target = _newest_driver_for("0", max_branch=ck.gpu_max_branch(),
                                    min_major=int(_major(ck.cuda[0])) if ck.cuda else None)
        when = f" (EOL {entry['eol']})" if entry.get("eol") else ""
        ck.add(_violation(
            "driver-branch-eol", ["driver"],
            f"Driver {ck.s['driver']} is on branch R{branch}, which is {entry['status']}{when}: no more security fixes.",
            f"Move kiln_stack.driver to a supported branch, e.g. {target}.",
            ck.driver_fix(target) if target else None, entry["confidence"], entry["source"], severity=WARNING))


def r_gpu_detected(ck: Checker) -> None:
    """Detected hardware against intent: every GPU the host reports must be known and match kiln_stack.gpu."""
    if not ck.detected:
        return
    intent = ck.gpu
    for det in ck.detected:
        found = _gpu_entry(det)
        if not found:
            said = f"the inventory says gpu {ck.s['gpu']}" if "gpu" in ck.s else "the inventory names no gpu"
            ck.add(_violation(
                "gpu-detected-unknown", ["gpu"],
                f"The host reports a GPU with PCI id {show(det)}, which data/compat.yml does not know ({said}), "
                f"so kiln cannot check the stack against the hardware.",
                "Add the GPU to gpus: in data/compat.yml with a source, or accept rule gpu-detected-unknown in "
                "kiln_stack_allow with a reason (then it is a warning).",
                None, "VERIFIED", "host facts (library/kiln_gpu_facts)"))
            continue
        if intent is None:
            intent = found  # the first known detected GPU stands in for an absent kiln_stack.gpu
            continue
        exact = intent["variant"] is not None  # the inventory named a board, not only a model
        same = found["model"] == intent["model"] and (not exact or found["pci_id"] == intent["pci_id"])
        if not same:
            what = intent["name"] if ck.s.get("gpu") in (None, intent["name"]) else f"{ck.s['gpu']} ({intent['name']})"
            ck.add(_violation(
                "gpu-detected", ["gpu"],
                f"Inventory says gpu {what} but the host reports {found['name']} ({show(det)}).",
                f"Set kiln_stack.gpu to {found['variant'] or found['model']} for these hosts, or check the hardware.",
                {"gpu": found["variant"] or found["model"]}, "VERIFIED", "host facts"))
