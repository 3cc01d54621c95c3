#!/usr/bin/env bash
# Make .cache/promtool/promtool available (Prometheus' rule checker, for the alert rules' unit test,
# tests/unit/core/test_health_alerts.py) without installing Debian's prometheus package: installing it
# would start a prometheus service. apt-get download the package into a temporary directory, unpack it
# with dpkg-deb -x, copy usr/bin/promtool (a Go binary needing only libc). apt-get update runs only when
# the download fails (a fresh machine with no package lists). Idempotent: a promtool that answers
# --version is kept. Prints the version.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.cache/promtool/promtool
if [[ -x ${dest} ]] && "${dest}" --version >/dev/null 2>&1; then
  "${dest}" --version 2>&1 | head -n 1
  exit 0
fi
for tool in apt-get dpkg-deb; do
  command -v "${tool}" >/dev/null || { echo "[kiln] promtool: ${tool} not found (a Debian/Ubuntu machine is needed)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT
opts=(-q)
# As root apt drops to the _apt user to download, who cannot write the private temporary directory.
[[ $(id -u) -eq 0 ]] && opts+=(-o APT::Sandbox::User=root)
download() { (cd "${tmp}" && apt-get download "${opts[@]}" prometheus); }
if ! download; then
  echo "[kiln] promtool: download failed; apt-get update, then again" >&2
  apt-get update -q >&2
  download
fi
debs=("${tmp}"/prometheus_*.deb)
[[ -f ${debs[0]} ]] || { echo "[kiln] promtool: apt-get download left no prometheus_*.deb" >&2; exit 1; }
dpkg-deb -x "${debs[0]}" "${tmp}/root"
mkdir -p "$(dirname "${dest}")"
install -m 0755 "${tmp}/root/usr/bin/promtool" "${dest}.new"
mv -f "${dest}.new" "${dest}"
"${dest}" --version 2>&1 | head -n 1
