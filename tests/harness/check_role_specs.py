"""Check each role documents exactly its defaults in meta/argument_specs.yml.

Every key of defaults/main.yml must be an option of some entry point in
meta/argument_specs.yml and vice versa (argument_specs defaults are
documentation only; the real defaults live in defaults/main.yml). Every role
must also have a README.md.
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml


def role_problems(role: Path) -> list[str]:
    problems: list[str] = []
    defaults_file = role / "defaults" / "main.yml"
    specs_file = role / "meta" / "argument_specs.yml"
    if not (role / "README.md").is_file():
        problems.append(f"{role.name}: README.md missing")
    if not specs_file.is_file():
        return problems + [f"{role.name}: meta/argument_specs.yml missing"]
    defaults = yaml.safe_load(defaults_file.read_text()) if defaults_file.is_file() else {}
    specs = yaml.safe_load(specs_file.read_text())["argument_specs"]
    spec_keys: set[str] = set()
    for entry in specs.values():
        spec_keys |= set((entry.get("options") or {}).keys())
    for key in sorted(set(defaults or {}) - spec_keys):
        problems.append(f"{role.name}: default {key} is not in meta/argument_specs.yml")
    for key in sorted(spec_keys - set(defaults or {})):
        required = any(
            (entry.get("options") or {}).get(key, {}).get("required") for entry in specs.values()
        )
        if not required:
            problems.append(f"{role.name}: option {key} has no default in defaults/main.yml")
    return problems


def main(argv: list[str]) -> int:
    roles_dir = Path(argv[1] if len(argv) > 1 else "roles")
    problems = [p for role in sorted(roles_dir.iterdir()) if role.is_dir() for p in role_problems(role)]
    for problem in problems:
        print(problem)
    print(f"role specs: {len([r for r in roles_dir.iterdir() if r.is_dir()])} roles, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
