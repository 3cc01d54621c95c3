# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Slurm node state (family ``slurm``; imports the bases only). In dependency order:

- ``sinfo``: the one parser of ``sinfo --Node`` rows and Slurm node states
- ``node_state``: the one rule for every drain and resume kiln makes, and the drain reasons
- ``nodes``: node descriptions for slurm.conf / gres.conf and the plays' node plan
"""
