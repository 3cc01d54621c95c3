"""After the refused run the node carries nothing of kiln's GPU stack."""
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "molecule"))
from kiln_testinfra import podman_hosts  # noqa: E402

testinfra_hosts = podman_hosts()


def test_no_repository_or_package_was_added(host):
    assert not host.file("/etc/apt/sources.list.d/kiln-cuda.sources").exists
    assert not host.file("/etc/apt/keyrings/kiln-cuda.asc").exists
    assert host.run("dpkg -l 'nvidia-*' 'cuda-*' 'libnccl*'").rc != 0
    assert host.check_output("apt-mark showhold") == ""
