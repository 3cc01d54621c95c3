"""module_utils/kiln/packages/daemon_json.py: daemon.json merged so that the operator wins (issue 31, defect 8).

The file's keys stay unless the inventory sets them (data-root, registry-mirrors, exec-opts were
overwritten by kiln's role defaults before); kiln's defaults only fill what the file lacks; the keys
kiln must own (CDI) are set, merged into the file's mapping; a symlink is followed to a regular file
and a dangling one refused; formatting is no change; a file kiln cannot parse is refused. Reads are
on real files under tmp_path.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.packages.daemon_json import DaemonJsonError, canonical, merge, merge_options, parse, read, render, resolve, summary

# What the role passes when the inventory sets none of its daemon.json variables.
DEFAULTS = {
    "exec-opts": ["native.cgroupdriver=systemd"],
    "log-driver": "json-file",
    "log-opts": {"max-size": "100m", "max-file": "3"},
    "live-restore": True,
    "default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1}},
}
CDI = {"features": {"cdi": True}}
NVIDIA = {"args": [], "path": "nvidia-container-runtime"}
OPERATOR = {
    "data-root": "/raid/docker",
    "registry-mirrors": ["https://mirror.site.example"],
    "exec-opts": ["native.cgroupdriver=cgroupfs", "native.umask=normal"],
    "runtimes": {"crun": {"path": "/usr/bin/crun"}},
    "log-opts": {"max-size": "10m", "labels": "team"},
    "max-concurrent-downloads": 5,
}


def _file(tmp_path: Path, content: object, name: str = "daemon.json") -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_the_operators_data_root_mirrors_and_exec_opts_stay(tmp_path: Path) -> None:
    path = _file(tmp_path, OPERATOR)
    _, current = read(resolve(str(path)))
    done = merge(current, defaults=DEFAULTS, owned=CDI)
    for key in ("data-root", "registry-mirrors", "exec-opts", "runtimes", "log-opts", "max-concurrent-downloads"):
        assert done.content[key] == OPERATOR[key], key
    assert done.content["live-restore"] is True and done.content["features"] == {"cdi": True}
    assert done.added == ["default-ulimits", "live-restore", "log-driver"]
    assert done.left_alone == ["exec-opts", "log-opts"] and done.set_keys == ["features"]
    lines = summary(done, current, DEFAULTS)
    assert lines[0].startswith('exec-opts: kept the file\'s ["native.cgroupdriver=cgroupfs","native.umask=normal"] '
                               'over kiln\'s default ["native.cgroupdriver=systemd"]')


def test_an_explicit_inventory_key_wins_and_only_it() -> None:
    explicit = {"data-root": "/data/docker", "registry-mirrors": ["https://other.example"],
                "exec-opts": ["native.cgroupdriver=systemd"], "log-opts": {"max-size": "50m"}}
    done = merge(OPERATOR, defaults=DEFAULTS, explicit=explicit)
    assert done.content["data-root"] == "/data/docker"
    assert done.content["registry-mirrors"] == ["https://other.example"]  # a list replaces the file's
    # exec-opts by option name: the cgroup driver replaced in place, the operator's umask kept
    assert done.content["exec-opts"] == ["native.cgroupdriver=systemd", "native.umask=normal"]
    assert done.content["log-opts"] == {"max-size": "50m", "labels": "team"}  # a mapping merged key by key
    assert done.content["max-concurrent-downloads"] == 5
    assert done.set_keys == ["data-root", "exec-opts", "log-opts.max-size", "registry-mirrors"]


def test_explicit_empty_mirrors_and_null_remove() -> None:
    done = merge(OPERATOR, explicit={"registry-mirrors": [], "max-concurrent-downloads": None,
                                     "log-opts": {"labels": None}})
    assert done.content["registry-mirrors"] == [] and "max-concurrent-downloads" not in done.content
    assert done.content["log-opts"] == {"max-size": "10m"}
    assert done.removed == ["log-opts.labels", "max-concurrent-downloads"]


def test_the_nvidia_runtime_goes_beside_the_operators_runtime() -> None:
    done = merge(OPERATOR, owned={"runtimes": {"nvidia": NVIDIA}, **CDI})
    assert done.content["runtimes"] == {"crun": {"path": "/usr/bin/crun"}, "nvidia": NVIDIA}
    assert done.set_keys == ["features", "runtimes.nvidia"]
    # an operator's features stay beside the CDI flag kiln owns; a wrong flag is put right
    done = merge({"features": {"containerd-snapshotter": True, "cdi": False}}, owned=CDI)
    assert done.content["features"] == {"containerd-snapshotter": True, "cdi": True}


def test_a_fresh_file_gets_every_default() -> None:
    done = merge({}, defaults=DEFAULTS, owned=CDI)
    assert done.content == {**DEFAULTS, **CDI} and done.changed and done.left_alone == []


def test_kiln_adds_no_rotation_to_a_log_driver_that_refuses_it() -> None:
    done = merge({"log-driver": "journald"}, defaults=DEFAULTS)
    assert "log-opts" not in done.content and "log-opts" in done.left_alone
    assert any(line.startswith("log-opts: kiln's default") for line in summary(done, {"log-driver": "journald"}, DEFAULTS))
    # the same when the inventory chooses journald and leaves the rotation to kiln's defaults
    done = merge({}, defaults={k: v for k, v in DEFAULTS.items() if k != "log-driver"}, explicit={"log-driver": "journald"})
    assert "log-opts" not in done.content and done.content["log-driver"] == "journald"
    # local takes max-size / max-file
    assert merge({"log-driver": "local"}, defaults=DEFAULTS).content["log-opts"] == DEFAULTS["log-opts"]


def test_order_and_whitespace_are_no_change(tmp_path: Path) -> None:
    merged = merge({}, defaults=DEFAULTS, owned=CDI).content
    reordered = dict(reversed(list(merged.items())))
    path = _file(tmp_path, json.dumps(reordered, indent=1, sort_keys=False) + "\n\n")
    _, current = read(resolve(str(path)))
    done = merge(current, defaults=DEFAULTS, owned=CDI)
    assert not done.changed and done.set_keys == [] and done.added == []


def test_types_count_as_change() -> None:
    assert merge({"debug": 1}, explicit={"debug": True}).changed  # Python's 1 == True is not JSON's
    assert merge({"max-file": "3"}, explicit={"max-file": 3}).changed


def test_exec_opts_merge_by_option_name() -> None:
    assert merge_options(["native.cgroupdriver=cgroupfs", "native.umask=normal", "native.cgroupdriver=x"],
                         ["native.cgroupdriver=systemd"]) == ["native.cgroupdriver=systemd", "native.umask=normal"]
    assert merge_options(None, ["native.cgroupdriver=systemd"]) == ["native.cgroupdriver=systemd"]
    assert merge_options(["native.umask=normal"], ["native.cgroupdriver=systemd"]) == \
        ["native.umask=normal", "native.cgroupdriver=systemd"]


def test_render_is_nvidia_ctks_layout() -> None:
    assert render({"b": 1, "a": {"d": [], "c": "x"}}) == '{\n    "a": {\n        "c": "x",\n        "d": []\n    },\n    "b": 1\n}\n'


# ---- the file on disk: symlinks, what cannot be read


def test_a_symlink_is_followed_to_its_regular_file(tmp_path: Path) -> None:
    real = _file(tmp_path, {"data-root": "/raid/docker"}, "real.json")
    (tmp_path / "etc").mkdir()
    link = tmp_path / "etc" / "daemon.json"
    link.symlink_to(os.path.relpath(real, link.parent))
    target = resolve(str(link))
    assert target.real == str(real) and target.exists and target.via_link
    assert read(target)[1] == {"data-root": "/raid/docker"}
    # a chain of links, and a linked directory above the file
    (tmp_path / "chain.json").symlink_to(link)
    assert resolve(str(tmp_path / "chain.json")).real == str(real)
    (tmp_path / "confdir").symlink_to(tmp_path / "etc")
    assert resolve(str(tmp_path / "confdir" / "daemon.json")).real == str(real)


def test_a_missing_file_in_a_linked_directory_is_created_there(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "docker").symlink_to(tmp_path / "store")
    target = resolve(str(tmp_path / "docker" / "daemon.json"))
    assert not target.exists and target.real == str(tmp_path / "store" / "daemon.json")
    assert read(target) == (None, {})
    # a directory that does not exist yet (a check-mode run before the role made /etc/docker): nothing to read
    assert not resolve(str(tmp_path / "absent" / "daemon.json")).exists


@pytest.mark.parametrize("make", ["dangling", "loop", "directory"])
def test_what_cannot_be_written_safely_is_refused_naming_path_and_host(tmp_path: Path, make: str) -> None:
    path = tmp_path / "daemon.json"
    if make == "dangling":
        path.symlink_to(tmp_path / "unmounted" / "daemon.json")
    elif make == "loop":
        path.symlink_to(tmp_path / "other.json")
        (tmp_path / "other.json").symlink_to(path)
    else:
        path.mkdir()
    with pytest.raises(DaemonJsonError) as err:
        resolve(str(path), "gpu07")
    assert str(path) in str(err.value) and "gpu07" in str(err.value)
    if make == "dangling":
        assert "never creates its target nor replaces the link" in str(err.value)
        assert path.is_symlink()


@pytest.mark.parametrize(("content", "says"), [
    ('{"runtimes": {', "not valid JSON"),
    ('{"debug": true, "debug": false}', "appears twice"),
    ('["not", "an", "object"]', "holds a JSON list, not an object"),
    ('{"max-file": NaN}', "not valid JSON"),
    ("nvidia: yes\n", "not valid JSON"),
])
def test_a_file_kiln_cannot_read_is_refused(tmp_path: Path, content: str, says: str) -> None:
    path = _file(tmp_path, content)
    with pytest.raises(DaemonJsonError) as err:
        read(resolve(str(path)), "gpu07")
    assert says in str(err.value) and str(path) in str(err.value) and "gpu07" in str(err.value)
    assert "then re-run" in str(err.value)
    assert path.read_text() == content


def test_non_utf8_and_empty_files(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(DaemonJsonError, match="not UTF-8"):
        read(resolve(str(path)))
    path.write_text("  \n")
    assert read(resolve(str(path))) == ("  \n", {})
    assert parse("", "/x") == {}


# ---- the property: the operator wins


JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.text(max_size=8))
JSON = st.recursive(JSON_LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                    max_leaves=8)
KEYS = st.sampled_from(["data-root", "registry-mirrors", "exec-opts", "log-driver", "log-opts", "live-restore",
                        "default-ulimits", "runtimes", "features", "storage-driver", "debug", "x-site"])


@settings(max_examples=300, deadline=None)
@given(operator=st.dictionaries(st.one_of(KEYS, st.text(max_size=10)), JSON, max_size=8),
       explicit=st.dictionaries(KEYS, JSON, max_size=4))
def test_every_operator_key_not_set_explicitly_survives_unchanged(operator: dict, explicit: dict) -> None:
    done = merge(operator, defaults=DEFAULTS, explicit=explicit, owned=CDI)
    for key, value in operator.items():
        if key in explicit:
            continue
        if key == "features" and isinstance(value, dict):  # kiln owns features.cdi, nothing else there
            assert {k: v for k, v in done.content[key].items() if k != "cdi"} == {k: v for k, v in value.items() if k != "cdi"}
        elif key != "features":
            assert key in done.content and canonical(done.content[key]) == canonical(value), key
    # and merging again changes nothing (idempotent)
    again = merge(done.content, defaults=DEFAULTS, explicit=explicit, owned=CDI)
    assert not again.changed and canonical(again.content) == canonical(done.content)
