"""One stack, one mechanism: no package version is written outside data/ and inventories.

Every version a role installs comes from kiln_stack + data/compat.yml through the
kiln_pkg / kiln_tool filters. This scans what roles and playbooks execute (tasks,
defaults, vars, handlers, templates, argument specs, playbooks) for version
literals and package pins; comments are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

from kiln_paths import REPO
# A version literal (1.2, 22.05, 580.95.05) or a pin (name=1.2 / name-1.2-1).
VERSION = re.compile(r"(?<![\w.:/-])[0-9]{1,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})*(?![\w.])")
# Numbers that are not package versions: the controller's ansible-core window (a tool
# requirement), chrony's makestep threshold (seconds) and the burn-in's band fraction.
ALLOWED = {("playbooks/preflight.yml", "2.19.0"), ("playbooks/preflight.yml", "2.20.0"),
           ("roles/common/templates/chrony.conf.j2", "1.0"), ("roles/burnin_settings/defaults/main.yml", "0.10")}


def _files() -> list[Path]:
    out: list[Path] = []
    for sub in ("tasks", "defaults", "vars", "handlers", "templates"):
        out += sorted(REPO.glob(f"roles/*/{sub}/**/*"))
    out += sorted(REPO.glob("roles/*/meta/argument_specs.yml"))  # meta/main.yml: Galaxy's min_ansible_version
    out += sorted(REPO.glob("playbooks/**/*.yml"))
    return [p for p in out if p.is_file()]


def version_literals(text: str) -> list[str]:
    """Version literals in YAML/Jinja text outside comments."""
    found: list[str] = []
    for line in text.splitlines():
        code = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
        found += VERSION.findall(code)
    return found


def test_the_scanner_sees_a_pin() -> None:
    assert version_literals('packages_present: ["munge=0.5.15-2"]') == ["0.5.15"]
    assert version_literals('x: "{{ v }}"  # e.g. 22.05') == []
    assert version_literals("burnin_tools_nccl_tests_version: \"2.17.6\"") == ["2.17.6"]


def test_no_package_version_outside_data_and_inventories() -> None:
    hits = []
    for path in _files():
        rel = str(path.relative_to(REPO))
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        hits += [f"{rel}: {v}" for v in version_literals(text) if (rel, v) not in ALLOWED]
    assert hits == [], "version literals outside data/ and inventories (take them from kiln_stack/data):\n" + "\n".join(hits)
