# kiln: one entry point for people and CI alike.
#   make test   lint + unit tests + every molecule scenario (what CI runs)
#   make demo   build the test bed, bring up the simulated cluster, run site.yml
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_HOME := $(CURDIR)/.cache/ansible-home
# The test bed's connection: its podman plugin (pipelining), short name `podman`, which
# inventories/testbed and molecule's podman driver use. ansible.cfg is the real site's and
# names no test path; molecule's base config sets the same for every scenario. No inventory
# is exported: each test-bed command names its own (`make demo`: -i inventories/testbed/hosts.yml).
export ANSIBLE_CONNECTION_PLUGINS := $(CURDIR)/tests/harness/connection_plugins
export CONTAINERS_CONF := $(CURDIR)/.cache/containers.conf
export PYTHONDONTWRITEBYTECODE := 1
export NO_COLOR := 1
export PY_COLORS := 0
export ANSIBLE_NOCOLOR := 1

# Scenarios run by `make test`, in order. Override to run a subset:
#   make molecule SCENARIOS=default
#   make test SCENARIOS="default preflight"
SCENARIOS ?= default preflight gpu slurm airgap burnin upgrade

.PHONY: help venv promtool testbed lint unit molecule test demo demo-down clean

help:
	@echo "make test   - lint, unit tests and molecule scenarios ($(SCENARIOS))"
	@echo "make demo   - simulated 3-node cluster (1 controller + 2 GPU nodes) running site.yml"
	@echo "make lint | unit | molecule | testbed | promtool | demo-down | clean"

venv: $(VENV)/.kiln-stamp

$(VENV)/.kiln-stamp: requirements.txt
	@tests/harness/venv.sh "$(VENV)"

# promtool (Prometheus' rule checker) for the alert rules' unit test, unpacked from Debian's prometheus
# package into .cache/promtool/ (the package is not installed). A failure here does not stop the run:
# the unit test that needs promtool fails and says how to get it.
promtool:
	@tests/harness/promtool.sh || echo "[kiln] promtool unavailable: tests/unit/core/test_health_alerts.py will fail" >&2

testbed: venv
	@tests/harness/testbed.sh

lint: venv
	@tests/harness/stage.sh lint tests/harness/lint.sh

unit: venv promtool
	@tests/harness/stage.sh unit python -m pytest -q -n 2 tests/unit

molecule: testbed
	@set -a; source .cache/testbed.env; set +a; for s in $(SCENARIOS); do \
	  tests/harness/stage.sh "molecule:$$s" molecule test -s "$$s" || exit 1; \
	done

test: venv promtool
	@tests/harness/run-tests.sh $(SCENARIOS)

demo: testbed
	@tests/harness/demo.sh up

demo-down:
	@tests/harness/demo.sh down

clean: demo-down
	rm -rf .cache
