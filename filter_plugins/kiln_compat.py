# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""kiln compatibility engine: version rules, recommendations, package strings.

All knowledge lives in ``data/compat.yml`` and ``data/denylist.yml``; this
module only interprets it. Every public function is a pure module-level
function (importable from plain pytest) and is registered as a Jinja filter by
the thin :class:`FilterModule` at the bottom. Documentation for each filter is
in the adjacent ``<filter_name>.yml`` sidecar files.
"""

from __future__ import annotations

import copy
import datetime
import importlib.util
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

try:  # ansible-core is always present when Ansible loads the plugin
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in used when ansible-core is not importable."""


DATA_DIR = Path(__file__).resolve().parent.parent / "data"
_CACHE: dict[str, Any] = {}


def _sibling(name: str) -> ModuleType:
    """Import filter_plugins/<name>.py (Ansible loads plugin files without a package to import from)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().with_name(f"{name}.py"))
        if spec is None or spec.loader is None:  # pragma: no cover - the file ships with kiln
            raise ImportError(f"kiln: cannot load {name}.py next to {__file__}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


schema = _sibling("kiln_stack_schema")
show = schema.show

ERROR = "error"
WARNING = "warning"
CONFIDENCE_LEVELS = ("VERIFIED", "SECONDARY", "DERIVED", "UNVERIFIED")
STACK_KEYS = (
    "gpu", "os", "kernel", "driver", "driver_flavor", "fabricmanager", "cuda", "cudnn", "nccl", "torch",
    "container_toolkit", "dcgm", "ofed", "slurm", "kubernetes", "builds",
)
NESTED_KEYS = {
    "ofed": ("kind", "version"),
    "slurm": ("slurmdbd", "slurmctld", "slurmd"),
    "kubernetes": ("apiserver", "kubelet", "kubectl"),
    "builds": ("slurm", "slurmctld", "slurmd", "munge", "pmix", "openmpi", "mpi4py", "node_exporter"),
}
# NVIDIA components (versions from the stack) ...
NVIDIA_COMPONENTS = ("driver", "driver_companions", "fabricmanager", "cuda", "cudnn", "nccl", "container_toolkit", "dcgm", "dcgm_exporter", "ofed")
# ... and distribution packages (exact builds from data/compat.yml distro_builds or kiln_stack.builds).
DISTRO_COMPONENTS = ("slurmctld", "slurmd", "munge", "pmix", "openmpi", "openmpi_dev", "mpi4py", "node_exporter")
PACKAGE_COMPONENTS = NVIDIA_COMPONENTS + DISTRO_COMPONENTS
# The build key of each distribution component (openmpi_dev is built with openmpi).
_BUILD_KEY = {"slurmctld": "slurm", "slurmd": "slurm", "munge": "munge", "pmix": "pmix", "openmpi": "openmpi",
              "openmpi_dev": "openmpi", "mpi4py": "mpi4py", "node_exporter": "node_exporter"}


# ---------------------------------------------------------------------------
# data loading


def _load_yaml(path: Path) -> Any:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        with path.open(encoding="utf-8") as handle:
            return yaml.load(handle, Loader=loader)  # noqa: S506 - SafeLoader/CSafeLoader only
    except OSError as exc:
        raise AnsibleFilterError(f"kiln: cannot read data file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise AnsibleFilterError(f"kiln: data file {path} is not valid YAML: {exc}") from exc


def compat_data() -> dict[str, Any]:
    """Return the parsed ``data/compat.yml`` (cached for the process)."""
    if "compat" not in _CACHE:
        _CACHE["compat"] = _load_yaml(DATA_DIR / "compat.yml")
    return _CACHE["compat"]


def denylist_data() -> list[dict[str, Any]]:
    """Return the entries of ``data/denylist.yml`` (cached for the process)."""
    if "denylist" not in _CACHE:
        entries = (_load_yaml(DATA_DIR / "denylist.yml") or {}).get("entries") or []
        for entry in entries:
            if not entry.get("link"):
                raise AnsibleFilterError(f"kiln: denylist entry {entry.get('id')!r} has no link; every entry needs a source")
        _CACHE["denylist"] = entries
    return _CACHE["denylist"]


def _reset_cache() -> None:
    """Forget parsed data (tests use this after pointing DATA_DIR elsewhere)."""
    _CACHE.clear()


# ---------------------------------------------------------------------------
# versions

_TOKEN = re.compile(r"[0-9]+|[A-Za-z]+", re.ASCII)
_MAX_VERSION = 128


def kiln_version_key(version: Any) -> tuple[tuple[int, Any], ...]:
    """Sort key that orders versions numerically per component.

    ``550.54.14 < 550.127.05``, ``12.4 == 12.4.0``, ``13.0 < 13.2``, ``1.0rc1 < 1.0``.
    Numbers rank (2, n), the end of the version (1, ""), letters (0, s): a
    pre-release tag sorts before the release it precedes.
    """
    if version is None:
        raise AnsibleFilterError("kiln_version_key: version is None")
    if isinstance(version, int) and not isinstance(version, bool) and version.bit_length() > 200:
        raise AnsibleFilterError(f"kiln_version_key: {show(version)} is not a version")
    text = str(version)
    if len(text) > _MAX_VERSION:
        raise AnsibleFilterError(f"kiln_version_key: {show(text)} is longer than {_MAX_VERSION} characters: not a version")
    tokens: list[tuple[int, Any]] = []
    for tok in _TOKEN.findall(text):
        if tok.isdigit():
            tokens.append((2, int(tok)))
        else:
            while tokens and tokens[-1] == (2, 0):
                tokens.pop()
            tokens.append((0, tok.lower()))
    while tokens and tokens[-1] == (2, 0):
        tokens.pop()
    return tuple(tokens) + ((1, ""),)


def kiln_version_cmp(a: Any, b: Any) -> int:
    """Compare two versions: -1 if a < b, 0 if equal, 1 if a > b."""
    ka, kb = kiln_version_key(a), kiln_version_key(b)
    return (ka > kb) - (ka < kb)


_OPS = {
    "<": lambda c: c < 0, "lt": lambda c: c < 0,
    "<=": lambda c: c <= 0, "le": lambda c: c <= 0,
    "==": lambda c: c == 0, "=": lambda c: c == 0, "eq": lambda c: c == 0,
    "!=": lambda c: c != 0, "ne": lambda c: c != 0,
    ">=": lambda c: c >= 0, "ge": lambda c: c >= 0,
    ">": lambda c: c > 0, "gt": lambda c: c > 0,
}


def kiln_version_compare(a: Any, op: str, b: Any) -> bool:
    """Return ``a <op> b`` with kiln's version ordering (op: < <= == != >= > or lt/le/eq/ne/ge/gt)."""
    if op not in _OPS:
        raise AnsibleFilterError(f"kiln_version_compare: unknown operator {show(op)}; use one of {sorted(_OPS)}")
    return _OPS[op](kiln_version_cmp(a, b))


def kiln_version_sort(versions: Iterable[Any], reverse: bool = False) -> list[Any]:
    """Sort a list of versions with kiln's version ordering."""
    if isinstance(versions, (str, bytes)) or not isinstance(versions, Iterable):
        raise AnsibleFilterError(f"kiln_version_sort: expected a list of versions, got {type(versions).__name__}")
    return sorted(versions, key=kiln_version_key, reverse=bool(reverse))


def _nums(version: str) -> list[int]:
    text = str(version)
    if len(text) > _MAX_VERSION:
        raise AnsibleFilterError(f"kiln: {show(text)} is not a version")
    nums = [int(x) for x in re.findall(r"[0-9]+", text, re.ASCII)]
    if not nums:
        raise AnsibleFilterError(f"kiln: {show(text)} is not a version (no number in it)")
    return nums


def _mm(version: str) -> str:
    n = _nums(version)
    return f"{n[0]}.{n[1] if len(n) > 1 else 0}"


def _slurm_major(version: str) -> str:
    """Slurm majors are YY.MM strings: ``23.02.7`` -> ``23.02``."""
    return ".".join(str(version).split(".")[:2])


def _major(version: str) -> str:
    return str(_nums(version)[0])


def _ge(a: str, b: str) -> bool:
    return kiln_version_cmp(a, b) >= 0


def _in_range(version: str, spec: str) -> bool:
    """``spec`` is comma-separated bounds such as ``>=1.0,<1.17.8``."""
    for part in str(spec).split(","):
        part = part.strip()
        m = re.match(r"^(>=|<=|==|!=|>|<)\s*(\S+)$", part)
        if not m:
            raise AnsibleFilterError(f"kiln: bad version range {show(spec)}")
        if not kiln_version_compare(version, m.group(1), m.group(2)):
            return False
    return True


# ---------------------------------------------------------------------------
# lookups


def _severity(*confidences: str | None) -> str:
    return WARNING if "UNVERIFIED" in confidences else ERROR


def _worst_conf(*confidences: str | None) -> str:
    present = [c for c in confidences if c]
    return max(present, key=CONFIDENCE_LEVELS.index) if present else "DERIVED"


def _os_entry(os_id: str) -> tuple[str, dict[str, Any]] | None:
    """Normalise ``rocky-9.4`` / ``Ubuntu-24.04`` to a data key and return its entry."""
    data = compat_data()["os"]
    if not isinstance(os_id, str) or len(os_id) > 32:
        return None
    m = re.fullmatch(r"([a-z]+)-([0-9]{1,3})(?:\.([0-9]{1,2}))?", os_id.strip().lower(), re.ASCII)
    if not m:
        return None
    name, major, minor = m.group(1), m.group(2), m.group(3)
    name = data.get("os_aliases", {}).get(name, name)
    key = f"{name}-{major}.{minor}" if name == "ubuntu" and minor else f"{name}-{major}"
    entry = data.get(key)
    return (key, entry) if isinstance(entry, dict) else None


def _gpu_entry(gpu: Any) -> dict[str, Any] | None:
    """Resolve a model key, variant name or PCI id to ``{model, variant, ...}``."""
    if gpu is None:
        return None
    text = str(gpu).strip()
    norm = re.sub(r"[\s_]+", "-", text.lower())
    norm = norm.removeprefix("nvidia-")
    pci = text.lower()
    if re.match(r"^0x[0-9a-f]{4}$", pci):
        pci = "10de:" + pci[2:]
    for model, entry in compat_data()["gpus"].items():
        variants = entry.get("variants") or {}
        if norm == model.lower().replace("_", "-"):
            nvswitch = {v.get("nvswitch") for v in variants.values()}
            return {"model": model, "variant": None, "pci_id": None, "name": model,
                    "nvswitch": nvswitch == {True}, "tdp_w": None, **_gpu_common(model, entry)}
        for pci_id, var in variants.items():
            if pci == pci_id or norm == str(var["name"]).lower():
                return {"model": model, "variant": var["name"], "pci_id": pci_id, "name": var["name"],
                        "nvswitch": bool(var.get("nvswitch")), "tdp_w": var.get("tdp_w"), **_gpu_common(model, entry)}
    return None


def _gpu_common(model: str, entry: dict[str, Any]) -> dict[str, Any]:
    arch = compat_data()["architectures"][entry["arch"]]
    return {
        "arch": entry["arch"], "cc": str(entry["cc"]), "class": entry.get("class", "datacenter"),
        "min_cuda": entry.get("min_cuda"), "min_cuda_confidence": entry.get("min_cuda_confidence", entry.get("confidence")),
        "min_driver": entry.get("min_driver"), "min_driver_source": entry.get("min_driver_source"),
        "open_modules": entry.get("open_modules", arch.get("open_modules")),
        "last_branch": arch.get("last_branch"), "max_cuda_major": arch.get("max_cuda_major"),
        "source": entry.get("source"), "confidence": entry.get("confidence"),
    }


def _cuda_release(cuda: str) -> tuple[str, dict[str, Any]] | None:
    """``12.4`` -> newest known 12.4.x; ``12.4.1`` -> exactly that one."""
    releases = compat_data()["cuda"]["releases"]
    text = str(cuda).strip()
    if not re.match(r"^\d+\.\d+(\.\d+)?$", text):
        return None
    if text.count(".") == 2:
        return (text, releases[text]) if text in releases else None
    same = [v for v in releases if _mm(v) == text]
    if not same:
        return None
    best = max(same, key=kiln_version_key)
    return best, releases[best]


def _driver_branch(driver: str) -> tuple[str, dict[str, Any]] | None:
    text = str(driver).strip()
    if not re.match(r"^\d{3}\.\d{2,3}(\.\d{2,3})?$", text):
        return None
    branch = text.split(".")[0]
    entry = compat_data()["drivers"]["branches"].get(branch)
    return (branch, entry) if entry else None


def _branch_latest(branch_entry: dict[str, Any]) -> str | None:
    rel = branch_entry.get("releases") or []
    return max(rel, key=kiln_version_key) if rel else None


def _parse_nccl(nccl: str) -> tuple[str, str | None]:
    m = re.match(r"^(\d+\.\d+\.\d+)(?:-\d+)?(?:\+cuda(\d+\.\d+))?$", str(nccl).strip())
    if not m:
        return str(nccl), None
    return m.group(1), m.group(2)


def _parse_torch(torch: str) -> tuple[str | None, str | None, str | None]:
    """``2.14.1+cu130`` -> (release key ``2.14``, full ``2.14.1``, variant ``cu130``)."""
    m = re.match(r"^(\d+)\.(\d+)(\.\d+)?(?:\+(cu\d+))?$", str(torch).strip())
    if not m:
        return None, None, None
    key = f"{m.group(1)}.{m.group(2)}"
    full = key + (m.group(3) or "")
    return key, full, m.group(4)


def _cc_tuple(cc: str) -> tuple[int, int]:
    n = _nums(cc)
    return n[0], n[1] if len(n) > 1 else 0


def _wheel_runs_on(cc: str, archs: Sequence[str] | None, ptx: str | None) -> bool | None:
    """SASS for M.n runs on M.m (m >= n); PTX JITs to any higher cc. None = unknown."""
    if not archs:
        return None
    gpu = _cc_tuple(cc)
    for arch in archs:
        a = _cc_tuple(arch)
        if a[0] == gpu[0] and a[1] <= gpu[1]:
            return True
    return bool(ptx and _cc_tuple(ptx) <= gpu)


# ---------------------------------------------------------------------------
# stack normalisation


def _schema_extra(key: str, value: str) -> str | None:
    """Data-dependent checks of well-shaped scalars: the os and the RDMA stack kind must be ones the data knows."""
    if key == "ofed.kind":
        kinds = list(compat_data()["ofed"]["kinds"])
        return None if value in kinds else f"allowed: {', '.join(kinds)}.{schema.suggest(value, kinds)}"
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


def _normalise_stack(stack: Any) -> dict[str, Any]:
    """A well-formed stack as plain strings (null values dropped); AnsibleFilterError naming the key otherwise."""
    problems = stack_problems(stack)
    if problems:
        raise AnsibleFilterError(f"kiln: {_problems_text(problems)}")
    if stack is None:
        return {}
    out: dict[str, Any] = {}
    for key, value in stack.items():
        if value is None:
            continue
        if key in NESTED_KEYS:
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


# ---------------------------------------------------------------------------
# violations


def _violation(rule: str, components: Sequence[str], message: str, fix: str, fix_stack: dict[str, Any] | None,
               confidence: str | None = "VERIFIED", source: Any = None, severity: str | None = None) -> dict[str, Any]:
    conf = confidence or "DERIVED"
    return {
        "rule": rule,
        "components": list(components),
        "severity": severity or _severity(conf),
        "message": message,
        "fix": fix,
        "fix_stack": fix_stack or {},
        "confidence": conf,
        "source": source,
    }


def _unknown(component: str, value: Any, what: str, fix: str, fix_stack: dict[str, Any] | None = None,
             severity: str = ERROR) -> dict[str, Any]:
    hint = ""
    if re.match(r"^\d+\.\d$", str(value)) and component in ("cuda", "torch", "kubernetes.kubelet", "kubernetes.apiserver",
                                                          "kubernetes.kubectl", "slurm.slurmd", "slurm.slurmctld",
                                                          "slurm.slurmdbd"):
        hint = " (if you wrote an unquoted number such as 1.30, YAML read it as a float: quote versions)"
    return _violation(
        "unknown-version", [component],
        f"{component} {value} is not in kiln's compatibility data ({what}){hint}, so kiln cannot vouch for it.",
        fix, fix_stack, confidence="VERIFIED", source="data/compat.yml", severity=severity)


def _known(pool: Iterable[str], newest: int = 10) -> str:
    """The newest releases of a pool, for a message: ``9.20.0.48, 9.24.0.43 (and 40 older)``."""
    rels = sorted(pool, key=kiln_version_key)
    shown = ", ".join(rels[-newest:])
    return shown + (f" (and {len(rels) - newest} older)" if len(rels) > newest else "")


def _newest_driver_for(min_version: str, *, max_branch: int | None = None, min_major: int | None = None,
                       supported_only: bool = True) -> str | None:
    """Newest listed release on a supported PB/LTSB branch satisfying the bounds."""
    data = compat_data()
    rec = data["recommend"]
    denied = {e.get("version") for e in _active_denylist() if e["component"] == "driver"}
    for preferred_only in ((True, False) if supported_only else (False,)):
        best: str | None = None
        for branch, entry in data["drivers"]["branches"].items():
            if preferred_only and (entry.get("type") not in rec["driver_branch_types"]
                                   or entry.get("status") not in rec["driver_branch_status"]):
                continue
            if entry.get("confidence") == "UNVERIFIED":
                continue
            if max_branch is not None and int(branch) > int(max_branch):
                continue
            if min_major is not None and int(entry.get("max_cuda_major") or 0) < min_major:
                continue
            for rel in entry.get("releases") or []:
                if rel in denied or not _ge(rel, min_version):
                    continue
                if best is None or kiln_version_cmp(rel, best) > 0:
                    best = rel
        if best:
            return best
    return None


def _active_denylist(today: datetime.date | None = None) -> list[dict[str, Any]]:
    today = today or datetime.date.today()
    active = []
    for entry in denylist_data():
        expires = entry.get("expires")
        if expires:
            exp = expires if isinstance(expires, datetime.date) else datetime.date.fromisoformat(str(expires))
            if today > exp:
                continue
        active.append(entry)
    return active


def _stack_get(stack: Mapping[str, Any], component: str) -> Any:
    if "." in component:
        top, sub = component.split(".", 1)
        value = stack.get(top)
        return value.get(sub) if isinstance(value, Mapping) else None
    return stack.get(component)


def _set_fix(stack: Mapping[str, Any], component: str, value: Any) -> dict[str, Any]:
    """fix_stack entry that sets ``component`` (nested keys replace the whole sub-dict)."""
    if "." in component:
        top, sub = component.split(".", 1)
        new = dict(stack.get(top) or {})
        new[sub] = value
        return {top: new}
    return {component: value}


class _Checker:
    """Evaluates one normalised stack. Internal: use :func:`kiln_stack_violations`."""

    def __init__(self, stack: dict[str, Any], today: datetime.date | None, detected: Sequence[str] = ()) -> None:
        self.s = stack
        self.detected = list(detected)
        self.d = compat_data()
        self.today = today
        self.out: list[dict[str, Any]] = []
        self.gpu: dict[str, Any] | None = None
        self.os: tuple[str, dict[str, Any]] | None = None
        self.cuda: tuple[str, dict[str, Any]] | None = None
        self.driver: tuple[str, dict[str, Any]] | None = None

    def cuda_txt(self) -> str:
        """``12.4 (12.4.1)`` when the stack names a minor, else just the version."""
        asked = str(self.s.get("cuda"))
        return asked if not self.cuda or self.cuda[0] == asked else f"{asked} ({self.cuda[0]})"

    def add(self, violation: dict[str, Any]) -> None:
        self.out.append(violation)

    # -- resolution + unknown-version -----------------------------------
    def resolve(self) -> None:
        s, d = self.s, self.d
        if "gpu" in s:
            self.gpu = _gpu_entry(s["gpu"])
            if not self.gpu:
                self.add(_unknown("gpu", s["gpu"], "known models: " + ", ".join(d["gpus"]),
                                  "Set kiln_stack.gpu to a model (e.g. H100), a variant (e.g. H100-SXM5-80GB) or a PCI id "
                                  "(10de:2330) listed in data/compat.yml, or add the GPU to the data with a source."))
        if "os" in s:
            self.os = _os_entry(s["os"])
            if not self.os:
                self.add(_unknown("os", s["os"], "known: " + ", ".join(k for k in d["os"] if k != "os_aliases"),
                                  "Set kiln_stack.os to one of the operating systems in data/compat.yml (e.g. ubuntu-24.04)."))
        if "cuda" in s:
            self.cuda = _cuda_release(s["cuda"])
            if not self.cuda:
                newest = max(d["cuda"]["releases"], key=kiln_version_key)
                self.add(_unknown("cuda", s["cuda"], "no driver row is known for it",
                                  f"Set kiln_stack.cuda to a toolkit listed in data/compat.yml, e.g. \"{newest}\".",
                                  {"cuda": newest}))
        if "driver" in s:
            self.driver = _driver_branch(s["driver"])
            if not self.driver:
                rec = _newest_driver_for("0")
                self.add(_unknown("driver", s["driver"], "not a driver version of a known branch",
                                  f"Set kiln_stack.driver to a release of a known branch, e.g. \"{rec}\".",
                                  {"driver": rec, **({"fabricmanager": rec} if "fabricmanager" in s else {})}))
            elif self.driver[1].get("confidence") == "UNVERIFIED":
                branch = self.driver[0]
                self.add(_unknown("driver", s["driver"], f"branch R{branch} is only known from unverified sources",
                                  f"Prefer a documented branch, or add verified R{branch} data to data/compat.yml.",
                                  severity=WARNING))
            elif s["driver"] not in (self.driver[1].get("releases") or []):
                branch, rels = self.driver[0], self.driver[1].get("releases") or []
                newest = _branch_latest(self.driver[1])
                self.add(_unknown("driver", s["driver"],
                                  f"R{branch} is known, this point release is not"
                                  + (f"; newest known: {newest}" if newest else ""),
                                  "Check that your repository carries it, or use a listed release"
                                  + (f" such as \"{newest}\"" if newest else "") + ".",
                                  self._driver_fix(newest) if newest else None, severity=WARNING))
        if "fabricmanager" in s and not _driver_branch(s["fabricmanager"]):
            self.add(_unknown("fabricmanager", s["fabricmanager"], "not a driver version of a known branch",
                              "Set kiln_stack.fabricmanager to exactly the driver version.",
                              {"fabricmanager": s["driver"]} if self.driver else None))
        if "cudnn" in s and str(s["cudnn"]) not in d["cudnn"]["releases"]:
            self.add(_unknown("cudnn", s["cudnn"], "known: " + _known(d["cudnn"]["releases"]),
                              "Set kiln_stack.cudnn to a full cuDNN version listed in data/compat.yml (e.g. 9.17.1.4)."))
        if "nccl" in s:
            ver, build = _parse_nccl(s["nccl"])
            entry = d["nccl"]["releases"].get(ver)
            if not entry:
                self.add(_unknown("nccl", s["nccl"], "known: " + _known(d["nccl"]["releases"]),
                                  "Set kiln_stack.nccl to an NCCL version listed in data/compat.yml (e.g. 2.21.5)."))
            elif build and build not in entry["builds"]:
                weak = build in (entry.get("builds_seen_once") or []) or _major(build) in (entry.get("builds_unknown_for") or [])
                self.add(_unknown("nccl", s["nccl"], f"known builds of {ver}: " + _known(entry["builds"])
                                  + ("; this build is only weakly attested" if weak else ""),
                                  f"Use one of the known builds of NCCL {ver} or drop the +cuda suffix.",
                                  {"nccl": ver}, severity=WARNING if weak else ERROR))
        if "torch" in s:
            key, _full, variant = _parse_torch(s["torch"])
            entry = d["torch"]["releases"].get(key) if key else None
            if not entry:
                self.add(_unknown("torch", s["torch"], "known releases: " + ", ".join(d["torch"]["releases"]),
                                  "Set kiln_stack.torch to a PyTorch release in data/compat.yml (e.g. 2.14)."))
            elif variant and variant not in entry["variants"]:
                self.add(_unknown("torch", s["torch"], f"PyTorch {key} wheels: " + ", ".join(entry["variants"]),
                                  f"Use one of the wheel variants of PyTorch {key} or drop the +cuXYZ suffix.",
                                  {"torch": key}))
        for comp in ("container_toolkit", "dcgm"):
            if comp in s and str(s[comp]) not in d[comp]["releases"]:
                newest = max(d[comp]["releases"], key=kiln_version_key)
                self.add(_unknown(comp, s[comp], "known: " + _known(d[comp]["releases"]),
                                  f"Set kiln_stack.{comp} to a version listed in data/compat.yml, e.g. \"{newest}\".",
                                  {comp: newest}))
        if "ofed" in s:
            self._resolve_ofed()
        if "slurm" in s:
            for daemon, ver in s["slurm"].items():
                if not re.match(r"^\d{2}\.\d{2}(\.\d+)?$", ver) or _slurm_major(ver) not in d["slurm"]["releases"]:
                    self.add(_unknown(f"slurm.{daemon}", ver, "known majors: " + ", ".join(d["slurm"]["releases"]),
                                      f"Set kiln_stack.slurm.{daemon} to a Slurm release such as \"25.11\"."))
        if "kubernetes" in s:
            k = d["kubernetes"]["minors"]
            for comp, ver in s["kubernetes"].items():
                ok = re.match(r"^v?1\.\d+(\.\d+)?$", ver) and _ge(_mm(ver.lstrip("v")), k["first"]) and _ge(k["last"], _mm(ver.lstrip("v")))
                if not ok:
                    self.add(_unknown(f"kubernetes.{comp}", ver, f"known minors: {k['first']}..{k['last']}",
                                      f"Set kiln_stack.kubernetes.{comp} to a minor between {k['first']} and {k['last']}."))

    def _resolve_ofed(self) -> None:
        ofed, d = self.s["ofed"], self.d["ofed"]
        kind = ofed.get("kind")
        ver = ofed.get("version")
        if kind == "doca" and ver and _mm(ver) not in d["doca_releases"]:
            self.add(_unknown("ofed.version", ver, "known DOCA releases: " + ", ".join(d["doca_releases"]),
                              "Set kiln_stack.ofed.version to a DOCA release listed in data/compat.yml (e.g. 3.2.1).",
                              severity=WARNING))
        if kind == "mlnx" and ver:
            base = ver.split("-")[0]
            if _mm(base) not in d["mlnx_releases"]:
                self.add(_unknown("ofed.version", ver, "known MLNX_OFED releases: " + ", ".join(d["mlnx_releases"]),
                                  "Use MLNX_OFED 24.10 LTS or move to DOCA-OFED (kind: doca).", severity=WARNING))

    # -- rules ------------------------------------------------------------
    def run(self) -> list[dict[str, Any]]:
        self.resolve()
        for rule in (self.r_cuda_driver, self.r_gpu_cuda, self.r_gpu_driver, self.r_flavor, self.r_fabricmanager,
                     self.r_cuda_os, self.r_cudnn, self.r_nccl, self.r_torch, self.r_dcgm, self.r_ofed, self.r_slurm,
                     self.r_builds, self.r_kubernetes, self.r_driver_eol, self.r_gpu_detected, self.r_dcgm_exporter, self.r_denylist):
            rule()
        return self.out

    def _driver_fix(self, target: str) -> dict[str, Any]:
        fix = {"driver": target}
        if "fabricmanager" in self.s:
            fix["fabricmanager"] = target
        return fix

    def _gpu_max_branch(self) -> int | None:
        return int(self.gpu["last_branch"]) if self.gpu and self.gpu.get("last_branch") else None

    def r_cuda_driver(self) -> None:
        if not (self.cuda and self.driver):
            return
        cuda_full, rel = self.cuda
        drv = self.s["driver"]
        major = _major(cuda_full)
        maj = self.d["cuda"]["majors"].get(major)
        if maj and not _ge(drv, maj["mvc_floor"]):
            target = _newest_driver_for(rel["min_driver"], max_branch=self._gpu_max_branch(), min_major=int(major))
            self.add(_violation(
                "cuda-driver", ["cuda", "driver"],
                f"CUDA {self.cuda_txt()} needs driver >= {maj['mvc_floor']} (the CUDA {major}.x floor) "
                f"but the driver is {drv}, so no CUDA {major} program can run.",
                f"Raise kiln_stack.driver to {target} or newer (CUDA {cuda_full} ships with {rel['min_driver']}), "
                f"or lower kiln_stack.cuda to a release the driver supports.",
                self._driver_fix(target) if target else None, maj["confidence"], maj["source"]))
        elif not _ge(drv, rel["min_driver"]):
            target = _newest_driver_for(rel["min_driver"], max_branch=self._gpu_max_branch(), min_major=int(major))
            self.add(_violation(
                "cuda-driver-mvc", ["cuda", "driver"],
                f"CUDA {self.cuda_txt()} was released with driver {rel['min_driver']}; driver {drv} runs it only "
                f"through minor-version compatibility (no PTX JIT, newer APIs fail with cudaErrorCallRequiresNewerDriver).",
                f"Raise kiln_stack.driver to {target} or newer, or allow rule cuda-driver-mvc if every workload ships SASS "
                f"for its GPUs.",
                self._driver_fix(target) if target else None, rel["confidence"], rel["source"], severity=WARNING))

    def r_gpu_cuda(self) -> None:
        if not (self.gpu and self.cuda):
            return
        g, cuda_full = self.gpu, self.cuda[0]
        if g.get("min_cuda") and kiln_version_cmp(_mm(cuda_full), g["min_cuda"]) < 0:
            target = _cuda_release(g["min_cuda"])
            self.add(_violation(
                "gpu-cuda-min", ["gpu", "cuda"],
                f"{g['name']} ({g['arch']}, compute capability {g['cc']}) needs CUDA >= {g['min_cuda']}, but CUDA is {self.s['cuda']}.",
                f"Raise kiln_stack.cuda to {g['min_cuda']} or newer.",
                {"cuda": target[0]} if target else None, g["min_cuda_confidence"], g["source"]))
        if g.get("max_cuda_major") and int(_major(cuda_full)) > int(g["max_cuda_major"]):
            best = max((v for v in self.d["cuda"]["releases"] if int(_major(v)) <= int(g["max_cuda_major"])),
                       key=kiln_version_key)
            self.add(_violation(
                "gpu-cuda-max", ["gpu", "cuda"],
                f"{g['name']} ({g['arch']}, compute capability {g['cc']}) is not supported by CUDA {_major(cuda_full)}.x "
                f"(CUDA {self.s['cuda']} dropped it); the last usable major is {g['max_cuda_major']}.",
                f"Set kiln_stack.cuda to {best} or another {g['max_cuda_major']}.x release.",
                {"cuda": best}, "VERIFIED", self.d["architectures"][g["arch"]]["source"]))

    def r_gpu_driver(self) -> None:
        if not (self.gpu and self.driver):
            return
        g, drv = self.gpu, self.s["driver"]
        floor, conf, src = None, None, None
        if g.get("min_driver"):
            floor, conf, src = g["min_driver"], g["confidence"], g.get("min_driver_source") or g["source"]
        elif g.get("min_cuda"):
            rel = _cuda_release(g["min_cuda"])
            if rel:
                ga = min((v for v in self.d["cuda"]["releases"] if _mm(v) == _mm(rel[0])), key=kiln_version_key)
                floor = self.d["cuda"]["releases"][ga]["min_driver"]
                conf = _worst_conf("DERIVED", g["min_cuda_confidence"])
                src = g["source"]
        if floor and not _ge(drv, floor):
            target = _newest_driver_for(floor, max_branch=self._gpu_max_branch())
            self.add(_violation(
                "gpu-driver-min", ["gpu", "driver"],
                f"{g['name']} needs driver >= {floor}, but the driver is {drv}.",
                f"Raise kiln_stack.driver to {target} or newer.", self._driver_fix(target) if target else None, conf, src))
        if g.get("last_branch") and int(self.driver[0]) > int(g["last_branch"]):
            target = _newest_driver_for("0", max_branch=int(g["last_branch"]))
            self.add(_violation(
                "gpu-driver-max", ["gpu", "driver"],
                f"{g['name']} ({g['arch']}) is supported only up to driver branch R{g['last_branch']}; driver {drv} "
                f"(R{self.driver[0]}) does not run on it.",
                f"Set kiln_stack.driver to an R{g['last_branch']} release such as {target}.",
                self._driver_fix(target) if target else None, "VERIFIED", self.d["architectures"][g["arch"]]["source"]))

    def r_flavor(self) -> None:
        flavor = self.s.get("driver_flavor")
        if flavor not in ("open", "proprietary"):
            return
        fl = self.d["drivers"]["flavors"]
        if self.driver and flavor == "open" and int(self.driver[0]) < int(fl["both_from_branch"]):
            self.add(_violation(
                "driver-flavor-branch", ["driver_flavor", "driver"],
                f"Open kernel modules ship from R{fl['both_from_branch']}; driver {self.s['driver']} (R{self.driver[0]}) has "
                f"only the proprietary flavor, so driver_flavor {flavor} is impossible.",
                "Set kiln_stack.driver_flavor to proprietary, or raise the driver.",
                {"driver_flavor": "proprietary"}, fl["confidence"], fl["source"]))
        if not self.gpu:
            return
        g = self.gpu
        if g["open_modules"] == "required" and flavor != "open":
            self.add(_violation(
                "driver-flavor-gpu", ["driver_flavor", "gpu"],
                f"{g['name']} ({g['arch']}) requires the open kernel modules; driver_flavor {flavor} is unsupported on it.",
                "Set kiln_stack.driver_flavor to open.", {"driver_flavor": "open"}, "VERIFIED", g["source"]))
        if g["open_modules"] == "unsupported" and flavor == "open":
            self.add(_violation(
                "driver-flavor-gpu", ["driver_flavor", "gpu"],
                f"{g['name']} ({g['arch']}) predates the GSP that the open kernel modules need; driver_flavor {flavor} "
                f"cannot drive it.",
                "Set kiln_stack.driver_flavor to proprietary.", {"driver_flavor": "proprietary"}, "VERIFIED",
                self.d["drivers"]["flavors"]["source"]))

    def r_fabricmanager(self) -> None:
        fm, drv = self.s.get("fabricmanager"), self.s.get("driver")
        if fm and drv and self.driver and _driver_branch(fm) and fm != drv:
            self.add(_violation(
                "fabricmanager-driver", ["fabricmanager", "driver"],
                f"Fabric Manager {fm} must equal the driver version exactly, but the driver is {drv}.",
                f"Set kiln_stack.fabricmanager to {drv}.", {"fabricmanager": drv}, "VERIFIED",
                self.d["sources"]["driver_install"]))

    def r_cuda_os(self) -> None:
        if not (self.cuda and self.os):
            return
        key, entry = self.os
        major = _major(self.cuda[0])
        if major in (entry.get("cuda_majors") or []):
            return
        dropped = major in (entry.get("cuda_majors_dropped") or [])
        served = entry.get("cuda_majors") or []
        best = max((v for v in self.d["cuda"]["releases"] if _major(v) in served), key=kiln_version_key, default=None)
        self.add(_violation(
            "cuda-os", ["cuda", "os"],
            f"The NVIDIA CUDA repository for {key} ({entry['cuda_repo']}) "
            + ("does not serve" if dropped else "is not known to serve")
            + f" CUDA {major}.x, so CUDA {self.s['cuda']} cannot be installed from it.",
            f"Set kiln_stack.cuda to a {'/'.join(served)}.x release (e.g. {best}) or change kiln_stack.os.",
            {"cuda": best} if best else None,
            entry["confidence"] if dropped else "UNVERIFIED", entry["source"]))

    def r_cudnn(self) -> None:
        if "cudnn" not in self.s or str(self.s["cudnn"]) not in self.d["cudnn"]["releases"]:
            return
        ver = str(self.s["cudnn"])
        rel = self.d["cudnn"]["releases"][ver]
        if self.cuda:
            cuda_full = self.cuda[0]
            major, mm = _major(cuda_full), _mm(cuda_full)
            rng = (rel.get("cuda") or {}).get(major)
            ok = bool(rng) and _ge(mm, rng[0]) and _ge(rng[1], mm)
            if not ok:
                target = _pick_cudnn(cuda_full, self.gpu)
                have = ", ".join(f"{lo}-{hi}" for lo, hi in (rel.get("cuda") or {}).values())
                self.add(_violation(
                    "cudnn-cuda", ["cudnn", "cuda"],
                    f"cuDNN {ver} is built for CUDA {have}, not for CUDA {self.cuda_txt()}.",
                    f"Set kiln_stack.cudnn to {target}." if target else "Pick a cuDNN release built for this CUDA.",
                    {"cudnn": target} if target else None, rel["confidence"], rel["source"]))
        if self.gpu and rel.get("min_cc") and _cc_tuple(self.gpu["cc"]) < _cc_tuple(rel["min_cc"]):
            target = _pick_cudnn(self.cuda[0], self.gpu) if self.cuda else None
            self.add(_violation(
                "cudnn-gpu", ["cudnn", "gpu"],
                f"cuDNN {ver} needs compute capability >= {rel['min_cc']}; {self.gpu['name']} is {self.gpu['cc']}.",
                f"Set kiln_stack.cudnn to {target or '9.10.2.21 (the last release for Maxwell/Pascal/Volta)'}.",
                {"cudnn": target or "9.10.2.21"}, rel["confidence"], rel["source"]))

    def r_nccl(self) -> None:
        if "nccl" not in self.s:
            return
        ver, build = _parse_nccl(self.s["nccl"])
        rel = self.d["nccl"]["releases"].get(ver)
        if not rel or (build and build not in rel["builds"]):
            return
        if self.cuda:
            cuda_full = self.cuda[0]
            builds = [build] if build else rel["builds"]
            usable = [b for b in builds if _major(b) == _major(cuda_full) and _ge(_mm(cuda_full), b)]
            if not usable:
                target = _pick_nccl(cuda_full, self.gpu)
                incomplete = not build and _major(cuda_full) in (rel.get("builds_unknown_for") or [])
                conf = "UNVERIFIED" if incomplete else _worst_conf(
                    rel.get("builds_confidence", rel["confidence"]),
                    self.d["nccl"]["runs_on_same_major_newer_minor"]["confidence"])
                gap = (f" NCCL {ver} is published for CUDA {_major(cuda_full)}, but kiln's data does not name that "
                       f"build's minor, so this is a warning." if incomplete else "")
                self.add(_violation(
                    "nccl-cuda", ["nccl", "cuda"],
                    f"NCCL {self.s['nccl']} is built for CUDA {', '.join(builds)} and none of those builds runs on CUDA "
                    f"{self.cuda_txt()}: a build needs the same CUDA major and a minor at or below it.{gap}",
                    (f"Set kiln_stack.nccl to {target}" if target else "Pick an NCCL build for this CUDA major")
                    + (f", or name the build: {ver}-1+cuda<X.Y>." if incomplete else "."),
                    {"nccl": target} if target else None, conf, rel["source"]))
        if self.gpu:
            need = self.d["nccl"].get("min_for_arch", {}).get(self.gpu["arch"])
            if need and not _ge(ver, need["version"]):
                target = _pick_nccl(self.cuda[0], self.gpu) if self.cuda else None
                self.add(_violation(
                    "nccl-gpu", ["nccl", "gpu"],
                    f"NCCL {self.s['nccl']} predates {self.gpu['arch']} support; {self.gpu['name']} needs NCCL >= {need['version']}.",
                    f"Set kiln_stack.nccl to {target or need['version']} or newer.", {"nccl": target or need["version"]},
                    need["confidence"], need["source"]))

    def r_torch(self) -> None:
        if "torch" not in self.s:
            return
        key, _full, pinned = _parse_torch(self.s["torch"])
        rel = self.d["torch"]["releases"].get(key) if key else None
        if not rel or (pinned and pinned not in rel["variants"]):
            return
        variants = {pinned: rel["variants"][pinned]} if pinned else dict(rel["variants"])
        if self.cuda:
            cuda_full = self.cuda[0]
            cands = {v: c for v, c in variants.items() if _major(c) == _major(cuda_full) and _ge(_mm(cuda_full), c)}
            if not cands:
                self.add(_violation(
                    "torch-cuda", ["torch", "cuda"],
                    f"PyTorch {self.s['torch']} has wheels for CUDA {', '.join(variants.values())}, none for CUDA "
                    f"{self.s['cuda']} ({_major(cuda_full)}.x at or below {_mm(cuda_full)}).",
                    _torch_fix_text(rel, key),
                    {"cuda": _cuda_release(max(variants.values(), key=kiln_version_key))[0]}
                    if _cuda_release(max(variants.values(), key=kiln_version_key)) else None,
                    rel["confidence"], rel["source"]))
            else:
                variants = cands

        def driver_ok(c: str) -> bool:
            maj = self.d["cuda"]["majors"].get(_major(c))
            return not (self.driver and maj) or _ge(self.s["driver"], maj["mvc_floor"])

        def arch_ok(v: str) -> bool:
            if not self.gpu:
                return True
            ran = _wheel_runs_on(self.gpu["cc"], (rel.get("archs") or {}).get(v), (rel.get("ptx") or {}).get(v))
            return ran is not False

        arch_fit = [v for v in variants if arch_ok(v)]
        drv_fit = [v for v in variants if driver_ok(variants[v])]
        if self.gpu and not arch_fit:
            self.add(_violation(
                "torch-gpu", ["torch", "gpu"],
                f"PyTorch {self.s['torch']} wheels ({', '.join(variants)}) carry no kernels for {self.gpu['name']} "
                f"(compute capability {self.gpu['cc']}).",
                "Use a PyTorch release/variant that still builds for this architecture (e.g. the cu126 wheels keep sm_50-sm_90).",
                None, rel["confidence"], rel.get("archs_source", rel["source"])))
        pool = arch_fit or list(variants)
        if self.driver and not [v for v in pool if v in drv_fit]:
            need = min((self.d["cuda"]["majors"][_major(variants[v])]["mvc_floor"] for v in pool
                        if _major(variants[v]) in self.d["cuda"]["majors"]), key=kiln_version_key)
            target = _newest_driver_for(need, max_branch=self._gpu_max_branch())
            self.add(_violation(
                "torch-driver", ["torch", "driver"],
                f"PyTorch {self.s['torch']} wheels ({', '.join(pool)}) need driver >= {need}, but the driver is {self.s['driver']}.",
                f"Raise kiln_stack.driver to {target} or newer.", self._driver_fix(target) if target else None,
                "VERIFIED", self.d["sources"]["cuda_mvc"]))

    def r_dcgm(self) -> None:
        if "dcgm" not in self.s or str(self.s["dcgm"]) not in self.d["dcgm"]["releases"]:
            return
        ver, dd = str(self.s["dcgm"]), self.d["dcgm"]
        if self.driver and not _ge(self.s["driver"], dd["min_driver"]["version"]):
            target = _newest_driver_for(dd["min_driver"]["version"], max_branch=self._gpu_max_branch())
            self.add(_violation(
                "dcgm-driver", ["dcgm", "driver"],
                f"DCGM {ver} needs driver >= {dd['min_driver']['version']}, but the driver is {self.s['driver']}.",
                f"Raise kiln_stack.driver to {target}.", self._driver_fix(target) if target else None,
                dd["min_driver"]["confidence"], dd["min_driver"]["source"]))
        if self.gpu:
            need = dd.get("min_for_arch", {}).get(self.gpu["arch"])
            if need and kiln_version_cmp(_mm(ver), need["version"]) < 0:
                newest = max(dd["releases"], key=kiln_version_key)
                self.add(_violation(
                    "dcgm-gpu", ["dcgm", "gpu"],
                    f"DCGM {ver} predates {self.gpu['arch']} support ({self.gpu['name']} needs DCGM >= {need['version']}).",
                    f"Set kiln_stack.dcgm to {newest}.", {"dcgm": newest}, need["confidence"], need["source"]))
        if self.driver and _major(ver) == "4":
            cuda_major = _dcgm_cuda_major(self.s, self.gpu)
            if cuda_major == "11":
                info = dd["cuda11_packages_in_4x"]
                self.add(_violation(
                    "dcgm-cuda", ["dcgm", "driver"],
                    f"DCGM {ver} would need the -cuda11 packages for driver {self.s['driver']} (a CUDA 11 branch), and "
                    f"whether DCGM 4 still publishes them is not confirmed.",
                    "Use DCGM 3.3.9 with this driver, or raise the driver to a CUDA 12+ branch.", {"dcgm": "3.3.9"},
                    info["confidence"], info["source"]))

    def r_ofed(self) -> None:
        ofed = self.s.get("ofed")
        if not ofed or ofed.get("kind") not in self.d["ofed"]["kinds"]:
            return
        d = self.d["ofed"]
        kind, ver = ofed.get("kind"), ofed.get("version")
        mlnx_major = _mm(ver.split("-")[0]) if kind == "mlnx" and ver else None
        if mlnx_major and mlnx_major not in d["mlnx_releases"] and kiln_version_cmp(mlnx_major, d["kinds"]["mlnx"]["last_release"]) < 0:
            self.add(_violation(
                "ofed-mlnx-support", ["ofed"],
                f"MLNX_OFED {ver} is older than the last standalone LTS ({d['kinds']['mlnx']['last_release']}) and no "
                f"longer maintained.",
                "Move to DOCA-OFED (kind: doca) or MLNX_OFED 24.10 LTS.", {"ofed": {"kind": "doca", "version": "3.2.1"}},
                "DERIVED", d["kinds"]["mlnx"]["source"], severity=WARNING))
        if kind == "inbox":
            dma = d["gpudirect"]["dma_buf"]
            if self.s.get("driver_flavor") == "proprietary":
                self.add(_violation(
                    "gpudirect-flavor", ["ofed", "driver_flavor"],
                    f"With inbox RDMA drivers (ofed kind inbox) GPUDirect RDMA needs DMA-BUF, which needs the open kernel "
                    f"modules; driver_flavor proprietary leaves no GPUDirect path.",
                    "Set kiln_stack.driver_flavor to open, or use DOCA-OFED (ofed kind doca) for nvidia-peermem.",
                    {"driver_flavor": "open"}, dma["confidence"], dma["source"], severity=WARNING))
            if self.s.get("kernel") and not _ge(self.s["kernel"].split("-")[0], dma["min_kernel"]):
                self.add(_violation(
                    "gpudirect-kernel", ["ofed", "kernel"],
                    f"DMA-BUF GPUDirect RDMA over inbox drivers needs kernel >= {dma['min_kernel']}; kernel "
                    f"{self.s['kernel']} is older.",
                    f"Use a kernel >= {dma['min_kernel']} or DOCA-OFED (ofed kind doca).",
                    {"ofed": {"kind": "doca", "version": "3.2.1"}}, dma["confidence"], dma["source"], severity=WARNING))

    def r_slurm(self) -> None:
        sl = self.s.get("slurm")
        if not sl:
            return
        rel = self.d["slurm"]["releases"]
        order = ("slurmdbd", "slurmctld", "slurmd")
        known = {k: v for k, v in sl.items() if re.match(r"^\d{2}\.\d{2}", v) and _slurm_major(v) in rel}
        for i, newer in enumerate(order):
            for older in order[i + 1:]:
                if newer not in known or older not in known:
                    continue
                vn, vo = known[newer], known[older]
                mn, mo = _slurm_major(vn), _slurm_major(vo)
                if kiln_version_cmp(vn, vo) < 0:
                    self.add(_violation(
                        "slurm-order", [f"slurm.{newer}", f"slurm.{older}"],
                        f"{older} {vo} is newer than {newer} {vn}; Slurm requires slurmdbd >= slurmctld >= slurmd.",
                        f"Set kiln_stack.slurm.{older} to {vn} (or upgrade {newer} first).",
                        _set_fix(self.s, f"slurm.{older}", vn), rel[mn]["confidence"], rel[mn]["source"]))
                elif mn != mo and mo not in rel[mn]["compatible_prior"]:
                    self.add(_violation(
                        "slurm-skew", [f"slurm.{newer}", f"slurm.{older}"],
                        f"{newer} {vn} talks only to releases {', '.join(rel[mn]['compatible_prior'])} and older "
                        f"{older} {vo} is outside that window.",
                        f"Set kiln_stack.slurm.{older} to {vn}, or upgrade through intermediate releases.",
                        _set_fix(self.s, f"slurm.{older}", vn), rel[mn]["confidence"], rel[mn]["source"]))

    def r_builds(self) -> None:
        """package-build: kiln_stack.builds names a Slurm build of another major than the stack's Slurm.

        A component without a recorded build is not a violation: kiln_plan lists it under ``candidates``
        (installed at the repository's candidate, then held)."""
        if not (self.s.get("builds") and self.s.get("slurm")):
            return
        os_key = self.os[0] if self.os else None
        for comp in ("slurmctld", "slurmd"):
            if not self.s["slurm"].get(comp):
                continue
            try:
                kiln_distro_build(self.s, comp, os_key)
            except AnsibleFilterError as exc:
                message, _, fix = str(exc).removeprefix("kiln: ").partition(" Fix: ")
                self.add(_violation("package-build", ["builds.slurm", f"slurm.{comp}"], message, fix, None,
                                    "VERIFIED", "docs/compat.md"))

    def r_kubernetes(self) -> None:
        k8s = self.s.get("kubernetes")
        if not k8s or "apiserver" not in k8s:
            return
        kd = self.d["kubernetes"]

        def minor(v: str) -> int | None:
            m = re.match(r"^v?1\.(\d+)", v)
            return int(m.group(1)) if m else None

        api = minor(k8s["apiserver"])
        if api is None:
            return
        kl = minor(k8s.get("kubelet", "")) if "kubelet" in k8s else None
        if kl is not None:
            max_older = kd["kubelet"]["max_older"] if kl >= 25 else kd["kubelet"]["max_older_before_1_25"]
            if kl > api or api - kl > max_older:
                self.add(_violation(
                    "kubernetes-kubelet-skew", ["kubernetes.kubelet", "kubernetes.apiserver"],
                    f"kubelet {k8s['kubelet']} must not be newer than kube-apiserver {k8s['apiserver']} nor more than "
                    f"{max_older} minors older.",
                    f"Set kiln_stack.kubernetes.kubelet to {k8s['apiserver']}.",
                    _set_fix(self.s, "kubernetes.kubelet", k8s["apiserver"]), kd["kubelet"]["confidence"],
                    kd["kubelet"]["source"]))
        kc = minor(k8s.get("kubectl", "")) if "kubectl" in k8s else None
        if kc is not None and abs(kc - api) > kd["kubectl"]["skew"]:
            self.add(_violation(
                "kubernetes-kubectl-skew", ["kubernetes.kubectl", "kubernetes.apiserver"],
                f"kubectl {k8s['kubectl']} must be within {kd['kubectl']['skew']} minor of kube-apiserver {k8s['apiserver']}.",
                f"Set kiln_stack.kubernetes.kubectl to {k8s['apiserver']}.",
                _set_fix(self.s, "kubernetes.kubectl", k8s["apiserver"]), kd["kubectl"]["confidence"], kd["kubectl"]["source"]))

    def r_driver_eol(self) -> None:
        if not self.driver:
            return
        branch, entry = self.driver
        if entry.get("status") in ("eol", "superseded", "eol (NFB)"):
            target = _newest_driver_for("0", max_branch=self._gpu_max_branch(),
                                        min_major=int(_major(self.cuda[0])) if self.cuda else None)
            when = f" (EOL {entry['eol']})" if entry.get("eol") else ""
            self.add(_violation(
                "driver-branch-eol", ["driver"],
                f"Driver {self.s['driver']} is on branch R{branch}, which is {entry['status']}{when}: no more security fixes.",
                f"Move kiln_stack.driver to a supported branch, e.g. {target}.",
                self._driver_fix(target) if target else None, entry["confidence"], entry["source"], severity=WARNING))

    def r_gpu_detected(self) -> None:
        """Detected hardware against intent: every GPU the host reports must be known and match kiln_stack.gpu."""
        if not self.detected:
            return
        intent = self.gpu
        for det in self.detected:
            found = _gpu_entry(det)
            if not found:
                said = f"the inventory says gpu {self.s['gpu']}" if "gpu" in self.s else "the inventory names no gpu"
                self.add(_violation(
                    "gpu-detected-unknown", ["gpu"],
                    f"The host reports a GPU with PCI id {show(det)}, which data/compat.yml does not know ({said}), "
                    f"so kiln cannot check the stack against the hardware.",
                    "Add the GPU to gpus: in data/compat.yml with a source, or accept rule gpu-detected-unknown in "
                    "kiln_stack_allow with a reason (then it is a warning).",
                    None, "VERIFIED", "host facts (library/kiln_gpu_facts)"))
                continue
            if intent is None:
                intent = found  # the first known detected GPU stands in for an absent kiln_stack.gpu
                continue
            exact = intent["variant"] is not None  # the inventory named a board, not only a model
            same = found["model"] == intent["model"] and (not exact or found["pci_id"] == intent["pci_id"])
            if not same:
                what = intent["name"] if self.s.get("gpu") in (None, intent["name"]) else f"{self.s['gpu']} ({intent['name']})"
                self.add(_violation(
                    "gpu-detected", ["gpu"],
                    f"Inventory says gpu {what} but the host reports {found['name']} ({show(det)}).",
                    f"Set kiln_stack.gpu to {found['variant'] or found['model']} for these hosts, or check the hardware.",
                    {"gpu": found["variant"] or found["model"]}, "VERIFIED", "host facts"))

    def r_dcgm_exporter(self) -> None:
        exp, dcgm = self.s.get("dcgm_exporter"), self.s.get("dcgm")
        if not exp or not dcgm:
            return
        exp_dcgm = exp.lstrip("v").split("-")[0]
        if _major(exp_dcgm) != _major(dcgm):
            self.add(_violation(
                "dcgm-exporter", ["dcgm_exporter", "dcgm"],
                f"dcgm-exporter {exp} is built for DCGM {exp_dcgm}, but DCGM is {dcgm}: the exporter needs the same "
                f"DCGM major.",
                f"Set kiln_stack.dcgm_exporter to a {_major(dcgm)}.x build (<DCGM version>-<exporter version>).",
                None, "DERIVED", self.d["sources"]["gpu_operator_lifecycle"]))

    def r_denylist(self) -> None:
        for entry in _active_denylist(self.today):
            value = _stack_get(self.s, entry["component"])
            if value is None:
                continue
            value = str(value)
            if entry["component"] == "nccl":
                value = _parse_nccl(value)[0]
            hit = kiln_version_cmp(value, entry["version"]) == 0 if entry.get("version") else _in_range(value, entry["range"])
            if not hit:
                continue
            conf = entry.get("confidence", "UNVERIFIED")
            sev = entry.get("severity", ERROR) if conf != "UNVERIFIED" else WARNING
            bad = entry.get("version") or entry.get("range")
            self.add(_violation(
                "denylist", [entry["component"]],
                f"{entry['component']} {value} is denylisted ({entry['id']}, matches {bad}): {entry['reason']}",
                f"Change kiln_stack.{entry['component']} to a version outside {bad} (see {entry['link']}).",
                _denylist_fix(self.s, entry), conf, entry["link"], severity=sev))


def _denylist_fix(stack: Mapping[str, Any], entry: dict[str, Any]) -> dict[str, Any] | None:
    comp = entry["component"]
    if comp in ("container_toolkit", "dcgm", "cuda"):
        pool = compat_data()["cuda" if comp == "cuda" else comp]["releases"]
        bad = entry.get("version")
        good = [v for v in pool if not (kiln_version_cmp(v, bad) == 0 if bad else _in_range(v, entry["range"]))]
        if comp == "cuda" and stack.get("cuda"):
            good = [v for v in good if _major(v) == _major(str(stack["cuda"]))] or good
        if good:
            return _set_fix(stack, comp, max(good, key=kiln_version_key))
    if comp == "driver":
        branch = compat_data()["drivers"]["branches"].get(str(stack.get("driver", "")).split(".")[0])
        rel = [r for r in (branch or {}).get("releases", []) if r != entry.get("version")]
        if rel:
            target = max(rel, key=kiln_version_key)
            fix = {"driver": target}
            if stack.get("fabricmanager"):
                fix["fabricmanager"] = target
            return fix
    return None


def _torch_fix_text(rel: dict[str, Any], key: str) -> str:
    pairs = ", ".join(f"{v} (CUDA {c})" for v, c in rel["variants"].items())
    return f"Set kiln_stack.cuda to a CUDA that PyTorch {key} ships wheels for: {pairs}."


def _pick_cudnn(cuda_full: str, gpu: dict[str, Any] | None) -> str | None:
    rels = compat_data()["cudnn"]["releases"]
    major, mm = _major(cuda_full), _mm(cuda_full)
    ok = []
    for ver, rel in rels.items():
        rng = (rel.get("cuda") or {}).get(major)
        if not rng or not (_ge(mm, rng[0]) and _ge(rng[1], mm)):
            continue
        if gpu and rel.get("min_cc") and _cc_tuple(gpu["cc"]) < _cc_tuple(rel["min_cc"]):
            continue
        if rel.get("confidence") == "UNVERIFIED":
            continue
        ok.append(ver)
    return max(ok, key=kiln_version_key) if ok else None


def _pick_nccl(cuda_full: str, gpu: dict[str, Any] | None) -> str | None:
    """Newest NCCL with a build for cuda_full's major at or below its minor, rendered ``ver-1+cudaX.Y``."""
    data = compat_data()["nccl"]
    need = data.get("min_for_arch", {}).get(gpu["arch"]) if gpu else None
    best: tuple[str, str] | None = None
    for ver, rel in data["releases"].items():
        if need and not _ge(ver, need["version"]):
            continue
        if rel.get("confidence") == "UNVERIFIED":
            continue
        builds = [b for b in rel["builds"] if _major(b) == _major(cuda_full) and _ge(_mm(cuda_full), b)]
        if not builds:
            continue
        if best is None or kiln_version_cmp(ver, best[0]) > 0:
            best = (ver, max(builds, key=kiln_version_key))
    return f"{best[0]}-1+cuda{best[1]}" if best else None


def _dcgm_cuda_major(stack: Mapping[str, Any], gpu: dict[str, Any] | None) -> str | None:
    """CUDA major of the DCGM 4 packages: the driver's CUDA major, capped by the GPU architecture."""
    major = None
    br = _driver_branch(stack["driver"]) if stack.get("driver") else None
    if br:
        major = int(br[1].get("max_cuda_major") or 0) or None
    elif stack.get("cuda"):
        major = int(_major(str(stack["cuda"])))
    if major and gpu and gpu.get("max_cuda_major"):
        major = min(major, int(gpu["max_cuda_major"]))
    return str(major) if major else None


RULES = (
    "unknown-version", "cuda-driver", "cuda-driver-mvc", "gpu-cuda-min", "gpu-cuda-max",
    "gpu-driver-min", "gpu-driver-max", "driver-flavor-branch", "driver-flavor-gpu", "fabricmanager-driver", "cuda-os",
    "cudnn-cuda", "cudnn-gpu", "nccl-cuda", "nccl-gpu", "torch-cuda", "torch-gpu", "torch-driver", "dcgm-driver",
    "dcgm-gpu", "dcgm-cuda", "dcgm-exporter", "ofed-mlnx-support", "gpudirect-flavor", "gpudirect-kernel",
    "slurm-order", "slurm-skew", "kubernetes-kubelet-skew", "kubernetes-kubectl-skew", "driver-branch-eol",
    "gpu-detected", "gpu-detected-unknown", "denylist", "package-build",
)
"""Rule ids a kiln_stack_allow entry may accept (``invalid-stack`` never can)."""


def _check_allow(allow: Any) -> list[dict[str, str]]:
    problems = schema.check_allow(allow, RULES)
    if problems:
        raise AnsibleFilterError(f"kiln: {_problems_text(problems)}")
    return [{"rule": str(a["rule"]), "reason": str(a["reason"])} for a in (allow or [])]


def _invalid(problems: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    out = []
    for p in problems:
        v = _violation("invalid-stack", [p["key"]], p["message"], p["fix"], None, "VERIFIED", "docs/compat.md")
        v.update(allowed=False, allow_reason=None)
        out.append(v)
    return out


def _parse_today(today: Any) -> datetime.date | None:
    if not today:
        return None
    try:
        return datetime.date.fromisoformat(str(today)[:10])
    except ValueError as exc:
        raise AnsibleFilterError(f"kiln: today must be a date YYYY-MM-DD, got {show(today)}") from exc


def kiln_stack_violations(stack: Mapping[str, Any] | None, allow: Sequence[Mapping[str, str]] | None = None,
                          today: str | None = None, detected: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Check a kiln_stack against the compatibility data.

    Returns a list of violation dicts (``rule``, ``components``, ``severity``,
    ``message``, ``fix``, ``fix_stack``, ``confidence``, ``source``, ``allowed``,
    ``allow_reason``); ``[]`` means the stack is compatible. The input schema is
    checked first: a malformed stack or allow list yields only ``invalid-stack``
    violations (one per problem, naming the key) and no rule runs. ``allow``
    turns violations of the listed rules into warnings (``allowed: true``).
    ``today`` (YYYY-MM-DD) pins the date used for denylist expiry. ``detected``
    lists the GPUs (PCI ids or names) the host reports, checked against ``gpu``.
    """
    problems = stack_problems(stack) + schema.check_allow(allow, RULES)
    if isinstance(detected, (str, bytes)):
        detected = [detected]
    if detected is not None and (not isinstance(detected, (list, tuple))
                                 or not all(isinstance(x, str) and len(x) <= schema.MAX_TEXT for x in detected)):
        problems.append({"key": "detected", "message": f"detected GPUs are {show(detected)}; expected a list of PCI ids.",
                         "fix": "Pass the host's GPU PCI ids (ansible_facts['kiln_gpu']['gpus'][*]['pci_device_id'])."})
    if problems:
        return _invalid(problems)
    allow_list = _check_allow(allow)
    day = _parse_today(today)
    norm, _asked, result = _canonical(_normalise_stack(stack))
    result = result + _Checker(norm, day, detected or ()).run()
    reasons = {a["rule"]: a["reason"] for a in allow_list}
    for v in result:
        if v["rule"] in reasons:
            v["allowed"], v["allow_reason"], v["severity"] = True, reasons[v["rule"]], WARNING
        else:
            v["allowed"], v["allow_reason"] = False, None
    return result


# ---------------------------------------------------------------------------
# recommendation


def kiln_recommend_stack(gpu: str, os: str | None = None, torch: str | None = None,
                         driver_flavor: str | None = None) -> dict[str, Any]:
    """Return a complete compatible stack for ``gpu`` on ``os`` (newest supported choices).

    ``torch`` pins the PyTorch release (``2.12``, ``2.14.1`` or ``2.14+cu130``); the
    toolkit then follows the newest wheel variant that fits the GPU, OS and driver.
    """
    d = compat_data()
    g = _gpu_entry(gpu)
    if not g:
        raise AnsibleFilterError(f"kiln_recommend_stack: unknown GPU {show(gpu)}; known models: {', '.join(d['gpus'])}")
    os_id = os or d["recommend"]["os"]
    osx = _os_entry(os_id)
    if not osx:
        raise AnsibleFilterError(f"kiln_recommend_stack: unknown OS {show(os_id)}")
    os_key, os_entry = osx
    served = set(os_entry.get("cuda_majors") or [])
    max_major = int(g["max_cuda_major"]) if g.get("max_cuda_major") else 99

    def usable_cuda(c: str) -> tuple[str, dict[str, Any]] | None:
        rel = _cuda_release(c)
        if not rel or _major(rel[0]) not in served or int(_major(rel[0])) > max_major:
            return None
        if g.get("min_cuda") and kiln_version_cmp(_mm(rel[0]), g["min_cuda"]) < 0:
            return None
        if rel[0] in {e.get("version") for e in _active_denylist() if e["component"] == "cuda"}:
            return None
        if not _newest_driver_for(rel[1]["min_driver"], max_branch=g.get("last_branch"), min_major=int(_major(rel[0]))):
            return None
        return rel

    choice: tuple[str, str, str | None] | None = None  # (torch full, cuda full, variant)
    if torch is not None:
        key, full, pinned = _parse_torch(torch)
        rel = d["torch"]["releases"].get(key) if key else None
        if not rel:
            raise AnsibleFilterError(f"kiln_recommend_stack: unknown PyTorch release {show(torch)}; known: {', '.join(d['torch']['releases'])}")
        torch_candidates = [(key, full, rel, pinned)]
    else:
        torch_candidates = [(k, r.get("latest_patch", k), r, None)
                            for k, r in sorted(d["torch"]["releases"].items(), key=lambda kv: kiln_version_key(kv[0]), reverse=True)]
    for key, full, rel, pinned in torch_candidates:
        variants = [pinned] if pinned else sorted(rel["variants"], key=lambda v: kiln_version_key(rel["variants"][v]), reverse=True)
        for var in variants:
            if var not in rel["variants"]:
                raise AnsibleFilterError(f"kiln_recommend_stack: PyTorch {key} has no {var} wheels")
            if _wheel_runs_on(g["cc"], (rel.get("archs") or {}).get(var), (rel.get("ptx") or {}).get(var)) is False:
                continue
            cuda_rel = usable_cuda(rel["variants"][var])
            if cuda_rel:
                choice = (full, cuda_rel[0], var)
                break
        if choice:
            break
    if not choice:
        raise AnsibleFilterError(
            f"kiln_recommend_stack: no PyTorch/CUDA combination in the data fits {g['name']} on {os_key}"
            + (f" with torch {torch}" if torch else ""))
    torch_full, cuda_full, variant = choice
    cuda_rel = d["cuda"]["releases"][cuda_full]
    floor = cuda_rel["min_driver"]
    if g.get("min_driver") and _ge(g["min_driver"], floor):
        floor = g["min_driver"]
    driver = _newest_driver_for(floor, max_branch=g.get("last_branch"), min_major=int(_major(cuda_full)))
    branch = int(driver.split(".")[0])
    if driver_flavor:
        flavor = driver_flavor
    elif g["open_modules"] == "unsupported" or branch < int(d["drivers"]["flavors"]["both_from_branch"]):
        flavor = "proprietary"
    else:
        flavor = "open"
    stack: dict[str, Any] = {"gpu": g["variant"] or g["model"], "os": os_key, "driver": driver, "driver_flavor": flavor}
    if g["nvswitch"]:
        stack["fabricmanager"] = driver
    stack["cuda"] = cuda_full
    cudnn = _pick_cudnn(cuda_full, g)
    if cudnn:
        stack["cudnn"] = cudnn
    nccl = _pick_nccl(cuda_full, g)
    if nccl:
        stack["nccl"] = nccl
    stack["torch"] = f"{torch_full}+{variant}" if torch and "+" in str(torch) else torch_full
    denied = _active_denylist()
    for comp in ("container_toolkit", "dcgm"):
        ok = [v for v in d[comp]["releases"]
              if not any(e["component"] == comp and (kiln_version_cmp(v, e["version"]) == 0 if e.get("version")
                                                     else _in_range(v, e["range"])) for e in denied)]
        if comp == "dcgm" and _dcgm_cuda_major({"driver": driver}, g) == "11":
            ok = [v for v in ok if _major(v) == "3"]
        stack[comp] = max(ok, key=kiln_version_key)
    rec = d["recommend"]
    stack["ofed"] = dict(rec["ofed"])
    stack["slurm"] = {k: rec["slurm"] for k in NESTED_KEYS["slurm"]}
    stack["kubernetes"] = {k: rec["kubernetes"] for k in NESTED_KEYS["kubernetes"]}
    return stack


# ---------------------------------------------------------------------------
# resolution, packages and repositories


def kiln_gpu(gpu: str) -> dict[str, Any]:
    """Describe a GPU (model, variant, PCI id, arch, compute capability, NVSwitch, TDP)."""
    info = _gpu_entry(gpu)
    if not info:
        raise AnsibleFilterError(f"kiln_gpu: unknown GPU {show(gpu)}; known models: {', '.join(compat_data()['gpus'])}")
    return info


def kiln_gpu_pci_models(models: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """PCI id -> ``{model, architecture, nvswitch, family}`` for every known GPU variant.

    The input restricts the result to the listed models/variants (``[]`` or ``None``:
    all). Feeds the ``pci_models`` option of library/kiln_gpu_facts.
    """
    if isinstance(models, (str, bytes)):
        models = [models]
    wanted = {str(m) for m in (models or [])}
    out: dict[str, dict[str, Any]] = {}
    for family, entry in compat_data()["gpus"].items():
        for pci_id, var in (entry.get("variants") or {}).items():
            if wanted and family not in wanted and var["name"] not in wanted:
                continue
            out[pci_id] = {"model": var["name"], "architecture": entry["arch"], "nvswitch": bool(var.get("nvswitch")),
                           "family": family}
    return out


def kiln_resolve_stack(stack: Mapping[str, Any]) -> dict[str, Any]:
    """Expand a stack into the exact versions kiln installs.

    Adds ``cuda_full`` (newest known patch of the requested minor), ``driver_branch``,
    ``driver_flavor`` (explicit or the default for the GPU/branch), ``nccl_build``,
    ``torch_variant``, ``dcgm_cuda_major``, ``pkg_mgr`` and ``cuda_repo`` to a copy of the stack.
    Versions given with fewer components are replaced by the unique release they
    name (``cudnn: 9.5.1`` -> ``9.5.1.17``); ``resolved_from`` maps each such key
    to what was written. A malformed or ambiguous stack raises AnsibleFilterError.
    """
    s, asked, problems = _canonical(_normalise_stack(stack))
    if problems:
        raise AnsibleFilterError("kiln: " + " | ".join(f"{p['message']} Fix: {p['fix']}" for p in problems))
    d = compat_data()
    out: dict[str, Any] = copy.deepcopy(s)
    if asked:
        out["resolved_from"] = dict(asked)
    g = _gpu_entry(s["gpu"]) if "gpu" in s else None
    if s.get("os"):
        osx = _os_entry(s["os"])
        if osx:
            out["os"] = osx[0]
            out["pkg_mgr"] = osx[1]["pkg_mgr"]
            out["cuda_repo"] = osx[1]["cuda_repo"]
    if s.get("cuda"):
        rel = _cuda_release(s["cuda"])
        if rel:
            out["cuda_full"] = rel[0]
    br = _driver_branch(s["driver"]) if s.get("driver") else None
    if br:
        out["driver_branch"] = br[0]
        if "driver_flavor" not in s:
            if (g and g["open_modules"] == "unsupported") or int(br[0]) < int(d["drivers"]["flavors"]["both_from_branch"]):
                out["driver_flavor"] = "proprietary"
            elif (g and g["open_modules"] == "required") or int(br[0]) >= int(d["drivers"]["flavors"]["open_default_from_branch"]):
                out["driver_flavor"] = "open"
            else:
                out["driver_flavor"] = "proprietary"
    if s.get("nccl"):
        ver, build = _parse_nccl(s["nccl"])
        out["nccl_version"] = ver
        if not build and out.get("cuda_full"):
            picked = [b for b in (d["nccl"]["releases"].get(ver) or {}).get("builds", [])
                      if _major(b) == _major(out["cuda_full"]) and _ge(_mm(out["cuda_full"]), b)]
            build = max(picked, key=kiln_version_key) if picked else None
        if build:
            out["nccl_build"] = build
    if s.get("torch"):
        key, full, pinned = _parse_torch(s["torch"])
        rel = d["torch"]["releases"].get(key) if key else None
        out["torch_version"] = full
        if rel:
            variant = pinned
            if not variant and out.get("cuda_full"):
                c = out["cuda_full"]
                fits = [v for v, vc in rel["variants"].items() if _major(vc) == _major(c) and _ge(_mm(c), vc)]
                variant = max(fits, key=lambda v: kiln_version_key(rel["variants"][v])) if fits else None
            if not variant:
                variant = max(rel["variants"], key=lambda v: kiln_version_key(rel["variants"][v]))
            out["torch_variant"] = variant
    if s.get("dcgm"):
        out["dcgm_cuda_major"] = _dcgm_cuda_major(s, g)
    if g:
        out["gpu_info"] = g
    return out


def _pkg_mgr_and_el(target: str | None, stack: Mapping[str, Any]) -> tuple[str, str | None]:
    if target in ("apt", "dnf", "yum"):
        mgr = "dnf" if target == "yum" else target
        osx = _os_entry(stack["os"]) if stack.get("os") else None
        return mgr, (osx[1].get("el") if osx else None)
    os_id = target or stack.get("os")
    if not os_id:
        raise AnsibleFilterError("kiln: need a package manager (apt|dnf) or an OS (kiln_stack.os) to render package strings")
    osx = _os_entry(os_id)
    if not osx:
        raise AnsibleFilterError(f"kiln: unknown OS {show(os_id)} for package rendering")
    return osx[1]["pkg_mgr"], osx[1].get("el")


def _render(mgr: str, template_key: str, fields: dict[str, Any], os_key: str | None = None) -> list[str]:
    tpl = compat_data()["packages"][mgr].get(template_key)
    if tpl is None:
        return []
    names = [n.format(**fields) for n in (tpl.get("names_by_os") or {}).get(os_key, tpl["names"])]
    if tpl.get("version") is None or ("{build}" in tpl["version"] and not fields.get("build")):
        return names
    ver = tpl["version"].format(**fields)
    sep = "=" if mgr == "apt" else "-"
    return [f"{n}{sep}{ver}" for n in names]


def kiln_pkg(stack: Mapping[str, Any], component: str, pkg_mgr: str | None = None) -> list[str]:
    """Exact pinned package strings for one component of a stack.

    ``pkg_mgr`` is ``apt``, ``dnf`` or an OS id (default: ``stack.os``). apt strings are
    ``name=version``; dnf strings are ``name-version-release``. Returns ``[]`` when the
    component is absent from the stack (or, for ``ofed``, when it is inbox/mlnx, which
    are not installed from a package repository).
    """
    if component not in PACKAGE_COMPONENTS:
        raise AnsibleFilterError(f"kiln_pkg: unknown component {show(component)}; use one of {list(PACKAGE_COMPONENTS)}")
    r = kiln_resolve_stack(stack)
    mgr, el = _pkg_mgr_and_el(pkg_mgr, r)
    fields: dict[str, Any] = {"el": el or ""}
    if component in DISTRO_COMPONENTS:
        os_id = pkg_mgr if pkg_mgr not in (None, "apt", "dnf", "yum") else r.get("os")
        osx = _os_entry(os_id) if os_id else None
        os_key = osx[0] if osx else None
        build = kiln_distro_build(stack, component, os_key)["build"]
        if component in ("slurmctld", "slurmd") and not (r.get("slurm") or {}).get(component):
            return []
        fields.update(build=build)
        return _render(mgr, component, fields, os_key)
    if component == "dcgm_exporter":
        if not r.get("dcgm_exporter"):
            return []
        fields.update(version=r["dcgm_exporter"].lstrip("v"))
        return _render(mgr, "dcgm_exporter", fields)
    if component == "driver":
        if not r.get("driver"):
            return []
        if "driver_branch" not in r:
            raise AnsibleFilterError(f"kiln_pkg: driver {r['driver']} is not a release of a known branch")
        if mgr == "dnf" and not el:
            raise AnsibleFilterError("kiln_pkg: dnf driver packages need kiln_stack.os (for the .elN release)")
        fields.update(branch=r["driver_branch"], version=r["driver"])
        return _render(mgr, f"driver_{r['driver_flavor']}", fields)
    if component == "driver_companions":
        if not r.get("driver") or "driver_branch" not in r:
            return []
        fields.update(branch=r["driver_branch"], version=r["driver"])
        return _render(mgr, f"driver_{r['driver_flavor']}_companions", fields)
    if component == "fabricmanager":
        if not r.get("fabricmanager"):
            return []
        br = _driver_branch(r["fabricmanager"])
        if not br:
            raise AnsibleFilterError(f"kiln_pkg: fabricmanager {r['fabricmanager']} is not a driver version of a known branch")
        fields.update(branch=br[0], version=r["fabricmanager"])
        return _render(mgr, "fabricmanager", fields)
    if component == "cuda":
        if not r.get("cuda"):
            return []
        if "cuda_full" not in r:
            raise AnsibleFilterError(f"kiln_pkg: CUDA {r['cuda']} is not in data/compat.yml")
        c = r["cuda_full"]
        fields.update(cuda_full=c, cuda_dash=_mm(c).replace(".", "-"), cuda_major=_major(c))
        return _render(mgr, "cuda", fields)
    if component == "cudnn":
        if not r.get("cudnn"):
            return []
        ver = r["cudnn"]
        rel = compat_data()["cudnn"]["releases"].get(ver)
        if not rel:
            raise AnsibleFilterError(f"kiln_pkg: cuDNN {ver} is not in data/compat.yml")
        if "cuda_full" not in r:
            raise AnsibleFilterError("kiln_pkg: cuDNN packages are keyed by CUDA major: kiln_stack.cuda is required")
        major = _major(r["cuda_full"])
        if _major(ver) == "8":
            build = (rel.get("build_suffix") or {}).get(major)
            if not build:
                raise AnsibleFilterError(f"kiln_pkg: cuDNN {ver} has no CUDA {major} build")
            fields.update(version=ver, build=build)
            return _render(mgr, "cudnn8", fields)
        fields.update(version=ver, cuda_major=major)
        return _render(mgr, "cudnn9", fields)
    if component == "nccl":
        if not r.get("nccl"):
            return []
        if "nccl_build" not in r:
            raise AnsibleFilterError(
                f"kiln_pkg: no known build of NCCL {r['nccl']} for CUDA {r.get('cuda_full', '(absent)')}; "
                f"write kiln_stack.nccl as <version>-1+cuda<X.Y> or set kiln_stack.cuda")
        fields.update(version=r["nccl_version"], build=r["nccl_build"])
        return _render(mgr, "nccl", fields)
    if component == "container_toolkit":
        if not r.get("container_toolkit"):
            return []
        fields.update(version=r["container_toolkit"])
        return _render(mgr, "container_toolkit", fields)
    if component == "dcgm":
        if not r.get("dcgm"):
            return []
        ver = r["dcgm"]
        if _major(ver) == "3":
            fields.update(version=ver)
            return _render(mgr, "dcgm3", fields)
        if not r.get("dcgm_cuda_major"):
            raise AnsibleFilterError("kiln_pkg: DCGM 4 packages are per CUDA major: set kiln_stack.driver or kiln_stack.cuda")
        fields.update(version=ver, dcgm_cuda=r["dcgm_cuda_major"])
        return _render(mgr, "dcgm4", fields)
    # ofed
    ofed = r.get("ofed") or {}
    if ofed.get("kind") != "doca":
        return []
    return _render(mgr, "ofed_doca", fields)


def kiln_distro_build(stack: Mapping[str, Any], component: str, os_id: str | None = None) -> dict[str, Any]:
    """The exact package build of a distribution component: ``{build, from, recorded}``.

    ``build`` comes from ``kiln_stack.builds`` (``slurmctld``/``slurmd`` before ``slurm``), else from
    ``data/compat.yml`` ``distro_builds[os]`` (Slurm: the entry for the stack's Slurm major), else it is
    ``None``: the package is installed at the repository's candidate and held there. A Slurm build whose
    version is not of the stack's Slurm major is an AnsibleFilterError (the two cannot both be meant).
    """
    if component not in _BUILD_KEY:
        raise AnsibleFilterError(f"kiln_distro_build: unknown component {show(component)}; use one of {list(_BUILD_KEY)}")
    s = _normalise_stack(stack)
    osx = _os_entry(os_id or s.get("os") or "")
    os_key = osx[0] if osx else None
    builds = s.get("builds") or {}
    key = _BUILD_KEY[component]
    data = (compat_data().get("distro_builds") or {}).get(os_key or "", {})
    if key == "slurm":
        want = (s.get("slurm") or {}).get(component) if component in ("slurmctld", "slurmd") else None
        for k in (component, "slurm"):
            if builds.get(k):
                if want and not (builds[k] == want or builds[k].split(":")[-1].startswith(_slurm_major(want) + ".")):
                    raise AnsibleFilterError(
                        f"kiln: kiln_stack.builds.{k} is {show(builds[k])}, not a build of Slurm {want} "
                        f"(kiln_stack.slurm.{component}). Fix: Set kiln_stack.builds.{k} to the {_slurm_major(want)} build your "
                        f"repository carries, or kiln_stack.slurm.{component} to the release of that build.")
                return {"build": builds[k], "from": f"kiln_stack.builds.{k}", "recorded": True}
        entry = (data.get("slurm") or {}).get(_slurm_major(want)) if want else None
        if entry:
            return {"build": entry["build"], "from": f"data/compat.yml distro_builds.{os_key}.slurm",
                    "recorded": True, "confidence": entry.get("confidence")}
        return {"build": None, "from": None, "recorded": False,
                "carried": sorted((data.get("slurm") or {}))}
    if builds.get(key):
        return {"build": builds[key], "from": f"kiln_stack.builds.{key}", "recorded": True}
    entry = data.get(key)
    if entry:
        return {"build": entry["build"], "from": f"data/compat.yml distro_builds.{os_key}.{key}", "recorded": True,
                "confidence": entry.get("confidence")}
    return {"build": None, "from": None, "recorded": False}


def kiln_tool(name: str, version: str | None = None) -> dict[str, str]:
    """A source release kiln builds (data/compat.yml ``tools``): ``{version, url}``; ``version`` overrides the data's."""
    tools = compat_data().get("tools") or {}
    if name not in tools:
        raise AnsibleFilterError(f"kiln_tool: unknown tool {show(name)}; use one of {sorted(tools)}")
    ver = str(version or tools[name]["version"])
    if not re.fullmatch(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}", ver, re.ASCII):
        raise AnsibleFilterError(f"kiln_tool: {name} version {show(ver)} is not a release number such as {tools[name]['version']}")
    return {"version": ver, "url": tools[name]["url"].format(version=ver)}


def kiln_packages(stack: Mapping[str, Any], os: str | None = None) -> dict[str, list[str]]:
    """All pinned package strings of a stack, keyed by component (absent components omitted).

    NVIDIA components appear when the stack names them; Slurm, munge and PMIx when it names Slurm;
    Open MPI, mpi4py and the node exporter (every kiln node runs them) whenever an OS is known.
    A distribution package without a recorded build is a bare name (see kiln_distro_build).
    """
    out: dict[str, list[str]] = {}
    s = _normalise_stack(stack)
    for comp in PACKAGE_COMPONENTS:
        if comp in DISTRO_COMPONENTS:
            if not (os or s.get("os")) or (comp in ("munge", "pmix") and not s.get("slurm")):
                continue
        pkgs = kiln_pkg(stack, comp, os)
        if pkgs:
            out[comp] = pkgs
    return out


def _base(url: str | None, default: str) -> str:
    return (url or default).rstrip("/")


def kiln_cuda_repo(os: str, base_url: str | None = None, arch: str = "x86_64") -> dict[str, Any]:
    """NVIDIA CUDA repository for an OS: URL, key, keyring and (apt) source line or (dnf) .repo URL.

    ``base_url`` replaces ``https://developer.download.nvidia.com/compute/cuda/repos`` for mirrors.
    """
    osx = _os_entry(os)
    if not osx:
        raise AnsibleFilterError(f"kiln_cuda_repo: unknown OS {show(os)}")
    repo = compat_data()["repos"]["cuda"]
    if arch not in repo["arch_dirs"]:
        raise AnsibleFilterError(f"kiln_cuda_repo: unknown arch {show(arch)}; use one of {list(repo['arch_dirs'])}")
    key, entry = osx
    distro = entry["cuda_repo"]
    url = f"{_base(base_url, repo['base_url'])}/{distro}/{repo['arch_dirs'][arch]}/"
    out: dict[str, Any] = {"os": key, "distro": distro, "arch": arch, "pkg_mgr": entry["pkg_mgr"], "url": url}
    if entry["pkg_mgr"] == "apt":
        out.update(
            key_url=url + repo["deb_key_file"],
            keyring_path=repo["deb_keyring_path"],
            keyring_package=repo["deb_keyring_package"],
            keyring_package_url=url + repo["deb_keyring_package"],
            apt_line=f"deb [signed-by={repo['deb_keyring_path']}] {url} /",
        )
    else:
        out.update(
            key_url=url + repo["rpm_key_file"],
            repo_file_url=url + repo["rpm_repo_file"].format(distro=distro),
        )
    return out


def kiln_container_toolkit_repo(os: str, base_url: str | None = None, arch: str = "x86_64") -> dict[str, Any]:
    """NVIDIA Container Toolkit repository (stable channel) for an OS; ``base_url`` for mirrors."""
    osx = _os_entry(os)
    if not osx:
        raise AnsibleFilterError(f"kiln_container_toolkit_repo: unknown OS {show(os)}")
    repo = compat_data()["repos"]["container_toolkit"]
    if arch not in repo["deb_arch_dirs"]:
        raise AnsibleFilterError(f"kiln_container_toolkit_repo: unknown arch {show(arch)}; use one of {list(repo['deb_arch_dirs'])}")
    base = _base(base_url, repo["base_url"])
    key, entry = osx
    out: dict[str, Any] = {"os": key, "arch": arch, "pkg_mgr": entry["pkg_mgr"], "key_url": f"{base}/{repo['gpgkey']}"}
    if entry["pkg_mgr"] == "apt":
        url = f"{base}/stable/deb/{repo['deb_arch_dirs'][arch]}"
        out.update(url=url, keyring_path=repo["deb_keyring_path"],
                   apt_line=f"deb [signed-by={repo['deb_keyring_path']}] {url} /")
    else:
        out.update(url=f"{base}/stable/rpm/{arch}", repo_file_url=f"{base}/stable/rpm/nvidia-container-toolkit.repo")
    return out


REPO_NAMES = ("cuda", "container_toolkit", "slurm", "torch")
_REPO_KEYS = ("url", "key_url", "fingerprint")


def _check_repos(repos: Any) -> dict[str, dict[str, str]]:
    """kiln_repos as plain strings; AnsibleFilterError naming the key for anything else."""
    if repos is None or repos == "":
        return {}
    where = "kiln_repos"
    if schema.measure(repos).over():
        raise AnsibleFilterError(f"kiln: {where} is too large to be a repository list.")
    if not isinstance(repos, Mapping):
        raise AnsibleFilterError(f"kiln: {where} is {schema.describe(repos)}; it must be a mapping such as "
                                 "{cuda: {url: ..., key_url: ..., fingerprint: ...}}. Fix: see docs/compat.md \"Repositories\".")
    out: dict[str, dict[str, str]] = {}
    for name, entry in repos.items():
        if name not in REPO_NAMES:
            raise AnsibleFilterError(f"kiln: {where} has an unknown repository {show(name, 24)}.{schema.suggest(name, REPO_NAMES)} "
                                     f"Fix: use {', '.join(REPO_NAMES)}.")
        if entry is None:
            continue
        if not isinstance(entry, Mapping):
            raise AnsibleFilterError(f"kiln: {where}.{name} is {schema.describe(entry)}; it must be a mapping with "
                                     f"{', '.join(_REPO_KEYS)}.")
        out[name] = {}
        for key, value in entry.items():
            path = f"{where}.{name}.{key}"
            if key not in _REPO_KEYS or (name == "torch" and key != "url"):
                allowed = ("url",) if name == "torch" else _REPO_KEYS
                raise AnsibleFilterError(f"kiln: {where}.{name} has an unknown key {show(key, 24)}."
                                         f"{schema.suggest(key, allowed)} Fix: use {', '.join(allowed)}.")
            if value is None or value == "":
                continue
            if not isinstance(value, str) or len(value) > 2048 or (
                    key != "fingerprint" and any(c.isspace() for c in value.strip())):
                raise AnsibleFilterError(f"kiln: {path} is {schema.describe(value)}; it must be a URL or fingerprint string.")
            value = value.strip()
            if key == "fingerprint":
                value = value.replace(" ", "").upper()
                if not re.fullmatch(r"[0-9A-F]{40}", value, re.ASCII):
                    raise AnsibleFilterError(f"kiln: {path} is {show(value)}: not a full 40-hex-digit key fingerprint "
                                             f"(short key ids can be forged). Fix: gpg --show-keys --with-fingerprint <key file>.")
            elif not re.match(r"(?:https?|file)://", value, re.ASCII):
                raise AnsibleFilterError(f"kiln: {path} is {show(value)}: not an http(s):// or file:// URL.")
            out[name][key] = value
    return out


def kiln_repos_problems(hostvars: Mapping[str, Any], hosts: Sequence[str], var: str = "kiln_repos") -> list[str]:
    """``kiln_repos`` of each host checked once per distinct value: ``["<hosts>: <problem>"]``, ``[]`` when valid."""
    seen: dict[str, list[str]] = {}
    problems: dict[str, str] = {}
    for host in hosts:
        value = (hostvars.get(host) or {}).get(var)
        try:
            key = json.dumps(_plain(value), sort_keys=True, default=str) if not schema.measure(value).over() else "(too large)"
        except (TypeError, ValueError):
            key = repr(type(value))
        seen.setdefault(key, []).append(str(host))
        if key not in problems:
            try:
                _check_repos(value if key != "(too large)" else [None] * (schema.MAX_NODES + 1))
                problems[key] = ""
            except AnsibleFilterError as exc:
                problems[key] = str(exc).removeprefix("kiln: ")
    return [f"{kiln_hostlist(seen[k])}: {p}" for k, p in problems.items() if p]


def kiln_repo(name: str, os: str | None = None, repos: Any = None, arch: str = "x86_64") -> dict[str, Any]:
    """One repository, resolved for an OS from kiln_repos (the site's mirrors and keys) over data/compat.yml.

    ``cuda`` / ``container_toolkit``: what kiln_cuda_repo / kiln_container_toolkit_repo return, with
    ``key_url`` and ``fingerprint`` (the pin) taken from ``kiln_repos.<name>`` when set, and ``fingerprint_var``
    naming the variable to fix. ``slurm``: ``{}`` unless kiln_repos.slurm.url is set. ``torch``: ``{url}``.
    """
    site = _check_repos(repos).get(name, {})
    if name not in REPO_NAMES:
        raise AnsibleFilterError(f"kiln_repo: unknown repository {show(name)}; use one of {list(REPO_NAMES)}")
    if name == "torch":
        return {"url": site.get("url") or compat_data()["torch"]["index_url"]}
    if name == "slurm":
        if not site.get("url"):
            return {}
        if not site.get("key_url") or not site.get("fingerprint"):
            raise AnsibleFilterError("kiln: kiln_repos.slurm has a url but no key_url and fingerprint. Fix: give the "
                                     "repository's signing key URL and its full fingerprint.")
        return {"name": "slurm", "url": site["url"], "key_url": site["key_url"], "fingerprint": site["fingerprint"],
                "fingerprint_var": "kiln_repos.slurm.fingerprint"}
    if not os:
        raise AnsibleFilterError(f"kiln_repo: the {name} repository needs an OS id (kiln_stack.os)")
    base = kiln_cuda_repo(os, site.get("url"), arch) if name == "cuda" else kiln_container_toolkit_repo(os, site.get("url"), arch)
    base.update(name=name, key_url=site.get("key_url") or base["key_url"],
                fingerprint=site.get("fingerprint") or compat_data()["repos"][name]["key_fingerprint"],
                fingerprint_var=f"kiln_repos.{name}.fingerprint")
    return base


def kiln_torch_index(stack: Mapping[str, Any], base_url: str | None = None) -> dict[str, Any]:
    """pip index URL and requirement for the stack's PyTorch wheel variant (``{}`` without torch)."""
    r = kiln_resolve_stack(stack)
    if not r.get("torch"):
        return {}
    if not r.get("torch_variant"):
        raise AnsibleFilterError(f"kiln_torch_index: PyTorch {r['torch']} is not in data/compat.yml")
    ver = r["torch_version"]
    req = f"torch=={ver}" if ver.count(".") == 2 else f"torch=={ver}.*"
    return {"index_url": f"{_base(base_url, compat_data()['torch']['index_url'])}/{r['torch_variant']}",
            "variant": r["torch_variant"], "requirement": req}


# ---------------------------------------------------------------------------
# inventory-wide evaluation (preflight / plan)


def _plain(value: Any) -> Any:
    """Strip Ansible's tagged/lazy containers and scalars down to plain Python data.

    Only called on values :func:`schema.measure` has bounded, so aliases expand
    to at most MAX_NODES values. Types other than str/bool/int/float/None/list/
    dict are kept as they are, so the schema can say what YAML made of them.
    """
    if isinstance(value, Mapping):
        return {(str(k) if isinstance(k, str) else k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def _detected_gpus(facts: Any) -> list[str]:
    """Distinct GPUs (PCI ids, else names) a host's facts report, in order; [] without facts."""
    if not isinstance(facts, Mapping):
        return []
    candidates: list[Any] = []
    for key in ("kiln_gpu", "kiln_gpus"):
        if facts.get(key):
            candidates.append(facts[key])
    local = facts.get("ansible_local")
    if isinstance(local, Mapping):
        for key in ("kiln_gpu", "kiln"):
            sub = local.get(key)
            if isinstance(sub, Mapping):
                candidates.extend(sub.get(k) for k in ("gpus", "gpu", "model") if sub.get(k))
    found: list[str] = []
    for cand in candidates[:1]:  # the first source that reports anything is the authority
        if isinstance(cand, Mapping) and isinstance(cand.get("gpus"), (list, tuple)):
            cand = cand["gpus"]  # library/kiln_gpu_facts: ansible_facts.kiln_gpu.gpus
        items = cand if isinstance(cand, (list, tuple)) else [cand]
        for item in items[:64]:
            if isinstance(item, Mapping):
                item = item.get("pci_device_id") or item.get("pci_id") or item.get("model") or item.get("name")
            if isinstance(item, str) and item and item not in found:
                found.append(item[:schema.MAX_TEXT])
    return found


def _input(stack_raw: Any, allow_raw: Any, var: str, allow_var: str) -> tuple[Any, Any, bool, list[dict[str, str]]]:
    """Bound, copy and pre-check one host's (kiln_stack, kiln_stack_allow): (stack, allow, templated, problems)."""
    problems: list[dict[str, str]] = []
    sizes = {}
    for name, raw in ((var, stack_raw), (allow_var, allow_raw)):
        sizes[name] = schema.measure(raw)
        if sizes[name].over():
            problems.append(schema.too_large(name, sizes[name]))
    if problems:
        return None, None, False, problems
    stack = _plain(stack_raw) if stack_raw is not None else {}
    allow = _plain(allow_raw) if allow_raw else []
    templated = sizes[var].templated or sizes[allow_var].templated
    problems = schema.check_stack(stack, _schema_extra, var) + schema.check_allow(allow, RULES, allow_var)
    return stack, allow, templated, problems


def kiln_stacks_by_host(hostvars: Mapping[str, Any], hosts: Sequence[str], var: str = "kiln_stack",
                        allow_var: str = "kiln_stack_allow") -> list[dict[str, Any]]:
    """Group hosts by their distinct (stack, allow list, detected GPUs).

    Walks ``hostvars`` once for ``hosts`` and returns ``[{stack, allow, hosts,
    detected_gpus, problems}]`` in order of first appearance; stacks are compared
    by canonical JSON. Each distinct input object is size-checked once before it
    is copied (an alias bomb is refused, not expanded: ``problems``). GPUs reported
    by host facts (``ansible_facts.kiln_gpu`` / ``kiln_gpus`` / ``ansible_local``)
    go to ``detected_gpus``; the first known one becomes ``stack.gpu`` when the
    inventory names none.
    """
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, Iterable):
        raise AnsibleFilterError(f"kiln_stacks_by_host: hosts must be a list of host names, got {show(hosts)}")
    raw_get = getattr(hostvars, "raw_get", None)
    groups: dict[str, dict[str, Any]] = {}
    # id() -> (stack object, allow object, prepared input). Holding the objects keeps
    # their ids stable; hosts sharing a group_vars dict then cost one dict lookup each.
    by_id: dict[tuple[int, int], tuple[Any, Any, tuple[Any, Any, bool, list[dict[str, str]]]]] = {}
    for host in hosts:
        if raw_get is not None:
            hv = raw_get(host)
            if not isinstance(hv, Mapping):
                raise AnsibleFilterError(f"kiln_stacks_by_host: host {show(host)} is not in the inventory")
        else:
            hv = hostvars[host]
        stack_raw = hv.get(var)
        allow_raw = hv.get(allow_var)
        ident = (id(stack_raw), id(allow_raw))
        cached = by_id.get(ident)
        if cached is not None and cached[0] is stack_raw and cached[1] is allow_raw:
            prepared = cached[2]
        else:
            prepared = _input(stack_raw, allow_raw, var, allow_var)
            by_id[ident] = (stack_raw, allow_raw, prepared)
        stack, allow, templated, problems = prepared
        if templated and raw_get is not None:  # render this host's templates, then check what they became
            templated_vars = hostvars[host]
            stack, allow, _t, problems = _input(templated_vars.get(var), templated_vars.get(allow_var), var, allow_var)
        facts = hv.get("ansible_facts") if "ansible_facts" in hv else None
        detected = _detected_gpus(facts) if facts else []
        if problems:
            key = "!" + json.dumps(problems, sort_keys=True)
            item = {"stack": None, "allow": [], "problems": problems}
        else:
            if detected and isinstance(stack, dict) and not stack.get("gpu"):
                known = next((d for d in detected if _gpu_entry(d)), None)
                if known:
                    stack = dict(stack, gpu=known)
            try:
                key = json.dumps([stack, allow, detected], sort_keys=True, default=repr)
            except (TypeError, ValueError):  # keys YAML made non-strings: still one group per distinct input
                key = repr([stack, allow, detected])
            item = {"stack": stack, "allow": allow, "problems": []}
        if key not in groups:
            groups[key] = {**item, "hosts": [], **({"detected_gpus": detected} if detected else {})}
        groups[key]["hosts"].append(str(host))
    return list(groups.values())


def kiln_hostlist(hosts: Sequence[str]) -> str:
    """Compress host names Slurm-style: ``gpu01,gpu02,gpu03,gpu07`` -> ``gpu[01-03,07]``."""
    if isinstance(hosts, (str, bytes)):
        hosts = [hosts]
    # (prefix, suffix) -> digit strings, in order of first appearance
    families: dict[tuple[str, str], list[str]] = {}
    order: list[tuple[str, Any]] = []
    for host in hosts:
        m = re.match(r"^(.*?)(\d+)(\D*)$", str(host))
        if not m:
            order.append(("plain", str(host)))
            continue
        fam = (m.group(1), m.group(3))
        if fam not in families:
            families[fam] = []
            order.append(("family", fam))
        families[fam].append(m.group(2))
    parts: list[str] = []
    for kind, item in order:
        if kind == "plain":
            parts.append(item)
            continue
        prefix, suffix = item
        buckets: dict[int, set[int]] = {}
        padded = {len(d) for d in families[item] if d.startswith("0") and len(d) > 1}
        for digits in families[item]:
            is_padded = digits.startswith("0") and len(digits) > 1
            if is_padded:
                width = len(digits)
            elif len(padded) == 1 and len(digits) >= next(iter(padded)):
                width = next(iter(padded))  # 10000 prints the same with or without :05d
            else:
                width = 0
            buckets.setdefault(width, set()).add(int(digits))
        for width, numbers in buckets.items():
            nums = sorted(numbers)
            fmt = f"{{:0{width}d}}" if width else "{}"
            ranges: list[str] = []
            start = prev = nums[0]
            for n in nums[1:] + [None]:
                if n is not None and n == prev + 1:
                    prev = n
                    continue
                ranges.append(fmt.format(start) if start == prev else f"{fmt.format(start)}-{fmt.format(prev)}")
                if n is not None:
                    start = prev = n
            inner = ranges[0] if len(nums) == 1 else f"[{','.join(ranges)}]"
            parts.append(f"{prefix}{inner}{suffix}")
    return ",".join(parts)


def kiln_stack_report(stacks: Sequence[Mapping[str, Any]], today: str | None = None) -> dict[str, Any]:
    """Evaluate each distinct stack once (output of kiln_stacks_by_host).

    Returns ``{stacks: [{stack, allow, hosts, hostlist, violations}], errors: [str],
    warnings: [str], error_count, warning_count, evaluations}``; ``errors`` and
    ``warnings`` are one line per violation naming the hosts it applies to.
    """
    out: list[dict[str, Any]] = []
    errors: list[str] = []
    warnings: list[str] = []
    for item in stacks:
        hosts = list(item.get("hosts") or [])
        hostlist = kiln_hostlist(hosts)
        try:
            if item.get("problems"):
                viols = _invalid(item["problems"])
            else:
                viols = kiln_stack_violations(item.get("stack"), item.get("allow"), today, item.get("detected_gpus"))
        except AnsibleFilterError as exc:
            viols = _invalid([{"key": "kiln_stack", "message": f"{exc}".replace("kiln: ", "")[:2000],
                               "fix": "Fix kiln_stack / kiln_stack_allow for these hosts (see docs/compat.md)."}])
        except Exception as exc:  # noqa: BLE001 - fail closed with a message, never a traceback
            viols = _invalid([{"key": "kiln_stack",
                               "message": f"kiln could not evaluate this stack ({type(exc).__name__}: {show(str(exc), 200)}).",
                               "fix": "This is a kiln bug: report it with the stack; preflight refuses the stack meanwhile."}])
        where = f"{hostlist} ({len(hosts)} host{'s' if len(hosts) != 1 else ''})"
        for v in viols:
            line = f"[{v['rule']}] {where}: {v['message']} Fix: {v['fix']}"
            if v.get("fix_stack"):
                line += f" (kiln_stack: {json.dumps(v['fix_stack'], sort_keys=True)})"
            if v.get("allowed"):
                line += f" [allowed: {v['allow_reason']}]"
            (errors if v["severity"] == ERROR else warnings).append(line)
        out.append({"stack": item.get("stack"), "allow": item.get("allow") or [], "hosts": hosts,
                    "hostlist": hostlist, "violations": viols, "problems": item.get("problems") or [],
                    **({"detected_gpus": item["detected_gpus"]} if item.get("detected_gpus") else {})})
    return {"stacks": out, "errors": errors, "warnings": warnings, "error_count": len(errors),
            "warning_count": len(warnings), "evaluations": len(out)}


def kiln_plan(stacks: Sequence[Mapping[str, Any]], groups: Mapping[str, Sequence[str]],
              repos: Any = None, arch: str = "x86_64") -> dict[str, Any]:
    """Bill of materials per inventory group from kiln_stacks_by_host output.

    Each group lists its distinct stacks with the hosts they cover, the resolved
    versions, the exact package strings for the stack's OS, and the repositories.
    Package rendering problems are reported per stack in ``errors`` (never raised).
    """
    site = _check_repos(repos)
    cuda_base_url = (site.get("cuda") or {}).get("url")
    ctk_base_url = (site.get("container_toolkit") or {}).get("url")
    torch_base_url = (site.get("torch") or {}).get("url")
    rendered: list[dict[str, Any]] = []
    host_to_stack: dict[str, int] = {}
    for idx, item in enumerate(stacks):
        stack = item.get("stack") or {}
        entry: dict[str, Any] = {"stack": stack, "errors": []}
        problems = item.get("problems") or stack_problems(item.get("stack"))
        if problems:  # never render packages from (or echo) a malformed stack
            entry = {"stack": {}, "errors": [f"{p['message']} Fix: {p['fix']}" for p in problems]}
            rendered.append(entry)
            for h in item.get("hosts") or []:
                host_to_stack[str(h)] = idx
            continue
        try:
            resolved = kiln_resolve_stack(stack)
            entry["resolved"] = {k: v for k, v in resolved.items() if k != "gpu_info"}
            if resolved.get("gpu_info"):
                gi = resolved["gpu_info"]
                entry["gpu"] = {k: gi.get(k) for k in ("model", "variant", "arch", "cc", "nvswitch", "tdp_w")}
            if stack.get("os") and resolved.get("pkg_mgr"):
                pk: dict[str, list[str]] = {}
                for comp in PACKAGE_COMPONENTS:
                    if comp in DISTRO_COMPONENTS and comp in ("munge", "pmix") and not stack.get("slurm"):
                        continue
                    try:
                        pkgs = kiln_pkg(stack, comp)
                    except AnsibleFilterError as exc:
                        entry["errors"].append(f"{comp}: {exc}")
                        continue
                    if pkgs:
                        pk[comp] = pkgs
                entry["packages"] = pk
                # distribution packages without a recorded build: installed at the candidate, then held
                os_key = (_os_entry(stack["os"]) or ("",))[0]
                entry["candidates"] = [c for c in pk if c in DISTRO_COMPONENTS
                                       and not kiln_distro_build(stack, c, os_key)["recorded"]]
                entry["repos"] = {"cuda": kiln_repo("cuda", stack["os"], site, arch)}
                if stack.get("container_toolkit"):
                    entry["repos"]["container_toolkit"] = kiln_repo("container_toolkit", stack["os"], site, arch)
                if stack.get("slurm") and site.get("slurm", {}).get("url"):
                    entry["repos"]["slurm"] = kiln_repo("slurm", stack["os"], site, arch)
            elif stack:
                entry["errors"].append("no (known) kiln_stack.os: package strings cannot be rendered")
            if stack.get("torch"):
                try:
                    entry["pip"] = kiln_torch_index(stack, torch_base_url)
                except AnsibleFilterError as exc:
                    entry["errors"].append(f"torch: {exc}")
        except AnsibleFilterError as exc:
            entry["errors"].append(str(exc))
        rendered.append(entry)
        for h in item.get("hosts") or []:
            host_to_stack[str(h)] = idx
    plan_groups: dict[str, Any] = {}
    for group in sorted(groups):
        if group in ("all", "ungrouped"):
            continue
        members = [str(h) for h in groups[group]]
        per: dict[int, list[str]] = {}
        for h in members:
            if h in host_to_stack:
                per.setdefault(host_to_stack[h], []).append(h)
        if not per:
            continue
        plan_groups[group] = {
            "hosts": len(members),
            "stacks": [{"hosts": kiln_hostlist(hs), "host_count": len(hs), **rendered[i]} for i, hs in per.items()],
        }
    return {"groups": plan_groups, "distinct_stacks": len(rendered)}


def kiln_plan_text(plan: Mapping[str, Any]) -> list[str]:
    """Human-readable lines for a kiln_plan result (one block per group and stack)."""
    lines: list[str] = []
    order = ("gpu", "os", "kernel", "driver", "driver_flavor", "fabricmanager", "cuda", "cudnn", "nccl", "torch",
             "container_toolkit", "dcgm", "ofed", "slurm", "kubernetes")
    for group, info in (plan.get("groups") or {}).items():
        lines.append(f"== group {group} ({info['hosts']} hosts) ==")
        for st in info["stacks"]:
            lines.append(f"  hosts: {st['hosts']} ({st['host_count']})")
            stack = st.get("stack") or {}
            res = st.get("resolved") or {}
            for key in order:
                if key not in stack:
                    continue
                val = stack[key]
                if isinstance(val, Mapping):
                    val = " ".join(f"{k}={v}" for k, v in val.items())
                extra = ""
                if key == "cuda" and res.get("cuda_full") and res["cuda_full"] != str(stack[key]):
                    extra = f" -> {res['cuda_full']}"
                elif key in (res.get("resolved_from") or {}):
                    extra = f" -> {res[key]}"
                if key == "torch" and res.get("torch_variant"):
                    extra = f" ({res['torch_variant']})"
                if key == "gpu" and st.get("gpu"):
                    g = st["gpu"]
                    extra = f" ({g['arch']}, cc {g['cc']}{', NVSwitch' if g['nvswitch'] else ''}" \
                            f"{', ' + str(g['tdp_w']) + ' W' if g.get('tdp_w') else ''})"
                lines.append(f"    {key:<19} {val}{extra}")
            for comp, pkgs in (st.get("packages") or {}).items():
                note = "  (no recorded build: the repository's candidate, then held)" \
                    if comp in (st.get("candidates") or []) else ""
                lines.append(f"    pkg {comp:<15} {' '.join(pkgs)}{note}")
            for name, repo in (st.get("repos") or {}).items():
                lines.append(f"    repo {name:<14} {repo['url']}")
            if st.get("pip"):
                lines.append(f"    pip {'torch':<15} {st['pip']['requirement']} --index-url {st['pip']['index_url']}")
            for err in st.get("errors") or []:
                lines.append(f"    ! {err}")
    return lines


def kiln_missing_python_libs(libs: Sequence[str]) -> list[str]:
    """Names from ``libs`` that the controller's Python cannot import."""
    if isinstance(libs, (str, bytes)):
        libs = [libs]
    return [str(lib) for lib in libs if importlib.util.find_spec(str(lib)) is None]


class FilterModule:
    """kiln compatibility filters (documented in filter_plugins/<name>.yml)."""

    def filters(self) -> dict[str, Any]:
        return {
            "kiln_stack_violations": kiln_stack_violations,
            "kiln_recommend_stack": kiln_recommend_stack,
            "kiln_resolve_stack": kiln_resolve_stack,
            "kiln_gpu": kiln_gpu,
            "kiln_gpu_pci_models": kiln_gpu_pci_models,
            "kiln_version_cmp": kiln_version_cmp,
            "kiln_version_compare": kiln_version_compare,
            "kiln_version_sort": kiln_version_sort,
            "kiln_version_key": kiln_version_key,
            "kiln_pkg": kiln_pkg,
            "kiln_packages": kiln_packages,
            "kiln_distro_build": kiln_distro_build,
            "kiln_tool": kiln_tool,
            "kiln_repo": kiln_repo,
            "kiln_repos_problems": kiln_repos_problems,
            "kiln_cuda_repo": kiln_cuda_repo,
            "kiln_container_toolkit_repo": kiln_container_toolkit_repo,
            "kiln_torch_index": kiln_torch_index,
            "kiln_stacks_by_host": kiln_stacks_by_host,
            "kiln_stack_report": kiln_stack_report,
            "kiln_hostlist": kiln_hostlist,
            "kiln_plan": kiln_plan,
            "kiln_plan_text": kiln_plan_text,
            "kiln_missing_python_libs": kiln_missing_python_libs,
        }
