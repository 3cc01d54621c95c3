"""module_utils/kiln/health/kernel_log.py and the xid.kernel_log check: the window, the source, and an unreadable log."""

from __future__ import annotations

import pytest

from kiln.burnin import assemble as kb
import kiln_data
from kiln.burnin import checks as kbc
from kiln.health import kernel_log as kkl

NOW = 1767229200.0  # 2026-01-01T01:00:00Z
SINCE = 1767225600  # 2026-01-01T00:00:00Z
XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus."
XID13 = "NVRM: Xid (PCI:0000:3b:00): 13, pid=9, Graphics Exception"


def ok(stdout: str, argv: list[str] | None = None) -> dict:
    return {"argv": argv or ["journalctl"], "rc": 0, "stdout": stdout, "stderr": ""}


def failed(name: str, rc: int | None, stderr: str) -> dict:
    return {"argv": [name], "rc": rc, "stdout": "", "stderr": stderr}


PROBE = ok(f"{SINCE + 100}.000001 n1 kernel: eth0: link up\n")
JOURNAL = ok(f"{SINCE - 60}.5 n1 kernel: {XID79}\n{SINCE + 60}.5 n1 kernel: {XID13}\n")


@pytest.mark.parametrize(("stamp", "problem", "since", "note"), [
    (f"{SINCE}\n", None, SINCE, None),
    (None, None, 0, "no earlier burn-in"),
    ("garbage", None, 0, "not epoch seconds"),
    ("", None, 0, "not epoch seconds"),
    (None, "Permission denied", 0, "cannot read"),
    # An older kiln wrote now(utc=true, fmt='%s') from a New York controller: 5 h ahead.
    (f"{int(NOW) + 18000}", None, 0, "5.0 h ahead"),
])
def test_window(stamp, problem, since, note):
    win = kkl.window(stamp, NOW, problem)
    assert win["since"] == since
    assert (win["note"] is None) if note is None else note in win["note"]


def test_journal_read_keeps_the_window():
    out = kkl.result(kkl.window(str(SINCE), NOW), NOW, 3600.0, PROBE, JOURNAL, None)
    assert out["readable"] and out["source"] == "journalctl" and out["now"] == int(NOW)
    assert out["xid_lines"] == [f"{SINCE + 60}.5 n1 kernel: {XID13}"] and out["problems"] == []
    assert kkl.journal_argv(SINCE)[-2:] == ["--since", f"@{SINCE}"]


def test_a_journal_without_kernel_messages_falls_back_to_dmesg_placed_on_the_epoch():
    boot = NOW - 7200  # booted an hour before SINCE
    dmesg = ok(f"[    1.000000] Linux version 6.8\n[ 3540.000000] {XID79}\n[ 3660.250000] {XID13}\n", ["dmesg"])
    out = kkl.result(kkl.window(str(SINCE), NOW), NOW, NOW - boot, ok(""), None, dmesg)
    assert out["readable"] and out["source"] == "dmesg"
    assert out["xid_lines"] == [f"[ 3660.250000] {XID13}"]  # 79 was logged before the window
    assert "no kernel message" in out["problems"][0]


@pytest.mark.parametrize(("probe", "read", "dmesg", "words"), [
    (failed("journalctl", 1, "Failed to open journal: Permission denied"), None,
     failed("dmesg", 1, "dmesg: read kernel buffer failed: Operation not permitted"),
     ["journalctl exited 1", "Permission denied", "dmesg exited 1", "Operation not permitted"]),
    (failed("journalctl", None, "journalctl not found"), None, failed("dmesg", None, "dmesg not found"),
     ["journalctl could not run", "dmesg could not run"]),
    (PROBE, failed("journalctl", 1, "Failed to seek"), ok("", ["dmesg"]), ["Failed to seek", "ring buffer is empty"]),
    (ok(""), None, failed("dmesg", 1, "denied"), ["no kernel message", "dmesg exited 1"]),
])
def test_nothing_readable_is_said_per_source(probe, read, dmesg, words):
    out = kkl.result(kkl.window(str(SINCE), NOW), NOW, None, probe, read, dmesg)
    assert out["readable"] is False and out["source"] is None and out["xid_lines"] == []
    text = "; ".join(out["problems"])
    for word in words:
        assert word in text


def test_unreadable_kernel_log_is_incomplete_never_pass():
    unreadable = kkl.result(kkl.window(str(SINCE), NOW), NOW, None, failed("journalctl", 1, "denied"), None,
                            failed("dmesg", 1, "not permitted"))
    check = kbc.xid_check(kernel_log=unreadable)
    assert check["status"] == "INCOMPLETE"
    assert "unreadable" in check["detail"] and "since 2026-01-01T00:00:00Z" in check["detail"]
    assert "journalctl exited 1" in check["detail"] and "dmesg exited 1" in check["detail"]
    assert kbc.xid_check(kernel_log="NVRM text")["status"] == "INCOMPLETE"  # not a read result
    assert kbc.xid_check(kernel_log={"readable": True, "source": "journalctl", "since": SINCE,
                                     "xid_lines": []})["status"] == "PASS"


def test_xids_from_a_read_log_are_judged_with_their_window():
    read = kkl.result(kkl.window(None, NOW), NOW, 3600.0, PROBE, ok(f"{SINCE}.1 n1 kernel: {XID79}\n"), None)
    check = kbc.xid_check(kernel_log=read)
    assert check["status"] == "FAIL" and check["value"] == 1
    assert "79 (0000:18:00)" in check["detail"] and "this boot" in check["detail"]
    assert "no earlier burn-in" in check["detail"]


def test_a_gpu_node_with_an_unreadable_kernel_log_does_not_pass():
    gpus = [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(8)]
    node = {"kiln_gpu": {"pci_gpu_count": 8, "smi_gpu_count": 8, "driver_loaded": True, "source": "nvidia-smi",
                         "gpus": gpus}, "gpu_present": True, "expected_gpus": 8,
            "kernel_log": {"schema": kkl.SCHEMA, "readable": False, "source": None, "since": 0, "now": int(NOW),
                           "xid_lines": [], "problems": ["journalctl: exited 1", "dmesg: exited 1"]}}
    out = kiln_data.assemble({"n1": node}, mode="quick", final=False)
    checks = {c["id"]: c for c in out["nodes"]["n1"]["checks"]}
    assert checks["xid.kernel_log"]["status"] == "INCOMPLETE"
    assert out["nodes"]["n1"]["status"] == "INCOMPLETE"
