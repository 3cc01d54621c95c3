"""The controller configuration: the root ansible.cfg is a real site's -- SSH with pipelining, host key
checking on (issue 31 #11c), no default inventory and no test-bed path; the test bed gets its podman
connection from molecule's base config and the Makefile (tests/harness/lib.sh), and names its
inventory on every run (issue 32 #7)."""
from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kiln_paths import REPO


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


# ---- the root ansible.cfg is a real site's; the test bed brings its own connection and inventory (issue 32 #7)

def _root_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";",))
    cfg.read(REPO / "ansible.cfg")
    return cfg


def test_root_ansible_cfg_names_no_inventory_and_nothing_of_the_test_bed():
    cfg = _root_cfg()
    # a plain `ansible-playbook site.yml` must not aim at the simulated cluster: every run names its site
    assert not cfg.has_option("defaults", "inventory") and not cfg.has_option("defaults", "hostfile")
    assert not cfg.has_option("defaults", "connection_plugins"), "the podman connection is the test bed's"
    for section in cfg.sections():
        for key, value in cfg.items(section):
            assert "tests/" not in value and "testbed" not in value and "molecule" not in value, \
                f"[{section}] {key} = {value}: a test-bed path in the site's configuration"
    # kiln's own code stays on its paths
    for key in ("roles_path", "library", "module_utils", "filter_plugins", "callback_plugins"):
        assert (REPO / cfg.get("defaults", key)).is_dir(), key


def test_root_ansible_cfg_connects_over_ssh_with_pipelining():
    cfg = _root_cfg()
    assert cfg.getboolean("ssh_connection", "pipelining") is True
    assert not cfg.has_option("defaults", "transport"), "SSH, Ansible's default connection"
    assert "ansible_connection" not in (REPO / "ansible.cfg").read_text()


def test_what_ansible_reads_from_the_root_cfg_names_no_test_path(tmp_path):
    """ansible-config's own view of the file (any key, any section, as Ansible resolves it)."""
    config = shutil.which("ansible-config", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if config is None:
        pytest.skip("ansible-config not found")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_HOME=str(tmp_path / "ansible-home"), ANSIBLE_NOCOLOR="1")
    out = subprocess.run([config, "dump", "--only-changed"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    changed = {line.split("(", 1)[0] for line in out.splitlines() if "(" in line}
    assert "HOST_KEY_CHECKING" in changed and "DEFAULT_ROLES_PATH" in changed, out
    assert "DEFAULT_HOST_LIST" not in changed and "DEFAULT_CONNECTION_PLUGIN_PATH" not in changed, out
    assert str(REPO / "tests") not in out, out


def test_the_test_beds_connection_comes_from_molecule_and_the_makefile():
    plugins = REPO / "tests" / "harness" / "connection_plugins"
    assert (plugins / "podman.py").is_file()
    # molecule: every scenario (its own ansible.cfg, written by molecule, never the root one)
    molecule = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text())
    env = molecule["provisioner"]["env"]
    assert env["ANSIBLE_CONNECTION_PLUGINS"] == "${MOLECULE_PROJECT_DIRECTORY}/tests/harness/connection_plugins"
    assert "ANSIBLE_CONFIG" not in env and "ANSIBLE_INVENTORY" not in env
    # make demo, make unit (test_compat_testbed) and the rest of the Makefile
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^export ANSIBLE_CONNECTION_PLUGINS := \$\(CURDIR\)/tests/harness/connection_plugins$",
                     makefile, re.M), "the Makefile exports the test bed's connection"
    assert "ANSIBLE_INVENTORY" not in makefile, "no default inventory for make either: each command names its own"
    # scripts run without make (demo.sh, bench/noop_rerun.sh) source lib.sh, which sets the same
    lib = (REPO / "tests" / "harness" / "lib.sh").read_text()
    assert 'export ANSIBLE_CONNECTION_PLUGINS="${ANSIBLE_CONNECTION_PLUGINS:-${KILN_ROOT}/tests/harness/connection_plugins}"' in lib
    for script in ("tests/harness/demo.sh", "bench/noop_rerun.sh"):
        text = (REPO / script).read_text()
        assert "lib.sh" in text and 'inventory="inventories/testbed/hosts.yml"' in text, script
        assert re.search(r'^\s*ansible-playbook -i "\$\{inventory\}"', text, re.M), script


# an ansible-playbook command: an argv list or a shell line that starts with it
_INVOCATION = re.compile(r"""\[ansible-playbook,|['"]ansible-playbook['"]|^\s*-\s+ansible-playbook\s*$|^\s*ansible-playbook\s""")


def test_every_test_bed_run_of_ansible_playbook_names_its_inventory():
    files = [*REPO.glob("molecule/**/*.yml"), *REPO.glob("tests/molecule/*.yml"), REPO / "Makefile",
             *REPO.glob("tests/harness/*.sh"), *REPO.glob("bench/*.sh")]
    seen = 0
    for path in files:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            code = "" if line.lstrip().startswith("#") else line
            if not _INVOCATION.search(code):
                continue
            seen += 1
            after = "\n".join(lines[i:i + 5])
            after = after[after.index("ansible-playbook"):]
            assert re.search(r"""(^|[\s,\['"])-i([\s,'"]|$)""", after, re.M), \
                f"{path.relative_to(REPO)}:{i + 1}: ansible-playbook without -i (the root ansible.cfg has no inventory)"
    assert seen >= 20, seen


def test_the_unit_tests_playbook_runner_refuses_a_run_without_an_inventory(tmp_path):
    import kiln_playbook

    assert kiln_playbook.names_an_inventory(["-i", "localhost,", "x.yml"])
    assert kiln_playbook.names_an_inventory(["x.yml", "--inventory=inv.yml"])
    assert kiln_playbook.names_an_inventory(["-ilocalhost,", "x.yml"])
    assert not kiln_playbook.names_an_inventory(["x.yml", "-e", "a=1", "--limit", "gpu01"])
    if kiln_playbook.ANSIBLE_PLAYBOOK is not None:
        with pytest.raises(ValueError, match="name the inventory"):
            kiln_playbook.run_playbook("x.yml", tmp_path=tmp_path)
