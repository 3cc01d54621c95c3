"""Render each role's variable table from meta/argument_specs.yml + defaults/main.yml.

    role_docs.py roles            rewrite the table between the markers in each README.md
    role_docs.py --check roles    exit 1 when a README's table is stale (run by `make lint`)

The table lives between `<!-- BEGIN VARIABLES -->` and `<!-- END VARIABLES -->`.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

BEGIN, END = "<!-- BEGIN VARIABLES -->", "<!-- END VARIABLES -->"


def table(role: Path) -> str:
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    defaults_file = role / "defaults" / "main.yml"
    defaults = yaml.safe_load(defaults_file.read_text()) if defaults_file.is_file() else {}
    lines = []
    for entry, spec in specs.items():
        options = spec.get("options") or {}
        lines.append(f"Entry point `{entry}`: {spec.get('short_description', '')}\n")
        lines.append("| Variable | Type | Default | Description |")
        lines.append("|---|---|---|---|")
        for name, opt in options.items():
            kind = opt.get("type", "str")
            if opt.get("elements"):
                kind += f" of {opt['elements']}"
            if opt.get("choices"):
                kind += " (" + ", ".join(str(c) for c in opt["choices"]) + ")"
            default = "(required)" if opt.get("required") and name not in (defaults or {}) else \
                "`" + json.dumps((defaults or {}).get(name, opt.get("default"))) + "`"
            raw = opt.get("description") or ""
            desc = raw if isinstance(raw, str) else " ".join(raw)
            lines.append(f"| `{name}` | {kind} | {default.replace('|', '&#124;')} | {desc.replace('|', '&#124;')} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def render(readme: str, body: str) -> str:
    if BEGIN not in readme or END not in readme:
        raise ValueError("README.md has no variable-table markers")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{body}{END}{tail}"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    roots = [a for a in argv[1:] if a != "--check"] or ["roles"]
    stale = []
    for root in roots:
        for role in sorted(Path(root).iterdir()):
            readme = role / "README.md"
            if not (role / "meta" / "argument_specs.yml").is_file() or not readme.is_file():
                continue
            text = readme.read_text()
            if BEGIN not in text:
                continue
            new = render(text, table(role))
            if new != text:
                stale.append(str(readme))
                if not check:
                    readme.write_text(new)
    if check and stale:
        print("stale variable tables (run: python tests/harness/role_docs.py roles):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
