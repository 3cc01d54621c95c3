#!/usr/bin/env bash
# Build a Debian bookworm systemd root with debootstrap and import it into
# podman as $1 (NAME:TAG). Uses the Debian mirror this machine's apt uses
# (or KILN_DEBIAN_MIRROR); pulls nothing from any container registry.
set -euo pipefail
image="$1"
here="$(cd "$(dirname "$0")" && pwd)"
mirror="${KILN_DEBIAN_MIRROR:-}"
if [[ -z "${mirror}" ]]; then
  mirror="$(python3 "${here}/mirror.py")"
fi
include="$(grep -vE '^\s*(#|$)' "${here}/packages.txt" | paste -sd, -)"
work="$(mktemp -d /var/tmp/kiln-image.XXXXXX)"
trap 'rm -rf "${work}"' EXIT
echo "[kiln-testbed] debootstrap bookworm (minbase + ${include}) from the configured Debian mirror" >&2
debootstrap --variant=minbase --include="${include}" bookworm "${work}/root" "${mirror}" >"${work}/debootstrap.log" 2>&1 \
  || { tail -40 "${work}/debootstrap.log" >&2; exit 1; }
# Make the root behave like a cloud image: same apt sources as the host mirror,
# no units that make no sense in a container, a machine-id generated at boot.
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\n' "${mirror}" "${mirror}" >"${work}/root/etc/apt/sources.list"
: >"${work}/root/etc/machine-id"
rm -f "${work}/root/var/lib/dbus/machine-id"
for unit in systemd-remount-fs.service getty.target console-getty.service sys-kernel-config.mount \
            systemd-journald-audit.socket systemd-udevd.service systemd-udev-trigger.service systemd-firstboot.service; do
  ln -sf /dev/null "${work}/root/etc/systemd/system/${unit}"
done
# Real package lists in the image, as a cloud image has them.
chroot "${work}/root" apt-get update -qq >"${work}/apt-update.log" 2>&1 || { cat "${work}/apt-update.log" >&2; exit 1; }
rm -rf "${work}/root/var/cache/apt/archives/"*.deb
tar -C "${work}/root" -c . | podman import -q --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' - "${image}" >/dev/null
echo "[kiln-testbed] imported ${image}" >&2
