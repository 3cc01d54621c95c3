#!/usr/bin/env bash
# `make demo`: a simulated cluster on the test bed -- 1 controller + 2 GPU
# nodes (no real GPUs) as systemd containers on the kiln-testbed network --
# then `ansible-playbook -i inventories/testbed/hosts.yml site.yml` against it.
# The inventory is named here and the connection (tests/harness/connection_plugins)
# comes from lib.sh / the Makefile: the root ansible.cfg is a real site's.
#   demo.sh up     create/reuse the nodes and run site.yml
#   demo.sh down   remove the nodes
source "$(dirname "$0")/lib.sh"
cd "${KILN_ROOT}"
inventory="inventories/testbed/hosts.yml"
nodes=(kiln-demo-ctl kiln-demo-gpu1 kiln-demo-gpu2)
# The emulated boards of the GPU nodes (tests/fixtures/gpu-emulator/profiles).
declare -A profile=([kiln-demo-gpu1]=h100-sxm-8 [kiln-demo-gpu2]=l40s-2)

down() {
  for node in "${nodes[@]}"; do
    podman rm -f "${node}" >/dev/null 2>&1 && log "removed ${node}" || true
  done
}

# The three nodes, running and with emulated GPUs, nothing converged on them
# yet when they are new (bench/noop_rerun.sh starts from here).
nodes_up() {
  image="$(cat "${KILN_CACHE}/image")"
  repo="$(readlink -f "${KILN_CACHE}/fixture-repo")"
  for node in "${nodes[@]}"; do
    want="${image} ${repo}"
    have="$(podman inspect -f '{{.State.Running}} {{index .Config.Labels "kiln.demo"}}' "${node}" 2>/dev/null || true)"
    if [[ "${have}" == "true ${want}" ]]; then
      log "${node} is running with the current image and fixture repositories: reusing it"
      continue
    fi
    podman rm -f "${node}" >/dev/null 2>&1 || true
    podman run -d --name "${node}" --hostname "${node}" --network "${KILN_NET_NAME}" \
      --systemd=always --privileged --label owner=kiln-demo --label "kiln.demo=${want}" \
      -v "${repo}:/srv/kiln-fixture-repo:ro" "${image}" /sbin/init >/dev/null
    log "started ${node} (${image})"
  done
  # Emulated GPU hardware (fixture): a GPU profile and the sysfs tree it implies.
  for node in "${!profile[@]}"; do
    podman exec "${node}" mkdir -p /etc/kiln-fixture
    podman cp "${KILN_ROOT}/tests/fixtures/gpu-emulator/profiles/${profile[${node}]}.json" "${node}:/etc/kiln-fixture/gpu-profile.json"
    podman cp "${KILN_ROOT}/tests/fixtures/gpu-emulator/make-sysfs.py" "${node}:/usr/local/sbin/kiln-make-sysfs"
    podman exec "${node}" python3 /usr/local/sbin/kiln-make-sysfs --profile /etc/kiln-fixture/gpu-profile.json \
      --root /var/lib/kiln-fixture/sysfs --clean >/dev/null
    # GPU device files for Slurm's gres (character major 195, as the driver makes them)
    podman exec "${node}" sh -c 'n=$(python3 -c "import json;print(json.load(open(\"/etc/kiln-fixture/gpu-profile.json\"))[\"gpu_count\"])");
      i=0; while [ $i -lt $n ]; do [ -e /dev/nvidia$i ] || mknod -m 0666 /dev/nvidia$i c 195 $i; i=$((i+1)); done'
    log "${node}: emulated ${profile[${node}]} (fixture)"
  done
  for node in "${nodes[@]}"; do
    for _ in $(seq 1 60); do
      state="$(podman exec "${node}" systemctl is-system-running 2>/dev/null || true)"
      [[ "${state}" == "running" || "${state}" == "degraded" ]] && break
      sleep 1
    done
  done
}

up() {
  nodes_up
  log "running: ansible-playbook -i ${inventory} site.yml"
  ansible-playbook -i "${inventory}" site.yml
  log "sinfo on the controller:"
  podman exec kiln-demo-ctl sinfo -N -o '%N %T %G %c %m'
  summary="$(ls -t results/burnin/*/summary.md 2>/dev/null | head -1)"
  if [[ -n "${summary}" ]]; then
    log "burn-in summary (${summary}):"
    cat "${summary}"
  fi
}

case "${1:-up}" in
  up) up ;;
  nodes) nodes_up ;;
  down) down ;;
  *) die "usage: demo.sh up|nodes|down" ;;
esac
