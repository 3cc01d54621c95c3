"""The preflight report: each distinct stack once, one line per violation naming its hosts (module report)."""

from __future__ import annotations

from kiln_compat_engine.data import compat_data
from kiln_compat_engine.inventory import kiln_stacks_by_host
from kiln_compat_engine.report import kiln_stack_report
from kiln_compat_engine.versions import kiln_version_key

GOOD = {"gpu": "H100", "os": "ubuntu-24.04", "driver": "580.173.02", "cuda": "13.0.2"}
BAD = {"gpu": "H100", "os": "ubuntu-24.04", "driver": "550.127.05", "cuda": "13.0.2"}


def test_report_names_hosts_rules_and_fixes() -> None:
    hv = {f"gpu{i:02d}": {"kiln_stack": BAD} for i in range(1, 5)}
    hv["ctl01"] = {"kiln_stack": GOOD}
    report = kiln_stack_report(kiln_stacks_by_host(hv, sorted(hv)))
    assert report["evaluations"] == 2
    line = [e for e in report["errors"] if e.startswith("[cuda-driver]")][0]
    assert "gpu[01-04] (4 hosts)" in line and "550.127.05" in line and "13.0.2" in line
    # the fix is the newest listed release of a supported PB/LTSB branch (R620's first, as of the data)
    branches = compat_data()["drivers"]["branches"].values()
    newest = max((r for b in branches if b.get("status") == "supported" and b.get("type") in ("PB", "LTSB")
                  for r in b.get("releases") or []), key=kiln_version_key)
    assert "kiln_stack.driver" in line and f'"driver": "{newest}"' in line


def test_report_turns_malformed_stack_into_violation() -> None:
    report = kiln_stack_report([{"stack": "H100", "hosts": ["x"]},
                                {"stack": {"slurm": "24.11"}, "hosts": ["y"]}])
    assert report["error_count"] == 2 and all("[invalid-stack]" in e for e in report["errors"])
