# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln repository key filters: the registry of module_utils/kiln/packages/repo_key.py (docs/architecture.md "Python layout")."""

import site
from pathlib import Path
from typing import Any

site.addsitedir(str(Path(__file__).resolve().parents[1] / "module_utils"))  # docs/architecture.md "Python layout"

from kiln.packages import repo_key as kiln_repo_key  # noqa: E402


class FilterModule:
    """kiln repository key filters."""

    def filters(self) -> dict[str, Any]:
        return {"kiln_repo_key_verdict": kiln_repo_key.kiln_repo_key_verdict}
