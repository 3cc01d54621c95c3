"""One node's burn-in data as one typed record (module_utils/kiln/burnin/evidence.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln_data
from kiln.burnin.evidence import ABSENT, KEYS, NodeEvidence, node_evidence
from kiln.verdict import KilnConfigError

NODE = {"kiln_gpu": {"pci_gpu_count": 0}, "gpu_present": False, "engine": "cpu", "tools": {"mpirun": "/usr/bin/mpirun"},
        "dcgm": None, "nccl": {"ran": False, "why": "no NVIDIA GPU on this node"}, "xid_log": "", "excluded": ""}


def test_what_the_preflight_and_active_phases_write_is_read() -> None:
    ev = node_evidence("c1", NODE)
    assert isinstance(ev, NodeEvidence) and ev.name == "c1" and ev.engine == "cpu"
    assert ev.collected("tools") and ev.collected("dcgm") and ev.dcgm is None  # collected, nothing in it
    assert not ev.collected("fabric") and ev.fabric is ABSENT and not ev.collected("stack")
    assert node_evidence("c1", {}).collected("nccl") is False


@pytest.mark.parametrize("raw, named", [
    ({"dcmg": {"present": True}}, "unknown key(s) dcmg"),
    ({"ncl": {"ran": True}, "Tools": {}}, "Tools, ncl"),
    ({"kiln_gpu": "H100"}, "kiln_gpu must be a mapping"),
    ({"dcgm": "PASS"}, "dcgm must be a mapping"),
    ({"nccl": ["ran"]}, "nccl must be a mapping"),
    ({"excluded": True}, "excluded must be the reason"),
    ({"rdma": {"rdma.write_bw": "PASS"}}, "rdma must be a list"),
    ({"engine": 1}, "engine must be cpu or nccl-tests"),
])
def test_a_misspelt_key_or_a_wrong_type_names_the_node_and_the_key(raw, named) -> None:
    with pytest.raises(KilnConfigError, match=r"^c7: .*" + named.replace("(", r"\(").replace(")", r"\)")):
        node_evidence("c7", raw)


def test_the_judge_refuses_a_misspelt_measurement_instead_of_leaving_it_unjudged() -> None:
    """Before the record, `dcmg` (a typo for dcgm) left the DCGM check out; the mode's required checks
    caught it as INCOMPLETE only in modes that require it. Now the run stops as a configuration error."""
    with pytest.raises(KilnConfigError, match="dcmg"):
        kiln_data.assemble({"c1": dict(NODE, dcmg={"present": True, "rc": 0, "stdout": ""})}, mode="quick")


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(KEYS)), st.none() | st.booleans() | st.text(max_size=5)
                       | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), max_size=6))
def test_any_input_is_a_record_or_a_configuration_error(raw) -> None:
    try:
        ev = node_evidence("n", raw)
    except KilnConfigError as exc:
        assert str(exc).startswith("n: ")
        return
    for key in KEYS:
        if key in raw and raw[key] is not None and key not in ("gpu_present", "rdma"):
            assert getattr(ev, key) == raw[key]
