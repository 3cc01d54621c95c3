"""kiln CPU engine (tools/kiln-cpu-allreduce): formatting helpers, and a real 2-rank MPI run
whose output tools/kiln-nccl-parse and the verdict logic read.

The MPI tests need Debian's openmpi-bin, python3-mpi4py and python3-numpy for
/usr/bin/python3. When they are missing and this runs as root on a machine
with apt-get, the fixture installs them once (and says so on stderr); set
KILN_TEST_NO_APT=1 to forbid that. Otherwise the tests are skipped with the reason.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from kiln_paths import REPO
ENGINE = REPO / "tools" / "kiln-cpu-allreduce"
PARSE = REPO / "tools" / "kiln-nccl-parse"
SYSTEM_PYTHON = "/usr/bin/python3"
MPI_PACKAGES = ["openmpi-bin", "python3-mpi4py", "python3-numpy"]
sys.path.insert(0, str(REPO / "module_utils"))

from kiln.nccl import parse as kiln_nccl  # noqa: E402
from kiln import verdict as kiln_verdict  # noqa: E402


def load_engine():
    loader = importlib.machinery.SourceFileLoader("kiln_cpu_allreduce", str(ENGINE))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


ENG = load_engine()


def test_sizes_and_float_str():
    assert ENG.parse_size("1M") == 1 << 20
    assert ENG.parse_size("64m") == 64 << 20
    assert ENG.sizes(1 << 20, 8 << 20, 2) == [1 << 20, 2 << 20, 4 << 20, 8 << 20]
    assert ENG.sizes(1024, 1024, 2) == [1024]
    # Same strings as the recorded example (nccl-tests getFloatStr widths).
    assert ENG.float_str(4993.22, 7) == "4993.22"
    assert ENG.float_str(13981.04, 7) == "13981.0"
    assert ENG.float_str(181375.2, 7) == " 181375"
    assert ENG.float_str(0.2134, 6) == "  0.21"
    assert ENG.float_str(385.04, 6) == "385.04"


def test_usage_errors_exit_2():
    assert ENG.main(["-b", "8M", "-e", "1M"]) == ENG.EXIT_USAGE
    assert ENG.main(["-b", "nonsense"]) == ENG.EXIT_USAGE


def _mpi_works() -> bool:
    if not shutil.which("mpirun") or not os.path.exists(SYSTEM_PYTHON):
        return False
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import mpi4py, numpy"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.fixture(scope="module")
def mpi():
    """mpirun argv prefix for 2 local ranks; installs the Debian packages when missing (see module doc)."""
    if not _mpi_works():
        if os.environ.get("KILN_TEST_NO_APT"):
            pytest.skip("openmpi-bin/python3-mpi4py/python3-numpy missing and KILN_TEST_NO_APT is set")
        if not shutil.which("apt-get") or os.geteuid() != 0:
            pytest.skip("openmpi-bin/python3-mpi4py/python3-numpy missing; no apt-get or not root to install them")
        sys.stderr.write(f"test_kiln_cpu_allreduce: installing {' '.join(MPI_PACKAGES)} with apt-get\n")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        done = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *MPI_PACKAGES],
                              capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0 or not _mpi_works():
            pytest.skip(f"could not install {' '.join(MPI_PACKAGES)}: {done.stderr.strip()[-300:]}")
    argv = ["mpirun", "--oversubscribe", "-np", "2", "--mca", "btl", "self,tcp"]
    if os.geteuid() == 0:
        argv.insert(1, "--allow-run-as-root")
    return argv


def run_engine(mpi, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*mpi, SYSTEM_PYTHON, str(ENGINE), *args], capture_output=True, text=True,
                          timeout=180, check=False)


def test_real_two_rank_run_parses_and_passes(mpi, tmp_path):
    done = run_engine(mpi, "-b", "1M", "-e", "16M", "-f", "2", "-n", "3", "-w", "1")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "cpu.txt"
    out.write_text(done.stdout)
    parsed = kiln_nccl.parse(done.stdout)
    assert parsed["status"] == "ok", parsed["problems"]
    assert parsed["engine"] == "kiln-cpu"
    assert parsed["nranks"] == 2
    assert [r["size"] for r in parsed["rows"]] == [1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20]
    for row in parsed["rows"]:
        assert row["count"] == row["size"] // 4
        for cell in (row["out_of_place"], row["in_place"]):
            assert cell["wrong"] == 0
            assert cell["busbw"] > 0
    assert parsed["out_of_bounds"] == {"count": 0, "ok": True}
    # The CLI reads the saved file and the verdict is PASS against the test-bed floor.
    cli = subprocess.run([sys.executable, str(PARSE), str(out), "--verdict", "--floor", "0.001",
                          "--min-size", "4M"], capture_output=True, text=True, check=False)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert json.loads(cli.stdout)["verdict"]["status"] == "PASS"


def test_real_run_with_corruption_exits_7_and_fails(mpi):
    done = run_engine(mpi, "-b", "1M", "-e", "2M", "-n", "2", "-w", "0", "--inject-wrong", "5")
    assert done.returncode == ENG.EXIT_WRONG
    parsed = kiln_nccl.parse(done.stdout)
    assert all(r["out_of_place"]["wrong"] == 5 and r["in_place"]["wrong"] == 5 for r in parsed["rows"])
    assert parsed["out_of_bounds"] == {"count": 20, "ok": False}
    check = kiln_verdict.judge_nccl([{"parsed": parsed, "exit_code": done.returncode, "timed_out": False}],
                                    0.001, min_size="1M")
    assert check["status"] == "FAIL"


def test_engine_never_prints_a_non_finite_number():
    assert ENG.float_str(float("inf"), 6) == "   N/A"
    assert ENG.float_str(float("nan"), 7) == "    N/A"
    assert ENG.float_str(float("-inf"), 6) == "   N/A"
    assert ENG.bandwidths(1 << 20, 0.0, 2) is None            # timer gave no time
    assert ENG.bandwidths(1 << 20, -1e-6, 2) is None
    assert ENG.bandwidths(1 << 20, float("nan"), 2) is None
    assert ENG.bandwidths(4, 5e-324, 2) is None                # 4e-9 / 5e-324 overflows to inf
    assert ENG.bandwidths(1 << 20, 1e-3, 0) is None
    algbw, busbw = ENG.bandwidths(1 << 20, 1e-3, 4)
    assert algbw == pytest.approx(1.048576) and busbw == pytest.approx(1.048576 * 1.5)
    assert ENG.bandwidths(1 << 20, 1e-3, 1) == (pytest.approx(1.048576), 0.0)


def test_engine_na_row_is_rejected_by_the_parser():
    row = "%12li  %12li  %8s  %6s  %6s" % (1 << 20, 1 << 18, "float", "sum", "-1") + \
        "  %7s  %6s  %6s  %6s" % (ENG.float_str(float("nan"), 7), ENG.float_str(float("nan"), 6),
                                   ENG.float_str(float("nan"), 6), "0") * 2
    text = (REPO / "tests" / "fixtures" / "nccl-tests" / "derived-kiln-cpu-engine-3node-example.txt").read_text()
    lines = text.splitlines()
    lines.insert(12, row)
    parsed = kiln_nccl.parse("\n".join(lines) + "\n")
    assert parsed["status"] == "invalid" and parsed["rejected_rows"][0]["size"] == 1 << 20


def test_engine_unexpected_error_is_one_line_and_exit_1(monkeypatch, capsys):
    def boom(argv=None):
        raise MemoryError("cannot allocate")

    monkeypatch.setattr(ENG, "run", boom)
    assert ENG.main([]) == ENG.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.strip() == "kiln-cpu-allreduce: error: MemoryError: cannot allocate"


def test_tools_entry_is_the_role_file():
    """tools/kiln-cpu-allreduce is a relative link to the file burnin_tools installs (one copy)."""
    role_file = REPO / "roles" / "burnin_tools" / "files" / "kiln-cpu-allreduce"
    assert ENGINE.is_symlink()
    assert os.readlink(ENGINE) == "../roles/burnin_tools/files/kiln-cpu-allreduce"
    assert ENGINE.resolve() == role_file.resolve()
    assert ENGINE.read_bytes() == role_file.read_bytes()
