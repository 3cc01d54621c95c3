"""Lookups in the compatibility data: GPUs by model, variant and PCI id (module lookup)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from kiln_compat_engine.lookup import _cuda_release, _driver_branch, _os_entry, kiln_gpu_pci_models, kiln_gpu_spec


def test_gpu_by_pci_id_and_variant() -> None:
    assert kiln_gpu_spec("10de:2330")["model"] == "H100"
    assert kiln_gpu_spec("H100-SXM5-80GB")["nvswitch"] is True
    assert kiln_gpu_spec("nvidia h100 pcie")["pci_id"] == "10de:2331"
    with pytest.raises(AnsibleFilterError, match=r"^kiln_gpu_spec: unknown GPU '10de:ffff'; known models: "):
        kiln_gpu_spec("10de:ffff")


def test_os_cuda_and_driver_lookups() -> None:
    assert _os_entry("Rocky-9.4")[0] == "rhel-9" and _os_entry("ubuntu-24.04")[0] == "ubuntu-24.04"
    assert _os_entry("plan9") is None and _os_entry("x" * 40) is None
    assert _cuda_release("12.4")[0] == "12.4.1" and _cuda_release("12.4.0")[0] == "12.4.0"
    assert _cuda_release("12") is None and _cuda_release("99.1") is None
    assert _driver_branch("550.127.05")[0] == "550" and _driver_branch("550") is None


def test_gpu_pci_models_feed_the_facts_module() -> None:
    models = kiln_gpu_pci_models()
    assert models["10de:2330"] == {"model": "H100-SXM5-80GB", "architecture": "hopper", "nvswitch": True, "family": "H100"}
    assert set(kiln_gpu_pci_models(["L40S"])) == {"10de:26b9"}
    assert kiln_gpu_spec(models["10de:2330"]["model"])["pci_id"] == "10de:2330"
