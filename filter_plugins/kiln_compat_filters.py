# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln compatibility filters: the registry (name -> function) of module_utils/kiln_compat_engine/.

The engine raises ``CompatError``, kiln's FilterError (an ``AnsibleFilterError``), so a filter's
error reads as the message alone. How the import works: docs/architecture.md "Python layout".
"""

import site
from pathlib import Path
from typing import Any

site.addsitedir(str(Path(__file__).resolve().parents[1] / "module_utils"))  # docs/architecture.md "Python layout"

from kiln_compat_engine import (  # noqa: E402
    containers,
    gpudirect,
    inventory,
    lookup,
    mirror,
    packages,
    plan,
    probe,
    recommend,
    report,
    repos,
    resolve,
    rules,
    versions,
)


class FilterModule:
    """kiln compatibility filters (documented in filter_plugins/<name>.yml)."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_stack_violations": rules.kiln_stack_violations,
            "kiln_recommend_stack": recommend.kiln_recommend_stack,
            "kiln_resolve_stack": resolve.kiln_resolve_stack,
            "kiln_gpu_spec": lookup.kiln_gpu_spec,
            "kiln_gpu_pci_models": lookup.kiln_gpu_pci_models,
            "kiln_version_cmp": versions.kiln_version_cmp,
            "kiln_version_compare": versions.kiln_version_compare,
            "kiln_version_sort": versions.kiln_version_sort,
            "kiln_version_key": versions.kiln_version_key,
            "kiln_pkg": packages.kiln_pkg,
            "kiln_pkg_modules": packages.kiln_pkg_modules,
            "kiln_pkg_replaces": packages.kiln_pkg_replaces,
            "kiln_packages": packages.kiln_packages,
            "kiln_distro_build": packages.kiln_distro_build,
            "kiln_tool": packages.kiln_tool,
            "kiln_repo": repos.kiln_repo,
            "kiln_repos_problems": repos.kiln_repos_problems,
            "kiln_cuda_repo": repos.kiln_cuda_repo,
            "kiln_container_toolkit_repo": repos.kiln_container_toolkit_repo,
            "kiln_torch_index": repos.kiln_torch_index,
            "kiln_doca_repo": repos.kiln_doca_repo,
            "kiln_gpudirect": gpudirect.kiln_gpudirect,
            "kiln_container_plan": containers.kiln_container_plan,
            "kiln_ofed_builds": packages.kiln_ofed_builds,
            "kiln_stacks_by_host": inventory.kiln_stacks_by_host,
            "kiln_stack_report": report.kiln_stack_report,
            "kiln_hostlist": inventory.kiln_hostlist,
            "kiln_plan": plan.kiln_plan,
            "kiln_plan_text": plan.kiln_plan_text,
            "kiln_missing_python_libs": probe.kiln_missing_python_libs,
            "kiln_mirror_plan": mirror.kiln_mirror_plan,
            "kiln_mirror_site_repos": mirror.kiln_mirror_site_repos,
        }
