# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Rule family Fabric Manager: fabricmanager-driver (Fabric Manager equals the driver version exactly).
"""

from __future__ import annotations

from ..lookup import _driver_branch
from ..violations import _violation
from .context import Checker


def r_fabricmanager(ck: Checker) -> None:
    fm, drv = ck.s.get("fabricmanager"), ck.s.get("driver")
    if fm and drv and ck.driver and _driver_branch(fm) and fm != drv:
        ck.add(_violation(
            "fabricmanager-driver", ["fabricmanager", "driver"],
            f"Fabric Manager {fm} must equal the driver version exactly, but the driver is {drv}.",
            f"Set kiln_stack.fabricmanager to {drv}.", {"fabricmanager": drv}, "VERIFIED",
            ck.d["sources"]["driver_install"]))
