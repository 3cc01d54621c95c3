#!/usr/bin/env bash
# Run one test stage and print a timing line for it:  stage.sh NAME CMD...
set -uo pipefail
name="$1"; shift
start=$(date +%s)
echo "=== [kiln] stage ${name}: $*"
"$@"
rc=$?
dur=$(( $(date +%s) - start ))
status=$([[ ${rc} -eq 0 ]] && echo ok || echo "FAILED (rc ${rc})")
echo "=== [kiln] stage ${name}: ${status} in ${dur} s"
mkdir -p .cache
printf '%s\t%s\t%s\n' "${name}" "${status}" "${dur}" >>.cache/stage-times.tsv
exit "${rc}"
