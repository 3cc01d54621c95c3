"""bench/sensitivity.py: the fault is calibrated to an observed drop, not a tbf cap (issue 31, Deliver 9)."""

from __future__ import annotations

import importlib.util
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_paths import REPO
_spec = importlib.util.spec_from_file_location("kiln_bench_sensitivity", REPO / "bench" / "sensitivity.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def bursty(cap: float) -> float:
    """A CPU-engine-like link: any cap below ~1.3x the average rate costs ~43 %, above it the drop fades."""
    if cap < 1.3:
        return 0.43
    return max(0.0, 0.43 * (4.0 - cap) / 2.7)


def test_tbf_cap_is_not_the_drop_and_calibration_finds_the_target():
    # The old bench's 95 % and 90 % caps both give 43 %: a cap says nothing about the slowdown seen.
    assert bursty(0.95) == bursty(0.90) == 0.43
    for target in (0.10, 0.15, 0.20, 0.30):
        cap, seen = bench.calibrate_cap(bursty, target, steps=12)
        assert seen is not None and abs(seen - target) <= 0.025, (target, cap, seen)
        assert cap > 1.0  # only a cap above the average rate gives a small drop on a bursty sender


@settings(max_examples=60, deadline=None)
@given(st.floats(0.05, 0.6), st.floats(0.5, 8.0), st.floats(0.3, 3.0))
def test_calibration_converges_on_any_monotone_link(target, knee, slope):
    def link(cap: float) -> float:  # drop falls monotonically as the cap rises
        return min(0.95, max(0.0, 1.0 - (cap / knee) ** slope if cap < knee else 0.0) + 0.0)

    cap, seen = bench.calibrate_cap(link, target, low=0.01, high=100.0, steps=40, tolerance=0.01)
    reachable = [link(c) for c in (0.01, 100.0)]
    if min(reachable) <= target <= max(reachable):
        assert abs(seen - target) <= 0.02


@pytest.mark.parametrize("target", [0.0, 1.0, -0.1, math.nan])
def test_calibration_refuses_impossible_targets(target):
    with pytest.raises(ValueError):
        bench.calibrate_cap(bursty, target)


def test_calibration_without_a_result_stops():
    with pytest.raises(RuntimeError):
        bench.calibrate_cap(lambda _cap: None, 0.2)


def test_observed_drop_ignores_missing_and_non_finite_values():
    assert bench.observed_drop([0.9, 0.8, None, math.nan, 0.7], 1.0) == pytest.approx(0.2)
    assert bench.observed_drop([], 1.0) is None
    assert bench.observed_drop([0.5], 0.0) is None


def test_pair_values_with_takes_only_the_bad_nodes_pairs():
    runs = [{"results": [{"pair": ["a", "b"], "value": 1.0}, {"pair": ["c", "d"], "value": 2.0},
                         {"pair": ["b", "c"], "value": None}]}]
    assert bench.pair_values_with(runs, "b") == [1.0]
