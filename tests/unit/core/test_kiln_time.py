"""module_utils/kiln/clock.py: UTC epochs and stamps whatever the machine's zone; run ids unique per invocation."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time

import pytest

from kiln import clock as kt
from kiln.clock import kiln_run_id, kiln_utc_epoch

UTC = datetime.timezone.utc
NEW_YEAR = 1767225600  # 2026-01-01T00:00:00Z


def test_a_naive_datetime_is_utc_wall_clock_time() -> None:
    # Ansible's now(utc=true): naive, UTC wall-clock time. Python's own .timestamp() reads it as local.
    naive = datetime.datetime(2026, 1, 1, 0, 0, 0)
    assert kt.epoch(naive) == NEW_YEAR
    assert kt.epoch(datetime.datetime(2026, 1, 1, 5, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=5.5)))) \
        == NEW_YEAR
    assert kt.epoch("2026-01-01T00:00:00Z") == kt.epoch("2026-01-01T05:30:00+05:30") == NEW_YEAR
    assert kt.epoch("20260101T000000Z") == kt.epoch(NEW_YEAR) == kt.epoch(f"{NEW_YEAR}") == NEW_YEAR
    assert kt.iso(NEW_YEAR) == "2026-01-01T00:00:00Z" and kt.compact(NEW_YEAR) == "20260101T000000Z"


@pytest.mark.parametrize("bad", ["2026-01-01T00:00:00", "yesterday", None, True, float("nan"), -1, [], "1e9"])
def test_what_has_no_zone_or_is_no_time_is_refused(bad: object) -> None:
    with pytest.raises(kt.KilnTimeError):
        kt.epoch(bad)


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata", "UTC"])
def test_the_epoch_of_now_utc_is_the_true_epoch_in_every_zone(zone: str) -> None:
    code = ("import datetime, time\nfrom kiln import clock as kiln_time\n"
            "naive = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)  # ansible's now(utc=true)\n"
            "print(kiln_time.epoch(naive) - int(time.time()), int(naive.timestamp()) - int(time.time()))\n")
    env = dict(os.environ, TZ=zone, PYTHONPATH=os.path.dirname(os.path.dirname(kt.__file__)))
    ours, pythons = (int(x) for x in subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                                     text=True, check=True, timeout=60).stdout.split())
    assert abs(ours) <= 1
    if zone != "UTC":  # the trap this module exists for
        assert abs(pythons) >= 3600


def test_run_ids_drawn_in_the_same_second_differ() -> None:
    when = datetime.datetime(2026, 1, 1)
    ids = [kt.run_id(when, "default") for _ in range(2000)]
    # 48 random bits: 2,000 ids in one second collide with odds of about 1 in 70 million (24 bits: 1 in 8)
    assert len(set(ids)) == len(ids)
    assert all(len(i.split("-")[1]) == 12 for i in ids)
    assert all(i.startswith("20260101T000000Z-") and i.endswith("-default") for i in ids)
    assert kt.run_id(when, "swap", token="3f9a0c") == "20260101T000000Z-3f9a0c-swap"
    assert kt.run_id(when, token="3f9a0c") == "20260101T000000Z-3f9a0c"
    assert sorted([kt.run_id(NEW_YEAR + 1, token="0000"), kt.run_id(NEW_YEAR, token="ffff")])[0].startswith(
        "20260101T000000Z")  # ids sort by time


@pytest.mark.parametrize("suffix", ["a b", "x;rm", "/etc", "x" * 65])
def test_a_run_id_suffix_is_a_plain_word(suffix: str) -> None:
    with pytest.raises(kt.KilnTimeError):
        kt.run_id(NEW_YEAR, suffix)


def test_the_filters_wrap_the_core() -> None:
    from ansible.errors import AnsibleFilterError

    now = datetime.datetime.now(UTC).replace(tzinfo=None)
    assert abs(kiln_utc_epoch(now) - time.time()) <= 2
    assert kiln_run_id(now, "default") != kiln_run_id(now, "default")
    with pytest.raises(AnsibleFilterError, match="kiln_utc_epoch"):
        kiln_utc_epoch("2026-01-01 00:00")
    with pytest.raises(AnsibleFilterError, match="kiln_run_id"):
        kiln_run_id(now, "bad suffix")
