"""Verify the GPU node stack on the emulated H100 (NVSwitch) and L40S (PCIe) nodes.

Runs after side_effect upgraded the driver from 580.95.05 to 580.173.02 and then
changed its branch to 590 (590.48.01), each by changing kiln_stack, so every
driver check expects the 590 branch and no package of the 580 branch.
What is real here: apt/dpkg with a signed repository and a pinned key, dpkg
holds, systemd services, containerd loading the nvidia runtime, node
exporter, HTTP between the nodes. What is a fixture: the packages' contents
(emulated nvidia-smi/nvidia-ctk/dcgmi/nv-hostengine/dcgm-exporter, a fake
nvidia.ko carrying real modinfo fields) and the GPUs (profile + sysfs tree).
"""
from __future__ import annotations

import json

import pytest

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "molecule"))
from kiln_testinfra import podman_hosts  # noqa: E402

# the Debian nodes (the EL node: test_el9_node.py)
testinfra_hosts = podman_hosts("h100") + podman_hosts("l40s")

DRIVER = "590.48.01"
BRANCH = "590"
PINNED = {
    f"nvidia-open-{BRANCH}": f"{DRIVER}-1",
    "nvidia-driver-cuda": f"{DRIVER}-1",
    "nvidia-kernel-open-dkms": f"{DRIVER}-1",
    "nvidia-smi": f"{DRIVER}-1",
    "cuda-toolkit-13-0": "13.0.2-1",
    "libcudnn9-cuda-13": "9.17.1.4-1",
    "libnccl2": "2.28.7-1+cuda13.0",
    "libnccl-dev": "2.28.7-1+cuda13.0",
    "nvidia-container-toolkit": "1.20.0-1",
    "libnvidia-container1": "1.20.0-1",
    "datacenter-gpu-manager-4-cuda13": "1:4.6.0-1",
    "datacenter-gpu-manager-exporter": "4.6.0-4.8.3-1",
}


def is_h100(host) -> bool:
    return host.backend.get_hostname().endswith("h100")


def dpkg_version(host, name: str) -> str:
    return host.check_output(f"dpkg-query -W -f='${{Version}}' {name}")


def test_each_node_has_its_os_identity(host):
    release = host.file("/etc/os-release").content_string
    if is_h100(host):
        assert "ID=debian" in release and 'VERSION_ID="12"' in release
    else:
        assert "ID=ubuntu" in release and 'VERSION_ID="24.04"' in release
        assert "DISTRIB_CODENAME=noble" in host.file("/etc/lsb-release").content_string
        # the distribution builds the scenario pins for it (kiln_stack.builds), held
        assert host.package("docker.io").version == "20.10.24+dfsg1-1+deb12u1+b6"
        assert host.package("prometheus-node-exporter").version == "1.5.0-1+b6"
        assert "prometheus-node-exporter" in host.check_output("apt-mark showhold").split()


@pytest.mark.parametrize(("name", "version"), sorted(PINNED.items()))
def test_exact_versions_installed_and_held(host, name, version):
    assert dpkg_version(host, name) == version
    assert name in host.check_output("apt-mark showhold").split()


def test_open_flavor_for_hopper_and_ada(host):
    assert host.package("nvidia-kernel-open-dkms").is_installed
    assert not host.package("nvidia-kernel-dkms").is_installed
    assert not host.package(f"cuda-drivers-{BRANCH}").is_installed


def test_the_old_branch_is_gone_and_unheld(host):
    held = host.check_output("apt-mark showhold").split()
    for name in ("nvidia-open-580", "nvidia-fabricmanager-580", "libnvidia-nscq-580", "cuda-drivers-580"):
        assert not host.package(name).is_installed, name
        assert name not in held, name
    # no unattended-upgrades exclusion names the old branch either
    assert "nvidia-open-580" not in host.check_output("cat /etc/apt/apt.conf.d/51kiln-hold-nvidia-driver")


def test_fabric_manager_only_on_nvswitch_board_at_driver_version(host):
    if is_h100(host):
        assert dpkg_version(host, f"nvidia-fabricmanager-{BRANCH}") == f"{DRIVER}-1"
        assert f"nvidia-fabricmanager-{BRANCH}" in host.check_output("apt-mark showhold").split()
        assert host.service("nvidia-fabricmanager").is_running
    else:
        assert not host.package(f"nvidia-fabricmanager-{BRANCH}").is_installed
        assert not host.service("nvidia-fabricmanager").is_running


def test_driver_module_for_running_kernel(host):
    kernel = host.check_output("uname -r")
    assert host.check_output(f"modinfo -k {kernel} -F version nvidia") == DRIVER


def test_kernel_roll_checked_the_next_kernel(host):
    # the side effect's kernel roll: the module built for the next kernel, and the driver's verify
    # recorded both kernels as checked
    fact = json.loads(host.file("/etc/ansible/facts.d/kiln_driver.fact").content_string)
    rolled = [k for k in fact["kernels_checked"] if k.endswith("-kiln-fixture-roll")]
    assert len(rolled) == 1 and len(fact["kernels_checked"]) == 2, fact
    assert host.check_output(f"modinfo -k {rolled[0]} -F version nvidia") == DRIVER


def test_nvidia_smi_reports_pinned_driver_and_all_gpus(host):
    out = host.check_output("nvidia-smi --query-gpu=driver_version,name --format=csv,noheader")
    rows = [r.split(", ") for r in out.splitlines()]
    assert {r[0] for r in rows} == {DRIVER}
    assert len(rows) == (8 if is_h100(host) else 2)
    fact = json.loads(host.file("/etc/ansible/facts.d/kiln_driver.fact").content_string)
    assert fact["driver"] == DRIVER
    assert fact["hardware_check"] == "passed"
    assert fact["fabricmanager"] is is_h100(host)


def test_repositories_signed_by_pinned_key(host):
    for name in ("cuda", "nvidia-container-toolkit"):
        src = host.file(f"/etc/apt/sources.list.d/kiln-{name}.sources").content_string
        assert f"Signed-By: /etc/apt/keyrings/kiln-{name}.asc" in src
        key = host.file(f"/etc/apt/keyrings/kiln-{name}.asc")
        assert key.mode == 0o644
        shown = host.check_output(f"gpg --batch --with-colons --show-keys /etc/apt/keyrings/kiln-{name}.asc")
        fprs = [line.split(":")[9] for line in shown.splitlines() if line.startswith("fpr:")]
        assert any(f in src for f in fprs), "the source names the fingerprint kiln verified"
    # NVIDIA's directory of the node's OS: debian12 on the H100 node, ubuntu2404 on the Ubuntu node
    cuda = host.file("/etc/apt/sources.list.d/kiln-cuda.sources").content_string
    assert ("/debian12/x86_64/" if is_h100(host) else "/ubuntu2404/x86_64/") in cuda
    # nothing in apt's configuration bypasses signature checks
    assert host.run("grep -rIl 'trusted=yes\\|Trusted: yes\\|AllowUnauthenticated' /etc/apt").rc == 1


def test_cuda_environment(host):
    out = host.check_output("bash -lc 'nvcc --version; echo LD=$LD_LIBRARY_PATH'")
    assert "release 13.0" in out
    assert "/usr/local/cuda-13.0/lib64" in out
    assert host.file("/etc/ld.so.conf.d/kiln-cuda.conf").contains("/usr/local/cuda-13.0/lib64")
    assert host.file("/usr/include/nccl.h").contains("#define NCCL_MINOR 28")


def test_container_runtime_configured_where_present(host):
    cdi = host.check_output("nvidia-ctk cdi list")
    assert cdi.count("nvidia.com/gpu=") >= (8 if is_h100(host) else 2)
    assert host.file("/etc/cdi/nvidia.yaml").mode == 0o644
    # real containerd (from the engine's packages) parsed the drop-in nvidia-ctk wrote, after the
    # toolkit upgrade 1.19.1 -> 1.20.0 and kiln's own config.toml importing the drop-in directory
    assert host.service("containerd").is_running
    dump = host.check_output("containerd config dump")
    assert "runtimes.nvidia]" in dump
    assert "nvidia-container-runtime" in dump
    top = host.file("/etc/containerd/config.toml").content_string
    assert 'imports = ["/etc/containerd/conf.d/*.toml"]' in top and "Managed by kiln" in top


ENGINE_HELD = {True: ["docker-ce", "docker-ce-cli", "containerd.io", "docker-buildx-plugin", "docker-compose-plugin"],
               False: ["docker.io", "containerd", "runc"]}


def test_docker_engine_pinned_and_held(host):
    held = host.check_output("apt-mark showhold").split()
    for name in ENGINE_HELD[is_h100(host)]:
        assert name in held, f"{name} not held"
    if is_h100(host):
        assert host.package("docker-ce").version == "5:27.5.1-1~debian.12~bookworm"
        assert host.package("containerd.io").version == "1.7.25-1"
        assert host.file("/etc/apt/sources.list.d/kiln-docker.sources").contains("Suites: bookworm")
    else:
        assert host.package("docker.io").version == "20.10.24+dfsg1-1+deb12u1+b6"
    assert host.service("docker").is_running and host.service("docker").is_enabled


def test_docker_lists_the_nvidia_runtime_and_keeps_the_operators_key(host):
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert "nvidia" in info["Runtimes"]
    assert info["Driver"] == "vfs" and info["CgroupDriver"] == "cgroupfs"
    link = host.file("/etc/docker/daemon.json")
    # side_effect moved the file behind a link: kiln (and nvidia-ctk) wrote through it, the link stayed
    assert link.is_symlink and link.linked_to == "/etc/docker/site/daemon.json"
    daemon = json.loads(host.file("/etc/docker/site/daemon.json").content_string)
    assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert daemon["max-concurrent-downloads"] == 5, "the operator's own key survived kiln's re-runs"
    # the operator's max-size kept over kiln's default (100m); kiln's other defaults as written on the first run
    assert daemon["log-opts"] == {"max-size": "20m", "max-file": "3"} and daemon["live-restore"] is True
    assert daemon["default-ulimits"]["memlock"] == {"Name": "memlock", "Soft": 4194304, "Hard": 4194304}


@pytest.fixture(scope="module")
def busybox_image(host):
    """A local image (no registry): docker import of a root holding a static busybox."""
    host.check_output("rm -rf /tmp/kiln-img && mkdir -p /tmp/kiln-img/bin && cp /bin/busybox /tmp/kiln-img/bin/busybox"
                      " && ln -sf busybox /tmp/kiln-img/bin/sh && ln -sf busybox /tmp/kiln-img/bin/ls")
    host.check_output("tar -C /tmp/kiln-img -c . | docker import - kiln-test/busybox:1")
    return "kiln-test/busybox:1"


def test_docker_run_with_the_nvidia_runtime_sees_the_gpus(host, busybox_image):
    gpus = 8 if is_h100(host) else 2
    seen = host.check_output(f"docker run --rm --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all {busybox_image} ls /dev")
    assert sorted(d for d in seen.split() if d[len("nvidia"):].isdigit() and d.startswith("nvidia")) == \
        sorted(f"nvidia{i}" for i in range(gpus))
    one = host.check_output(f"docker run --rm --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=1 {busybox_image} ls /dev")
    assert "nvidia1" in one.split() and "nvidia0" not in one.split()
    # without the nvidia runtime (runc), no GPU reaches the container
    plain = host.check_output(f"docker run --rm -e NVIDIA_VISIBLE_DEVICES=all {busybox_image} ls /dev")
    assert "nvidia0" not in plain.split()
    # the memlock limit of daemon.json's default-ulimits reaches the container (KiB)
    assert host.check_output(f"docker run --rm {busybox_image} sh -c 'ulimit -l'").strip() == "4096"


def test_cdi_spec_regenerated_when_the_driver_changes(host):
    """kiln-nvidia-cdi-refresh.path: a rewrite of the driver's nvidia-smi starts the regeneration."""
    assert host.service("kiln-nvidia-cdi-refresh.path").is_enabled
    prop = "systemctl show kiln-nvidia-cdi-refresh.service -p ExecMainStartTimestampMonotonic --value"
    before = host.check_output(prop)
    host.check_output("cp -p /usr/bin/nvidia-smi /tmp/nvidia-smi.kiln && cat /tmp/nvidia-smi.kiln > /usr/bin/nvidia-smi")
    for _ in range(50):
        if host.check_output(prop) != before:
            break
        host.run("sleep 0.2")
    assert host.check_output(prop) != before, "the path unit did not start the CDI regeneration"
    assert host.run("systemctl is-failed kiln-nvidia-cdi-refresh.service").stdout.strip() != "failed"
    assert f"{DRIVER}" in host.file("/etc/cdi/nvidia.yaml").content_string


def test_dcgm_running_and_sees_every_gpu(host):
    assert host.service("nvidia-dcgm").is_running
    assert host.service("nvidia-dcgm").is_enabled
    found = host.check_output("dcgmi discovery -l")
    assert f"{8 if is_h100(host) else 2} GPUs found" in found


def test_exporters_answer_from_the_other_node(host):
    other = "kiln-gpu-l40s" if is_h100(host) else "kiln-gpu-h100"
    fetch = "python3 -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "
    dcgm = host.check_output(fetch + f"http://{other}:9400/metrics")
    assert f'Hostname="{other}"' in dcgm
    assert "DCGM_FI_DEV_GPU_TEMP{" in dcgm
    node = host.check_output(fetch + f"http://{other}:9100/metrics")
    assert "node_textfile_scrape_error 0" in node
    assert host.file("/var/lib/node_exporter/textfile_collector").is_directory
