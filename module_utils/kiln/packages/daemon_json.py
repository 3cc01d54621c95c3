# -*- coding: utf-8 -*-
"""Docker's daemon.json merged so that the operator wins (pure logic and reads; the write is library/kiln_daemon_json.py).

Four layers, lowest first:

1. **the file** as it is on the host: every key in it is the operator's (whoever wrote it: a person,
   an earlier kiln run, nvidia-ctk);
2. **defaults**: kiln's recommendations (log rotation, live-restore, memlock for RDMA, ...), by
   top-level key. A default is added only where the file lacks the key; a file key that differs
   from it is left alone and reported (``left_alone``). kiln's ``log-opts`` rotation is added only
   when the resulting ``log-driver`` takes it (journald refuses ``max-size``);
3. **explicit**: what the inventory set on purpose. It goes over the file: a mapping is merged key
   by key (an operator's other ``runtimes``, ``log-opts`` labels, ulimits stay), a list or a scalar
   replaces the file's, a key set to None is removed (at any depth). ``exec-opts`` is a list of
   ``name=value`` options: an explicit option replaces the file's option of that name only;
4. **owned**: what kiln must set for the stack to work (``features.cdi`` on an engine that needs
   the opt-in), merged like the explicit layer, last.

The result is compared with the file's parsed content, type-strictly (``true`` is not ``1``), so
key order, indentation and whitespace never count as a change. Standard library only; importable
as ``kiln.packages.daemon_json`` and as ``ansible.module_utils.kiln.packages.daemon_json``.
"""

from __future__ import annotations

import copy
import json
import os
import stat
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

# Top-level keys whose value is a list of "name=value" options, merged by name.
OPTION_LISTS = frozenset({"exec-opts"})
# Log drivers that take kiln's rotation options (max-size, max-file); journald, syslog, ... refuse them.
ROTATING_LOG_DRIVERS = ("json-file", "local")
MAX_BYTES = 1 << 20


class DaemonJsonError(Exception):
    """A daemon.json kiln will not touch: the message names the host, the path and the fix."""


@dataclass
class Merge:
    """What merging the layers into the file gives, and what it did."""

    content: Dict[str, Any]
    changed: bool
    set_keys: List[str] = field(default_factory=list)     # explicit/owned keys whose value kiln changed
    added: List[str] = field(default_factory=list)        # defaults added: the file lacked them
    left_alone: List[str] = field(default_factory=list)   # the file's value kept over kiln's default
    removed: List[str] = field(default_factory=list)      # keys an explicit None removed


def canonical(value: Any) -> str:
    """One string per JSON value: sorted keys, no whitespace; ``true`` and ``1`` differ."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def same(left: Any, right: Any) -> bool:
    return canonical(left) == canonical(right)


def render(content: Mapping[str, Any]) -> str:
    """The file's text in nvidia-ctk's layout (json.MarshalIndent: 4 spaces, sorted keys), newline-terminated."""
    return json.dumps(content, indent=4, sort_keys=True, ensure_ascii=False) + "\n"


def _no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(text: str, path: str, host: str = "this host") -> Dict[str, Any]:
    """The file's content as a dict ({} for an empty file); DaemonJsonError for anything else."""
    if not text.strip():
        return {}
    fix = "fix or remove it (dockerd refuses such a file too), then re-run"
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except ValueError as exc:
        raise DaemonJsonError(f"{path} on {host} is not valid JSON ({exc}); kiln merges its settings into that file "
                              f"and will not overwrite what it cannot read: {fix}.") from None
    if not isinstance(data, dict):
        raise DaemonJsonError(f"{path} on {host} holds a JSON {type(data).__name__}, not an object; {fix}.")
    return data


@dataclass
class Target:
    """Where daemon.json really is: ``path`` itself, or the file a symlink at ``path`` points to."""

    path: str
    real: str
    exists: bool
    via_link: bool


def resolve(path: str, host: str = "this host") -> Target:
    """Follow a symlink to the file it names, never replacing the link; refuse what cannot be written safely.

    A symlink (a chain of them, or a linked directory above the file) is followed to its target, which
    must be an existing regular file: a dangling link (an unmounted file system, a typo) or a loop is
    refused rather than written through, and so is a target that is a directory or a device. A path
    that does not exist (and is no link) is created when written (check mode: would be, even before
    its directory exists).
    """
    if not os.path.isabs(path):
        raise DaemonJsonError(f"daemon.json path {path!r} on {host} is not absolute.")
    path = os.path.normpath(path)
    real = os.path.realpath(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise DaemonJsonError(
                f"{path} on {host} is a symlink to {os.readlink(path)}, which does not exist; kiln follows the link "
                f"but never creates its target nor replaces the link. Mount or create {real}, or replace the link "
                f"with a file, then re-run.") from None
        return Target(path=path, real=real, exists=False, via_link=real != path)
    except OSError as exc:  # ELOOP (a link loop), EACCES, ENOTDIR
        raise DaemonJsonError(f"{path} on {host} cannot be resolved ({exc.strerror}): fix the link, then re-run.") from None
    if not stat.S_ISREG(info.st_mode):
        where = f"resolves to {real}, which " if real != path else ""
        raise DaemonJsonError(f"{path} on {host} {where}is not a regular file: move it away or point the link at a "
                              f"file, then re-run.")
    return Target(path=path, real=real, exists=True, via_link=real != path)


def read(target: Target, host: str = "this host") -> Tuple[Optional[str], Dict[str, Any]]:
    """(the file's text or None when there is none, its parsed content)."""
    if not target.exists:
        return None, {}
    with open(target.real, "rb") as handle:
        raw = handle.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise DaemonJsonError(f"{target.path} on {host} is over {MAX_BYTES} bytes; no daemon.json is: fix it, then re-run.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DaemonJsonError(f"{target.path} on {host} is not UTF-8 text; fix or remove it, then re-run.") from None
    return text, parse(text, target.path, host)


def _option_name(option: Any) -> Any:
    return option.split("=", 1)[0].strip() if isinstance(option, str) else canonical(option)


def merge_options(have: Any, want: Sequence[Any]) -> List[Any]:
    """exec-opts: the file's options in their order, each replaced by the wanted option of the same name;
    wanted options the file lacks appended."""
    wanted = {_option_name(opt): opt for opt in want}
    out: List[Any] = []
    done = set()
    for opt in list(have) if isinstance(have, list) else []:
        name = _option_name(opt)
        if name not in wanted:
            out.append(opt)
        elif name not in done:
            out.append(wanted[name])
            done.add(name)
    return out + [wanted[name] for name in wanted if name not in done]


def _strip_none(value: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: _strip_none(v) if isinstance(v, Mapping) else copy.deepcopy(v) for k, v in value.items() if v is not None}


def _overlay(base: Dict[str, Any], layer: Mapping[str, Any], prefix: str, log: Merge) -> None:
    """Set *layer* over *base* in place: mappings key by key, None removes, exec-opts by option name."""
    for key, value in layer.items():
        name = f"{prefix}{key}"
        have = base.get(key)
        if value is None:
            if key in base:
                del base[key]
                log.removed.append(name)
            continue
        if isinstance(value, Mapping) and isinstance(have, dict):
            _overlay(have, value, name + ".", log)
            continue
        if not prefix and key in OPTION_LISTS and isinstance(value, list):
            value = merge_options(have, value)
        elif isinstance(value, Mapping):
            value = _strip_none(value)
        if key not in base or not same(have, value):
            base[key] = copy.deepcopy(value)
            log.set_keys.append(name)


def merge(current: Mapping[str, Any], *, defaults: Optional[Mapping[str, Any]] = None,
          explicit: Optional[Mapping[str, Any]] = None, owned: Optional[Mapping[str, Any]] = None) -> Merge:
    """The file with kiln's defaults added where it lacks their key, then the explicit and the owned layers over it.

    Defaults are by top-level key: a file that has ``log-opts`` keeps its own whole, and
    kiln's rotation options are added only when the resulting ``log-driver`` takes them.
    """
    defaults = defaults or {}
    explicit = explicit or {}
    owned = owned or {}
    content: Dict[str, Any] = copy.deepcopy(dict(current))
    log = Merge(content=content, changed=False)
    for key, value in defaults.items():
        if value is None or (key in explicit and explicit[key] is None):
            continue
        if key not in current:
            content[key] = _strip_none(value) if isinstance(value, Mapping) else copy.deepcopy(value)
            log.added.append(key)
        elif not same(current[key], value):
            log.left_alone.append(key)
    _overlay(content, explicit, "", log)
    _overlay(content, owned, "", log)
    if ("log-opts" in log.added and isinstance(content.get("log-opts"), dict)
            and content.get("log-driver", "json-file") not in ROTATING_LOG_DRIVERS):
        mine = {k for layer in (explicit, owned) if isinstance(layer.get("log-opts"), Mapping) for k in layer["log-opts"]}
        kept = {k: v for k, v in content["log-opts"].items() if k in mine}
        if kept:
            content["log-opts"] = kept
        else:
            del content["log-opts"]
        log.added.remove("log-opts")
        log.left_alone.append("log-opts")
    log.changed = not same(content, dict(current))
    log.set_keys = sorted(set(log.set_keys))
    log.added = sorted(set(log.added) - set(log.set_keys))
    log.left_alone = sorted(set(log.left_alone))
    log.removed = sorted(set(log.removed))
    return log


def summary(result: Merge, current: Mapping[str, Any], defaults: Mapping[str, Any]) -> List[str]:
    """One line per key kiln left alone: the file's value and kiln's default."""
    lines = []
    for key in result.left_alone:
        default = canonical(defaults.get(key))[:200]
        if key in current:
            lines.append(f"{key}: kept the file's {canonical(current[key])[:200]} over kiln's default {default} "
                         f"(set it in the inventory to change it)")
        else:
            lines.append(f"{key}: kiln's default {default} not added (log-driver "
                         f"{canonical(result.content.get('log-driver'))} does not take it)")
    return lines
