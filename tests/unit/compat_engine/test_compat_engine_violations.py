"""The violation record and its helpers (module violations)."""

from __future__ import annotations

from kiln_compat_engine.violations import (
    CONFIDENCE_LEVELS,
    ERROR,
    WARNING,
    _known,
    _set_fix,
    _stack_get,
    _unknown,
    _violation,
    _worst_conf,
)


def test_severity_follows_confidence() -> None:
    v = _violation("cuda-driver", ["cuda", "driver"], "m.", "f.", None, "VERIFIED", "src")
    assert v == {"rule": "cuda-driver", "components": ["cuda", "driver"], "severity": ERROR, "message": "m.",
                 "fix": "f.", "fix_stack": {}, "confidence": "VERIFIED", "source": "src"}
    assert _violation("x", [], "m", "f", None, "UNVERIFIED")["severity"] == WARNING
    assert _violation("x", [], "m", "f", None, None)["confidence"] == "DERIVED"
    assert _violation("x", [], "m", "f", None, "VERIFIED", severity=WARNING)["severity"] == WARNING
    assert _worst_conf("VERIFIED", "UNVERIFIED", None) == "UNVERIFIED" and _worst_conf() == "DERIVED"
    assert CONFIDENCE_LEVELS[0] == "VERIFIED" and CONFIDENCE_LEVELS[-1] == "UNVERIFIED"


def test_unknown_version_hints_at_yaml_floats() -> None:
    v = _unknown("cuda", 12.1, "no driver row is known for it", "Set it.")
    assert v["rule"] == "unknown-version" and v["severity"] == ERROR
    assert "YAML read it as a float: quote versions" in v["message"]
    assert "float" not in _unknown("dcgm", "3.1", "known: 3.3", "Set it.")["message"]


def test_known_lists_the_newest_and_counts_the_rest() -> None:
    pool = [f"1.{i}" for i in range(15)]
    assert _known(pool, 3) == "1.12, 1.13, 1.14 (and 12 older)"
    assert _known(["2.0", "1.10", "1.9"]) == "1.9, 1.10, 2.0"


def test_nested_components_get_and_fix_whole_sub_mappings() -> None:
    stack = {"slurm": {"slurmctld": "25.11", "slurmd": "24.05"}, "cuda": "12.4"}
    assert _stack_get(stack, "slurm.slurmd") == "24.05" and _stack_get(stack, "cuda") == "12.4"
    assert _stack_get(stack, "kubernetes.kubelet") is None
    assert _set_fix(stack, "slurm.slurmd", "25.11") == {"slurm": {"slurmctld": "25.11", "slurmd": "25.11"}}
    assert _set_fix(stack, "cuda", "12.6") == {"cuda": "12.6"}
