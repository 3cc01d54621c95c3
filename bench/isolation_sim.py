#!/usr/bin/env python3
"""Scale simulation of the burn-in's pair isolation (module_utils/kiln/burnin/isolate.py).

A pure-Python model of a fabric: N nodes, each with a link rate (1.0 healthy,
1 - slowdown for a bad node); a pair's all-reduce busbw is the slower node's
rate times multiplicative Gaussian noise. k bad nodes are drawn at random.
The isolation algorithm is the one the playbook runs (kiln_isolate.isolate).

Reports, per k: pair rounds used (worst and mean), bad nodes blamed, good
nodes blamed (false blame), nodes left INCOMPLETE. Not a timed test:

  python3 bench/isolation_sim.py                       # N=1024, k=1..4, 200 trials each
  python3 bench/isolation_sim.py --nodes 64 --trials 50 --noise 0.05 --slowdown 0.15
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from typing import Any, Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "module_utils"))

from kiln.burnin import isolate as kiln_isolate  # noqa: E402  (path set above)


def trial(nodes: int, bad: int, slowdown: float, noise: float, band: float, confirm: bool,
          baselines: bool, mode: str, rng: random.Random, max_rounds: int = 4) -> Dict[str, Any]:
    names = [f"n{i:04d}" for i in range(nodes)]
    culprits = set(rng.sample(names, bad))
    rate = {n: (1.0 - slowdown if n in culprits else 1.0) for n in names}

    def run_pair(a: str, b: str, _round: int) -> Dict[str, Any]:
        value = min(rate[a], rate[b]) * max(0.0, rng.gauss(1.0, noise))
        return {"verdict": "PASS", "value": round(value, 4)}

    known = [n for n in names if n not in culprits] if mode == "swap" else []
    targets = sorted(culprits | set(rng.sample([n for n in names if n not in culprits], 2))) if mode == "swap" else []
    base = {n: 1.0 for n in names} if baselines else None
    members = names if mode != "swap" else sorted(set(targets) | set(known))
    out = kiln_isolate.isolate(members, run_pair, mode=mode, targets=targets, known_good=known,
                               baselines=base, band=band, confirm=confirm, max_rounds=max_rounds)
    states = out["nodes"]
    blamed = {n for n, r in states.items() if r["state"] == kiln_isolate.BLAMED}
    return {"rounds": out["rounds"], "found": len(blamed & culprits), "false": len(blamed - culprits),
            "incomplete": sum(1 for r in states.values() if r["state"] == kiln_isolate.INCOMPLETE),
            "pairs": len(out["results"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--bad", default="1,2,3,4", help="comma-separated k values")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--slowdown", type=float, default=0.15, help="bad node's rate loss (0.15 = 15%%)")
    parser.add_argument("--noise", type=float, default=0.03, help="relative sigma of a pair measurement")
    parser.add_argument("--band", type=float, default=0.10, help="SLOW below the reference by more than this")
    parser.add_argument("--no-confirm", action="store_true")
    parser.add_argument("--max-rounds", type=int, default=4, help="as kiln_burnin_pair_rounds (default 4)")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--mode", default="acceptance", choices=kiln_isolate.MODES)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows: List[Dict[str, Any]] = []
    for bad in [int(k) for k in args.bad.split(",")]:
        runs = [trial(args.nodes, bad, args.slowdown, args.noise, args.band, not args.no_confirm,
                      not args.no_baselines, args.mode, rng, args.max_rounds) for _ in range(args.trials)]
        rows.append({
            "nodes": args.nodes, "bad": bad, "trials": args.trials,
            "rounds_max": max(r["rounds"] for r in runs),
            "rounds_mean": round(sum(r["rounds"] for r in runs) / len(runs), 2),
            "pairs_mean": round(sum(r["pairs"] for r in runs) / len(runs), 1),
            "isolated_all": sum(1 for r in runs if r["found"] == bad),
            "false_blame_nodes": sum(r["false"] for r in runs),
            "false_blame_rate": sum(r["false"] for r in runs) / (len(runs) * (args.nodes - bad)),
            "incomplete_nodes": sum(r["incomplete"] for r in runs),
        })
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"# mode {args.mode}, slowdown {args.slowdown:.0%}, noise sigma {args.noise:.0%}, band {args.band:.1%}, "
          f"confirm {not args.no_confirm}, baselines {not args.no_baselines}, max rounds {args.max_rounds}, "
          f"seed {args.seed}")
    print("| N | k | trials | rounds (max) | rounds (mean) | pairs (mean) | all bad isolated | good nodes blamed |"
          " false-blame rate | left INCOMPLETE |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['nodes']} | {r['bad']} | {r['trials']} | {r['rounds_max']} | {r['rounds_mean']} | {r['pairs_mean']} |"
              f" {r['isolated_all']}/{r['trials']} | {r['false_blame_nodes']} | {r['false_blame_rate']:.2e} |"
              f" {r['incomplete_nodes']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
