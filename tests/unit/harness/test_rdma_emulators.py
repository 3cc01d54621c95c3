"""Tests for tests/fixtures/rdma: make-rdma-sysfs.py, the profiles, and the ibstat / ibv_devinfo / perfquery /
ib_write_bw emulators (run as subprocesses on a tmp tree; ib_write_bw server and client on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kiln_loader import load_source

from kiln.facts import fabric as kf
from kiln.facts import fabric_text as kt

from kiln_paths import REPO
RDMA = REPO / "tests" / "fixtures" / "rdma"
EMULATORS = RDMA / "emulators"
PROFILES = sorted((RDMA / "profiles").glob("*.json"))
make = load_source("kiln_make_rdma_sysfs", RDMA / "make-rdma-sysfs.py")


def _tree(tmp_path: Path, profile: str) -> tuple[str, str]:
    sysfs, proc = tmp_path / "sys", tmp_path / "proc"
    make.build(make.load_profile(profile), str(sysfs), str(proc))
    return str(sysfs), str(proc)


def _env(sysfs: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ, KILN_RDMA_SYSFS_ROOT=sysfs, KILN_PERFTEST_TIMEOUT="10")
    env.update(extra)
    return env


def _run(tool: str, *args: str, sysfs: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EMULATORS / tool), *args], env=_env(sysfs, **extra),
                          capture_output=True, text=True, timeout=30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------- profiles and tree
@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_profile_tree_reads_back(path, tmp_path):
    sysfs, proc = _tree(tmp_path, path.stem)
    facts = kf.read_sysfs(sysfs)
    assert facts["problems"] == []
    assert len(facts["hcas"]) == len(make.expand(json.loads(path.read_text())))
    for hca in facts["hcas"]:
        port = hca["ports"][0]
        assert hca["model"] and hca["pci_address"] and port["netdevs"] and set(port["counters"]) >= set(kf.COUNTER_NAMES)
        assert (Path(sysfs) / "class" / "infiniband" / hca["name"] / "kiln-fixture-bw-gbps").is_file()
    gd = kf.gpudirect_facts(sysfs, proc, "6.1.0-28-amd64")
    assert gd["nvidia_loaded"] and gd["open_modules"] is True and gd["problems"] == []


def test_profiles_say_what_the_issue_asks(tmp_path):
    def hcas(name):
        return {h["name"]: h for h in kf.read_sysfs(_tree(tmp_path / name, name)[0])["hcas"]}
    storage = hcas("ndr8-storage")
    assert [h["model"] for h in storage.values()] == ["ConnectX-7"] * 8 + ["ConnectX-6 Dx"]
    assert {h["ports"][0]["rate"] for n, h in storage.items() if n != "mlx5_8"} == {"400 Gb/sec (4X NDR)"}
    assert storage["mlx5_8"]["ports"][0]["link_layer"] == "Ethernet"
    assert hcas("ndr8-one-hdr")["mlx5_3"]["ports"][0]["rate"] == "200 Gb/sec (4X HDR)"
    down = hcas("ndr8-one-down")["mlx5_5"]["ports"][0]
    assert (down["state"], down["phys_state"]) == ("DOWN", "Polling")
    roce = hcas("roce8")
    assert len(roce) == 8 and {h["ports"][0]["link_layer"] for h in roce.values()} == {"Ethernet"}


def test_build_replaces_hcas_and_keeps_other_devices(tmp_path):
    sysfs = tmp_path / "sys"
    gpu = sysfs / "bus" / "pci" / "devices" / "0000:18:00.0"
    gpu.mkdir(parents=True)
    (gpu / "vendor").write_text("0x10de\n")
    make.build(make.load_profile("ndr8-storage"), str(sysfs))
    make.build(make.load_profile("roce8"), str(sysfs))
    assert len(kf.read_sysfs(str(sysfs))["hcas"]) == 8 and gpu.is_dir()


def test_cli_clean(tmp_path):
    root = tmp_path / "sys"
    (root / "junk").mkdir(parents=True)
    out = subprocess.run([sys.executable, str(RDMA / "make-rdma-sysfs.py"), "--profile", "roce8", "--root", str(root),
                          "--proc-root", str(tmp_path / "proc"), "--clean"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["hcas"] == 8 and not (root / "junk").exists()
    bad = subprocess.run([sys.executable, str(RDMA / "make-rdma-sysfs.py"), "--profile", "nope", "--root", str(root)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "nope" in bad.stderr


# --------------------------------------------------------------------------- ibstat / ibv_devinfo / perfquery
def test_ibstat_agrees_with_sysfs(tmp_path):
    sysfs, _ = _tree(tmp_path, "ndr8-one-down")
    out = _run("ibstat", sysfs=sysfs)
    assert out.returncode == 0
    facts = kf.merge_sources(kf.read_sysfs(sysfs), ibstat=kt.parse_ibstat(out.stdout))
    assert facts["problems"] == []
    assert facts["hcas"][5]["ports"][0]["state"] == "DOWN"
    assert _run("ibstat", "-l", sysfs=sysfs).stdout.split()[:2] == ["mlx5_0", "mlx5_1"]
    missing = _run("ibstat", "mlx5_99", sysfs=sysfs)
    assert missing.returncode != 0 and "stat of IB device 'mlx5_99' failed" in missing.stderr
    bad = _run("ibstat", "--frobnicate", sysfs=sysfs)
    assert bad.returncode != 0 and "--frobnicate" in bad.stderr


def test_ibv_devinfo_round_trip(tmp_path):
    sysfs, _ = _tree(tmp_path, "roce8")
    parsed = kt.parse_ibv_devinfo(_run("ibv_devinfo", "-v", sysfs=sysfs).stdout)
    assert parsed["problems"] == [] and len(parsed["hcas"]) == 8
    port = parsed["hcas"][0]["ports"][0]
    assert (port["state"], port["link_layer"], port["width"], port["phys_state"]) == ("ACTIVE", "Ethernet", "4X", "LinkUp")
    assert port["gids"][3].endswith("RoCE v2")
    one = kt.parse_ibv_devinfo(_run("ibv_devinfo", "-d", "mlx5_2", sysfs=sysfs).stdout)
    assert [h["name"] for h in one["hcas"]] == ["mlx5_2"] and one["hcas"][0]["model"] == "ConnectX-7"
    assert _run("ibv_devinfo", "-z", sysfs=sysfs).returncode != 0


def test_perfquery_reads_injected_counter_growth(tmp_path):
    sysfs, _ = _tree(tmp_path, "ndr8-storage")
    counter = Path(sysfs) / "class" / "infiniband" / "mlx5_2" / "ports" / "1" / "counters" / "symbol_error"
    before = kt.parse_perfquery(_run("perfquery", "-x", "-C", "mlx5_2", "-P", "1", sysfs=sysfs).stdout)
    counter.write_text("17\n")
    after = kt.parse_perfquery(_run("perfquery", "-x", "-C", "mlx5_2", "-P", "1", sysfs=sysfs).stdout)
    assert before["problems"] == [] and after["problems"] == []
    assert before["ports"][0]["counters"]["symbol_error"] == 0 and after["ports"][0]["counters"]["symbol_error"] == 17
    facts = kf.merge_sources(kf.read_sysfs(sysfs), perfquery=after)
    assert facts["problems"] == [] and facts["hcas"][2]["ports"][0]["counters"]["symbol_error"] == 17
    basic = kt.parse_perfquery(_run("perfquery", "-C", "mlx5_2", "-P", "1", sysfs=sysfs).stdout)
    assert basic["ports"][0]["extended"] is False and basic["ports"][0]["counters"]["symbol_error"] == 17
    roce = _run("perfquery", "-C", "mlx5_8", "-P", "1", sysfs=sysfs)
    assert roce.returncode != 0 and "can't open UMAD port" in roce.stderr


# --------------------------------------------------------------------------- ib_write_bw
def _server(sysfs: str, port: int, *args: str, **extra: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(EMULATORS / "ib_write_bw"), *args, "-p", str(port)],
                            env=_env(sysfs, **extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc


def _wait_banner(proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 15
    seen = ""
    while "Waiting for client" not in seen:
        line = proc.stdout.readline()
        if not line or time.monotonic() > deadline:
            raise AssertionError(f"server never got ready: {seen!r} {proc.stderr.read()!r}")
        seen += line


def _pair(sysfs_server: str, sysfs_client: str, dev_server: str, dev_client: str, *extra: str):
    port = _free_port()
    server = _server(sysfs_server, port, "-d", dev_server, "-i", "1", "-F", "--report_gbits", *extra)
    _wait_banner(server)
    client = _run("ib_write_bw", "-d", dev_client, "-i", "1", "-p", str(port), "-F", "--report_gbits", *extra,
                  "127.0.0.1", sysfs=sysfs_client)
    out, err = server.communicate(timeout=20)
    return server.returncode, out, err, client


def test_ib_write_bw_healthy_pair_both_sides_report(tmp_path):
    sysfs, _ = _tree(tmp_path, "ndr8-storage")
    rc, out, err, client = _pair(sysfs, sysfs, "mlx5_0", "mlx5_1", "-s", "8388608", "-n", "200")
    assert rc == 0 and client.returncode == 0, (err, client.stderr)
    srv, cli = kt.parse_perftest(out), kt.parse_perftest(client.stdout)
    assert srv["ok"] and cli["ok"], (srv["problems"], cli["problems"])
    assert srv["device"] == "mlx5_0" and cli["device"] == "mlx5_1" and cli["link_type"] == "IB"
    assert srv["bw_avg_gbps"] == cli["bw_avg_gbps"]
    assert 392.0 * 0.99 < cli["bw_avg_gbps"] <= 392.0
    assert cli["rows"][0]["bytes"] == 8388608 and cli["rows"][0]["iterations"] == 200


def test_ib_write_bw_slow_hca_is_the_minimum(tmp_path):
    sysfs, _ = _tree(tmp_path, "ndr8-storage")
    (Path(sysfs) / "class" / "infiniband" / "mlx5_4" / "kiln-fixture-bw-gbps").write_text("150.0\n")
    rc, out, _err, client = _pair(sysfs, sysfs, "mlx5_3", "mlx5_4")
    assert rc == 0 and client.returncode == 0
    assert 150.0 * 0.99 < kt.parse_perftest(client.stdout)["bw_avg_gbps"] <= 150.0
    assert 150.0 * 0.99 < kt.parse_perftest(out)["bw_avg_gbps"] <= 150.0


def test_ib_write_bw_mbsec_roce_with_gid_and_cuda(tmp_path):
    sysfs, _ = _tree(tmp_path, "roce8")
    port = _free_port()
    server = _server(sysfs, port, "-d", "mlx5_0", "-x", "3", "--use_cuda=0")
    _wait_banner(server)
    client = _run("ib_write_bw", "-d", "mlx5_1", "-x", "3", "--use_cuda=1", "-p", str(port), "127.0.0.1", sysfs=sysfs)
    out, _err = server.communicate(timeout=20)
    parsed = kt.parse_perftest(client.stdout)
    assert client.returncode == 0 and server.returncode == 0
    assert parsed["ok"] and parsed["units"] == "MB/sec" and parsed["link_type"] == "Ethernet"
    assert 388.0 * 0.99 < parsed["bw_avg_gbps"] <= 388.0 * 1.0001
    assert " GID index       : 3" in client.stdout and "255:255:10:" in client.stdout
    assert kt.parse_perftest(out)["ok"]


def test_ib_write_bw_down_port_fails_like_perftest(tmp_path):
    sysfs, _ = _tree(tmp_path, "ndr8-one-down")
    out = _run("ib_write_bw", "-d", "mlx5_5", "-i", "1", "-p", str(_free_port()), sysfs=sysfs)
    assert out.returncode == 1
    assert out.stderr == " Port number 1 state is Down\n Couldn't get context for the device\n"
    client = _run("ib_write_bw", "-d", "mlx5_5", "-p", str(_free_port()), "127.0.0.1", sysfs=sysfs)
    assert client.returncode == 1 and "state is Down" in client.stderr
    assert not kt.parse_perftest(out.stdout + out.stderr)["ok"]


def test_ib_write_bw_no_server_no_client_unknown_options(tmp_path):
    sysfs, _ = _tree(tmp_path, "ndr8-storage")
    lonely = _run("ib_write_bw", "-d", "mlx5_0", "-p", str(_free_port()), sysfs=sysfs, KILN_PERFTEST_TIMEOUT="0.5")
    assert lonely.returncode == 1 and "KILN_PERFTEST_TIMEOUT" in lonely.stderr
    refused = _run("ib_write_bw", "-d", "mlx5_0", "-p", str(_free_port()), "127.0.0.1", sysfs=sysfs)
    assert refused.returncode == 1 and "Couldn't connect to 127.0.0.1" in refused.stderr
    unknown = _run("ib_write_bw", "--turbo", sysfs=sysfs)
    assert unknown.returncode == 1 and "'--turbo'" in unknown.stderr
    nodev = _run("ib_write_bw", "-d", "mlx5_42", sysfs=sysfs)
    assert nodev.returncode == 1 and "Unable to find the Infiniband/RoCE device" in nodev.stderr


def test_ib_write_bw_link_layer_mismatch(tmp_path):
    ib, _ = _tree(tmp_path / "ib", "ndr8-storage")
    rc, _out, err, client = _pair(ib, ib, "mlx5_0", "mlx5_8")
    assert rc == 1 and client.returncode == 1 and "Link layer mismatch" in client.stderr + err
