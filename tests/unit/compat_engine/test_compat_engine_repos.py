"""Repositories: the CUDA and Container Toolkit repositories per OS, mirrors, arches, the PyTorch index (module repos)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from kiln_compat_engine.repos import kiln_container_toolkit_repo, kiln_cuda_repo, kiln_torch_index

DISTROS = {"ubuntu-22.04": "ubuntu2204", "ubuntu-24.04": "ubuntu2404", "debian-12": "debian12", "rocky-9": "rhel9"}


@pytest.mark.parametrize("os_id", sorted(DISTROS))
def test_cuda_repo_per_os(os_id: str) -> None:
    distro = DISTROS[os_id]
    repo = kiln_cuda_repo(os_id)
    url = f"https://developer.download.nvidia.com/compute/cuda/repos/{distro}/x86_64/"
    assert repo["url"] == url and repo["distro"] == distro
    if os_id.startswith("rocky"):
        assert repo["pkg_mgr"] == "dnf"
        assert repo["repo_file_url"] == f"{url}cuda-{distro}.repo"
        assert repo["key_url"].startswith(url)
    else:
        assert repo["pkg_mgr"] == "apt"
        assert repo["key_url"] == f"{url}3bf863cc.pub"
        assert repo["keyring_path"] == "/usr/share/keyrings/cuda-archive-keyring.gpg"
        assert repo["keyring_package_url"] == f"{url}cuda-keyring_1.1-1_all.deb"
        assert repo["apt_line"] == f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {url} /"


def test_cuda_repo_mirror_and_arch() -> None:
    repo = kiln_cuda_repo("ubuntu-24.04", "http://mirror.internal/cuda/repos/", "aarch64")
    assert repo["url"] == "http://mirror.internal/cuda/repos/ubuntu2404/sbsa/"
    with pytest.raises(AnsibleFilterError, match="unknown arch"):
        kiln_cuda_repo("ubuntu-24.04", None, "ppc64le")
    with pytest.raises(AnsibleFilterError, match="unknown OS"):
        kiln_cuda_repo("plan9")


@pytest.mark.parametrize(("os_id", "url"), [
    ("ubuntu-22.04", "https://nvidia.github.io/libnvidia-container/stable/deb/amd64"),
    ("ubuntu-24.04", "https://nvidia.github.io/libnvidia-container/stable/deb/amd64"),
    ("debian-12", "https://nvidia.github.io/libnvidia-container/stable/deb/amd64"),
    ("rocky-9", "https://nvidia.github.io/libnvidia-container/stable/rpm/x86_64"),
])
def test_container_toolkit_repo(os_id: str, url: str) -> None:
    repo = kiln_container_toolkit_repo(os_id)
    assert repo["url"] == url
    assert repo["key_url"] == "https://nvidia.github.io/libnvidia-container/gpgkey"
    if repo["pkg_mgr"] == "apt":
        assert repo["keyring_path"] == "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
        assert repo["apt_line"].endswith(f"{url} /")
    else:
        assert repo["repo_file_url"] == "https://nvidia.github.io/libnvidia-container/stable/rpm/nvidia-container-toolkit.repo"
    mirrored = kiln_container_toolkit_repo(os_id, "https://mirror.internal/ctk/")
    assert mirrored["url"].startswith("https://mirror.internal/ctk/stable/")


def test_torch_index() -> None:
    assert kiln_torch_index({"torch": "2.14.1", "cuda": "13.0.2"}) == {
        "index_url": "https://download.pytorch.org/whl/cu130", "variant": "cu130", "requirement": "torch==2.14.1"}
    assert kiln_torch_index({"torch": "2.14+cu126"}, "https://mirror.internal/whl/")["index_url"] == "https://mirror.internal/whl/cu126"
    assert kiln_torch_index({"torch": "2.12"})["requirement"] == "torch==2.12.*"
    assert kiln_torch_index({}) == {}
