# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The burn-in (family ``burnin``; imports every family above except ``upgrade``). In dependency order:

- ``baseline``: per-node history and baselines, on the controller
- ``isolate``: bad-node isolation by 2-node all-reduce pairs
- ``launch``: the modes and the launch commands of the multi-node all-reduces
- ``context``: the final phase's launch context (engine, interface, programs, environment), from the facts
- ``evidence``: what the burn-in collected from one node, as one typed record (unknown keys refused)
- ``checks``: per-node checks (passive, tools, NCCL, DCGM)
- ``pair_phase``: swap mode and the pair phase (who takes part, what Slurm state to work in)
- ``fabric_checks``, ``fabric_pairs``: the fabric judges (ports, counters, GPUDirect, ib_write_bw)
- ``rdma``: the RDMA pair phase's plan and argv, as filters
- ``iperf``: the iperf3 link rates between node pairs (one node's result, the run's reference)
- ``report``: summary.json / .md, JUnit XML, Prometheus textfile, SVG
- ``assemble``: every check together: the run's summary, scheduler actions and history records
- ``lock``: the cluster lock and restore journal
"""
