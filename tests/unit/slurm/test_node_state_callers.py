"""Issue 31: every caller that drains or resumes a Slurm node goes through kiln_node_state, from sinfo read
right before it acts -- the burn-in's verdict actions, its lock's restore, the rolling upgrade's report,
role slurm_controller's node_state entry point (run for real under ansible-playbook with a fake Slurm),
and a guard that no playbook, role or module runs ``scontrol update`` any other way."""

from __future__ import annotations

import json
import re
import stat
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, List, Tuple

import pytest
import yaml

from kiln_loader import load_source, ship_module_utils
from kiln_playbook import ANSIBLE_PLAYBOOK, REPO, run_playbook

sys.path.insert(0, str(REPO / "module_utils"))

from kiln.burnin import assemble as kb  # noqa: E402
from kiln.slurm import node_state as kns  # noqa: E402
from kiln.slurm import sinfo as kiln_sinfo  # noqa: E402
from kiln.upgrade import rollout as ku  # noqa: E402

PERSON = "RMA-123 bad PSU"


# -- the burn-in's verdict actions (kiln_burnin.plan_actions) ----------------------------------------

def judged(statuses: Dict[str, str]) -> dict:
    return {n: {"status": s, "checks": [{"id": "nccl.pair.all_reduce", "status": s, "detail": f"{n} detail"}]}
            for n, s in statuses.items()}


def test_fail_drain_of_a_node_a_person_drained_meanwhile_is_held():
    nodes = judged({"c1": "FAIL", "c2": "FAIL", "c3": "PASS"})
    fresh = kiln_sinfo.parse_sinfo(["n1|drained|" + PERSON, "n2|idle|none", "n3|down*|Not responding"])
    acts = {a["node"]: a for a in kb.plan_actions(nodes, "swap", {"c3": "BURNIN: old"}, ["c3"],
                                                  {"c1": "n1", "c2": "n2", "c3": "n3"}, slurm=fresh)}
    assert acts["c1"]["action"] == "hold" and acts["c1"]["applied"] is False
    assert acts["c1"]["reason"] == PERSON and acts["c1"]["why"].startswith(f"held by operator: {PERSON}; ")
    assert acts["c2"]["action"] == "drain" and acts["c2"]["applied"] is True
    # kiln resumed c3 for the test; it has gone down since (Slurm's reason): not reported as resumed by kiln
    assert acts["c3"]["action"] == "hold" and acts["c3"]["why"].startswith("held by operator: Not responding")
    # without a fresh read the plan is what it always was
    plain = {a["node"]: a["action"] for a in kb.plan_actions(nodes, "swap", {"c3": "BURNIN: old"}, ["c3"])}
    assert plain == {"c1": "drain", "c2": "drain", "c3": "resume"}


def test_override_restore_puts_the_persons_exact_reason_back():
    nodes = judged({"t1": "FAIL", "t2": "INCOMPLETE"})
    before = {"t1": PERSON, "t2": "fan swap"}
    fresh = kiln_sinfo.parse_sinfo(["t1|idle|none", "t2|drained|someone else: cable"])
    acts = {a["node"]: a for a in kb.plan_actions(nodes, "swap", before, ["t1", "t2"],
                                                  override_operator_drain=True, slurm=fresh)}
    assert acts["t1"]["action"] == "restore" and acts["t1"]["reason"] == PERSON and acts["t1"]["applied"]
    # a newer reason of someone else's holds t2: neither replaced by the old one nor lifted
    assert acts["t2"]["action"] == "hold" and acts["t2"]["reason"] == "someone else: cable"


def test_backend_none_never_reads_holds():
    acts = kb.plan_actions(judged({"c1": "FAIL"}), "default", {}, [], backend="none",
                           slurm=kiln_sinfo.parse_sinfo(["c1|drained|" + PERSON]))
    assert acts[0]["action"] == "drain" and acts[0]["applied"] is False


# -- the burn-in lock's restore (library/kiln_burnin_lock.py Slurm.redrain) ------------------------

def _lock_library() -> ModuleType:
    ship_module_utils()
    return load_source("kiln_burnin_lock_library", REPO / "library" / "kiln_burnin_lock.py")


class Failed(Exception):
    pass


class FakeModule:
    """run_command against a fake sinfo; scontrol recorded."""

    def __init__(self, sinfo: List[str], rc: int = 0) -> None:
        self.sinfo, self.rc, self.calls = sinfo, rc, []

    def run_command(self, argv: List[str]) -> Tuple[int, str, str]:
        self.calls.append(list(argv))
        if argv[0] == "sinfo":
            return self.rc, "\n".join(self.sinfo) + "\n", "slurm_load_partitions: Unable to contact slurm controller"
        return 0, "", ""

    def fail_json(self, msg: str, **_kw) -> None:
        raise Failed(msg)


def test_lock_restore_decides_from_sinfo_read_just_before():
    lib = _lock_library()
    module = FakeModule(["n1|idle|none", "n2|idle|none", "n3|drained|" + PERSON, "n4|down*|Not responding",
                         "n5|drained|BURNIN: x", "n6|drained|UPGRADE: run 2"])
    journal = {"n1": "BURNIN: x", "n2": "fan swap (journalled under the opt-in)", "n3": "BURNIN: y",
               "n4": "BURNIN: z", "n5": "BURNIN: x", "n6": "", "gone": "BURNIN: w"}
    restored, held, unknown = lib.Slurm(module).redrain(journal)
    assert restored == {"n1": "BURNIN: x", "n2": "fan swap (journalled under the opt-in)",
                        "n6": lib.DEFAULT_REASON}
    assert held == {"n3": PERSON, "n4": "Not responding"} and unknown == ["gone"]
    scontrols = [c for c in module.calls if c[0] == "scontrol"]
    assert scontrols == [["scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=BURNIN: x"],
                         ["scontrol", "update", "NodeName=n2", "State=DRAIN",
                          "Reason=fan swap (journalled under the opt-in)"],
                         ["scontrol", "update", "NodeName=n6", "State=DRAIN", "Reason=" + lib.DEFAULT_REASON]]
    assert module.calls[0][0] == "sinfo"  # one read, before any scontrol
    assert "n3 held by operator: " + PERSON in lib._not_drained(held, unknown)


def test_lock_restore_changes_nothing_when_sinfo_fails():
    lib = _lock_library()
    module = FakeModule([], rc=1)
    with pytest.raises(Failed, match="nothing was drained again"):
        lib.Slurm(module).redrain({"n1": "BURNIN: x"})
    assert [c[0] for c in module.calls] == ["sinfo"]
    assert lib.Slurm(FakeModule([])).redrain({}) == ({}, {}, [])


# -- the rolling upgrade's plan and report ----------------------------------------------------------

def test_upgrade_reports_held_nodes_in_the_one_wording_and_they_do_not_fail_the_run():
    rows = {"c1": {"state": "idle", "reason": ""}, "c2": {"state": "drained", "reason": PERSON}}
    plan = ku.plan(["c1", "c2"], {n: {"reachable": True, "intended": "ab", "applied": None} for n in ("c1", "c2")},
                   rows)
    assert plan["held"] == ["c2"] and plan["why"]["c2"].startswith(f"held by operator: {PERSON}")
    # c1 was to do; someone drained it after the plan, so the batch's drain held it (playbooks/upgrade.yml)
    status = {"c1": {"state": "held", "why": "held by operator: fan swap; left alone: resume it and re-run"}}
    summary = ku.summary(plan, status, "r1")
    assert summary["complete"] and summary["nodes"]["c1"]["state"] == "held"
    assert summary["lines"][0] == "c1: HELD -- held by operator: fan swap; left alone: resume it and re-run"
    assert not ku.summary(plan, {"c1": {"state": "failed", "why": "x"}})["complete"]


# -- no scontrol update around the rule -------------------------------------------------------------

def _tasks(items: list) -> List[dict]:
    out: List[dict] = []
    for item in items or []:
        if isinstance(item, dict):
            out.append(item)
            for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                out.extend(_tasks(item.get(key)))
    return out


def test_every_scontrol_update_runs_on_the_rule_from_a_fresh_read():
    """A drain or resume task's node list is the .change of kiln_slurm_node_plan, planned by the task before it
    from sinfo read by the task before that (the same task list). Modules: only kiln_burnin_lock, through decide."""
    found = []
    for path in sorted(list((REPO / "playbooks").rglob("*.yml")) + list((REPO / "roles").rglob("tasks/*.yml"))):
        data = yaml.safe_load(path.read_text())
        if not isinstance(data, list):
            continue
        for parent in [{"block": data}] + _tasks(data):
            for key in ("block", "tasks", "rescue", "always"):
                seq = [t for t in parent.get(key) or [] if isinstance(t, dict)]
                for i, task in enumerate(seq):
                    argv = str((task.get("ansible.builtin.command") or task.get("kiln_command") or {}).get("argv", ""))
                    if "scontrol" not in argv or "update" not in argv:
                        continue
                    found.append(f"{path.relative_to(REPO)}: {task['name']}")
                    assert re.search(r"\.change\b", argv), f"{path}: {task['name']} does not act on a plan's change"
                    planned = next(t for t in reversed(seq[:i]) if "ansible.builtin.set_fact" in t)
                    assert "kiln_slurm_node_plan" in yaml.safe_dump(planned["ansible.builtin.set_fact"]), task["name"]
                    read = seq[seq.index(planned) - 1]
                    assert "sinfo" in str(read.get("kiln_command", {}).get("argv")), task["name"]  # a read that cannot be lost
    assert sorted(found) == ["roles/burnin/tasks/final.yml: Resume the drained swap targets inside the reservation for the test",
                             "roles/slurm_controller/tasks/node_state.yml: node_state | Drain or resume the nodes"]
    modules = [p.name for p in sorted((REPO / "library").glob("*.py")) if '"scontrol", "update"' in p.read_text()]
    assert modules == ["kiln_burnin_lock.py"]
    assert "decide(" in (REPO / "library" / "kiln_burnin_lock.py").read_text()


# -- role slurm_controller, entry point node_state, under ansible-playbook with a fake Slurm --------

FAKE_SINFO = """#!{python}
import json, os, sys
state = json.load(open(os.environ["KILN_FAKE_SLURM"]))
args = sys.argv[1:]
nodes = args[args.index("--nodes") + 1].split(",") if "--nodes" in args else sorted(state)
for node in nodes:
    if node in state:
        print(f"{{node}}|{{state[node][0]}}|{{state[node][1] or 'none'}}")
"""

FAKE_SCONTROL = """#!{python}
import json, os, sys
path = os.environ["KILN_FAKE_SLURM"]
state = json.load(open(path))
with open(path + ".log", "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
args = dict(a.split("=", 1) for a in sys.argv[2:])
for node in args["NodeName"].split(","):
    state[node] = ["drained", args["Reason"]] if args["State"] == "DRAIN" else ["idle", ""]
json.dump(state, open(path, "w"))
"""

PLAY = """\
---
- name: Drain and resume through role slurm_controller's node_state against a fake Slurm
  hosts: slurm_controller
  gather_facts: false
  environment:
    PATH: "{{ fake_bin }}:{{ lookup('ansible.builtin.env', 'PATH') }}"
    KILN_FAKE_SLURM: "{{ fake_state }}"
  tasks:
    - name: The upgrade's batch drain
      ansible.builtin.include_role:
        name: slurm_controller
        tasks_from: node_state
      vars:
        slurm_controller_node_state_nodes: [gpu01, gpu02, gpu03]
        slurm_controller_node_state: drain
        slurm_controller_node_state_reason: "UPGRADE: to stack ab12 (kiln run r1)"

    - name: Keep the drain's decision
      ansible.builtin.set_fact:
        drain_result: "{{ slurm_controller_node_state_result }}"

    - name: The upgrade's resume on PASS
      ansible.builtin.include_role:
        name: slurm_controller
        tasks_from: node_state
      vars:
        slurm_controller_node_state_nodes: [gpu01, gpu02, gpu03, gpu04]
        slurm_controller_node_state: resume
        slurm_controller_node_state_only_reason_prefix: "UPGRADE:"

    - name: Keep the resume's decision
      ansible.builtin.set_fact:
        resume_result: "{{ slurm_controller_node_state_result }}"

    - name: A resume under the operator's explicit opt-in (the exact reason), then its restore
      ansible.builtin.include_role:
        name: slurm_controller
        tasks_from: node_state
      vars:
        slurm_controller_node_state_nodes: [gpu02]
        slurm_controller_node_state: "{{ item.state }}"
        slurm_controller_node_state_reason: "{{ item.reason }}"
        slurm_controller_node_state_operator_drains: {gpu02: "RMA-123 bad PSU"}
      loop:
        - {state: resume, reason: kiln}
        - {state: drain, reason: "RMA-123 bad PSU"}

    - name: Write the decisions
      ansible.builtin.copy:
        content: "{{ {'drain': drain_result, 'resume': resume_result} | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
      delegate_to: localhost
"""


@pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not found")
def test_node_state_entry_point_holds_a_persons_drain(tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    for name, text in (("sinfo", FAKE_SINFO), ("scontrol", FAKE_SCONTROL)):
        (fake_bin / name).write_text(text.format(python=sys.executable))
        (fake_bin / name).chmod(stat.S_IRWXU)
    state = tmp_path / "slurm.json"
    state.write_text(json.dumps({"gpu01": ["idle", ""], "gpu02": ["drained", PERSON],
                                 "gpu03": ["drained", "UPGRADE: run r0"], "gpu04": ["drained", "BURNIN: nccl slow"]}))
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                         "children": {"slurm_controller": {"hosts": {"ctl": {}}}},
                         "hosts": {"localhost": {}}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(PLAY)
    out = tmp_path / "out.json"
    proc = run_playbook("-i", str(tmp_path / "inventory.json"), str(tmp_path / "play.yml"),
                        "-e", json.dumps({"fake_bin": str(fake_bin), "fake_state": str(state), "out": str(out)}),
                        tmp_path=tmp_path)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    decisions = json.loads(out.read_text())
    assert decisions["drain"]["change"] == ["gpu01", "gpu03"] and decisions["drain"]["held"] == {"gpu02": PERSON}
    assert decisions["resume"]["change"] == ["gpu01", "gpu03"] and decisions["resume"]["held"] == {"gpu02": PERSON}
    assert decisions["resume"]["kept"] == ["gpu04 (BURNIN: nccl slow)"]
    assert re.search(r"gpu02\s+held\s+by\s+operator:\s+RMA-123\s+bad\s+PSU", text), text
    log = [json.loads(line) for line in (tmp_path / "slurm.json.log").read_text().splitlines()]
    assert log == [["update", "NodeName=gpu01,gpu03", "State=DRAIN", "Reason=UPGRADE: to stack ab12 (kiln run r1)"],
                   ["update", "NodeName=gpu01,gpu03", "State=RESUME"],
                   ["update", "NodeName=gpu02", "State=RESUME"],
                   ["update", "NodeName=gpu02", "State=DRAIN", "Reason=" + PERSON]]
    final = json.loads(state.read_text())
    assert final == {"gpu01": ["idle", ""], "gpu02": ["drained", PERSON], "gpu03": ["idle", ""],
                     "gpu04": ["drained", "BURNIN: nccl slow"]}
    assert kns.held_why(PERSON) == "held by operator: " + PERSON
