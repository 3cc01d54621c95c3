"""The plan: a bill of materials per inventory group (module plan)."""

from __future__ import annotations

from kiln_compat_engine.inventory import kiln_stacks_by_host
from kiln_compat_engine.plan import kiln_plan, kiln_plan_text

GOOD = {"gpu": "H100", "os": "ubuntu-24.04", "driver": "580.173.02", "cuda": "13.0.2"}


def test_plan_per_group() -> None:
    hv = {f"gpu{i:02d}": {"kiln_stack": dict(GOOD, nccl="2.28.7", torch="2.14.1")} for i in range(1, 5)}
    hv["ctl01"] = {"kiln_stack": {"os": "debian-12", "slurm": {"slurmctld": "25.11"}}}
    hv["odd01"] = {"kiln_stack": {"driver": "580.173.02"}}
    groups = {"all": sorted(hv), "gpu_nodes": [f"gpu{i:02d}" for i in range(1, 5)], "slurm_controller": ["ctl01"],
              "odd": ["odd01"], "empty": []}
    plan = kiln_plan(kiln_stacks_by_host(hv, sorted(hv)), groups, {"cuda": {"url": "http://mirror/cuda"}})
    assert sorted(plan["groups"]) == ["gpu_nodes", "odd", "slurm_controller"]
    gpu = plan["groups"]["gpu_nodes"]["stacks"][0]
    assert gpu["hosts"] == "gpu[01-04]" and gpu["host_count"] == 4
    assert gpu["packages"]["cuda"] == ["cuda-toolkit-13-0=13.0.2-1"]
    assert gpu["packages"]["nccl"] == ["libnccl2=2.28.7-1+cuda13.0", "libnccl-dev=2.28.7-1+cuda13.0"]
    assert gpu["repos"]["cuda"]["url"] == "http://mirror/cuda/ubuntu2404/x86_64/"
    assert gpu["pip"]["index_url"].endswith("/cu130")
    assert plan["groups"]["odd"]["stacks"][0]["errors"]  # no os: cannot render packages, says so
    text = "\n".join(kiln_plan_text(plan))
    assert "== group gpu_nodes (4 hosts) ==" in text and "cuda-toolkit-13-0=13.0.2-1" in text
