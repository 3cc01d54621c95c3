"""Unit tests for the NVIDIA tool emulators in tests/fixtures/emulators/.

Every emulator runs as a subprocess with a temporary GPU profile and
KILN_FIXTURE_ROOT pointing at a temporary directory, so no test touches the
real /etc, /var or /run. Network traffic is loopback only, on ports picked free.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kiln_paths import REPO

EMU = REPO / "tests" / "fixtures" / "emulators"
PY = sys.executable

GPU_EMULATOR = EMU.parent / "gpu-emulator"

# Same shape as tests/fixtures/gpu-emulator/profiles/*.json: a `gpu` template times `gpu_count`.
PROFILE = {
    "name": "unit-h100-2",
    "driver_version": "580.95.05",
    "cuda_version": "13.0",
    "driver_loaded": True,
    "gpu_count": 2,
    "bus_ids": ["0000:19:00.0", "0000:3b:00.0"],
    "gpu": {"name": "NVIDIA H100 80GB HBM3", "pci_device_id": "10de:2330", "memory_total_mib": 81559,
            "power_draw_w": 71.2, "temperature_c": 31, "nvlink_count": 18},
    "gpu_overrides": {},
    "nvswitch_count": 4,
}


def uuid_of(index, seed="unit-h100-2"):
    """The identity the gpu-emulator's nvidia-smi derives for a GPU."""
    d = hashlib.sha256(("%s/%d" % (seed, index)).encode()).hexdigest()
    return "GPU-%s-%s-%s-%s-%s" % (d[0:8], d[8:12], d[12:16], d[16:20], d[20:32])


UUID0, UUID1 = uuid_of(0), uuid_of(1)


def with_profile(env, tmp_path, **changes):
    prof = json.loads(json.dumps(PROFILE))
    prof.update(changes)
    path = tmp_path / "changed-profile.json"
    path.write_text(json.dumps(prof))
    return dict(env, KILN_GPU_PROFILE=str(path))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def env(tmp_path):
    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps(PROFILE))
    e = dict(os.environ)
    e.update(KILN_FIXTURE_ROOT=str(tmp_path / "root"), KILN_GPU_PROFILE=str(prof))
    e["_root"] = str(tmp_path / "root")
    e["_profile"] = str(prof)
    return e


def run(tool, *args, env, timeout=10):
    return subprocess.run([PY, str(EMU / tool), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def wait_port(port, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


@pytest.fixture
def hostengine(env):
    port = free_port()
    proc = subprocess.Popen([PY, str(EMU / "nv-hostengine"), "-n", "--service-account", "nvidia-dcgm",
                             "-b", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_port(port), proc.stderr.read() if proc.poll() is not None else "hostengine did not listen"
    yield port, proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=5)


# ------------------------------------------------------------------ files and shebangs
@pytest.mark.parametrize("name", ["nvidia-ctk", "dcgmi", "nv-hostengine", "dcgm-exporter"])
def test_emulators_are_executable_python3_scripts(name):
    path = EMU / name
    assert os.access(path, os.X_OK)
    assert path.read_text().splitlines()[0] == "#!/usr/bin/python3"


def test_units_mirror_real_ones():
    dcgm = (EMU / "nvidia-dcgm.service").read_text()
    assert "ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm" in dcgm
    exp = (EMU / "nvidia-dcgm-exporter.service").read_text()
    assert "Requires=nvidia-dcgm.service" in exp and "After=nvidia-dcgm.service" in exp
    assert "ExecStart=/usr/bin/dcgm-exporter" in exp


# ------------------------------------------------------------------ nvidia-ctk
def test_ctk_version_reads_version_file(env):
    vfile = Path(env["_root"]) / "usr/share/kiln-fixture/nvidia-container-toolkit.version"
    vfile.parent.mkdir(parents=True)
    vfile.write_text("1.20.0\n")
    r = run("nvidia-ctk", "--version", env=env)
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0] == "NVIDIA Container Toolkit CLI version 1.20.0"
    assert lines[1].startswith("commit: ")


def test_ctk_docker_merges_and_is_idempotent(env):
    daemon = Path(env["_root"]) / "etc/docker/daemon.json"
    daemon.parent.mkdir(parents=True)
    daemon.write_text(json.dumps({"log-driver": "json-file", "exec-opts": ["native.cgroupdriver=systemd"]}))
    r = run("nvidia-ctk", "runtime", "configure", "--runtime=docker", env=env)
    assert r.returncode == 0, r.stderr
    assert "Wrote updated config to /etc/docker/daemon.json" in r.stderr
    assert "It is recommended that docker daemon be restarted." in r.stderr
    first = daemon.read_bytes()
    cfg = json.loads(first)
    assert cfg["runtimes"] == {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}
    assert cfg["log-driver"] == "json-file" and cfg["exec-opts"] == ["native.cgroupdriver=systemd"]
    assert "default-runtime" not in cfg
    assert run("nvidia-ctk", "runtime", "configure", "--runtime=docker", env=env).returncode == 0
    assert daemon.read_bytes() == first
    r = run("nvidia-ctk", "runtime", "configure", "--runtime=docker", "--set-as-default", env=env)
    assert json.loads(daemon.read_text())["default-runtime"] == "nvidia"


def test_ctk_docker_creates_missing_file_with_explicit_config(env, tmp_path):
    target = tmp_path / "rootless" / "daemon.json"
    r = run("nvidia-ctk", "runtime", "configure", "--runtime=docker", "--config=%s" % target, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(target.read_text())["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"


def test_ctk_containerd_dropin_and_imports_idempotent(env):
    root = Path(env["_root"])
    top = root / "etc/containerd/config.toml"
    top.parent.mkdir(parents=True)
    top.write_text('version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
                   '  SystemdCgroup = true\n')
    args = ("runtime", "configure", "--runtime=containerd", "--set-as-default")
    r = run("nvidia-ctk", *args, env=env)
    assert r.returncode == 0, r.stderr
    assert "Wrote updated config to /etc/containerd/conf.d/99-nvidia.toml" in r.stderr
    dropin = root / "etc/containerd/conf.d/99-nvidia.toml"
    text = dropin.read_text()
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]' in text
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in text
    assert 'default_runtime_name = "nvidia"' in text
    assert "SystemdCgroup = true" in text
    top_text = top.read_text()
    assert top_text.startswith('imports = ["/etc/containerd/conf.d/*.toml"]\n')
    before = (dropin.read_bytes(), top.read_bytes())
    assert run("nvidia-ctk", *args, env=env).returncode == 0
    assert (dropin.read_bytes(), top.read_bytes()) == before


def test_ctk_containerd_without_config_creates_top_level(env):
    r = run("nvidia-ctk", "runtime", "configure", "--runtime=containerd", env=env)
    assert r.returncode == 0, r.stderr
    top = Path(env["_root"]) / "etc/containerd/config.toml"
    assert top.read_text() == 'imports = ["/etc/containerd/conf.d/*.toml"]\nversion = 2\n'


def test_ctk_crio_dropin(env):
    r = run("nvidia-ctk", "runtime", "configure", "--runtime=crio", env=env)
    assert r.returncode == 0, r.stderr
    text = (Path(env["_root"]) / "etc/crio/conf.d/99-nvidia.toml").read_text()
    assert "[crio.runtime.runtimes.nvidia]" in text
    assert 'runtime_path = "/usr/bin/nvidia-container-runtime"' in text
    assert not (Path(env["_root"]) / "etc/crio/crio.conf").exists()


def test_ctk_unknown_runtime_fails(env):
    r = run("nvidia-ctk", "runtime", "configure", "--runtime=podman", env=env)
    assert r.returncode == 1
    assert "unrecognized runtime 'podman'" in r.stderr


def test_ctk_cdi_generate_and_list(env):
    r = run("nvidia-ctk", "cdi", "generate", "--output=/etc/cdi/nvidia.yaml", env=env)
    assert r.returncode == 0, r.stderr
    spec = Path(env["_root"]) / "etc/cdi/nvidia.yaml"
    text = spec.read_text()
    assert text.startswith("---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n")
    for name in ('"0"', '"1"', UUID0, "all"):
        assert "    - name: %s\n" % name in text
    for node in ("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"):
        assert "path: %s\n" % node in text
    assert "--host-driver-version=580.95.05" in text
    first = spec.read_bytes()
    assert run("nvidia-ctk", "cdi", "generate", "--output=/etc/cdi/nvidia.yaml", env=env).returncode == 0
    assert spec.read_bytes() == first
    r = run("nvidia-ctk", "cdi", "list", env=env)
    assert r.returncode == 0
    assert "Found 5 CDI devices" in r.stderr
    # registry.ListDevices() order: plain string sort of "kind=name"
    assert r.stdout.splitlines() == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"] + sorted(
        ["nvidia.com/gpu=" + UUID0, "nvidia.com/gpu=" + UUID1]) + ["nvidia.com/gpu=all"]


def test_ctk_cdi_generate_json(env, tmp_path):
    out = tmp_path / "nvidia.json"
    r = run("nvidia-ctk", "cdi", "generate", "--format=json", "--output=%s" % out, env=env)
    assert r.returncode == 0, r.stderr
    spec = json.loads(out.read_text())
    assert spec["kind"] == "nvidia.com/gpu"
    assert [d["name"] for d in spec["devices"]][-1] == "all"


def test_ctk_cdi_generate_driver_not_loaded(env, tmp_path):
    r = run("nvidia-ctk", "cdi", "generate", env=with_profile(env, tmp_path, driver_loaded=False))
    assert r.returncode == 1
    assert "failed to initialize NVML: Driver Not Loaded" in r.stderr


def test_ctk_cdi_generate_without_nvml_fails(env):
    env = dict(env, KILN_GPU_PROFILE=env["_profile"] + ".missing")
    r = run("nvidia-ctk", "cdi", "generate", "--output=/etc/cdi/nvidia.yaml", env=env)
    assert r.returncode == 1
    assert "failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND" in r.stderr
    assert not (Path(env["_root"]) / "etc/cdi/nvidia.yaml").exists()


# ------------------------------------------------------------------ dcgmi / nv-hostengine
def test_dcgmi_without_hostengine(env):
    port = free_port()
    r = run("dcgmi", "diag", "-r", "1", "--host", "127.0.0.1:%d" % port, env=env)
    assert r.returncode == 235  # DCGM_ST_CONNECTION_NOT_VALID (-21)
    assert r.stdout.splitlines() == [
        "Error: unable to establish a connection to the specified host: 127.0.0.1:%d" % port,
        "Error: Unable to connect to host engine. Host engine connection invalid/disconnected."]


def test_dcgmi_version(env):
    r = run("dcgmi", "--version", env=env)
    assert r.returncode == 0 and r.stdout.startswith("Version : 4.6.0\n")


def test_dcgmi_discovery(env, hostengine):
    port, _ = hostengine
    r = run("dcgmi", "discovery", "-l", "--host", "127.0.0.1:%d" % port, env=env)
    assert r.returncode == 0, r.stdout
    out = r.stdout
    assert out.startswith("2 GPUs found (Active).\n")
    assert "| 0      | Name: NVIDIA H100 80GB HBM3" in out
    assert "PCI Bus ID: 00000000:3B:00.0" in out
    assert "Device UUID: " + UUID0 in out
    assert "4 NvSwitches found." in out


@pytest.mark.parametrize("level,tests", [
    ("1", ["software"]),
    ("2", ["software", "memory", "pcie"]),
    ("3", ["software", "memory", "diagnostic", "pcie", "targeted_stress", "targeted_power", "memory_bandwidth"]),
    ("4", ["software", "memory", "diagnostic", "pulse_test", "memtest", "pcie", "targeted_stress",
           "targeted_power", "memory_bandwidth"]),
])
def test_dcgmi_diag_pass_json(env, hostengine, level, tests):
    port, _ = hostengine
    r = run("dcgmi", "diag", "-r", level, "-j", "--host", "127.0.0.1:%d" % port, env=env)
    assert r.returncode == 0, r.stdout
    doc = json.loads(r.stdout)
    assert doc["metadata"]["version"] == "4.6.0"
    names = [t["name"] for c in doc["DCGM Diagnostic"]["test_categories"] for t in c["tests"]]
    assert names == tests
    for c in doc["DCGM Diagnostic"]["test_categories"]:
        for t in c["tests"]:
            assert t["test_summary"]["status"] == "Pass"
            assert [res["entity_id"] for res in t["results"]] == [0, 1]


def test_dcgmi_diag_table_pass(env, hostengine):
    port, _ = hostengine
    r = run("dcgmi", "diag", "-r", "2", "--host", "127.0.0.1:%d" % port, env=env)
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0] == "Successfully ran diagnostic for group."
    assert "| GPU Device IDs Detected   | 2330, 2330                                     |" in lines
    assert "| software                  | Pass                                           |" in lines
    assert "|                           | GPU1: Pass                                     |" in lines
    assert all(len(line) == 78 for line in lines[1:])


def test_dcgmi_diag_gpu_fault(env, hostengine, tmp_path):
    port, _ = hostengine
    e = with_profile(env, tmp_path, gpu_overrides={"1": {"fault": "pcie"}})
    r = run("dcgmi", "diag", "-r", "2", "--host", "127.0.0.1:%d" % port, env=e)
    assert r.returncode == 226  # DCGM_ST_NVVS_ERROR (-30)
    assert "| pcie                      | Fail                                           |" in r.stdout
    assert "\n| Warning: GPU1             | Detected more than 8 PCIe replays per minute " in r.stdout
    # level 1 does not run pcie: passes
    assert run("dcgmi", "diag", "-r", "1", "--host", "127.0.0.1:%d" % port, env=e).returncode == 0


def test_dcgmi_diag_dcgm_fail_json(env, hostengine, tmp_path):
    port, _ = hostengine
    e = with_profile(env, tmp_path, dcgm_fail={"test": "memory", "gpus": [0],
                                               "message": "Found 2 faulty memory elements"})
    r = run("dcgmi", "diag", "-r", "3", "-j", "--host", "127.0.0.1:%d" % port, env=e)
    assert r.returncode == 205  # DCGM_ST_NVVS_ISOLATE_ERROR (-51): faulty memory isolates the GPU
    doc = json.loads(r.stdout)
    mem = [t for c in doc["DCGM Diagnostic"]["test_categories"] for t in c["tests"] if t["name"] == "memory"][0]
    assert mem["test_summary"]["status"] == "Fail"
    assert mem["results"][0]["status"] == "Fail" and mem["results"][1]["status"] == "Pass"
    assert mem["results"][0]["warnings"][0]["warning"] == "Found 2 faulty memory elements"


def test_dcgmi_health(env, hostengine):
    port, _ = hostengine
    r = run("dcgmi", "health", "-c", "--host", "127.0.0.1:%d" % port, env=env)
    assert r.returncode == 253 and "Health watches not enabled" in r.stdout + r.stderr  # DCGM's: set them first
    assert run("dcgmi", "health", "-s", "a", "--host", "127.0.0.1:%d" % port, env=env).returncode == 0
    r = run("dcgmi", "health", "-c", "--host", "127.0.0.1:%d" % port, env=env)
    assert r.returncode == 0
    assert "| Overall Health            | Healthy" in r.stdout


def test_hostengine_version_and_sigterm(env):
    r = run("nv-hostengine", "--version", env=env)
    assert r.returncode == 0 and "Version : 4.6.0" in r.stdout
    port = free_port()
    proc = subprocess.Popen([PY, str(EMU / "nv-hostengine"), "-n", "-p", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_port(port)
        pidfile = Path(env["_root"]) / "var/run/nvhostengine.pid"
        assert pidfile.read_text().strip() == str(proc.pid)
        s = socket.create_connection(("127.0.0.1", port), timeout=1)
        s.settimeout(2)
        assert s.recv(16) == b""  # the stand-in closes connections it accepts
        s.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    assert not pidfile.exists()
    assert "Started host engine version 4.6.0 using port number: %d" % port in proc.stdout.read()


# ------------------------------------------------------------------ dcgm-exporter
def test_exporter_refuses_without_hostengine(env):
    r = run("dcgm-exporter", "-a", "127.0.0.1:%d" % free_port(), "-r", "127.0.0.1:%d" % free_port(), env=env)
    assert r.returncode == 1
    assert 'msg="Failed to connect to remote hostengine"' in r.stderr
    assert "Host engine connection invalid/disconnected" in r.stderr


def test_exporter_serves_metrics(env, hostengine):
    he_port, _ = hostengine
    port = free_port()
    proc = subprocess.Popen([PY, str(EMU / "dcgm-exporter"), "-a", "127.0.0.1:%d" % port,
                             "-r", "127.0.0.1:%d" % he_port], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_port(port)
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            body = resp.read().decode()
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as resp:
            assert resp.read().decode() == body  # stable values
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    for metric in ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
                   "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS"):
        assert "# HELP %s " % metric in body
        assert "# TYPE %s " % metric in body
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in body
    line = [ln for ln in body.splitlines() if ln.startswith("DCGM_FI_DEV_FB_FREE{gpu=\"1\"")][0]
    for label in ('UUID="%s"' % UUID1, 'device="nvidia1"',
                  'modelName="NVIDIA H100 80GB HBM3"', 'pci_bus_id="00000000:3B:00.0"', "Hostname="):
        assert label in line
    assert line.endswith(" 81559")


# ------------------------------------------------------------------ shipped profiles, cross-tool identity
@pytest.mark.parametrize("profile", ["h100-sxm-8", "l40s-2"])
def test_shipped_profiles_match_nvidia_smi(env, hostengine, profile):
    path = GPU_EMULATOR / "profiles" / ("%s.json" % profile)
    if not path.exists() or not (GPU_EMULATOR / "nvidia-smi").exists():
        pytest.skip("gpu-emulator profiles not present")
    port, _ = hostengine
    e = dict(env, KILN_GPU_PROFILE=str(path))
    data = json.loads(path.read_text())
    smi = subprocess.run([PY, str(GPU_EMULATOR / "nvidia-smi"), "-L"], env=e, capture_output=True, text=True,
                         timeout=10)
    assert smi.returncode == 0, smi.stderr
    smi_uuids = [line.rsplit("UUID: ", 1)[1].rstrip(")") for line in smi.stdout.splitlines()]
    disc = run("dcgmi", "discovery", "-l", "--host", "127.0.0.1:%d" % port, env=e)
    assert disc.returncode == 0
    assert [ln.split("Device UUID: ")[1].split()[0] for ln in disc.stdout.splitlines()
            if "Device UUID: " in ln] == smi_uuids
    assert "%d NvSwitch" % data.get("nvswitch_count", 0) in disc.stdout
    diag = run("dcgmi", "diag", "-r", "2", "-j", "--host", "127.0.0.1:%d" % port, env=e)
    assert diag.returncode == 0
    doc = json.loads(diag.stdout)
    assert len(doc["entity_groups"][0]["entities"]) == data["gpu_count"]
    cdi = run("nvidia-ctk", "cdi", "generate", env=e)
    assert cdi.returncode == 0
    for u in smi_uuids:
        assert "    - name: %s\n" % u in cdi.stdout
