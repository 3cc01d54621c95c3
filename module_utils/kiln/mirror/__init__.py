# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln's air-gapped mirror: building it, the bundle that carries it in, and what checks and unpacks it
(family ``mirror``; imports the bases only). In dependency order:

- ``apt``: the apt side of the offline mirror build (library/kiln_mirror_apt.py)
- ``dnf``: the dnf (EL) side of the offline mirror build (library/kiln_mirror_dnf.py; MirrorError from ``apt``)
- ``build``: what both build modules do alike: run a program or stop, hash a file, read an upstream file
- ``openpgp``: ASCII armor, OpenPGP packets, key fingerprints, a signature's issuer (no gpg needed)
- ``signature``: is a bundle's manifest signed by the site key, exactly the pinned one (``gpgv``)?
- ``manifest``: the bundle manifest (schema ``kiln-mirror-bundle/1``): built, read, checked field by
  field, and what an incremental bundle inherits from its base
- ``bundle``: the tar made from a mirror tree, a bundle verified (every problem collected), unpacked
  into a release and served through an atomically switched ``current`` symlink

tools/kiln-bundle makes and verifies bundles on the controller; library/kiln_mirror_bundle.py verifies
and unpacks one on the mirror host (role ``mirror_server``).
"""
