# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln package planning filters: the registry (name -> function) of module_utils/kiln/packages/pkgdb.py."""

import site
from pathlib import Path
from typing import Any

site.addsitedir(str(Path(__file__).resolve().parents[1] / "module_utils"))  # docs/architecture.md "Python layout"

from kiln.packages import pkgdb as kiln_pkgdb  # noqa: E402


class FilterModule:
    """kiln package planning filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_pkg_split": kiln_pkgdb.kiln_pkg_split_filter,
            "kiln_pkg_plan": kiln_pkgdb.kiln_pkg_plan_filter,
            "kiln_pkgdb_parse": kiln_pkgdb.kiln_pkgdb_parse_filter,
            "kiln_kernel_key": kiln_pkgdb.kiln_kernel_key,
            "kiln_kernels_to_check": kiln_pkgdb.kiln_kernels_to_check,
            "kiln_format_change": kiln_pkgdb.kiln_format_change,
            "kiln_pinned_covered": kiln_pkgdb.kiln_pinned_covered,
        }
