"""The package's error class: an AnsibleFilterError under Ansible, a plain Exception without it (module errors)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kiln_paths import REPO

MODULE_UTILS = REPO / "module_utils"


def test_the_engine_imports_without_ansible() -> None:
    code = ("import sys; sys.modules['ansible'] = None; sys.path.insert(0, sys.argv[1]); "
            "import kiln_compat_engine.plan, kiln_compat_engine.recommend, kiln_compat_engine.report, "
            "kiln_compat_engine.probe; from kiln_compat_engine.errors import CompatError; "
            "print(CompatError.__mro__[1].__module__, issubclass(CompatError, Exception))")
    out = subprocess.run([sys.executable, "-c", code, str(MODULE_UTILS)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["kiln.errors", "True"]  # the one filter error, a plain Exception here


def test_engine_errors_are_filter_errors() -> None:
    from ansible.errors import AnsibleFilterError

    from kiln_compat_engine.errors import CompatError
    assert issubclass(CompatError, AnsibleFilterError)


def test_a_filter_error_reads_as_its_message_alone() -> None:
    from kiln_compat_engine.errors import CompatError
    from kiln_compat_engine.versions import kiln_version_compare

    with pytest.raises(CompatError) as info:
        kiln_version_compare("1", "~", "2")
    assert str(info.value) == ("kiln_version_compare: unknown operator '~'; use one of "
                               "['!=', '<', '<=', '=', '==', '>', '>=', 'eq', 'ge', 'gt', 'le', 'lt', 'ne']")
