#!/usr/bin/env python3
"""Print a short digest of why a test stage failed:  digest.py LOG [MAX_LINES]

CI shows the tail of `make test`'s output; a failed stage's reason is usually
hundreds of lines above it (an assertion inside a molecule side effect, a
pytest failure, a lint error). run-tests.sh calls this for each failed stage,
just before the timings table, so the reason is in the tail.

What it picks, in this order, from the log:
  - Ansible: each task that failed (`fatal:` / `failed:` lines, not the
    `FAILED - RETRYING` lines of until loops), with its TASK header, the failed
    assertion and the first lines of its message;
  - pytest: the `FAILED tests/...` summary lines and `E   ` lines;
  - anything else: the log's last lines.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

WIDTH = 220
TASK = re.compile(r"^TASK \[(?P<name>.*)\]")
FATAL = re.compile(r"^(fatal|failed): \[[^\]]+\]")
STOP = re.compile(r"^(TASK \[|PLAY RECAP|PLAY \[|RUNNING HANDLER|\S+ *: ok=)")
PYTEST = re.compile(r"^(FAILED|ERROR) tests/")
PYTEST_E = re.compile(r"^E {3}")


def _clip(line: str) -> str:
    line = line.rstrip()
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."


def ansible_failures(lines: list[str], per_failure: int) -> list[list[str]]:
    """Each failed task: header, the fatal line, its assertion first, then the message's first lines."""
    out: list[list[str]] = []
    task = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        match = TASK.match(line)
        if match:
            task = line.strip()
        if FATAL.match(line):
            block = [line.rstrip()]
            j = i + 1
            while j < len(lines) and not STOP.match(lines[j]) and len(block) < 400:
                block.append(lines[j].rstrip())
                j += 1
            i = j
            if any(b.strip() == "...ignoring" for b in block):
                continue
            assertion = [b for b in block if b.strip().startswith(("assertion:", "msg:"))][:1]
            rest = [b for b in block[1:] if b.strip() and b not in assertion]
            picked = [task] if task else []
            picked += [block[0]] + assertion + rest
            out.append([_clip(p) for p in picked[:per_failure]])
            continue
        i += 1
    return out


def digest(text: str, max_lines: int = 18) -> list[str]:
    lines = text.splitlines()
    failures = ansible_failures(lines, max_lines)
    if failures:
        # the last failure is the one that stopped the stage; earlier ones may have been rescued
        picked = failures[-1]
        if len(failures) > 1:
            picked = [f"({len(failures)} failed tasks; the last:)"] + picked
        return picked[:max_lines]
    tests = [_clip(x) for x in lines if PYTEST.match(x)]
    errors = [_clip(x) for x in lines if PYTEST_E.match(x)]
    if tests or errors:
        return (tests[:max_lines // 2] + errors)[:max_lines]
    tail = [_clip(x) for x in lines if x.strip() and not x.startswith("=== [kiln]")]
    return tail[-max_lines:]


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    path = Path(argv[1])
    limit = int(argv[2]) if len(argv) > 2 else 18
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        print(f"(no log: {exc})")
        return 0
    for line in digest(text, limit):
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
