#!/usr/bin/env python3
"""The slurm scenario's kiln-health fault rounds (run by side_effect.yml; verify judges the record).

Slurm runs kiln-health on every compute node as its HealthCheckProgram. For the rounds the driver sets
HealthCheckInterval=5 in the controller's slurm.conf and runs `scontrol reconfigure` (what an operator
does to shorten the interval; slurmctld drives the health checks), and puts kiln's rendered value back
at the end, so the rest of the scenario runs at the default 300 s. This driver injects one fault per node and round through the fixtures
(tests/molecule/health_fixture.yml: the nvidia-smi emulator's fault file, the fixture sysfs tree, the
per-node kernel log, the Fabric Manager stand-in unit), waits for Slurm to show the node drained by
kiln-health, removes the fault and waits for the node to be resumed -- measuring each. A person's
drain of kiln-slurm-c3 ("RMA 42"), with a fault on c3 too, must survive every round. It asserts
nothing: it records what it saw in <ephemeral>/health.json for tests/test_slurm.py's health tests.
Reaches the nodes with `podman exec` (argv only).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

CTL, C1, C2, C3 = "kiln-slurm-ctl", "kiln-slurm-c1", "kiln-slurm-c2", "kiln-slurm-c3"
COMPUTE = (C1, C2, C3)
PERSON = "RMA 42 (kiln test: a person's drain)"
SYSFS = "/var/lib/kiln-fixture/sysfs"
FAULTS = "/etc/kiln-fixture/gpu-faults.json"
KMSG = "/var/lib/kiln-fixture/kmsg"
WAIT_S = 60.0


def sh(node: str, *argv: str, stdin: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(["podman", "exec", "-i", node, *argv], input=stdin, capture_output=True, text=True,
                          timeout=120, check=False)
    if check and proc.returncode != 0:
        raise SystemExit(f"{node}: {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[:400]}")
    return proc.stdout


def write(node: str, path: str, text: str) -> None:
    sh(node, "python3", "-c", "import sys; open(sys.argv[1], 'w').write(sys.stdin.read())", path, stdin=text)


def rows() -> dict[str, tuple[str, str]]:
    out = sh(CTL, "sinfo", "--noheader", "--Node", "--format", "%N|%T|%E")
    found = {}
    for line in out.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3:
            found[parts[0]] = (parts[1].strip(), "" if parts[2].strip() == "none" else parts[2].strip())
    return found


def wait(pred, timeout: float = WAIT_S) -> tuple[bool, float, dict]:
    start = time.monotonic()
    while True:
        now = rows()
        if pred(now):
            return True, round(time.monotonic() - start, 1), now
        if time.monotonic() - start > timeout:
            return False, round(time.monotonic() - start, 1), now
        time.sleep(0.5)


def drained_by_health(row: tuple[str, str], key: str) -> bool:
    return "drain" in row[0] and row[1].startswith(key)


def in_service(row: tuple[str, str]) -> bool:
    return row[0] in ("idle", "allocated", "mixed") and not row[1]


def dry_run(node: str) -> dict:
    proc = subprocess.run(["podman", "exec", node, "/usr/local/sbin/kiln-health", "--dry-run", "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    try:
        return dict(json.loads(proc.stdout), rc=proc.returncode)
    except ValueError:
        return {"rc": proc.returncode, "stdout": proc.stdout[-2000:], "stderr": proc.stderr[-2000:]}


def xid(node: str, number: int) -> None:
    uptime = float(sh(node, "cat", "/proc/uptime").split()[0])
    line = f"[{uptime:12.6f}] NVRM: Xid (PCI:0000:18:00): {number}, pid='<unknown>', name=<unknown>, " \
           "GPU has fallen off the bus.\n"
    sh(node, "python3", "-c", "import sys; open(sys.argv[1], 'a').write(sys.argv[2])", KMSG, line)


def port_file(node: str, hca: str, name: str) -> str:
    return f"{SYSFS}/class/infiniband/{hca}/ports/1/{name}"


def textfile_of_fail(node: str) -> str:
    """The node's periodic textfile as the failing run wrote it (written right after its drain: polled)."""
    text = ""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        text = sh(node, "cat", "/var/lib/node_exporter/textfile_collector/kiln_health_check.prom", check=False)
        if 'kiln_health_node_status{hook="check",status="PASS"} 1' not in text:
            break
        time.sleep(0.2)
    return text


def round_(name: str, faults: dict, heal: dict, keys: dict, record: dict, during=None) -> None:
    """Inject *faults* ({node: callable}), wait until each node of *keys* ({node: reason prefix}) is drained
    with its prefix, optionally run *during*, then *heal* and wait until those nodes are in service."""
    entry: dict = {"name": name, "drained": {}, "resumed": {}, "person": None}
    for node, inject in faults.items():
        inject(node)
    start = time.monotonic()
    for node, key in keys.items():
        ok, _, now = wait(lambda r, n=node, k=key: n in r and drained_by_health(r[n], k))
        entry["drained"][node] = {"ok": ok, "seconds": round(time.monotonic() - start, 1), "state": now.get(node)}
        entry.setdefault("textfile", {})[node] = textfile_of_fail(node)
    if during is not None:
        during(entry)
    for node, undo in heal.items():
        undo(node)
    start = time.monotonic()
    for node in keys:
        ok, _, now = wait(lambda r, n=node: n in r and in_service(r[n]))
        entry["resumed"][node] = {"ok": ok, "seconds": round(time.monotonic() - start, 1), "state": now.get(node)}
    entry["person"] = rows().get(C3)
    record["rounds"].append(entry)


INTERVAL_S = 5


def set_interval(value: str) -> None:
    sh(CTL, "sed", "-i", f"s/^HealthCheckInterval=.*/HealthCheckInterval={value}/", "/etc/slurm/slurm.conf")
    sh(CTL, "scontrol", "reconfigure")


def main() -> int:
    out_path = sys.argv[1]
    record: dict = {"interval_s": INTERVAL_S, "rounds": [], "baseline": {}, "person_reason": PERSON}
    conf = sh(CTL, "cat", "/etc/slurm/slurm.conf")
    rendered = next(line.split("=", 1)[1] for line in conf.splitlines() if line.startswith("HealthCheckInterval="))
    record["rendered_interval"] = rendered
    set_interval(str(INTERVAL_S))
    try:
        return rounds(out_path, record)
    finally:
        set_interval(rendered)


def rounds(out_path: str, record: dict) -> int:
    ok, seconds, now = wait(lambda r: all(n in r and in_service(r[n]) for n in COMPUTE), 90)
    record["start"] = {"ok": ok, "seconds": seconds, "rows": now}
    for node in COMPUTE:
        record["baseline"][node] = dry_run(node)
    sh(CTL, "scontrol", "update", f"NodeName={C3}", "State=DRAIN", f"Reason={PERSON}")
    ecc = {"1": {"ecc_volatile_dram_uncorrectable": 2, "remapped_rows_pending": True}}
    ports = {f: sh(C1, "cat", port_file(C1, "mlx5_2", f)).strip() for f in ("state", "phys_state")}
    counter = port_file(C2, "mlx5_0", "counters/symbol_error")
    gpu_dir = f"{SYSFS}/bus/pci/devices/0000:c1:00.0"
    job = {}

    def start_job(node: str) -> None:
        job["id"] = sh(CTL, "sbatch", "--parsable", "-w", node, "-o", "/dev/null", "--wrap", "sleep 8").strip()
        wait(lambda r: r.get(node, ("",))[0] in ("allocated", "mixed"), 30)

    def epilog(entry: dict) -> None:
        wait(lambda r: "drained" == r.get(C2, ("",))[0], 60)  # the job ended: draining -> drained
        path = f"/var/lib/kiln/health/jobs/{job['id']}.json"
        deadline = time.monotonic() + 30
        while True:
            proc = subprocess.run(["podman", "exec", C2, "cat", path], capture_output=True, text=True, check=False)
            if proc.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        entry["epilog"] = json.loads(proc.stdout) if proc.returncode == 0 else {"missing": path, "stderr": proc.stderr}
        entry["prolog_textfile_c2"] = sh(C2, "cat", "/var/lib/node_exporter/textfile_collector/kiln_health_prolog.prom",
                                         check=False)

    start_job(C2)
    round_("A: XID 79 on c1, ECC + pending remap on c2 (running a job) and on the person-drained c3",
           {C1: lambda n: xid(n, 79), C2: lambda n: write(n, FAULTS, json.dumps(ecc)),
            C3: lambda n: write(n, FAULTS, json.dumps(ecc))},
           {C1: lambda n: sh(n, "rm", "-f", KMSG), C2: lambda n: sh(n, "rm", "-f", FAULTS),
            C3: lambda n: sh(n, "rm", "-f", FAULTS)},
           {C1: "HEALTH: xid.kernel_log:", C2: "HEALTH: memory."}, record, during=epilog)
    round_("B: c1's mlx5_2 port down, c2's GPU 1 gone from PCI",
           {C1: lambda n: (write(n, port_file(n, "mlx5_2", "state"), "1: DOWN\n"),
                           write(n, port_file(n, "mlx5_2", "phys_state"), "3: Disabled\n")),
            C2: lambda n: sh(n, "mv", gpu_dir, "/var/lib/kiln-fixture/removed-gpu")},
           {C1: lambda n: (write(n, port_file(n, "mlx5_2", "state"), ports["state"] + "\n"),
                           write(n, port_file(n, "mlx5_2", "phys_state"), ports["phys_state"] + "\n")),
            C2: lambda n: sh(n, "mv", "/var/lib/kiln-fixture/removed-gpu", gpu_dir)},
           {C1: "HEALTH: fabric.ports:", C2: "HEALTH: gpu.count:"}, record)
    round_("C: an NVLink of c1's GPU 3 inactive, c2's mlx5_0 symbol errors +150",
           {C1: lambda n: write(n, FAULTS, json.dumps({"3": {"nvlink_inactive": [7]}})),
            C2: lambda n: write(n, counter, str(int(sh(n, "cat", counter).strip() or 0) + 150) + "\n")},
           {C1: lambda n: sh(n, "rm", "-f", FAULTS), C2: lambda n: None},
           {C1: "HEALTH: nvlink.status:", C2: "HEALTH: fabric.counters:"}, record)
    round_("D: Fabric Manager stopped on c1, c2's kernel log unreadable (UNKNOWN)",
           {C1: lambda n: sh(n, "systemctl", "stop", "nvidia-fabricmanager"),
            C2: lambda n: sh(n, "touch", KMSG + "-unreadable")},
           {C1: lambda n: sh(n, "systemctl", "start", "nvidia-fabricmanager"),
            C2: lambda n: sh(n, "rm", "-f", KMSG + "-unreadable")},
           {C1: "HEALTH: gpu.fabric:", C2: "HEALTH: unknown: xid.kernel_log:"}, record)
    record["person_end"] = rows().get(C3)
    sh(CTL, "scontrol", "update", f"NodeName={C3}", "State=RESUME")  # the person, after their repair
    ok, seconds, now = wait(lambda r: all(n in r and in_service(r[n]) for n in COMPUTE), 60)
    record["end"] = {"ok": ok, "seconds": seconds, "rows": now}
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
