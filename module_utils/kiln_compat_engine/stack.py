# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""A kiln_stack as the rules see it: checked, normalised and canonicalised -- once.

:func:`stack_problems` applies the schema (module ``schema``) with the
data-dependent checks (the ``os`` and the RDMA stack kind must be ones the data
knows); :func:`checked` turns a well-formed stack into a :class:`CheckedStack`: plain
strings (``normal``), versions given with fewer components resolved to the unique
release they name (``canonical``, :func:`_canonical`), and what was ambiguous. Every
engine function takes either the raw input or a CheckedStack; :func:`checked` returns a
CheckedStack unchanged, so a caller that checks once (the plan, ``kiln_pkg`` over its
helpers) hands one value down and nothing re-reads the raw input.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import schema
from .data import compat_data
from .errors import CompatError
from .lookup import _os_entry, _parse_nccl
from .versions import kiln_version_key
from .violations import _violation


STACK_KEYS = (
    "gpu", "os", "kernel", "driver", "driver_flavor", "fabricmanager", "cuda", "cudnn", "nccl", "torch",
    "container_toolkit", "dcgm", "ofed", "hca", "slurm", "kubernetes", "builds",
    "container_engine", "containerd", "cdi", "enroot", "pyxis",
)
NESTED_KEYS = {
    "ofed": ("kind", "version", "gpudirect", "profile"),
    "container_engine": ("kind", "version"),
    "slurm": ("slurmdbd", "slurmctld", "slurmd"),
    "kubernetes": ("apiserver", "kubelet", "kubectl"),
    "builds": ("slurm", "slurmctld", "slurmd", "munge", "pmix", "openmpi", "mpi4py", "node_exporter", "rdma_core", "perftest",
               "doca_ofed", "docker_io", "containerd", "runc"),
}
# Keys whose value is a scalar or a list of scalars (normalised to a list).
LIST_KEYS = ("hca",)
# Keys whose value is a YAML boolean (kept a bool).
BOOL_KEYS = ("cdi",)

def _schema_extra(key: str, value: str) -> str | None:
    """Data-dependent checks of well-shaped scalars: the os and the RDMA stack kind must be ones the data knows."""
    if key == "ofed.kind":
        kinds = list(compat_data()["ofed"]["kinds"])
        return None if value in kinds else f"allowed: {', '.join(kinds)}.{schema.suggest(value, kinds)}"
    if key == "ofed.profile":
        profiles = list(compat_data()["ofed"]["profiles"])
        return None if value in profiles else f"not a DOCA-Host profile kiln knows; allowed: {', '.join(profiles)}." \
                                              f"{schema.suggest(value, profiles)}"
    if key == "hca" or key.startswith("hca["):
        names = list(compat_data()["ofed"]["hca_generations"]["names"])
        return None if value in names else (f"not an HCA generation kiln knows; known: {', '.join(names)}."
                                            f"{schema.suggest(value, names)} Use one of these names (as "
                                            f"ansible_facts['kiln_fabric'] reports them), or add the generation to "
                                            f"data/compat.yml ofed.hca_generations with a source.")
    if key == "os" and not _os_entry(value):
        data = compat_data()["os"]
        known = ", ".join(k for k in data if k != "os_aliases")
        aliases = ", ".join(f"{a}-N" for a in sorted(data.get("os_aliases", {})))
        return (f"not an operating system kiln knows. Allowed: {known}; {aliases} are read as rhel-N, "
                f"and a minor such as rocky-9.4 is allowed.")
    return None


def stack_problems(stack: Any) -> list[dict[str, str]]:
    """Shape problems of a kiln_stack (schema: types, keys, patterns, lengths, enumerations)."""
    return schema.check_stack(stack, _schema_extra)


def _problems_text(problems: Sequence[Mapping[str, str]], limit: int = 5) -> str:
    lines = [f"{p['message']} Fix: {p['fix']}" for p in problems[:limit]]
    if len(problems) > limit:
        lines.append(f"(and {len(problems) - limit} more)")
    return " | ".join(lines)


@dataclass(frozen=True)
class CheckedStack(Mapping[str, Any]):
    """A kiln_stack checked against the schema once: the one value the engine passes down.

    It reads as the mapping ``normal`` (``s.get("os")``), so a function written for a normalised
    stack takes it as it is.

    ``normal``: plain strings, null values dropped; ``canonical``: ``normal`` with versions given with
    fewer components replaced by the release they name; ``asked``: ``{component: what was written}``
    for those; ``ambiguities``: violations for versions that name more than one release. ``memo``
    holds what the engine derives from it (the resolved stack), computed once per value.
    """

    normal: Mapping[str, Any]
    canonical: Mapping[str, Any]
    asked: Mapping[str, str]
    ambiguities: tuple[dict[str, Any], ...]
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __getitem__(self, key: str) -> Any:
        return self.normal[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.normal)

    def __len__(self) -> int:
        return len(self.normal)


def checked(stack: Any) -> CheckedStack:
    """*stack* checked, normalised and canonicalised (a CheckedStack is returned as it is);
    CompatError naming the key and the fix when it is malformed."""
    if isinstance(stack, CheckedStack):
        return stack
    problems = stack_problems(stack)
    if problems:
        raise CompatError(f"kiln: {_problems_text(problems)}")
    return _checked_well_formed(stack)


def _checked_well_formed(stack: Any) -> CheckedStack:
    """A CheckedStack of a stack :func:`stack_problems` found no problem in (the caller checked it)."""
    normal = _plain(stack)
    canonical, asked, ambiguities = _canonical(normal)
    return CheckedStack(normal, canonical, asked, tuple(ambiguities))


def _plain(stack: Any) -> dict[str, Any]:
    """A schema-checked stack as plain strings (null values dropped)."""
    if stack is None:
        return {}
    out: dict[str, Any] = {}
    for key, value in stack.items():
        if value is None:
            continue
        if key in BOOL_KEYS:
            out[str(key)] = bool(value)
        elif key in LIST_KEYS:
            items = value if isinstance(value, (list, tuple)) else [value]
            names = list(dict.fromkeys(str(v) for v in items if v is not None))
            if names:
                out[str(key)] = names
        elif key in NESTED_KEYS:
            if isinstance(value, str):
                value = {schema.STACK_FIELDS[key].shorthand: value}
            sub = {str(k): str(v) for k, v in value.items() if v is not None}
            if sub:
                out[str(key)] = sub
        else:
            out[str(key)] = str(value)
    return out


def _version_parts(version: str) -> list[int]:
    return [int(p) for p in version.split(".")]


def _by_identity(asked: str, pool: Iterable[str]) -> list[str]:
    """Releases in ``pool`` that ``asked`` names: itself, or those it is a component-prefix of."""
    pool = list(pool)
    if asked in pool:
        return [asked]
    try:
        want = _version_parts(asked)
    except ValueError:
        return []
    out = []
    for rel in pool:
        try:
            if _version_parts(rel)[:len(want)] == want:
                out.append(rel)
        except ValueError:
            continue
    return sorted(out, key=kiln_version_key)


def _canonical(stack: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str], list[dict[str, Any]]]:
    """Resolve versions given with fewer components to the unique release they name.

    Returns ``(stack with full versions, {component: asked}, ambiguity violations)``.
    ``cuda: "12.4"`` is not shortened: a CUDA minor names its series (newest patch).
    Unknown versions are left for the ``unknown-version`` checks.
    """
    d = compat_data()
    out = dict(stack)
    asked: dict[str, str] = {}
    problems: list[dict[str, Any]] = []

    ambiguous: set[str] = set()

    def pick(component: str, value: str, pool: Iterable[str]) -> str | None:
        found = _by_identity(value, pool)
        if len(found) == 1:
            if found[0] != value:
                asked[component] = value
            return found[0]
        if len(found) > 1:
            shown = ", ".join(found[-8:]) + (f" (and {len(found) - 8} older)" if len(found) > 8 else "")
            problems.append(_violation(
                "ambiguous-version", [component],
                f"{component} {value} names {len(found)} releases in kiln's data: {shown}.",
                f"Set kiln_stack.{component} to the full version of the one you mean, e.g. \"{found[-1]}\".",
                None, "VERIFIED", "data/compat.yml"))
            ambiguous.add(component)
        return None

    if "cudnn" in out:
        full = pick("cudnn", out["cudnn"], d["cudnn"]["releases"])
        out["cudnn"] = full or out["cudnn"]
    if "nccl" in out:
        ver, build = _parse_nccl(out["nccl"])
        full = pick("nccl", ver, d["nccl"]["releases"])
        if full and full != ver:
            out["nccl"] = full + (f"-1+cuda{build}" if build else "")
    for comp in ("driver", "fabricmanager"):
        if comp in out:
            branch = d["drivers"]["branches"].get(out[comp].split(".")[0]) or {}
            rels = branch.get("releases") or []
            if out[comp] not in rels and out[comp].count(".") < 2:
                full = pick(comp, out[comp], rels)
                out[comp] = full or out[comp]
    for comp in ("container_toolkit", "dcgm"):
        if comp in out:
            full = pick(comp, out[comp], d[comp]["releases"])
            out[comp] = full or out[comp]
    for comp in ambiguous:  # reported once, as ambiguous-version; no rule runs on a guess
        out.pop(comp, None)
    return out, asked, problems
