"""Resolution: a stack expanded into exact versions (module resolve)."""

from __future__ import annotations

from kiln_compat_engine.resolve import kiln_resolve_stack

STACK = {"gpu": "H100-SXM5-80GB", "driver": "550.127.05", "driver_flavor": "open", "fabricmanager": "550.127.05",
         "cuda": "12.4", "cudnn": "9.5.1.17", "nccl": "2.21.5", "container_toolkit": "1.17.8", "dcgm": "4.6.0",
         "torch": "2.5", "ofed": {"kind": "doca", "version": "3.2.1"}}  # test_compat_engine_packages.STACK


def test_resolve_stack() -> None:
    r = kiln_resolve_stack(dict(STACK, os="Rocky-9.4"))
    assert r["os"] == "rhel-9" and r["pkg_mgr"] == "dnf" and r["cuda_full"] == "12.4.1"
    assert r["driver_branch"] == "550" and r["nccl_build"] == "12.4" and r["torch_variant"] == "cu124"
    assert r["dcgm_cuda_major"] == "12" and r["gpu_info"]["arch"] == "hopper"


def test_resolve_names_what_a_shorter_version_resolved_to() -> None:
    r = kiln_resolve_stack({"os": "ubuntu-24.04", "cuda": "12.6", "cudnn": "9.5.1"})
    assert r["cudnn"] == "9.5.1.17" and r["resolved_from"] == {"cudnn": "9.5.1"}
    assert "resolved_from" not in kiln_resolve_stack(STACK)
