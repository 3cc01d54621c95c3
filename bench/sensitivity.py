#!/usr/bin/env python3
"""Burn-in sensitivity on the local test cluster: the smallest *observed* slowdown blamed every time.

Needs a running burn-in test cluster (1 controller + >= 4 compute nodes with
Slurm and the CPU engine), e.g. the burnin scenario kept up:

  make testbed && molecule converge -s burnin          (with the Makefile's environment)
  python3 bench/sensitivity.py --trials 10 --drops 0.10,0.15,0.20,0.30 --band 0.2

Each trial is one whole pair phase (module_utils/kiln/burnin/isolate.py, the code the
playbook runs): 2-node CPU-engine all-reduces launched with srun on the
controller, parsed and judged exactly as the burn-in does (kiln_burnin_checks.nccl_check
against the cpu two-node floor, then the run's reference and the nodes'
baselines). Healthy trials count false alarms (any node blamed or not cleared).

The fault is `tc qdisc ... tbf` on the bad node's eth0. A tbf cap is not the
slowdown it causes: the CPU engine sends in bursts, so caps of 95 % and 90 % of
the average rate both cost its pairs about 43 % (issue 11's table). The bench
therefore *calibrates the fault to a target observed drop*: for each target
(`--drops`) it searches the cap (bisection on a log scale, `--calib-pairs`
pair runs per probe between the bad node and a healthy partner) until the
median busbw of those pairs is that much below the healthy pair busbw, then
runs the trials with that cap, and reports the drop the trials' own pairs with
the bad node saw next to each outcome. Not a timed test: it prints a Markdown
table for docs/burnin.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "module_utils"))

from kiln.burnin import checks as kiln_burnin_checks  # noqa: E402
from kiln.burnin import isolate as kiln_isolate  # noqa: E402
from kiln import verdict as kiln_verdict  # noqa: E402


def sh(argv: List[str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


class Cluster:
    def __init__(self, ctl: str, args: List[str], timeout: int) -> None:
        self.ctl = ctl
        self.args = args
        self.timeout = timeout
        self.floor = kiln_verdict.lookup_floor(kiln_verdict.load_floors(kiln_verdict.default_floors_path()), "cpu", "tcp", "two_node_ring")
        self.seconds: List[float] = []

    def pair(self, a: str, b: str) -> Dict[str, Any]:
        start = time.monotonic()
        argv = ["podman", "exec", self.ctl, "timeout", str(self.timeout), "srun", "--job-name=kiln-bench", "-N2",
                "-w", f"{a},{b}", "--ntasks-per-node=1", "--mpi=pmix", "--export=ALL",
                "/usr/local/bin/kiln-cpu-allreduce"] + self.args
        out = sh(argv, self.timeout + 30)
        self.seconds.append(time.monotonic() - start)
        check = kiln_burnin_checks.nccl_check("nccl.pair.all_reduce",
                                              {"text": out.stdout, "rc": out.returncode,
                                               "timed_out": out.returncode == 124}, self.floor)
        return {"verdict": check["status"], "value": check.get("value")}


def shape(node: str, rate_mbit: int | None) -> None:
    sh(["podman", "exec", node, "tc", "qdisc", "del", "dev", "eth0", "root"])
    if rate_mbit:
        out = sh(["podman", "exec", node, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate",
                  f"{rate_mbit}mbit", "burst", "256kb", "latency", "50ms"])
        if out.returncode:
            raise SystemExit(f"tc on {node} failed: {out.stderr}")


def observed_drop(values: List[float], healthy_rate: float) -> Optional[float]:
    """1 - median(values) / healthy_rate: the slowdown pairs actually saw (None without values)."""
    finite = [v for v in values if isinstance(v, (int, float)) and v == v and v > 0]
    if not finite or not healthy_rate > 0:
        return None
    return 1.0 - statistics.median(finite) / healthy_rate


def calibrate_cap(measure: Callable[[float], Optional[float]], target: float, *, low: float = 0.2,
                  high: float = 20.0, steps: int = 7, tolerance: float = 0.025) -> Tuple[float, Optional[float]]:
    """The tbf cap (x healthy busbw) whose measured drop is closest to ``target``.

    ``measure(cap)`` returns the observed drop with that cap (larger cap, smaller
    drop). Bisection on a log scale between ``low`` and ``high``; stops early
    when a probe is within ``tolerance`` of the target. Returns (cap, drop seen).
    """
    if not 0.0 < target < 1.0:
        raise ValueError(f"target drop must be in (0, 1), got {target!r}")
    best: Tuple[float, Optional[float]] = (high, None)
    lo, hi = low, high
    for _ in range(steps):
        cap = (lo * hi) ** 0.5
        drop = measure(cap)
        if drop is None:
            raise RuntimeError(f"no pair result with a cap of {cap:.2f}x: cannot calibrate")
        if best[1] is None or abs(drop - target) < abs(best[1] - target):
            best = (cap, drop)
        if abs(drop - target) <= tolerance:
            break
        if drop > target:   # too slow: raise the cap
            lo = cap
        else:
            hi = cap
    return best


def pair_values_with(runs: List[Dict[str, Any]], node: str) -> List[float]:
    """busbw of every measured pair that had ``node`` in it, over all trials."""
    return [r["value"] for t in runs for r in t["results"] if node in r["pair"] and r.get("value")]


def trial(cluster: Cluster, nodes: List[str], baselines: Dict[str, float], band: float) -> Dict[str, Any]:
    out = kiln_isolate.isolate(nodes, lambda a, b, _r: cluster.pair(a, b), mode="acceptance",
                               baselines=baselines, band=band, max_rounds=4)
    return {"states": {n: r["state"] for n, r in out["nodes"].items()}, "rounds": out["rounds"],
            "values": [r.get("value") for r in out["results"]], "sigma": out["noise"].get("sigma"),
            "pairs": len(out["results"]),
            "results": [{"pair": list(r["pair"]), "value": r.get("value")} for r in out["results"]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ctl", default="kiln-burnin-ctl")
    parser.add_argument("--nodes", default="kiln-burnin-c1,kiln-burnin-c2,kiln-burnin-c3,kiln-burnin-c4")
    parser.add_argument("--bad", default="kiln-burnin-c3")
    parser.add_argument("--drops", default="0.10,0.15,0.20,0.30",
                        help="target observed busbw drops of the bad node's pairs; the tbf cap is calibrated to each")
    parser.add_argument("--calib-pairs", type=int, default=2, help="pair runs per calibration probe")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--band", type=float, default=0.10)
    parser.add_argument("--args", default="-b 16M -e 64M -f 2 -n 8 -w 2", help="kiln-cpu-allreduce arguments")
    parser.add_argument("--timeout", type=int, default=90)
    parser.add_argument("--json", help="also write the raw trials here")
    opts = parser.parse_args()
    nodes = opts.nodes.split(",")
    cluster = Cluster(opts.ctl, opts.args.split(), opts.timeout)
    shape(opts.bad, None)

    # calibration: every node's pair busbw over two healthy one-pass rounds -> baselines
    calib: Dict[str, List[float]] = {n: [] for n in nodes}
    for _ in range(2):
        for a, b in kiln_isolate.first_round(nodes, "acceptance"):
            value = cluster.pair(a, b)["value"]
            calib[a].append(value)
            calib[b].append(value)
    baselines = {n: statistics.median(v) for n, v in calib.items()}
    healthy_rate = statistics.median([v for vs in calib.values() for v in vs])
    print(f"# calibration: pair busbw {healthy_rate:.3f} GB/s (baselines {baselines}); "
          f"pair run {statistics.median(cluster.seconds):.1f} s", flush=True)

    raw: Dict[str, Any] = {"baselines": baselines, "healthy_rate": healthy_rate, "runs": {}}
    rows = []
    healthy = [trial(cluster, nodes, baselines, opts.band) for _ in range(opts.trials)]
    undecided = sum(1 for t in healthy if any(s not in (kiln_isolate.CLEARED, kiln_isolate.BLAMED)
                                              for s in t["states"].values()))
    blamed = sum(1 for t in healthy if any(s == kiln_isolate.BLAMED for s in t["states"].values()))
    values = [v for t in healthy for v in t["values"] if v]
    noise = statistics.pstdev(values) / statistics.mean(values)
    run_sigma = statistics.median([t["sigma"] for t in healthy if t["sigma"] is not None] or [0.0])
    raw["runs"]["healthy"] = healthy
    print(f"# healthy: {blamed}/{opts.trials} with a node blamed, {undecided}/{opts.trials} with a node undecided, "
          f"pair busbw sigma {noise:.1%} (per-run robust sigma, median {run_sigma:.1%}), mean rounds "
          f"{statistics.mean(t['rounds'] for t in healthy):.1f}", flush=True)
    rows.append(("none", 0.0, f"{blamed}/{opts.trials} blamed, {undecided}/{opts.trials} undecided",
                 statistics.mean(t["rounds"] for t in healthy), statistics.mean(t["pairs"] for t in healthy)))
    good = next(n for n in nodes if n != opts.bad)

    def measure(cap: float) -> Optional[float]:
        shape(opts.bad, int(healthy_rate * 8000 * cap))
        try:
            values = [cluster.pair(opts.bad, good)["value"] for _ in range(opts.calib_pairs)]
        finally:
            shape(opts.bad, None)
        drop = observed_drop([v for v in values if v], healthy_rate)
        print(f"#   probe cap {cap:.2f}x -> drop {drop if drop is None else f'{drop:.0%}'}", flush=True)
        return drop

    for target in [float(d) for d in opts.drops.split(",")]:
        cap, probe = calibrate_cap(measure, target)
        print(f"# target drop {target:.0%}: cap {cap:.2f}x the healthy pair busbw (probe saw {probe:.0%})", flush=True)
        shape(opts.bad, int(healthy_rate * 8000 * cap))
        try:
            runs = [trial(cluster, nodes, baselines, opts.band) for _ in range(opts.trials)]
        finally:
            shape(opts.bad, None)
        raw["runs"][f"{target:.2f}"] = {"cap": cap, "probe_drop": probe, "trials": runs}
        flagged = sum(1 for t in runs if t["states"][opts.bad] == kiln_isolate.BLAMED
                      and all(s == kiln_isolate.CLEARED for n, s in t["states"].items() if n != opts.bad))
        others = sum(1 for t in runs if any(s != kiln_isolate.CLEARED for n, s in t["states"].items()
                                            if n != opts.bad))
        drop = observed_drop(pair_values_with(runs, opts.bad), healthy_rate)
        rows.append((f"{target:.0%} (cap {cap:.2f}x)", drop or 0.0,
                     f"{flagged}/{opts.trials} bad node alone blamed (other nodes not cleared in {others})",
                     statistics.mean(t["rounds"] for t in runs), statistics.mean(t["pairs"] for t in runs)))
        print(f"# target {target:.0%}: observed drop {drop or 0.0:.0%}, flagged {flagged}/{opts.trials}", flush=True)
    print(f"\nTest bed: {len(nodes)} compute nodes, CPU engine `{opts.args}`, band {opts.band:.0%}, "
          f"healthy pair busbw {healthy_rate:.3f} GB/s, sigma {noise:.1%}.\n")
    print("| target drop (calibrated tbf cap) | observed busbw drop on the bad node's pairs | outcome | mean rounds | mean pairs |")
    print("|---|---|---|---|---|")
    for cap, drop, outcome, rounds, pairs in rows:
        print(f"| {cap} | {drop:.0%} | {outcome} | {rounds:.1f} | {pairs:.1f} |")
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as handle:
            json.dump(raw, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
