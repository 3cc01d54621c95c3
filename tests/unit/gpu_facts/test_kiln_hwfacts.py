"""Tests for module_utils/kiln/facts/hardware.py and the GPU emulator fixtures (no GPU needed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kiln.facts import hardware
from kiln_loader import load_source

import pytest

from kiln_paths import REPO
FIXTURES = REPO / "tests" / "fixtures" / "nvidia-smi"
EMULATOR_DIR = REPO / "tests" / "fixtures" / "gpu-emulator"
PROFILES = sorted((EMULATOR_DIR / "profiles").glob("*.json"))


_load = load_source


kg = hardware
emulator = _load("kiln_nvidia_smi_emulator", EMULATOR_DIR / "nvidia-smi")
make_sysfs = _load("kiln_make_sysfs", EMULATOR_DIR / "make-sysfs.py")

H100_MODELS = {
    "10de:2330": {"model": "H100-SXM5-80GB", "architecture": "hopper", "nvswitch": True},
    "10de:26b9": {"name": "L40S", "arch": "ada", "nvswitch": False},  # compat.yml spelling
}


# --------------------------------------------------------------------------- recorded XML
RECORDED = [
    # file, driver, cuda, name, pci id, (gen cur, gen max, width cur, width max), reasons field,
    # active reasons, remapped rows supported, power draw, power limit, temp, aggregate correctable
    ("a100-sxm4-80gb-535.54.03.xml", "535.54.03", "12.2", "NVIDIA A100-SXM4-80GB", "10de:20b2",
     (4, 4, 16, 16), "clocks_event_reasons", [], False, 67.03, 500.0, 27, 0),
    ("synthetic-h100-sxm5-565.57.01.xml", "565.57.01", "12.7", "NVIDIA H100 80GB HBM3", "10de:2330",
     (5, 5, 16, 16), "clocks_event_reasons", ["gpu_idle"], True, 100.89, 700.0, 30, 0),
    ("a10g-515.105.01.xml", "515.105.01", "11.7", "NVIDIA A10G", None,
     (1, 4, 8, 16), "clocks_throttle_reasons", ["gpu_idle"], True, 25.58, 300.0, 17, 0),
    ("tesla-p100-pcie-510.47.03.xml", "510.47.03", "11.6", "Tesla P100-PCIE-16GB", "10de:15f8",
     (3, 3, 16, 16), "clocks_throttle_reasons", ["gpu_idle"], False, 26.16, 250.0, 38, 3),
    ("recorded-h200-580.159.04/nvidia-smi-q-x", "580.159.04", "13.0", "NVIDIA H200", "10de:2335",
     (5, 5, 16, 16), "clocks_event_reasons", ["gpu_idle"], True, 77.32, 700.0, 36, 0),
]


@pytest.mark.parametrize(
    "fname,driver,cuda,name,pci_id,pcie,field,reasons,remap,draw,limit,temp,agg_corr", RECORDED,
    ids=[r[0] for r in RECORDED])
def test_parse_recorded_xml(fname, driver, cuda, name, pci_id, pcie, field, reasons, remap, draw, limit,
                            temp, agg_corr):
    parsed = kg.parse_nvidia_smi_xml((FIXTURES / fname).read_text())
    assert parsed["driver_version"] == driver
    assert parsed["cuda_version"] == cuda
    assert len(parsed["gpus"]) == 1
    gpu = parsed["gpus"][0]
    assert set(kg.GPU_KEYS) <= set(gpu)
    assert gpu["name"] == name
    assert gpu["pci_device_id"] == pci_id
    assert gpu["uuid"].startswith("GPU-")
    assert gpu["vbios"]
    assert (gpu["pcie"]["gen_current"], gpu["pcie"]["gen_max"],
            gpu["pcie"]["width_current"], gpu["pcie"]["width_max"]) == pcie
    assert gpu["clock_event_reasons_field"] == field
    assert gpu["clock_event_reasons_active"] == reasons
    assert gpu["remapped_rows"]["supported"] is remap
    if remap:
        assert gpu["remapped_rows"]["pending"] is False and gpu["remapped_rows"]["failure"] is False
    assert gpu["power_draw_w"] == draw
    assert gpu["power_limit_w"] == limit
    assert gpu["temperature_c"] == temp
    assert gpu["ecc"]["aggregate_correctable"] == agg_corr
    assert gpu["ecc"]["volatile_uncorrectable"] == 0
    assert gpu["nvlink"] is None  # -q -x carries no NVLink link states


def test_synthetic_h100_details():
    gpu = kg.parse_nvidia_smi_xml((FIXTURES / "synthetic-h100-sxm5-565.57.01.xml").read_text())["gpus"][0]
    assert gpu["persistence_mode"] is True
    assert gpu["fabric"] == {"state": "Completed", "status": "Success", "clique_id": 0,
                             "cluster_uuid": "00000000-0000-0000-0000-000000000000", "health_summary": None}
    assert gpu["pcie"]["replay_count"] == 7
    assert gpu["pci_bus_id"] == "00000000:18:00.0"
    assert gpu["memory_total_mib"] == 81559
    assert gpu["architecture"] == "Hopper"


def test_recorded_h200_details():
    """A real Hopper capture (nvsmi_device_v13.dtd): a pass-through VM's single H200 outside NVSwitch."""
    here = FIXTURES / "recorded-h200-580.159.04"
    gpu = kg.parse_nvidia_smi_xml((here / "nvidia-smi-q-x").read_text())["gpus"][0]
    assert gpu["architecture"] == "Hopper"
    assert gpu["persistence_mode"] is True
    assert gpu["memory_total_mib"] == 143771
    assert gpu["pci_bus_id"] == "00000000:00:06.0"
    assert gpu["mig_mode"] == "Disabled"
    assert gpu["memory_repair"] == "row_remap"
    # N/A fabric fields (no NVSwitch in a pass-through VM) read as unknown, never as a state.
    assert gpu["fabric"] == {"state": None, "status": None, "clique_id": None, "cluster_uuid": None,
                             "health_summary": None}
    # The text and CSV captures of the same GPU agree with the XML.
    text = (here / "nvidia-smi-q").read_text()
    assert "Driver Version                                         : 580.159.04" in text
    csv_row = (here / "nvidia-smi-csv").read_text().splitlines()[1].split(", ")
    assert csv_row[1:5] == [gpu["name"], gpu["pci_bus_id"], "580.159.04", gpu["vbios"]]


def test_a100_mig_hides_remapped_rows():
    gpu = kg.parse_nvidia_smi_xml((FIXTURES / "a100-sxm4-80gb-535.54.03.xml").read_text())["gpus"][0]
    assert gpu["mig_mode"] == "Enabled"
    assert gpu["remapped_rows"] == {"supported": False, "correctable": None, "uncorrectable": None,
                                    "pending": None, "failure": None}


@pytest.mark.parametrize("text", [
    "", "   \n", "not xml at all", "<nvidia_smi_log><gpu>", "<other_root/>",
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
])
def test_malformed_xml_raises_value_error(text):
    with pytest.raises(ValueError):
        kg.parse_nvidia_smi_xml(text)


def test_log_without_gpus_gives_empty_list():
    parsed = kg.parse_nvidia_smi_xml("<nvidia_smi_log><driver_version>580.95.05</driver_version>"
                                     "<attached_gpus>0</attached_gpus></nvidia_smi_log>")
    assert parsed == {"driver_version": "580.95.05", "cuda_version": None, "attached_gpus": 0, "gpus": []}


def test_newer_power_and_ecc_fields():
    """575+: instant/average power draw; 555+: parity/secded SRAM counters are summed."""
    xml = """<nvidia_smi_log><gpu id="00000000:01:00.0">
      <ecc_errors><volatile><sram_correctable>2</sram_correctable>
        <sram_uncorrectable_parity>1</sram_uncorrectable_parity>
        <sram_uncorrectable_secded>2</sram_uncorrectable_secded>
        <dram_correctable>N/A</dram_correctable><dram_uncorrectable>3</dram_uncorrectable></volatile>
      <aggregate><sram_correctable>N/A</sram_correctable></aggregate></ecc_errors>
      <remapped_rows><remapped_row_corr>1</remapped_row_corr><remapped_row_unc>2</remapped_row_unc>
        <remapped_row_pending>Yes</remapped_row_pending><remapped_row_failure>No</remapped_row_failure>
      </remapped_rows>
      <clocks_event_reasons><clocks_event_reason_hw_slowdown>Active</clocks_event_reason_hw_slowdown>
        <clocks_event_reason_sw_thermal_slowdown>Active</clocks_event_reason_sw_thermal_slowdown>
        <clocks_event_reason_gpu_idle>Not Active</clocks_event_reason_gpu_idle></clocks_event_reasons>
      <gpu_power_readings><average_power_draw>11.15 W</average_power_draw>
        <instant_power_draw>11.26 W</instant_power_draw><current_power_limit>95.00 W</current_power_limit>
      </gpu_power_readings></gpu></nvidia_smi_log>"""
    gpu = kg.parse_nvidia_smi_xml(xml)["gpus"][0]
    assert gpu["ecc"] == {"volatile_correctable": 2, "volatile_uncorrectable": 6,
                          "aggregate_correctable": None, "aggregate_uncorrectable": None,
                          "volatile_sram_uncorrectable": 3, "volatile_dram_uncorrectable": 3,
                          "aggregate_sram_uncorrectable": None, "aggregate_dram_uncorrectable": None}
    assert gpu["remapped_rows"] == {"supported": True, "correctable": 1, "uncorrectable": 2,
                                    "pending": True, "failure": False}
    assert gpu["clock_event_reasons_active"] == ["hw_slowdown", "sw_thermal_slowdown"]
    assert gpu["power_draw_w"] == 11.26
    assert gpu["power_limit_w"] == 95.0
    assert gpu["pci_bus_id"] == "00000000:01:00.0"  # from the id attribute when <pci> is missing


# --------------------------------------------------------------------------- ECC split, memory repair
SPLIT = [
    # file, volatile (sram, dram, total), aggregate (sram, dram, total), memory_repair
    ("a100-sxm4-80gb-535.54.03.xml", (0, 0, 0), (0, 0, 0), "row_remap"),  # MIG hides remapped rows
    ("a10g-515.105.01.xml", (0, 0, 0), (0, 0, 0), "row_remap"),
    ("synthetic-h100-sxm5-565.57.01.xml", (0, 0, 0), (0, 0, 0), "row_remap"),  # parity/secded layout
    ("tesla-p100-pcie-510.47.03.xml", (0, 0, 0), (0, 0, 0), "page_retirement"),
]


@pytest.mark.parametrize("fname,vol,agg,repair", SPLIT, ids=[r[0] for r in SPLIT])
def test_ecc_split_and_memory_repair_on_recorded_xml(fname, vol, agg, repair):
    gpu = kg.parse_nvidia_smi_xml((FIXTURES / fname).read_text())["gpus"][0]
    ecc = gpu["ecc"]
    assert (ecc["volatile_sram_uncorrectable"], ecc["volatile_dram_uncorrectable"],
            ecc["volatile_uncorrectable"]) == vol
    assert (ecc["aggregate_sram_uncorrectable"], ecc["aggregate_dram_uncorrectable"],
            ecc["aggregate_uncorrectable"]) == agg
    assert gpu["memory_repair"] == repair


def test_pascal_double_bit_units_map_to_sram_and_dram():
    """Pascal/Volta: double_bit/device_memory is the DRAM, the other units are on-chip SRAM."""
    xml = """<nvidia_smi_log><gpu id="00000000:04:00.0"><product_architecture>Pascal</product_architecture>
      <ecc_mode><current_ecc>Enabled</current_ecc></ecc_mode>
      <ecc_errors><volatile>
        <single_bit><device_memory>5</device_memory><register_file>0</register_file><total>5</total></single_bit>
        <double_bit><device_memory>2</device_memory><register_file>1</register_file><l1_cache>N/A</l1_cache>
          <l2_cache>1</l2_cache><texture_memory>0</texture_memory><texture_shm>0</texture_shm><cbu>N/A</cbu>
          <total>4</total></double_bit></volatile>
      <aggregate><double_bit><total>9</total></double_bit></aggregate></ecc_errors>
      <retired_pages><multiple_single_bit_retirement><retired_count>1</retired_count></multiple_single_bit_retirement>
        <double_bit_retirement><retired_count>3</retired_count></double_bit_retirement>
        <pending_retirement>Yes</pending_retirement></retired_pages>
      <remapped_rows>N/A</remapped_rows></gpu></nvidia_smi_log>"""
    gpu = kg.parse_nvidia_smi_xml(xml)["gpus"][0]
    assert gpu["ecc"] == {"volatile_correctable": 5, "volatile_uncorrectable": 4,
                          "volatile_sram_uncorrectable": 2, "volatile_dram_uncorrectable": 2,
                          "aggregate_correctable": None, "aggregate_uncorrectable": 9,
                          "aggregate_sram_uncorrectable": None, "aggregate_dram_uncorrectable": None}
    assert gpu["retired_pages"] == {"single_bit": 1, "double_bit": 3, "pending": True}
    assert gpu["memory_repair"] == "page_retirement" and gpu["remapped_rows"]["supported"] is False


def test_ecc_disabled_counts_are_none():
    xml = """<nvidia_smi_log><gpu id="00000000:01:00.0"><ecc_mode><current_ecc>Disabled</current_ecc></ecc_mode>
      <ecc_errors><volatile><sram_correctable>N/A</sram_correctable><sram_uncorrectable>N/A</sram_uncorrectable>
      <dram_correctable>N/A</dram_correctable><dram_uncorrectable>N/A</dram_uncorrectable></volatile></ecc_errors>
      </gpu></nvidia_smi_log>"""
    gpu = kg.parse_nvidia_smi_xml(xml)["gpus"][0]
    assert gpu["ecc_mode"] == "Disabled"
    assert all(v is None for v in gpu["ecc"].values())
    assert gpu["memory_repair"] is None  # nothing reported, no architecture


def test_memory_repair_hint():
    assert kg.memory_repair("Hopper") == "row_remap" and kg.memory_repair("Ada Lovelace") == "row_remap"
    assert kg.memory_repair("Volta") == "page_retirement" and kg.memory_repair("turing") == "page_retirement"
    assert kg.memory_repair(None) is None and kg.memory_repair(42) is None and kg.memory_repair("Banana") is None
    # evidence beats the name
    assert kg.memory_repair("Pascal", {"supported": True}) == "row_remap"
    assert kg.memory_repair("Hopper", {"supported": False}, {"pending": False}) == "page_retirement"
    # summarize fills it from the PCI model table for sysfs-only GPUs
    facts = kg.summarize([{"address": "0000:18:00.0", "pci_id": "10de:2330", "kind": "gpu"}],
                         pci_models=H100_MODELS)
    assert facts["gpus"][0]["memory_repair"] == "row_remap"


@pytest.mark.parametrize("raw,expected", [
    ("233010DE", "10de:2330"), ("0x26B910DE", "10de:26b9"), ("000000DE", None), ("N/A", None), (None, None),
])
def test_pci_id_from_smi(raw, expected):
    assert kg.pci_id_from_smi(raw) == expected


# --------------------------------------------------------------------------- nvlink -s
def test_nvlink_recorded_h100():
    result = kg.parse_nvlink_status((FIXTURES / "nvlink-status-h100-sxm.txt").read_text())
    assert list(result) == [0]
    assert result[0]["links"] == 18 and result[0]["active"] == 18 and result[0]["inactive"] == 0
    assert result[0]["uuid"] == "GPU-5a10e6e5-95f7-2785-ed63-6f6147f304f7"


@pytest.mark.parametrize("text,expected", [
    ("", {}),
    ("GPU 0: NVIDIA A100 (UUID: GPU-a)\n\t Link 0: <inactive>\n\t Link 1: 25 GB/s\n",
     {0: (2, 1, 1)}),
    ("GPU 0: NVIDIA L40S (UUID: GPU-b)\nNVML: Unable to retrieve NVLink information as all links are inActive\n",
     {0: (0, 0, 0)}),
    ("GPU 3: X (UUID: GPU-c)\n\t Link 0: some future status\n", {3: (1, 0, 1)}),
])
def test_nvlink_states(text, expected):
    result = kg.parse_nvlink_status(text)
    assert {k: (v["links"], v["active"], v["inactive"]) for k, v in result.items()} == expected


# --------------------------------------------------------------------------- sysfs
def _dev(root: Path, addr: str, vendor: str, device: str, cls: str, numa: str = "0") -> None:
    d = root / "bus" / "pci" / "devices" / addr
    d.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("device", device), ("class", cls),
                        ("subsystem_vendor", "0x10de"), ("subsystem_device", "0x16c1"), ("numa_node", numa)):
        (d / name).write_text(value + "\n")


def test_scan_pci_missing_root_is_empty(tmp_path):
    assert kg.scan_pci_sysfs(str(tmp_path / "nope")) == []
    assert kg.scan_infiniband_sysfs(str(tmp_path / "nope")) == []


def test_scan_pci_classifies_devices(tmp_path):
    _dev(tmp_path, "0000:18:00.0", "0x10de", "0x2330", "0x030200")
    _dev(tmp_path, "0000:18:00.1", "0x10de", "0x22ba", "0x040300")   # audio function
    _dev(tmp_path, "0000:05:00.0", "0x10de", "0x22a3", "0x068000", "-1")  # NVSwitch
    _dev(tmp_path, "0000:41:00.0", "0x10de", "0x26b9", "0x030000")   # VGA class
    _dev(tmp_path, "0000:1a:00.0", "0x15b3", "0x1021", "0x020700")   # HCA, not NVIDIA
    found = kg.scan_pci_sysfs(str(tmp_path))
    assert [(d["address"], d["kind"], d["pci_id"]) for d in found] == [
        ("0000:05:00.0", "nvswitch", "10de:22a3"),
        ("0000:18:00.0", "gpu", "10de:2330"),
        ("0000:41:00.0", "gpu", "10de:26b9"),
    ]
    assert found[0]["numa_node"] == -1 and found[1]["numa_node"] == 0
    assert found[1]["subsystem_id"] == "10de:16c1"


def test_scan_infiniband_ports(tmp_path):
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
    (port / "link_layer").write_text("Ethernet\n")
    (tmp_path / "class" / "infiniband" / "mlx5_0" / "fw_ver").write_text("20.31.1014\n")
    (tmp_path / "class" / "infiniband" / "mlx5_1").mkdir()  # no ports, no files
    hcas = kg.scan_infiniband_sysfs(str(tmp_path))
    assert [h["name"] for h in hcas] == ["mlx5_0", "mlx5_1"]
    assert hcas[0]["fw_ver"] == "20.31.1014" and hcas[0]["board_id"] is None
    assert hcas[0]["ports"] == [{"port": 1, "state": "ACTIVE", "state_code": 4, "phys_state": "LinkUp",
                                 "phys_state_code": 5, "rate": "200 Gb/sec (4X HDR)", "rate_gbps": 200.0,
                                 "link_layer": "Ethernet"}]
    assert hcas[1]["ports"] == []


# --------------------------------------------------------------------------- summarize
def test_summarize_nothing_found():
    facts = kg.summarize([], smi=None, hcas=[], pci_models={}, driver_loaded=False)
    assert facts["gpus"] == [] and facts["hcas"] == [] and facts["models"] == []
    assert facts["gpu_count"] == 0 and facts["pci_gpu_count"] == 0 and facts["smi_gpu_count"] is None
    assert facts["source"] == "none" and facts["nvswitch_board"] is False and facts["architecture"] is None


def test_summarize_sysfs_only_uses_pci_models(tmp_path):
    _dev(tmp_path, "0000:18:00.0", "0x10de", "0x2330", "0x030200")
    _dev(tmp_path, "0000:19:00.0", "0x10de", "0x9999", "0x030200")
    facts = kg.summarize(kg.scan_pci_sysfs(str(tmp_path)), pci_models=H100_MODELS)
    assert facts["source"] == "sysfs" and facts["gpu_count"] == 2
    assert facts["models"] == ["H100-SXM5-80GB"]
    assert facts["unknown_pci_ids"] == ["10de:9999"]
    assert facts["nvswitch_board"] is True  # the model says so even without NVSwitch bridges visible
    assert facts["gpus"][0]["pcie"] is None and set(kg.GPU_KEYS) <= set(facts["gpus"][0])


def test_summarize_mixed_architectures():
    pci = [{"address": "0000:18:00.0", "pci_id": "10de:2330", "kind": "gpu"},
           {"address": "0000:41:00.0", "pci_id": "10de:26b9", "kind": "gpu"}]
    facts = kg.summarize(pci, pci_models=H100_MODELS)
    assert facts["architecture"] is None and facts["architectures"] == ["hopper", "ada"]


# --------------------------------------------------------------------------- emulator round trip
@pytest.fixture(params=PROFILES, ids=[p.stem for p in PROFILES])
def profile(request, monkeypatch):
    monkeypatch.setenv("KILN_GPU_PROFILE", str(request.param))
    monkeypatch.delenv("KILN_GPU_DRIVER_VERSION", raising=False)
    monkeypatch.delenv("KILN_GPU_DRIVER_LOADED", raising=False)
    return json.loads(request.param.read_text())


def _smi(*argv: str) -> str:
    rc, out, _err = emulator.run(list(argv))
    assert rc == 0
    return out


def test_emulator_xml_round_trips_profile(profile):
    parsed = kg.parse_nvidia_smi_xml(_smi("-q", "-x"))
    tmpl = profile["gpu"]
    assert parsed["driver_version"] == profile["driver_version"]
    assert parsed["cuda_version"] == profile["cuda_version"]
    assert parsed["attached_gpus"] == profile["gpu_count"] == len(parsed["gpus"])
    for index, gpu in enumerate(parsed["gpus"]):
        assert gpu["index"] == index
        assert gpu["name"] == tmpl["name"]
        assert gpu["pci_device_id"] == tmpl["pci_device_id"]
        assert kg._norm_bus(gpu["pci_bus_id"]) == profile["bus_ids"][index]
        assert gpu["memory_total_mib"] == tmpl["memory_total_mib"]
        assert gpu["power_limit_w"] == float(tmpl["power_limit_w"])
        assert gpu["pcie"]["width_max"] == tmpl["pcie_width"] == gpu["pcie"]["width_current"]
        assert gpu["persistence_mode"] is True
        assert gpu["clock_event_reasons_field"] == "clocks_event_reasons"
        assert gpu["remapped_rows"]["pending"] is False
        assert gpu["fabric"]["state"] == ("Completed" if profile["nvswitch_count"] else None)
    assert len({g["uuid"] for g in parsed["gpus"]}) == profile["gpu_count"]
    nvlink = kg.parse_nvlink_status(_smi("nvlink", "-s"))
    if tmpl["nvlink_count"]:
        assert {v["active"] for v in nvlink.values()} == {tmpl["nvlink_count"]}
        assert len(nvlink) == profile["gpu_count"]
    else:
        assert nvlink == {}
    assert _smi("-L").count("GPU ") == profile["gpu_count"]
    rows = _smi("--query-gpu=index,pci.device_id,driver_version", "--format=csv,noheader,nounits").splitlines()
    assert len(rows) == profile["gpu_count"]
    assert rows[0].split(", ")[2] == profile["driver_version"]
    assert "Driver Version: " + profile["driver_version"] in _smi()


def test_make_sysfs_and_scanners_agree(profile, tmp_path):
    counts = make_sysfs.build(profile, str(tmp_path))
    pci = kg.scan_pci_sysfs(str(tmp_path))
    hcas = kg.scan_infiniband_sysfs(str(tmp_path))
    assert counts["gpus"] == profile["gpu_count"] == sum(d["kind"] == "gpu" for d in pci)
    assert counts["nvswitches"] == profile["nvswitch_count"] == sum(d["kind"] == "nvswitch" for d in pci)
    assert counts["hcas"] == profile["hcas"]["count"] == len(hcas)
    assert all(h["ports"][0]["state"] == "ACTIVE" for h in hcas)
    assert {h["ports"][0]["link_layer"] for h in hcas} == {profile["hcas"]["link_layer"]}
    smi = kg.parse_nvidia_smi_xml(_smi("-q", "-x"))
    facts = kg.summarize(pci, smi=smi, hcas=hcas, pci_models=H100_MODELS,
                         nvlink=kg.parse_nvlink_status(_smi("nvlink", "-s")), driver_loaded=True)
    assert facts["source"] == "nvidia-smi"
    assert facts["gpu_count"] == facts["pci_gpu_count"] == facts["smi_gpu_count"] == profile["gpu_count"]
    assert facts["nvswitch_board"] is bool(profile["nvswitch_count"])
    assert facts["nvswitch_count"] == profile["nvswitch_count"]
    assert facts["unknown_pci_ids"] == []
    assert [g["numa_node"] for g in facts["gpus"]] == profile["numa_nodes"]
    assert {g["nvlink"]["active"] for g in facts["gpus"]} == {profile["gpu"]["nvlink_count"]}
    assert facts["hca_count"] == profile["hcas"]["count"]
    without = make_sysfs.build(profile, str(tmp_path / "nohca"), hcas=False)
    assert without["hcas"] == 0 and kg.scan_infiniband_sysfs(str(tmp_path / "nohca")) == []


def test_emulator_faults_and_overrides(tmp_path, monkeypatch):
    profile = json.loads((EMULATOR_DIR / "profiles" / "h100-sxm-8.json").read_text())
    profile["gpu_overrides"] = {"3": {"nvlink_inactive": [7], "remapped_rows_pending": True,
                                      "clock_event_reasons": ["hw_thermal_slowdown"], "pcie_width_current": 8,
                                      "ecc_volatile_uncorrectable": 2}}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile))
    monkeypatch.setenv("KILN_GPU_PROFILE", str(path))
    monkeypatch.setenv("KILN_GPU_DRIVER_VERSION", "525.147.05")
    smi = kg.parse_nvidia_smi_xml(_smi("-q", "-x"))
    gpu3 = smi["gpus"][3]
    assert smi["driver_version"] == "525.147.05"
    assert gpu3["clock_event_reasons_field"] == "clocks_throttle_reasons"  # pre-535 layout
    assert gpu3["clock_event_reasons_active"] == ["hw_thermal_slowdown"]
    assert gpu3["remapped_rows"]["pending"] is True
    assert gpu3["pcie"]["width_current"] == 8 and gpu3["ecc"]["volatile_uncorrectable"] == 2
    nvlink = kg.parse_nvlink_status(_smi("nvlink", "-s", "-i", "3"))
    assert nvlink == {3: {"links": 18, "active": 17, "inactive": 1, "uuid": gpu3["uuid"],
                          "speeds_gbps": [26.562] * 17}}
    assert _smi("--query-remapped-rows=gpu_bus_id,remapped_rows.pending",
                "--format=csv,noheader").splitlines()[3].endswith(", 1")
    monkeypatch.setenv("KILN_GPU_DRIVER_LOADED", "0")
    rc, out, _ = emulator.run(["-q", "-x"])
    assert rc == 9 and "couldn't communicate with the NVIDIA driver" in out


def test_emulator_rejects_unknown_field(monkeypatch):
    monkeypatch.setenv("KILN_GPU_PROFILE", str(PROFILES[0]))
    with pytest.raises(emulator.UsageError, match="not a valid field"):
        emulator.run(["--query-gpu=bogus", "--format=csv"])
    monkeypatch.setenv("KILN_GPU_PROFILE", "/nonexistent/profile.json")
    assert emulator.run(["-L"])[0] == 6


def test_emulator_memory_knobs(tmp_path, monkeypatch):
    """ECC split, ECC mode, hidden remapped rows (Ampere+) and retired pages (pre-Ampere) from a profile."""
    profile = json.loads((EMULATOR_DIR / "profiles" / "h100-sxm-8.json").read_text())
    profile["gpu_overrides"] = {"1": {"ecc_volatile_sram_uncorrectable": 2, "ecc_volatile_sram_parity": 1,
                                      "ecc_volatile_dram_uncorrectable": 3, "ecc_aggregate_dram_uncorrectable": 7},
                                "2": {"remapped_rows_na": True}, "3": {"ecc_mode": "Disabled"}}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile))
    monkeypatch.setenv("KILN_GPU_PROFILE", str(path))
    monkeypatch.delenv("KILN_GPU_DRIVER_LOADED", raising=False)
    for driver, parity in (("580.95.05", 1), ("535.183.01", 0)):  # parity/secded only from 555
        monkeypatch.setenv("KILN_GPU_DRIVER_VERSION", driver)
        xml = _smi("-q", "-x")
        assert ("<sram_uncorrectable_parity>" in xml) is (parity == 1)
        gpus = kg.parse_nvidia_smi_xml(xml)["gpus"]
        assert gpus[1]["ecc"]["volatile_sram_uncorrectable"] == 2 + parity
        assert gpus[1]["ecc"]["volatile_dram_uncorrectable"] == 3
        assert gpus[1]["ecc"]["volatile_uncorrectable"] == 5 + parity
        assert gpus[1]["ecc"]["aggregate_dram_uncorrectable"] == 7
        assert gpus[2]["remapped_rows"]["supported"] is False and gpus[2]["memory_repair"] == "row_remap"
        assert gpus[3]["ecc_mode"] == "Disabled" and gpus[3]["ecc"]["volatile_uncorrectable"] is None
        assert gpus[0]["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}
        query = _smi("--query-gpu=ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.volatile.sram",
                     "--format=csv,noheader", "-i", "1")
        assert query == f"{5 + parity}, 2\n"

    pascal = {"name": "p100", "driver_version": "510.47.03", "cuda_version": "11.6", "gpu_count": 2,
              "gpu": {"name": "Tesla P100-PCIE-16GB", "architecture": "Pascal", "pci_device_id": "10de:15f8"},
              "gpu_overrides": {"1": {"retired_pages_double_bit": 12, "retired_pages_single_bit": 2,
                                      "retired_pages_pending": True, "ecc_volatile_dram_uncorrectable": 1}}}
    path.write_text(json.dumps(pascal))
    monkeypatch.delenv("KILN_GPU_DRIVER_VERSION")
    gpus = kg.parse_nvidia_smi_xml(_smi("-q", "-x"))["gpus"]
    assert gpus[0]["retired_pages"] == {"single_bit": 0, "double_bit": 0, "pending": False}
    assert gpus[1]["retired_pages"] == {"single_bit": 2, "double_bit": 12, "pending": True}
    assert gpus[1]["ecc"]["volatile_dram_uncorrectable"] == 1 and gpus[1]["ecc"]["volatile_uncorrectable"] == 1
    assert all(g["remapped_rows"]["supported"] is False and g["memory_repair"] == "page_retirement" for g in gpus)
    query = _smi("--query-gpu=retired_pages.dbe,retired_pages.pending", "--format=csv,noheader", "-i", "1")
    assert query == "12, Yes\n"
