"""testinfra hosts for kiln's molecule scenarios, reached with `podman exec`.

testinfra's ansible backend does not know podman connections and falls back
to running an Ansible module per command (seconds each); its podman backend
runs the same commands directly. Import `podman_hosts` in a scenario's tests:

    from kiln_testinfra import podman_hosts
    testinfra_hosts = podman_hosts()
"""
from __future__ import annotations

import os

import yaml


def podman_hosts(group: str = "all") -> list[str]:
    """podman:// URIs of the hosts of a group in molecule's inventory."""
    path = os.environ["MOLECULE_INVENTORY_FILE"]
    with open(path, encoding="utf-8") as handle:
        inventory = yaml.safe_load(handle)
    if group == "all":
        hosts = list((inventory.get("all") or {}).get("hosts") or {})
    else:
        hosts = list((inventory.get(group) or {}).get("hosts") or {})
    return [f"podman://{name}" for name in hosts]
