# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The rolling upgrade (family ``upgrade``, the top; it imports ``slurm``, never ``burnin``: it runs the
burn-in as a tool and reads its summary).

- ``rollout``: batches, accounting of every node, drains and the report, as pure functions
"""
