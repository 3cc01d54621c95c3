# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln's one package mechanism and what reads it (family ``packages``; imports the bases only).
In dependency order:

- ``pkgdb``: the package database, pin and module-stream planning behind library/kiln_packages.py
- ``hostfiles``: the files kiln_packages keeps on the host (policy-rc.d, apt cache age, pins records)
- ``kernel_hold``: which kernel packages to hold with the driver
- ``repo_key``: is a downloaded repository key exactly the pinned key?
- ``daemon_json``: Docker's daemon.json merged so that the operator wins
- ``drift``: as-built records and the drift gate (reads ``pkgdb``'s pins)
"""
