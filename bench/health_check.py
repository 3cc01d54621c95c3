#!/usr/bin/env python3
"""Benchmark of one kiln-health periodic run (docs/health.md "Cost", docs/benchmarks.md "kiln-health").
Not a timed test.

  python3 bench/health_check.py [--runs 20]

Builds an emulated 8x H100 SXM node in a scratch directory: the fixture sysfs tree with NVSwitches and
8 NDR HCAs plus a storage port, the per-node dmesg, and fake sinfo/scontrol/systemctl. That node is
tests/unit/health/kiln_nodehealth_env.Node. The script then runs the real program
(roles/node_health/files/kiln-health) as Slurm's HealthCheckProgram would, without DCGM, two ways:

  emulators  nvidia-smi is the fixture's Python emulator. Its three calls (-q -x, nvlink -s, nvlink -e)
             cost more CPU than the real C binary's.
  recorded   nvidia-smi is `cat` of the emulator's recorded outputs, sinfo and systemctl are `cat`/`printf`,
             dmesg is the real one: nearly all that is left is kiln-health's own cost (Python start-up,
             imports, sysfs reads, judges, state, textfile).

For each mode it prints the median and the worst of: wall time, CPU time (user + system, from wait4:
kiln-health plus every child it ran), and peak resident memory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "unit"), str(REPO / "tests" / "unit" / "health"), str(REPO / "module_utils")]
from kiln_nodehealth_env import PROGRAM, Node  # noqa: E402


def measure(node: Node, runs: int) -> dict[str, list[float]]:
    argv = [sys.executable, str(PROGRAM), "--config", str(node.root / "health.json"), "--lib",
            str(REPO / "module_utils")]
    out: dict[str, list[float]] = {"wall": [], "cpu": [], "rss": []}
    for _ in range(runs):
        start = time.monotonic()
        proc = subprocess.Popen(argv, env=node.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"kiln-health exited {os.waitstatus_to_exitcode(status)}: {proc.stderr.read()[:400]!r}")
        out["wall"].append(wall)
        out["cpu"].append(usage.ru_utime + usage.ru_stime)
        out["rss"].append(usage.ru_maxrss / 1024.0)
    return out


def record_outputs(node: Node) -> None:
    """Replace the emulator by `cat` of what it prints (a C binary's cost, roughly)."""
    smi = node.bin / "nvidia-smi"
    outputs = node.root / "recorded"
    outputs.mkdir()
    cases = {"qx": ["-q", "-x"], "nvs": ["nvlink", "-s"], "nve": ["nvlink", "-e"]}
    for name, args in cases.items():
        text = subprocess.run([sys.executable, str(smi), *args], env=node.env(), capture_output=True, text=True,
                              check=True).stdout
        (outputs / name).write_text(text, encoding="utf-8")
    smi.write_text(f"""#!/bin/sh
case "$*" in
  "-q -x") exec cat {outputs}/qx ;;
  "nvlink -s") exec cat {outputs}/nvs ;;
  "nvlink -e") exec cat {outputs}/nve ;;
esac
exit 2
""", encoding="utf-8")
    # The other tools as the compiled programs they are on a node: sinfo, systemctl, dmesg.
    (node.bin / "sinfo").write_text(f"#!/bin/sh\nexec cat {node.sinfo_file}\n", encoding="utf-8")
    (node.bin / "systemctl").write_text("#!/bin/sh\nprintf 'LoadState=loaded\\nActiveState=active\\n'\n",
                                        encoding="utf-8")
    (node.bin / "dmesg").write_text("#!/bin/sh\nexec /usr/bin/dmesg \"$@\"\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-health-bench.") as scratch:
        node = Node(Path(scratch), "h100")
        node.config["actions"] = "slurm"
        node.write_config()
        measure(node, 2)  # warm the page cache
        rows = [("emulators", measure(node, args.runs))]
        record_outputs(node)
        rows.append(("recorded", measure(node, args.runs)))
    print(f"kiln-health periodic run, 8x H100 SXM + 9 HCAs emulated, no DCGM, {args.runs} runs per mode")
    print(f"{'mode':<10} {'wall s (median/max)':>20} {'CPU s (median/max)':>20} {'peak RSS MiB (max)':>20}")
    for mode, data in rows:
        print(f"{mode:<10} {statistics.median(data['wall']):>9.3f} / {max(data['wall']):<8.3f} "
              f"{statistics.median(data['cpu']):>9.3f} / {max(data['cpu']):<8.3f} {max(data['rss']):>20.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
