#!/usr/bin/env bash
# Lint as tests: yamllint --strict, ansible-lint (profile production, empty
# skip_list), syntax check of every playbook, shellcheck-free bash -n of scripts.
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "--- yamllint --strict"
yamllint --strict .
echo "--- ansible-lint (production profile)"
ansible-lint --offline -q
echo "--- ansible-playbook --syntax-check"
mapfile -t books < <(ls site.yml playbooks/*.yml)
for book in "${books[@]}"; do
  ansible-playbook --syntax-check -i inventories/example "${book}" >/dev/null
  echo "syntax ok: ${book}"
done
echo "--- bash -n tests/harness/*.sh .ci/run"
for script in tests/harness/*.sh tests/harness/image/*.sh .ci/run; do
  bash -n "${script}"
done
echo "--- roles: defaults/main.yml keys == meta/argument_specs.yml options"
python tests/harness/check_role_specs.py roles
echo "--- role docs: READMEs' variable tables and docs/architecture.md's role table match meta/argument_specs.yml"
python tests/harness/role_docs.py --check roles
