#!/usr/bin/env bash
# `make test`: lint + unit -> test bed -> every molecule scenario, with a
# timing line per stage and a summary table at the end.
#
# Stages run in waves; the stages of one wave run at the same time, each into
# its own log (.cache/logs/<stage>.log), printed whole, in order, when the wave
# ends, so CI output reads as if they had run one after another:
#   1. lint and unit (independent; each mostly one process, the machine has 2 cores)
#   2. the test bed (image, network, fixture repositories)
#   3. the scenarios that do not measure anything (KILN_TEST_JOBS at a time, default 2),
#      and, last in that wave, the setup (create, prepare, converge) of those that do
#   4. the side effect and verify of the scenarios that measure (burnin: its
#      all-reduce and iperf3 figures are judged against floors and the node's own
#      baselines; upgrade: each batch's burn-in), alone on the machine, one after
#      the other (tests/harness/scenario.sh)
# KILN_TEST_JOBS=1 runs every stage one after another.
set -uo pipefail
cd "$(dirname "$0")/../.."
scenarios=("$@")
jobs=${KILN_TEST_JOBS:-2}
# Scenarios that must have the machine to themselves.
alone=" burnin upgrade "
rm -f .cache/stage-times.tsv
mkdir -p .cache/logs
total_start=$(date +%s)
failed=0

# wave 'NAME|CMD'... -- run the stages (at most $jobs at once), then print their logs in order
wave() {
  local specs=("$@") pids=() names=() i name
  for spec in "${specs[@]}"; do
    name=${spec%%|*}
    if [[ ${jobs} -le 1 || ${#specs[@]} -eq 1 ]]; then
      # shellcheck disable=SC2086  # the command is a word list by design
      tests/harness/stage.sh "${name}" ${spec#*|} 2>&1 | tee ".cache/logs/${name//[:\/]/_}.log"
      [[ ${PIPESTATUS[0]} -eq 0 ]] || failed=1
      continue
    fi
    while [[ $(jobs -rp | wc -l) -ge ${jobs} ]]; do wait -n || true; done
    # shellcheck disable=SC2086
    tests/harness/stage.sh "${name}" ${spec#*|} >".cache/logs/${name//[:\/]/_}.log" 2>&1 &
    pids+=("$!"); names+=("${name}")
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed=1
    cat ".cache/logs/${names[$i]//[:\/]/_}.log"
  done
}

wave "lint|tests/harness/lint.sh" "unit|python -m pytest -q -p no:cacheprovider -n 2 --durations=10 tests/unit"
tests/harness/stage.sh testbed tests/harness/testbed.sh 2>&1 | tee .cache/logs/testbed.log
if [[ ${PIPESTATUS[0]} -eq 0 ]]; then
  set -a; source .cache/testbed.env; set +a
  together=() after=()
  setups=()
  for s in "${scenarios[@]}"; do
    if [[ ${alone} == *" ${s} "* && ${jobs} -gt 1 ]]; then
      setups+=("molecule:${s}:converge|tests/harness/scenario.sh setup ${s}")
      after+=("molecule:${s}|tests/harness/scenario.sh measure ${s}")
    elif [[ ${alone} == *" ${s} "* ]]; then
      after+=("molecule:${s}|molecule test -s ${s}")
    else
      together+=("molecule:${s}|molecule test -s ${s}")
    fi
  done
  together+=("${setups[@]}")
  [[ ${#together[@]} -gt 0 ]] && wave "${together[@]}"
  for spec in "${after[@]}"; do wave "${spec}"; done
else
  failed=1
fi

echo
# Why each failed stage failed, here in the tail where CI's excerpt of the output shows it.
while IFS=$'\t' read -r name status _; do
  [[ ${status} == ok ]] && continue
  echo "=== [kiln] ${name} ${status}: digest of .cache/logs/${name//[:\/]/_}.log"
  python3 tests/harness/digest.py ".cache/logs/${name//[:\/]/_}.log" 18
done <.cache/stage-times.tsv
echo "=== [kiln] stage timings"
column -t -s $'\t' .cache/stage-times.tsv
echo "=== [kiln] total $(( $(date +%s) - total_start )) s"
if [[ ${failed} -ne 0 ]]; then
  echo "=== [kiln] make test: FAILED"
  exit 1
fi
echo "=== [kiln] make test: all stages passed"
