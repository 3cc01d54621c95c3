#!/usr/bin/env bash
# Shared helpers for kiln's test-bed scripts. Sourced, not executed.
# shellcheck shell=bash
set -euo pipefail

KILN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KILN_CACHE="${KILN_ROOT}/.cache"
# The test bed's podman network. Fixed and documented (docs/testbed.md, molecule/README.md):
# every test node lives here and test traffic never leaves it, except apt
# traffic to the package mirror through podman's NAT.
KILN_NET_NAME="${KILN_NET_NAME:-kiln-testbed}"
KILN_NET_SUBNET="${KILN_NET_SUBNET:-10.89.77.0/24}"
KILN_NET_GATEWAY="${KILN_NET_GATEWAY:-10.89.77.1}"
# The air-gapped scenario's internal network (no gateway, no NAT: molecule/airgap).
KILN_AIRGAP_NET_NAME="${KILN_AIRGAP_NET_NAME:-kiln-airgap}"
KILN_AIRGAP_NET_SUBNET="${KILN_AIRGAP_NET_SUBNET:-10.89.78.0/24}"
KILN_IMAGE_REPO="localhost/kiln-testbed"
export CONTAINERS_CONF="${CONTAINERS_CONF:-${KILN_CACHE}/containers.conf}"
# The test bed's connection (tests/harness/connection_plugins/podman.py, short name podman),
# as the Makefile exports it, for scripts run without make (demo.sh, bench/noop_rerun.sh):
# the root ansible.cfg is a real site's and names no test path.
export ANSIBLE_CONNECTION_PLUGINS="${ANSIBLE_CONNECTION_PLUGINS:-${KILN_ROOT}/tests/harness/connection_plugins}"

log() { printf '[kiln-testbed] %s\n' "$*" >&2; }
die() { printf '[kiln-testbed] ERROR: %s\n' "$*" >&2; exit 1; }

# Tag of the image built from the recipe in tests/harness/image/: a hash of
# every file there, so the image is rebuilt only when the recipe changes.
kiln_image_tag() {
  (cd "${KILN_ROOT}/tests/harness/image" && find . -type f -print0 | sort -z | xargs -0 sha256sum) \
    | sha256sum | cut -c1-12
}

# The image scenarios run on. KILN_TEST_IMAGE overrides it (e.g. a systemd
# Ubuntu 24.04 or Rocky 9 image from a registry you can reach).
kiln_image() {
  if [[ -n "${KILN_TEST_IMAGE:-}" ]]; then
    printf '%s\n' "${KILN_TEST_IMAGE}"
  else
    printf '%s:%s\n' "${KILN_IMAGE_REPO}" "$(kiln_image_tag)"
  fi
}
