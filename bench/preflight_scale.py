#!/usr/bin/env python3
"""Benchmark: preflight + plan on generated inventories (not a test).

Generates inventories of 100, 1,000 and 10,000 hosts whose kiln_stack comes
from group_vars with 5 distinct stacks, then measures, each in a fresh
process:

  bare     a play on localhost that only walks hostvars for every host
           (groups['all'] | map('extract', hostvars, 'kiln_stack')), the floor
           any inventory-wide check pays in ansible-core 2.19;
  kiln     ansible-playbook playbooks/preflight.yml playbooks/plan.yml (one
           run, as site.yml would import them).

Reports wall time and peak RSS (largest process of the run: ansible-playbook
itself or one of its workers). Usage:

  .venv/bin/python bench/preflight_scale.py [--sizes 100,1000,10000] [--repeat 1] [--json results/bench.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "filter_plugins"))

import kiln_compat  # noqa: E402  (path set just above)

STACK_SPECS = [
    ("hgx_h100", "H100-SXM5-80GB", "ubuntu-24.04", None),
    ("hgx_b200", "B200", "ubuntu-24.04", None),
    ("a100_deb", "A100-SXM4-80GB", "debian-12", "2.12"),
    ("l40s_rocky", "L40S", "rocky-9", None),
    ("v100_legacy", "V100", "ubuntu-22.04", "2.8"),
]

BARE_PLAY = """---
- name: Bare walk of every host's hostvars
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Extract kiln_stack for every host
      ansible.builtin.set_fact:
        walked: "{{ groups['all'] | map('extract', hostvars, 'kiln_stack') | list | length }}"
    - name: Show the count
      ansible.builtin.debug:
        var: walked
"""


def make_inventory(root: Path, hosts: int) -> Path:
    inv = root / f"inv{hosts}"
    (inv / "group_vars").mkdir(parents=True)
    per = hosts // len(STACK_SPECS)
    lines = ["---", "all:", "  children:", "    gpu_nodes:", "      children:"]
    n = 0
    for i, (group, gpu, os_id, torch) in enumerate(STACK_SPECS):
        lines += [f"        {group}:", "          hosts:"]
        count = per if i < len(STACK_SPECS) - 1 else hosts - n
        for _ in range(count):
            n += 1
            lines.append(f"            node{n:05d}: {{ansible_host: 192.0.2.{n % 250 + 1}}}")
        stack = kiln_compat.kiln_recommend_stack(gpu, os=os_id, torch=torch)
        (inv / "group_vars" / f"{group}.yml").write_text("---\n" + json.dumps({"kiln_stack": stack}, indent=2) + "\n")
    (inv / "hosts.yml").write_text("\n".join(lines) + "\n")
    return inv


def measure(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """Run cmd in a fresh child; return (wall s, peak RSS MiB, rc, output tail)."""
    probe = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "wall = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "print(json.dumps({'wall': wall, 'rss': rss, 'rc': p.returncode, 'out': (p.stdout + p.stderr)[-3000:]}))\n"
    )
    res = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True, env=env, cwd=REPO, check=True)
    data = json.loads(res.stdout)
    return data["wall"], data["rss"], data["rc"], data["out"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--repeat", type=int, default=1, help="runs per measurement; the best wall time is kept")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    playbook = str(Path(sys.executable).parent / "ansible-playbook")
    if not Path(playbook).exists():
        playbook = "ansible-playbook"
    results = []
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        root = Path(tmp)
        (root / "bare.yml").write_text(BARE_PLAY)
        env = dict(os.environ)
        env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_HOME=str(root / "ansible-home"),
                   ANSIBLE_CACHE_PLUGIN_CONNECTION=str(root / "facts"), ANSIBLE_NOCOLOR="1",
                   PATH=f"{Path(playbook).parent}{os.pathsep}{env.get('PATH', '')}")
        for size in [int(s) for s in args.sizes.split(",")]:
            inv = make_inventory(root, size)
            runs = {
                "bare": [playbook, str(root / "bare.yml"), "-i", str(inv)],
                "kiln": [playbook, "playbooks/preflight.yml", "playbooks/plan.yml", "-i", str(inv),
                         "-e", f"kiln_plan_output={root / 'plan.json'}"],
            }
            row: dict[str, object] = {"hosts": size, "distinct_stacks": len(STACK_SPECS)}
            for name, cmd in runs.items():
                best = None
                for _ in range(args.repeat):
                    wall, rss, rc, out = measure(cmd, env)
                    if rc != 0:
                        print(out, file=sys.stderr)
                        raise SystemExit(f"{name} run failed for {size} hosts (rc {rc})")
                    if best is None or wall < best[0]:
                        best = (wall, rss)
                row[f"{name}_wall_s"] = round(best[0], 2)
                row[f"{name}_peak_rss_mib"] = round(best[1], 1)
            if size and (root / "plan.json").exists():
                plan = json.loads((root / "plan.json").read_text())
                row["plan_distinct_stacks"] = plan["distinct_stacks"]
            results.append(row)
            print(f"{size:>6} hosts: bare walk {row['bare_wall_s']:>6.2f} s {row['bare_peak_rss_mib']:>7.1f} MiB | "
                  f"preflight+plan {row['kiln_wall_s']:>6.2f} s {row['kiln_peak_rss_mib']:>7.1f} MiB", flush=True)
    info = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "results": results}
    try:
        import ansible

        info["ansible_core"] = ansible.__version__
    except ImportError:  # pragma: no cover
        pass
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    raise SystemExit(main())
