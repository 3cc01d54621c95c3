"""Tests for module_utils/kiln/facts/fabric.py: parsers on recorded real outputs, the sysfs core, merge, hostile input."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.facts import fabric as kf
from kiln.facts import fabric_text as kt

from kiln_paths import REPO
RECORDED = REPO / "tests" / "fixtures" / "rdma" / "recorded"


def _rec(name: str) -> str:
    return (RECORDED / name).read_text()


def _all(prefix: str) -> list[Path]:
    files = sorted(RECORDED.glob(prefix + "*.txt"))
    assert files, prefix
    return files


# --------------------------------------------------------------------------- contract constants
def test_hca_models_contract():
    assert kf.HCA_MODELS == {
        "MT4099": "ConnectX-3", "MT4103": "ConnectX-3 Pro",
        "MT4115": "ConnectX-4", "MT4117": "ConnectX-4 Lx", "MT4119": "ConnectX-5", "MT4121": "ConnectX-5 Ex",
        "MT4123": "ConnectX-6", "MT4125": "ConnectX-6 Dx", "MT4127": "ConnectX-6 Lx", "MT4129": "ConnectX-7",
        "MT4131": "ConnectX-8", "MT41682": "BlueField", "MT41686": "BlueField-2", "MT41692": "BlueField-3",
        # virtual functions (clouds): their physical generation
        "MT4116": "ConnectX-4", "MT4118": "ConnectX-4 Lx", "MT4120": "ConnectX-5", "MT4122": "ConnectX-5 Ex",
        "MT4124": "ConnectX-6"}
    assert int("1021", 16) == 4129 and int("101c", 16) == 4124 and int("1003", 16) == 4099
    assert "MT4126" not in kf.HCA_MODELS  # "ConnectX Family mlx5Gen Virtual Function": no single generation


def test_perfquery_names_map_onto_contract_counters():
    assert sorted(kf.PERFQUERY_TO_SYSFS.values()) == sorted(kf.COUNTER_NAMES)


@pytest.mark.parametrize("text,expected", [
    ("400 Gb/sec (4X NDR)", (400.0, "4X", "NDR")),
    ("200 Gb/sec (4X HDR)", (200.0, "4X", "HDR")),
    ("2.5 Gb/sec (1X SDR)", (2.5, "1X", "SDR")),
    ("100 Gb/sec (2X HDR)", (100.0, "2X", "HDR")),
    ("40 Gb/sec (4X)", (40.0, "4X", None)),
    ("garbage", (None, None, None)),
    ("400", (None, None, None)),
    ("0 Gb/sec (4X NDR)", (None, None, None)),
    (None, (None, None, None)),
    (400, (None, None, None)),
])
def test_rate_parts(text, expected):
    assert kf.rate_parts(text) == expected


# --------------------------------------------------------------------------- ibstat
@pytest.mark.parametrize("path", _all("ibstat"), ids=lambda p: p.stem)
def test_ibstat_every_recording_parses(path):
    parsed = kt.parse_ibstat(path.read_text())
    assert parsed["hcas"] and all(h["ports"] for h in parsed["hcas"])
    for hca in parsed["hcas"]:
        for port in hca["ports"]:
            assert port["state"] in (None, "ACTIVE", "DOWN", "INIT", "ARMED")


def test_ibstat_ndr_ib():
    parsed = kt.parse_ibstat(_rec("ibstat-cx7-ndr-ib-derived.txt"))
    assert parsed["problems"] == []
    port = parsed["hcas"][0]["ports"][0]
    assert parsed["hcas"][0]["model"] == "ConnectX-7"
    assert (port["state"], port["phys_state"], port["rate_gbps"], port["link_layer"], port["lid"], port["sm_lid"]) == \
        ("ACTIVE", "LinkUp", 400.0, "InfiniBand", 13305, 1)
    assert parsed["hcas"][0]["node_guid"] == "a088:c203:0000:1000"


def test_ibstat_hdr_with_a_down_port():
    parsed = kt.parse_ibstat(_rec("ibstat-cx6-hdr-ib-one-down.txt"))
    assert parsed["problems"] == []
    assert [(h["name"], h["model"], h["ports"][0]["state"], h["ports"][0]["rate_gbps"]) for h in parsed["hcas"]] == \
        [("mlx5_4", "ConnectX-6", "ACTIVE", 200.0), ("mlx5_2", "ConnectX-6", "DOWN", 10.0)]
    assert parsed["hcas"][1]["ports"][0]["phys_state"] == "Disabled"


def test_ibstat_roce_several_hcas_truncated_last():
    parsed = kt.parse_ibstat(_rec("ibstat-cx7-roce-multi-hca.txt"))
    assert [h["name"] for h in parsed["hcas"]] == ["mlx5_0", "mlx5_1", "mlx5_10"]
    assert {h["ports"][0]["link_layer"] for h in parsed["hcas"][:2]} == {"Ethernet"}
    assert parsed["hcas"][2]["model"] == "ConnectX-6 Dx"
    assert parsed["problems"] == ["ibstat mlx5_10 port 1: no rate_gbps, link_layer (truncated or unparseable output)"]


def test_ibstat_roce_cx6dx_clean():
    parsed = kt.parse_ibstat(_rec("ibstat-cx6dx-roce-100.txt"))
    assert parsed["problems"] == [] and len(parsed["hcas"]) == 2
    assert parsed["hcas"][1]["sys_image_guid"] == "0c42:a103:001d:d12a"


def test_ibstat_connectx3_and_truncated_port():
    parsed = kt.parse_ibstat(_rec("ibstat-cx3-fdr-dual-port.txt"))
    assert len(parsed["hcas"][0]["ports"]) == 2 and parsed["hcas"][0]["ports"][1]["rate_gbps"] == 56.0
    assert parsed["hcas"][0]["model"] == "ConnectX-3"  # MT4099, known since issue 33
    assert not any("HCA_MODELS" in p for p in parsed["problems"])
    assert any("port 2: no link_layer" in p for p in parsed["problems"])
    unknown = kt.parse_ibstat(_rec("ibstat-cx3-fdr-dual-port.txt").replace("MT4099", "MT4126"))
    assert any("MT4126" in p and "HCA_MODELS" in p for p in unknown["problems"])


IBSTAT_FDR10 = """CA 'mlx4_0'
\tCA type: MT4099
\tNumber of ports: 1
\tFirmware version: 2.42.5000
\tHardware version: 1
\tNode GUID: 0x0002c90300a1b2c0
\tSystem image GUID: 0x0002c90300a1b2c3
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 40 (FDR10)
\t\tBase lid: 7
\t\tLMC: 0
\t\tSM lid: 1
\t\tCapability mask: 0x02514868
\t\tPort GUID: 0x0002c90300a1b2c1
\t\tLink layer: InfiniBand
"""


@pytest.mark.parametrize("rate, gbps", [("40 (FDR10)", 40.0), ("40", 40.0), ("56", 56.0), ("14 (FDR10)", 14.0),
                                        ("25.78125", 25.78125), (" 200 ( HDR ) ", 200.0)])
def test_ibstat_rate_with_the_speed_ibstat_adds(rate, gbps):
    parsed = kt.parse_ibstat(IBSTAT_FDR10.replace("40 (FDR10)", rate))
    assert parsed["problems"] == [] and parsed["hcas"][0]["ports"][0]["rate_gbps"] == gbps
    assert parsed["hcas"][0]["model"] == "ConnectX-3"


@pytest.mark.parametrize("rate", ["(FDR10)", "40 FDR10", "40 (FDR10", "nan", "inf (EDR)", "-40", "0", "40 (F D R)",
                                  "1" * 40, "40 (FDR10) (EDR)"])
def test_ibstat_rate_that_is_not_one_is_named(rate):
    parsed = kt.parse_ibstat(IBSTAT_FDR10.replace("40 (FDR10)", rate))
    assert parsed["hcas"][0]["ports"][0]["rate_gbps"] is None
    assert any("is not a number of Gb/s" in p for p in parsed["problems"])


@pytest.mark.parametrize("hca_type, model", [("MT4124", "ConnectX-6"), ("MT4118", "ConnectX-4 Lx"),
                                             ("MT4099", "ConnectX-3"), ("MT41692", "BlueField-3")])
def test_cloud_virtual_functions_and_older_hcas_have_facts(hca_type, model):
    parsed = kt.parse_ibstat(IBSTAT_FDR10.replace("MT4099", hca_type))
    assert parsed["hcas"][0]["model"] == model and parsed["problems"] == []


def test_ibstat_scrubbed_and_mixed_with_ibpanic():
    parsed = kt.parse_ibstat(_rec("ibstat-hdr-ib-partial-ibpanic.txt"))
    assert parsed["hcas"][0]["ports"][0]["state"] == "ACTIVE"
    assert any("ibpanic" in p for p in parsed["problems"])
    assert any("is not a GUID" in p for p in parsed["problems"])


# --------------------------------------------------------------------------- ibv_devinfo
@pytest.mark.parametrize("path", _all("ibv_devinfo"), ids=lambda p: p.stem)
def test_ibv_devinfo_every_recording_parses(path):
    parsed = kt.parse_ibv_devinfo(path.read_text())
    assert parsed["hcas"] and all(h["model"] for h in parsed["hcas"])


def test_ibv_devinfo_down_and_truncated():
    parsed = kt.parse_ibv_devinfo(_rec("ibv_devinfo-cx6dx-down-cx7.txt"))
    first, second = parsed["hcas"]
    assert (first["model"], first["ports"][0]["state"], first["ports"][0]["state_code"],
            first["ports"][0]["link_layer"], first["ports"][0]["active_mtu"]) == \
        ("ConnectX-6 Dx", "DOWN", 1, "Ethernet", 1024)
    assert second["model"] == "ConnectX-7" and second["ports"] == []
    assert parsed["problems"] == ["ibv_devinfo mlx5_13: phys_port_cnt is 1 but 0 port block(s) follow (truncated output?)"]


def test_ibv_devinfo_active_roce():
    parsed = kt.parse_ibv_devinfo(_rec("ibv_devinfo-cx7-roce-active.txt"))
    assert parsed["problems"] == []
    assert parsed["hcas"][0]["node_guid"] == "a088:c203:007e:1dba"
    assert parsed["hcas"][0]["ports"][0]["state"] == "ACTIVE"


def test_ibv_devinfo_verbose_fragment_and_tabs():
    fragment = kt.parse_ibv_devinfo(_rec("ibv_devinfo-v-port-fragment-roce-gids.txt"))
    assert any("before the first 'hca_id:'" in p for p in fragment["problems"])
    tabs = kt.parse_ibv_devinfo(_rec("ibv_devinfo-v-cx5-device-tabs.txt"))
    assert tabs["hcas"][0]["model"] == "ConnectX-5" and tabs["hcas"][0]["board_id"] == "MT_0000000008"


def test_ibv_devinfo_verbose_port_fields():
    text = ("hca_id:\tmlx5_0\n\tvendor_part_id:\t\t\t4129\n\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n"
            "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tlink_layer:\t\tInfiniBand\n"
            "\t\t\tactive_width:\t\t4X (2)\n\t\t\tactive_speed:\t\t100.0 Gbps (128)\n"
            "\t\t\tphys_state:\t\tLINK_UP (5)\n\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:a088:c203:0000:1000\n")
    parsed = kt.parse_ibv_devinfo(text)
    port = parsed["hcas"][0]["ports"][0]
    assert parsed["problems"] == []
    assert (port["width"], port["speed"], port["phys_state"], port["phys_state_code"]) == ("4X", "100.0 Gbps", "LinkUp", 5)
    assert port["gids"] == {0: "fe80:0000:0000:0000:a088:c203:0000:1000"}


# --------------------------------------------------------------------------- perfquery
@pytest.mark.parametrize("path", _all("perfquery"), ids=lambda p: p.stem)
def test_perfquery_every_recording_parses(path):
    parsed = kt.parse_perfquery(path.read_text())
    assert parsed["ports"] and all("symbol_error" in p["counters"] for p in parsed["ports"])


def test_perfquery_extended():
    parsed = kt.parse_perfquery(_rec("perfquery-x-rhel75.txt"))
    assert parsed["problems"] == []
    port = parsed["ports"][0]
    assert (port["lid"], port["port"], port["extended"], port["capmask"]) == (10, 1, True, "0x5300")
    assert set(port["counters"]) == set(kf.COUNTER_NAMES)
    assert port["raw"]["QP1Dropped"] == 0


def test_perfquery_wrapped_header_and_truncation():
    parsed = kt.parse_perfquery(_rec("perfquery-x-wrapped-truncated.txt"))
    assert parsed["ports"][0]["lid"] == 21 and parsed["ports"][0]["counters"]["port_rcv_data"] == 2341975277576
    assert parsed["problems"] == ["perfquery: line 'VL15Dro' is not 'Name:....<integer>' (truncated output?)"]


def test_perfquery_without_header_cannot_be_matched():
    parsed = kt.parse_perfquery(_rec("perfquery-ibsim-no-header.txt"))
    assert parsed["ports"][0]["lid"] is None
    assert any("without a '# Port counters" in p for p in parsed["problems"])


def test_perfquery_basic_saturated():
    parsed = kt.parse_perfquery(_rec("perfquery-basic-derived.txt"))
    assert parsed["ports"][0]["extended"] is False
    assert any("PortXmitData = 4294967295 is saturated" in p for p in parsed["problems"])


# --------------------------------------------------------------------------- perftest
@pytest.mark.parametrize("path", _all("ib_"), ids=lambda p: p.stem)
def test_perftest_every_recording_parses(path):
    parsed = kt.parse_perftest(path.read_text())
    assert set(parsed) == {"ok", "problems", "test", "device", "ib_port", "link_type", "units", "rows",
                           "bw_avg_gbps", "bw_peak_gbps"}
    assert parsed["ok"] is (not parsed["problems"] and bool(parsed["rows"]))


def test_perftest_ndr_client_gbits():
    parsed = kt.parse_perftest(_rec("ib_write_bw-client-ib-ndr-gbits-derived.txt"))
    assert parsed["ok"] and parsed["problems"] == []
    assert (parsed["test"], parsed["device"], parsed["link_type"], parsed["units"]) == \
        ("RDMA_Write BW", "ibp5", "IB", "Gb/sec")
    assert parsed["rows"] == [{"bytes": 65536, "iterations": 5000, "bw_peak": 392.31, "bw_avg": 392.17,
                               "msg_rate_mpps": 0.748002}]
    assert parsed["bw_avg_gbps"] == 392.17


def test_perftest_mbsec_is_mebibytes():
    parsed = kt.parse_perftest(_rec("ib_write_bw-client-roce-mbsec-derived.txt"))
    assert parsed["ok"] and parsed["units"] == "MB/sec" and parsed["link_type"] == "Ethernet"
    assert parsed["bw_avg_gbps"] == pytest.approx(4153.78 * 1048576 * 8 / 1e9, abs=1e-5)
    assert parsed["bw_peak_gbps"] == 0.0


def test_perftest_truncated_outputs_are_not_ok():
    for name in ("ib_write_bw-server-roce-mbsec-truncated.txt", "ib_write_bw-client-ib-gbits-all-sizes-truncated.txt",
                 "ib_send_bw-server-ib-mbsec-old-layout-truncated.txt", "ib_send_bw-v5.60-roce-header-only.txt"):
        parsed = kt.parse_perftest(_rec(name))
        assert not parsed["ok"] and parsed["problems"], name
    cut = kt.parse_perftest(_rec("ib_write_bw-client-ib-gbits-all-sizes-truncated.txt"))
    assert [r["bytes"] for r in cut["rows"]] == [2, 4, 8]
    assert any("truncated" in p for p in cut["problems"])


def test_perftest_port_down_error():
    parsed = kt.parse_perftest(_rec("ib_write_bw-port-down-stderr.txt"))
    assert not parsed["ok"]
    assert "perftest reported: Port number 1 state is Down" in parsed["problems"]


def test_perftest_post_list_duration_and_old_send_layout():
    post = kt.parse_perftest(_rec("ib_write_bw-roce-gbits-postlist-duration.txt"))
    assert post["ok"] and post["test"] == "RDMA_Write Post List BW" and post["rows"][0]["iterations"] == 224958464
    old = kt.parse_perftest(_rec("ib_send_bw-server-ib-mbsec-old-layout-truncated.txt"))
    assert old["test"] == "Send BW" and old["device"] == "mlx5_1" and old["link_type"] == "IB"


@pytest.mark.parametrize("value", ["inf", "nan", "-nan", "-12.5", "1e400"])
def test_perftest_non_finite_or_negative_value(value):
    text = _rec("ib_write_bw-client-ib-ndr-gbits-derived.txt").replace("392.17", value)
    parsed = kt.parse_perftest(text)
    assert not parsed["ok"] and parsed["bw_avg_gbps"] is None
    assert any("non-finite" in p or "not a number" in p for p in parsed["problems"])


def test_perftest_largest_row_wins():
    text = _rec("ib_write_bw-client-ib-ndr-gbits-derived.txt").replace(
        " 65536      5000 ", " 8388608    5000             398.00             397.50\t\t   0.005924\n 65536      5000 ")
    parsed = kt.parse_perftest(text)
    assert parsed["ok"] and parsed["bw_avg_gbps"] == 397.5 and len(parsed["rows"]) == 2


# --------------------------------------------------------------------------- sysfs core
def _port_files(hca="mlx5_0", port="1", **over):
    base = f"class/infiniband/{hca}/"
    files = {
        base + "hca_type": "MT4129\n", base + "fw_ver": "28.39.1002\n", base + "board_id": "MT_0000000838\n",
        base + "node_guid": "a088:c203:0000:1000\n", base + "sys_image_guid": "a088:c203:0000:1000\n",
        base + "node_type": "1: CA\n", base + "device@link": "0000:1a:00.0", base + "device/numa_node": "0\n",
        base + "device/net/ibp26s0/dev_port": "0\n",
        base + f"ports/{port}/state": "4: ACTIVE\n", base + f"ports/{port}/phys_state": "5: LinkUp\n",
        base + f"ports/{port}/rate": "400 Gb/sec (4X NDR)\n", base + f"ports/{port}/link_layer": "InfiniBand\n",
        base + f"ports/{port}/lid": "0x1a\n", base + f"ports/{port}/sm_lid": "0x1\n",
        base + f"ports/{port}/gids/0": "fe80:0000:0000:0000:a088:c203:0000:1000\n",
        base + f"ports/{port}/counters/symbol_error": "0\n", base + f"ports/{port}/counters/link_downed": "3\n",
        base + f"ports/{port}/hw_counters/out_of_buffer": "7\n",
    }
    files.update({base + k: v for k, v in over.items()})
    return files


def test_sysfs_core_contract_shape():
    parsed = kf.parse_sysfs_files(_port_files())
    assert parsed["problems"] == []
    hca = parsed["hcas"][0]
    assert {k: hca[k] for k in ("name", "hca_type", "model", "pci_address", "numa_node", "node_type")} == \
        {"name": "mlx5_0", "hca_type": "MT4129", "model": "ConnectX-7", "pci_address": "0000:1a:00.0",
         "numa_node": 0, "node_type": "CA"}
    port = hca["ports"][0]
    assert port == {"port": 1, "state": "ACTIVE", "state_code": 4, "phys_state": "LinkUp", "phys_state_code": 5,
                    "rate": "400 Gb/sec (4X NDR)", "rate_gbps": 400.0, "width": "4X", "speed": "NDR",
                    "link_layer": "InfiniBand", "lid": 26, "sm_lid": 1,
                    "gid0": "fe80:0000:0000:0000:a088:c203:0000:1000", "netdevs": ["ibp26s0"],
                    "counters": {"link_downed": 3, "symbol_error": 0}, "hw_counters": {"out_of_buffer": 7}}


def test_sysfs_core_roce_netdev_from_gid_attrs():
    files = _port_files(**{"ports/1/link_layer": "Ethernet\n", "ports/1/gid_attrs/ndevs/0": "enp26s0f0np0\n"})
    del files["class/infiniband/mlx5_0/device/net/ibp26s0/dev_port"]
    parsed = kf.parse_sysfs_files(files)
    assert parsed["hcas"][0]["ports"][0]["netdevs"] == ["enp26s0f0np0"]


@pytest.mark.parametrize("key,value,needle", [
    ("ports/1/rate", "garbage\n", "rate 'garbage' is not '<N> Gb/sec (<width> <speed>)'"),
    ("ports/1/state", "ACTIVE\n", "is not '<code>: <STATE>'"),
    ("ports/1/counters/symbol_error", "-4\n", "counter symbol_error"),
    ("ports/1/counters/symbol_error", "99999999999999999999999\n", "counter symbol_error"),
    ("ports/1/lid", "0x1ffff\n", "not a 16-bit LID"),
    ("hca_type", "MT9999\n", "not in HCA_MODELS"),
    ("ports/1/link_layer", "Omni-Path\n", "neither InfiniBand nor Ethernet"),
    ("device/numa_node", "zero\n", "numa_node"),
])
def test_sysfs_core_hostile_values(key, value, needle):
    parsed = kf.parse_sysfs_files(_port_files(**{key: value}))
    assert any(needle in p for p in parsed["problems"]), parsed["problems"]


def test_sysfs_core_missing_files_are_problems():
    files = {"class/infiniband/mlx5_0/": "", "class/infiniband/mlx5_0/ports/1/": ""}
    parsed = kf.parse_sysfs_files(files)
    text = " ".join(parsed["problems"])
    assert "no hca_type" in text and "no state file" in text and "no rate file" in text
    assert kf.parse_sysfs_files("not a mapping")["problems"]


def test_read_sysfs_on_a_tree(tmp_path):
    for rel, text in _port_files().items():
        if rel.endswith("@link"):
            continue
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    pci = tmp_path / "bus" / "pci" / "devices" / "0000:1a:00.0"
    pci.mkdir(parents=True)
    (pci / "numa_node").write_text("1\n")
    device = tmp_path / "class" / "infiniband" / "mlx5_0" / "device"
    shutil.copytree(device, pci, dirs_exist_ok=True)
    shutil.rmtree(device)
    device.symlink_to(Path("..", "..", "..", "bus", "pci", "devices", "0000:1a:00.0"))
    facts = kf.read_sysfs(str(tmp_path))
    assert facts["problems"] == [] and facts["sysfs_root"] == str(tmp_path)
    assert facts["hcas"][0]["pci_address"] == "0000:1a:00.0" and facts["hcas"][0]["ports"][0]["netdevs"] == ["ibp26s0"]
    assert kf.read_sysfs(str(tmp_path / "none")) == {"sysfs_root": str(tmp_path / "none"), "hcas": [], "problems": []}


# --------------------------------------------------------------------------- gpudirect
def test_gpudirect_facts(tmp_path):
    sysfs, proc = tmp_path / "sys", tmp_path / "proc"
    (sysfs / "module" / "nvidia").mkdir(parents=True)
    (proc / "driver" / "nvidia").mkdir(parents=True)
    version = proc / "driver" / "nvidia" / "version"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n")
    facts = kf.gpudirect_facts(str(sysfs), str(proc), "6.1.0-28-amd64")
    assert facts == {"kernel": "6.1.0-28-amd64", "nvidia_loaded": True, "open_modules": True,
                     "peermem_loaded": False, "dma_buf_kernel": True, "problems": []}
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Thu Sep 25 2025\n")
    (sysfs / "module" / "nvidia_peermem").mkdir()
    facts = kf.gpudirect_facts(str(sysfs), str(proc), "5.4.0-150-generic")
    assert (facts["open_modules"], facts["peermem_loaded"], facts["dma_buf_kernel"]) == (False, True, False)
    version.unlink()
    facts = kf.gpudirect_facts(str(sysfs), str(proc), None)
    assert facts["open_modules"] is None and facts["dma_buf_kernel"] is False and len(facts["problems"]) == 2


# --------------------------------------------------------------------------- merge
def _sysfs_facts(**over):
    parsed = kf.parse_sysfs_files(_port_files(**over))
    return {"sysfs_root": "/sys", **parsed}


def _ibstat_for(state="Active", rate="400", lid="26"):
    return kt.parse_ibstat(f"CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n"
                           f"\tNode GUID: 0xa088c20300001000\n\tPort 1:\n\t\tState: {state}\n"
                           f"\t\tPhysical state: LinkUp\n\t\tRate: {rate}\n\t\tBase lid: {lid}\n\t\tSM lid: 1\n"
                           f"\t\tLink layer: InfiniBand\n")


def test_merge_agreeing_sources():
    facts = kf.merge_sources(_sysfs_facts(), ibstat=_ibstat_for(), gpudirect={"kernel": "6.1", "problems": []})
    assert facts["schema"] == "kiln.fabric/v1" and facts["problems"] == []
    assert facts["gpudirect"] == {"kernel": "6.1"}


def test_merge_contradiction_names_both_values():
    facts = kf.merge_sources(_sysfs_facts(**{"ports/1/state": "1: DOWN\n"}), ibstat=_ibstat_for())
    assert "mlx5_0 port 1: state: sysfs says 'DOWN', ibstat says 'ACTIVE'" in facts["problems"]
    assert facts["hcas"][0]["ports"][0]["state"] == "DOWN"
    facts = kf.merge_sources(_sysfs_facts(), ibstat=_ibstat_for(rate="200"))
    assert "mlx5_0 port 1: rate_gbps: sysfs says 400.0, ibstat says 200.0" in facts["problems"]


def test_merge_missing_hca_in_either_source():
    other = kt.parse_ibstat("CA 'mlx5_9'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n"
                            "\t\tRate: 400\n\t\tLink layer: InfiniBand\n")
    facts = kf.merge_sources(_sysfs_facts(), ibstat=other)
    assert "mlx5_9: ibstat lists it but sysfs has no such HCA" in facts["problems"]
    assert "mlx5_0: in sysfs but ibstat does not list it" in facts["problems"]


def test_merge_perfquery_counters():
    pq = kt.parse_perfquery(_rec("perfquery-x-rhel75.txt").replace("Lid 10 port 1", "Lid 26 port 1"))
    facts = kf.merge_sources(_sysfs_facts(), perfquery=pq)
    port = facts["hcas"][0]["ports"][0]
    assert "mlx5_0 port 1: counter link_downed: sysfs says 3, perfquery says 0" in facts["problems"]
    assert port["counters"]["port_rcv_errors"] == 0 and port["counter_sources"]["port_rcv_errors"] == "perfquery"
    assert port["counters"]["link_downed"] == 3
    stray = kt.parse_perfquery(_rec("perfquery-x-rhel75.txt"))
    assert any("no sysfs port has that LID" in p for p in kf.merge_sources(_sysfs_facts(), perfquery=stray)["problems"])


def test_merge_hostile_inputs():
    facts = kf.merge_sources("nope", ibstat=["x"], perfquery=7)
    assert facts["hcas"] == [] and len(facts["problems"]) == 3


# --------------------------------------------------------------------------- properties
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=400)


@settings(max_examples=150, deadline=None)
@given(_TEXT)
def test_parsers_never_raise_on_arbitrary_text(text):
    for parse in (kt.parse_ibstat, kt.parse_ibv_devinfo, kt.parse_perfquery, kt.parse_perftest):
        result = parse(text)
        assert isinstance(result["problems"], list)
    assert kt.parse_perftest(text)["ok"] is False or kt.parse_perftest(text)["rows"]


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.none(), st.integers(), st.lists(st.integers()), st.binary(max_size=50), st.dictionaries(st.text(), st.text())))
def test_parsers_refuse_wrong_types(value):
    for parse in (kt.parse_ibstat, kt.parse_ibv_devinfo, kt.parse_perfquery, kt.parse_perftest):
        result = parse(value)
        assert result["problems"]


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(_port_files())), _TEXT, max_size=12))
def test_sysfs_core_never_raises_and_flags_damage(damage):
    files = dict(_port_files(), **damage)
    parsed = kf.parse_sysfs_files(files)
    for hca in parsed["hcas"]:
        for port in hca["ports"]:
            if port["rate_gbps"] is not None:
                assert math.isfinite(port["rate_gbps"]) and port["rate_gbps"] > 0
            if port["state"] is None:
                assert parsed["problems"]


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=0, max_value=1e6, allow_nan=False), st.integers(min_value=1, max_value=2 ** 30),
       st.sampled_from(["Gb/sec", "MB/sec"]))
def test_perftest_round_trip(avg, size, units):
    text = (" Device         : mlx5_0\n                    RDMA_Write BW Test\n"
            f" #bytes     #iterations    BW peak[{units}]    BW average[{units}]   MsgRate[Mpps]\n"
            f" {size:<7d}    5000             {avg:.2f}             {avg:.2f}\t\t   0.1\n" + "-" * 87 + "\n")
    parsed = kt.parse_perftest(text)
    assert parsed["ok"]
    expected = round(avg, 2) if units == "Gb/sec" else round(avg, 2) * 1048576 * 8 / 1e9
    assert parsed["bw_avg_gbps"] == pytest.approx(expected, rel=1e-6, abs=1e-6)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=2 ** 64 - 1))
def test_guid_normalization_round_trip(value):
    guid = kf.normalize_guid(f"0x{value:016x}")
    assert guid is not None and kf.normalize_guid(guid) == guid and len(guid) == 19
