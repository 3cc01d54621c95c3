"""Where each role variable ("knob") gets a default, and by which routes it reaches a module.

A knob is a key of some roles/<role>/defaults/main.yml. Its *default locations* are:

- ``defaults``: a roles/*/defaults/main.yml that sets it (its home; a second role doing so is a copy);
- ``spec``: an argument_specs option of that name with a ``default:``;
- ``inline``: ``<knob> | default(...)`` / ``| d(...)`` in a playbook, task file or role YAML;
- ``vars``: a ``vars:`` block (play, block or task) that sets the knob itself;
- ``module``: the argument_spec ``default`` of a library/ module parameter fed by the knob
  (directly, or through a ``vars:``/``set_fact`` alias such as ``__burnin_lock_path``);
- ``function``: the keyword default of the module_utils function parameter that module parameter
  is handed to (``f(x=p["param"])`` in the module's main()).

Its *routes* are the (module, parameter) pairs it reaches, a bag key counted as ``param.key``
(``pairs: "{{ ... | combine({'band': kiln_burnin_pair_band}) }}"`` is ``kiln_burnin.pairs.band``).

Run as a script for the survey table: ``python tests/unit/structure/kiln_knobs.py [--all]``.
"""
from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/unit, when run as a script
from kiln_paths import REPO  # noqa: E402
from kiln_playbook import mappings  # noqa: E402
SETTINGS_ROLES = ("burnin_settings", "upgrade_settings", "drift_settings")
NAME = re.compile(r"\b[a-z][a-z0-9_]*\b")


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads !unsafe and other tags as plain values."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node)
                              if isinstance(node, yaml.ScalarNode) else None)


def load_yaml(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def yaml_files() -> List[Path]:
    """Playbooks, task files and role YAML (not molecule: scenarios pass values, they set no defaults)."""
    files = [REPO / "site.yml", *sorted((REPO / "playbooks").rglob("*.yml"))]
    files += sorted(p for p in (REPO / "roles").rglob("*.yml") if p.parts[-2] != "meta")
    return files


@lru_cache(maxsize=None)
def knobs() -> Dict[str, str]:
    """knob -> the role whose defaults/main.yml sets it (the first, alphabetically)."""
    out: Dict[str, str] = {}
    for path in sorted((REPO / "roles").glob("*/defaults/main.yml")):
        for name in load_yaml(path) or {}:
            out.setdefault(str(name), path.parts[-3])
    return out


@dataclass
class Knob:
    name: str
    role: str
    defaults: List[str] = field(default_factory=list)
    routes: Set[str] = field(default_factory=set)
    files: Set[str] = field(default_factory=set)

    @property
    def copies(self) -> List[str]:
        """Every default location but the home (roles/<role>/defaults/main.yml)."""
        home = f"roles/{self.role}/defaults/main.yml"
        return [d for d in self.defaults if d != home]


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, str):
        yield node


def _refs(text: str, names: Dict[str, Set[str]]) -> Set[str]:
    """The knobs a Jinja string reads, through the aliases in *names* (name -> knobs)."""
    found: Set[str] = set()
    for word in set(NAME.findall(text)):
        found |= names.get(word, set())
    return found


@lru_cache(maxsize=None)
def _parsed() -> Tuple[Tuple[str, Any], ...]:
    return tuple((_rel(p), load_yaml(p)) for p in yaml_files())


def aliases() -> Dict[str, Set[str]]:
    """name -> knobs it carries: each knob itself, and every vars:/set_fact name whose value reads one."""
    names: Dict[str, Set[str]] = {k: {k} for k in knobs()}
    for _ in range(4):  # aliases of aliases
        for _path, tree in _parsed():
            for mapping in mappings(tree):
                for key in ("vars", "ansible.builtin.set_fact", "set_fact"):
                    block = mapping.get(key)
                    if not isinstance(block, dict):
                        continue
                    for var, value in block.items():
                        if var in knobs():
                            continue
                        carried = set().union(*(_refs(s, names) for s in _strings(value))) if value else set()
                        if carried:
                            names.setdefault(str(var), set()).update(carried)
    return names


# --------------------------------------------------------------------------
# library modules and the functions their parameters go to


@lru_cache(maxsize=None)
def module_specs() -> Dict[str, Dict[str, Dict[str, Any]]]:
    """module -> parameter -> its argument_spec entry (literal dicts only)."""
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for path in sorted((REPO / "library").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "argument_spec" and isinstance(node.value, ast.Dict):
                spec: Dict[str, Dict[str, Any]] = {}
                for k, v in zip(node.value.keys, node.value.values):
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Dict):
                        entry = {}
                        for ek, ev in zip(v.keys, v.values):
                            if isinstance(ek, ast.Constant):
                                try:
                                    entry[ek.value] = ast.literal_eval(ev)
                                except ValueError:
                                    entry[ek.value] = "<expr>"
                        spec[k.value] = entry
                out[path.stem] = spec
    return out


def _resolve(module: str, name: str, depth: int = 0) -> Optional[Tuple[str, ast.FunctionDef]]:
    """The def of *name* as module_utils/<module>.py has it (its own, or one it imports)."""
    path = REPO / "module_utils" / (module.replace(".", "/") + ".py")
    if not path.is_file():
        path = path.with_suffix("") / "__init__.py"
    if depth > 4 or not path.is_file():
        return None
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return _rel(path), node
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            source = (node.module or "").replace("ansible.module_utils.", "")
            found = _resolve(source, name, depth + 1) if source.startswith("kiln") else None
            if found:
                return found
    return None


def _param_default(fn: ast.FunctionDef, name: Optional[str], index: Optional[int]) -> Tuple[Optional[str], bool]:
    """(the parameter's name, whether it has a default) for a keyword *name* or positional *index*."""
    args = fn.args
    positional = args.posonlyargs + args.args
    defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults):], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    if name is None:
        if index is None or index >= len(positional):
            return None, False
        name = positional[index].arg
    elif name not in {a.arg for a in positional + args.kwonlyargs}:
        return None, False
    return name, name in defaults


def _param_reads(expr: ast.AST) -> Set[str]:
    """The module parameters an expression reads: p["x"], params["x"], module.params["x"]."""
    found = set()
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and len(expr.args) == 1 and \
            expr.func.id in {"bool", "int", "float", "str", "list", "dict"}:
        expr = expr.args[0]  # a plain conversion hands the value on; any other call is a function of its own
    for node in [expr]:
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            base = node.value
            if (isinstance(base, ast.Name) and base.id in {"p", "params"}) or (
                    isinstance(base, ast.Attribute) and base.attr == "params"):
                found.add(node.slice.value)
    return found


@lru_cache(maxsize=None)
def function_defaults() -> Dict[Tuple[str, str], List[str]]:
    """(module, parameter) -> "module_utils/x.py:function(param=...)" for each module_utils parameter
    with a default that the module hands that parameter to (directly: f(kw=p["param"]) or f(p["param"]))."""
    out: Dict[Tuple[str, str], List[str]] = {}
    for path in sorted((REPO / "library").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {a.asname or a.name: n.module.replace("ansible.module_utils.", "") for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("ansible.module_utils.kiln")
                    for a in n.names}
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            if not (isinstance(call.func, ast.Name) and call.func.id in imported):
                continue
            handed = [(None, i, a) for i, a in enumerate(call.args)] + [(k.arg, None, k.value) for k in call.keywords]
            for kw, index, expr in handed:
                for param in _param_reads(expr):
                    for where, fn in filter(None, [_resolve(imported[call.func.id], call.func.id)]):
                        pname, has = _param_default(fn, kw, index)
                        if has:
                            out.setdefault((path.stem, param), []).append(f"{where}:{fn.name}({pname}=)")
    return out


def _module_calls() -> Iterator[Tuple[str, str, str, Dict[str, Any]]]:
    """(file, module, parameter, task) for every task that calls a library module."""
    modules = set(module_specs())
    for path, tree in _parsed():
        for mapping in mappings(tree):
            for key, args in mapping.items():
                name = str(key).rsplit(".", 1)[-1]
                if name in modules and isinstance(args, dict) and str(key) in {name, f"ansible.legacy.{name}"}:
                    for param, value in args.items():
                        yield from _bagged(path, name, str(param), value)


def _bagged(path: str, module: str, param: str, value: Any) -> Iterator[Tuple[str, str, str, Any]]:
    """A mapping value's keys are bag keys: actions: {resume_on: ...} is parameter actions.resume_on."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _bagged(path, module, f"{param}.{key}", inner)
    else:
        yield path, module, param, value


BAG_KEY = re.compile(r"""['"]([a-z_]+)['"]\s*:\s*([a-z_][a-z0-9_]*)""")


@lru_cache(maxsize=None)
def survey() -> Dict[str, Knob]:
    table = {name: Knob(name, role) for name, role in knobs().items()}
    for path in sorted((REPO / "roles").glob("*/defaults/main.yml")):
        for name in load_yaml(path) or {}:
            table[name].defaults.append(_rel(path))
            table[name].files.add(_rel(path))
    for path in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")):
        for entry in (load_yaml(path) or {}).get("argument_specs", {}).values():
            for name, opt in (entry.get("options") or {}).items():
                if name in table:
                    table[name].files.add(_rel(path))
                    if isinstance(opt, dict) and "default" in opt:
                        table[name].defaults.append(f"{_rel(path)}:default")
    inline = re.compile(r"\b(" + "|".join(map(re.escape, sorted(table, key=len, reverse=True))) +
                        r")\b\s*\|\s*(?:default|d)\(")
    for path, tree in _parsed():
        text = (REPO / path).read_text()
        for lineno, line in enumerate(text.splitlines(), 1):
            for name in inline.findall(line):
                table[name].defaults.append(f"{path}:{lineno}")
        for mapping in mappings(tree):
            block = mapping.get("vars")
            if isinstance(block, dict):
                for name in block:
                    if name in table:
                        table[name].defaults.append(f"{path}:vars")
        for s in _strings(tree):
            for name in set(NAME.findall(s)) & set(table):
                table[name].files.add(path)
    names = aliases()
    specs = module_specs()
    fdefaults = function_defaults()
    for path, module, param, value in _module_calls():
        for text in _strings(value):
            bagged = {knob: key for key, word in BAG_KEY.findall(text) for knob in names.get(word, set())}
            for knob in _refs(text, names):
                if knob in bagged:
                    table[knob].routes.add(f"{module}.{param}.{bagged[knob]}")
                    continue
                table[knob].routes.add(f"{module}.{param}")
                table[knob].files.update({path, f"library/{module}.py"})
                if "." in param:
                    continue  # inside a bag: the module's own default is the bag's
                entry = specs[module].get(param, {})
                if "default" in entry:
                    table[knob].defaults.append(f"library/{module}.py:{param}={entry['default']!r}")
                for where in fdefaults.get((module, param), []):
                    table[knob].defaults.append(where)
                    table[knob].files.add(where.split(":")[0])
    for knob in table.values():
        knob.defaults = sorted(set(knob.defaults))
    return table


def main(argv: List[str]) -> int:
    table = survey()
    rows = [k for k in table.values() if "--all" in argv or k.role in SETTINGS_ROLES]
    multi = sorted((k for k in rows if len(k.defaults) > 1), key=lambda k: (-len(k.defaults), k.name))
    print(f"{len(rows)} knobs, {len(multi)} with more than one default location")
    for k in multi:
        print(f"\n{k.name} ({k.role}): {len(k.defaults)} defaults, {len(k.routes)} routes, {len(k.files)} files")
        for d in k.defaults:
            print(f"  default  {d}")
        for r in sorted(k.routes):
            print(f"  route    {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
