# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""RDMA port rules (family ``fabric``; imports the bases only). In dependency order:

- ``base``: constants, the facts reader, port states and the rules file
- ``counters``: the ports' error counters, judged by port identity and direction
"""
