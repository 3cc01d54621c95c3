"""tests/harness/digest.py: the failure digest printed in the tail of `make test`."""
from __future__ import annotations

import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_paths import REPO as ROOT
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import digest  # noqa: E402

sys.path.remove(str(ROOT / "tests" / "harness"))

ANSIBLE_LOG = """\
TASK [Wait for the acceptance run] *********************************************
FAILED - RETRYING: [localhost]: Wait for the acceptance run (300 retries left).
ok: [localhost]

TASK [Probe something optional] ************************************************
fatal: [localhost]: FAILED! =>
    changed: false
    msg: not there
...ignoring

TASK [Require the acceptance run to pass] **************************************
fatal: [localhost]: FAILED! =>
    assertion: __cpu2_summary.overall.status == 'PASS'
    changed: false
    evaluated_to: false
    msg: |-
        overall WARN: c3 baseline.pair_busbw WARN
        line two

PLAY RECAP *********************************************************************
localhost                  : ok=40   changed=3    unreachable=0    failed=1
"""


def test_picks_the_failed_assertion_not_retries_or_ignored_failures() -> None:
    out = digest.digest(ANSIBLE_LOG)
    assert out[0] == "TASK [Require the acceptance run to pass] **************************************"
    assert out[1].startswith("fatal: [localhost]")
    assert out[2].strip() == "assertion: __cpu2_summary.overall.status == 'PASS'"
    assert any("overall WARN: c3 baseline.pair_busbw WARN" in line for line in out)
    assert not any("RETRYING" in line or "not there" in line for line in out)
    assert not any("PLAY RECAP" in line for line in out)


def test_pytest_failures() -> None:
    log = "....F\nE   AssertionError: 1 != 2\nFAILED tests/unit/test_x.py::test_y - AssertionError\n"
    out = digest.digest(log)
    assert out[0].startswith("FAILED tests/unit/test_x.py::test_y")
    assert "E   AssertionError: 1 != 2" in out


def test_otherwise_the_last_lines() -> None:
    log = "\n".join(f"line {n}" for n in range(100)) + "\n=== [kiln] stage x: FAILED (rc 1) in 3 s\n"
    assert digest.digest(log, 5) == [f"line {n}" for n in range(95, 100)]


def test_cli_with_a_missing_log_says_so() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "tests/harness/digest.py"), "/nonexistent/log"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0 and "(no log:" in run.stdout


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=3000), st.integers(min_value=1, max_value=40))
def test_any_text_gives_a_bounded_digest(text: str, limit: int) -> None:
    out = digest.digest(text, limit)
    assert len(out) <= limit
    assert all(len(line) <= digest.WIDTH for line in out)
