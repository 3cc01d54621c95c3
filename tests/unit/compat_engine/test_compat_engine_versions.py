"""Version ordering used by every kiln rule."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from kiln_compat_engine.versions import kiln_version_cmp, kiln_version_compare, kiln_version_key, kiln_version_sort


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("550.54.14", "550.127.05", -1),
        ("550.127.05", "550.54.14", 1),
        ("550.54.14", "550.54.14", 0),
        ("570.26", "570.124.06", -1),
        ("12.4", "12.4.0", 0),
        ("13.0", "13.2", -1),
        ("12.10", "12.9", 1),
        ("1.0rc1", "1.0", -1),
        ("1.0", "1.0.1", -1),
        ("2.21.5-1+cuda12.4", "2.21.5-1+cuda12.2", 1),
        ("24.11.3", "25.05", -1),
        ("1:4.6.0-1", "1:4.5.2-1", 1),
    ],
)
def test_version_cmp(a: str, b: str, expected: int) -> None:
    assert kiln_version_cmp(a, b) == expected
    assert kiln_version_cmp(b, a) == -expected


@pytest.mark.parametrize(
    ("a", "op", "b", "expected"),
    [
        ("550.127.05", ">=", "550.54.14", True),
        ("550.127.05", "<", "550.54.14", False),
        ("12.4", "==", "12.4.0", True),
        ("12.4", "ne", "12.4.1", True),
        ("595.91.07", "gt", "580.173.02", True),
        ("580.65.06", "le", "580.65.06", True),
    ],
)
def test_version_compare(a: str, op: str, b: str, expected: bool) -> None:
    assert kiln_version_compare(a, op, b) is expected


def test_version_compare_rejects_unknown_operator() -> None:
    with pytest.raises(AnsibleFilterError, match="unknown operator"):
        kiln_version_compare("1", "~=", "2")


def test_version_sort() -> None:
    versions = ["550.127.05", "535.309.01", "550.54.14", "550.54.15", "595.91.07", "580.173.02"]
    assert kiln_version_sort(versions) == ["535.309.01", "550.54.14", "550.54.15", "550.127.05", "580.173.02", "595.91.07"]
    assert kiln_version_sort(versions, reverse=True)[0] == "595.91.07"


def test_version_sort_rejects_string() -> None:
    with pytest.raises(AnsibleFilterError, match="expected a list"):
        kiln_version_sort("550.54.14")


def test_version_key_rejects_none() -> None:
    with pytest.raises(AnsibleFilterError):
        kiln_version_key(None)
