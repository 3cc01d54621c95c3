#!/usr/bin/env bash
# Build an OS-identity image over the test-bed root: $1 = the OS directory
# here (rocky-9, ubuntu-22.04, ubuntu-24.04), $2 = the image to build (NAME:TAG), $3 = the base image.
# The node keeps Debian's userland; what changes is what kiln's OS branches
# see: /etc/os-release (+ /etc/redhat-release or /etc/lsb-release), and for EL the package manager
# (Debian's dnf, rpm and dnf-plugins-core, from <os>/packages.txt). Every RPM
# such a node installs comes from the fixture repositories
# (tests/fixtures/nvidia-repo/manifest-el9.yml). molecule/README.md says what
# such a node proves and what it does not. Pulls nothing from a registry.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
os="$1"; image="$2"; base="$3"
dir="${here}/${os}"
[[ -f "${dir}/os-release" ]] || { echo "[kiln-testbed] no OS identity ${dir}/os-release" >&2; exit 1; }
name="kiln-os-build-$$"
trap 'podman rm -f "${name}" >/dev/null 2>&1 || true' EXIT
podman run -d --name "${name}" --network "${KILN_NET_NAME:-kiln-testbed}" "${base}" sleep infinity >/dev/null
if [[ -f "${dir}/packages.txt" ]]; then
  pkgs="$(grep -vE '^\s*(#|$)' "${dir}/packages.txt" | paste -sd' ' -)"
  # shellcheck disable=SC2086 # a word per package
  podman exec -e DEBIAN_FRONTEND=noninteractive "${name}" sh -c \
    'apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null && rm -rf /var/cache/apt/archives/*.deb' \
    sh ${pkgs}
fi
podman cp "${dir}/os-release" "${name}:/usr/lib/os-release"
podman exec "${name}" ln -sf ../usr/lib/os-release /etc/os-release
if [[ -f "${dir}/lsb-release" ]]; then
  podman cp "${dir}/lsb-release" "${name}:/etc/lsb-release"
fi
if [[ -f "${dir}/redhat-release" ]]; then
  podman cp "${dir}/redhat-release" "${name}:/etc/redhat-release"
  podman exec "${name}" ln -sf redhat-release /etc/system-release
  # dnf: the release until the fixture's rocky-release (system-release(releasever)) is installed;
  # no plugin that copies every installed RPM into a local repository (Debian enables it).
  podman exec "${name}" sh -c 'mkdir -p /etc/dnf/vars && echo 9 >/etc/dnf/vars/releasever &&
    sed -i "s/^enabled *=.*/enabled = false/" /etc/dnf/plugins/local.conf &&
    mkdir -p /etc/yum.repos.d /etc/pki/rpm-gpg && rpm --initdb'
fi
podman commit -q --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' "${name}" "${image}" >/dev/null
echo "[kiln-testbed] built ${image} (${os} identity over ${base})" >&2
