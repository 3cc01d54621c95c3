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
      [--hostile | --hostile-only] [--timeout 600] [--mem-limit-mib 8192]

Hostile mode (--hostile adds it after the normal rows, --hostile-only runs only
it): the same sizes, hosts spread over the 5 normal groups and 3 groups whose
group_vars carry hostile kiln_stack values:

  alias_bomb    a YAML alias bomb inside kiln_stack (~450 bytes: 9 levels of
                lists, each holding 9 aliases of the previous one: 9**9 leaves
                if anything expands it);
  huge_version  kiln_stack.cuda is a 20 MiB version string;
  sloppy_yaml   unquoted floats (cuda: 12.10 reads as 12.1) and a typo'd key
                (drvier: instead of driver:).

kiln is expected to refuse these stacks (non-zero rc, a clear error), so a
hostile row records, for the kiln run and the bare walk of the same inventory,
rc, wall time, peak RSS, output size in bytes and the first error line instead
of aborting. The bench fails only when the kiln run crashed (a Python
traceback, an unexpected-exception error, rc 250 or a signal) or printed more
than 1 MB; a kiln run that accepts the hostile stacks is reported as a
warning. Every run is killed after --timeout seconds (default 600), recorded
as a timeout in its row: a normal run that times out fails the bench, a
hostile one does not. --mem-limit-mib caps each process's address space
(RLIMIT_AS; 0: no cap) so an expanded alias bomb ends in MemoryError, not in
the host swapping.
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
sys.path.insert(0, str(REPO / "module_utils"))

from kiln_compat_engine.recommend import kiln_recommend_stack  # noqa: E402  (path set just above)

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


HOSTILE_GROUPS = ("alias_bomb", "huge_version", "sloppy_yaml")
HUGE_VERSION_BYTES = 20 * 1024 * 1024
MAX_OUTPUT_BYTES = 1_000_000
ERROR_START = ("fatal:", "ERROR!", "[ERROR]", "An exception occurred")
CRASH_MARKERS = ("Traceback (most recent call last)", "unexpected exception", "this is probably a bug")


def _hosts_yml(groups: list[str], hosts: int) -> str:
    """hosts.yml: ``hosts`` hosts spread evenly over ``groups`` (the last takes the rest)."""
    per = hosts // len(groups)
    lines = ["---", "all:", "  children:", "    gpu_nodes:", "      children:"]
    n = 0
    for i, group in enumerate(groups):
        lines += [f"        {group}:", "          hosts:"]
        count = per if i < len(groups) - 1 else hosts - n
        for _ in range(count):
            n += 1
            lines.append(f"            node{n:05d}: {{ansible_host: 192.0.2.{n % 250 + 1}}}")
    return "\n".join(lines) + "\n"


def _normal_stacks() -> dict[str, dict]:
    return {group: kiln_recommend_stack(gpu, os=os_id, torch=torch)
            for group, gpu, os_id, torch in STACK_SPECS}


def make_inventory(root: Path, hosts: int) -> Path:
    inv = root / f"inv{hosts}"
    (inv / "group_vars").mkdir(parents=True)
    for group, stack in _normal_stacks().items():
        (inv / "group_vars" / f"{group}.yml").write_text("---\n" + json.dumps({"kiln_stack": stack}, indent=2) + "\n")
    (inv / "hosts.yml").write_text(_hosts_yml([spec[0] for spec in STACK_SPECS], hosts))
    return inv


def alias_bomb(levels: int = 9, width: int = 9, indent: str = "    ") -> str:
    """YAML lines: ``levels`` lists, each holding ``width`` aliases of the previous one (width**levels leaves)."""
    lines = [f"{indent}l0: &l0 [{','.join(['lol'] * width)}]"]
    lines += [f"{indent}l{i}: &l{i} [{','.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _stack_yaml(stack: dict, raw: dict[str, str] | None = None, tail: str = "") -> str:
    """group_vars text for ``kiln_stack``: JSON (flow YAML) values, ``raw`` values written verbatim."""
    raw = raw or {}
    lines = ["---", "kiln_stack:"]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in stack.items() if key not in raw]
    lines += [f"  {key}: {value}" for key, value in raw.items()]
    return "\n".join(lines) + "\n" + tail


def make_hostile_inventory(root: Path, hosts: int) -> tuple[Path, dict[str, int]]:
    """The normal groups plus HOSTILE_GROUPS; returns the inventory and each hostile group_vars file's size."""
    inv = root / f"hostile{hosts}"
    (inv / "group_vars").mkdir(parents=True)
    normal = _normal_stacks()
    for group, stack in normal.items():
        (inv / "group_vars" / f"{group}.yml").write_text("---\n" + json.dumps({"kiln_stack": stack}, indent=2) + "\n")
    base = normal[STACK_SPECS[0][0]]
    sloppy = {k: v for k, v in base.items() if k not in ("cuda", "driver")}
    texts = {
        # the bomb sits under a key of kiln_stack; anchors are defined where they are first used
        "alias_bomb": _stack_yaml(base, tail="  laughs:\n" + alias_bomb()),
        "huge_version": _stack_yaml(base, raw={"cuda": '"13.' + "0" * HUGE_VERSION_BYTES + '"'}),
        "sloppy_yaml": _stack_yaml(sloppy, raw={"cuda": "12.10", "drvier": json.dumps(base["driver"])}),
    }
    sizes = {}
    for group, text in texts.items():
        path = inv / "group_vars" / f"{group}.yml"
        path.write_text(text)
        sizes[group] = path.stat().st_size
    (inv / "hosts.yml").write_text(_hosts_yml([spec[0] for spec in STACK_SPECS] + list(HOSTILE_GROUPS), hosts))
    return inv, sizes


PROBE = """\
import json, os, resource, signal, subprocess, sys, time
timeout, mem_mib = float(sys.argv[1]), int(sys.argv[2])
def cap():
    if mem_mib > 0:
        limit = mem_mib * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
def tree(root):
    # root and its descendants: ansible's workers call setsid, so a process group is not enough
    kids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += kids.get(pid, [])
    return found
def kill_tree(root):
    for _ in range(3):  # again, for anything forked meanwhile
        for pid in tree(root):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
t = time.perf_counter()
p = subprocess.Popen(sys.argv[3:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                     preexec_fn=cap)
def hwm_kib(pids):
    # largest VmHWM (peak RSS) among pids: a killed worker is never waited for, so rusage misses it
    peak = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except (OSError, ValueError):
            pass
    return peak
timed_out = False
sampled_kib = 0
while True:
    try:
        out, err = p.communicate(timeout=min(0.5, max(0.01, timeout - (time.perf_counter() - t))))
        break
    except subprocess.TimeoutExpired:
        sampled_kib = max(sampled_kib, hwm_kib(tree(p.pid)))
        if time.perf_counter() - t >= timeout:
            timed_out = True
            kill_tree(p.pid)
            out, err = p.communicate()
            break
wall = time.perf_counter() - t
rss = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, sampled_kib) / 1024
text = (out + err).decode("utf-8", "replace")
lines = text.splitlines()
first = None
for i, line in enumerate(lines):
    if line.lstrip().startswith(%(starts)r):
        first = line.strip()
        if first.endswith("=>"):  # fatal: [host]: FAILED! => then the result, msg: somewhere below
            first += " " + next((l.strip() for l in lines[i + 1:i + 40] if l.strip().startswith("msg:")), "")
        break
low = text.lower()
print(json.dumps({"wall": wall, "rss": rss, "rc": p.returncode, "timed_out": timed_out,
                  "out_bytes": len(out) + len(err), "first_error": first[:300] if first else None,
                  "crash_marker": next((m for m in %(crash)r if m.lower() in low), None),
                  "out": text[-3000:]}))
""" % {"starts": ERROR_START, "crash": CRASH_MARKERS}


def measure(cmd: list[str], env: dict[str, str], timeout: float = 600.0, mem_limit_mib: int = 0) -> dict:
    """Run cmd in a fresh child, killed after ``timeout`` s.

    Returns {wall (s), rss (peak MiB), rc, timed_out, out_bytes, first_error, crash_marker, out (tail)}.
    """
    res = subprocess.run([sys.executable, "-c", PROBE, str(timeout), str(mem_limit_mib), *cmd],
                         capture_output=True, text=True, env=env, cwd=REPO, check=False)
    if res.returncode != 0:
        raise SystemExit(f"the measuring probe failed (rc {res.returncode}) on {cmd}:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout)


def crashed(run: dict) -> bool:
    """A Python traceback / unexpected exception, ansible's rc 250, or a signal (not our timeout kill)."""
    if run["timed_out"]:
        return False
    return bool(run["crash_marker"]) or run["rc"] == 250 or run["rc"] < 0


def _fmt(run: dict, timeout: float) -> str:
    if run["timed_out"]:
        return f"TIMEOUT>{timeout:.0f} s"
    return f"{run['wall']:>6.2f} s {run['rss']:>7.1f} MiB rc {run['rc']}"


def hostile_row(size: int, runs: dict[str, list[str]], env: dict[str, str], args: argparse.Namespace,
                sizes: dict[str, int]) -> tuple[dict, list[str]]:
    """Measure bare and kiln on a hostile inventory; returns the row and why it fails the bench (if it does)."""
    row: dict[str, object] = {"hosts": size, "inventory": "hostile", "normal_groups": len(STACK_SPECS),
                              "hostile_groups": list(HOSTILE_GROUPS), "group_vars_bytes": sizes}
    problems: list[str] = []
    for name, cmd in runs.items():
        best = None
        for _ in range(args.repeat):
            run = measure(cmd, env, args.timeout, args.mem_limit_mib)
            if name == "kiln":
                if crashed(run):
                    problems.append(f"kiln crashed on the hostile inventory ({size} hosts, rc {run['rc']}, "
                                    f"{run['crash_marker'] or 'no traceback text'})")
                    print(run["out"], file=sys.stderr)
                if run["out_bytes"] > MAX_OUTPUT_BYTES:
                    problems.append(f"kiln printed {run['out_bytes']} bytes on the hostile inventory ({size} hosts), "
                                    f"more than {MAX_OUTPUT_BYTES}")
            if best is None or (best["timed_out"] and not run["timed_out"]) or run["wall"] < best["wall"]:
                best = run
        row[f"{name}_rc"] = None if best["timed_out"] else best["rc"]
        row[f"{name}_timed_out"] = best["timed_out"]
        row[f"{name}_wall_s"] = round(best["wall"], 2)
        row[f"{name}_peak_rss_mib"] = round(best["rss"], 1)
        row[f"{name}_output_bytes"] = best["out_bytes"]
        row[f"{name}_first_error"] = best["first_error"]
        row[f"{name}_crashed"] = crashed(best)
    row["kiln_refused"] = not row["kiln_timed_out"] and row["kiln_rc"] != 0
    return row, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--repeat", type=int, default=1, help="runs per measurement; the best wall time is kept")
    parser.add_argument("--json", default=None, help="also write the figures here")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--hostile", action="store_true", help="add hostile-inventory rows after the normal ones")
    mode.add_argument("--hostile-only", action="store_true", help="run only the hostile-inventory rows")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before a run is killed (default 600)")
    parser.add_argument("--mem-limit-mib", type=int, default=8192,
                        help="RLIMIT_AS of each run's processes in MiB (default 8192; 0: none)")
    args = parser.parse_args()
    playbook = str(Path(sys.executable).parent / "ansible-playbook")
    if not Path(playbook).exists():
        playbook = "ansible-playbook"
    results: list[dict] = []
    hostile_results: list[dict] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        root = Path(tmp)
        (root / "bare.yml").write_text(BARE_PLAY)
        env = dict(os.environ)
        env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_HOME=str(root / "ansible-home"),
                   ANSIBLE_CACHE_PLUGIN_CONNECTION=str(root / "facts"), ANSIBLE_NOCOLOR="1",
                   PATH=f"{Path(playbook).parent}{os.pathsep}{env.get('PATH', '')}")

        def runs_for(inv: Path) -> dict[str, list[str]]:
            return {
                "bare": [playbook, str(root / "bare.yml"), "-i", str(inv)],
                "kiln": [playbook, "playbooks/preflight.yml", "playbooks/plan.yml", "-i", str(inv),
                         "-e", f"kiln_plan_output={root / 'plan.json'}"],
            }

        sizes = [int(s) for s in args.sizes.split(",")]
        for size in sizes if not args.hostile_only else []:
            inv = make_inventory(root, size)
            row: dict[str, object] = {"hosts": size, "distinct_stacks": len(STACK_SPECS)}
            for name, cmd in runs_for(inv).items():
                best = None
                for _ in range(args.repeat):
                    run = measure(cmd, env, args.timeout, args.mem_limit_mib)
                    if run["timed_out"]:
                        failures.append(f"{name} run timed out for {size} hosts (> {args.timeout:.0f} s)")
                        row[f"{name}_timed_out"] = True
                        continue
                    if run["rc"] != 0:
                        print(run["out"], file=sys.stderr)
                        raise SystemExit(f"{name} run failed for {size} hosts (rc {run['rc']})")
                    if best is None or run["wall"] < best[0]:
                        best = (run["wall"], run["rss"])
                if best is None:  # every repeat timed out: no figures
                    row[f"{name}_wall_s"] = row[f"{name}_peak_rss_mib"] = None
                    continue
                row[f"{name}_wall_s"] = round(best[0], 2)
                row[f"{name}_peak_rss_mib"] = round(best[1], 1)
            if size and (root / "plan.json").exists():
                plan = json.loads((root / "plan.json").read_text())
                row["plan_distinct_stacks"] = plan["distinct_stacks"]
            results.append(row)
            print(f"{size:>6} hosts: bare walk {_cell(row, 'bare', args.timeout)} | "
                  f"preflight+plan {_cell(row, 'kiln', args.timeout)}", flush=True)
        for size in sizes if args.hostile or args.hostile_only else []:
            (root / "plan.json").unlink(missing_ok=True)
            inv, gv_sizes = make_hostile_inventory(root, size)
            row, problems = hostile_row(size, runs_for(inv), env, args, gv_sizes)
            failures += problems
            hostile_results.append(row)
            print(f"{size:>6} hosts, hostile: bare walk {_fmt(_view(row, 'bare'), args.timeout)} | "
                  f"preflight+plan {_fmt(_view(row, 'kiln'), args.timeout)}, "
                  f"{row['kiln_output_bytes']} bytes out", flush=True)
            print(f"{'':>6}        first error: {row['kiln_first_error'] or '-'}", flush=True)
            if not row["kiln_refused"] and not row["kiln_timed_out"]:
                print(f"WARNING: kiln accepted the hostile inventory ({size} hosts, rc 0)", file=sys.stderr)
    info: dict[str, object] = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "results": results}
    if hostile_results:
        info["hostile_results"] = hostile_results
        info["timeout_s"] = args.timeout
        info["mem_limit_mib"] = args.mem_limit_mib
    try:
        import ansible

        info["ansible_core"] = ansible.__version__
    except ImportError:  # pragma: no cover
        pass
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


def _cell(row: dict, name: str, timeout: float) -> str:
    """A normal row's figures for one run, as printed since the first version of this bench."""
    if row[f"{name}_wall_s"] is None:
        return f"TIMEOUT>{timeout:.0f} s"
    return f"{row[f'{name}_wall_s']:>6.2f} s {row[f'{name}_peak_rss_mib']:>7.1f} MiB"


def _view(row: dict, name: str) -> dict:
    """One run of a hostile row, in measure()'s shape, for _fmt."""
    return {"wall": row[f"{name}_wall_s"], "rss": row[f"{name}_peak_rss_mib"], "rc": row[f"{name}_rc"],
            "timed_out": row[f"{name}_timed_out"]}


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    raise SystemExit(main())
