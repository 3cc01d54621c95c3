"""Time is UTC everywhere, proven with the real ansible-playbook under TZ=America/New_York and Asia/Kolkata.

The expressions and tasks are taken from the playbooks themselves (never copied here), so what runs
is what the burn-in, the drift gate and the upgrade run:

- run ids and start stamps: UTC, and two ids drawn in the same second differ;
- the drift gate's epoch: true epoch seconds (``now(utc=true).timestamp()`` is off by the zone's offset);
- the kernel-log (XID) window: the read starts at the node's stamp, and the stamp the burn-in writes
  for the next read is true epoch seconds (``now(utc=true, fmt='%s')`` was 5 h ahead in New York);
- an unreadable kernel log makes ``xid.kernel_log`` INCOMPLETE (it was "no XID": PASS);
- the burn-in lock refuses a second run that has the same run id.
"""

from __future__ import annotations

import copy
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from kiln_playbook import ANSIBLE_PLAYBOOK, REPO, load_playbook, run_playbook

from kiln.burnin import assemble as kb  # noqa: E402
import kiln_data

pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not installed")

ZONES = ["America/New_York", "Asia/Kolkata"]
BURNIN = REPO / "playbooks" / "burnin.yml"


def _book(name: str) -> list[dict[str, Any]]:
    return load_playbook(name)


def _tasks(node: Any) -> Iterator[dict[str, Any]]:
    """Every task of a playbook (plays, blocks, rescue, always), depth first."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if "name" in node and "hosts" not in node:
            yield node
        for key in ("tasks", "pre_tasks", "post_tasks", "block", "rescue", "always"):
            if key in node:
                yield from _tasks(node[key])


def _task(book: str, prefix: str) -> dict[str, Any]:
    found = [t for t in _tasks(_book(book)) if str(t.get("name", "")).startswith(prefix)]
    assert len(found) == 1, f"{book}: {len(found)} tasks named {prefix!r}..."
    return copy.deepcopy(found[0])


def _inner(template: str) -> str:
    text = template.strip()
    assert text.startswith("{{") and text.endswith("}}"), text
    return text[2:-2].strip()


def _play(tmp_path: Path, tasks: list[dict[str, Any]], play_vars: dict[str, Any] | None = None,
          environment: dict[str, str] | None = None) -> Path:
    play: dict[str, Any] = {"name": "utc", "hosts": "localhost", "connection": "local", "gather_facts": False,
                            "vars": play_vars or {}, "tasks": tasks}
    if environment:
        play["environment"] = environment
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zone: str, play: Path) -> tuple[float, float]:
    monkeypatch.setenv("TZ", zone)
    before = time.time()
    proc = run_playbook("-i", "localhost,", str(play), "-e", f"ansible_python_interpreter={sys.executable}",
                        tmp_path=tmp_path, timeout=240)
    after = time.time()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return before, after


def _save(tmp_path: Path, name: str, expression: str) -> dict[str, Any]:
    return {"name": f"Save {name}", "ansible.builtin.copy": {"dest": str(tmp_path / name), "content": expression,
                                                             "mode": "0600"}}


def _utc(stamp: str, fmt: str) -> float:
    return datetime.datetime.strptime(stamp, fmt).replace(tzinfo=datetime.timezone.utc).timestamp()


# -- run ids, start stamps, the drift gate's epoch ----------------------------------------------------

@pytest.mark.parametrize("zone", ZONES)
def test_run_ids_and_stamps_are_utc_and_unique(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zone: str) -> None:
    burnin = _task("burnin.yml", "Name the run")["ansible.builtin.set_fact"]
    drift = _task("drift.yml", "Name the run")["ansible.builtin.set_fact"]
    upgrade = _task("upgrade.yml", "Name the run")
    ids = {"burnin": _inner(burnin["__burnin_run_id"]), "drift": _inner(drift["__drift_run"]),
           "upgrade": _inner(upgrade["vars"]["__id"])}
    # Each id expression drawn five times in one template (one second, bar a tick at its edge).
    drawn = "{{ {" + ", ".join(f"'{k}': [{', '.join([f'({v})'] * 5)}]" for k, v in ids.items()) + "} | to_json }}"
    values = ("{{ {'burnin_started': " + _inner(burnin["__burnin_started"]) + ", 'drift_started': "
              + _inner(drift["__drift_started"]) + "} | to_json }}")
    play = _play(tmp_path, [_save(tmp_path, "ids.json", drawn), _save(tmp_path, "stamps.json", values)],
                 {"kiln_burnin_run_id": None, "kiln_burnin_mode": "default", "kiln_burnin_state_dir": "/x",
                  "kiln_burnin_lock_path": "/x/lock.json", "kiln_drift_run_id": None, "kiln_upgrade_run_id": None,
                  "kiln_rollback": False})
    before, after = _run(tmp_path, monkeypatch, zone, play)
    ids_out = json.loads((tmp_path / "ids.json").read_text())
    stamps = json.loads((tmp_path / "stamps.json").read_text())

    problems = []
    # The drift gate's epoch (kiln_drift_last_run_timestamp_seconds): true epoch seconds.
    if not before - 1 <= float(stamps["drift_started"]) <= after + 1:
        problems.append(f"drift epoch {float(stamps['drift_started']):.0f}, true {before:.0f} "
                        f"(off by {float(stamps['drift_started']) - before:+.0f} s)")
    if not before - 1 <= _utc(stamps["burnin_started"], "%Y-%m-%dT%H:%M:%SZ") <= after + 1:
        problems.append(f"burn-in start {stamps['burnin_started']} is not UTC now")
    for kind, drawn_ids in ids_out.items():
        for run_id in drawn_ids:
            if not before - 1 <= _utc(run_id[:16], "%Y%m%dT%H%M%SZ") <= after + 1:
                problems.append(f"{kind} run id {run_id} does not start with UTC now")
        if len({i[:16] for i in drawn_ids}) == 1 and len(set(drawn_ids)) != len(drawn_ids):
            problems.append(f"{kind} run ids drawn in one second are not unique: {drawn_ids}")
    if not all(i.endswith("-default") for i in ids_out["burnin"]) or \
            not all(i.endswith("-upgrade") for i in ids_out["upgrade"]):
        problems.append(f"run id suffixes: {ids_out}")
    assert not problems, f"{zone}: " + "; ".join(problems)


# -- the kernel-log window ------------------------------------------------------------------------------

def _fake(tmp_path: Path, name: str, script: str) -> Path:
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def _kernel_tasks(tmp_path: Path, journalctl: Path, dmesg: Path) -> list[dict[str, Any]]:
    """The burn-in's read and stamp tasks, aimed at tmp_path (the stamp file, the fake journalctl and dmesg)."""
    read = _task("burnin.yml", "Read the kernel log since the last burn-in")
    read.pop("become", None)
    for module in ("kiln_kernel_log", "kiln.kiln.kiln_kernel_log"):
        if module in read:  # the module's paths; an older shell task reads /var/lib/kiln/burnin/last_run
            read[module] = dict(read[module] or {}, stamp_path=str(tmp_path / "last_run"),
                                journalctl=str(journalctl), dmesg=str(dmesg))
    node = _task("burnin.yml", "Record this node's preflight data")["ansible.builtin.set_fact"]["__burnin_node"]
    fields = {k: v for k, v in node.items() if "__burnin_xids" in str(v)}
    assert fields, "the burn-in's node data carries the kernel-log read"
    keep = {"name": "Keep the kernel-log fields of the node data", "ansible.builtin.set_fact": {"__xid_fields": fields}}
    writes = [t for t in _tasks(_book("burnin.yml"))
              if (t.get("ansible.builtin.copy") or {}).get("dest") == "/var/lib/kiln/burnin/last_run"]
    assert len(writes) == 1, "one task writes the node's last-run stamp"
    stamp = copy.deepcopy(writes[0])
    copy_args = stamp["ansible.builtin.copy"]
    for key in ("owner", "group"):
        copy_args.pop(key, None)
    copy_args["dest"] = str(tmp_path / "written_stamp")
    return [read, keep, _save(tmp_path, "fields.json", "{{ __xid_fields | to_json }}"), stamp]


@pytest.mark.parametrize("zone", ZONES)
def test_xid_window_is_true_utc_epoch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zone: str) -> None:
    since = int(time.time()) - 7200
    (tmp_path / "last_run").write_text(f"{since}\n")
    calls = tmp_path / "journalctl.calls"
    journalctl = _fake(tmp_path, "journalctl", (
        f'echo "$*" >> {calls}\n'
        'case " $* " in *" -n 1 "*) echo "' + f"{since + 60}" + '.000001 n1 kernel: eth0: link up"; exit 0 ;; esac\n'
        f'echo "{since - 600}.5 n1 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus."\n'
        f'echo "{since + 600}.5 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=2, Graphics Exception"\n'))
    dmesg = _fake(tmp_path, "dmesg", "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1\n")
    play = _play(tmp_path, _kernel_tasks(tmp_path, journalctl, dmesg),
                 environment={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"})
    before, after = _run(tmp_path, monkeypatch, zone, play)

    written = int((tmp_path / "written_stamp").read_text().strip())
    assert int(before) - 1 <= written <= after + 1, (
        f"{zone}: the stamp for the next read is {written}, true epoch is {int(before)} "
        f"(off by {written - int(before):+d} s)")
    fields = json.loads((tmp_path / "fields.json").read_text())
    read = fields["kernel_log"]
    assert read["readable"] and read["source"] == "journalctl" and read["since"] == since
    assert f"--since @{since}" in calls.read_text()
    assert [line.split("): ")[1][:2] for line in read["xid_lines"]] == ["13"]  # the XID 79 is before the window
    assert int(before) - 1 <= read["now"] <= after + 1


def test_unreadable_kernel_log_is_incomplete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "last_run").write_text("1700000000\n")
    journalctl = _fake(tmp_path, "journalctl", "echo 'Failed to open journal: Permission denied' >&2; exit 1\n")
    dmesg = _fake(tmp_path, "dmesg", "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1\n")
    play = _play(tmp_path, _kernel_tasks(tmp_path, journalctl, dmesg),
                 environment={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"})
    _run(tmp_path, monkeypatch, "America/New_York", play)

    fields = json.loads((tmp_path / "fields.json").read_text())
    gpus = [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(8)]
    node = {"kiln_gpu": {"pci_gpu_count": 8, "smi_gpu_count": 8, "driver_loaded": True, "source": "nvidia-smi",
                         "gpus": gpus}, "gpu_present": True, "expected_gpus": 8, **fields}
    out = kiln_data.assemble({"n1": node}, mode="quick", final=False)
    xid = {c["id"]: c for c in out["nodes"]["n1"]["checks"]}["xid.kernel_log"]
    assert xid["status"] == "INCOMPLETE", xid
    assert "journalctl" in xid["detail"] and "dmesg" in xid["detail"] and "Permission denied" in xid["detail"]
    assert out["nodes"]["n1"]["status"] != "PASS"
    # Nothing was read: the stamp stays where it was, so the next readable read covers this window.
    assert not (tmp_path / "written_stamp").exists()
    assert (tmp_path / "last_run").read_text() == "1700000000\n"


# -- the burn-in lock --------------------------------------------------------------------------------

def test_lock_refuses_a_second_holder_with_the_same_run_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = str(tmp_path / "lock" / "lock.json")

    def op(name: str, register: str, **args: Any) -> dict[str, Any]:
        return {"name": name, "kiln_burnin_lock": dict(args), "register": register, "ignore_errors": True}

    same = {"path": lock, "run_id": "20260101T000000Z-default", "slurm": False, "minutes": 240}  # the knobs' defaults
    tasks = [
        op("First run's identity", "me1", op="identity"),
        op("Second run's identity", "me2", op="identity"),
        op("First run takes the lock", "a1", op="acquire", owner="{{ me1.owner }}", **same),
        op("Second run, same run id", "a2", op="acquire", owner="{{ me2.owner }}", **same),
        op("Second run judges", "j2", op="judge", owner="{{ me2.owner }}", lock="{{ a2.lock }}",
           run_id=same["run_id"], break_lock=False),
        op("Second run journals", "u2", op="update", owner="{{ me2.owner }}", restore={"n1": "RMA"}, **same),
        op("Second run releases", "r2", op="release", owner="{{ me2.owner }}", **same),
        {"name": "Read the lock", "ansible.builtin.slurp": {"src": lock}, "register": "held", "ignore_errors": True},
        _save(tmp_path, "lock.json", "{{ {'me1': me1.owner, 'me2': me2.owner, 'a1': a1, 'a2': a2, 'j2': j2, 'u2': u2, "
                                     "'r2': r2, 'held': (held.content | b64decode | from_json) "
                                     "if held.content is defined else none} | to_json }}"),
        op("First run releases", "r1", op="release", owner="{{ me1.owner }}", **same),
    ]
    _run(tmp_path, monkeypatch, "Asia/Kolkata", _play(tmp_path, tasks))
    out = json.loads((tmp_path / "lock.json").read_text())
    assert out["a1"]["acquired"] is True
    assert out["a2"]["acquired"] is False, "a second run with the same run id must not hold the lock"
    assert out["me1"]["token"] != out["me2"]["token"]
    assert out["j2"]["state"] == "held" and "the same run id" in out["j2"]["message"]
    assert out["u2"].get("failed") is True and "does not hold the lock" in out["u2"]["msg"]
    assert out["r2"].get("changed") is False and "does not hold" in out["r2"]["message"]
    assert out["held"]["owner"]["token"] == out["me1"]["token"] and out["held"]["restore"] == {}
    assert not Path(lock).exists(), "the holder's own release removes the lock"


# -- no zone-dependent time expression anywhere ------------------------------------------------------

YAML_TRAPS = {
    r"\bnow\((?!utc=true)": "now() without utc=true is local time",
    r"\bnow\([^)]*%s": "now(fmt='%s') reads UTC wall-clock time as local (off by the zone's offset)",
    r"\bnow\([^)]*\)\s*\.\s*timestamp": "now(...).timestamp() of a naive datetime is local: use | kiln_utc_epoch",
    r"\bstrftime\b": "the strftime filter is local time by default",
    r"\bansible_date_time\b": "gathered local time: use now(utc=true)",
}
PY_TRAPS = {
    r"\butcnow\(": "utcnow() is naive",
    r"\bdate\.today\(": "local date",
    r"\bdatetime\.now\(\s*\)": "naive local time",
    r"\b(localtime|mktime)\(": "local time",
    r"strftime\(\s*['\"][^'\"]*%s": "strftime('%s') is local",
    r"fromtimestamp\([^,()]*\)": "fromtimestamp without a zone is local",
}
SHELL_TRAPS = {r"\bdate\s+\+": "date without -u is local time"}


def _scan(paths: list[Path], traps: dict[str, str], text_of: Any = None) -> list[str]:
    import re

    found = []
    for path in paths:
        text = text_of(path) if text_of else path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            for pattern, why in traps.items():
                if re.search(pattern, line):
                    found.append(f"{path.relative_to(REPO)}:{number}: {why}: {line.strip()[:120]}")
    return found


def test_no_zone_dependent_time_expression() -> None:
    yml = [p for d in ("playbooks", "roles", "inventories") for p in (REPO / d).rglob("*")
           if p.suffix in (".yml", ".yaml", ".j2")] + [REPO / "site.yml"]
    sidecars = sorted((REPO / "filter_plugins").glob("*.yml"))  # their EXAMPLES (the prose may name the traps)
    py = [p for d in ("module_utils", "library", "filter_plugins", "callback_plugins")
          for p in (REPO / d).rglob("*.py")]
    tools = [p for p in (REPO / "tools").iterdir() if p.is_file()]
    assert len(yml) > 50 and len(py) > 30 and tools
    python_tools = [p for p in tools if "python" in p.read_text(errors="replace")[:80]]
    found = (_scan(yml, YAML_TRAPS) + _scan(py + python_tools, PY_TRAPS)
             + _scan(sidecars, YAML_TRAPS, lambda p: str(yaml.safe_load(p.read_text(encoding="utf-8"))["EXAMPLES"]))
             + _scan([p for p in tools if p not in python_tools], SHELL_TRAPS))
    assert not found, "\n".join(found)
