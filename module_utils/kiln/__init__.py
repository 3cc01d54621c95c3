# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln's pure Python, one package per family (the compatibility engine is its own package beside it).

Families, from the bottom up; a family imports its own modules, the shared bases and the families
listed before it, never one after it (tests/unit/structure/test_module_families.py):

- bases, importable by every family: ``errors`` (kiln's one filter error), ``clock`` (UTC time),
  ``datafiles`` (the repository's data/ directory), ``process`` (runs a program and keeps all
  of its output),
  ``verdict`` (busbw, floors, statuses and exit codes; reads nccl-tests results)
- ``nccl``: the nccl-tests parsers (text, ``-J`` JSON, kiln's CPU engine)
- ``facts``: hardware facts readers (nvidia-smi, PCI, InfiniBand sysfs and tools, netdev names)
- ``packages``: the pinned-install path (package database, pins, kernel hold, repository keys,
  daemon.json) and the as-built records and drift gate that read it
- ``health``: GPU health rules (memory, ``dcgmi diag``, the kernel log's XIDs)
- ``fabric``: the RDMA ports' state and error-counter rules
- ``slurm``: Slurm node states (``sinfo``), the one drain/resume rule, node descriptions
- ``burnin``: the burn-in's judges, pair phase, launch commands, history, lock and reports
- ``upgrade``: the rolling upgrade's decisions

Inside the package every import is relative (``from ..slurm.sinfo import parse_sinfo``), so one
spelling works both where AnsiballZ ships it as ``ansible.module_utils.kiln`` and on the
controller and in tests as ``kiln`` (docs/architecture.md "Python layout").
"""
