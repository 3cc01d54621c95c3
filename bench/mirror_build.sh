#!/usr/bin/env bash
# Benchmark of the offline mirror (docs/airgap.md, docs/benchmarks.md "Offline mirror"): how big the
# mirror is for a stack and how long building and verifying take. Not a timed test.
#
#   bench/mirror_build.sh          the Debian 12 stack below
#   bench/mirror_build.sh el9      the EL 9 stack of tests/playbooks/mirror_el9 (dnf; the fixture's stand-ins)
#
# Builds, in a scratch directory, the mirror of one GPU node stack on Debian 12 (the airgap scenario's:
# driver, CUDA, cuDNN, NCCL, toolkit, DCGM, Slurm, Enroot, Pyxis; NVIDIA's repositories and the release
# files from the test bed's signed fixture, Debian's packages from the archive this machine's apt uses),
# with the test bed's throwaway site key. Needs `make testbed` first (fixture, site key). Prints:
#   cold build    playbooks/mirror.yml from an empty work directory (downloads included)
#   warm rebuild  the same again (nothing changed: no download, no repository rebuilt, no bundle)
#   verify        tools/kiln-bundle verify of the bundle (signature, every file's sha256)
#   size          packages, files and bytes of the bundle
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# shellcheck disable=SC1091
set -a; source .cache/testbed.env; set +a
export PATH=$root/.venv/bin:$PATH ANSIBLE_CONFIG=$root/ansible.cfg ANSIBLE_HOME=$root/.cache/ansible-home
work=$(mktemp -d /tmp/kiln-mirror-bench.XXXXXX)
trap 'rm -rf "${work}"' EXIT
mkdir -p "${work}/inv/group_vars"
cat >"${work}/inv/hosts.yml" <<EOF
all:
  children:
    slurm_controller: {hosts: {ctl: {}}}
    gpu_nodes: {hosts: {gpu1: {}}}
    slurm_compute: {children: {gpu_nodes: {}}}
EOF
releases="${KILN_FIXTURE_REPO}/releases/sha256sums.json"
cat >"${work}/inv/group_vars/all.yml" <<EOF
kiln_stack:
  os: debian-12
  driver: "580.95.05"
  cuda: "13.0.2"
  cudnn: "9.17.1.4"
  nccl: "2.28.7-1+cuda13.0"
  container_toolkit: "1.19.1"
  dcgm: "4.6.0"
  dcgm_exporter: "4.6.0-4.8.3"
  slurm: {slurmdbd: "22.05", slurmctld: "22.05", slurmd: "22.05"}
  enroot: "3.5.0"
  pyxis: "0.20.0"
kiln_mirror_key: ${KILN_SITE_FPR}
kiln_mirror_gpg_home: ${KILN_SITE_GNUPG}
kiln_mirror_output: ${work}/out
kiln_mirror_upstreams:
  distribution: {url: "${KILN_DEBIAN_MIRROR}", key_url: "file:///usr/share/keyrings/debian-archive-keyring.gpg"}
  cuda: {url: "file://${KILN_FIXTURE_REPO}/compute/cuda/repos", key_url: "file://${KILN_FIXTURE_REPO}/key.asc", fingerprint: ${KILN_FIXTURE_FPR}}
  container_toolkit: {url: "file://${KILN_FIXTURE_REPO}/libnvidia-container", key_url: "file://${KILN_FIXTURE_REPO}/key.asc", fingerprint: ${KILN_FIXTURE_FPR}}
kiln_mirror_file_urls:
  pyxis: file://${KILN_FIXTURE_REPO}/releases/pyxis/v0.20.0.tar.gz
  enroot: file://${KILN_FIXTURE_REPO}/releases/enroot/v3.5.0/
enroot_artifacts_sha256: $(python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['enroot']['3.5.0']))" "${releases}")
pyxis_source_sha256: $(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['pyxis']['0.20.0']['v0.20.0.tar.gz'])" "${releases}")
EOF
run() {
  local start end
  start=$(date +%s%N)
  ansible-playbook -i "${inventory[0]}" "${inventory[@]:1}" playbooks/mirror.yml >"${work}/$1.log" 2>&1 || { tail -30 "${work}/$1.log"; exit 1; }
  end=$(date +%s%N)
  printf '%-14s %6d ms  (%s)\n' "$1" "$(((end - start) / 1000000))" "$(grep -o 'changed=[0-9]*' "${work}/$1.log" | tail -1)"
}
# the inventory, then any extra arguments
inventory=("${work}/inv")
[[ ${1:-} == el9 ]] && inventory=(tests/playbooks/mirror_el9 -e "kiln_mirror_output=${work}/out")
run "cold build"
run "warm rebuild"
bundle=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bundle'])" "${work}/out/bundles/latest.json")
start=$(date +%s%N)
tools/kiln-bundle verify --bundle "${bundle}" --key-file "${work}/out/tree/kiln-mirror.asc" --fingerprint "${KILN_SITE_FPR}" >/dev/null
printf '%-14s %6d ms\n' "verify" "$((($(date +%s%N) - start) / 1000000))"
python3 - "${bundle%.tar}.manifest.json" "${work}/out/work/contents.json" <<'EOF'
import collections, json, sys
m = json.load(open(sys.argv[1])); c = json.load(open(sys.argv[2]))
by = collections.Counter(p["upstream"] for p in c["packages"])
size = collections.Counter()
for p in c["packages"]:
    size[p["upstream"]] += p["size"]
print(f"{'size':<14} {m['archive']['size'] / 1e6:.0f} MB archive, {len(m['files'])} files; packages: "
      + ", ".join(f"{k} {by[k]} ({size[k] / 1e6:.0f} MB)" for k in sorted(by))
      + f"; release files {len(c['files'])}")
EOF
