"""Shared by the unit tests: import a source file (also one without a .py suffix) under a module name."""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType


def load_source(name: str, path: Path) -> ModuleType:
    """Import *path* as module *name* once (later calls return the same module)."""
    if name in sys.modules:
        return sys.modules[name]
    loader = SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def ship_module_utils() -> None:
    """Make ``ansible.module_utils.kiln.*`` importable, as AnsiballZ does on a node, so that a library
    module's own import lines run in a test: every module of module_utils/kiln/ is registered under
    that name too (the same module object: one copy of its state)."""
    import importlib
    import pkgutil

    import kiln

    names = ["kiln"] + [info.name for info in pkgutil.walk_packages(kiln.__path__, "kiln.")]
    for name in names:
        sys.modules.setdefault(f"ansible.module_utils.{name}", importlib.import_module(name))
