# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The package's one error class.

:class:`CompatError` is what every function of the package raises for bad
input. Where ansible-core is importable (always, when Ansible loads the filter
registry) it is a subclass of ``AnsibleFilterError``, so a filter's error reads
exactly as before and ``except AnsibleFilterError`` still catches it; without
ansible-core the package stays usable and CompatError is a plain Exception.
"""

from __future__ import annotations

try:  # ansible-core is always present when Ansible loads the filters
    from ansible.errors import AnsibleFilterError as _Base
except ImportError:  # pragma: no cover - only without ansible-core installed

    class _Base(Exception):  # type: ignore[no-redef]
        """Stand-in used when ansible-core is not importable."""


class CompatError(_Base):
    """A kiln compatibility-engine error: the message says what is wrong and how to fix it."""
