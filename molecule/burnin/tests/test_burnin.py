"""burnin scenario: the burn-in tools and the per-node metrics on each compute node."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "molecule"))
from kiln_testinfra import podman_hosts  # noqa: E402

testinfra_hosts = podman_hosts("slurm_compute")


def test_cpu_engine_and_mpi_installed(host):
    engine = host.file("/usr/local/bin/kiln-cpu-allreduce")
    assert engine.exists and engine.mode == 0o755
    for pkg in ("openmpi-bin", "python3-mpi4py", "python3-numpy", "libpmix2", "iperf3"):
        assert host.package(pkg).is_installed, pkg
    assert host.run("/usr/bin/python3 -c 'import mpi4py, numpy'").rc == 0


def test_metrics_in_textfile_dir(host):
    prom = host.file("/var/lib/node_exporter/textfile_collector/kiln_burnin.prom")
    assert prom.exists
    assert "kiln_burnin_node_status" in prom.content_string
    assert host.file("/var/lib/kiln/burnin/last_run").exists


def test_no_nccl_tests_build_without_cuda(host):
    assert not host.file("/opt/kiln/nccl-tests").exists
