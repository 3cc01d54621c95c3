"""After the refused run the node carries nothing of kiln's GPU stack."""
testinfra_hosts = ["ansible://all"]


def test_no_repository_or_package_was_added(host):
    assert not host.file("/etc/apt/sources.list.d/kiln-cuda.sources").exists
    assert not host.file("/etc/apt/keyrings/kiln-cuda.asc").exists
    assert host.run("dpkg -l 'nvidia-*' 'cuda-*' 'libnccl*'").rc != 0
    assert host.check_output("apt-mark showhold") == ""
