# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""GPU health rules (family ``health``; imports the bases and ``facts``). In dependency order:

- ``dcgm_diag``: the parser of ``dcgmi diag [-j]`` (DCGM 3.x and 4.x)
- ``rules``: the health rules file behind the memory and ``dcgmi diag`` verdicts
- ``memory``: ECC, row remapping and page retirement checks (reads ``facts``)
- ``dcgm``: the check of one ``dcgmi diag -r <level>`` run
- ``kernel_log``: the kernel log a burn-in reads for NVIDIA XIDs
"""
