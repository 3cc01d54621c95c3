# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""GPU health rules (family ``health``; imports the bases and ``facts``). In dependency order:

- ``dcgm_diag``: the parser of ``dcgmi diag [-j]`` (DCGM 3.x and 4.x)
- ``rules``: the health rules file behind the memory and ``dcgmi diag`` verdicts
- ``memory``: ECC, row remapping and page retirement checks (reads ``facts``)
- ``dcgm``: the check of one ``dcgmi diag -r <level>`` run
- ``dcgm_health``: the parser of ``dcgmi health -c [-j]`` and the ``dcgm.health`` check
  (reads ``dcgm``, ``dcgm_diag``, ``rules``)
- ``kernel_log``: the kernel log a burn-in reads for NVIDIA XIDs
- ``gpu_state``: persistence mode, Fabric Manager and GPU fabric registration, NVLink error growth
  (reads ``rules``, ``memory``; the burn-in and kiln-health both call it)
- ``catalogue``: the node-health check catalogue (``node_health`` of the rules file), checked
- ``alerts``: the Prometheus alerting rules for kiln-health's textfile metrics (reads ``rules``, ``catalogue``)
"""
