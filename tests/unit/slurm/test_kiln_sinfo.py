"""module_utils/kiln/slurm/sinfo.py: the one sinfo row parser and the Slurm node states kiln knows."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.slurm import sinfo as ksi


def test_rows_parse_with_reasons_first_row_wins_garbage_skipped():
    rows = ksi.parse_sinfo(["c1|idle|none", "c2|drained|BURNIN: slow | fan", "c2|idle|later partition",
                            "garbage", "|idle|no name", "c3|down*|Not responding", "  c4 | MIXED | ", None, 7])
    assert rows == {"c1": {"state": "idle", "reason": ""},
                    "c2": {"state": "drained", "reason": "BURNIN: slow | fan"},
                    "c3": {"state": "down*", "reason": "Not responding"},
                    "c4": {"state": "mixed", "reason": ""}}
    assert ksi.parse_sinfo(None) == {} and ksi.parse_sinfo([]) == {}


def test_sinfo_rows_parse_with_reasons():
    rows = ksi.parse_sinfo(["c1|idle|none", "c2|drained|BURNIN: nccl.pair.all_reduce: slow", "c3|down*|Not responding",
                           "garbage"])
    assert rows["c1"] == {"state": "idle", "reason": ""}
    assert rows["c2"]["reason"].startswith("BURNIN:")
    assert set(rows) == {"c1", "c2", "c3"}


@pytest.mark.parametrize("state, bases, flags", [
    ("idle", ["idle"], []),
    ("down*", ["down"], ["*"]),
    ("MIXED+DRAIN", ["mixed", "drain"], []),
    ("idle~", ["idle"], ["~"]),
    ("drained$@", ["drained"], ["$", "@"]),
    ("alloc+", ["alloc"], []),
    ("", [], []),
])
def test_parse_state(state, bases, flags):
    parsed = ksi.parse_state(state)
    assert parsed["bases"] == bases and parsed["flags"] == flags and parsed["unknown"] == []


@pytest.mark.parametrize("state, expected", [
    # available
    ("idle", "available"), ("mixed", "available"), ("allocated", "available"), ("alloc", "available"),
    ("completing", "available"), ("reserved", "available"), ("maint", "available"), ("planned", "available"),
    ("idle$", "available"), ("idle@", "available"), ("mixed-", "available"), ("idle+cloud", "available"),
    # drained (drain flag; a person or a burn-in set it)
    ("drained", "drained"), ("draining", "drained"), ("drng", "drained"), ("mixed+drain", "drained"),
    ("fail", "drained"), ("failing", "drained"), ("drained@", "drained"),
    # cannot run a test now
    ("down", "down"), ("down*", "down"), ("idle*", "down"), ("drained*", "down"), ("idle~", "down"),
    ("idle#", "down"), ("idle!", "down"), ("idle%", "down"), ("idle^", "down"), ("unknown", "down"),
    ("future", "down"), ("inval", "down"), ("powered_down", "down"), ("powering_up", "down"),
    ("not_responding", "down"), ("down+drain", "down"),
    # never guessed
    ("weird", "unrecognised"), ("idle?", "unrecognised"), ("drained+zzz", "unrecognised"), ("", "unrecognised"),
    ("+", "unrecognised"), ("*", "down"),
])
def test_condition(state, expected):
    assert ksi.condition(state) == expected


def test_every_documented_suffix_is_known():
    assert set(ksi.FLAGS) == set("*~#!%$@^-")
    assert set(ksi.BASE_STATES.values()) <= set(ksi.CONDITIONS)


_WORDS = st.sampled_from(sorted(ksi.BASE_STATES) + ["", "weird", "IDLE", "Down", "drain ed", "??", "idle\x00"])
_STATES = st.lists(st.tuples(_WORDS, st.text(alphabet="*~#!%$@^-?", max_size=3)), max_size=4).map(
    lambda parts: "+".join(w + f for w, f in parts))
_ROWS = st.one_of(
    st.builds(lambda n, s, r: f"{n}|{s}|{r}", st.text(max_size=12), _STATES, st.text(max_size=30)),
    st.text(max_size=60),  # garbage, truncated rows
    st.builds(lambda n, s: f"{n}|{s}", st.text(max_size=8), _STATES),  # cut off before the reason
    st.none(), st.integers(), st.binary(max_size=20),
)


@settings(max_examples=400, deadline=None, database=None)
@given(lines=st.lists(_ROWS, max_size=12))
def test_parser_never_raises_and_never_guesses(lines):
    rows = ksi.parse_sinfo(lines)
    for node, row in rows.items():
        assert node and node == node.strip() and set(row) == {"state", "reason"}
        parsed = ksi.parse_state(row["state"])
        found = ksi.condition(row["state"])
        assert found in ksi.CONDITIONS
        if parsed["unknown"] or not parsed["bases"]:
            assert found in ("down", "unrecognised")  # an unknown state is never available
        if found == "available":
            assert all(ksi.BASE_STATES[b] == "available" for b in parsed["bases"])
            assert not set(parsed["flags"]) & set("*~#!%^")
        if ksi.resumable(row["state"]):
            assert not parsed["unknown"]


@settings(max_examples=300, deadline=None, database=None)
@given(state=st.text(max_size=40))
def test_state_helpers_never_raise(state):
    assert ksi.condition(state) in ksi.CONDITIONS
    assert isinstance(ksi.resumable(state), bool)
    assert ksi.parse_state(state)["state"] == state.strip().lower()[:4096]
