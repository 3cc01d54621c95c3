#!/usr/bin/env bash
# One molecule scenario in two stages, for `make test`: its setup may share the
# machine with other scenarios, its measurements run alone.
#   scenario.sh setup NAME    destroy, syntax, create, prepare, converge
#   scenario.sh measure NAME  side effect and verify, then destroy (always)
# The steps and playbooks are those of `molecule test` for a scenario whose own
# test_sequence is destroy, syntax, create, prepare, converge, side_effect,
# [verify,] destroy (burnin; upgrade, whose side effect asserts as it goes);
# measure runs only after a successful setup.
set -uo pipefail
step="$1"; name="$2"
ready=".cache/logs/${name}.converged"
if ! python3 - "molecule/${name}/molecule.yml" <<'PY'
import sys, yaml
seq = (yaml.safe_load(open(sys.argv[1])).get("scenario") or {}).get("test_sequence")
head = ["destroy", "syntax", "create", "prepare", "converge", "side_effect"]
sys.exit(0 if seq in (head + ["verify", "destroy"], head + ["destroy"]) else 1)
PY
then
  echo "[kiln] ${name}: its test_sequence is not the two-stage one (see this file): use molecule test" >&2
  exit 2
fi
case "${step}" in
  setup)
    rm -f "${ready}"
    molecule destroy -s "${name}" && molecule syntax -s "${name}" && molecule converge -s "${name}"
    rc=$?
    if [[ ${rc} -eq 0 ]]; then touch "${ready}"; else molecule destroy -s "${name}"; fi
    exit "${rc}"
    ;;
  measure)
    if [[ ! -f "${ready}" ]]; then
      echo "[kiln] ${name}: its setup stage failed; nothing measured" >&2
      exit 1
    fi
    if grep -qE '^ *- verify$' "molecule/${name}/molecule.yml"; then
      molecule side-effect -s "${name}" && molecule verify -s "${name}"
    else
      molecule side-effect -s "${name}"
    fi
    rc=$?
    molecule destroy -s "${name}"
    rm -f "${ready}"
    exit "${rc}"
    ;;
  *)
    echo "usage: scenario.sh setup|measure NAME" >&2
    exit 2
    ;;
esac
