"""module_utils/kiln/burnin/launch.py and its filter kiln_launch_argv: the burn-in's srun/mpirun argv.

The golden argvs are the ones playbooks/burnin.yml built with inline Jinja before the function
existed (its __launch_srun / __launch_mpirun expressions), byte for byte.
"""
from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.burnin import launch as kl
import kiln_launch_filters as klf

SLURM = {"c1": "node-c1", "c2": "node-c2", "c3": "node-c3", "c4": "node-c4"}
ADDR = {"c1": "10.0.0.11", "c2": "10.0.0.12", "c3": "10.0.0.13", "c4": "10.0.0.14"}
CPU = ["/usr/local/bin/kiln-cpu-allreduce", "-b", "1M", "-e", "64M", "-f", "2", "-n", "10", "-w", "2"]
NCCL = ["/opt/nccl-tests/build/all_reduce_perf", "-b", "1G", "-e", "16G", "-f", "2", "-g", "1", "-c", "1", "-n", "10"]
ENV = ["OMPI_MCA_btl", "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include", "KILN_BURNIN_IFACE",
       "NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_ALGO", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"]


# --------------------------------------------------------------------------
# the argv the playbook built before (golden)


def test_srun_fabric_inside_the_reservation():
    argv = kl.launch_argv("srun", ["c2", "c1", "c3", "c4"], ppn=1, program=CPU, timeout=1800,
                          slurm_names=SLURM, reservation="kiln-burnin-20261202T000000Z-x-y")
    assert argv == ["timeout", "1800", "srun", "--job-name=kiln-burnin", "--ntasks-per-node=1", "--mpi=pmix",
                    "--export=ALL", "-N", "4", "-w", "node-c2,node-c1,node-c3,node-c4",
                    "--reservation=kiln-burnin-20261202T000000Z-x-y"] + CPU


def test_srun_pair_without_a_reservation():
    argv = kl.launch_argv("srun", ["c1", "c3"], ppn="8", program=NCCL, timeout="900", slurm_names=SLURM,
                          reservation="")
    assert argv == ["timeout", "900", "srun", "--job-name=kiln-burnin", "--ntasks-per-node=8", "--mpi=pmix",
                    "--export=ALL", "-N", "2", "-w", "node-c1,node-c3"] + NCCL


def test_mpirun_fabric_forwards_the_environment_names_in_order():
    argv = kl.launch_argv("mpirun", ["c2", "c1", "c3", "c4"], ppn=8, program=NCCL, timeout=1800,
                          addresses=ADDR, iface="ens2", env_names=ENV)
    assert argv == (["timeout", "1800", "mpirun", "--allow-run-as-root", "--mca", "btl", "self,tcp", "--mca",
                     "btl_tcp_if_include", "ens2"] + [w for name in ENV for w in ("-x", name)]
                    + ["-np", "32", "--host", "10.0.0.12:8,10.0.0.11:8,10.0.0.13:8,10.0.0.14:8"] + NCCL)


def test_mpirun_pair_cpu_engine():
    argv = kl.launch_argv("mpirun", ["c4", "c2"], ppn=1, program=CPU, timeout=60, addresses=ADDR, iface="eth0",
                          env_names=ENV[:4], reservation=None)
    assert argv[:10] == ["timeout", "60", "mpirun", "--allow-run-as-root", "--mca", "btl", "self,tcp", "--mca",
                         "btl_tcp_if_include", "eth0"]
    assert argv[10:18] == ["-x", "OMPI_MCA_btl", "-x", "OMPI_MCA_btl_tcp_if_include", "-x",
                           "OMPI_MCA_oob_tcp_if_include", "-x", "KILN_BURNIN_IFACE"]
    assert argv[18:] == ["-np", "2", "--host", "10.0.0.14:1,10.0.0.12:1"] + CPU


def test_mpirun_ignores_a_reservation_and_srun_ignores_addresses():
    mpirun = kl.launch_argv("mpirun", ["c1"], ppn=2, program=CPU, timeout=5, addresses=ADDR, iface="eth0",
                            reservation="kiln-burnin-x")
    assert not any("reservation" in w for w in mpirun)
    srun = kl.launch_argv("srun", ["c1"], ppn=2, program=CPU, timeout=5, slurm_names=SLURM, addresses={"c1": ""},
                          iface="")
    assert srun[srun.index("-w") + 1] == "node-c1"


def test_numbers_in_the_program_become_text():
    argv = kl.launch_argv("srun", ["c1"], ppn=1, program=["/bin/engine", "-n", 8, "-x", 1.5], timeout=0,
                          slurm_names=SLURM)
    assert argv[:2] == ["timeout", "0"] and argv[-5:] == ["/bin/engine", "-n", "8", "-x", "1.5"]


# --------------------------------------------------------------------------
# refusals, each naming what to fix


@pytest.mark.parametrize("ppn", [0, -1, "0", "-2", "x", "", None, 1.5, True, [1]])
def test_refuses_a_non_positive_or_non_whole_ppn(ppn):
    with pytest.raises(kl.LaunchError, match=r"kiln_burnin_fabric_ranks_per_node\) must be a whole number >= 1"):
        kl.launch_argv("srun", ["c1", "c2"], ppn=ppn, program=CPU, timeout=9, slurm_names=SLURM)


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
@pytest.mark.parametrize("members", [[], ()])
def test_refuses_an_empty_member_list(launcher, members):
    with pytest.raises(kl.LaunchError, match="members is empty"):
        kl.launch_argv(launcher, members, ppn=1, program=CPU, timeout=9, slurm_names=SLURM, addresses=ADDR,
                       iface="eth0")


@pytest.mark.parametrize("members, match", [
    ("c1,c2", "must be a list of inventory hosts"),
    (None, "must be a list of inventory hosts"),
    (["c1", ""], "must be inventory host names"),
    (["c1", 3], "must be inventory host names"),
    (["c1", "c1"], "must be distinct"),
])
def test_refuses_malformed_members(members, match):
    with pytest.raises(kl.LaunchError, match=match):
        kl.launch_argv("srun", members, ppn=1, program=CPU, timeout=9, slurm_names=SLURM)


@pytest.mark.parametrize("timeout", [-1, "-5", "ten", 1.5, None, False])
def test_refuses_a_bad_timeout(timeout):
    with pytest.raises(kl.LaunchError, match="kiln_burnin_pair_timeout, kiln_burnin_fabric_timeout"):
        kl.launch_argv("srun", ["c1"], ppn=1, program=CPU, timeout=timeout, slurm_names=SLURM)


def test_refuses_an_unknown_launcher():
    with pytest.raises(kl.LaunchError, match="launcher must be srun or mpirun"):
        kl.launch_argv("ssh", ["c1"], ppn=1, program=CPU, timeout=9)


@pytest.mark.parametrize("names, match", [
    ({"c1": "node-c1"}, r"member 'c2' has no Slurm node name"),
    ({"c1": "node-c1", "c2": ""}, r"member 'c2' has no Slurm node name"),
    ({"c1": "node-c1", "c2": "a,b"}, "contains a comma or white space"),
    ({"c1": "node-c1", "c2": "a b"}, "contains a comma or white space"),
    (None, "must be a mapping"),
])
def test_srun_refuses_members_without_a_usable_slurm_name(names, match):
    with pytest.raises(kl.LaunchError, match=match):
        kl.launch_argv("srun", ["c1", "c2"], ppn=1, program=CPU, timeout=9, slurm_names=names)


@pytest.mark.parametrize("addresses, iface, match", [
    ({"c1": "10.0.0.11"}, "eth0", r"member 'c2' has no address \(ansible_facts.default_ipv4.address\)"),
    ({"c1": "10.0.0.11", "c2": ""}, "eth0", r"member 'c2' has no address"),
    (ADDR, "", "kiln_burnin_iface must name one network interface"),
    (ADDR, "eth0,eth1", "kiln_burnin_iface must name one network interface"),
])
def test_mpirun_refuses_members_without_an_address_or_an_interface(addresses, iface, match):
    with pytest.raises(kl.LaunchError, match=match):
        kl.launch_argv("mpirun", ["c1", "c2"], ppn=1, program=CPU, timeout=9, addresses=addresses, iface=iface)


@pytest.mark.parametrize("program, match", [
    ([], "program is empty"),
    ("all_reduce_perf -b 1G", "program must be a list of arguments"),
    (["/bin/engine", None], "each argument must be a string or a number"),
    (["/bin/engine", ["-b"]], "each argument must be a string or a number"),
])
def test_refuses_a_program_that_is_not_an_argv(program, match):
    with pytest.raises(kl.LaunchError, match=match):
        kl.launch_argv("srun", ["c1"], ppn=1, program=program, timeout=9, slurm_names=SLURM)


def test_refuses_a_reservation_that_is_not_a_name():
    with pytest.raises(kl.LaunchError, match="reservation must be a Slurm reservation name"):
        kl.launch_argv("srun", ["c1"], ppn=1, program=CPU, timeout=9, slurm_names=SLURM, reservation="a b")


# --------------------------------------------------------------------------
# properties: any members, any ppn -- an argv of strings, counts right, names never shell text

_HOST = st.text(st.characters(exclude_categories=("Cs",), exclude_characters=",\x00"), min_size=1, max_size=12)
_NAME = st.text(st.characters(exclude_categories=("Cs", "Zs", "Cc", "Zl", "Zp"), exclude_characters=","),
                min_size=1, max_size=16).filter(lambda s: not re.search(r"\s", s))
_PROGRAM = st.lists(st.one_of(st.text(max_size=10), st.integers(-5, 10**6)), min_size=1, max_size=6)


@st.composite
def _launch(draw):
    members = draw(st.lists(_HOST, min_size=1, max_size=8, unique=True))
    names = {m: draw(_NAME) for m in members}
    return members, names


@settings(max_examples=150, deadline=None)
@given(_launch(), st.integers(1, 128), _PROGRAM, st.integers(0, 10**6), st.one_of(st.none(), st.just("kiln-burnin-r1")))
def test_srun_argv_properties(launch, ppn, program, timeout, reservation):
    members, names = launch
    argv = kl.launch_argv("srun", members, ppn=ppn, program=program, timeout=timeout, slurm_names=names,
                          reservation=reservation)
    assert isinstance(argv, list) and all(type(w) is str for w in argv)
    assert argv[:3] == ["timeout", str(timeout), "srun"]
    assert f"--ntasks-per-node={ppn}" in argv and argv[argv.index("-N") + 1] == str(len(members))
    hosts = argv[argv.index("-w") + 1]
    assert hosts.split(",") == [names[m] for m in members]  # one element, in order, verbatim
    assert ("--reservation=kiln-burnin-r1" in argv) == (reservation is not None)
    assert argv[len(argv) - len(program):] == [str(w) for w in program]
    assert "sh" not in argv[:argv.index("-w")] and "-c" not in argv[:argv.index("-w")]  # no shell in the launch


@settings(max_examples=150, deadline=None)
@given(_launch(), st.integers(1, 128), _PROGRAM, st.integers(0, 10**6),
       st.lists(st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,12}\Z"), max_size=6, unique=True), _NAME)
def test_mpirun_argv_properties(launch, ppn, program, timeout, env, iface):
    members, addresses = launch
    argv = kl.launch_argv("mpirun", members, ppn=ppn, program=program, timeout=timeout, addresses=addresses,
                          iface=iface, env_names=env)
    assert isinstance(argv, list) and all(type(w) is str for w in argv)
    assert argv[:3] == ["timeout", str(timeout), "mpirun"]
    assert argv[argv.index("btl_tcp_if_include") + 1] == iface
    head = argv[:len(argv) - len(program)]
    assert [head[i + 1] for i, w in enumerate(head) if w == "-x"] == env
    assert argv[argv.index("-np") + 1] == str(len(members) * ppn)
    hosts = argv[argv.index("--host") + 1]
    assert hosts.split(",") == [f"{addresses[m]}:{ppn}" for m in members]
    assert argv[len(argv) - len(program):] == [str(w) for w in program]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["srun", "mpirun"]), st.integers(-10**6, 0))
def test_any_ppn_below_one_is_refused(launcher, ppn):
    with pytest.raises(kl.LaunchError, match="kiln_burnin_fabric_ranks_per_node"):
        kl.launch_argv(launcher, ["c1"], ppn=ppn, program=CPU, timeout=1, slurm_names=SLURM, addresses=ADDR,
                       iface="eth0")


def test_hostile_host_names_stay_single_argv_words():
    hostile = {"a": "$(reboot)", "b": "`id`;rm", "c": "x'\"|&>"}
    argv = kl.launch_argv("srun", ["a", "b", "c"], ppn=1, program=CPU, timeout=9, slurm_names=hostile)
    assert argv[argv.index("-w") + 1] == "$(reboot),`id`;rm,x'\"|&>"
    assert sum("$(reboot)" in w for w in argv) == 1


# --------------------------------------------------------------------------
# the filter: a thin wrapper


LAUNCH = {"launcher": "mpirun", "ppn": 8, "iface": "ens2", "env": dict.fromkeys(ENV, "v"), "slurm_names": SLURM,
          "addresses": ADDR, "reservation": ""}


def test_filters_exposed():
    assert set(klf.FilterModule().filters()) == {"kiln_launch_argv", "kiln_launch_mode", "kiln_launch_program",
                                                 "kiln_launch_context", "kiln_iperf_link", "kiln_node_link"}


def test_filter_equals_the_function_and_reads_the_environment_names():
    assert kl.kiln_launch_argv(["c2", "c1", "c3", "c4"], LAUNCH, NCCL, 1800) == kl.launch_argv(
        "mpirun", ["c2", "c1", "c3", "c4"], ppn=8, program=NCCL, timeout=1800, addresses=ADDR, iface="ens2",
        env_names=ENV)
    srun = dict(LAUNCH, launcher="srun", reservation="kiln-burnin-r")
    assert kl.kiln_launch_argv(["c1", "c3"], srun, CPU, 900) == kl.launch_argv(
        "srun", ["c1", "c3"], ppn=8, program=CPU, timeout=900, slurm_names=SLURM, reservation="kiln-burnin-r")


@pytest.mark.parametrize("members, launch, match", [
    ([], LAUNCH, "kiln_launch_argv: members is empty"),
    (["c1"], dict(LAUNCH, ppn=0), "kiln_launch_argv: processes per node"),
    (["c1"], "srun", "launch must be a mapping"),
    (["c1"], dict(LAUNCH, hosts=["c1"]), "unknown launch keys hosts"),
    (["c1"], {"launcher": "srun"}, "launch needs launcher and ppn"),
])
def test_filter_errors_are_ansible_filter_errors(members, launch, match):
    with pytest.raises(AnsibleFilterError, match=match):
        kl.kiln_launch_argv(members, launch, CPU, 9)


def test_no_filter_file_shadows_a_module_utils_module():
    from pathlib import Path
    repo = Path(kl.__file__).resolve().parents[1]
    filters = {p.stem for p in (repo / "filter_plugins").glob("*.py")}
    modules = {p.stem for p in (repo / "module_utils").glob("*.py")}
    assert not filters & modules


# --------------------------------------------------------------------------
# the mode table and the engine program (the Jinja tables they replace, golden)

# The playbook's tables before they moved here: {'quick': 1, 'default': 2, 'acceptance': 3, 'swap': 2} (dcgmi
# level), {'quick': '5', 'default': '10', 'acceptance': '50', 'swap': '10'} (iterations), pairs unless quick, the
# fabric all-reduce in default and acceptance only, iperf3 unless quick.
GOLDEN = {"quick": (1, 5, False, False, False), "default": (2, 10, True, True, True),
          "acceptance": (3, 50, True, True, True), "swap": (2, 10, True, False, True)}


@pytest.mark.parametrize("mode", sorted(GOLDEN))
def test_the_mode_table_is_the_playbooks_old_one(mode):
    plan = klf.FilterModule().filters()["kiln_launch_mode"](mode)
    assert (plan["dcgm_level"], plan["iters"], plan["pairs"], plan["fabric"], plan["link"]) == GOLDEN[mode]


def test_the_mode_table_names_every_mode_the_settings_allow():
    import yaml

    from kiln_paths import REPO
    spec = yaml.safe_load((REPO / "roles/burnin_settings/meta/argument_specs.yml").read_text())
    assert sorted(spec["argument_specs"]["main"]["options"]["kiln_burnin_mode"]["choices"]) == sorted(kl.MODES)


def test_a_plan_is_a_copy():
    kl.mode_plan("quick")["iters"] = 99
    assert kl.MODES["quick"]["iters"] == 5


@pytest.mark.parametrize("mode", sorted(GOLDEN))
def test_default_programs_are_the_playbooks_old_argv(mode):
    iters = str(GOLDEN[mode][1])
    assert kl.engine_program("cpu", CPU[0], mode) == CPU[:8] + [iters, "-w", "2"]
    assert kl.engine_program("nccl-tests", NCCL[0], mode) == NCCL[:-1] + [iters]


def test_the_operators_arguments_replace_the_defaults():
    assert kl.engine_program("cpu", "/x", "acceptance", ["-b", 8, "-e", "16M"]) == ["/x", "-b", "8", "-e", "16M"]
    assert kl.engine_program("nccl-tests", "/y", "quick", []) == ["/y"]


@given(mode=st.sampled_from(sorted(GOLDEN)), engine=st.sampled_from(sorted(kl.ENGINES)),
       tool=st.text(min_size=1, max_size=20))
@settings(max_examples=100, deadline=None)
def test_a_program_is_its_tool_then_strings_with_the_modes_iterations(mode, engine, tool):
    argv = kl.engine_program(engine, tool, mode)
    assert argv[0] == tool and all(isinstance(a, str) for a in argv)
    args = argv[1:]
    assert args[args.index("-n") + 1] == str(kl.MODES[mode]["iters"])
    assert "{iters}" not in argv


@pytest.mark.parametrize(("call", "says"), [
    (lambda f: f["kiln_launch_mode"]("fast"), "kiln_launch_mode: mode must be one of quick, default"),
    (lambda f: f["kiln_launch_mode"](2.0), "kiln_burnin_mode"),
    (lambda f: f["kiln_launch_mode"](None), "kiln_burnin_mode"),
    (lambda f: f["kiln_launch_program"]("/x", "gloo", "quick"), "engine must be one of cpu, nccl-tests"),
    (lambda f: f["kiln_launch_program"]("", "cpu", "quick"), "program path must be a non-empty string"),
    (lambda f: f["kiln_launch_program"](None, "cpu", "quick"), "program path must be a non-empty string"),
    (lambda f: f["kiln_launch_program"]("/x", "cpu", "slow"), "mode must be one of"),
    (lambda f: f["kiln_launch_program"]("/x", "cpu", "quick", "-n 5"), "must be a list of arguments"),
    (lambda f: f["kiln_launch_program"]("/x", "cpu", "quick", [["-n"]]), "each argument must be a string or a number"),
])
def test_hostile_input_is_one_line_naming_it(call, says):
    with pytest.raises(AnsibleFilterError, match=re.escape(says)) as err:
        call(klf.FilterModule().filters())
    assert "\n" not in str(err.value)
