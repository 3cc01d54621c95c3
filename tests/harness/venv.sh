#!/usr/bin/env bash
# Create or reuse the controller virtualenv from requirements.txt.
# Reinstalls only when requirements.txt changed (stamp holds its hash).
set -euo pipefail
venv="${1:-.venv}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
want="$(sha256sum "${root}/requirements.txt" | cut -d' ' -f1)"
stamp="${venv}/.kiln-stamp"
if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
  echo "[kiln] venv ${venv} is current" >&2
  exit 0
fi
py="${KILN_PYTHON:-python3}"
command -v "${py}" >/dev/null || { echo "[kiln] ${py} not found" >&2; exit 1; }
"${py}" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "[kiln] Python >= 3.11 is needed for ansible-core 2.19" >&2; exit 1; }
if [[ ! -x "${venv}/bin/python" ]]; then
  echo "[kiln] creating venv ${venv}" >&2
  "${py}" -m venv "${venv}"
fi
echo "[kiln] installing the pinned toolchain (requirements.txt) into ${venv}" >&2
"${venv}/bin/python" -m pip install -q --disable-pip-version-check -r "${root}/requirements.txt"
echo "${want}" >"${stamp}"
