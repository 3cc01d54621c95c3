"""Issue 31, "Nobody's drain but kiln's is ever changed": module_utils/kiln/slurm/node_state.py under interleavings.

A small Slurm is modelled (nodes with a state and a reason; ``scontrol update State=DRAIN/RESUME``
as slurmctld applies it). People drain, down and resume nodes, jobs start and end, slurmd stops
answering -- at random times, between any two of kiln's steps. kiln always reads sinfo and acts
only on what :func:`kiln_node_state.plan` returns: the upgrade's batch drain and resume, the
burn-in's FAIL drain, its resume of swap targets (with and without the operator's explicit opt-in,
``kiln_burnin_override_operator_drain``) and its restore of the journalled reason. After every one
of kiln's steps: a reason kiln did not set is never replaced, and a node drained by a person is never
resumed -- except the exact drain an operator opted in to lift, which the restore puts back exactly
(or leaves to a newer reason of someone else's), never leaving the node in service.
"""

from __future__ import annotations

import sys
from typing import Dict, List, Optional

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kiln_paths import REPO
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.slurm import node_state as kns  # noqa: E402
from kiln.slurm import sinfo as kiln_sinfo  # noqa: E402

NODES = ("gpu01", "gpu02", "gpu03")
PERSON_REASONS = ("RMA-123 bad PSU", "fan swap", "UPGRADES by hand", "BURNIN without a colon", "UPGRADE later",
                  "burnin: lower case", "kiln", "operator: maintenance")
SLURM_REASONS = ("Not responding", "Kill task failed")
KILN_REASONS = ("BURNIN: nccl.pair.all_reduce: slow", "BURNIN: restored after an interrupted burn-in",
                "UPGRADE: to stack ab12 (kiln run r1)", "UPGRADE: to stack cd34 (kiln run r2)")
#: States as sinfo prints them, with the suffixes kiln must read (kiln_sinfo).
IN_SERVICE = ("idle", "allocated", "mixed", "idle@", "reserved")
DRAINED = ("drained", "draining", "mixed+drain", "drained*", "drained$")
DOWN = ("down", "down*", "down~", "idle*")


class Node:
    """One Slurm node: what sinfo shows, and who set its reason."""

    def __init__(self) -> None:
        self.state = "idle"
        self.reason = ""
        self.setter: Optional[str] = None  # "person", "slurm", "kiln" or None (no reason)

    def row(self) -> str:
        return f"{self.state}|{self.reason or 'none'}"


def scontrol(node: Node, action: str, reason: str = "") -> None:
    """What slurmctld does on ``scontrol update NodeName=... State=DRAIN Reason=... / State=RESUME``."""
    if action == kns.DRAIN:
        if node.state in ("allocated", "mixed"):
            node.state = "mixed+drain"
        elif kiln_sinfo.condition(node.state) == kiln_sinfo.AVAILABLE:
            node.state = "drained"
        elif node.state == "idle*":
            node.state = "drained*"
        node.reason, node.setter = reason, "kiln"
        return
    if kiln_sinfo.resumable(node.state):
        node.state = "allocated" if node.state == "mixed+drain" else "idle"
        node.reason, node.setter = "", None


class Cluster(RuleBasedStateMachine):
    """People, Slurm and kiln acting on three nodes in any order; kiln reads sinfo, then acts through the plan."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: Dict[str, Node] = {n: Node() for n in NODES}
        # the burn-in's restore journal: {node: reason lifted} (kiln's own, or a person's under the opt-in)
        self.journal: Dict[str, str] = {}
        self.consented: Dict[str, str] = {}  # person's drains an operator opted in to lift: {node: exact reason}
        self.kiln_steps = 0

    # -- people and Slurm ---------------------------------------------------------------------------

    @rule(node=st.sampled_from(NODES), reason=st.sampled_from(PERSON_REASONS),
          state=st.sampled_from(("drained", "draining", "down", "drained$")))
    def person_drains_or_downs(self, node: str, reason: str, state: str) -> None:
        n = self.nodes[node]
        n.state = "mixed+drain" if state == "draining" and n.state in ("allocated", "mixed") else (
            "drained" if state == "draining" else state)
        n.reason, n.setter = reason, "person"
        self.consented.pop(node, None)

    @rule(node=st.sampled_from(NODES))
    def person_resumes(self, node: str) -> None:
        n = self.nodes[node]
        n.state, n.reason, n.setter = "idle", "", None
        self.consented.pop(node, None)

    @rule(node=st.sampled_from(NODES), state=st.sampled_from(IN_SERVICE))
    def jobs_come_and_go(self, node: str, state: str) -> None:
        n = self.nodes[node]
        if kiln_sinfo.condition(n.state) == kiln_sinfo.AVAILABLE:
            n.state = state
        elif n.state == "mixed+drain" and state == "idle":
            n.state = "drained"

    @rule(node=st.sampled_from(NODES), reason=st.sampled_from(SLURM_REASONS), state=st.sampled_from(DOWN))
    def slurmd_stops_answering(self, node: str, reason: str, state: str) -> None:
        n = self.nodes[node]
        if kiln_sinfo.condition(n.state) == kiln_sinfo.AVAILABLE:
            n.state, n.reason, n.setter = state, reason, "slurm"

    @rule(node=st.sampled_from(NODES))
    def slurmd_returns(self, node: str) -> None:
        n = self.nodes[node]
        if n.setter == "slurm" and kiln_sinfo.condition(n.state) == kiln_sinfo.DOWN:
            n.state, n.reason, n.setter = "idle", "", None  # ReturnToService

    @rule(node=st.sampled_from(NODES), state=st.sampled_from(("weird_new_state", "drained+zzz", "")))
    def slurm_shows_a_state_kiln_does_not_know(self, node: str, state: str) -> None:
        self.nodes[node].state = state

    # -- kiln: read sinfo, plan, act on the plan's change only --------------------------------------

    def sinfo(self) -> List[str]:
        return [f"{name}|{node.row()}" for name, node in self.nodes.items()]

    def act(self, wanted: List[str], action: str, reason: str = "", prefix: str = "",
            operator_drains: Optional[Dict[str, str]] = None) -> Dict[str, object]:
        before = {name: (n.state, n.reason, n.setter) for name, n in self.nodes.items()}
        decision = kns.plan(self.sinfo(), wanted, action, reason, prefix, operator_drains)
        for name in decision["change"]:
            scontrol(self.nodes[name], action, reason)
        self.kiln_steps += 1
        lifted = operator_drains or {}
        for name, (state, old_reason, setter) in before.items():
            if setter in ("person", "slurm") and lifted.get(name) != old_reason:
                n = self.nodes[name]
                assert (n.state, n.reason) == (state, old_reason), (
                    f"kiln changed {name}: {state}|{old_reason} ({setter}) -> {n.state}|{n.reason} "
                    f"by {action} {reason!r} {prefix!r}: {decision}")
                assert name not in decision["change"]
            if setter in ("person", "slurm") and name in wanted and name not in decision["change"]:
                assert decision["held"].get(name) == old_reason or name in decision["unchanged"], decision
                if name in decision["held"]:
                    assert decision["why"][name].startswith(f"held by operator: {old_reason or 'no reason'}")
        return decision

    @rule(wanted=st.lists(st.sampled_from(NODES), min_size=1, max_size=3), reason=st.sampled_from(KILN_REASONS))
    def kiln_drains(self, wanted: List[str], reason: str) -> None:
        """The upgrade's batch drain, the burn-in's FAIL drain, playbooks/slurm_node_state.yml."""
        decision = self.act(wanted, kns.DRAIN, reason)
        for name in decision["change"]:
            assert self.nodes[name].reason == reason

    @rule(wanted=st.lists(st.sampled_from(NODES), min_size=1, max_size=3),
          prefix=st.sampled_from(("", "BURNIN:", "UPGRADE:")))
    def kiln_resumes(self, wanted: List[str], prefix: str) -> None:
        """The upgrade's resume on PASS (prefix UPGRADE:), a resume through playbooks/slurm_node_state.yml."""
        before = {name: self.nodes[name].reason for name in wanted}
        decision = self.act(wanted, kns.RESUME, prefix=prefix)
        for name in decision["change"]:
            assert before[name].startswith(prefix or kns.KILN_REASON_PREFIXES)

    @rule(node=st.sampled_from(NODES), override=st.booleans())
    def burnin_resumes_a_swap_target(self, node: str, override: bool) -> None:
        """The burn-in's resume inside its reservation: journal the reason first, then read, plan and resume.

        With the opt-in the operator consents to lifting this node's drain -- the exact reason read now."""
        n = self.nodes[node]
        if node in self.journal or not kiln_sinfo.resumable(n.state):
            return
        recorded = n.reason
        self.journal[node] = recorded
        opt_in = {node: recorded} if override and not kns.kiln_reason(recorded) else None
        decision = self.act([node], kns.RESUME, operator_drains=opt_in)
        if node in decision["change"]:
            assert kns.kiln_reason(recorded) or opt_in, decision
            if opt_in:
                self.consented[node] = recorded
        else:
            self.journal.pop(node)  # nothing was lifted: nothing to restore

    @precondition(lambda self: self.journal)
    @rule(data=st.data())
    def burnin_restores(self, data: st.DataObject) -> None:
        """The burn-in's restore (verdict not PASS, or the lock's release/recovery after a killed run)."""
        node = data.draw(st.sampled_from(sorted(self.journal)))
        recorded = self.journal.pop(node)
        reason = recorded or "BURNIN: restored after an interrupted burn-in"
        decision = self.act([node], kns.DRAIN, reason)
        n = self.nodes[node]
        # never left in service: the recorded reason is back, or someone else's reason holds the node
        assert n.reason == reason or node in decision["held"], (n.state, n.reason, decision)
        assert kiln_sinfo.condition(n.state) != kiln_sinfo.AVAILABLE or node in decision["held"], (
            n.state, n.reason, decision)
        if node in self.consented:
            # the person's exact reason, back where it was (unless a newer reason of someone else's holds it)
            assert n.reason == self.consented.pop(node) or node in decision["held"]

    @invariant()
    def only_consented_person_drains_are_lifted(self) -> None:
        for name in self.consented:
            assert name in self.journal, f"{name}: a person's drain lifted without a journalled restore"


Cluster.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestInterleavings = Cluster.TestCase


# -- the rule itself, for any row ------------------------------------------------------------------

REASONS = st.one_of(st.sampled_from(PERSON_REASONS + SLURM_REASONS + KILN_REASONS + ("",)),
                    st.text(max_size=30).filter(lambda t: "|" not in t and "\n" not in t))
STATES = st.one_of(st.sampled_from(IN_SERVICE + DRAINED + DOWN + ("weird_new_state", "drained+zzz", "", "fail")),
                   st.text(max_size=12).filter(lambda t: "|" not in t and "\n" not in t))


@given(state=STATES, current=REASONS, action=st.sampled_from(kns.ACTIONS),
       reason=st.sampled_from(KILN_REASONS), prefix=st.sampled_from(("", "BURNIN:", "UPGRADE:", "BURNIN: nccl")))
@settings(max_examples=400, deadline=None)
def test_someone_elses_reason_is_never_changed(state: str, current: str, action: str, reason: str,
                                               prefix: str) -> None:
    rows = kiln_sinfo.parse_sinfo([f"gpu01|{state}|{current or 'none'}"])
    row = rows.get("gpu01")
    outcome, why = kns.decide(row, action, reason, prefix)
    assert outcome in kns.OUTCOMES
    current = row["reason"] if row else ""
    if current and not kns.kiln_reason(current):
        assert outcome in (kns.HELD, kns.UNCHANGED), (state, current, action, outcome)
        if outcome == kns.HELD:
            assert why.startswith(f"held by operator: {current.strip() or 'no reason'}")
    if action == kns.RESUME and outcome == kns.CHANGE:
        assert current.startswith(prefix or kns.KILN_REASON_PREFIXES)
        assert kiln_sinfo.resumable(row["state"])


@given(state=STATES, current=REASONS)
@settings(max_examples=200, deadline=None)
def test_an_unknown_state_is_never_resumed(state: str, current: str) -> None:
    row = {"state": state, "reason": current}
    outcome, _why = kns.decide(row, kns.RESUME)
    if kiln_sinfo.condition(state) == kiln_sinfo.UNRECOGNISED:
        assert outcome != kns.CHANGE


def test_plan_buckets_every_requested_node_once() -> None:
    lines = ["a|idle|none", "b|drained|RMA 1", "c|drained|BURNIN: x", "d|weird|BURNIN: y", "e|drained|UPGRADE: z"]
    plan = kns.plan(lines, ["a", "b", "c", "d", "e", "f", "a"], kns.RESUME, prefix="BURNIN:")
    assert plan["change"] == ["c"] and plan["unchanged"] == ["a"] and plan["held"] == {"b": "RMA 1"}
    assert plan["left"] == ["d"] and plan["kept"] == ["e (UPGRADE: z)"] and plan["unknown"] == ["f"]
    assert sorted(plan["why"]) == ["a", "b", "c", "d", "e", "f"]

