"""As-built records and the drift gate: pure functions.

A node's **as-built record** says what is installed and running on it: every
package kiln pinned there (the pins the shared pinned-install path recorded per
owner, with the version installed now and whether it is held), the kernel, the
running driver, the GPUs' VBIOS and the HCAs' firmware where the facts have
them, and a fingerprint of all that. ``as_built`` builds it from one read of
the package database (library/kiln_packages.py, state=read).

The **drift gate** (playbooks/drift.yml) compares every node with what kiln
intends for it and with its partition's peers:

- ``pin``: a pinned package is not at its pinned version (changed by hand,
  removed, or a failed install);
- ``hold``: a pinned package is no longer held (an unattended upgrade may move it);
- ``stack``: the stack the inventory intends now is not the one last applied
  (the node was not converged or upgraded to it);
- ``peers``: the node's driver, NCCL, DOCA/OFED, kernel or a pinned package
  differs from the rest of its partition;
- ``record``: no as-built record at all (unreachable, or the read failed) --
  nothing can be said, which is never "no drift";
- ``pins``: the record has no pin record of an owner kiln pins on the node (the
  inventory's groups and the stack say which: ``expected_owners``), or of an owner
  most of its partition's peers have, or no pin records at all -- without the
  pins nothing says what the node should have, which is never "no drift" either.

``mixed_versions`` is what the burn-in uses to refuse a PASS for a fabric test
spanning nodes with different driver, NCCL or DOCA versions.

Errors are ``DriftError`` (a ValueError) naming the host and the input.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import FilterError, as_filter
from .pkgdb import PkgError, kiln_pkg_plan, kiln_pkg_split

SCHEMA = "kiln.as-built/v1"
REPORT_SCHEMA = "kiln.drift/v1"
# The versions a fabric test needs equal on every node it spans (the burn-in), and peers compare.
CONSISTENT = ("driver", "nccl", "doca")
PEER_VERSIONS = CONSISTENT + ("kernel",)
# Pinned package names that carry NCCL (apt, dnf); DOCA/OFED is whatever the rdma-stack owner pins.
NCCL_NAMES = ("libnccl2", "libnccl")
DOCA_OWNER = "rdma-stack"
KINDS = ("record", "pins", "stack", "pin", "hold", "peers")


class DriftError(ValueError):
    """An as-built record or drift input kiln cannot use."""


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    text = str(value).strip()
    return text or None


def _fingerprint(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]


def _versions_text(versions: Sequence[str]) -> str | None:
    unique = sorted(set(versions))
    return ",".join(unique) if unique else None


def as_built(host: str, pkg_mgr: str, packages: Mapping[str, Any], held: Sequence[str], pins: Mapping[str, Any],
             kernel: Any = None, os_id: Any = None, gpu: Mapping[str, Any] | None = None,
             fabric: Mapping[str, Any] | None = None, applied: Mapping[str, Any] | None = None,
             pins_dir: Any = None, pins_dir_present: Any = None) -> dict[str, Any]:
    """The as-built record of one node.

    *packages*/*held*: the package database (kiln_pkgdb_parse); *pins*: owner -> pinned package
    strings (what the pinned-install path recorded); *gpu*: ``ansible_facts['kiln_gpu']``;
    *fabric*: ``ansible_facts['kiln_fabric']``; *applied*: the stack record (roles/stack_record);
    *pins_dir* / *pins_dir_present*: where the pins were read and whether that directory exists
    (what a ``pins`` row says when none are there).
    """
    where = f"as-built record of {host}"
    if not isinstance(packages, Mapping):
        raise DriftError(f"{where}: the package database must be a mapping, got {type(packages).__name__}")
    if isinstance(held, str) or not isinstance(held, Sequence):
        raise DriftError(f"{where}: held must be a list of names, got {type(held).__name__}")
    if not isinstance(pins, Mapping):
        raise DriftError(f"{where}: pins must map an owner to its package strings, got {type(pins).__name__}")
    on_hold = {str(n) for n in held}
    components: dict[str, Any] = {}
    for owner in sorted(pins):
        specs = pins[owner]
        if isinstance(specs, str) or not isinstance(specs, Sequence):
            raise DriftError(f"{where}: the pins of {owner} must be a list of package strings, got {type(specs).__name__}")
        rows = []
        for spec in specs:
            try:
                item = kiln_pkg_split(spec, pkg_mgr, candidate_ok=True)
            except PkgError as exc:
                raise DriftError(f"{where}: owner {owner}: {exc}") from exc
            installed = packages.get(item["name"]) or []
            if isinstance(installed, str):
                installed = [installed]
            rows.append({"name": item["name"], "pinned": item["version"], "spec": spec,
                         "installed": _versions_text([str(v) for v in installed]), "held": item["name"] in on_hold})
        components[owner] = {"packages": rows}
    gpu = gpu if isinstance(gpu, Mapping) else {}
    fabric = fabric if isinstance(fabric, Mapping) else {}
    gpus = [g for g in gpu.get("gpus") or [] if isinstance(g, Mapping)]
    hcas = [h for h in fabric.get("hcas") or [] if isinstance(h, Mapping)]
    running = {
        "driver": _text(gpu.get("driver_version")),
        "cuda_driver": _text(gpu.get("cuda_version")),
        "gpus": gpu["pci_gpu_count"] if isinstance(gpu.get("pci_gpu_count"), int)
        and not isinstance(gpu.get("pci_gpu_count"), bool) else len(gpus),
        "vbios": sorted({v for v in (_text(g.get("vbios")) for g in gpus) if v}),
        "hca_fw": sorted({f"{_text(h.get('hca_type')) or _text(h.get('name')) or 'hca'} {v}"
                          for h in hcas for v in [_text(h.get("fw_ver"))] if v}),
    }
    pinned = [p for c in components.values() for p in c["packages"]]
    nccl = [p["installed"] for p in pinned if p["name"] in NCCL_NAMES and p["installed"]]
    doca = [p["installed"] for p in (components.get(DOCA_OWNER) or {}).get("packages", []) if p["installed"]]
    versions = {
        "driver": running["driver"],
        "nccl": _versions_text(nccl),
        "doca": _versions_text(doca),
        "kernel": _text(kernel),
    }
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "host": str(host),
        "os": _text(os_id),
        "pkg_mgr": pkg_mgr,
        "kernel": _text(kernel),
        "stack_fingerprint": _text((applied or {}).get("fingerprint")) if isinstance(applied, Mapping) else None,
        "pins_dir": _text(pins_dir),
        "pins_dir_present": pins_dir_present if isinstance(pins_dir_present, bool) else None,
        "components": components,
        "running": running,
        "versions": versions,
    }
    record["fingerprint"] = _fingerprint({
        "kernel": record["kernel"], "running": running,
        "installed": sorted(f"{p['name']}={p['installed']}" for p in pinned),
    })
    return record


def _check_record(host: str, record: Any) -> Mapping[str, Any]:
    if not isinstance(record, Mapping) or record.get("schema") != SCHEMA:
        raise DriftError(f"{host}: not a {SCHEMA} record ({type(record).__name__}); "
                         "write it with roles/as_built (playbooks/drift.yml does)")
    if not isinstance(record.get("components"), Mapping) or not isinstance(record.get("versions"), Mapping):
        raise DriftError(f"{host}: the as-built record has no components or versions; re-run playbooks/drift.yml")
    return record


def expected_owners(owners: Any, groups: Any, components: Any) -> list[str]:
    """The owners whose pins a node must have: what kiln's plays pin on it.

    *owners*: owner -> ``{groups: [...], components: [...]}`` (``kiln_drift_pin_owners``: the inventory
    groups whose play installs the owner's role, and the stack components it pins); *groups*: the
    node's inventory groups (``group_names``); *components*: the components the node's stack pins
    packages for (the keys of ``kiln_packages``). An owner is expected when the node is in one of
    its groups and the stack pins one of its components (an owner with no components: always).
    """
    where = "kiln_drift_expected_pins"
    if not isinstance(owners, Mapping):
        raise DriftError(f"{where}: kiln_drift_pin_owners must map an owner to {{groups, components}}, "
                         f"got {type(owners).__name__}")
    mine = _names(groups, f"{where}: the node's groups")
    have = _names(components, f"{where}: the stack's components")
    out = []
    for owner, rule in owners.items():
        if not isinstance(owner, str) or not isinstance(rule, Mapping):
            raise DriftError(f"{where}: kiln_drift_pin_owners.{owner} must be {{groups: [...], components: [...]}}, "
                             f"got {type(rule).__name__}")
        want_groups = _names(rule.get("groups") or [], f"{where}: kiln_drift_pin_owners.{owner}.groups")
        want_components = _names(rule.get("components") or [], f"{where}: kiln_drift_pin_owners.{owner}.components")
        if set(want_groups) & set(mine) and (not want_components or set(want_components) & set(have)):
            out.append(owner)
    return sorted(out)


def _names(value: Any, what: str) -> list[str]:
    if isinstance(value, Mapping):
        value = list(value)
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise DriftError(f"{what} must be a list of names, got {type(value).__name__}")
    return list(value)


def _no_pins(record: Mapping[str, Any]) -> str:
    where = record.get("pins_dir")
    if not where:
        return "none (no pin records were read)"
    if record.get("pins_dir_present") is False:
        return f"none ({where} is missing)"
    return f"none in {where}"


def node_drift(host: str, record: Any, intended_stack: Any = None,
               expected: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Rows where *host* is not what kiln pinned (pin, hold), not the stack intended now (stack), or
    has no pins where kiln pins (pins).

    *expected*: the owners whose pins the node must have (``expected_owners``); with it (the drift
    gate) a node without any pin record is drift too. None (the burn-in's own view): pins are
    checked only where recorded.
    """
    record = _check_record(host, record)
    rows: list[dict[str, Any]] = []
    if expected is not None:
        missing = [o for o in _names(expected, f"{host}: the expected pin owners") if o not in record["components"]]
        for owner in sorted(set(missing)):
            rows.append({"node": host, "kind": "pins", "component": owner, "package": None,
                         "intended": f"the pins of {owner}", "actual": _no_pins(record),
                         "fix": f"re-run the play that owns {owner} on {host} (it re-pins, holds and records its pins)"})
        if not record["components"] and not missing:
            rows.append({"node": host, "kind": "pins", "component": "pins", "package": None,
                         "intended": "the pins of kiln's roles on this node", "actual": _no_pins(record),
                         "fix": f"re-run the plays that install {host} (each records its pins); "
                                "nothing says what this node should have without them"})
    want = _text(intended_stack)
    if want is not None and want != record.get("stack_fingerprint"):
        rows.append({"node": host, "kind": "stack", "component": "stack", "package": None,
                     "intended": want, "actual": record.get("stack_fingerprint") or "no stack record",
                     "fix": "converge or upgrade the node to the intended stack (playbooks/upgrade.yml)"})
    pkg_mgr = str(record.get("pkg_mgr") or "apt")
    for owner, comp in sorted(record["components"].items()):
        pkgs = [p for p in (comp or {}).get("packages") or [] if isinstance(p, Mapping)]
        installed = {p["name"]: [v for v in str(p.get("installed") or "").split(",") if v] for p in pkgs}
        held = [p["name"] for p in pkgs if p.get("held")]
        try:
            plan = kiln_pkg_plan([p["spec"] for p in pkgs], installed, pkg_mgr, held)
        except (PkgError, KeyError) as exc:
            raise DriftError(f"{host}: component {owner}: {exc}") from exc
        changing = {c["name"] for c in plan["changes"]}
        for change in plan["changes"]:
            rows.append({"node": host, "kind": "pin", "component": owner, "package": change["name"],
                         "intended": change["to"], "actual": change["from"] or "not installed",
                         "fix": f"re-run the play that owns {owner} on {host} (it re-pins and holds), "
                                "or change kiln_stack if the new version is wanted"})
        for name in plan["hold"]:
            if name not in changing:
                rows.append({"node": host, "kind": "hold", "component": owner, "package": name,
                             "intended": "held", "actual": "not held",
                             "fix": f"re-run the play that owns {owner} on {host} (it holds its pins)"})
    return rows


def _majority(values: Mapping[str, Any]) -> Any:
    counts = Counter(values.values())
    top = counts.most_common()
    if len(top) > 1 and top[0][1] == top[1][1]:
        return None
    return top[0][0]


def peer_drift(records: Mapping[str, Any], partitions: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows for nodes whose driver, NCCL, DOCA, kernel or pinned packages differ from their partition's peers,
    and (kind ``pins``) nodes without the pin record of an owner most of their partition's nodes have.

    The majority of the partition is the reference; with no majority (a tie) every node that
    differs from another is named.
    """
    groups: dict[str, list[str]] = {}
    for host in sorted(records):
        if records[host] is not None:
            groups.setdefault(str(partitions.get(host) or "all"), []).append(host)
    rows: list[dict[str, Any]] = []
    for part, hosts in sorted(groups.items()):
        if len(hosts) < 2:
            continue
        recs = {h: _check_record(h, records[h]) for h in hosts}
        owners = Counter(o for r in recs.values() for o in r["components"])
        for owner, count in sorted(owners.items()):
            if count * 2 <= len(hosts):
                continue
            for host in hosts:
                if owner not in recs[host]["components"]:
                    rows.append({"node": host, "kind": "pins", "component": owner, "package": None,
                                 "intended": f"the pins of {owner}, as on {count} of {len(hosts)} nodes "
                                             f"(partition {part})",
                                 "actual": _no_pins(recs[host]),
                                 "fix": f"re-run the play that owns {owner} on {host} (it re-pins, holds and "
                                        "records its pins), or set kiln_drift_partition if the node is of another kind"})
        keys: list[tuple[str, str | None]] = [(k, None) for k in PEER_VERSIONS]
        names = sorted({(owner, p["name"]) for r in recs.values() for owner, c in r["components"].items()
                        for p in (c or {}).get("packages") or []})
        keys += names
        pin_rows = {(r["node"], r["package"]) for h in hosts for r in node_drift(h, recs[h]) if r["package"]}
        for component, package in keys:
            if package is None:
                values = {h: recs[h]["versions"].get(component) or "none" for h in hosts}
            else:
                values = {h: next((str(p.get("installed") or "not installed") for p in
                                   (recs[h]["components"].get(component) or {}).get("packages") or []
                                   if p.get("name") == package), None) for h in hosts}
                values = {h: v for h, v in values.items() if v is not None}
            if len(set(values.values())) < 2:
                continue
            ref = _majority(values)
            for host, value in sorted(values.items()):
                if value == ref or (host, package) in pin_rows:
                    continue
                others = sorted({v for h, v in values.items() if h != host})
                rows.append({"node": host, "kind": "peers", "component": component, "package": package,
                             "intended": f"{ref} (partition {part})" if ref is not None
                             else f"one of {', '.join(others)} (partition {part}, no majority)",
                             "actual": value,
                             "fix": "make the partition's nodes equal: converge or upgrade them to one stack"})
    return rows


def report(records: Mapping[str, Any], intended: Mapping[str, Any] | None = None,
           partitions: Mapping[str, Any] | None = None, run_id: str = "",
           expected: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The drift gate's report over every node: rows, per-node status, the overall status and a table.

    *records*: host -> as-built record, or None for a node that gave none (unreachable, failed);
    *intended*: host -> fingerprint of the stack the inventory intends; *partitions*: host -> name;
    *expected*: host -> the owners whose pins it must have (``expected_owners``; a host not named
    expects none, but a node without any pin record is drift all the same).
    Status: ``drift`` when any row, else ``incomplete`` when a node gave no record, else ``clean``.
    """
    if not isinstance(records, Mapping) or not records:
        raise DriftError("kiln drift gate: no nodes to compare (the targets group is empty, or every node failed "
                         "before its record was read)")
    for name, value in (("intended", intended), ("partitions", partitions), ("expected", expected)):
        if value is not None and not isinstance(value, Mapping):
            raise DriftError(f"kiln drift gate: {name} must map a host to its value, got {type(value).__name__}")
    intended = dict(intended or {})
    partitions = dict(partitions or {})
    expected = dict(expected or {})
    rows: list[dict[str, Any]] = []
    for host in sorted(records):
        if records[host] is None:
            rows.append({"node": host, "kind": "record", "component": "as-built", "package": None,
                         "intended": "a record", "actual": "none (unreachable, or the read failed)",
                         "fix": f"make {host} reachable and re-run playbooks/drift.yml"})
            continue
        rows += node_drift(host, records[host], intended.get(host), expected.get(host) or [])
    seen = {(r["node"], r["kind"], r["component"]) for r in rows if r["kind"] == "pins"}
    peers = [r for r in peer_drift(records, partitions)
             if r["kind"] != "pins" or (r["node"], r["kind"], r["component"]) not in seen]
    named = {r["node"] for r in peers if r["kind"] == "pins"}  # the owners its peers have say more than "none"
    rows = [r for r in rows if not (r["kind"] == "pins" and r["component"] == "pins" and r["node"] in named)] + peers
    rows.sort(key=lambda r: (r["node"], KINDS.index(r["kind"]), r["component"], r["package"] or ""))
    nodes: dict[str, Any] = {}
    for host in sorted(records):
        mine = [r for r in rows if r["node"] == host]
        rec = records[host]
        nodes[host] = {
            "status": "unknown" if rec is None else ("drift" if mine else "clean"),
            "fingerprint": None if rec is None else rec.get("fingerprint"),
            "stack_fingerprint": None if rec is None else rec.get("stack_fingerprint"),
            "intended_stack": intended.get(host),
            "partition": partitions.get(host) or "all",
            "versions": None if rec is None else dict(rec.get("versions") or {}),
            "rows": len(mine),
        }
    drifted = any(r["kind"] != "record" for r in rows)
    unknown = any(n["status"] == "unknown" for n in nodes.values())
    status = "drift" if drifted else ("incomplete" if unknown else "clean")
    out = {"schema": REPORT_SCHEMA, "run_id": str(run_id), "status": status, "nodes": nodes, "rows": rows,
           "counts": {s: sum(1 for n in nodes.values() if n["status"] == s) for s in ("clean", "drift", "unknown")}}
    out["table"] = table(out)
    out["lines"] = [f"{r['node']} {r['component']}{' ' + r['package'] if r['package'] else ''}: intended "
                    f"{r['intended']}, actual {r['actual']} ({r['kind']})" for r in rows]
    return out


def table(drift: Mapping[str, Any]) -> list[str]:
    """The report as aligned text lines: one line per node x component (intended / actual)."""
    head = ["node", "kind", "component", "package", "intended", "actual"]
    body = [[r["node"], r["kind"], r["component"], r["package"] or "-", str(r["intended"]), str(r["actual"])]
            for r in drift.get("rows") or []]
    counts = drift.get("counts") or {}
    summary = (f"drift gate: {str(drift.get('status', '')).upper()} -- {counts.get('clean', 0)} clean, "
               f"{counts.get('drift', 0)} drifted, {counts.get('unknown', 0)} without a record")
    if not body:
        return [summary]
    widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
    return [summary] + ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [head] + body]


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus(drift: Mapping[str, Any], node: str | None = None, timestamp: float | None = None) -> str:
    """Textfile-collector metrics: kiln_drift (1 per row), kiln_drift_node (0 clean, 1 drift, NaN unknown).

    With *node*, only that node's samples (its own textfile); without, every node's.
    """
    if not isinstance(drift, Mapping) or not isinstance(drift.get("nodes") or {}, Mapping) \
            or not all(isinstance(info, Mapping) for info in (drift.get("nodes") or {}).values()):
        raise DriftError("kiln_drift_prom: expected a drift report (its nodes: node -> {status, fingerprint})")
    rows = drift.get("rows") or []
    if isinstance(rows, (str, Mapping)) or not isinstance(rows, Sequence) \
            or not all(isinstance(r, Mapping) and "node" in r for r in rows):
        raise DriftError("kiln_drift_prom: expected a drift report (its rows: [{node, kind, component, ...}])")
    lines = ["# HELP kiln_drift_node Drift gate per node: 0 clean, 1 drift, NaN no as-built record.",
             "# TYPE kiln_drift_node gauge"]
    for host, info in sorted((drift.get("nodes") or {}).items()):
        if node is not None and host != node:
            continue
        value = {"clean": "0", "drift": "1"}.get(info.get("status"), "NaN")
        lines.append(f'kiln_drift_node{{node="{_label(host)}",fingerprint="{_label(info.get("fingerprint") or "")}"}} {value}')
    lines += ["# HELP kiln_drift One sample per drift found: node, kind, component, package, intended, actual.",
              "# TYPE kiln_drift gauge"]
    for row in drift.get("rows") or []:
        if node is not None and row["node"] != node:
            continue
        labels = ",".join(f'{k}="{_label(row.get(k) or "")}"' for k in ("node", "kind", "component", "package",
                                                                     "intended", "actual"))
        lines.append(f"kiln_drift{{{labels}}} 1")
    if timestamp is not None and math.isfinite(float(timestamp)):
        lines += ["# HELP kiln_drift_last_run_timestamp_seconds When the drift gate last ran.",
                  "# TYPE kiln_drift_last_run_timestamp_seconds gauge",
                  f"kiln_drift_last_run_timestamp_seconds {float(timestamp):.0f}"]
    return "\n".join(lines) + "\n"


def mixed_versions(versions: Mapping[str, Any], members: Sequence[str],
                   components: Sequence[str] = CONSISTENT) -> list[dict[str, Any]]:
    """The components whose versions differ across *members*: ``[{component, versions: {version: [nodes]}}]``.

    *versions*: node -> {driver, nccl, doca, ...} (a record's ``versions``). A node without a value
    counts as ``none``; a member with no versions at all counts as ``unknown`` -- either way it
    differs from a node that has one.
    """
    out = []
    for component in components:
        seen: dict[str, list[str]] = {}
        for node in sorted({str(m) for m in members}):
            entry = versions.get(node) if isinstance(versions, Mapping) else None
            value = (_text(entry.get(component)) or "none") if isinstance(entry, Mapping) else "unknown"
            seen.setdefault(value, []).append(node)
        if len(seen) > 1:
            out.append({"component": component, "versions": dict(sorted(seen.items()))})
    return out


def mixed_text(mixed: Sequence[Mapping[str, Any]]) -> str:
    """One line: ``nccl 2.28.7 on a, b; 2.28.3 on c``, components joined by `` | ``."""
    return " | ".join(
        f"{m['component']} " + "; ".join(f"{v} on {', '.join(nodes)}" for v, nodes in m["versions"].items())
        for m in mixed)

# --------------------------------------------------------------------------- the filters
# What filter_plugins/kiln_drift_filters.py registers: each input checked (one FilterError naming the
# filter and the input), then the functions above.

def _mapping(name: str, what: str, value: Any) -> dict[Any, Any]:
    """*value* (none: empty) as a dict, or one FilterError naming the filter and the input."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FilterError(f"{name}: {what} must be a mapping, got {type(value).__name__}")
    return dict(value)


def kiln_as_built(read: Any, host: Any, kernel: Any = None, os: Any = None, gpu: Any = None,
                  fabric: Any = None, applied: Any = None) -> Any:
    """The as-built record of one node from a kiln_packages state=read result."""
    if not isinstance(read, dict) or "packages" not in read or read.get("pkg_mgr") not in ("apt", "dnf"):
        raise FilterError(f"kiln_as_built: {host}: expected the result of kiln_packages state=read "
                          "(packages, held, pins, pkg_mgr apt or dnf)")
    build = as_filter(as_built, (DriftError,))
    return build(str(host), read["pkg_mgr"], read.get("packages") or {},
                 read.get("held") or [], read.get("pins") or {}, kernel=kernel, os_id=os, gpu=gpu,
                 fabric=fabric, applied=applied, pins_dir=read.get("pins_dir"),
                 pins_dir_present=read.get("pins_dir_present"))


def kiln_node_drift(record: Any, host: Any, intended_stack: Any = None, expected: Any = None) -> Any:
    """One node's drift rows (pins, pin, hold, stack) from its as-built record."""
    return as_filter(node_drift, (DriftError,))(str(host), record, intended_stack, expected)


def kiln_drift_expected_pins(owners: Any, groups: Any, components: Any = None) -> Any:
    """The owners whose pins a node must have (kiln_drift_pin_owners, its groups, its stack's components)."""
    return as_filter(expected_owners, (DriftError,))(owners, groups, [] if components is None else components)


def kiln_drift_report(records: Any, intended: Any = None, partitions: Any = None, run_id: Any = "",
                      expected: Any = None) -> Any:
    """The drift gate's report over every node (rows, per-node status, overall status, table)."""
    name = "kiln_drift_report"
    build = as_filter(report, (DriftError,))
    return build(_mapping(name, "the input (node -> as-built record)", records),
                 _mapping(name, "intended (node -> stack fingerprint)", intended),
                 _mapping(name, "partitions (node -> partition)", partitions),
                 "" if run_id is None else str(run_id),
                 _mapping(name, "expected (node -> pin owners)", expected))


def kiln_drift_prom(report: Any, node: Any = None, timestamp: Any = None) -> str:
    """Prometheus textfile of a drift report (every node, or one)."""
    try:
        when = None if timestamp is None else float(timestamp)
    except (TypeError, ValueError) as exc:
        raise FilterError(f"kiln_drift_prom: timestamp {timestamp!r} is not a number of seconds") from exc
    if not isinstance(report, dict):
        raise FilterError(f"kiln_drift_prom: expected a kiln_drift_report result, got {type(report).__name__}")
    return as_filter(prometheus, (DriftError,))(report, None if node is None else str(node), when)
