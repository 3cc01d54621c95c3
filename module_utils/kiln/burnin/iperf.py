# -*- coding: utf-8 -*-
"""The iperf3 link rates between node pairs: one node's result (:func:`kiln_iperf_link`, a filter that
never fails on the program's output) and the run's reference (:func:`iperf_reference`).

Each fabric node measures the link to the next one (``iperf3 -J -t N -c <next>``,
roles/burnin/tasks/iperf.yml). Whatever iperf3 printed -- its JSON, an ``error`` inside it, nothing at
all, or text that is not JSON (a truncated or doubled document) -- becomes ``{client, server, gbps,
error}``: a finite rate above zero, or ``gbps: None`` and the reason. The reference is the slowest
measured pair, next to which the report shows the fabric all-reduce's busbw; every fabric node whose
link was expected and is not measured is listed in ``unmeasured``, and the assembly then refuses to
call the fabric check PASS (burnin.assemble).

Standard library only; importable as ``kiln.burnin.iperf`` and as ``ansible.module_utils.kiln.burnin.iperf``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Dict, List, Optional

from ..errors import FilterError

__all__ = ["kiln_iperf_link", "iperf_reference"]

_EXCERPT = 160


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


def _rate(doc: Mapping[str, Any]) -> Optional[float]:
    end = doc.get("end")
    received = end.get("sum_received") if isinstance(end, Mapping) else None
    bps = received.get("bits_per_second") if isinstance(received, Mapping) else None
    if isinstance(bps, bool) or not isinstance(bps, (int, float)) or not math.isfinite(bps) or bps <= 0:
        return None
    gbps = float(bps) / 1e9
    return round(gbps, 3) if gbps >= 0.001 else gbps  # a crawl stays a (tiny) rate, never 0.0


def kiln_iperf_link(run: Any, client: Any, server: Any) -> Dict[str, Any]:
    """One node's link result from its registered iperf3 run (``{rc, stdout, stderr}``).

    *client* and *server* are the inventory names. Never raises on what iperf3 printed; raises
    FilterError only when *client* or *server* is not a name (a caller's mistake)."""
    for what, name in (("client", client), ("server", server)):
        if not isinstance(name, str) or not name:
            raise FilterError(f"kiln_iperf_link: {what} must be the inventory name of a node, got {name!r}")
    out: Dict[str, Any] = {"client": client, "server": server, "gbps": None, "error": ""}
    if not isinstance(run, Mapping) or run.get("skipped"):
        out["error"] = "iperf3 did not run on the client"
        return out
    rc, stdout, stderr = run.get("rc"), run.get("stdout"), run.get("stderr")
    stdout = stdout if isinstance(stdout, str) else ""
    stderr = stderr if isinstance(stderr, str) else ""
    where = f"iperf3 {client}->{server}"
    if not stdout.strip():
        out["error"] = f"{where} printed no JSON (rc {rc!r}){': ' + _excerpt(stderr) if stderr.strip() else ''}"
        return out
    try:
        doc = json.loads(stdout)
    except ValueError as exc:
        out["error"] = f"{where} printed text that is not one JSON document ({exc.msg} at {exc.pos}): {_excerpt(stdout)}"
        return out
    if not isinstance(doc, Mapping):
        out["error"] = f"{where} printed JSON that is not an object: {_excerpt(stdout)}"
        return out
    if doc.get("error"):
        out["error"] = f"{where}: {_excerpt(str(doc['error']))}"
        return out
    if rc != 0 or isinstance(rc, bool):
        out["error"] = f"{where} exited with rc {rc!r}{': ' + _excerpt(stderr) if stderr.strip() else ''}"
        return out
    gbps = _rate(doc)
    if gbps is None:
        out["error"] = f"{where}: no finite received rate above zero in its JSON (end.sum_received.bits_per_second)"
        return out
    out["gbps"] = gbps
    return out


def iperf_reference(results: Sequence[Mapping[str, Any]],
                    expected: Sequence[str] = ()) -> Optional[Dict[str, Any]]:
    """Lowest iperf3 rate (Gbit/s) of the node pairs: the raw link the all-reduce is compared with.

    *expected*: the nodes that were to measure their link (the fabric nodes in a mode with a link
    check). ``unmeasured`` lists, for each of them, why there is no rate: its error, or that it
    recorded no result (its iperf3 phase did not finish). None when nothing was measured and nothing
    was expected."""
    by_client = {str(r.get("client")): r for r in results if isinstance(r, Mapping) and r.get("client")}
    rates = [r for r in by_client.values() if _finite(r.get("gbps"))]
    unmeasured: List[str] = []
    for node in expected:
        entry = by_client.get(node)
        if entry is None:
            unmeasured.append(f"{node}: no iperf3 result (its iperf3 phase did not finish on the node)")
        elif not _finite(entry.get("gbps")):
            unmeasured.append(f"{node}: {entry.get('error') or 'no rate'}")
    if not rates and not unmeasured:
        return None
    out: Dict[str, Any] = {"metric": "iperf3", "unit": "Gbit/s", "value": None, "pair": None, "pairs": []}
    if rates:
        low = min(rates, key=lambda r: float(r["gbps"]))
        out.update(value=float(low["gbps"]), pair=f"{low.get('client')}->{low.get('server')}",
                   pairs=[{"pair": f"{r.get('client')}->{r.get('server')}", "gbps": float(r["gbps"])} for r in rates])
    if unmeasured:
        out["unmeasured"] = unmeasured
    return out


def _finite(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value > 0)
