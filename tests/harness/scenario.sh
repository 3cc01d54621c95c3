#!/usr/bin/env bash
# One molecule scenario in two stages, for `make test`: its setup may share the
# machine with other scenarios, its measurements run alone.
#   scenario.sh setup NAME    destroy, syntax, create, prepare, converge
#   scenario.sh measure NAME  side effect and verify, then destroy (always)
# The steps and playbooks are those of `molecule test` (the scenario's
# test_sequence); measure runs only after a successful setup.
set -uo pipefail
step="$1"; name="$2"
ready=".cache/logs/${name}.converged"
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
    molecule side_effect -s "${name}" && molecule verify -s "${name}"
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
