# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln's compatibility engine: version rules, recommendations, package strings, repositories, plans.

Pure Python (PyYAML; ansible-core only for the error class, see ``errors``).
All knowledge lives in ``data/compat.yml`` and ``data/denylist.yml``; this
package only interprets it. Modules, in dependency order:

- ``errors``: :class:`CompatError` (an ``AnsibleFilterError`` where Ansible is installed)
- ``schema``: the input schema of ``kiln_stack`` / ``kiln_stack_allow`` (types, shapes, sizes)
- ``data``: loading and caching the data files
- ``versions``: version ordering and arithmetic
- ``violations``: the violation record and its helpers
- ``lookup``: data entries for a GPU, OS, CUDA release, driver branch
- ``stack``: a stack checked, normalised and canonicalised once (:class:`CheckedStack`, the value passed down)
- ``choose``: the newest driver / cuDNN / NCCL that fits (shared by fixes and the recommender)
- ``resolve``, ``packages``, ``repos``: exact versions, package strings, repositories
- ``rules``: the rule engine, one module per rule family
- ``recommend``: a complete compatible stack for a GPU
- ``inventory``, ``report``, ``plan``: inventory-wide grouping, the preflight report, the plan
- ``probe``: the controller-library probe

Ansible sees these functions as filters through the thin registry
``filter_plugins/kiln_compat_filters.py``; docs/architecture.md "Python layout" says how
it imports this package.
"""
