"""Render the role docs from each role's meta/argument_specs.yml (+ defaults/main.yml).

    role_docs.py roles            rewrite every generated table
    role_docs.py --check roles    exit 1 when a generated table is stale (run by `make lint`)

Two kinds of table are generated:

- each role's variable table, in its README.md between `<!-- BEGIN VARIABLES -->` and
  `<!-- END VARIABLES -->`;
- the role table of docs/architecture.md (next to the roles directory: `<roles>/../docs/`),
  between `<!-- BEGIN ROLES -->` and `<!-- END ROLES -->`: every role, public or internal,
  what it does and its entry points. A role is internal when its entry points' short
  descriptions start with `Internal:` (all of them or none: `role_kind` refuses a mix).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

BEGIN, END = "<!-- BEGIN VARIABLES -->", "<!-- END VARIABLES -->"
ROLES_BEGIN, ROLES_END = "<!-- BEGIN ROLES -->", "<!-- END ROLES -->"
INTERNAL = "Internal:"
ARCHITECTURE = Path("docs") / "architecture.md"


def specs_of(role: Path) -> dict:
    return yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]


def role_kind(role: Path) -> str:
    """`internal` when every entry point's short_description starts with `Internal:`, else `public`."""
    marks = {str(spec.get("short_description", "")).startswith(INTERNAL) for spec in specs_of(role).values()}
    if len(marks) != 1:
        raise ValueError(f"{role.name}: mixed marking: start every entry point's short_description with {INTERNAL!r}, or none")
    return "internal" if marks == {True} else "public"


def _what(spec: dict) -> str:
    text = str(spec.get("short_description", ""))
    if text.startswith(INTERNAL):
        text = text[len(INTERNAL):].strip()
        text = text[:1].upper() + text[1:]
    return text.replace("|", "&#124;")


def role_table(roles_dir: Path) -> str:
    """The architecture doc's table: one row per role with a spec, sorted by kind then name."""
    rows = []
    for role in sorted(p for p in roles_dir.iterdir() if (p / "meta" / "argument_specs.yml").is_file()):
        specs = specs_of(role)
        if "main" in specs:
            what = _what(specs["main"])
        else:  # a library of entry points (role `packages`): say what each does
            what = "; ".join(f"`{entry}`: {_what(spec)}" for entry, spec in specs.items())
        entries = ", ".join(f"`{entry}`" for entry in specs)
        rows.append((role_kind(role) != "public", role.name,
                     f"| [`{role.name}`](../roles/{role.name}/README.md) | {role_kind(role)} | {what} | {entries} |"))
    lines = ["| role | kind | what it does | entry points |", "|---|---|---|---|"]
    lines += [row for _, _, row in sorted(rows)]
    public = sum(1 for internal, _, _ in rows if not internal)
    lines += ["", f"{len(rows)} roles: {public} public, {len(rows) - public} internal "
              "(generated from `meta/argument_specs.yml` by `tests/harness/role_docs.py`)."]
    return "\n".join(lines) + "\n"


def table(role: Path) -> str:
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    defaults_file = role / "defaults" / "main.yml"
    defaults = yaml.safe_load(defaults_file.read_text()) if defaults_file.is_file() else {}
    lines = []
    for entry, spec in specs.items():
        options = spec.get("options") or {}
        lines.append(f"Entry point `{entry}`: {spec.get('short_description', '')}\n")
        if not options:
            lines.append("No arguments.\n")
            continue
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


def render(readme: str, body: str, begin: str = BEGIN, end: str = END) -> str:
    if begin not in readme or end not in readme:
        raise ValueError(f"no {begin} ... {end} markers")
    head, rest = readme.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}{end}{tail}"


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
        architecture = Path(root).resolve().parent / ARCHITECTURE
        if architecture.is_file():
            text = architecture.read_text()
            new = render(text, role_table(Path(root)), ROLES_BEGIN, ROLES_END)
            if new != text:
                stale.append(str(architecture))
                if not check:
                    architecture.write_text(new)
    if check and stale:
        print("stale generated tables (run: python tests/harness/role_docs.py roles):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
