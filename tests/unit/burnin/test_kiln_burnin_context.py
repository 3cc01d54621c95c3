"""The final phase's launch context from the hosts' facts (module_utils/kiln/burnin/context.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.burnin.context import SETTINGS, kiln_launch_context, run_context
from kiln.burnin.launch import LaunchError
from kiln.errors import FilterError
import kiln_data

KNOBS = {name: kiln_data.setting(var) for name, var in SETTINGS.items()}


def host(engine: str = "cpu", name: str = "c1", address: str = "10.0.0.1", iface: str = "eth0",
         gpus: int = 8) -> dict[str, Any]:
    return {"__burnin_engine": engine,
            "__burnin_tools": {"kiln-cpu-allreduce": "/usr/local/bin/kiln-cpu-allreduce",
                               "all_reduce_perf": "/opt/nccl-tests/build/all_reduce_perf"},
            "__burnin_versions": {"driver": "580.95.05"},
            "ansible_facts": {"hostname": name, "default_ipv4": {"interface": iface, "address": address},
                              "kiln_gpu": {"pci_gpu_count": gpus}}}


HOSTS = {"c1": host(name="node-1"), "c2": host(name="node-2", address="10.0.0.2")}


def test_cpu_engine_defaults_match_the_former_play_vars() -> None:
    ctx = run_context(HOSTS, ["c1", "c2"], [], "default", KNOBS)
    assert ctx["first"] == "c1" and ctx["engine"] == "cpu" and ctx["iface"] == "eth0" and ctx["ppn"] == 1
    assert ctx["exe"] == ["/usr/local/bin/kiln-cpu-allreduce", "-b", "1M", "-e", "64M", "-f", "2", "-n", "10", "-w", "2"]
    assert ctx["pair_exe"] == ctx["exe"]
    assert ctx["env"] == {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "eth0",
                          "OMPI_MCA_oob_tcp_if_include": "eth0", "KILN_BURNIN_IFACE": "eth0"}
    assert ctx["nccl_env"]["NCCL_ALGO"] == "Ring" and ctx["nccl_env"]["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "NCCL_IB_HCA" not in ctx["nccl_env"]
    assert ctx["slurm_names"] == {"c1": "node-1", "c2": "node-2"}
    assert ctx["addresses"] == {"c1": "10.0.0.1", "c2": "10.0.0.2"}
    assert ctx["versions"] == {"c1": {"driver": "580.95.05"}, "c2": {"driver": "580.95.05"}}


def test_nccl_engine_takes_the_reference_nodes_gpus_and_the_nccl_environment() -> None:
    hosts = {"g1": host("nccl-tests", "gpu-1", gpus=4), "g2": host("nccl-tests", "gpu-2", gpus=8)}
    knobs = dict(KNOBS, ib_hca="mlx5_0,mlx5_1", iface="ib0", nccl_env={"NCCL_DEBUG": "WARN", "NCCL_NET_GDR_LEVEL": 5})
    ctx = run_context(hosts, ["g1", "g2"], ["g2"], "acceptance", knobs)
    assert ctx["first"] == "g2" and ctx["ppn"] == 8 and ctx["iface"] == "ib0"
    assert ctx["exe"][0] == "/opt/nccl-tests/build/all_reduce_perf" and ctx["exe"][-1] == "50"
    assert ctx["env"]["NCCL_IB_HCA"] == "mlx5_0,mlx5_1" and ctx["env"]["NCCL_NET_GDR_LEVEL"] == "5"
    assert ctx["env"]["NCCL_SOCKET_IFNAME"] == "ib0" and ctx["env"]["OMPI_MCA_btl_tcp_if_include"] == "ib0"


def test_the_operators_arguments_and_ranks_win() -> None:
    knobs = dict(KNOBS, cpu_args=["-n", 3], pair_args=["-n", "1"], ranks_per_node="2")
    ctx = run_context(HOSTS, ["c1", "c2"], [], "quick", knobs)
    assert ctx["exe"] == ["/usr/local/bin/kiln-cpu-allreduce", "-n", "3"]
    assert ctx["pair_exe"] == ["/usr/local/bin/kiln-cpu-allreduce", "-n", "1"] and ctx["ppn"] == 2


@pytest.mark.parametrize("hosts, targets, knobs, named", [
    ({}, ["c1"], KNOBS, "'c1' has no facts"),
    ({"c1": {k: v for k, v in host().items() if k != "__burnin_engine"}}, ["c1"], KNOBS, "__burnin_engine"),
    ({"c1": dict(host(), __burnin_engine="gpu")}, ["c1"], KNOBS, "not one of"),
    ({"c1": dict(host(), __burnin_tools={})}, ["c1"], KNOBS, "__burnin_tools.kiln-cpu-allreduce"),
    ({"c1": host("nccl-tests", gpus=0)}, ["c1"], KNOBS, "pci_gpu_count"),
    ({"c1": host(iface="eth0,eth1")}, ["c1"], KNOBS, "interface name"),
    (HOSTS, ["c1", "c3"], KNOBS, "'c3' has no facts"),
    (HOSTS, [], KNOBS, "no target hosts"),
    ({"c1": host(), "c2": {k: v for k, v in host().items() if k != "__burnin_versions"}}, ["c1", "c2"], KNOBS,
     "'c2' has no __burnin_versions"),
    (HOSTS, ["c1"], dict(KNOBS, ranks_per_node=1.5), "kiln_burnin_fabric_ranks_per_node"),
    (HOSTS, ["c1"], dict(KNOBS, ranks_per_node=True), "kiln_burnin_fabric_ranks_per_node"),
    (HOSTS, ["c1"], dict(KNOBS, nccl_env=["NCCL_DEBUG=INFO"]), "kiln_burnin_nccl_env"),
    (HOSTS, ["c1"], dict(KNOBS, nccl_env={"NCCL_DEBUG": None}), "kiln_burnin_nccl_env"),
    (HOSTS, ["c1"], dict(KNOBS, ib_hca=None), "kiln_burnin_ib_hca"),
    (HOSTS, ["c1"], dict(KNOBS, iface="eth 0"), "kiln_burnin_iface"),
    (HOSTS, ["c1"], dict(KNOBS, pair_args="-n 1"), "kiln_burnin_pair_args"),
    (HOSTS, ["c1"], dict(KNOBS, ifcae="eth0"), "exactly"),
    (HOSTS, ["c1"], {k: v for k, v in KNOBS.items() if k != "iface"}, "exactly"),
])
def test_hostile_facts_and_settings_name_the_host_or_the_variable(hosts, targets, knobs, named) -> None:
    with pytest.raises(LaunchError, match=named.replace(".", r"\.")):
        run_context(hosts, targets, [], "default", knobs)
    with pytest.raises(FilterError, match="^kiln_launch_context: "):
        kiln_launch_context(hosts, targets, [], "default", knobs)


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(LaunchError, match="kiln_burnin_mode"):
        run_context(HOSTS, ["c1"], [], "fast", KNOBS)


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(st.lists(names, min_size=1, max_size=8, unique=True), st.sampled_from(["cpu", "nccl-tests"]),
       st.sampled_from(["quick", "default", "acceptance", "swap"]), st.integers(1, 16))
def test_every_target_gets_a_name_and_an_address_and_the_input_is_left_alone(targets, engine, mode, gpus) -> None:
    hosts = {t: host(engine, name=f"n-{t}", address=f"10.1.0.{i}", gpus=gpus) for i, t in enumerate(targets)}
    before = copy.deepcopy(hosts)
    ctx = run_context(hosts, targets, targets[-1:], mode, KNOBS)
    assert hosts == before
    assert set(ctx["slurm_names"]) == set(ctx["addresses"]) == set(ctx["versions"]) == set(targets)
    assert ctx["first"] == targets[-1] and ctx["ppn"] == (1 if engine == "cpu" else gpus)
    assert all(isinstance(v, str) for v in ctx["env"].values())
    assert ("NCCL_ALGO" in ctx["env"]) == (engine == "nccl-tests")


# --- the burn-in's link with no default route (air-gapped nodes) --------------------------------------------

from kiln.burnin.context import kiln_node_link, node_link  # noqa: E402


def airgapped(*ifaces: tuple[str, str]) -> dict[str, Any]:
    """Facts of a node with no default route: loopback plus *ifaces* (name, IPv4 address or '')."""
    facts: dict[str, Any] = {"default_ipv4": {}, "interfaces": ["lo"] + [n for n, _ in ifaces],
                             "lo": {"device": "lo", "type": "loopback", "ipv4": {"address": "127.0.0.1"}}}
    for name, address in ifaces:
        facts[name.replace("-", "_")] = {"device": name, "type": "ether",
                                         **({"ipv4": {"address": address}} if address else {})}
    return facts


def test_no_default_route_takes_the_only_interface_with_an_address() -> None:
    assert node_link(airgapped(("eth0", "10.89.78.5")), None, "n1") == {"iface": "eth0", "address": "10.89.78.5"}
    # an interface without an address (an unconfigured IPoIB port) is not a candidate
    assert node_link(airgapped(("eth0", "10.89.78.5"), ("ib0", "")), None, "n1")["iface"] == "eth0"
    # a dash in the name is an underscore in the facts' key
    assert node_link(airgapped(("ens-1", "10.0.0.9")), None, "n1") == {"iface": "ens-1", "address": "10.0.0.9"}


def test_the_operators_interface_wins_and_must_have_an_address() -> None:
    facts = airgapped(("eth0", "10.89.78.5"), ("ib0", "10.10.0.11"))
    assert node_link(facts, "ib0", "n1") == {"iface": "ib0", "address": "10.10.0.11"}
    with pytest.raises(LaunchError, match=r"host 'n1': interface 'ib1' has no IPv4 address.*kiln_burnin_iface"):
        node_link(facts, "ib1", "n1")


def test_with_a_default_route_its_interface_and_address() -> None:
    facts = {"default_ipv4": {"interface": "eth0", "address": "10.0.0.1"}}
    assert node_link(facts, None, "n1") == {"iface": "eth0", "address": "10.0.0.1"}


@pytest.mark.parametrize("facts,match", [
    (airgapped(("eth0", "10.0.0.1"), ("eth1", "10.0.1.1")), r"host 'n1' has no default route and 2 interfaces .*eth0, eth1.*kiln_burnin_iface"),
    (airgapped(), r"host 'n1' has no default route and 0 interfaces .*\(none\)"),
    (None, r"host 'n1' has no facts"),
    ({"default_ipv4": {"interface": "eth0,eth1", "address": "10.0.0.1"}}, "interface name"),
])
def test_no_guess_among_interfaces(facts: Any, match: str) -> None:
    with pytest.raises(LaunchError, match=match):
        node_link(facts, None, "n1")
    with pytest.raises(FilterError, match="kiln_node_link: "):
        kiln_node_link(facts, None, "n1")


def test_the_context_of_air_gapped_nodes() -> None:
    hosts = {name: {**host(name=name), "ansible_facts": {**airgapped(("eth0", addr)), "hostname": name,
                                                          "kiln_gpu": {"pci_gpu_count": 2}}}
             for name, addr in (("a1", "10.89.78.5"), ("a2", "10.89.78.6"))}
    ctx = run_context(hosts, ["a1", "a2"], [], "default", KNOBS)
    assert ctx["iface"] == "eth0" and ctx["addresses"] == {"a1": "10.89.78.5", "a2": "10.89.78.6"}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.one_of(st.none(), st.text(max_size=8), st.integers(),
                                                      st.dictionaries(st.text(max_size=6), st.text(max_size=6))),
                       max_size=6),
       st.one_of(st.none(), st.text(max_size=20)))
def test_hostile_facts_give_a_link_or_a_named_error(facts: dict[str, Any], iface: Any) -> None:
    try:
        link = node_link(facts, iface, "n1")
    except LaunchError as exc:
        assert "n1" in str(exc) or "kiln_burnin_iface" in str(exc)
    else:
        assert link["iface"] and link["address"]
