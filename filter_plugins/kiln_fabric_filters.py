# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln fabric helpers for playbooks: port summaries of ``ansible_facts['kiln_fabric']``.

Pure module-level functions (importable from plain pytest), registered as Jinja
filters by the thin :class:`FilterModule` at the bottom. Documentation for each
filter is in the adjacent ``<filter_name>.yml`` sidecar files.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_KILN_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
if _KILN_MODULE_UTILS not in sys.path:
    sys.path.insert(0, _KILN_MODULE_UTILS)

from kiln_compat_engine.gpudirect import kiln_gpudirect  # noqa: E402
import kiln_fabric_text  # noqa: E402
import kiln_fabric_checks  # noqa: E402
import kiln_fabric_pairs  # noqa: E402
import kiln_netdev  # noqa: E402

try:  # ansible-core is always present when Ansible loads the plugin
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in used when ansible-core is not importable."""


def kiln_fabric_port_lines(hcas: Any) -> list[str]:
    """One line per RDMA port: ``mlx5_0/1 ConnectX-7 InfiniBand ACTIVE/LinkUp 400 Gb/sec (4X NDR) ibp26s0``."""
    lines = []
    for hca in hcas if isinstance(hcas, list) else []:
        if not isinstance(hca, Mapping):
            continue
        for port in hca.get("ports") or []:
            if not isinstance(port, Mapping):
                continue
            netdevs = ",".join(str(n) for n in port.get("netdevs") or []) or "-"
            lines.append(f"{hca.get('name')}/{port.get('port')} {hca.get('model') or hca.get('hca_type') or '?'} "
                         f"{port.get('link_layer') or '?'} {port.get('state') or '?'}/{port.get('phys_state') or '?'} "
                         f"{port.get('rate') or '?'} fw {hca.get('fw_ver') or '?'} {netdevs}")
    return lines


def kiln_node_gpudirect(stack: Any, kernel: Any = None, gpu_model: Any = None) -> dict[str, Any]:
    """The GPUDirect RDMA method of one host: kiln_gpudirect of its stack and kernel, the stack's ``gpu``
    taken from the host's detected board (``kiln_gpu_model``) when the stack names none."""
    stack = dict(stack) if isinstance(stack, Mapping) else {}
    name = gpu_model.get("name") if isinstance(gpu_model, Mapping) else None
    if not stack.get("gpu") and isinstance(name, str) and name:
        stack["gpu"] = name
    return kiln_gpudirect(stack, kernel)


def _expected(nodes_fabric: Any) -> dict[str, dict[str, Any]]:
    """Each node's expected ports (kiln_fabric_checks.expected_ports) from its burn-in fabric data."""
    if not isinstance(nodes_fabric, Mapping):
        raise AnsibleFilterError("kiln burn-in fabric: nodes must map each host to {facts, expect, history}")
    out = {}
    for node, fab in sorted(nodes_fabric.items(), key=lambda item: str(item[0])):
        if fab is not None and not isinstance(fab, Mapping):
            raise AnsibleFilterError(f"kiln burn-in fabric: the fabric data of node {node} must be a mapping "
                                     f"{{facts, expect, history}}, got {type(fab).__name__}")
        fab = fab if isinstance(fab, Mapping) else {}
        history = fab.get("history") if isinstance(fab.get("history"), Mapping) else {}
        try:
            out[str(node)] = kiln_fabric_checks.expected_ports(fab.get("facts"), fab.get("expect"),
                                                               history.get("records"), host=str(node))
        except kiln_fabric_checks.FabricError as exc:
            raise AnsibleFilterError(str(exc)) from None
    return out


def kiln_rdma_pair_plan(nodes_fabric: Any, base_port: Any = 18515) -> list[dict[str, Any]]:
    """The ib_write_bw pairs of a burn-in: per rail (the k-th *expected* port of each node, so a down port
    never shifts the others), a ring over the nodes whose rail is ACTIVE; every rail no pair measures is an
    ``unmeasured`` entry (judged INCOMPLETE). Nodes with expected ports take part, also one whose ports are
    all down (its partners' rails are then named unmeasured, never silently skipped)."""
    expected = _expected(nodes_fabric)
    rails: dict[str, list[dict[str, Any]]] = {}
    for node, exp in expected.items():
        facts = (nodes_fabric.get(node) or {}).get("facts")
        found, _ = kiln_fabric_checks._read_facts(facts)
        exclude = set(exp.get("exclude") or [])
        ports = []
        for port in exp.get("ports") or []:
            if not isinstance(port, Mapping) or port.get("hca") in exclude:
                continue
            have = (found or {}).get(port.get("port"))
            state = kiln_fabric_checks._state(have) if have else (False, "missing")
            ports.append(dict(port, active=bool(state[0]), why=state[1]))
        if ports:
            rails[node] = ports
    if len(rails) < 2:
        return []
    try:
        return kiln_fabric_pairs.rdma_pair_plan(rails, int(base_port))
    except (kiln_fabric_checks.FabricError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"kiln burn-in: cannot plan the ib_write_bw pairs: {exc}") from None


def kiln_rdma_judge(plan: Any, outputs: Any, fabric_path: Any = None) -> dict[str, list[dict[str, Any]]]:
    """``{node: [rdma.write_bw check]}`` from the plan and the clients' outputs.

    *outputs*: one ``{entry, stdout, stderr, rc}`` per client run (any order; matched to the plan by
    client, client HCA, server and TCP port). A plan entry without an output is INCOMPLETE.
    """
    if not isinstance(plan, list) or not all(isinstance(entry, Mapping) for entry in plan):
        raise AnsibleFilterError("kiln_rdma_judge: the plan must be a list of pair entries (kiln_rdma_pair_plan)")
    by_key = {}
    for out in outputs if isinstance(outputs, list) else []:
        entry = out.get("entry") if isinstance(out, Mapping) else None
        if isinstance(entry, Mapping):
            by_key[(entry.get("client"), entry.get("client_hca"), entry.get("server"), entry.get("tcp_port"))] = out
    results = []
    for entry in plan:
        out = by_key.get((entry.get("client"), entry.get("client_hca"), entry.get("server"), entry.get("tcp_port")))
        if not isinstance(entry, Mapping) or entry.get("unmeasured") or out is None or out.get("skipped"):
            results.append(None)
            continue
        parsed = dict(kiln_fabric_text.parse_perftest(str(out.get("stdout") or "")))
        parsed["rc"] = out.get("rc")
        parsed["timed_out"] = out.get("rc") == 124
        results.append(parsed)
    try:
        rules = kiln_fabric_checks.load_fabric_thresholds(str(fabric_path) if fabric_path else None)
        return kiln_fabric_pairs.judge_rdma_bw(plan, results, rules)
    except kiln_fabric_checks.FabricError as exc:
        raise AnsibleFilterError(f"kiln burn-in: cannot judge the ib_write_bw pairs: {exc}") from None


def kiln_rdma_argv(entry: Any, tool: Any, args: Any, timeout: Any, hostvars: Any = None) -> list[str]:
    """The argv of one plan entry's ib_write_bw: the server's (no *hostvars*) or the client's (with the
    server's address from *hostvars*: its default IPv4 address, else its inventory name). Every element
    is a separate argument, bounded by timeout(1); nothing reaches a shell."""
    if not isinstance(entry, Mapping) or not isinstance(args, list):
        raise AnsibleFilterError("kiln_rdma_argv: needs a plan entry and a list of ib_write_bw options")
    try:
        seconds = int(timeout)
    except (TypeError, ValueError, OverflowError):
        raise AnsibleFilterError(f"kiln_rdma_argv: timeout must be a number of seconds, got {type(timeout).__name__}") from None
    client = hostvars is not None
    hca = entry.get("client_hca" if client else "server_hca")
    port = entry.get("ib_port" if client else "server_ib_port")
    argv = ["timeout", str(seconds), str(tool), "-d", str(hca), "-i", str(port), "-p", str(entry.get("tcp_port"))]
    argv += [str(a) for a in args]
    if client:
        server = str(entry.get("server"))
        host = hostvars.get(server) if isinstance(hostvars, Mapping) else None
        facts = host.get("ansible_facts") if isinstance(host, Mapping) else None
        ipv4 = facts.get("default_ipv4") if isinstance(facts, Mapping) else None
        argv.append(str((ipv4.get("address") if isinstance(ipv4, Mapping) else None) or server))
    return argv


def kiln_rdma_outputs(plan: Any, runs: Any) -> list[dict[str, Any]]:
    """The clients' results for kiln_rdma_judge: *runs* maps each client node to its runner task's
    result (stdout: a JSON list of ``{rc, stdout, stderr}`` in the order of its plan entries); a node whose
    runner did not run or printed something else gives no output for its entries (INCOMPLETE)."""
    out: list[dict[str, Any]] = []
    if not isinstance(plan, list) or not isinstance(runs, Mapping):
        return out
    runnable = [e for e in plan if isinstance(e, Mapping) and not e.get("unmeasured")]
    for node in sorted({e.get("client") for e in runnable}, key=str):
        entries = [e for e in runnable if e.get("client") == node]
        run = runs.get(node) if isinstance(runs.get(node), Mapping) else {}
        try:
            results = json.loads(run.get("stdout") or "")
        except (TypeError, ValueError):
            continue
        if not isinstance(results, list) or len(results) != len(entries):
            continue
        for entry, result in zip(entries, results):
            result = result if isinstance(result, Mapping) else {}
            out.append({"entry": entry, "stdout": str(result.get("stdout") or ""),
                        "stderr": str(result.get("stderr") or "")[-2000:], "rc": result.get("rc"), "skipped": False})
    return out


def kiln_rdma_node_checks(node: Any, checks: Any) -> dict[str, Any]:
    """``{rdma: [checks]}`` of one node for the burn-in's node data, ``{}`` when it was not in the plan."""
    found = checks.get(str(node)) if isinstance(checks, Mapping) else None
    return {"rdma": list(found)} if isinstance(found, list) and found else {}


def kiln_fabric_key_of(nodes_fabric: Any, engine: Any) -> dict[str, Any]:
    """The floors' fabric key (``{key, why}``) of the nodes of a run from their facts and expected ports:
    an engine that does not use RDMA (the CPU engine) is ``tcp`` whatever the HCAs."""
    expected = _expected(nodes_fabric)
    facts = {n: (nodes_fabric.get(n) or {}).get("facts") for n in expected}
    try:
        return kiln_fabric_pairs.fabric_key_from_facts(facts, str(engine), expected)
    except kiln_fabric_checks.FabricError as exc:
        raise AnsibleFilterError(f"kiln burn-in: cannot name the fabric: {exc}") from None


def kiln_fabric_reread(node: Any, results: Any) -> dict[str, Any]:
    """``{fabric_after: {facts, why}}`` of one node for the burn-in's node data: its fabric facts read again
    after the run's own traffic, from the registered results of the delegated kiln_fabric_facts loop (each
    item -- ``ansible_loop_var`` -- the node's name). A node that was not read, unreachable or failed gets ``facts: None`` and why
    (fabric.counters.during_run is then INCOMPLETE, never PASS)."""
    for result in results if isinstance(results, list) else []:
        if not isinstance(result, Mapping) or result.get(str(result.get("ansible_loop_var") or "item")) != node:
            continue
        facts = (result.get("ansible_facts") or {}).get("kiln_fabric") if isinstance(
            result.get("ansible_facts"), Mapping) else None
        if result.get("unreachable"):
            return {"fabric_after": {"facts": None, "why": f"{node} unreachable after the run's traffic"}}
        if result.get("failed") or result.get("skipped") or not isinstance(facts, Mapping):
            why = str(result.get("msg") or ("skipped" if result.get("skipped") else "no kiln_fabric facts"))
            return {"fabric_after": {"facts": None, "why": f"reading {node} failed: {why[:200]}"}}
        return {"fabric_after": {"facts": dict(facts), "why": None}}
    return {"fabric_after": {"facts": None, "why": f"{node} was not read after the run's traffic"}}


def kiln_netdev_problems(names: Any, host: Any = "this host") -> list[str]:
    """One sentence per netdev name that may not reach a path, unit name or argv (module_utils/kiln_netdev.py:
    at most 15 characters (Linux IFNAMSIZ), letters, digits, ``_ . -``, no leading ``-`` or ``.``), naming
    the host and the name; ``[]`` when every name is usable. *names*: a list (or one name)."""
    items = names if isinstance(names, list) else [names]
    out = []
    for name in items:
        why = kiln_netdev.netdev_problem(name)
        if why:
            out.append(f"{host}: netdev name {why}")
    return out


class FilterModule:
    """Registry: name -> function."""

    def filters(self) -> dict[str, Any]:
        return {"kiln_fabric_port_lines": kiln_fabric_port_lines, "kiln_node_gpudirect": kiln_node_gpudirect,
                "kiln_rdma_pair_plan": kiln_rdma_pair_plan, "kiln_rdma_judge": kiln_rdma_judge,
                "kiln_fabric_key_of": kiln_fabric_key_of, "kiln_rdma_argv": kiln_rdma_argv,
                "kiln_rdma_outputs": kiln_rdma_outputs,
                "kiln_rdma_node_checks": kiln_rdma_node_checks, "kiln_fabric_reread": kiln_fabric_reread,
                "kiln_netdev_problems": kiln_netdev_problems}
