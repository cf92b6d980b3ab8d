#!/usr/bin/env bash
# Apply the patch series to a clean checkout of verl at VERL_COMMIT and run the patched files' CPU tests.
#   bash upstream/verl/apply_and_test.sh [VERL_REPO]   # a URL or a local clone/mirror of verl-project/verl
# PYTHON: an interpreter with verl's dependencies (default: .venv-verl-main, else .venv; scripts/setup_verl_main.sh).
# The patched checkout shadows any installed verl (PYTHONPATH); external verl plugins (edge_verl) are off.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
repo=${1:-https://github.com/verl-project/verl.git}
commit=$(cat "$here/VERL_COMMIT")
if [ -z "${PYTHON:-}" ]; then
    PYTHON=$root/.venv-verl-main/bin/python
    [ -x "$PYTHON" ] || PYTHON=$root/.venv/bin/python
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q --no-checkout "$repo" "$work/verl"
cd "$work/verl"
git checkout -q "$commit"
git -c user.name=apply -c user.email=apply@localhost am -q "$here"/patches/*.patch
echo "applied $(ls "$here"/patches/*.patch | wc -l) patches on $(git rev-parse --short "$commit")"
export PYTHONPATH=$work/verl VERL_USE_EXTERNAL_PLUGINS=none
# the generated trainer configs are current (verl's own check regenerates them and diffs)
PATH=$(dirname "$PYTHON"):$PATH bash scripts/generate_trainer_config.sh > "$work/generate.log" 2>&1 \
    || { cat "$work/generate.log"; exit 1; }
"$PYTHON" tests/special_sanity/check_example_naming.py
"$PYTHON" tests/special_sanity/check_docs_time_info.py | tail -1
"$PYTHON" -m pytest -q -p no:cacheprovider --asyncio-mode=auto -W ignore \
    tests/trainer/ppo/test_adv_estimator_inputs_on_cpu.py \
    tests/trainer/ppo/test_edge_grpo_gepo_on_cpu.py \
    tests/experimental/agent_loop/test_gec_agent_loop_on_cpu.py \
    tests/experimental/agent_loop/test_per_response_seed_on_cpu.py \
    tests/trainer/ppo/test_core_algos_on_cpu.py \
    tests/trainer/test_multi_trajectories_advantage_on_cpu.py \
    tests/trainer/ppo/v1/test_trainer_base_on_cpu.py \
    tests/special_sanity/test_config_docs.py
