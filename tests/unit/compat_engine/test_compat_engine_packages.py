"""Package strings rendered for each supported OS (module packages)."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from kiln_compat_engine.packages import NVIDIA_COMPONENTS, kiln_distro_build, kiln_packages, kiln_pkg
from kiln_compat_engine.rules import kiln_stack_violations

STACK: dict[str, Any] = {
    "gpu": "H100-SXM5-80GB",
    "driver": "550.127.05",
    "driver_flavor": "open",
    "fabricmanager": "550.127.05",
    "cuda": "12.4",
    "cudnn": "9.5.1.17",
    "nccl": "2.21.5",
    "container_toolkit": "1.17.8",
    "dcgm": "4.6.0",
    "torch": "2.5",
    "ofed": {"kind": "doca", "version": "3.2.1"},
}
CTK_APT = ["nvidia-container-toolkit=1.17.8-1", "nvidia-container-toolkit-base=1.17.8-1",
           "libnvidia-container-tools=1.17.8-1", "libnvidia-container1=1.17.8-1"]
CTK_DNF = [p.replace("=", "-") for p in CTK_APT]

EXPECTED: dict[str, dict[str, Any]] = {
    "ubuntu-22.04": {
        "distro": "ubuntu2204",
        "packages": {
            "driver": ["nvidia-open-550=550.127.05-1"],
            "driver_companions": [f"{n}=550.127.05-1" for n in ("nvidia-driver-cuda", "nvidia-smi", "libcuda1",
                                                               "nvidia-persistenced", "nvidia-kernel-open-dkms")],
            "fabricmanager": ["nvidia-fabricmanager-550=550.127.05-1", "libnvidia-nscq-550=550.127.05-1"],
            "cuda": ["cuda-toolkit-12-4=12.4.1-1"],
            "cudnn": ["libcudnn9-cuda-12=9.5.1.17-1", "libcudnn9-dev-cuda-12=9.5.1.17-1"],
            "nccl": ["libnccl2=2.21.5-1+cuda12.4", "libnccl-dev=2.21.5-1+cuda12.4"],
            "container_toolkit": CTK_APT,
            "dcgm": ["datacenter-gpu-manager-4-cuda12=1:4.6.0-1"],
            "ofed": ["doca-ofed"],
        },
    },
    "ubuntu-24.04": {"distro": "ubuntu2404"},
    "debian-12": {"distro": "debian12"},
    "rocky-9": {
        "distro": "rhel9",
        "packages": {
            "driver": ["nvidia-open-550.127.05-1.el9"],
            "fabricmanager": ["nvidia-fabricmanager-550.127.05-1", "libnvidia-nscq-550.127.05-1"],
            "cuda": ["cuda-toolkit-12-4-12.4.1-1"],
            "cudnn": ["libcudnn9-cuda-12-9.5.1.17-1", "libcudnn9-devel-cuda-12-9.5.1.17-1"],
            "nccl": ["libnccl-2.21.5-1+cuda12.4", "libnccl-devel-2.21.5-1+cuda12.4"],
            "container_toolkit": CTK_DNF,
            "dcgm": ["datacenter-gpu-manager-4-cuda12-4.6.0-1"],
            "ofed": ["doca-ofed"],
        },
    },
}
EXPECTED["ubuntu-24.04"]["packages"] = EXPECTED["ubuntu-22.04"]["packages"]
EXPECTED["debian-12"]["packages"] = EXPECTED["ubuntu-22.04"]["packages"]


@pytest.mark.parametrize("os_id", sorted(EXPECTED))
def test_packages_per_os(os_id: str) -> None:
    stack = dict(STACK, os=os_id)
    nvidia = {k: v for k, v in kiln_packages(stack).items() if k in NVIDIA_COMPONENTS}
    assert nvidia == EXPECTED[os_id]["packages"]
    for comp, pkgs in EXPECTED[os_id]["packages"].items():
        assert kiln_pkg(stack, comp) == pkgs


def test_flavors_and_branches() -> None:
    prop = dict(STACK, os="ubuntu-24.04", driver_flavor="proprietary")
    assert kiln_pkg(prop, "driver") == ["cuda-drivers-550=550.127.05-1"]
    default = {k: v for k, v in STACK.items() if k != "driver_flavor"}
    # no flavor given: the branch default (proprietary before R560, open from R560) unless the GPU decides
    assert kiln_pkg(dict(default, os="ubuntu-24.04"), "driver") == ["cuda-drivers-550=550.127.05-1"]
    assert kiln_pkg(dict(default, os="ubuntu-24.04", driver="580.173.02"), "driver") == ["nvidia-open-580=580.173.02-1"]
    assert kiln_pkg({"gpu": "B200", "driver": "550.127.05", "os": "debian-12"}, "driver") == ["nvidia-open-550=550.127.05-1"]
    volta = {"gpu": "V100", "driver": "580.173.02", "os": "ubuntu-24.04"}
    assert kiln_pkg(volta, "driver") == ["cuda-drivers-580=580.173.02-1"]
    assert kiln_pkg({"driver": "470.239.06", "os": "debian-12"}, "driver") == ["cuda-drivers-470=470.239.06-1"]


def test_cudnn8_nccl_suffix_dcgm3_and_pkg_mgr_argument() -> None:
    stack = {"cuda": "12.2.2", "cudnn": "8.9.7.29", "nccl": "2.19.3", "dcgm": "3.3.9"}
    assert kiln_pkg(stack, "cudnn", "apt") == ["libcudnn8=8.9.7.29-1+cuda12.2", "libcudnn8-dev=8.9.7.29-1+cuda12.2"]
    assert kiln_pkg(stack, "nccl", "apt") == ["libnccl2=2.19.3-1+cuda12.2", "libnccl-dev=2.19.3-1+cuda12.2"]
    assert kiln_pkg(dict(stack, cuda="12.3.1"), "nccl", "apt") == ["libnccl2=2.19.3-1+cuda12.3", "libnccl-dev=2.19.3-1+cuda12.3"]
    assert kiln_pkg(stack, "dcgm", "ubuntu-22.04") == ["datacenter-gpu-manager=1:3.3.9"]
    assert kiln_pkg({"cuda": "13.0.2"}, "cuda", "dnf") == ["cuda-toolkit-13-0-13.0.2-1"]
    assert kiln_pkg({"nccl": "2.21.5-1+cuda12.4"}, "nccl", "apt") == ["libnccl2=2.21.5-1+cuda12.4", "libnccl-dev=2.21.5-1+cuda12.4"]


def test_dcgm_cuda_major_follows_driver_and_gpu() -> None:
    assert kiln_pkg({"dcgm": "4.6.0", "driver": "595.91.07"}, "dcgm", "apt") == ["datacenter-gpu-manager-4-cuda13=1:4.6.0-1"]
    assert kiln_pkg({"dcgm": "4.6.0", "driver": "580.173.02", "gpu": "V100"}, "dcgm", "apt") == [
        "datacenter-gpu-manager-4-cuda12=1:4.6.0-1"]


def test_distribution_packages_pin_the_recorded_build_or_the_stacks() -> None:
    stack = {"os": "debian-12", "slurm": {"slurmctld": "22.05", "slurmd": "22.05"}}
    pk = kiln_packages(stack)
    assert pk["slurmd"] == ["slurmd=22.05.8-4+deb12u3", "slurm-client=22.05.8-4+deb12u3"]
    assert pk["munge"] == ["munge=0.5.15-2+deb12u1"]
    assert pk["pmix"] == ["libpmix2=4.2.2-1+deb12u1", "libpmix-dev=4.2.2-1+deb12u1"]
    assert pk["node_exporter"] == ["prometheus-node-exporter=1.5.0-1+b6"]
    # the stack's build wins; the OS renames a package
    site = {"os": "ubuntu-24.04", "slurm": {"slurmd": "25.11"}, "builds": {"slurm": "25.11.2-1", "pmix": "5.0.1-4build1"}}
    assert kiln_pkg(site, "slurmd") == ["slurmd=25.11.2-1", "slurm-client=25.11.2-1"]
    assert kiln_pkg(site, "pmix") == ["libpmix2t64=5.0.1-4build1", "libpmix-dev=5.0.1-4build1"]
    assert kiln_pkg(dict(site, os="rocky-9"), "slurmd") == ["slurm-slurmd-25.11.2-1", "slurm-25.11.2-1"]
    # no recorded build: the bare name (installed at the candidate, then held), and the plan says so
    assert kiln_pkg({"os": "ubuntu-22.04"}, "node_exporter") == ["prometheus-node-exporter"]
    assert kiln_distro_build({"os": "ubuntu-22.04"}, "node_exporter", "ubuntu-22.04")["recorded"] is False


def test_a_slurm_build_of_another_major_is_refused() -> None:
    stack = {"os": "debian-12", "slurm": {"slurmd": "22.05"}, "builds": {"slurm": "23.11.4-1"}}
    with pytest.raises(AnsibleFilterError, match=r"builds.slurm is '23.11.4-1', not a build of Slurm 22.05"):
        kiln_pkg(stack, "slurmd")
    v = [x for x in kiln_stack_violations(stack) if x["rule"] == "package-build"]
    assert v and v[0]["severity"] == "error" and "Set kiln_stack.builds.slurm to the 22.05 build" in v[0]["fix"]


def test_absent_components_render_nothing() -> None:
    assert set(kiln_packages({"os": "ubuntu-24.04"})) == {"openmpi", "openmpi_dev", "mpi4py", "node_exporter"}
    assert kiln_pkg({"ofed": {"kind": "mlnx"}}, "ofed", "apt") == []  # MLNX_OFED: not from a package repository


@pytest.mark.parametrize(("stack", "component", "match"), [
    ({"cudnn": "9.5.1.17", "os": "ubuntu-24.04"}, "cudnn", "kiln_stack.cuda is required"),
    ({"nccl": "2.21.5", "os": "ubuntu-24.04"}, "nccl", "no known build"),
    ({"driver": "550.127.05"}, "driver", "need a package manager"),
    ({"driver": "550.127.05"}, "kernel", "unknown component"),
    ({"driver": "999.1.1", "os": "debian-12"}, "driver", "not a release of a known branch"),
    ({"cuda": "12.7", "os": "debian-12"}, "cuda", "not in data"),
])
def test_rendering_errors_are_clear(stack: dict[str, Any], component: str, match: str) -> None:
    with pytest.raises(AnsibleFilterError, match=match):
        kiln_pkg(stack, component)


def test_a_bare_name_is_installed_at_the_candidate_and_then_kept() -> None:
    from kiln.packages.pkgdb import kiln_pkg_plan_filter as kiln_pkg_plan

    new = kiln_pkg_plan(["prometheus-node-exporter"], {}, "apt")
    assert new["installs"] == ["prometheus-node-exporter"] and new["changes"][0]["to"] == "(repository candidate)"
    kept = kiln_pkg_plan(["prometheus-node-exporter"], {"prometheus-node-exporter": [{"version": "1.7.0-1"}]}, "apt")
    assert kept["unchanged"] == ["prometheus-node-exporter"] and kept["changes"] == []
    with pytest.raises(AnsibleFilterError, match="not an exact apt pin"):
        kiln_pkg_plan(["munge=; rm -rf /"], {}, "apt")


def test_nccl_2_21_5_has_the_cuda_12_5_build_nvidia_ships() -> None:
    """issue 33: NVIDIA's CUDA 12.5 images pin libnccl2=2.21.5-1+cuda12.5; kiln knew only the 12.4 build."""
    from kiln_compat_engine.packages import kiln_pkg
    assert kiln_pkg({"os": "ubuntu-22.04", "cuda": "12.5", "nccl": "2.21.5"}, "nccl") == [
        "libnccl2=2.21.5-1+cuda12.5", "libnccl-dev=2.21.5-1+cuda12.5"]
    assert kiln_pkg({"os": "ubuntu-22.04", "cuda": "12.4", "nccl": "2.21.5"}, "nccl") == [
        "libnccl2=2.21.5-1+cuda12.4", "libnccl-dev=2.21.5-1+cuda12.4"]


def test_the_cudnn_and_nccl_nvidia_shipped_with_cuda_12_0_are_accepted_and_pinned() -> None:
    """issue 33: CUDA 12.0 was accepted, but its images' cuDNN 8.8.0.121 and NCCL 2.16.5 were unknown."""
    from kiln_compat_engine.packages import kiln_pkg
    from kiln_compat_engine.rules import kiln_stack_violations
    stack = {"os": "ubuntu-22.04", "cuda": "12.0", "cudnn": "8.8.0.121", "nccl": "2.16.5"}
    assert not [v for v in kiln_stack_violations(stack) if v["rule"] in ("cudnn-cuda", "nccl-cuda", "unknown-version")]
    assert kiln_pkg(stack, "cudnn")[0] == "libcudnn8=8.8.0.121-1+cuda12.0"
    assert kiln_pkg(stack, "nccl")[0] == "libnccl2=2.16.5-1+cuda12.0"
