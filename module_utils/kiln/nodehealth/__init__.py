# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln-health, the node health check between jobs (docs/health.md): its configuration, the judge that
runs the burn-in's own rules on one node, the drain/resume decision and the Prometheus textfile.

Pure functions; the program ``roles/node_health/files/kiln-health`` collects the node's sources and
calls them. A family above ``burnin``: it reuses the burn-in's passive judges (one rule set, two callers).
In dependency order:

- ``config``: ``/etc/kiln/health.json`` checked, every error naming its role variable
- ``judge``: one run's checks from the node's snapshot (reads ``burnin``, ``fabric``, ``health``)
- ``action``: the streaks and the drain/resume decision (reads ``slurm.node_state``)
- ``textfile``: the Prometheus textfile of a run (reads ``judge``)
"""
