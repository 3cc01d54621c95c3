"""molecule/README.md is a matrix, one line per scenario; each scenario's detail is in its molecule.yml header.

The project requires saying, for every scenario, what is real and what is a fixture: briefly in the
matrix, in full in the header comment of molecule/<scenario>/molecule.yml (issue 32 #6).
"""
from __future__ import annotations

import re

from kiln_paths import REPO
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


def _rows() -> dict[str, list[str]]:
    rows = {}
    for line in (REPO / "molecule" / "README.md").read_text().splitlines():
        m = re.match(r"^\| `([\w-]+)` \|", line)
        if m:
            rows[m.group(1)] = [cell.strip() for cell in line.strip().strip("|").split("|")]
    return rows


def test_one_short_row_per_scenario_with_real_and_fixture_said():
    rows = _rows()
    assert SCENARIOS and sorted(rows) == SCENARIOS
    header = next(line for line in (REPO / "molecule" / "README.md").read_text().splitlines()
                  if line.startswith("| scenario |"))
    assert [c.strip() for c in header.strip("|").split("|")] == ["scenario", "nodes", "proves", "real", "fixture", "time"]
    for name, cells in rows.items():
        assert len(cells) == 6, (name, cells)
        _, nodes, proves, real, fixture, time = cells
        assert nodes.isdigit() and proves and real and fixture and re.search(r"\d+ min", time), (name, cells)
        assert len(" | ".join(cells)) <= 400, f"{name}: the detail belongs in molecule/{name}/molecule.yml's header"


def test_each_scenario_header_says_what_is_real_and_what_is_a_fixture():
    for name in SCENARIOS:
        text = (REPO / "molecule" / name / "molecule.yml").read_text()
        header = text[:text.index("\nplatforms:")].splitlines()
        assert header[0] == "---" and all(line.startswith("#") for line in header[1:]), name
        assert header[1].startswith(f"# {name}: "), name
        assert any(line.startswith("# Real: ") for line in header), name
        assert any(line.startswith("# Fixture / not real: ") for line in header), name
