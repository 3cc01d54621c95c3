"""The controller configuration: SSH host key checking stays on for real sites (issue 31 #11c)."""
from __future__ import annotations

import configparser
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_root_ansible_cfg_keeps_host_key_checking_on():
    cfg = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";",))
    cfg.read(REPO / "ansible.cfg")
    assert cfg.has_option("defaults", "host_key_checking"), "state it: ansible-core's default may not be what a site runs"
    assert cfg.getboolean("defaults", "host_key_checking") is True
    # nor turned off through the SSH arguments
    ssh_args = cfg.get("ssh_connection", "ssh_args", fallback="")
    assert "StrictHostKeyChecking=no" not in ssh_args and "UserKnownHostsFile=/dev/null" not in ssh_args


def test_only_the_test_bed_turns_it_off_for_itself():
    molecule = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text())
    assert molecule["provisioner"]["config_options"]["defaults"]["host_key_checking"] is False
    testbed = yaml.safe_load((REPO / "inventories" / "testbed" / "hosts.yml").read_text())
    assert testbed["all"]["vars"]["ansible_connection"] == "podman"  # no SSH, no host keys
    # no site inventory, group_vars or playbook switches it off
    for path in [*REPO.glob("inventories/**/*.yml"), *REPO.glob("playbooks/**/*.yml"), REPO / "site.yml",
                 *REPO.glob("roles/*/defaults/*.yml"), *REPO.glob("roles/*/vars/*.yml")]:
        text = path.read_text().lower()
        for needle in ("host_key_checking: false", "stricthostkeychecking=no", "host_key_checking=false"):
            assert needle not in text, f"{path.relative_to(REPO)}: {needle}"
