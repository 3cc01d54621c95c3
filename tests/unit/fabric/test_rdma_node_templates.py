"""rdma_node's IPoIB templates render valid configuration for each OS's network stack.

netplan (Ubuntu) must be YAML netplan reads; systemd-networkd (Debian) and NetworkManager
keyfiles (EL) are INI files. Rendered with Ansible's own Jinja2 environment settings
(trim_blocks), as the role's ``lookup('template')`` does.
"""

from __future__ import annotations

import configparser

import jinja2
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_paths import REPO
TEMPLATES = REPO / "roles" / "rdma_node" / "templates"
VARS = yaml.safe_load((REPO / "roles" / "rdma_node" / "vars" / "main.yml").read_text())

ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True, undefined=jinja2.StrictUndefined)


def render(name: str, item: dict) -> str:
    return ENV.get_template(name).render(item=item)


def ini(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return parser


IB0 = {"name": "ib0", "address": "10.10.0.11/16", "mtu": 2044, "mode": "datagram"}


def test_every_backend_has_its_template_and_a_private_mode_where_secrets_could_live() -> None:
    backends = VARS["__rdma_node_net_backends"]
    assert set(backends) == {"netplan", "networkd", "networkmanager"}
    for name, backend in backends.items():
        assert (TEMPLATES / backend["template"]).is_file(), name
        assert "{name}" in backend["file"]
    # netplan and NetworkManager refuse world-readable files (netplan warns, NM ignores them).
    assert backends["netplan"]["mode"] == "0600"
    assert backends["networkmanager"]["mode"] == "0600"


def test_os_mapping() -> None:
    assert VARS["__rdma_node_net_backend_by_os"] == {"Ubuntu": "netplan", "Debian": "networkd", "RedHat": "networkmanager"}


def test_netplan() -> None:
    doc = yaml.safe_load(render("ipoib-netplan.yaml.j2", IB0))
    eth = doc["network"]["ethernets"]["ib0"]
    assert doc["network"]["version"] == 2
    assert eth["addresses"] == ["10.10.0.11/16"]
    assert eth["mtu"] == 2044
    assert eth["infiniband-mode"] == "datagram"


def test_networkd() -> None:
    cfg = ini(render("ipoib-networkd.network.j2", {**IB0, "mode": "connected", "mtu": 65520}))
    assert cfg["Match"]["Name"] == "ib0"
    assert cfg["Network"]["Address"] == "10.10.0.11/16"
    assert cfg["Link"]["MTUBytes"] == "65520"
    assert cfg["IPoIB"]["Mode"] == "connected"


def test_networkmanager() -> None:
    cfg = ini(render("ipoib-nm.nmconnection.j2", IB0))
    assert cfg["connection"]["type"] == "infiniband"
    assert cfg["connection"]["interface-name"] == "ib0"
    assert cfg["infiniband"]["transport-mode"] == "datagram"
    assert cfg["infiniband"]["mtu"] == "2044"
    assert cfg["ipv4"]["address1"] == "10.10.0.11/16"


@settings(max_examples=60, deadline=None)
@given(name=st.from_regex(r"\A[A-Za-z0-9_.-]{1,15}\Z"), octet=st.integers(0, 255), prefix=st.integers(8, 30),
       mtu=st.integers(256, 65520), mode=st.sampled_from(["datagram", "connected"]))
def test_any_valid_interface_renders_parseable_files(name: str, octet: int, prefix: int, mtu: int, mode: str) -> None:
    item = {"name": name, "address": f"10.1.{octet}.1/{prefix}", "mtu": mtu, "mode": mode}
    doc = yaml.safe_load(render("ipoib-netplan.yaml.j2", item))
    assert list(doc["network"]["ethernets"]) == [name]  # quoted: a name such as 1e5 stays a string
    assert ini(render("ipoib-networkd.network.j2", item))["Match"]["Name"] == name
    assert ini(render("ipoib-nm.nmconnection.j2", item))["connection"]["interface-name"] == name


@pytest.mark.parametrize("prios,bits,words", [
    ([3], "0,0,0,1,0,0,0,0", "0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off"),
    ([0, 7], "1,0,0,0,0,0,0,1", "0:on 1:off 2:off 3:off 4:off 5:off 6:off 7:on"),
    ([], "0,0,0,0,0,0,0,0", "0:off 1:off 2:off 3:off 4:off 5:off 6:off 7:off"),
])
def test_pfc_priorities_render_for_both_tools(prios: list[int], bits: str, words: str) -> None:
    env = jinja2.Environment()
    assert env.from_string(VARS["__rdma_node_pfc_bits"]).render(rdma_node_roce_pfc_priorities=prios) == bits
    assert env.from_string(VARS["__rdma_node_pfc_words"]).render(rdma_node_roce_pfc_priorities=prios).split() == words.split()
