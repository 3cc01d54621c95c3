"""RDMA stack, HCA generations and GPUDirect RDMA: schema, rules, kiln_gpudirect, packages and the DOCA repository."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_compat_engine.data import compat_data
from kiln_compat_engine.errors import CompatError
from kiln_compat_engine.gpudirect import kiln_gpudirect
from kiln_compat_engine.inventory import kiln_stacks_by_host
from kiln_compat_engine.packages import kiln_ofed_builds, kiln_packages, kiln_pkg
from kiln_compat_engine.plan import kiln_plan, kiln_plan_text
from kiln_compat_engine.report import kiln_stack_report
from kiln_compat_engine.repos import kiln_doca_repo
from kiln_compat_engine.rules import RULES, kiln_stack_violations
from kiln_compat_engine.stack import stack_problems

TODAY = "2026-12-02"
NEW_RULES = ("ofed-mlnx-eol", "doca-os", "doca-kernel", "doca-profile", "ofed-hca", "hca-detected-unknown",
             "gpudirect-peermem-inbox", "gpudirect-dmabuf-flavor", "gpudirect-dmabuf-kernel", "gpudirect-dmabuf-cuda",
             "gpudirect-dmabuf-gpu")
GOOD_DMA = {"driver_flavor": "open", "kernel": "6.8.0-45-generic", "cuda": "13.0.2", "gpu": "H100"}
HCAS = ["ConnectX-3", "ConnectX-3 Pro", "ConnectX-4", "ConnectX-4 Lx", "ConnectX-5", "ConnectX-5 Ex", "ConnectX-6", "ConnectX-6 Dx", "ConnectX-6 Lx",
        "ConnectX-7", "ConnectX-8", "BlueField", "BlueField-2", "BlueField-3"]


def rules_of(stack: Any, **kw: Any) -> dict[str, str]:
    return {v["rule"]: v["severity"] for v in kiln_stack_violations(stack, today=kw.pop("today", TODAY), **kw)
            if v["rule"] in NEW_RULES + ("gpudirect-flavor", "gpudirect-kernel")}


def test_new_rule_ids_are_registered() -> None:
    assert set(NEW_RULES) <= set(RULES)
    assert compat_data()["ofed"]["hca_generations"]["names"] == HCAS  # the shared contract, in its order


# ---------------------------------------------------------------------------
# schema

@pytest.mark.parametrize(("stack", "key", "text"), [
    ({"hca": "ConnectX-9"}, "kiln_stack.hca", "known: ConnectX-3, ConnectX-3 Pro, ConnectX-4"),
    ({"hca": ["ConnectX-7", "Connectx-7"]}, "kiln_stack.hca[1]", "Did you mean 'ConnectX-7'?"),
    ({"hca": [7]}, "kiln_stack.hca[0]", "the YAML integer 7"),
    ({"hca": ["ConnectX-7"] * 17}, "kiln_stack.hca", "at most 16"),
    ({"hca": {"a": 1}}, "kiln_stack.hca", "a mapping"),
    ({"ofed": {"kind": "doca", "gpudirect": "dmabuf"}}, "kiln_stack.ofed.gpudirect", "Did you mean 'dma_buf'?"),
    ({"ofed": {"kind": "doca", "gpudirect": True}}, "kiln_stack.ofed.gpudirect", "YAML boolean"),
    ({"ofed": {"kind": "doca", "profile": "doca-ofd"}}, "kiln_stack.ofed.profile", "Did you mean 'doca-ofed'?"),
    ({"ofed": {"kind": "doca", "profile": 3.2}}, "kiln_stack.ofed.profile", "YAML float"),
    ({"ofed": {"kind": "doca", "version": 3.2}}, "kiln_stack.ofed.version", "Quote the version"),
    ({"ofed": {"kind": "doca", "version": ["3.2.1"]}}, "kiln_stack.ofed.version", "a list"),
    ({"ofed": {"kind": "doca", "version": "3" * 5000}}, "kiln_stack.ofed.version", "characters"),
    ({"ofed": {"kind": "doca", "flavour": "x"}}, "kiln_stack.ofed.flavour", "unknown key"),
    ({"builds": {"rdma_core": "latest"}}, "kiln_stack.builds.rdma_core", "not the exact"),
])
def test_schema_names_the_key(stack: dict[str, Any], key: str, text: str) -> None:
    problems = stack_problems(stack)
    assert [p["key"] for p in problems] == [key], problems
    assert text in problems[0]["message"] + problems[0]["fix"]


def test_good_new_fields_pass_the_schema() -> None:
    assert stack_problems({"hca": ["ConnectX-7", "BlueField-3"], "ofed": {"kind": "doca", "version": "3.2.1",
                                                                         "gpudirect": "peermem", "profile": "doca-all"},
                           "builds": {"rdma_core": "44.0-2", "perftest": "4.5+0.17-1", "doca_ofed": "2.9.5-0.1.8"}}) == []


# ---------------------------------------------------------------------------
# rules: stack -> expected violations (of the RDMA family)

CASES = [
    # doca-os
    ("doca32-ubuntu24", {"os": "ubuntu-24.04", "ofed": {"kind": "doca", "version": "3.2.1"}}, {}),
    ("doca32-debian13", {"os": "debian-13", "ofed": {"kind": "doca", "version": "3.2.1"}}, {}),
    ("doca29-debian13", {"os": "debian-13", "ofed": {"kind": "doca", "version": "2.9.5"}}, {"doca-os": "error"}),
    ("doca29-ubuntu20", {"os": "ubuntu-20.04", "ofed": {"kind": "doca", "version": "2.9.1"}}, {"doca-os": "error"}),
    ("doca30-no-os-data", {"os": "ubuntu-24.04", "ofed": {"kind": "doca", "version": "3.0"}}, {"doca-os": "warning"}),
    # doca-kernel
    ("doca29-generic-kernel", {"os": "ubuntu-22.04", "kernel": "5.15.0-125-generic", "ofed": {"kind": "doca", "version": "2.9.1"}}, {}),
    ("doca29-hwe-kernel", {"os": "ubuntu-22.04", "kernel": "6.8.0-45-generic", "ofed": {"kind": "doca", "version": "2.9.1"}},
     {"doca-kernel": "error"}),
    ("doca32-dkms-hwe", {"os": "ubuntu-22.04", "kernel": "6.8.0-45-generic", "ofed": {"kind": "doca", "version": "3.2.1"}}, {}),
    ("doca32-foreign-kernel", {"os": "debian-12", "kernel": "6.12.9-amd64", "ofed": {"kind": "doca", "version": "3.2.1"}},
     {"doca-kernel": "error"}),
    # doca-profile
    ("profile-too-new", {"ofed": {"kind": "doca", "version": "2.9.5", "profile": "doca-host-basic"}}, {"doca-profile": "error"}),
    ("profile-ok", {"ofed": {"kind": "doca", "version": "3.2.1", "profile": "doca-host-basic"}}, {}),
    # ofed-hca
    ("cx4-doca29", {"hca": "ConnectX-4", "ofed": {"kind": "doca", "version": "2.9.5"}}, {}),
    ("cx4-doca32", {"hca": "ConnectX-4", "ofed": {"kind": "doca", "version": "3.2.1"}}, {"ofed-hca": "error"}),
    ("cx8-doca29", {"hca": ["ConnectX-7", "ConnectX-8"], "ofed": {"kind": "doca", "version": "2.9.5"}}, {"ofed-hca": "error"}),
    ("cx8-doca32", {"hca": "ConnectX-8", "ofed": {"kind": "doca", "version": "3.2.1"}}, {}),
    ("bf3-mlnx", {"hca": "BlueField-3", "ofed": {"kind": "mlnx", "version": "24.10-4.1.4.0"}},
     {"ofed-hca": "error", "ofed-mlnx-eol": "warning"}),
    ("cx8-mlnx", {"hca": "ConnectX-8", "ofed": {"kind": "mlnx", "version": "24.10-4.1.4.0"}},
     {"ofed-hca": "error", "ofed-mlnx-eol": "warning"}),
    ("cx7-mlnx", {"hca": "ConnectX-7", "ofed": {"kind": "mlnx", "version": "24.10-4.1.4.0"}}, {"ofed-mlnx-eol": "warning"}),
    ("cx8-inbox", {"hca": "ConnectX-8", "ofed": "inbox"}, {}),
    # gpudirect, explicit
    ("peermem-inbox", {"ofed": {"kind": "inbox", "gpudirect": "peermem"}}, {"gpudirect-peermem-inbox": "error"}),
    ("peermem-doca", {"ofed": {"kind": "doca", "version": "3.2.1", "gpudirect": "peermem"}, "driver_flavor": "proprietary"}, {}),
    ("dmabuf-ok", {"ofed": {"kind": "inbox", "gpudirect": "dma_buf"}, **GOOD_DMA}, {}),
    ("dmabuf-proprietary", {"ofed": {"kind": "inbox", "gpudirect": "dma_buf"}, **dict(GOOD_DMA, driver_flavor="proprietary")},
     {"gpudirect-dmabuf-flavor": "error"}),
    ("dmabuf-old-kernel", {"ofed": {"kind": "doca", "version": "3.2.1", "gpudirect": "dma_buf"},
                           **dict(GOOD_DMA, kernel="5.10.0-28-amd64")}, {"gpudirect-dmabuf-kernel": "error"}),
    ("dmabuf-old-cuda", {"ofed": {"kind": "inbox", "gpudirect": "dma_buf"}, **dict(GOOD_DMA, cuda="11.4")},
     {"gpudirect-dmabuf-cuda": "error"}),
    ("dmabuf-volta", {"ofed": {"kind": "inbox", "gpudirect": "dma_buf"}, **dict(GOOD_DMA, gpu="V100", cuda="12.4")},
     {"gpudirect-dmabuf-gpu": "error"}),
    ("dmabuf-unknowns", {"ofed": {"kind": "inbox", "gpudirect": "dma_buf"}}, {}),
    ("none-proprietary-inbox", {"ofed": {"kind": "inbox", "gpudirect": "none"}, "driver_flavor": "proprietary"}, {}),
    # gpudirect, auto: the inbox warnings stay warnings
    ("auto-inbox-proprietary", {"ofed": "inbox", "driver_flavor": "proprietary"}, {"gpudirect-flavor": "warning"}),
    ("auto-inbox-old-kernel", {"ofed": "inbox", "kernel": "5.10.0-28-amd64"}, {"gpudirect-kernel": "warning"}),
    ("auto-doca-proprietary", {"ofed": {"kind": "doca", "version": "3.2.1"}, "driver_flavor": "proprietary"}, {}),
]


@pytest.mark.parametrize(("stack", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rdma_rules(stack: dict[str, Any], expected: dict[str, str]) -> None:
    assert rules_of(stack) == expected


def test_every_new_rule_has_a_positive_case() -> None:
    seen = {r for _n, _s, exp in CASES for r in exp} | {"hca-detected-unknown"}
    assert set(NEW_RULES) <= seen


def test_fixes_move_to_a_release_that_works() -> None:
    (v,) = [x for x in kiln_stack_violations({"hca": "ConnectX-4", "ofed": {"kind": "doca", "version": "3.2.1"}}, today=TODAY)
            if x["rule"] == "ofed-hca"]
    assert v["fix_stack"] == {"ofed": {"kind": "doca", "version": "2.9.5"}} and "2.9.5" in v["fix"]
    (v,) = [x for x in kiln_stack_violations({"os": "ubuntu-22.04", "kernel": "6.8.0-45-generic",
                                              "ofed": {"kind": "doca", "version": "2.9.1"}}, today=TODAY)
            if x["rule"] == "doca-kernel"]
    assert v["fix_stack"]["ofed"]["version"] == "3.2.1"
    fixed = kiln_stack_violations({"os": "ubuntu-22.04", "kernel": "6.8.0-45-generic", **v["fix_stack"]}, today=TODAY)
    assert not [x for x in fixed if x["severity"] == "error"]


def test_mlnx_eol_is_a_warning_before_the_date_and_an_error_after() -> None:
    stack = {"ofed": {"kind": "mlnx", "version": "24.10-4.1.4.0"}}
    assert rules_of(stack, today="2027-10-31") == {"ofed-mlnx-eol": "warning"}
    assert rules_of(stack, today="2027-11-01") == {"ofed-mlnx-eol": "error"}
    (v,) = [x for x in kiln_stack_violations(stack, today="2028-01-01") if x["rule"] == "ofed-mlnx-eol"]
    assert v["confidence"] == "DERIVED" and v["fix_stack"]["ofed"]["kind"] == "doca"


def test_detected_hcas_are_checked_and_unknown_ones_warned() -> None:
    stack = {"ofed": {"kind": "doca", "version": "3.2.1"}}
    assert rules_of(stack, detected_hcas=["ConnectX-7"]) == {}
    assert rules_of(stack, detected_hcas=["ConnectX-4"]) == {"ofed-hca": "error"}
    assert rules_of(stack, detected_hcas=["hca_type MT4133"]) == {"hca-detected-unknown": "warning"}
    assert rules_of({}, detected_hcas=["ConnectX-9"]) == {"hca-detected-unknown": "warning"}
    (bad,) = kiln_stack_violations(stack, detected_hcas=[{"x": 1}])
    assert bad["rule"] == "invalid-stack" and bad["components"] == ["detected_hcas"]


def test_inventory_reports_detected_hcas_from_fabric_facts() -> None:
    fabric = {"hcas": [{"name": "mlx5_0", "hca_type": "MT4115", "model": "ConnectX-4"},
                       {"name": "mlx5_1", "hca_type": "MT4133", "model": None}, "junk"]}
    hv = {"n1": {"kiln_stack": {"ofed": {"kind": "doca", "version": "3.2.1"}}, "ansible_facts": {"kiln_fabric": fabric}},
          "n2": {"kiln_stack": {"ofed": {"kind": "doca", "version": "3.2.1"}}}}
    groups = kiln_stacks_by_host(hv, ["n1", "n2"])
    assert [g["hosts"] for g in groups] == [["n1"], ["n2"]]
    assert groups[0]["detected_hcas"] == ["ConnectX-4", "hca_type MT4133"] and "detected_hcas" not in groups[1]
    report = kiln_stack_report(groups, today=TODAY)
    assert any("[ofed-hca] n1" in line and "ConnectX-4 (the host reports)" in line for line in report["errors"])
    assert any("[hca-detected-unknown] n1" in line and "MT4133" in line for line in report["warnings"])


def test_preflight_refusals_of_issue_15() -> None:
    refused = {
        "doca-unsupported-os": {"os": "ubuntu-20.04", "ofed": {"kind": "doca", "version": "3.2.1"}},
        "doca-unsupported-kernel": {"os": "debian-12", "kernel": "6.12.9-amd64", "ofed": {"kind": "doca", "version": "3.2.1"}},
        "peermem-inbox": {"ofed": {"kind": "inbox", "gpudirect": "peermem"}},
        "dmabuf-proprietary": {"ofed": {"kind": "inbox", "gpudirect": "dma_buf"}, "driver_flavor": "proprietary"},
        "dmabuf-old-kernel": {"ofed": {"kind": "inbox", "gpudirect": "dma_buf"}, "kernel": "5.10.0-28-amd64"},
        "dropped-hca": {"hca": "ConnectX-4", "ofed": {"kind": "doca", "version": "3.2.1"}},
    }
    report = kiln_stack_report([{"stack": s, "allow": [], "hosts": [name], "problems": []} for name, s in refused.items()],
                               today=TODAY)
    for name in refused:
        assert any(f"] {name} (1 host)" in line for line in report["errors"]), name


# ---------------------------------------------------------------------------
# kiln_gpudirect, every branch

@pytest.mark.parametrize(("stack", "kernel", "method", "needle"), [
    ({"ofed": "inbox", **GOOD_DMA}, None, "dma_buf", "every condition holds"),
    ({"ofed": {"kind": "doca", "version": "3.2.1"}, **GOOD_DMA}, None, "dma_buf", "DMA-BUF (auto)"),
    ({"ofed": {"kind": "doca", "version": "3.2.1"}, **dict(GOOD_DMA, driver_flavor="proprietary")}, None, "peermem",
     "driver_flavor proprietary (fails)"),
    ({"ofed": {"kind": "mlnx"}}, None, "peermem", "unknown (no kernel)"),
    ({"ofed": "inbox", **dict(GOOD_DMA, driver_flavor="proprietary")}, None, "none", "ofed kind inbox"),
    ({"ofed": "inbox", **GOOD_DMA}, "5.10.0-28-amd64", "none", "5.10.0-28-amd64 (fails)"),
    ({"ofed": "inbox", **dict(GOOD_DMA, kernel="5.10.0-28-amd64")}, "6.1.0-28-amd64", "dma_buf", "6.1.0-28-amd64 (holds)"),
    ({"ofed": {"kind": "inbox", "gpudirect": "dma_buf"}}, None, "dma_buf", "checked on the host"),
    ({"ofed": {"kind": "inbox", "gpudirect": "dma_buf"}, "cuda": "11.4"}, None, "none", "preflight refuses"),
    ({"ofed": {"kind": "inbox", "gpudirect": "peermem"}}, None, "none", "preflight refuses"),
    ({"ofed": {"kind": "doca", "gpudirect": "peermem"}, **GOOD_DMA}, None, "peermem", "as requested"),
    ({"ofed": {"kind": "doca", "gpudirect": "none"}, **GOOD_DMA}, None, "none", "gpudirect is none"),
    ({**GOOD_DMA}, None, "none", "no ofed"),
    ({"ofed": "inbox", "driver": "580.95.05", "kernel": "6.8.0-1-generic", "cuda": "13.0.2", "gpu": "B200"}, None, "dma_buf",
     "driver_flavor open"),
])
def test_kiln_gpudirect(stack: dict[str, Any], kernel: str | None, method: str, needle: str) -> None:
    out = kiln_gpudirect(stack, kernel)
    assert out["method"] == method and needle in out["why"], out
    assert out["module"] == ("nvidia-peermem" if method == "peermem" else None)
    assert out["requested"] == ((stack.get("ofed") or {}).get("gpudirect", "auto") if isinstance(stack.get("ofed"), dict)
                                else "auto")


@pytest.mark.parametrize("kernel", [5.12, ["6.1"], "not a kernel", "6" * 500])
def test_kiln_gpudirect_refuses_a_bad_kernel(kernel: Any) -> None:
    with pytest.raises(CompatError, match="kiln_gpudirect: kernel is"):
        kiln_gpudirect({"ofed": "inbox"}, kernel)


# ---------------------------------------------------------------------------
# properties

GPUS = st.sampled_from([None, "V100", "T4", "A100", "H100", "B200", "P100"])
KERNELS = st.sampled_from([None, "4.18.0-553.el8", "5.10.0-28-amd64", "5.12.0", "5.14.0-427.el9", "6.8.0-45-generic"])
CUDAS = st.sampled_from([None, "11.4", "11.7", "12.4", "13.0.2"])
FLAVORS = st.sampled_from([None, "open", "proprietary"])
KINDS = st.sampled_from([None, "inbox", "doca", "mlnx"])
METHODS = st.sampled_from([None, "auto", "dma_buf", "peermem", "none"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpu=GPUS, kernel=KERNELS, cuda=CUDAS, flavor=FLAVORS, kind=KINDS, method=METHODS, host_kernel=KERNELS)
def test_gpudirect_never_promises_a_path_that_cannot_work(gpu: Any, kernel: Any, cuda: Any, flavor: Any, kind: Any,
                                                          method: Any, host_kernel: Any) -> None:
    stack: dict[str, Any] = {k: v for k, v in (("gpu", gpu), ("kernel", kernel), ("cuda", cuda),
                                               ("driver_flavor", flavor)) if v}
    if kind:
        stack["ofed"] = {"kind": kind, **({"gpudirect": method} if method else {})}
    out = kiln_gpudirect(stack, host_kernel)
    if out["method"] == "dma_buf":
        assert all(out["conditions"][c] is not False for c in ("flavor", "kernel", "cuda", "gpu")), out
        if (method or "auto") == "auto":
            assert all(out["conditions"][c] is True for c in ("flavor", "kernel", "cuda", "gpu")), out
    if out["method"] == "peermem":
        assert kind in ("doca", "mlnx")
    if kind == "inbox":
        assert out["method"] != "peermem"
    # an explicit method that cannot work is refused by preflight (which sees the stack's kernel, not the host's)
    if host_kernel:
        return
    viol = {v["rule"]: v["severity"] for v in kiln_stack_violations(stack, today=TODAY)}
    if method in ("dma_buf", "peermem") and out["method"] == "none" and kind:
        assert any(r.startswith("gpudirect-") and s == "error" for r, s in viol.items()), (out, viol)


HOSTILE = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-10**30, max_value=10**30),
                    st.booleans(), st.lists(st.text(max_size=5), max_size=3), st.text(min_size=200, max_size=3000),
                    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(["kind", "version", "gpudirect", "profile", "unknown_key"]), value=HOSTILE)
def test_hostile_ofed_values_name_the_key(key: str, value: Any) -> None:
    ofed: dict[str, Any] = {"kind": "doca", key: value}
    stack = {"os": "ubuntu-24.04", "ofed": ofed}
    problems = stack_problems(stack)
    assert problems and any(p["key"].startswith(f"kiln_stack.ofed.{key}") for p in problems), problems
    for fn in (lambda: kiln_pkg(stack, "ofed"), lambda: kiln_gpudirect(stack), lambda: kiln_doca_repo(stack)):
        with pytest.raises(CompatError, match=rf"kiln_stack\.ofed.*{key}"):
            fn()
    (first, *_rest) = kiln_stack_violations(stack)
    assert first["rule"] == "invalid-stack"


@settings(max_examples=100, deadline=None)
@given(value=HOSTILE)
def test_hostile_hca_values_name_the_key(value: Any) -> None:
    problems = stack_problems({"hca": value})
    if isinstance(value, list) and not value:
        assert problems == []
        return
    assert problems and all(p["key"].startswith("kiln_stack.hca") for p in problems), problems


# ---------------------------------------------------------------------------
# packages and the repository

INBOX_APT = ["rdma-core", "ibverbs-providers", "ibverbs-utils", "infiniband-diags", "rdmacm-utils", "libibverbs1",
             "librdmacm1", "libibumad3"]


def test_inbox_packages_on_debian_12_are_pinned_at_the_verified_builds() -> None:
    pk = kiln_pkg({"os": "debian-12", "ofed": "inbox"}, "ofed")
    assert pk == [f"{n}=44.0-2" for n in INBOX_APT] + ["perftest=4.5+0.17-1"]
    assert kiln_ofed_builds({"os": "debian-12", "ofed": "inbox"})["rdma_core"]["recorded"] is True


def test_inbox_packages_on_ubuntu_24_04_are_candidates_unless_builds_pin_them() -> None:
    stack = {"os": "ubuntu-24.04", "ofed": "inbox"}
    assert kiln_pkg(stack, "ofed") == INBOX_APT + ["perftest"]
    assert not any(b["recorded"] for b in kiln_ofed_builds(stack).values())
    pinned = dict(stack, builds={"rdma_core": "50.0-2build2", "perftest": "24.01.0-0.38.gd185c9b-1"})
    assert kiln_pkg(pinned, "ofed") == [f"{n}=50.0-2build2" for n in INBOX_APT] + ["perftest=24.01.0-0.38.gd185c9b-1"]


def test_inbox_packages_dnf_names() -> None:
    assert kiln_pkg({"os": "rocky-9", "ofed": "inbox", "builds": {"rdma_core": "48.0-1.el9", "perftest": "23.04.0.0.23-3.el9"}},
                    "ofed") == ["rdma-core-48.0-1.el9", "libibverbs-utils-48.0-1.el9", "infiniband-diags-48.0-1.el9",
                                "librdmacm-utils-48.0-1.el9", "perftest-23.04.0.0.23-3.el9"]


@pytest.mark.parametrize("os_id", ["debian-12", "ubuntu-24.04"])
def test_doca_packages(os_id: str) -> None:
    assert kiln_pkg({"os": os_id, "ofed": {"kind": "doca", "version": "2.9.5"}}, "ofed") == ["doca-ofed=2.9.5-0.1.8"]
    assert kiln_pkg({"os": os_id, "ofed": {"kind": "doca", "version": "2.9"}}, "ofed") == ["doca-ofed=2.9.5-0.1.8"]
    assert kiln_pkg({"os": os_id, "ofed": {"kind": "doca", "version": "3.2.1", "profile": "doca-all"},
                     "builds": {"doca_ofed": "3.2.1-044000-25.10"}}, "ofed") == ["doca-all=3.2.1-044000-25.10"]
    # no recorded doca-ofed version: the candidate, held (plan says so)
    assert kiln_pkg({"os": os_id, "ofed": {"kind": "doca", "version": "3.2.1"}}, "ofed") == ["doca-ofed"]
    assert kiln_pkg({"os": os_id, "ofed": {"kind": "mlnx", "version": "24.10-4.1.4.0"}}, "ofed") == []
    assert kiln_packages({"os": os_id, "ofed": "inbox"})["ofed"][0].startswith("rdma-core")


def test_doca_repository() -> None:
    repo = kiln_doca_repo({"os": "ubuntu-24.04", "ofed": {"kind": "doca", "version": "3.2.1"}})
    assert repo["url"] == "https://linux.mellanox.com/public/repo/doca/3.2.1/ubuntu24.04/x86_64/"
    assert repo["path"] == "3.2.1/ubuntu24.04/x86_64/" and repo["suite"] == "./" and repo["repo_package"] == "3.2.1-044000-25.10"
    assert repo["fingerprint"] is None and repo["fingerprint_var"] == "kiln_repos.doca.fingerprint"
    assert repo["apt_line"].endswith(" ./") and repo["key_url"].endswith("/GPG-KEY-Mellanox.pub")
    mirror = kiln_doca_repo({"os": "rocky-9", "ofed": {"kind": "doca", "version": "3.2"}}, "https://mirror.example/doca/")
    assert mirror["url"] == "https://mirror.example/doca/3.2.1/rhel9/x86_64/" and "apt_line" not in mirror
    assert kiln_doca_repo({"os": "debian-12", "ofed": "inbox"}) == {}
    with pytest.raises(CompatError, match="not built for ubuntu-20.04"):
        kiln_doca_repo({"os": "ubuntu-20.04", "ofed": {"kind": "doca", "version": "3.2.1"}})
    with pytest.raises(CompatError, match="set kiln_stack.os"):
        kiln_doca_repo({"ofed": {"kind": "doca", "version": "3.2.1"}})


def test_plan_shows_rdma_packages_repository_and_gpudirect() -> None:
    stacks = [{"stack": {"os": "debian-12", "ofed": "inbox", **GOOD_DMA}, "allow": [], "hosts": ["a1"], "problems": []},
              {"stack": {"os": "ubuntu-24.04", "ofed": {"kind": "doca", "version": "3.2.1"}, "hca": ["ConnectX-7"]},
               "allow": [], "hosts": ["d1"], "problems": []}]
    plan = kiln_plan(stacks, {"gpu": ["a1", "d1"]},
                     repos={"doca": {"url": "https://mirror.example/doca", "fingerprint": "A" * 40}})
    inbox, doca = plan["groups"]["gpu"]["stacks"]
    assert inbox["packages"]["ofed"][-1] == "perftest=4.5+0.17-1" and "ofed" not in inbox["candidates"]
    assert inbox["gpudirect"]["method"] == "dma_buf" and "doca" not in inbox["repos"]
    assert doca["packages"]["ofed"] == ["doca-ofed"] and "ofed" in doca["candidates"]
    assert doca["repos"]["doca"]["url"].startswith("https://mirror.example/doca/3.2.1/") and doca["repos"]["doca"]["fingerprint"] == "A" * 40
    assert doca["gpudirect"]["method"] == "peermem"
    text = "\n".join(kiln_plan_text(plan))
    assert "gpudirect" in text and "hca" in text and "repo doca" in text


def test_doca_without_a_version_is_refused_with_the_release_to_pin() -> None:
    """issue 33: `ofed: {kind: doca}` installed doca-ofed unpinned; now preflight refuses it and names a release."""
    from kiln_compat_engine.rules import kiln_stack_violations
    (found,) = [v for v in kiln_stack_violations({"os": "ubuntu-24.04", "hca": "ConnectX-7", "ofed": {"kind": "doca"}})
                if v["rule"] == "doca-version"]
    assert found["severity"] == "error" and "unpinned" in found["message"]
    fixed = found["fix_stack"]["ofed"] if found.get("fix_stack") else None
    assert fixed and fixed["kind"] == "doca" and fixed["version"]
    assert not [v for v in kiln_stack_violations({"os": "ubuntu-24.04", "hca": "ConnectX-7", "ofed": fixed})
                if v["rule"] == "doca-version"]
