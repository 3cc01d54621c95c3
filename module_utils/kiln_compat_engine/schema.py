# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""The input schema of ``kiln_stack`` and ``kiln_stack_allow``, checked before any rule.

Pure functions, no Ansible import: :func:`check_stack` and :func:`check_allow`
return a list of problems (``{key, message, fix}``), ``[]`` when the input has
the right shape. Every value is checked for its type (a YAML float where a
version string belongs is an error that says to quote it and shows what YAML
read), its shape (a pattern per key, ASCII only), its length, and enumerations
(``driver_flavor``, ``ofed.kind``, ``os``) against the allowed list; unknown keys
get a did-you-mean. Echoed values are truncated (:func:`show`).

:func:`measure` bounds the cost of everything after it: it counts the values a
structure expands to (YAML aliases share one object; each distinct object is
visited once) and stops at a cap, so an alias bomb or a self-referencing alias
is refused in time linear in the input, never expanded.

The package's ``stack`` module applies it (with the data-dependent ``os`` and
``ofed.kind`` checks) in every function that takes a stack.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Callable

# Limits. A version or a model name is never longer than MAX_TEXT characters.
MAX_TEXT = 64
MAX_KERNEL = 128
MAX_REASON = 500
# Values a kiln_stack / kiln_stack_allow may hold once YAML aliases are expanded,
# and characters in all its strings together. A real stack has ~25 values.
MAX_NODES = 2000
MAX_CHARS = 64 * 1024
# Characters of a user value echoed in a message.
SHOW = 40

_A = re.ASCII


def show(value: Any, limit: int = SHOW) -> str:
    """A short, safe rendering of a user value for a message (never the whole of a huge value)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 200:
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
        return repr(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}… ({len(value):,} characters)"
    if isinstance(value, Mapping):
        try:
            keys = [show(k, 20) for k in list(value.keys())[:4]]
        except Exception:  # noqa: BLE001 - a hostile mapping must still render
            keys = []
        more = ", …" if len(value) > 4 else ""
        return f"a mapping with keys {', '.join(keys)}{more}" if keys else "an empty mapping"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    text = type(value).__name__
    return f"a value of type {text}"


def yaml_type(value: Any) -> str:
    """What YAML made of a value, in words."""
    if isinstance(value, bool):
        return "the YAML boolean"
    if isinstance(value, int):
        return "the YAML integer"
    if isinstance(value, float):
        return "the YAML float" if math.isfinite(value) else "the non-finite YAML float"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"


def describe(value: Any) -> str:
    """``the YAML float 12.1``, ``the string 'x'``, ``a list of 2 items``: what a value is, briefly."""
    if isinstance(value, str):
        return f"the string {show(value)}"
    if isinstance(value, (Mapping, list, tuple)):
        return show(value)
    if value is None:
        return "null"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"the YAML integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    if isinstance(value, (bool, int, float)):
        return f"{yaml_type(value)} {show(value)}"
    return show(value)


# ---------------------------------------------------------------------------
# cost bound


@dataclass
class Size:
    """Expanded size of a value: ``nodes`` (containers + scalars) and ``chars`` (string characters)."""

    nodes: int = 0
    chars: int = 0
    templated: bool = False
    recursive: bool = False

    def over(self, max_nodes: int = MAX_NODES, max_chars: int = MAX_CHARS) -> bool:
        return self.recursive or self.nodes > max_nodes or self.chars > max_chars


def measure(value: Any, max_nodes: int = MAX_NODES, max_chars: int = MAX_CHARS) -> Size:
    """Expanded size of ``value``, visiting each distinct container once.

    Aliased sub-structures are counted as often as they are referenced (that is
    what a copy would cost) but walked once (memoised by identity); the walk
    stops as soon as a cap is passed, and a container that contains itself is
    ``recursive``. Also reports whether any string holds a Jinja template.
    """
    memo: dict[int, tuple[int, int, bool]] = {}
    active: set[int] = set()
    keep: list[Any] = []  # keeps visited objects alive so their ids stay unique
    cap_nodes, cap_chars = max_nodes + 1, max_chars + 1
    out = Size()

    def walk(obj: Any) -> tuple[int, int, bool]:
        if isinstance(obj, str):
            return 1, len(obj), ("{{" in obj or "{%" in obj)
        if isinstance(obj, (Mapping, list, tuple)):
            ident = id(obj)
            if ident in memo:
                return memo[ident]
            if ident in active:
                out.recursive = True
                return cap_nodes, 0, False
            active.add(ident)
            keep.append(obj)
            nodes, chars, tmpl = 1, 0, False
            items: Iterable[Any] = (x for kv in obj.items() for x in kv) if isinstance(obj, Mapping) else obj
            for item in items:
                n, c, t = walk(item)
                nodes, chars, tmpl = nodes + n, chars + c, tmpl or t
                if nodes > cap_nodes or chars > cap_chars or out.recursive:
                    nodes, chars = min(nodes, cap_nodes), min(chars, cap_chars)
                    break
            active.discard(ident)
            memo[ident] = (nodes, chars, tmpl)
            return nodes, chars, tmpl
        return 1, 0, False

    out.nodes, out.chars, out.templated = walk(value)
    return out


def too_large(what: str, size: Size) -> dict[str, str]:
    """The problem for a value over the caps of :func:`measure`."""
    if size.recursive:
        read = "a structure that contains itself (a YAML alias pointing at its own anchor)"
    elif size.nodes > MAX_NODES:
        read = f"more than {MAX_NODES:,} values once YAML aliases are expanded"
    else:
        read = f"more than {MAX_CHARS:,} characters of text"
    return {"key": what, "message": f"{what} is {read}; kiln does not expand it.",
            "fix": f"Write {what} as a plain mapping of versions (see docs/compat.md); "
                   f"a real stack has about 25 values."}


# ---------------------------------------------------------------------------
# fields


@dataclass(frozen=True)
class Field:
    """One key of the schema: a scalar with a pattern or a choice list, or a nested mapping."""

    what: str
    example: str
    pattern: str | None = None
    choices: tuple[str, ...] | None = None
    max_len: int = MAX_TEXT
    sub: Mapping[str, Field] | None = None
    shorthand: str | None = None  # nested: a plain string means {shorthand: value}
    version: bool = True  # a float/int here is an unquoted version
    required: tuple[str, ...] = ()  # nested: keys that must be present (and not null)
    many: int = 0  # a scalar or a list of at most this many scalars (0: a scalar only)
    boolean: bool = False  # a YAML boolean (true/false), never a string or a number

    def matches(self, text: str) -> bool:
        return bool(self.pattern is None or re.fullmatch(self.pattern, text, _A))


_VER = r"[0-9]{1,6}(?:\.[0-9]{1,6}){0,3}"
# A Debian version or an RPM version-release: optional epoch, then starts with a digit.
_BUILD = r"(?:[0-9]{1,4}:)?[0-9][A-Za-z0-9.+~_-]{0,60}"

STACK_FIELDS: dict[str, Field] = {
    "gpu": Field("a GPU model, board variant or PCI id", "H100-SXM5-80GB",
                 r"[A-Za-z0-9][A-Za-z0-9 _./:+()-]{0,63}", version=False),
    # os: shape and name are checked together against the data by the caller's extra check
    "os": Field("an operating system id", "ubuntu-24.04", None, max_len=32, version=False),
    "kernel": Field("a kernel release (uname -r)", "6.8.0-45-generic", r"[0-9]{1,3}\.[0-9]{1,3}[0-9A-Za-z.+~_-]{0,120}",
                    max_len=MAX_KERNEL),
    "driver": Field("an NVIDIA driver version", "580.173.02", _VER),
    "driver_flavor": Field("a kernel module flavor", "open", choices=("open", "proprietary"), version=False),
    "fabricmanager": Field("a Fabric Manager version (equal to the driver)", "580.173.02", _VER),
    "cuda": Field("a CUDA toolkit version", "13.0.2", _VER),
    "cudnn": Field("a cuDNN version", "9.17.1.4", _VER),
    "nccl": Field("an NCCL version", "2.28.7-1+cuda13.0", _VER + r"(?:-[0-9]{1,3})?(?:\+cuda[0-9]{1,3}\.[0-9]{1,3})?"),
    "torch": Field("a PyTorch version", "2.14.1", _VER + r"(?:\+cu[0-9]{2,4})?"),
    "container_toolkit": Field("an NVIDIA Container Toolkit version", "1.20.0", _VER),
    "dcgm": Field("a DCGM version", "4.6.0", _VER),
    "dcgm_exporter": Field("a dcgm-exporter version (<DCGM>-<exporter>)", "4.6.0-4.8.3", r"v?" + _VER + r"-" + _VER),
    "ofed": Field("the RDMA stack", '{kind: doca, version: "3.2.1"}', shorthand="kind", version=False, required=("kind",), sub={
        # kind: the allowed list is the data's (ofed.kinds), checked by the caller's extra check
        "kind": Field("an RDMA stack kind", "doca", r"[A-Za-z]{1,16}", version=False),
        "version": Field("an RDMA stack release", "3.2.1", r"[0-9]{1,4}(?:\.[0-9]{1,4}){0,4}(?:-[0-9]{1,4}(?:\.[0-9]{1,4}){0,4})?"),
        "gpudirect": Field("a GPUDirect RDMA method", "auto", choices=("auto", "dma_buf", "peermem", "none"), version=False),
        # profile: the allowed list is the data's (ofed.profiles), checked by the caller's extra check
        "profile": Field("a DOCA-Host installation profile", "doca-ofed", r"doca-[a-z][a-z-]{0,30}", version=False),
    }),
    # hca: names are checked against the data (ofed.hca_generations) by the caller's extra check
    "hca": Field("an HCA generation (or a list of them)", "ConnectX-7", r"[A-Za-z][A-Za-z0-9 -]{0,31}", version=False, many=16),
    "slurm": Field("Slurm daemon versions", '{slurmdbd: "25.11", slurmctld: "25.11", slurmd: "25.11"}', version=False, sub={
        d: Field(f"a {d} version", "25.11", r"[0-9]{2}\.[0-9]{2}(?:\.[0-9]{1,3})?") for d in ("slurmdbd", "slurmctld", "slurmd")
    }),
    "builds": Field("exact package builds of distribution packages", '{munge: "0.5.15-2+deb12u1"}', version=False, sub={
        c: Field(f"the exact {c} package version (apt: Debian version, dnf: version-release)", ex, _BUILD)
        for c, ex in (("slurm", "22.05.8-4+deb12u3"), ("slurmctld", "22.05.8-4+deb12u3"), ("slurmd", "22.05.8-4+deb12u3"),
                      ("munge", "0.5.15-2+deb12u1"), ("pmix", "4.2.2-1+deb12u1"), ("openmpi", "4.1.4-3+b1"),
                      ("mpi4py", "3.1.4-2+b2"), ("node_exporter", "1.5.0-1+b6"), ("rdma_core", "44.0-2"),
                      ("perftest", "4.5+0.17-1"), ("doca_ofed", "2.9.5-0.1.8"),
                      ("docker_io", "20.10.24+dfsg1-1+deb12u1+b6"), ("containerd", "1.6.20~ds1-1+deb12u3"),
                      ("runc", "1.1.5+ds1-1+deb12u1"))
    }),
    "container_engine": Field("the container engine", '{kind: docker-ce, version: "27.5.1"}', shorthand="kind",
                              version=False, required=("kind",), sub={
                                  "kind": Field("a container engine kind", "docker-ce", choices=("docker-ce", "distro"),
                                                version=False),
                                  "version": Field("a Docker Engine release", "27.5.1", _VER),
                              }),
    "containerd": Field("a containerd release (containerd.io)", "1.7.25", _VER),
    "cdi": Field("whether the engine enables CDI", "true", boolean=True, version=False),
    "enroot": Field("an Enroot release", "3.5.0", _VER),
    "pyxis": Field("a Pyxis release", "0.20.0", _VER),
    "kubernetes": Field("Kubernetes component versions", '{apiserver: "1.33", kubelet: "1.33", kubectl: "1.33"}',
                        version=False, sub={
                            c: Field(f"a {c} version", "1.33", r"v?1\.[0-9]{1,3}(?:\.[0-9]{1,3})?")
                            for c in ("apiserver", "kubelet", "kubectl")}),
}


def suggest(word: Any, options: Iterable[str]) -> str:
    opts = list(options)
    text = str(word) if isinstance(word, (str, int, float)) else ""
    lowered = {o.lower(): o for o in opts}
    if text.lower() in lowered:
        return f" Did you mean {lowered[text.lower()]!r}?"
    close = difflib.get_close_matches(text[:MAX_TEXT], opts, n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def _unquoted(path: str, value: Any) -> str:
    """Fix text for a number where a version string belongs."""
    if isinstance(value, float) and math.isfinite(value):
        text = repr(value)
        key = path.split(".")[-1]
        return (f"Quote the version in YAML: {key}: \"{text}\", or {key}: \"{text}0\" if that is what you wrote "
                f"(YAML dropped the trailing zero).")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() <= 200:
        return f"Quote the version in YAML: {path.split('.')[-1]}: \"{value}\"."
    return "Quote the version in YAML, e.g. \"1.2.3\"."


def _check_scalar(path: str, field: Field, value: Any, extra: Callable[[str, str], str | None] | None) -> list[dict[str, str]]:
    name = path.split(".", 1)[1] if path.startswith("kiln_stack.") else path
    if field.boolean:
        if isinstance(value, bool):
            return []
        return [{"key": path, "message": f"{path} is {describe(value)}; it must be {field.what}, the YAML boolean "
                                         f"true or false (unquoted).",
                 "fix": f"Set {path} to true or false, e.g. {name.split('.')[-1]}: {field.example}."}]
    if isinstance(value, bool) or (not isinstance(value, str) and not (field.version and isinstance(value, (int, float)))):
        hint = " (YAML reads unquoted yes/no/on/off/true/false as booleans)" if isinstance(value, bool) else ""
        return [{"key": path, "message": f"{path} is {describe(value)}{hint}; it must be {field.what}, a string "
                                         f"such as \"{field.example}\".",
                 "fix": f"Set {path} to {field.what}, e.g. \"{field.example}\"."}]
    if isinstance(value, (int, float)):
        return [{"key": path, "message": f"{path} is {describe(value)}, not a string: YAML reads an unquoted "
                                         f"version as a number (12.10 becomes 12.1).",
                 "fix": _unquoted(path, value)}]
    if value.strip() != value or value == "":
        what = "empty" if value.strip() == "" else f"{show(value)} with surrounding blanks"
        return [{"key": path, "message": f"{path} is {what}.",
                 "fix": f"Remove {path} to leave it out, or set it to {field.what}, e.g. \"{field.example}\"."}]
    if len(value) > field.max_len:
        return [{"key": path, "message": f"{path} is {show(value)}: longer than the {field.max_len} characters "
                                         f"{field.what} can have.",
                 "fix": f"Set {path} to {field.what}, e.g. \"{field.example}\"."}]
    if field.choices is not None:
        if value not in field.choices:
            return [{"key": path, "message": f"{path} is {show(value)}; allowed: {', '.join(field.choices)}."
                                             f"{suggest(value, field.choices)}",
                     "fix": f"Set {path} to one of {', '.join(field.choices)}."}]
        return []
    if not field.matches(value):
        return [{"key": path, "message": f"{path} is {show(value)}, which is not {field.what} "
                                         f"(expected something like \"{field.example}\").",
                 "fix": f"Set {path} to {field.what}, e.g. \"{field.example}\"."}]
    if extra is not None:
        err = extra(name, value)
        if err:
            return [{"key": path, "message": f"{path} is {show(value)}: {err}",
                     "fix": f"Set {path} to {field.what}, e.g. \"{field.example}\"."}]
    return []


def _check_mapping(path: str, fields: Mapping[str, Field], value: Mapping[Any, Any],
                   extra: Callable[[str, str], str | None] | None) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for key, sub in value.items():
        if not isinstance(key, str) or key not in fields:
            shown = show(key, 24)
            out.append({"key": f"{path}.{key if isinstance(key, str) and len(key) <= 24 else '?'}",
                        "message": f"{path} has an unknown key {shown}.{suggest(key, fields)}",
                        "fix": f"Use only these keys in {path}: {', '.join(fields)}."})
            continue
        if sub is None:  # null leaves the component out (e.g. to unset a group default)
            continue
        field = fields[key]
        sub_path = f"{path}.{key}"
        if field.sub is not None:
            if field.shorthand and isinstance(sub, str):
                sub = {field.shorthand: sub}
            if not isinstance(sub, Mapping):
                out.append({"key": sub_path, "message": f"{sub_path} is {describe(sub)}; it must be a "
                                                        f"mapping with keys {', '.join(field.sub)}.",
                            "fix": f"Write {sub_path} as {field.example}."})
                continue
            out.extend(_check_mapping(sub_path, field.sub, sub, extra))
            out.extend({"key": f"{sub_path}.{need}", "message": f"{sub_path} has no {need}.",
                        "fix": f"Write {sub_path} as {field.example}."}
                       for need in field.required if sub.get(need) is None)
        elif field.many and isinstance(sub, (list, tuple)):
            if len(sub) > field.many:
                out.append({"key": sub_path, "message": f"{sub_path} is {describe(sub)}; at most {field.many} are allowed.",
                            "fix": f"List each distinct {field.what.split(' (')[0]} once, e.g. [\"{field.example}\"]."})
                continue
            for i, item in enumerate(sub):
                out.extend(_check_scalar(f"{sub_path}[{i}]", field, item, extra))
        else:
            out.extend(_check_scalar(sub_path, field, sub, extra))
    return out


def check_stack(stack: Any, extra: Callable[[str, str], str | None] | None = None,
                what: str = "kiln_stack") -> list[dict[str, str]]:
    """Problems with the shape of a kiln_stack (``[]``: well formed).

    ``extra(key, value)`` may add a data-dependent check of a well-shaped scalar
    (e.g. that ``os`` names a known OS); it returns an error text or None.
    """
    size = measure(stack)
    if size.over():
        return [too_large(what, size)]
    if stack is None:
        return []
    if not isinstance(stack, Mapping):
        return [{"key": what, "message": f"{what} is {describe(stack)}; it must be a mapping of "
                                         f"components to versions.",
                 "fix": f"Write {what} as a mapping, e.g. {{driver: \"580.173.02\", cuda: \"13.0.2\"}} (docs/compat.md)."}]
    return _check_mapping(what, STACK_FIELDS, stack, extra)


def check_allow(allow: Any, rules: Iterable[str], what: str = "kiln_stack_allow") -> list[dict[str, str]]:
    """Problems with kiln_stack_allow: a list of ``{rule, reason}`` naming known rules."""
    size = measure(allow)
    if size.over():
        return [too_large(what, size)]
    if allow is None or allow == "":
        return []
    if isinstance(allow, (str, bytes, Mapping)) or not isinstance(allow, (list, tuple)):
        return [{"key": what, "message": f"{what} is {describe(allow)}; it must be a list of "
                                         f"{{rule, reason}} mappings.",
                 "fix": f"Write {what} as a list: - {{rule: cuda-driver-mvc, reason: \"why this is safe here\"}}."}]
    known = sorted(set(rules))
    out: list[dict[str, str]] = []
    for i, item in enumerate(allow):
        path = f"{what}[{i}]"
        if not isinstance(item, Mapping):
            out.append({"key": path, "message": f"{path} is {describe(item)}; it must be a mapping "
                                                f"with rule and reason.",
                        "fix": f"Write {path} as {{rule: <rule id>, reason: <why>}}."})
            continue
        for key in item:
            if key not in ("rule", "reason"):
                out.append({"key": f"{path}.{key if isinstance(key, str) and len(key) <= 24 else '?'}",
                            "message": f"{path} has an unknown key {show(key, 24)}.{suggest(key, ('rule', 'reason'))}",
                            "fix": f"Use only rule and reason in {path}."})
        rule, reason = item.get("rule"), item.get("reason")
        if not isinstance(rule, str) or rule not in known:
            out.append({"key": f"{path}.rule", "message": f"{path}.rule is {show(rule)}, not a kiln rule id."
                                                          f"{suggest(rule, known)}",
                        "fix": f"Use a rule id from docs/compat.md: {', '.join(known)}."})
        if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON:
            why = "too long" if isinstance(reason, str) and len(reason) > MAX_REASON else "missing or empty"
            out.append({"key": f"{path}.reason", "message": f"{path}.reason is {why} ({show(reason)}): an accepted "
                                                            f"rule needs the reason it is safe here.",
                        "fix": f"Give {path} a reason of at most {MAX_REASON} characters (ticket, workload, owner)."})
    return out
