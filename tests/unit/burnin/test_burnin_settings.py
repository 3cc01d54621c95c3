"""The burn-in's variables have one home: roles/burnin_settings (defaults + argument_specs).

- every kiln_burnin_* variable playbooks/burnin.yml and its phases (roles/burnin/tasks/) read is a
  default and an argument_specs option of the role, and every one of those is read;
- no inline default() is left on a knob, and every play that reads a knob loads the role (the
  first one through `roles:`, so the spec is checked before the lock; the others with
  rolespec_validate false);
- the values the molecule scenario, the inventories and tools/kiln-burnin pass (inventory types,
  and -e key=value strings) pass the spec; wrong ones are refused, naming the variable;
- under real ansible-playbook: the defaults are what the playbook used to default to, a later
  play sees them, a wrong value stops the run before its first task.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from kiln_playbook import ANSIBLE_PLAYBOOK, load_playbook, run_playbook

from kiln_paths import REPO
ROLE = REPO / "roles" / "burnin_settings"
DEFAULTS: dict[str, Any] = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
SPEC: dict[str, Any] = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
BURNIN = REPO / "playbooks" / "burnin.yml"
PHASES = REPO / "roles" / "burnin" / "tasks"
TASK_FILES = sorted(PHASES.glob("*.yml"))
KNOB = re.compile(r"\bkiln_burnin_[a-z0-9_]+\b")
# Keys whose values are not variable reads: task names, host patterns, add_host's groups.
NOT_READS = frozenset({"name", "hosts", "groups"})


def reads(node: Any, key: str | None = None) -> Iterator[str]:
    """kiln_burnin_* names in the string values of a parsed YAML tree (mapping keys, such as the
    kiln_burnin / kiln_burnin_pairs module names, are not reads)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from reads(v, str(k))
    elif isinstance(node, list):
        for v in node:
            yield from reads(v, key)
    elif isinstance(node, str) and key not in NOT_READS:
        yield from KNOB.findall(node)


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


PLAYS: list[dict[str, Any]] = load_playbook("burnin.yml")
READ = set(reads(PLAYS)).union(*(set(reads(_load(p))) for p in TASK_FILES))


# --------------------------------------------------------------------------
# one home, complete both ways


def test_the_task_files_are_found():
    assert "pair_round.yml" in [p.name for p in TASK_FILES] and len(TASK_FILES) == 13
    assert len(READ) > 40
    # every phase file is imported by exactly one play of the playbook
    phases = [p.stem for p in TASK_FILES if p.name != "pair_round.yml"]
    assert sorted(re.findall(r"tasks_from: (\w+)", BURNIN.read_text())) == sorted(phases)
    # the phases take no arguments: their imports run no argument check (it would check nothing)
    assert BURNIN.read_text().count("tasks_from:") == len(phases)
    assert all(args.get("rolespec_validate") is False for play in yaml.safe_load(BURNIN.read_text())
               for task in play.get("tasks") or [] for args in [task.get("ansible.builtin.import_role") or {}]
               if args.get("name") == "burnin")


def test_every_knob_the_burnin_reads_is_declared():
    assert sorted(READ - set(SPEC)) == [], "read by the burn-in, missing from roles/burnin_settings"
    assert sorted(READ - set(DEFAULTS)) == []


def test_every_declared_knob_is_read():
    assert sorted(set(SPEC) - READ) == [], "declared in roles/burnin_settings, read nowhere"
    assert set(DEFAULTS) == set(SPEC)


def test_every_option_is_typed_and_described():
    for name, opt in SPEC.items():
        assert opt.get("type") in {"str", "int", "float", "bool", "list", "dict", "raw"}, name
        assert (opt.get("elements") is not None) == (opt["type"] == "list"), name
        assert opt.get("description"), name
        assert "default" not in opt, f"{name}: the default lives in defaults/main.yml only"
        if DEFAULTS[name] is None:
            assert "null" in " ".join([opt["description"]] if isinstance(opt["description"], str)
                                      else opt["description"]), f"{name}: say what a null default means"


def test_no_inline_default_is_left_on_a_knob():
    for path in [BURNIN, *TASK_FILES]:
        text = path.read_text()
        found = re.findall(r"kiln_burnin_[a-z0-9_]+\s*\|\s*(?:default|d)\(", text)
        assert found == [], f"{path.name}: {found}"


def _imports(node: Any) -> Iterator[dict[str, Any]]:
    """The import_role arguments anywhere in a task list (blocks and expanded phases included)."""
    if isinstance(node, list):
        for v in node:
            yield from _imports(v)
    elif isinstance(node, dict):
        if isinstance(node.get("ansible.builtin.import_role"), dict):
            yield node["ansible.builtin.import_role"]
        for key in ("block", "rescue", "always"):
            yield from _imports(node.get(key))


def _loads_role(play: dict[str, Any]) -> str | None:
    for role in play.get("roles") or []:
        if (role if isinstance(role, str) else role.get("role") or role.get("name")) == "burnin_settings":
            return "roles"
    for section in ("pre_tasks", "tasks"):
        for args in _imports(play.get(section)):
            if args.get("name") == "burnin_settings":
                assert args.get("rolespec_validate") is False, play["name"]
                return "import"
    return None


def test_every_play_that_reads_a_knob_loads_the_role():
    rounds = set().union(*(set(reads(_load(p))) for p in TASK_FILES))
    for play in PLAYS:
        used = set(reads(play)) | (rounds if '"pair_round.yml"' in json.dumps(play) else set())
        if used:
            assert _loads_role(play), f"{play['name']} reads {sorted(used)} without importing burnin_settings"


def test_the_first_play_checks_the_spec_before_anything_else():
    """Play 0 is the --limit guard (it reads no knob and loads no role); play 1 checks the spec, once."""
    guard, first = PLAYS[0], PLAYS[1]
    assert not list(reads(guard)) and not guard.get("roles") and "ansible_limit" in json.dumps(guard)
    assert first["hosts"] == "localhost" and not first.get("pre_tasks")
    assert _loads_role(first) == "roles" and len(first["roles"]) == 1
    assert all(_loads_role(play) != "roles" for play in PLAYS[2:]), "validate once, in the first phase's play"


# --------------------------------------------------------------------------
# what is passed today passes the spec


def _check(values: dict[str, Any]) -> list[str]:
    result = ArgumentSpecValidator(SPEC).validate(values)
    return result.error_messages


def _molecule_values() -> list[dict[str, Any]]:
    inv = _load(REPO / "molecule" / "burnin" / "molecule.yml")["provisioner"]["inventory"]
    out = []
    for section in ("group_vars", "host_vars"):
        for values in (inv.get(section) or {}).values():
            out.append({k: v for k, v in values.items() if k.startswith("kiln_burnin_")})
    return out


def _inventory_values() -> list[dict[str, Any]]:
    out = []
    for path in sorted((REPO / "inventories").rglob("*.yml")):
        if "group_vars" in path.parts or "host_vars" in path.parts:
            data = _load(path) or {}
            out.append({k: v for k, v in data.items() if k.startswith("kiln_burnin_")})
    return out


def _extra_var_strings() -> dict[str, set[str]]:
    """Every `-e kiln_burnin_X=VALUE` (a string, as ansible-playbook reads key=value) that the scenario,
    the unit tests and tools/kiln-burnin pass; a value built by Jinja is taken as a sample."""
    found: dict[str, set[str]] = {}
    sources = [REPO / "molecule" / "burnin" / "side_effect.yml", *sorted((REPO / "molecule" / "burnin" / "cases").glob("*.yml")),
               REPO / "tools" / "kiln-burnin",
               REPO / "tests" / "unit" / "burnin" / "test_tools_cli.py",
               REPO / "tests" / "unit" / "burnin" / "test_burnin_invariant.py"]
    for path in sources:
        for name, value in re.findall(r"(kiln_burnin_[a-z0-9_]+)=([A-Za-z0-9_./-]*)", path.read_text()):
            found.setdefault(name, set()).add(value or "kiln-burnin-c3,kiln-burnin-c1")
    return found


def test_the_scenario_and_inventory_values_pass_the_spec():
    for values in _molecule_values() + _inventory_values():
        assert set(values) <= set(SPEC), sorted(set(values) - set(SPEC))
        assert _check(values) == [], values
    assert any("kiln_burnin_pair_args" in v for v in _molecule_values())


def test_the_extra_vars_strings_pass_the_spec():
    strings = _extra_var_strings()
    assert {"kiln_burnin_mode", "kiln_burnin_engine", "kiln_burnin_fail_play", "kiln_burnin_actions",
            "kiln_burnin_swap_nodes", "kiln_burnin_run_id", "kiln_burnin_results_dir"} <= set(strings)
    for name, values in strings.items():
        assert name in SPEC, name
        for value in values:
            assert _check({name: value}) == [], (name, value)


def test_the_static_defaults_pass_the_spec():
    static = {k: v for k, v in DEFAULTS.items() if not (isinstance(v, str) and "{{" in v)}
    assert _check(static) == []


@pytest.mark.parametrize("name, value, match", [
    ("kiln_burnin_mode", "fast", "kiln_burnin_mode must be one of: quick, default, acceptance, swap"),
    ("kiln_burnin_engine", "gpu", "kiln_burnin_engine must be one of: auto, cpu, nccl-tests"),
    ("kiln_burnin_actions", "k8s", "kiln_burnin_actions must be one of: slurm, none"),
    ("kiln_burnin_pair_concurrency", "2", "kiln_burnin_pair_concurrency must be one of: 0, 1"),
    ("kiln_burnin_pair_band", "wide", "kiln_burnin_pair_band"),
    ("kiln_burnin_fail_play", "maybe", "kiln_burnin_fail_play"),
    ("kiln_burnin_floor_overrides", ["h100-sxm/any/single_node"], "kiln_burnin_floor_overrides"),
    ("kiln_burnin_fabric_ranks_per_node", "eight", "kiln_burnin_fabric_ranks_per_node"),
])
def test_wrong_values_are_refused_naming_the_variable(name, value, match):
    errors = _check({name: value})
    assert errors and match in " ".join(errors), errors


# --------------------------------------------------------------------------
# under real ansible-playbook

PLAYBOOK = "tests/playbooks/burnin_settings.yml"
needs_ansible = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not found")
# What playbooks/burnin.yml defaulted to inline before the role existed (playbook_dir: tests/playbooks).
BEFORE = {
    "kiln_burnin_mode": "default", "kiln_burnin_engine": "auto", "kiln_burnin_actions": "slurm",
    "kiln_burnin_pair_concurrency": 0, "kiln_burnin_targets": "slurm_compute:gpu_nodes",
    "kiln_burnin_swap_partners": 4, "kiln_burnin_lock_path": "/var/lib/kiln/burnin/lock.json",
    "kiln_burnin_reservation_minutes": 240, "kiln_burnin_break_lock": False, "kiln_burnin_install_tools": True,
    "kiln_burnin_dcgm_timeout": 3600, "kiln_burnin_nccl_timeout": 900, "kiln_burnin_iperf_seconds": 3,
    "kiln_burnin_nccl_env": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/var/lib/kiln/burnin/tmp/nccl.%h.%p.log"},
    "kiln_burnin_ib_hca": "", "kiln_burnin_slurm_reservation": True, "kiln_burnin_pairs": True,
    "kiln_burnin_baseline_window": 5, "kiln_burnin_override_operator_drain": False, "kiln_burnin_pair_rounds": 4,
    "kiln_burnin_fabric_timeout": 1800, "kiln_burnin_pair_confirm": True, "kiln_burnin_pair_band": 0.1,
    "kiln_burnin_baseline_band": 0.1, "kiln_burnin_floor_overrides": {}, "kiln_burnin_pair_timeout": 900,
    "kiln_burnin_fail_play": True, "kiln_burnin_use_slurm": False,
    "kiln_burnin_results_dir": f"{REPO}/tests/playbooks/../results/burnin",
    "kiln_burnin_state_dir": f"{REPO}/tests/playbooks/../results/burnin/history",
    "kiln_burnin_floors_file": f"{REPO}/tests/playbooks/../data/burnin_floors.yml",
    "kiln_burnin_health_file": f"{REPO}/tests/playbooks/../data/burnin_health.yml",
}


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> tuple[int, dict[str, Any], str]:
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", "ansible.builtin.json")
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN", "memory")
    res = run_playbook(PLAYBOOK, "-i", "tests/playbooks/inventory", *extra, tmp_path=tmp_path, timeout=120)
    msgs: dict[str, Any] = {}
    try:
        report, _ = json.JSONDecoder().raw_decode(res.stdout[res.stdout.index("\n{\n") + 1:])  # amid profile_tasks
        for play in report["plays"]:
            for task in play["tasks"]:
                msg = str(task["hosts"].get("localhost", {}).get("msg", ""))
                for key in ("knobs", "later", "argv"):
                    if msg.startswith(key + "="):
                        msgs[key] = json.loads(msg[len(key) + 1:])
    except (ValueError, KeyError):
        pass
    return res.returncode, msgs, res.stdout + res.stderr


@needs_ansible
def test_defaults_are_the_old_inline_defaults_in_the_first_and_a_later_play(tmp_path, monkeypatch):
    rc, msgs, out = _run(tmp_path, monkeypatch)
    assert rc == 0, out
    assert set(msgs["knobs"]) == set(SPEC)
    for name, value in BEFORE.items():
        assert msgs["knobs"][name] == value, name
    assert all(msgs["knobs"][name] is None for name in SPEC if DEFAULTS[name] is None)
    assert msgs["later"] == msgs["knobs"]
    assert msgs["argv"] == ["timeout", "900", "mpirun", "--allow-run-as-root", "--mca", "btl", "self,tcp", "--mca",
                            "btl_tcp_if_include", "eth0", "-x", "OMPI_MCA_btl", "-x", "NCCL_DEBUG", "-np", "4",
                            "--host", "192.0.2.1:2,192.0.2.2:2", "/bin/engine", "-n", "8"]


@needs_ansible
def test_the_scenarios_extra_vars_pass_and_override(tmp_path, monkeypatch):
    pair_args = ["-b", "16M", "-e", "64M", "-f", "2", "-n", "8", "-w", "2"]
    rc, msgs, out = _run(tmp_path, monkeypatch, "-e", "kiln_burnin_engine=cpu", "-e", "kiln_burnin_mode=swap",
                         "-e", "kiln_burnin_swap_nodes=kiln-burnin-c3,kiln-burnin-c1", "-e", "kiln_burnin_fail_play=false",
                         "-e", "kiln_burnin_actions=none", "-e", "kiln_burnin_results_dir=/r", "-e", "kiln_burnin_run_id=x",
                         "-e", json.dumps({"kiln_burnin_pair_args": pair_args, "kiln_burnin_pair_band": 0.2,
                                           "kiln_burnin_fabric_ranks_per_node": 1, "kiln_burnin_pair_timeout": 60}),
                         "-e", "kiln_burnin_use_slurm=true", "-e", "kiln_burnin_pair_concurrency=1")
    assert rc == 0, out
    knobs = msgs["knobs"]
    assert knobs["kiln_burnin_swap_nodes"] == "kiln-burnin-c3,kiln-burnin-c1"  # checked, not rewritten
    assert knobs["kiln_burnin_fail_play"] == "false" and knobs["kiln_burnin_pair_concurrency"] == "1"
    assert knobs["kiln_burnin_state_dir"] == "/r/history"  # follows kiln_burnin_results_dir, as before
    assert knobs["kiln_burnin_pair_args"] == pair_args and knobs["kiln_burnin_pair_band"] == 0.2
    assert msgs["argv"] == ["timeout", "60", "srun", "--job-name=kiln-burnin", "--ntasks-per-node=1", "--mpi=pmix",
                            "--export=ALL", "-N", "2", "-w", "node-c1,node-c2", "/bin/engine", "-n", "8"]


@needs_ansible
@pytest.mark.parametrize("extra, match", [
    ("kiln_burnin_mode=fast", "kiln_burnin_mode must be one of: quick, default, acceptance, swap, got: fast"),
    ("kiln_burnin_pair_concurrency=2", "kiln_burnin_pair_concurrency must be one of: 0, 1, got: 2"),
])
def test_a_wrong_value_stops_the_run_before_its_first_task(tmp_path, monkeypatch, extra, match):
    rc, msgs, out = _run(tmp_path, monkeypatch, "-e", extra)
    assert rc != 0 and match in out, out
    assert '"action": "ansible.builtin.validate_argument_spec"' in out
    assert msgs == {} and "knobs=" not in out  # not even the first play's first task ran
