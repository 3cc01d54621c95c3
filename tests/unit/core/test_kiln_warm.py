"""callback_plugins/kiln_warm.py: kiln's filters and data loaded in the main process before the first task."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ansible.plugins.loader import filter_loader

from kiln_paths import REPO


def _callback():
    spec = importlib.util.spec_from_file_location("kiln_warm_under_test", REPO / "callback_plugins" / "kiln_warm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_warm_loads_every_kiln_filter_file_the_engine_and_the_compat_data() -> None:
    filter_loader.add_directory(str(REPO / "filter_plugins"))
    module = _callback()
    module.CallbackModule().v2_playbook_on_start(None)
    loaded = {Path(getattr(m, "__file__", "") or "").name for m in list(sys.modules.values())}
    for name in ("kiln_compat_filters.py", "kiln_package_filters.py", "kiln_slurm_filters.py", "kiln_repo_key_filters.py"):
        assert name in loaded, name
    engine = REPO / "module_utils" / "kiln_compat_engine"
    loaded_paths = {Path(getattr(m, "__file__", "") or "").resolve() for m in list(sys.modules.values())
                    if getattr(m, "__file__", None)}
    for path in sorted(engine.rglob("*.py")):
        assert path.resolve() in loaded_paths, path.relative_to(REPO)
    data = sys.modules["kiln_compat_engine.data"]
    assert Path(data.__file__).resolve() == (engine / "data.py").resolve()
    assert {"compat", "denylist"} <= set(data._CACHE)


def test_every_warm_filter_exists() -> None:
    docs = {p.stem for p in (REPO / "filter_plugins").glob("kiln_*.yml")}
    assert set(_callback().WARM_FILTERS) <= docs


def test_ansible_cfg_enables_it() -> None:
    cfg = (REPO / "ansible.cfg").read_text()
    assert "callback_plugins = callback_plugins" in cfg and "kiln_warm" in cfg
    assert "kiln_warm" in (REPO / ".config" / "molecule" / "config.yml").read_text()
