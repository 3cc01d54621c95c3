"""Verify the slurm scenario: a real Slurm cluster on the test bed (real host state).

Runs after side_effect.yml, which drained/resumed nodes, proved the bad-stack
refusal, added kiln-slurm-c3 with --limit and rotated the munge key, both with
-vvv output kept in the ephemeral directory.
"""
from __future__ import annotations

import os
import re
import shlex
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


# ---- Containers for Slurm: Enroot 3.5.0 and Pyxis 0.20.0 (playbooks/containers.yml; fixture release
# artifacts: real names and sha256, stand-in contents -- Pyxis is a stand-in SPANK plugin built on each node).
def test_enroot_installed_at_the_stack_version_and_held(host):
    for name in COMPUTE:
        compute = node(name)
        assert compute.check_output("enroot version").strip() == "3.5.0"
        status = compute.check_output("dpkg-query --show --showformat '${Package} ${Version} ${db:Status-Abbrev}\\n' "
                                      "enroot enroot+caps")
        assert sorted(status.splitlines()) == ["enroot 3.5.0-1 hi ", "enroot+caps 3.5.0-1 hi "], status
        assert {"enroot", "enroot+caps"} <= set(compute.check_output("apt-mark showhold").split())
    assert not host.exists("enroot"), "Enroot belongs on compute nodes only"


ENROOT_USER_DIR = "/usr/local/libexec/kiln/enroot-user-dir"
ENROOT_REFUSED = "/dev/null/kiln-refused-see-the-message-above"


def test_enroot_conf_has_per_user_local_paths(host):
    for name in COMPUTE:
        compute = node(name)
        conf = {line.split(None, 1)[0]: line.split(None, 1)[1].strip()
                for line in compute.file("/etc/enroot/enroot.conf").content_string.splitlines()
                if line.strip() and not line.startswith("#")}
        assert conf["ENROOT_RUNTIME_PATH"] == f"$({ENROOT_USER_DIR} /run/enroot || echo {ENROOT_REFUSED})"
        assert conf["ENROOT_CACHE_PATH"] == f"$({ENROOT_USER_DIR} /var/lib/enroot/cache || echo {ENROOT_REFUSED})"
        assert conf["ENROOT_DATA_PATH"] == f"$({ENROOT_USER_DIR} /var/lib/enroot/data || echo {ENROOT_REFUSED})"
        assert conf["ENROOT_RESTRICT_DEV"] == "yes" and conf["ENROOT_MOUNT_HOME"] == "no"
        helper = compute.file(ENROOT_USER_DIR)
        assert helper.mode == 0o755 and helper.user == "root"
        for base in ("/run/enroot", "/var/lib/enroot/cache", "/var/lib/enroot/data"):
            assert compute.file(base).mode == 0o1777 and compute.file(base).user == "root", base
        assert "d /run/enroot 1777 root root -" in compute.file("/etc/tmpfiles.d/kiln-enroot.conf").content_string


# What enroot does with enroot.conf before any command: every ENROOT_ value evaluated by the
# calling user's bash, then the per-user paths made with `mkdir -p` under umask 077. (The test
# bed's enroot is a stand-in that reads no configuration, so the verify evaluates it the same way.)
ENROOT_READS_ITS_CONFIG = r"""
set -euo pipefail
while IFS=$' \t=' read -r key value; do
    if [[ "${key}" =~ ^ENROOT_[[:upper:]_]+$ ]]; then export "${key}=$(eval echo "${value}")"; fi
done < /etc/enroot/enroot.conf
(umask 077 && mkdir -p "${ENROOT_CACHE_PATH}" "${ENROOT_DATA_PATH}" "${ENROOT_RUNTIME_PATH}")
printf '%s\n' "${ENROOT_DATA_PATH}"
"""


def test_enroot_per_user_directories_cannot_be_squatted(host):
    """Issue 31: user B pre-creates user A's data directory; A's enroot refuses it and A gets their own.

    Two real unprivileged users (uids 60101 and 60102 through setpriv; no accounts needed) on a compute node.
    """
    compute = node("kiln-slurm-c1")
    a, b = 60101, 60102
    data = "/var/lib/enroot/data"
    mine = [f"/run/enroot/user-{a}", f"/var/lib/enroot/cache/user-{a}", f"{data}/user-{a}"]

    def as_user(uid, command):
        return compute.run(f"setpriv --reuid={uid} --regid={uid} --clear-groups -- {command}")

    compute.check_output("rm -rf " + " ".join(mine + [f"{data}/stolen"]))
    try:
        assert as_user(b, f"mkdir -m 0777 {data}/user-{a}").rc == 0  # B prepares A's directory
        enroot = f"bash -c {shlex.quote(ENROOT_READS_ITS_CONFIG)}"
        refused = as_user(a, enroot)
        assert refused.rc != 0, refused.stdout
        assert f"{data}/user-{a} is owned by uid {b}, not by you (uid {a})" in refused.stderr, refused.stderr
        compute.check_output(f"rm -rf {data}/user-{a}")  # what the message tells the administrator to do
        own = as_user(a, enroot)
        assert own.rc == 0 and own.stdout.strip() == f"{data}/user-{a}", own.stderr
        for path in mine:
            made = compute.file(path)
            assert made.is_directory and made.uid == a and made.mode == 0o700, path
        assert as_user(b, f"mv {data}/user-{a} {data}/stolen").rc != 0  # sticky base: B cannot swap it
        assert as_user(a, enroot).rc == 0
    finally:
        compute.run("rm -rf " + " ".join(mine + [f"{data}/stolen"]))


def test_enroot_pmix_hook_and_nccl_environment(host):
    for name in COMPUTE:
        compute = node(name)
        for hook in ("50-slurm-pmi.sh", "50-slurm-pytorch.sh"):
            link = compute.file(f"/etc/enroot/hooks.d/{hook}")
            assert link.is_symlink and link.linked_to == f"/usr/share/enroot/hooks.d/{hook}", hook
        env = compute.file("/etc/enroot/environ.d/50-nccl-rdma.env").content_string.splitlines()
        assert "NCCL_IB_HCA=mlx5_0:1,mlx5_1:1" in env and "NCCL_SOCKET_IFNAME=eth0" in env


def test_pyxis_plugstack_entry_on_every_node(host):
    for name in ["kiln-slurm-ctl"] + COMPUTE:
        target = node(name)
        include = [line for line in target.file("/etc/slurm/plugstack.conf").content_string.splitlines()
                   if line.startswith("include ")]
        assert include == ["include /etc/slurm/plugstack.conf.d/*.conf"], (name, include)
        conf = target.file("/etc/slurm/plugstack.conf.d/pyxis.conf").content_string
        assert ("required /usr/local/lib/slurm/spank_pyxis.so container_scope=job execute_entrypoint=0 "
                "runtime_path=/run/pyxis sbatch_support=1") in conf.splitlines(), (name, conf)
        assert target.file("/usr/local/lib/slurm/spank_pyxis.so").mode == 0o755
    # built against the installed Slurm's own headers
    assert node("kiln-slurm-c1").check_output("dpkg-query --show --showformat '${Version}' libslurm-dev") == \
        node("kiln-slurm-c1").check_output("dpkg-query --show --showformat '${Version}' slurmd")


def test_srun_container_image_reaches_slurmstepd_through_plugstack(host):
    wait_idle(host, COMPUTE)
    out = host.check_output("timeout 60 srun -N3 --container-image=kiln/standin bash -c "
                            "'echo \"$(hostname) $PYXIS_STANDIN_IMAGE $PYXIS_STANDIN_ARGS\"'")
    lines = sorted(out.splitlines())
    assert [line.split()[:2] for line in lines] == [[n, "kiln/standin"] for n in COMPUTE], out
    assert all("container_scope=job" in line for line in lines), out


def test_srun_rejects_an_unknown_container_option(host):
    # srun knows the options only through the plugin: a misspelt one is refused before any job starts
    bad = host.run("timeout 60 srun --container-imagex=kiln/standin true")
    assert bad.rc != 0 and "unrecognized option" in bad.stderr, (bad.rc, bad.stderr)
    assert "--container-image=" in host.check_output("srun --help")
