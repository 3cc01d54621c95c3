# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The burn-in's run context: what every launch of the final phase uses, read once from the hosts' facts.

The final phase (roles/burnin/tasks/final.yml) starts the pair rounds and the fabric all-reduce from
the controller. What they need -- the engine, the network interface, the all-reduce program and its
pair variant, ranks per node, the launch environment, each target's Slurm node name, address and
versions -- comes from the first node's facts, the targets' facts and the burn-in's settings.
:func:`run_context` works it out in one place (it was some twenty Jinja derivations over hostvars),
and every missing or malformed fact is an error that names the host, the variable and the fix.

Standard library only; importable as ``kiln.burnin.context`` and as
``ansible.module_utils.kiln.burnin.context``; filter ``kiln_launch_context`` (registered by
filter_plugins/kiln_launch_filters.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import FilterError
from .launch import ENGINES, LaunchError, _strings, _whole, engine_program

__all__ = ["SETTINGS", "kiln_node_link", "kiln_launch_context", "node_link", "run_context"]

#: The settings the context reads: name in the filter's mapping -> the burn-in variable it comes from.
SETTINGS: dict[str, str] = {
    "iface": "kiln_burnin_iface",
    "ib_hca": "kiln_burnin_ib_hca",
    "nccl_env": "kiln_burnin_nccl_env",
    "cpu_args": "kiln_burnin_cpu_args",
    "fabric_args": "kiln_burnin_fabric_args",
    "pair_args": "kiln_burnin_pair_args",
    "ranks_per_node": "kiln_burnin_fabric_ranks_per_node",
}
#: The program each engine runs (a key of the node's __burnin_tools, found by the preflight phase).
TOOLS = {"cpu": "kiln-cpu-allreduce", "nccl-tests": "all_reduce_perf"}


def _fact(hosts: Mapping[str, Any], host: str, path: Sequence[str], fix: str) -> Any:
    """hostvars[host][path...]; LaunchError naming the host and the variable when it is not there."""
    value: Any = hosts.get(host) if isinstance(hosts, Mapping) else None
    if value is None:
        raise LaunchError(f"host {host!r} has no facts in this run ({fix})")
    for key in path:
        if not isinstance(value, Mapping) or value.get(key) is None:
            raise LaunchError(f"host {host!r} has no {'.'.join(path)} ({fix})")
        value = value[key]
    return value


def _env(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise LaunchError(f"{what} must be a mapping of environment variable to value, got {type(value).__name__}")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key or isinstance(item, (Mapping, list, tuple)) or item is None \
                or isinstance(item, bool):
            raise LaunchError(f"{what}: {str(key)[:40]!r} must name a variable with a string or number value")
        out[key] = str(item)
    return out


def _iface(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 15 or any(c in value for c in " ,/\t\n"):
        raise LaunchError(f"{what} must be a network interface name, got {str(value)[:40]!r}")
    return value


def node_link(facts: Any, iface: Any = None, host: str = "?") -> dict[str, str]:
    """The interface and IPv4 address a node's burn-in traffic (MPI, NCCL's socket, iperf3) uses.

    *iface* (kiln_burnin_iface) when set; else the default route's interface; else the node's only
    non-loopback interface with an IPv4 address: an air-gapped node often has no default route, and
    guessing among several interfaces (or a name such as eth0) could measure the wrong link.
    Returns ``{"iface", "address"}``; LaunchError naming the host and kiln_burnin_iface otherwise.
    """
    if not isinstance(facts, Mapping):
        raise LaunchError(f"host {host!r} has no facts in this run (gather its facts)")
    fix = "set kiln_burnin_iface to the interface the nodes reach each other on"
    default = facts.get("default_ipv4") if isinstance(facts.get("default_ipv4"), Mapping) else {}
    if iface is not None:
        name = _iface(iface, SETTINGS["iface"])
    elif default.get("interface"):
        name = _iface(default["interface"], f"host {host!r}: ansible_facts['default_ipv4']['interface']")
    else:
        names = facts.get("interfaces") if isinstance(facts.get("interfaces"), list) else []
        with_ipv4 = sorted(str(n) for n in names if str(n) != "lo" and _ipv4(facts, str(n))
                           and (facts.get(str(n).replace("-", "_")) or {}).get("type") != "loopback")
        if len(with_ipv4) != 1:
            found = ", ".join(with_ipv4) or "none"
            raise LaunchError(f"host {host!r} has no default route and {len(with_ipv4)} interfaces with an IPv4 "
                              f"address ({found}): kiln cannot tell which link the burn-in measures; {fix}")
        name = with_ipv4[0]
    address = _ipv4(facts, name)
    if not address and default.get("interface") == name:
        address = str(default.get("address") or "")
    if not address:
        raise LaunchError(f"host {host!r}: interface {name!r} has no IPv4 address in its facts; {fix}")
    return {"iface": name, "address": address}


def _ipv4(facts: Mapping[str, Any], name: str) -> str:
    """The IPv4 address of interface *name* in Ansible's facts ('' when none)."""
    entry = facts.get(name.replace("-", "_"))
    ipv4 = entry.get("ipv4") if isinstance(entry, Mapping) else None
    address = ipv4.get("address") if isinstance(ipv4, Mapping) else None
    return str(address) if isinstance(address, str) and address else ""


def kiln_node_link(facts: Any, iface: Any = None, host: Any = "?") -> dict[str, str]:
    """Filter: :func:`node_link` (``ansible_facts | kiln_node_link(kiln_burnin_iface, inventory_hostname)``)."""
    try:
        return node_link(facts, iface, str(host))
    except LaunchError as exc:
        raise FilterError(f"kiln_node_link: {exc}") from exc


def run_context(hosts: Mapping[str, Any], targets: Sequence[str], fabric_nodes: Sequence[str], mode: str,
                settings: Mapping[str, Any]) -> dict[str, Any]:
    """The launch context of a run over *targets* (the first of *fabric_nodes*, else of *targets*, is
    the reference node whose engine, tools, interface and GPU count the launches use).

    *hosts*: ``hostvars`` (or ``{host: vars}``); *settings*: exactly the keys of :data:`SETTINGS`.
    Returns ``{first, engine, iface, exe, pair_exe, ppn, nccl_env, env, slurm_names, addresses,
    versions}``; ``env`` is Open MPI's TCP settings on the interface, plus the NCCL environment for
    the nccl-tests engine (``NCCL_ALGO=Ring``, ``NCCL_SOCKET_IFNAME``, ``NCCL_IB_HCA`` when given).
    """
    if not isinstance(settings, Mapping) or set(settings) != set(SETTINGS):
        given = sorted(map(str, settings)) if isinstance(settings, Mapping) else type(settings).__name__
        raise LaunchError(f"the context's settings must be exactly {sorted(SETTINGS)}, got {given}")
    targets = [str(t) for t in targets or []]
    if not targets:
        raise LaunchError("the run has no target hosts (kiln_burnin_targets matched none that passed the scope)")
    first = str((list(fabric_nodes or []) or targets)[0])
    fix = "its preflight phase did not run or failed; run the burn-in again, or leave it out of kiln_burnin_targets"
    engine = _fact(hosts, first, ["__burnin_engine"], fix)
    if engine not in ENGINES:
        raise LaunchError(f"host {first!r}: __burnin_engine is {str(engine)[:40]!r}, not one of {', '.join(ENGINES)}")
    tool = _fact(hosts, first, ["__burnin_tools", TOOLS[engine]], fix)
    facts = _fact(hosts, first, ["ansible_facts"], "gather its facts")
    iface = _iface(settings["iface"], SETTINGS["iface"]) if settings["iface"] is not None \
        else node_link(facts, None, first)["iface"]
    args = settings["cpu_args"] if engine == "cpu" else settings["fabric_args"]
    exe = engine_program(engine, tool, mode, args)
    pair_args = settings["pair_args"]
    pair_exe = exe if pair_args is None else [exe[0], *_strings(pair_args, SETTINGS["pair_args"])]
    if settings["ranks_per_node"] is not None:
        ppn = _whole(settings["ranks_per_node"], SETTINGS["ranks_per_node"], 1)
    elif engine == "cpu":
        ppn = 1
    else:
        ppn = _whole(_fact(hosts, first, ["ansible_facts", "kiln_gpu", "pci_gpu_count"], "run the gpu_facts role"),
                     f"host {first!r}: ansible_facts['kiln_gpu']['pci_gpu_count']", 1)
    ib_hca = settings["ib_hca"]
    if not isinstance(ib_hca, str):
        raise LaunchError(f"{SETTINGS['ib_hca']} must be a string (NCCL_IB_HCA's value, or \"\"), got {ib_hca!r}")
    nccl_env = {**_env(settings["nccl_env"], SETTINGS["nccl_env"]), "NCCL_ALGO": "Ring", "NCCL_SOCKET_IFNAME": iface}
    if ib_hca:
        nccl_env["NCCL_IB_HCA"] = ib_hca
    mca = {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": iface, "OMPI_MCA_oob_tcp_if_include": iface,
           "KILN_BURNIN_IFACE": iface}
    slurm_names: dict[str, str] = {}
    addresses: dict[str, str] = {}
    versions: dict[str, Any] = {}
    for host in targets:
        host_facts = _fact(hosts, host, ["ansible_facts"], "gather its facts")
        slurm_names[host] = str(_fact(hosts, host, ["ansible_facts", "hostname"], "gather its facts"))
        # its address on the interface, else on its default route ('' when neither: mpirun's launch refuses it)
        default = host_facts.get("default_ipv4") if isinstance(host_facts.get("default_ipv4"), Mapping) else {}
        addresses[host] = _ipv4(host_facts, iface) or str(default.get("address") or "")
        versions[host] = _fact(hosts, host, ["__burnin_versions"], fix)  # a mixed-version check needs every one
    return {"first": first, "engine": engine, "iface": iface, "exe": exe, "pair_exe": pair_exe, "ppn": ppn,
            "nccl_env": nccl_env, "env": {**mca, **(nccl_env if engine == "nccl-tests" else {})},
            "slurm_names": slurm_names, "addresses": addresses, "versions": versions}


def kiln_launch_context(hosts: Any, targets: Any, fabric_nodes: Any, mode: Any, settings: Any) -> dict[str, Any]:
    """Filter: :func:`run_context` (``hostvars | kiln_launch_context(targets, fabric_nodes, mode, settings)``)."""
    try:
        return run_context(hosts, targets, fabric_nodes, mode, settings)
    except LaunchError as exc:
        raise FilterError(f"kiln_launch_context: {exc}") from exc
