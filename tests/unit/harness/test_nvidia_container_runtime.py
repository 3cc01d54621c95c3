"""The fixture emulator of nvidia-container-runtime: CDI spec reading and bundle edits (then runc)."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_paths import REPO as ROOT
EMU = ROOT / "tests" / "fixtures" / "emulators"


def _load(name: str):
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), str(EMU / name))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


ncr = _load("nvidia-container-runtime")


def _generate(profile: str, fmt: str, tmp_path: Path) -> str:
    env = dict(os.environ, KILN_FIXTURE_ROOT=str(tmp_path),
               KILN_GPU_PROFILE=str(ROOT / "tests/fixtures/gpu-emulator/profiles" / f"{profile}.json"))
    return subprocess.run([sys.executable, str(EMU / "nvidia-ctk"), "cdi", "generate", f"--format={fmt}"],
                          env=env, check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("profile", ["h100-sxm-8", "l40s-2"])
def test_yaml_reader_reads_the_spec_nvidia_ctk_writes_as_its_json(profile, tmp_path):
    assert ncr.parse_yaml(_generate(profile, "yaml", tmp_path)) == json.loads(_generate(profile, "json", tmp_path))


scalars = st.one_of(st.text(alphabet="abcXYZ019/-._=", min_size=1, max_size=12), st.just("0"), st.just("all"))
trees = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, min_size=1, max_size=3),
    st.dictionaries(st.text(alphabet="abcdefgh", min_size=1, max_size=6), kids, min_size=1, max_size=3)),
    max_leaves=12)


def _go_yaml(obj, col=0):
    """A writer of the same block layout as the nvidia-ctk emulator's (4-space indent, '- ' items)."""
    lines = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)):
                lines.append(" " * col + f"{k}:")
                lines += _go_yaml(v, col + 4)
            else:
                lines.append(" " * col + f"{k}: {json.dumps(v)}")
    else:
        for item in obj:
            if isinstance(item, dict):
                sub = _go_yaml(item, col + 2)
                lines.append(" " * col + "- " + sub[0].lstrip())
                lines += sub[1:]
            elif isinstance(item, list):
                lines.append(" " * col + "-")
                lines += _go_yaml(item, col + 2)
            else:
                lines.append(" " * col + f"- {json.dumps(item)}")
    return lines


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(alphabet="abcdefgh", min_size=1, max_size=6), trees, min_size=1, max_size=4))
def test_yaml_reader_round_trips_the_block_layout(tree):
    assert ncr.parse_yaml("---\n" + "\n".join(_go_yaml(tree)) + "\n") == tree


@pytest.fixture
def specs(tmp_path, monkeypatch):
    """Two spec dirs; /dev/null and /dev/zero stand in for GPU nodes (character devices on every host)."""
    etc, run = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    etc.mkdir()
    run.mkdir()
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/null"}]}},
                        {"name": "1", "containerEdits": {"deviceNodes": [{"path": "/dev/zero"}]}},
                        {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/null"}, {"path": "/dev/zero"}]}}],
            "containerEdits": {"env": ["NVIDIA_CTK_LIBCUDA_DIR=/usr/lib"], "deviceNodes": [{"path": "/dev/full"}],
                               "mounts": [{"hostPath": str(tmp_path), "containerPath": "/kiln", "options": ["ro", "rbind"]},
                                          {"hostPath": "/nonexistent/lib.so", "containerPath": "/lib.so"}],
                               "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook", "args": ["x"]}]}}
    (etc / "nvidia.json").write_text(json.dumps(spec))
    (etc / "other.json").write_text(json.dumps({"kind": "example.com/net", "devices": [{"name": "0"}]}))
    (etc / "broken.yaml").write_text("kind: [\n")
    monkeypatch.setattr(ncr, "SPEC_DIRS", (str(etc), str(run)))
    monkeypatch.setattr(ncr, "LOG", str(tmp_path / "log"))
    return tmp_path


def _bundle(tmp_path: Path, env: list[str]) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir(exist_ok=True)
    (bundle / "config.json").write_text(json.dumps({"process": {"env": env}, "linux": {}}))
    return bundle


def _config(bundle: Path) -> dict:
    return json.loads((bundle / "config.json").read_text())


def test_all_injects_every_gpu_and_the_common_edits(specs):
    bundle = _bundle(specs, ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"])
    ncr.modify_bundle(str(bundle))
    cfg = _config(bundle)
    assert [d["path"] for d in cfg["linux"]["devices"]] == ["/dev/null", "/dev/zero", "/dev/full"]
    assert {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"} in cfg["linux"]["resources"]["devices"]
    assert [m["destination"] for m in cfg["mounts"]] == ["/kiln"]  # the missing host path is skipped
    assert "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib" in cfg["process"]["env"]
    assert "hook not run" in (specs / "log").read_text()


def test_one_index_injects_that_gpu_only(specs):
    bundle = _bundle(specs, ["NVIDIA_VISIBLE_DEVICES=1"])
    ncr.modify_bundle(str(bundle))
    assert [d["path"] for d in _config(bundle)["linux"]["devices"]] == ["/dev/zero", "/dev/full"]


@pytest.mark.parametrize("env", [[], ["NVIDIA_VISIBLE_DEVICES="], ["NVIDIA_VISIBLE_DEVICES=void"]])
def test_unset_empty_or_void_leaves_the_bundle_alone(specs, env):
    bundle = _bundle(specs, env)
    before = (bundle / "config.json").read_text()
    ncr.modify_bundle(str(bundle))
    assert (bundle / "config.json").read_text() == before


def test_none_gives_the_common_edits_without_a_gpu(specs):
    bundle = _bundle(specs, ["NVIDIA_VISIBLE_DEVICES=none"])
    ncr.modify_bundle(str(bundle))
    assert [d["path"] for d in _config(bundle)["linux"]["devices"]] == ["/dev/full"]


def test_a_device_the_spec_lacks_fails_the_create(specs):
    bundle = _bundle(specs, ["NVIDIA_VISIBLE_DEVICES=0,7"])
    with pytest.raises(LookupError, match="unresolvable CDI devices nvidia.com/gpu=7"):
        ncr.modify_bundle(str(bundle))


def test_a_device_node_missing_on_the_host_fails_the_create(specs):
    spec = json.loads((Path(ncr.SPEC_DIRS[0]) / "nvidia.json").read_text())
    spec["devices"][0]["containerEdits"]["deviceNodes"] = [{"path": "/dev/kiln-no-such-node"}]
    (Path(ncr.SPEC_DIRS[1]) / "nvidia.json").write_text(json.dumps(spec))  # /var/run/cdi wins
    with pytest.raises(OSError):
        ncr.modify_bundle(str(_bundle(specs, ["NVIDIA_VISIBLE_DEVICES=0"])))


def test_the_bundle_is_found_in_runc_argument_forms():
    assert ncr.bundle_of(["--bundle", "/b", "--pid-file", "/p", "id"]) == "/b"
    assert ncr.bundle_of(["-b", "/c", "id"]) == "/c"
    assert ncr.bundle_of(["--bundle=/d", "id"]) == "/d"
