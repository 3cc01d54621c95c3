"""No variable interpolated into a shell string.

Walks every task file, handler file and playbook under roles/ and playbooks/
(plus site.yml) and fails on a shell string carrying a Jinja expression
``{{ ... }}`` whose value is not passed through the ``quote`` filter:

- ``shell`` (free-form or ``cmd:``), and ``raw``;
- ``command`` given as a free-form string or through ``cmd:``;
- the script of a ``command`` ``argv:`` that runs a shell with ``-c``
  (``[/bin/sh, -c, SCRIPT, ARG...]``): the script is shell text, the values
  belong in the positional arguments after it.

Otherwise ``argv:`` is always fine (no shell parses it). An expression
is accepted only when its outermost operation is ``| quote``
(``{{ x | quote }}``, ``{{ (a ~ b) | quote }}``); ``{{ 'a' ~ x | quote }}`` is
refused, as the filter there quotes ``x`` only. The expressions are judged on
Jinja's own parse tree, not on text.

The self-tests at the end prove the detector flags what it should, so a pass
of the repository test means something.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2 import Environment, nodes
from jinja2.exceptions import TemplateSyntaxError

from kiln_paths import REPO as ROOT

SHELL_MODULES = frozenset({"shell", "ansible.builtin.shell", "ansible.legacy.shell",
                           "raw", "ansible.builtin.raw", "ansible.legacy.raw"})
COMMAND_MODULES = frozenset({"command", "ansible.builtin.command", "ansible.legacy.command", "kiln_command"})
QUOTE_FILTERS = frozenset({"quote", "ansible.builtin.quote"})
SHELLS = frozenset({"sh", "bash", "dash", "ash", "ksh", "zsh"})
_C_FLAG = re.compile(r"^-[a-zA-Z]*c[a-zA-Z]*$")  # -c, -ec, -euc ...
_TASK_LISTS = frozenset({"block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"})
_ENV = Environment()  # noqa: S701 - parsing only, nothing is rendered
_OPEN = re.compile(r"\{\{")


@dataclass(frozen=True)
class Offence:
    file: str
    task: str
    module: str
    expression: str

    def __str__(self) -> str:
        return f"{self.file}: task {self.task!r} ({self.module}): {self.expression}"


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads Ansible's tags (!unsafe, !vault ...) as plain values."""


def _any_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)


_Loader.add_multi_constructor("!", _any_tag)


def jinja_expressions(text: str) -> Iterator[tuple[str, nodes.Node | None]]:
    """Each ``{{ ... }}`` in ``text``: its source and parsed expression (None when it does not parse).

    A ``}}`` inside the expression (a dict literal) is handled by extending to
    the next ``}}`` until the snippet parses.
    """
    pos = 0
    while (match := _OPEN.search(text, pos)) is not None:
        start, end = match.start(), match.end()
        parsed: nodes.Node | None = None
        source = text[start:]
        while (close := text.find("}}", end)) != -1:
            source = text[start:close + 2]
            end = close + 2
            try:
                template = _ENV.parse(source)
            except TemplateSyntaxError:
                continue
            outputs = [n for n in template.body if isinstance(n, nodes.Output)]
            exprs = [n for o in outputs for n in o.nodes if not isinstance(n, nodes.TemplateData)]
            parsed = exprs[0] if len(exprs) == 1 else None
            break
        else:
            end = len(text)
        yield source, parsed
        pos = end


def is_quoted(expr: nodes.Node | None) -> bool:
    """True when the expression's outermost operation is the ``quote`` filter."""
    return isinstance(expr, nodes.Filter) and expr.name in QUOTE_FILTERS


def unquoted(text: Any) -> list[str]:
    """The Jinja expressions in a shell string that are not ``| quote``d."""
    if not isinstance(text, str):
        return []
    return [source for source, expr in jinja_expressions(text) if not is_quoted(expr)]


def shell_strings(task: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(module, text) for every command string of ``task`` that is split into words after templating.

    A shell parses shell/raw strings; Ansible splits command's free form and
    ``cmd:`` shell-style (shlex). Either way an interpolated value can add words
    or, for a shell, whole commands: ``| quote`` (or argv) keeps it one word.
    """
    args = task.get("args") if isinstance(task.get("args"), dict) else {}
    for module in task:
        if module not in SHELL_MODULES | COMMAND_MODULES:
            continue
        value = task[module]
        if isinstance(value, str):  # free form
            yield module, value
        params = value if isinstance(value, dict) else {}
        for source in (params, args):
            for key in ("cmd", "_raw_params"):
                if isinstance(source.get(key), str):
                    yield module, source[key]
            script = shell_script_in_argv(source.get("argv"))
            if script is not None:
                yield f"{module} argv, shell -c script", script


def shell_script_in_argv(argv: Any) -> str | None:
    """The script of an argv that runs a shell with ``-c`` (``[/bin/sh, -c, SCRIPT, ...]``), else None.

    argv itself is never parsed by a shell, but a ``-c`` script is shell text:
    values belong in the positional parameters after it, not in the script.
    """
    if not isinstance(argv, list) or not argv or not isinstance(argv[0], str):
        return None
    if Path(argv[0]).name not in SHELLS:
        return None
    for i, arg in enumerate(argv[1:-1], start=1):
        if isinstance(arg, str) and _C_FLAG.match(arg):
            return argv[i + 1] if isinstance(argv[i + 1], str) else None
    return None


def walk_tasks(node: Any) -> Iterator[dict[str, Any]]:
    """Every task (a mapping naming a shell/command module) in a task list, block or play, at any depth."""
    if isinstance(node, list):
        for item in node:
            yield from walk_tasks(item)
    elif isinstance(node, dict):
        if any(key in SHELL_MODULES | COMMAND_MODULES for key in node):
            yield node
        for key, value in node.items():  # document order
            if key in _TASK_LISTS:
                yield from walk_tasks(value)


def offences(document: Any, file: str) -> list[Offence]:
    found = []
    for task in walk_tasks(document):
        name = str(task.get("name") or "(unnamed task)")
        for module, text in shell_strings(task):
            for expression in unquoted(text):
                offence = Offence(file, name, module, expression)
                if offence not in found:
                    found.append(offence)
    return found


def yaml_task_files() -> list[Path]:
    """Task and handler files of every role, every playbook and playbook task file, and site.yml."""
    files: list[Path] = []
    for role in sorted((ROOT / "roles").iterdir()):
        for sub in ("tasks", "handlers"):
            if (role / sub).is_dir():
                files += sorted(p for p in (role / sub).rglob("*") if p.suffix in (".yml", ".yaml"))
    files += sorted(p for p in (ROOT / "playbooks").rglob("*") if p.suffix in (".yml", ".yaml"))
    if (ROOT / "site.yml").is_file():
        files.append(ROOT / "site.yml")
    return files


def file_offences(path: Path) -> list[Offence]:
    rel = str(path.relative_to(ROOT))
    return offences(yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader), rel)  # noqa: S506 - SafeLoader subclass


# --------------------------------------------------------------------------
# the repository


FILES = yaml_task_files()


def test_files_found():
    rels = {str(p.relative_to(ROOT)) for p in FILES}
    assert "roles/munge/tasks/key.yml" in rels and "roles/burnin/tasks/final.yml" in rels
    assert any(r.startswith("roles/") and "/handlers/" in r for r in rels)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_no_unquoted_jinja_in_shell_strings(path):
    found = file_offences(path)
    assert not found, (
        "Jinja interpolated into a shell string without `| quote` (use `argv:` or `{{ ... | quote }}`):\n  "
        + "\n  ".join(str(o) for o in found))


# --------------------------------------------------------------------------
# self-tests: the detector can fail


def _offences(text: str) -> list[Offence]:
    return offences(yaml.load(text, Loader=_Loader), "inline.yml")  # noqa: S506 - SafeLoader subclass


def test_flags_unquoted_variable_in_shell_string():
    found = _offences("""
- name: Bad
  ansible.builtin.shell: rm -rf {{ x }}/cache
""")
    assert [(o.task, o.module, o.expression) for o in found] == [("Bad", "ansible.builtin.shell", "{{ x }}")]
    assert "inline.yml" in str(found[0]) and "'Bad'" in str(found[0]) and "{{ x }}" in str(found[0])


def test_accepts_quoted_variable_in_shell_string():
    assert _offences("""
- name: Good
  ansible.builtin.shell: rm -rf {{ x | quote }}/cache; ls {{ (a ~ '/' ~ b) | quote }} {{x|ansible.builtin.quote}}
""") == []


def test_accepts_argv_forms():
    assert _offences("""
- name: Argv list
  ansible.builtin.command:
    argv: [rm, -rf, "{{ x }}"]
- name: Argv expression
  ansible.builtin.command:
    argv: "{{ ['ls', x] }}"
    chdir: "{{ d }}"
    creates: "{{ c }}"
""") == []


@pytest.mark.parametrize("task", [
    "shell:\n    cmd: echo {{ x }}",
    "ansible.builtin.shell:\n    cmd: >-\n      set -e;\n      echo {{ x | default('') }}",
    "ansible.builtin.command: touch {{ x }}",
    "ansible.builtin.command:\n    cmd: touch {{ x }}",
    "ansible.builtin.command:\n  args:\n    cmd: touch {{ x }}",
    "ansible.legacy.shell: echo {{ x | quote | upper }}",
    "ansible.builtin.shell: echo {{ 'a' ~ x | quote }}",
    "ansible.builtin.raw: echo {{ x }}",
])
def test_flags_every_shell_string_form(task):
    found = _offences(f"- name: T\n  {task}\n")
    assert len(found) == 1, found


def test_expression_with_a_nested_closing_brace_is_read_whole():
    found = _offences("""- name: T\n  ansible.builtin.shell: "echo {{ {'a': {'b': x}}['a']['b'] }} {{ y | quote }}"\n""")
    assert [o.expression for o in found] == ["{{ {'a': {'b': x}}['a']['b'] }}"]
    assert _offences("""- name: T\n  ansible.builtin.shell: "echo {{ {'a': {'b': x}}['a']['b'] | quote }}"\n""") == []


def test_shell_c_script_in_argv_is_shell_text():
    found = _offences("""
- name: Script with a value in its text
  ansible.builtin.command:
    argv: [/bin/sh, -ec, "chown {{ user }} \\"$1\\"", sh, "{{ path }}"]
- name: Script with values as positional parameters
  ansible.builtin.command:
    argv: [bash, -c, 'chown "$2" "$1"', sh, "{{ path }}", "{{ user }}"]
- name: Not a shell
  ansible.builtin.command:
    argv: [python3, -c, "print({{ x }})"]
""")
    assert [(o.task, o.expression) for o in found] == [("Script with a value in its text", "{{ user }}")]
    assert "shell -c script" in found[0].module


def test_flags_inside_blocks_plays_and_handlers():
    found = _offences("""
- name: A play
  hosts: all
  pre_tasks:
    - name: P
      ansible.builtin.shell: echo {{ a }}
  tasks:
    - name: Outer
      block:
        - name: In block
          ansible.builtin.shell: echo {{ b }}
      rescue:
        - name: In rescue
          ansible.builtin.command: echo {{ c }}
      always:
        - name: In always
          ansible.builtin.shell: echo {{ d | quote }}
  handlers:
    - name: H
      ansible.builtin.shell: echo {{ e }}
""")
    assert [(o.task, o.expression) for o in found] == [
        ("P", "{{ a }}"), ("In block", "{{ b }}"), ("In rescue", "{{ c }}"), ("H", "{{ e }}")]


def test_no_jinja_is_fine():
    assert _offences("- name: Ok\n  ansible.builtin.shell: set -o pipefail; munge -n | unmunge\n") == []
    assert _offences("- name: Ok\n  ansible.builtin.command: ldconfig\n") == []


def test_ansible_tags_load():
    assert _offences("- name: T\n  ansible.builtin.shell: !unsafe 'echo {{ x }}'\n")  # !unsafe is never rendered,
    # but the test is about the text a reader sees: flag it all the same.
