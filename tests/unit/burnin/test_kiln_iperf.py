"""module_utils/kiln/burnin/iperf.py: one node's iperf3 link result and the run's reference; the fabric check
is never PASS while a fabric node's link rate is missing.

The CI run of 0d5cc97 and of 925bb82 ended "RESULT: PASS" with a node's task failed: ansible.builtin.command
had lost iperf3's JSON (rc 0, empty stdout; module_utils/kiln/process.py) and the set_fact that read it
with from_json failed on the node, so its link rate was silently left out. Whatever iperf3 printed now
becomes a result or a reason, and a fabric node without a rate leaves the fabric check INCOMPLETE.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

import kiln_data
from kiln_paths import REPO
from kiln.burnin.iperf import iperf_reference, kiln_iperf_link
from kiln.errors import FilterError

FIX = REPO / "tests" / "fixtures" / "iperf3"
OK = (FIX / "iperf3-3.12-client-1s.json").read_text()
REFUSED = (FIX / "iperf3-3.12-client-connect-timeout.json").read_text()
CPU = (REPO / "tests" / "fixtures" / "nccl-tests" / "derived-kiln-cpu-engine-3node-example.txt").read_text()


def test_a_real_run_gives_its_received_rate():
    link = kiln_iperf_link({"rc": 0, "stdout": OK, "stderr": ""}, "n1", "n2")
    assert link == {"client": "n1", "server": "n2", "gbps": 15.405, "error": ""}


@pytest.mark.parametrize(("run", "why"), [
    ({"rc": 1, "stdout": REFUSED, "stderr": ""}, "iperf3 n1->n2: unable to connect to server: Connection timed out"),
    ({"rc": 0, "stdout": "", "stderr": ""}, "iperf3 n1->n2 printed no JSON (rc 0)"),  # the lost output
    ({"rc": 1, "stdout": "", "stderr": "iperf3: error - unable to connect"}, "printed no JSON (rc 1): iperf3: error"),
    ({"rc": 0, "stdout": OK[: len(OK) // 2], "stderr": ""}, "not one JSON document"),  # truncated
    ({"rc": 0, "stdout": OK + OK, "stderr": ""}, "not one JSON document"),  # doubled (iperf3 3.16/3.17)
    ({"rc": 0, "stdout": "[1, 2]", "stderr": ""}, "not an object"),
    ({"rc": 0, "stdout": '{"end": {"sum_received": {"bits_per_second": NaN}}}', "stderr": ""}, "no finite received rate"),
    ({"rc": 0, "stdout": '{"end": {"sum_received": {"bits_per_second": 0}}}', "stderr": ""}, "no finite received rate"),
    ({"rc": 0, "stdout": '{"end": {"sum_received": {"bits_per_second": "9e9"}}}', "stderr": ""}, "no finite received rate"),
    ({"rc": 0, "stdout": '{"end": {}}', "stderr": ""}, "no finite received rate"),
    ({"rc": 137, "stdout": OK, "stderr": "Killed"}, "exited with rc 137: Killed"),
    ({"skipped": True}, "did not run"),
    (None, "did not run"),
])
def test_anything_else_is_no_rate_and_says_why(run, why):
    link = kiln_iperf_link(run, "n1", "n2")
    assert link["gbps"] is None
    assert why in link["error"]


@pytest.mark.parametrize(("client", "server"), [(None, "n2"), ("n1", ""), (3, "n2"), ("n1", ["n2"])])
def test_a_client_or_server_that_is_not_a_name_is_refused(client, server):
    with pytest.raises(FilterError, match="kiln_iperf_link"):
        kiln_iperf_link({"rc": 0, "stdout": OK}, client, server)


@settings(max_examples=300, deadline=None)
@given(rc=st.one_of(st.none(), st.integers(-300, 300), st.booleans(), st.text(max_size=3)),
       stdout=st.one_of(st.none(), st.text(max_size=200), st.sampled_from([OK, REFUSED, OK[:500], OK + "\nx"]),
                        st.builds(lambda v: '{"end": {"sum_received": {"bits_per_second": %s}}}' % v,
                                  st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                                            st.integers().map(str), st.just("null"), st.just('"x"')))),
       stderr=st.one_of(st.none(), st.text(max_size=50)))
def test_property_never_raises_and_a_rate_is_finite_positive_or_there_is_a_reason(rc, stdout, stderr):
    link = kiln_iperf_link({"rc": rc, "stdout": stdout, "stderr": stderr}, "a", "b")
    if link["gbps"] is None:
        assert link["error"]
    else:
        assert link["error"] == "" and rc == 0 and isinstance(link["gbps"], float)
        assert math.isfinite(link["gbps"]) and link["gbps"] > 0


def test_reference_is_the_slowest_pair_and_names_every_unmeasured_node():
    links = [kiln_iperf_link({"rc": 0, "stdout": OK}, "n1", "n2"),
             {"client": "n2", "server": "n3", "gbps": 9.5, "error": ""},
             kiln_iperf_link({"rc": 0, "stdout": ""}, "n3", "n1")]
    ref = iperf_reference(links, ["n1", "n2", "n3", "n4"])
    assert ref["value"] == 9.5 and ref["pair"] == "n2->n3"
    assert [p["pair"] for p in ref["pairs"]] == ["n1->n2", "n2->n3"]
    assert ref["unmeasured"] == ["n3: iperf3 n3->n1 printed no JSON (rc 0)",
                                 "n4: no iperf3 result (its iperf3 phase did not finish on the node)"]
    assert "unmeasured" not in iperf_reference(links[:2], ["n1", "n2"])
    assert iperf_reference([], []) is None
    nothing = iperf_reference([], ["n1"])
    assert nothing["value"] is None and nothing["unmeasured"]


def _fabric(reference):
    return [{"id": "nccl.fabric.all_reduce", "ran": True, "nodes": ["a", "b"], "text": CPU, "rc": 0, "sku": "cpu",
             "reference": reference}]


def _nodes():
    tools = {"kiln-cpu-allreduce": "/usr/local/bin/kiln-cpu-allreduce", "mpirun": "/usr/bin/mpirun",
             "iperf3": "/usr/bin/iperf3", "required": ["kiln-cpu-allreduce", "mpirun", "iperf3"]}
    return {n: {"tools": tools, "kiln_gpu": {"pci_gpu_count": 0}, "nccl": {"ran": False}} for n in ("a", "b")}


def test_the_fabric_check_is_incomplete_while_a_fabric_node_has_no_link_rate():
    measured = iperf_reference([{"client": "a", "server": "b", "gbps": 18.0, "error": ""},
                                {"client": "b", "server": "a", "gbps": 17.0, "error": ""}], ["a", "b"])
    out = kiln_data.assemble(_nodes(), _fabric(measured), mode="quick")
    assert out["fabric"][0]["status"] == "PASS"
    assert out["fabric"][0]["reference"]["ratio"] is not None
    lost = iperf_reference([{"client": "a", "server": "b", "gbps": 18.0, "error": ""}], ["a", "b"])
    out = kiln_data.assemble(_nodes(), _fabric(lost), mode="quick")
    check = out["fabric"][0]
    assert check["status"] == "INCOMPLETE"
    assert "raw link rate (iperf3) was not measured for b: no iperf3 result" in check["detail"]
    assert check["reference"]["value"] == 18.0
    none = iperf_reference([], ["a", "b"])
    out = kiln_data.assemble(_nodes(), _fabric(none), mode="quick")
    assert out["fabric"][0]["status"] == "INCOMPLETE" and out["fabric"][0]["reference"]["value"] is None
