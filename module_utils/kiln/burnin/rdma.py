# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The burn-in's RDMA pair phase as filters: the ib_write_bw plan (pairs per rail), each run's argv,
the clients' outputs, the judge, each node's checks, the fabric key of a run and the fabric re-read
after the run's traffic.

Pure functions over the burn-in's fabric data ``{node: {facts, expect, history}}``; they raise
:class:`kiln_filter_error.FilterError` for input they cannot use. Registered as filters of the same
names by filter_plugins/kiln_fabric_filters.py. Importable as ``kiln.burnin.rdma`` and as
``ansible.module_utils.kiln.burnin.rdma``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from . import fabric_checks as kiln_burnin_fabric_checks
from . import fabric_pairs as kiln_burnin_fabric_pairs
from ..facts import fabric_text as kiln_fabric_text
from ..errors import FilterError
from .context import node_link
from .launch import LaunchError


def _expected(nodes_fabric: Any) -> dict[str, dict[str, Any]]:
    """Each node's expected ports (kiln_burnin_fabric_checks.expected_ports) from its burn-in fabric data."""
    if not isinstance(nodes_fabric, Mapping):
        raise FilterError("kiln burn-in fabric: nodes must map each host to {facts, expect, history}")
    out = {}
    for node, fab in sorted(nodes_fabric.items(), key=lambda item: str(item[0])):
        if fab is not None and not isinstance(fab, Mapping):
            raise FilterError(f"kiln burn-in fabric: the fabric data of node {node} must be a mapping "
                              f"{{facts, expect, history}}, got {type(fab).__name__}")
        fab = fab if isinstance(fab, Mapping) else {}
        history = fab.get("history") if isinstance(fab.get("history"), Mapping) else {}
        try:
            out[str(node)] = kiln_burnin_fabric_checks.expected_ports(fab.get("facts"), fab.get("expect"),
                                                               history.get("records"), host=str(node))
        except kiln_burnin_fabric_checks.FabricError as exc:
            raise FilterError(str(exc)) from None
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
        found, _ = kiln_burnin_fabric_checks._read_facts(facts)
        exclude = set(exp.get("exclude") or [])
        ports = []
        for port in exp.get("ports") or []:
            if not isinstance(port, Mapping) or port.get("hca") in exclude:
                continue
            have = (found or {}).get(port.get("port"))
            state = kiln_burnin_fabric_checks._state(have) if have else (False, "missing")
            ports.append(dict(port, active=bool(state[0]), why=state[1]))
        if ports:
            rails[node] = ports
    if len(rails) < 2:
        return []
    try:
        return kiln_burnin_fabric_pairs.rdma_pair_plan(rails, int(base_port))
    except (kiln_burnin_fabric_checks.FabricError, TypeError, ValueError) as exc:
        raise FilterError(f"kiln burn-in: cannot plan the ib_write_bw pairs: {exc}") from None


def kiln_rdma_judge(plan: Any, outputs: Any, fabric_path: Any) -> dict[str, list[dict[str, Any]]]:
    """``{node: [rdma.write_bw check]}`` from the plan and the clients' outputs.

    *outputs*: one ``{entry, stdout, stderr, rc}`` per client run (any order; matched to the plan by
    client, client HCA, server and TCP port). A plan entry without an output is INCOMPLETE.
    """
    if not isinstance(plan, list) or not all(isinstance(entry, Mapping) for entry in plan):
        raise FilterError("kiln_rdma_judge: the plan must be a list of pair entries (kiln_rdma_pair_plan)")
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
        rules = kiln_burnin_fabric_checks.load_fabric_thresholds(fabric_path)
        return kiln_burnin_fabric_pairs.judge_rdma_bw(plan, results, rules)
    except kiln_burnin_fabric_checks.FabricError as exc:
        raise FilterError(f"kiln burn-in: cannot judge the ib_write_bw pairs: {exc}") from None


def kiln_rdma_argv(entry: Any, tool: Any, args: Any, timeout: Any, hostvars: Any = None, iface: Any = None) -> list[str]:
    """The argv of one plan entry's ib_write_bw: the server's (no *hostvars*) or the client's (with the
    server's address from *hostvars*: its burn-in link's IPv4 address, :func:`context.node_link` with
    *iface* = kiln_burnin_iface, else its inventory name). Every element
    is a separate argument, bounded by timeout(1); nothing reaches a shell."""
    if not isinstance(entry, Mapping) or not isinstance(args, list):
        raise FilterError("kiln_rdma_argv: needs a plan entry and a list of ib_write_bw options")
    try:
        seconds = int(timeout)
    except (TypeError, ValueError, OverflowError):
        raise FilterError(f"kiln_rdma_argv: timeout must be a number of seconds, got {type(timeout).__name__}") from None
    client = hostvars is not None
    hca = entry.get("client_hca" if client else "server_hca")
    port = entry.get("ib_port" if client else "server_ib_port")
    argv = ["timeout", str(seconds), str(tool), "-d", str(hca), "-i", str(port), "-p", str(entry.get("tcp_port"))]
    argv += [str(a) for a in args]
    if client:
        server = str(entry.get("server"))
        host = hostvars.get(server) if isinstance(hostvars, Mapping) else None
        facts = host.get("ansible_facts") if isinstance(host, Mapping) else None
        try:
            address = node_link(facts, iface, server)["address"]
        except LaunchError:
            address = server  # the server's inventory name, resolved by the client (as ib_write_bw's own usage)
        argv.append(address)
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
        return kiln_burnin_fabric_pairs.fabric_key_from_facts(facts, str(engine), expected)
    except kiln_burnin_fabric_checks.FabricError as exc:
        raise FilterError(f"kiln burn-in: cannot name the fabric: {exc}") from None


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
