"""The controller-library probe (module probe)."""

from __future__ import annotations

from kiln_compat_engine.probe import kiln_missing_python_libs


def test_missing_python_libs() -> None:
    assert kiln_missing_python_libs(["json", "yaml"]) == []
    assert kiln_missing_python_libs(["no_such_module_kiln"]) == ["no_such_module_kiln"]
