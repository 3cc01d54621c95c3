#!/usr/bin/env python3
"""How often ansible.builtin.command loses a program's output, next to kiln_command (module_utils/kiln/process.py).

ansible-core's run_command reads the child's pipes in a loop of one-second selects and stops, without reading
again, when a select timed out and the child has exited by the time the loop looks (ansible/ansible#51393).
A program silent for a whole number of seconds that prints as it exits -- ``iperf3 -J -t N``, the programs
in this bench -- lands in that window. The bench runs each program N times through each module in one real
ansible-playbook on localhost and counts the runs whose stdout came back empty with rc 0.

  python3 bench/run_command_race.py --runs 30          (from the repository root, with the venv's ansible)

Not a timed test: it prints a Markdown table for docs/architecture.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = {
    "sh -c 'sleep 1; echo x'": ["sh", "-c", "sleep 1; echo x"],
    "sh -c 'sleep 2; echo x'": ["sh", "-c", "sleep 2; echo x"],
    "python3: sleep 1.5, print": [sys.executable, "-c", "import time; time.sleep(1.5); print('x')"],
}
MODULES = ("ansible.builtin.command", "kiln_command")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs of each program through each module")
    args = parser.parse_args()
    tasks = []
    for index, (label, argv) in enumerate(PROGRAMS.items()):
        for module in MODULES:
            tasks.append({"name": f"{module} {index}", module: {"argv": argv}, "register": f"r_{MODULES.index(module)}_{index}",
                          "loop": list(range(args.runs)), "changed_when": False})
    keys = [t["register"] for t in tasks]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        content = "{{ {" + ", ".join(f"'{k}': {k}.results | map(attribute='stdout') | select('eq', '') | list | length"
                                     for k in keys) + "} | to_json }}"
        tasks.append({"name": "save", "ansible.builtin.copy": {"dest": str(out), "content": content, "mode": "0600"}})
        play = Path(tmp) / "play.yml"
        play.write_text(yaml.safe_dump([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                                         "tasks": tasks}]))
        env = dict(os.environ, ANSIBLE_LIBRARY=str(ROOT / "library"), ANSIBLE_MODULE_UTILS=str(ROOT / "module_utils"),
                   ANSIBLE_LOCALHOST_WARNING="false")
        proc = subprocess.run(["ansible-playbook", "-i", "localhost,", str(play), "-e",
                               f"ansible_python_interpreter={sys.executable}"], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
            return 1
        lost = json.loads(out.read_text())
    print(f"| Program ({args.runs} runs each) | ansible.builtin.command: empty stdout | kiln_command: empty stdout |")
    print("|---|---|---|")
    for index, label in enumerate(PROGRAMS):
        print(f"| {label} | {lost[f'r_0_{index}']} | {lost[f'r_1_{index}']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
