#!/usr/bin/env bash
# Benchmark (not a test): the cost of a no-op re-run against the first converge
# on the demo cluster (make demo's three nodes: controller + two GPU nodes).
#
#   1. fresh nodes (tests/harness/demo.sh down, then nodes);
#   2. first converge: site.yml without the burn-in (--skip-tags burnin_run is
#      not used: the burn-in playbook is left out by running the same
#      playbooks site.yml imports before it);
#   3. the same command again: the no-op re-run.
#
# Prints wall time of each, their ratio, the task results per host (ok +
# changed + skipped + failed from the recap, includes counted as Ansible counts
# them) and the package-mechanism task runs (kiln_packages: pinned_play,
# pinned_install, hold, packages; each reads the package database in-process). The nodes are
# reached with the test bed's connection (tests/harness/connection_plugins/
# podman.py, pipelining; ANSIBLE_CONNECTION_PLUGINS from tests/harness/lib.sh)
# and its inventory named with -i; KILN_BENCH_CONNECTION=containers.podman.podman
# measures with the collection's connection instead. Usage (from the
# repository root, after make testbed): bench/noop_rerun.sh [results/bench/noop.json]
set -euo pipefail
source "$(dirname "$0")/../tests/harness/lib.sh"
export PATH="${KILN_ROOT}/.venv/bin:${PATH}"
cd "${KILN_ROOT}"
out="${1:-results/bench/noop.json}"
mkdir -p "$(dirname "${out}")" results/bench
inventory="inventories/testbed/hosts.yml"
playbooks=(playbooks/preflight.yml playbooks/common.yml playbooks/gpu.yml playbooks/slurm.yml)
tests/harness/demo.sh down
tests/harness/demo.sh nodes
export ANSIBLE_CACHE_PLUGIN_CONNECTION="${KILN_CACHE}/bench-facts"
rm -rf "${ANSIBLE_CACHE_PLUGIN_CONNECTION}"
run() {
  local log="$1" start end
  start=$(date +%s.%N)
  ansible-playbook -i "${inventory}" "${playbooks[@]}" ${KILN_BENCH_CONNECTION:+-e ansible_connection=${KILN_BENCH_CONNECTION}} >"${log}" 2>&1 || { tail -40 "${log}"; die "run failed: ${log}"; }
  end=$(date +%s.%N)
  python3 -c "print(round(${end} - ${start}, 1))"
}
first=$(run results/bench/noop-first.log)
second=$(run results/bench/noop-second.log)
python3 - "${first}" "${second}" "${out}" <<'PY'
import json, re, sys
first, second, out = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
def recap(path):
    hosts = {}
    text = open(path).read()
    for m in re.finditer(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)", text, re.M):
        # one ansible-playbook run over several playbooks prints cumulative recaps: keep the last
        hosts[m[1]] = {"results": int(m[2]) + int(m[5]) + int(m[6]), "changed": int(m[3])}
    pkg_tasks = len(re.findall(r"^TASK \[common : (pinned_install \| Install the exact|pinned_play \| Install every|hold \| Set the hold|packages \| Install|install \| Install node)", text, re.M))
    gathers = len(re.findall(r"^TASK \[.*package_facts|^TASK \[.*Gather the installed packages", text, re.M))
    return {"hosts": hosts, "package_tasks": pkg_tasks, "package_facts_tasks": gathers}
res = {"first_converge_s": first, "noop_rerun_s": second, "ratio": round(second / first, 2),
       "first": recap("results/bench/noop-first.log"), "noop": recap("results/bench/noop-second.log")}
json.dump(res, open(out, "w"), indent=2)
print(f"first converge {first:.1f} s, no-op re-run {second:.1f} s, ratio {res['ratio']}")
for h, v in sorted(res["noop"]["hosts"].items()):
    print(f"  no-op {h}: {v['results']} task results, {v['changed']} changed")
print(f"  no-op: package-mechanism tasks {res['noop']['package_tasks']} (task headers, all hosts; each a kiln_packages run that reads the database in-process), "
      f"package_facts tasks {res['noop']['package_facts_tasks']} (all hosts)")
PY
