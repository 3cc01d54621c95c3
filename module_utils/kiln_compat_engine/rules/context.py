# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The checker: one normalised stack, its resolved entries, and the unknown-version checks.

:class:`Checker` resolves each component of the stack to its data entry
(``gpu``, ``os``, ``cuda``, ``driver``) and reports ``unknown-version`` for
anything the data does not know; the rule families (the other modules of this
package) then read the resolved entries and add violations to ``out``.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from typing import Any

from ..choose import _newest_driver_for
from ..data import compat_data
from ..lookup import _branch_latest, _cuda_release, _driver_branch, _gpu_entry, _os_entry, _parse_nccl, _parse_torch
from ..versions import _ge, _major, _mm, _slurm_major, kiln_version_key
from ..violations import ERROR, WARNING, _known, _unknown


class Checker:
    """Evaluates one normalised stack. Internal: use :func:`kiln_stack_violations`."""

    def __init__(self, stack: dict[str, Any], today: datetime.date | None, detected: Sequence[str] = (),
                 detected_hcas: Sequence[str] = ()) -> None:
        self.s = stack
        self.detected = list(detected)
        self.detected_hcas = list(dict.fromkeys(detected_hcas))
        self.d = compat_data()
        self.today = today
        self.out: list[dict[str, Any]] = []
        self.gpu: dict[str, Any] | None = None
        self.os: tuple[str, dict[str, Any]] | None = None
        self.cuda: tuple[str, dict[str, Any]] | None = None
        self.driver: tuple[str, dict[str, Any]] | None = None

    def cuda_txt(self) -> str:
        """``12.4 (12.4.1)`` when the stack names a minor, else just the version."""
        asked = str(self.s.get("cuda"))
        return asked if not self.cuda or self.cuda[0] == asked else f"{asked} ({self.cuda[0]})"

    def add(self, violation: dict[str, Any]) -> None:
        self.out.append(violation)

    # -- resolution + unknown-version -----------------------------------
    def resolve(self) -> None:
        s, d = self.s, self.d
        if "gpu" in s:
            self.gpu = _gpu_entry(s["gpu"])
            if not self.gpu:
                self.add(_unknown("gpu", s["gpu"], "known models: " + ", ".join(d["gpus"]),
                                  "Set kiln_stack.gpu to a model (e.g. H100), a variant (e.g. H100-SXM5-80GB) or a PCI id "
                                  "(10de:2330) listed in data/compat.yml, or add the GPU to the data with a source."))
        if "os" in s:
            self.os = _os_entry(s["os"])
            if not self.os:
                self.add(_unknown("os", s["os"], "known: " + ", ".join(k for k in d["os"] if k != "os_aliases"),
                                  "Set kiln_stack.os to one of the operating systems in data/compat.yml (e.g. ubuntu-24.04)."))
        if "cuda" in s:
            self.cuda = _cuda_release(s["cuda"])
            if not self.cuda:
                newest = max(d["cuda"]["releases"], key=kiln_version_key)
                self.add(_unknown("cuda", s["cuda"], "no driver row is known for it",
                                  f"Set kiln_stack.cuda to a toolkit listed in data/compat.yml, e.g. \"{newest}\".",
                                  {"cuda": newest}))
        if "driver" in s:
            self.driver = _driver_branch(s["driver"])
            if not self.driver:
                rec = _newest_driver_for("0")
                self.add(_unknown("driver", s["driver"], "not a driver version of a known branch",
                                  f"Set kiln_stack.driver to a release of a known branch, e.g. \"{rec}\".",
                                  {"driver": rec, **({"fabricmanager": rec} if "fabricmanager" in s else {})}))
            elif self.driver[1].get("confidence") == "UNVERIFIED":
                branch = self.driver[0]
                self.add(_unknown("driver", s["driver"], f"branch R{branch} is only known from unverified sources",
                                  f"Prefer a documented branch, or add verified R{branch} data to data/compat.yml.",
                                  severity=WARNING))
            elif s["driver"] not in (self.driver[1].get("releases") or []):
                branch, rels = self.driver[0], self.driver[1].get("releases") or []
                newest = _branch_latest(self.driver[1])
                self.add(_unknown("driver", s["driver"],
                                  f"R{branch} is known, this point release is not"
                                  + (f"; newest known: {newest}" if newest else ""),
                                  "Check that your repository carries it, or use a listed release"
                                  + (f" such as \"{newest}\"" if newest else "") + ".",
                                  self.driver_fix(newest) if newest else None, severity=WARNING))
        if "fabricmanager" in s and not _driver_branch(s["fabricmanager"]):
            self.add(_unknown("fabricmanager", s["fabricmanager"], "not a driver version of a known branch",
                              "Set kiln_stack.fabricmanager to exactly the driver version.",
                              {"fabricmanager": s["driver"]} if self.driver else None))
        if "cudnn" in s and str(s["cudnn"]) not in d["cudnn"]["releases"]:
            self.add(_unknown("cudnn", s["cudnn"], "known: " + _known(d["cudnn"]["releases"]),
                              "Set kiln_stack.cudnn to a full cuDNN version listed in data/compat.yml (e.g. 9.17.1.4)."))
        if "nccl" in s:
            ver, build = _parse_nccl(s["nccl"])
            entry = d["nccl"]["releases"].get(ver)
            if not entry:
                self.add(_unknown("nccl", s["nccl"], "known: " + _known(d["nccl"]["releases"]),
                                  "Set kiln_stack.nccl to an NCCL version listed in data/compat.yml (e.g. 2.21.5)."))
            elif build and build not in entry["builds"]:
                weak = build in (entry.get("builds_seen_once") or []) or _major(build) in (entry.get("builds_unknown_for") or [])
                self.add(_unknown("nccl", s["nccl"], f"known builds of {ver}: " + _known(entry["builds"])
                                  + ("; this build is only weakly attested" if weak else ""),
                                  f"Use one of the known builds of NCCL {ver} or drop the +cuda suffix.",
                                  {"nccl": ver}, severity=WARNING if weak else ERROR))
        if "torch" in s:
            key, _full, variant = _parse_torch(s["torch"])
            entry = d["torch"]["releases"].get(key) if key else None
            if not entry:
                self.add(_unknown("torch", s["torch"], "known releases: " + ", ".join(d["torch"]["releases"]),
                                  "Set kiln_stack.torch to a PyTorch release in data/compat.yml (e.g. 2.14)."))
            elif variant and variant not in entry["variants"]:
                self.add(_unknown("torch", s["torch"], f"PyTorch {key} wheels: " + ", ".join(entry["variants"]),
                                  f"Use one of the wheel variants of PyTorch {key} or drop the +cuXYZ suffix.",
                                  {"torch": key}))
        for comp in ("container_toolkit", "dcgm"):
            if comp in s and str(s[comp]) not in d[comp]["releases"]:
                newest = max(d[comp]["releases"], key=kiln_version_key)
                self.add(_unknown(comp, s[comp], "known: " + _known(d[comp]["releases"]),
                                  f"Set kiln_stack.{comp} to a version listed in data/compat.yml, e.g. \"{newest}\".",
                                  {comp: newest}))
        if "ofed" in s:
            self._resolve_ofed()
        if "slurm" in s:
            for daemon, ver in s["slurm"].items():
                if not re.match(r"^\d{2}\.\d{2}(\.\d+)?$", ver) or _slurm_major(ver) not in d["slurm"]["releases"]:
                    self.add(_unknown(f"slurm.{daemon}", ver, "known majors: " + ", ".join(d["slurm"]["releases"]),
                                      f"Set kiln_stack.slurm.{daemon} to a Slurm release such as \"25.11\"."))
        if "kubernetes" in s:
            k = d["kubernetes"]["minors"]
            for comp, ver in s["kubernetes"].items():
                ok = re.match(r"^v?1\.\d+(\.\d+)?$", ver) and _ge(_mm(ver.lstrip("v")), k["first"]) and _ge(k["last"], _mm(ver.lstrip("v")))
                if not ok:
                    self.add(_unknown(f"kubernetes.{comp}", ver, f"known minors: {k['first']}..{k['last']}",
                                      f"Set kiln_stack.kubernetes.{comp} to a minor between {k['first']} and {k['last']}."))

    def _resolve_ofed(self) -> None:
        ofed, d = self.s["ofed"], self.d["ofed"]
        kind = ofed.get("kind")
        ver = ofed.get("version")
        if kind == "doca" and ver and _mm(ver) not in d["doca_releases"]:
            self.add(_unknown("ofed.version", ver, "known DOCA releases: " + ", ".join(d["doca_releases"]),
                              "Set kiln_stack.ofed.version to a DOCA release listed in data/compat.yml (e.g. 3.2.1).",
                              severity=WARNING))
        elif kind == "doca" and ver and ver.count(".") >= 2 and ver not in (d["doca_releases"][_mm(ver)].get("updates") or {}):
            known = ", ".join(d["doca_releases"][_mm(ver)].get("updates") or {}) or "none"
            self.add(_unknown("ofed.version", ver, f"DOCA {_mm(ver)} is known, this update is not; known updates: {known}",
                              "Check that the DOCA repository carries it, or use a listed update.", severity=WARNING))
        if kind == "mlnx" and ver:
            base = ver.split("-")[0]
            if _mm(base) not in d["mlnx_releases"]:
                self.add(_unknown("ofed.version", ver, "known MLNX_OFED releases: " + ", ".join(d["mlnx_releases"]),
                                  "Use MLNX_OFED 24.10 LTS or move to DOCA-OFED (kind: doca).", severity=WARNING))

    def driver_fix(self, target: str) -> dict[str, Any]:
        """fix_stack that moves the driver to ``target`` (and Fabric Manager with it, when the stack has one)."""
        fix = {"driver": target}
        if "fabricmanager" in self.s:
            fix["fabricmanager"] = target
        return fix

    def gpu_max_branch(self) -> int | None:
        """The last driver branch the stack's GPU runs on, if its architecture has one."""
        return int(self.gpu["last_branch"]) if self.gpu and self.gpu.get("last_branch") else None
