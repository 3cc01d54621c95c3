"""Verify the slurm scenario: a real Slurm cluster on the test bed (real host state).

Runs after side_effect.yml, which drained/resumed nodes, proved the bad-stack
refusal, added kiln-slurm-c3 with --limit and rotated the munge key, both with
-vvv output kept in the ephemeral directory.
"""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest
import testinfra

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "molecule"))
from kiln_testinfra import podman_hosts  # noqa: E402

# Commands run on the controller; compute nodes are reached with podman exec too.
testinfra_hosts = podman_hosts("slurm_controller")

EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
COMPUTE = ["kiln-slurm-c1", "kiln-slurm-c2", "kiln-slurm-c3"]
GPUS = {"kiln-slurm-c1": ("h100", 8), "kiln-slurm-c2": ("l40s", 2), "kiln-slurm-c3": ("l40s", 2)}


def node(name):
    return testinfra.get_host(f"podman://{name}")


def sinfo(host):
    out = host.check_output("sinfo --noheader --Node --format '%N|%T|%G'")
    return {n: (s, g) for n, s, g in (line.split("|") for line in sorted(set(out.splitlines())))}


def wait_idle(host, nodes, timeout=60):
    deadline = time.time() + timeout
    while True:
        state = sinfo(host)
        if all(state.get(n, ("",))[0] == "idle" for n in nodes) or time.time() > deadline:
            return state
        time.sleep(2)


def test_all_nodes_idle_with_their_gres(host):
    state = wait_idle(host, COMPUTE)
    for name, (gtype, count) in GPUS.items():
        assert state[name] == ("idle", f"gpu:{gtype}:{count}"), state


def test_slurm_conf_from_facts(host):
    conf = host.file("/etc/slurm/slurm.conf").content_string
    for key in ("GresTypes=gpu", "SelectType=select/cons_tres", "ProctrackType=proctrack/cgroup",
                "TaskPlugin=task/cgroup,task/affinity", "MpiDefault=pmix", "SlurmctldParameters=enable_configless"):
        assert key in conf.splitlines()
    cpus = int(host.check_output("nproc"))
    line = next(line for line in conf.splitlines() if line.startswith("NodeName=kiln-slurm-c1 "))
    assert f"CPUs={cpus} " in line and "Gres=gpu:h100:8" in line
    real = int(re.search(r"RealMemory=(\d+)", line).group(1))
    memtotal_mb = int(node("kiln-slurm-c1").check_output("awk '/MemTotal/ {print $2}' /proc/meminfo")) // 1024
    assert 0.9 * memtotal_mb < real < memtotal_mb
    assert "PartitionName=gpu Nodes=kiln-slurm-c[1-3] Default=YES" in conf
    gres = host.file("/etc/slurm/gres.conf").content_string
    assert "NodeName=kiln-slurm-c1 Name=gpu Type=h100 File=/dev/nvidia[0-7]" in gres
    assert "ConstrainDevices=yes" in host.file("/etc/slurm/cgroup.conf").content_string


def test_compute_nodes_are_configless(host):
    for name in COMPUTE:
        compute = node(name)
        assert not compute.file("/etc/slurm/slurm.conf").exists
        assert "--conf-server kiln-slurm-ctl" in compute.file("/etc/default/slurmd").content_string
        assert compute.service("slurmd").is_running


def test_srun_across_nodes(host):
    wait_idle(host, COMPUTE)
    out = host.check_output("timeout 60 srun -N3 hostname")
    assert sorted(out.split()) == COMPUTE


def test_gpu_job_sees_only_its_devices(host):
    # 4 GPUs exist only on the H100 node; the job opens its own devices and one it was not given.
    script = (
        "echo host=$(hostname) cvd=$CUDA_VISIBLE_DEVICES; "
        "for d in 0 1 7; do (exec 3</dev/nvidia$d) 2>&1 | sed \"s/^/dev$d: /\" || true; done; echo done"
    )
    out = host.check_output(f"timeout 60 srun --gres=gpu:4 bash -c '{script}'")
    assert "host=kiln-slurm-c1" in out and "cvd=0,1,2,3" in out
    # Allowed devices exist but have no driver behind them (ENXIO); the device cgroup denies the rest (EPERM).
    assert "dev0: " in out and "Operation not permitted" not in out.split("dev0: ")[1].splitlines()[0]
    assert re.search(r"dev7: .*Operation not permitted", out)
    two = host.check_output(f"timeout 60 srun -w kiln-slurm-c2 --gres=gpu:2 bash -c '{script}'")
    assert "cvd=0,1" in two
    assert not re.search(r"dev[01]: .*Operation not permitted", two)


def test_new_node_runs_a_job(host):
    wait_idle(host, ["kiln-slurm-c3"])
    assert host.check_output("timeout 60 srun -w kiln-slurm-c3 --gres=gpu:l40s:1 hostname").strip() == "kiln-slurm-c3"


def test_munge_key_rotated_identical_and_private(host):
    digests = set()
    for name in ["kiln-slurm-ctl"] + COMPUTE:
        key = node(name).file("/etc/munge/munge.key")
        assert key.mode == 0o400 and key.user == "munge" and key.size == 1024
        digests.add(node(name).check_output("sha256sum /etc/munge/munge.key").split()[0])
    assert len(digests) == 1
    assert digests.pop() != (EPHEMERAL / "pre-rotate.sha256").read_text().strip()


@pytest.mark.parametrize("log", ["add-c3.vvv.log", "rotate.vvv.log"])
def test_munge_key_never_in_verbose_output(host, log):
    key_b64 = host.check_output("base64 -w0 /etc/munge/munge.key")
    text = (EPHEMERAL / log).read_text()
    assert "Write the key when this node's copy differs" in text
    assert key_b64 not in text and key_b64[:64] not in text
