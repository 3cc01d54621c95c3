# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Rule family RDMA stack, HCAs and GPUDirect RDMA.

``ofed-mlnx-support``, ``ofed-mlnx-eol`` (MLNX_OFED is legacy), ``doca-os``, ``doca-kernel``,
``doca-profile`` (DOCA release against the OS, its kernel and the profile), ``ofed-hca`` and
``hca-detected-unknown`` (HCA generations the stack, or the host, names), and the GPUDirect
rules: with ``ofed.gpudirect: auto`` the inbox warnings ``gpudirect-flavor`` / ``gpudirect-kernel``;
an explicit method that cannot work is an error (``gpudirect-peermem-inbox``,
``gpudirect-dmabuf-flavor``, ``-kernel``, ``-cuda``, ``-gpu``).
"""

from __future__ import annotations

import calendar
import datetime
import re
from typing import Any

from ..gpudirect import dma_buf_conditions
from ..lookup import _doca_release, _hca_names
from ..schema import show
from ..versions import _ge, _mm, kiln_version_cmp, kiln_version_key
from ..violations import ERROR, WARNING, _violation, _worst_conf
from .context import Checker


def _kernel_mm(kernel: str) -> str | None:
    m = re.match(r"([0-9]{1,3})\.([0-9]{1,3})", kernel, re.ASCII)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def _doca_target(ck: Checker, os_key: str | None, hcas: list[str], kernel_mm: str | None = None) -> str | None:
    """The newest DOCA release (its newest known update) that serves the OS, kernel and HCAs, or None."""
    d = ck.d["ofed"]
    for key in sorted(d["doca_releases"], key=kiln_version_key, reverse=True):
        rel = d["doca_releases"][key]
        if os_key and os_key not in (rel.get("os") or {}):
            continue
        if any(h not in (rel.get("hcas") or []) for h in hcas):
            continue
        if kernel_mm and os_key and kernel_mm not in _allowed_kernels(ck, rel, os_key):
            continue
        updates = rel.get("updates") or {}
        return max(updates, key=kiln_version_key) if updates else key
    return None


def _allowed_kernels(ck: Checker, rel: dict[str, Any], os_key: str) -> list[str]:
    series = (ck.d["ofed"].get("os_kernels") or {}).get(os_key) or {}
    if not series:
        return []
    return list(series["series"]) if rel.get("kernel_rule") == "dkms" else [series["generic"]]


def _hcas(ck: Checker) -> list[tuple[str, str]]:
    """(generation, where) for each HCA the stack names or the host reports."""
    out = [(h, "kiln_stack.hca") for h in ck.s.get("hca") or []]
    out += [(h, "the host reports") for h in ck.detected_hcas if h not in [x for x, _ in out]]
    return out


def _support_end(text: str) -> datetime.date:
    """``2027-10`` -> the last day of that month; ``2027-10-15`` -> that day."""
    parts = [int(p) for p in str(text).split("-")]
    if len(parts) == 2:
        return datetime.date(parts[0], parts[1], calendar.monthrange(parts[0], parts[1])[1])
    return datetime.date(*parts[:3])


def r_ofed(ck: Checker) -> None:
    ofed = ck.s.get("ofed")
    if not ofed or ofed.get("kind") not in ck.d["ofed"]["kinds"]:
        _hca_detected(ck)
        return
    d = ck.d["ofed"]
    kind, ver = ofed.get("kind"), ofed.get("version")
    mlnx = d["kinds"]["mlnx"]
    mlnx_major = _mm(ver.split("-")[0]) if kind == "mlnx" and ver else None
    if mlnx_major and mlnx_major not in d["mlnx_releases"] and kiln_version_cmp(mlnx_major, mlnx["last_release"]) < 0:
        ck.add(_violation(
            "ofed-mlnx-support", ["ofed"],
            f"MLNX_OFED {ver} is older than the last standalone LTS ({mlnx['last_release']}) and no "
            f"longer maintained.",
            "Move to DOCA-OFED (kind: doca) or MLNX_OFED 24.10 LTS.", {"ofed": {"kind": "doca", "version": "3.2.1"}},
            "DERIVED", mlnx["source"], severity=WARNING))
    if kind == "mlnx":
        _mlnx_eol(ck)
    if kind == "doca" and ver:
        _doca(ck, ver)
    if kind == "doca" and not ver:
        _doca_unpinned(ck)
    _ofed_hca(ck)
    _hca_detected(ck)
    _gpudirect(ck)


def _mlnx_eol(ck: Checker) -> None:
    mlnx = ck.d["ofed"]["kinds"]["mlnx"]
    end = _support_end(mlnx["support_until"])
    today = ck.today or datetime.datetime.now(datetime.timezone.utc).date()  # UTC, as every kiln time
    conf = mlnx.get("support_until_confidence") or mlnx["confidence"]
    target = _doca_target(ck, ck.os[0] if ck.os else None, [h for h, _ in _hcas(ck)])
    fix_stack = {"ofed": {"kind": "doca", "version": target}} if target else None
    fix = f"Move to DOCA-OFED (kiln_stack.ofed: {{kind: doca, version: \"{target or '3.2.1'}\"}})."
    if today > end:
        ck.add(_violation(
            "ofed-mlnx-eol", ["ofed"],
            f"MLNX_OFED is legacy and its last LTS ({mlnx['last_release']}) was supported until {mlnx['support_until']}; "
            f"on {today.isoformat()} it gets no more fixes.", fix, fix_stack, conf, mlnx["source"],
            severity=ERROR if conf != "UNVERIFIED" else WARNING))
    else:
        ck.add(_violation(
            "ofed-mlnx-eol", ["ofed"],
            f"MLNX_OFED is legacy: its last LTS ({mlnx['last_release']}) is supported until {mlnx['support_until']}, "
            f"after which preflight refuses it; new features are only in DOCA-OFED.", fix, fix_stack, conf,
            mlnx["source"], severity=WARNING))


def _doca_unpinned(ck: Checker) -> None:
    """``ofed: {kind: doca}`` names no release: doca-ofed would come at whatever the repository offers."""
    target = _doca_target(ck, ck.os[0] if ck.os else None, [h for h, _ in _hcas(ck)])
    d = ck.d["ofed"]["kinds"]["doca"]
    ck.add(_violation(
        "doca-version", ["ofed"],
        "kiln_stack.ofed is DOCA-OFED without a version: doca-ofed would be installed at whatever the DOCA "
        "repository offers that day, unpinned, and two runs could install two releases.",
        f"Set kiln_stack.ofed.version to \"{target}\" (the newest DOCA release kiln knows for this OS and HCAs)."
        if target else "Set kiln_stack.ofed.version to the DOCA-Host release you mirror (e.g. \"3.2.1\").",
        {"ofed": dict(ck.s["ofed"], version=target)} if target else None, "VERIFIED", d["source"]))


def _doca(ck: Checker, ver: str) -> None:
    found = _doca_release(ver)
    if not found:
        return  # unknown-version already reported it
    key, rel, _upd, _upd_entry = found
    d = ck.d["ofed"]
    hcas = [h for h, _ in _hcas(ck)]
    profile = ck.s["ofed"].get("profile", "doca-ofed")
    prof = d["profiles"].get(profile)
    if prof and kiln_version_cmp(key, prof["from"]) < 0:
        ck.add(_violation(
            "doca-profile", ["ofed"],
            f"DOCA profile {profile} exists from DOCA {prof['from']}; DOCA {ver} does not ship it.",
            f"Use profile doca-ofed, or DOCA {prof['from']} or newer.", {"ofed": dict(ck.s["ofed"], profile="doca-ofed")},
            prof["confidence"], prof["source"]))
    if not ck.os:
        return
    os_key = ck.os[0]
    oses = rel.get("os") or {}
    if os_key not in oses:
        conf = rel.get("os_confidence") or rel["confidence"]
        target = _doca_target(ck, os_key, hcas)
        known = ", ".join(oses) or "none recorded"
        ck.add(_violation(
            "doca-os", ["ofed", "os"],
            f"DOCA {ver} is not built for {os_key} (DOCA {key} host OSes in kiln's data: {known}).",
            (f"Set kiln_stack.ofed.version to \"{target}\", which serves {os_key}" if target else
             f"Use an OS DOCA {key} serves ({known}), or the inbox stack (ofed kind inbox)") + ".",
            {"ofed": dict(ck.s["ofed"], version=target)} if target else None, conf, rel["source"]))
        return
    kern = ck.s.get("kernel")
    mm = _kernel_mm(kern) if kern else None
    allowed = _allowed_kernels(ck, rel, os_key)
    if mm and allowed and mm not in allowed:
        series = d["os_kernels"][os_key]
        conf = _worst_conf(series.get("confidence"), rel.get("kernel_rule_confidence") or rel["confidence"])
        how = ("builds its modules with DKMS for the kernel series of " + os_key if rel.get("kernel_rule") == "dkms"
               else f"ships modules for {os_key}'s generic kernel only")
        target = _doca_target(ck, os_key, hcas, mm)
        ck.add(_violation(
            "doca-kernel", ["ofed", "kernel"],
            f"DOCA {ver} {how} ({', '.join(allowed)}); kernel {kern} is {mm}.",
            f"Use a {'/'.join(allowed)} kernel on {os_key}"
            + (f", or DOCA {target} (DKMS for {', '.join(series['series'])})" if target else "") + ".",
            {"ofed": dict(ck.s["ofed"], version=target)} if target else None, conf,
            rel.get("kernel_rule_source") or rel["source"]))


def _ofed_hca(ck: Checker) -> None:
    ofed = ck.s["ofed"]
    kind, ver = ofed["kind"], ofed.get("version")
    d = ck.d["ofed"]
    known = set(_hca_names())
    for hca, where in _hcas(ck):
        if hca not in known:
            continue  # hca-detected-unknown (host) or the schema (stack) names it
        if kind == "mlnx":
            entry = d["kinds"]["mlnx"]
            if hca in (entry.get("hcas") or []):
                continue
            why = (entry.get("not_supported") or {}).get(hca, f"MLNX_OFED does not support {hca}")
            target = _doca_target(ck, ck.os[0] if ck.os else None, [h for h, _ in _hcas(ck)])
            ck.add(_violation(
                "ofed-hca", ["ofed", "hca"],
                f"{hca} ({where}) is not supported by MLNX_OFED: {why}.",
                f"Use DOCA-OFED (kiln_stack.ofed: {{kind: doca, version: \"{target or '3.2.1'}\"}}).",
                {"ofed": {"kind": "doca", "version": target}} if target else None,
                entry["confidence"], entry.get("hcas_source") or entry["source"]))
        elif kind == "doca" and ver:
            found = _doca_release(ver)
            if not found:
                continue
            key, rel, _u, _e = found
            if hca in (rel.get("hcas") or []):
                continue
            target = _doca_target(ck, ck.os[0] if ck.os else None, [h for h, _ in _hcas(ck)])
            note = f" ({rel['note']})" if rel.get("note") else ""
            ck.add(_violation(
                "ofed-hca", ["ofed", "hca"],
                f"{hca} ({where}) is not supported by DOCA {key}{note}.",
                (f"Set kiln_stack.ofed.version to \"{target}\", which supports it" if target else
                 "No DOCA release in kiln's data supports every HCA listed: split these hosts by HCA") + ".",
                {"ofed": dict(ofed, version=target)} if target else None,
                rel.get("hcas_confidence") or rel["confidence"], rel.get("hcas_source") or rel["source"]))
        elif kind == "inbox":
            entry = d["kinds"]["inbox"]
            if hca not in (entry.get("hcas") or []):
                ck.add(_violation(
                    "ofed-hca", ["ofed", "hca"], f"{hca} ({where}) is not driven by the inbox stack.",
                    "Use DOCA-OFED (ofed kind doca).", {"ofed": {"kind": "doca", "version": "3.2.1"}},
                    entry.get("hcas_confidence") or entry["confidence"], entry["source"]))


def _hca_detected(ck: Checker) -> None:
    known = set(_hca_names())
    for hca in ck.detected_hcas:
        if hca in known:
            continue
        ck.add(_violation(
            "hca-detected-unknown", ["hca"],
            f"The host reports an HCA {show(hca)} whose generation data/compat.yml does not know, so kiln cannot check "
            f"the RDMA stack against it.",
            "Add the generation to data/compat.yml ofed.hca_generations (and module_utils/kiln/facts/fabric.py HCA_MODELS) "
            "with a source, or accept rule hca-detected-unknown in kiln_stack_allow with a reason.",
            None, "UNVERIFIED", "host facts (ansible_facts['kiln_fabric'])"))


def _gpudirect(ck: Checker) -> None:
    ofed = ck.s["ofed"]
    kind = ofed["kind"]
    requested = ofed.get("gpudirect", "auto")
    d = ck.d["ofed"]["gpudirect"]
    dma, peer = d["dma_buf"], d["peermem"]
    if requested == "peermem" and kind not in peer["needs_ofed"]:
        ck.add(_violation(
            "gpudirect-peermem-inbox", ["ofed"],
            f"nvidia-peermem needs the peer-memory API of DOCA-OFED or MLNX_OFED; ofed kind {kind} has none, so "
            f"ofed.gpudirect peermem cannot work.",
            "Set kiln_stack.ofed.gpudirect to dma_buf (open modules, kernel >= 5.12) or auto, or use DOCA-OFED.",
            {"ofed": dict(ofed, gpudirect="auto")}, peer["confidence"], peer["source"]))
    if requested == "dma_buf":
        conds = dma_buf_conditions(ck.s)
        checks = (
            ("flavor", "gpudirect-dmabuf-flavor", ["ofed", "driver_flavor"], "DMA-BUF needs the open kernel modules",
             "Set kiln_stack.driver_flavor to open, or ofed.gpudirect to peermem (with DOCA-OFED).", {"driver_flavor": "open"}),
            ("kernel", "gpudirect-dmabuf-kernel", ["ofed", "kernel"], f"DMA-BUF needs kernel >= {dma['min_kernel']}",
             f"Use a kernel >= {dma['min_kernel']}, or ofed.gpudirect peermem with DOCA-OFED.", None),
            ("cuda", "gpudirect-dmabuf-cuda", ["ofed", "cuda"], f"DMA-BUF needs CUDA >= {dma['min_cuda']}",
             f"Set kiln_stack.cuda to {dma['min_cuda']} or newer, or ofed.gpudirect peermem with DOCA-OFED.", None),
            ("gpu", "gpudirect-dmabuf-gpu", ["ofed", "gpu"], "DMA-BUF needs a Turing or newer GPU",
             "Use ofed.gpudirect peermem with DOCA-OFED for this GPU.", None),
        )
        for name, rule, comps, need, fix, fix_stack in checks:
            c = conds[name]
            if c["ok"] is False:
                if fix_stack is None and kind in peer["needs_ofed"]:
                    fix_stack = {"ofed": dict(ofed, gpudirect="peermem")}
                ck.add(_violation(rule, comps, f"{need}; {c['text']}: ofed.gpudirect dma_buf cannot work.", fix,
                                  fix_stack, dma["confidence"], dma["source"]))
        return
    if requested != "auto" or kind != "inbox":
        return
    # auto with inbox drivers: DMA-BUF is the only path; say when it is gone (warnings)
    if ck.s.get("driver_flavor") == "proprietary":
        ck.add(_violation(
            "gpudirect-flavor", ["ofed", "driver_flavor"],
            f"With inbox RDMA drivers (ofed kind inbox) GPUDirect RDMA needs DMA-BUF, which needs the open kernel "
            f"modules; driver_flavor proprietary leaves no GPUDirect path.",
            "Set kiln_stack.driver_flavor to open, or use DOCA-OFED (ofed kind doca) for nvidia-peermem.",
            {"driver_flavor": "open"}, dma["confidence"], dma["source"], severity=WARNING))
    if ck.s.get("kernel") and not _ge(ck.s["kernel"].split("-")[0], dma["min_kernel"]):
        ck.add(_violation(
            "gpudirect-kernel", ["ofed", "kernel"],
            f"DMA-BUF GPUDirect RDMA over inbox drivers needs kernel >= {dma['min_kernel']}; kernel "
            f"{ck.s['kernel']} is older.",
            f"Use a kernel >= {dma['min_kernel']} or DOCA-OFED (ofed kind doca).",
            {"ofed": {"kind": "doca", "version": "3.2.1"}}, dma["confidence"], dma["source"], severity=WARNING))
