# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Hardware facts from a node (family ``facts``; imports no other family). In dependency order:

- ``netdev``: netdev names checked before they reach a path, a unit name or an argv
- ``fabric``: InfiniBand / RoCE HCAs from sysfs and the tools' results, merged
- ``fabric_text``: parsers of ``ibstat``, ``ibv_devinfo``, ``perfquery`` and perftest output
- ``nvlink``: parsers of ``nvidia-smi nvlink -s`` (link states) and ``nvidia-smi nvlink -e`` (error counters)
- ``hardware``: GPUs (nvidia-smi XML, NVLink, PCI) and HCAs for the GPU facts
"""
