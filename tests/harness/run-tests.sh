#!/usr/bin/env bash
# `make test`: lint -> unit -> test bed -> every molecule scenario, with a
# timing line per stage and a summary table at the end.
set -uo pipefail
cd "$(dirname "$0")/../.."
scenarios=("$@")
rm -f .cache/stage-times.tsv
mkdir -p .cache
total_start=$(date +%s)
failed=0
run() { tests/harness/stage.sh "$@" || failed=1; }

run lint tests/harness/lint.sh
run unit python -m pytest -q -p no:cacheprovider tests/unit
if tests/harness/stage.sh testbed tests/harness/testbed.sh; then
  set -a; source .cache/testbed.env; set +a
  for s in "${scenarios[@]}"; do
    run "molecule:${s}" molecule test -s "${s}"
  done
else
  failed=1
fi

echo
echo "=== [kiln] stage timings"
column -t -s $'\t' .cache/stage-times.tsv
echo "=== [kiln] total $(( $(date +%s) - total_start )) s"
if [[ ${failed} -ne 0 ]]; then
  echo "=== [kiln] make test: FAILED"
  exit 1
fi
echo "=== [kiln] make test: all stages passed"
