#!/usr/bin/env bash
# Apply the patch series to OpenRLHF 0.11.2's source and run OpenRLHF's own test suite (CPU) on the patched code.
#   bash upstream/openrlhf/apply_and_test.sh [OPENRLHF_SOURCE]
# OPENRLHF_SOURCE: a folder with openrlhf 0.11.2's `openrlhf/` package and its `tests/` (default: the wheel that
#   scripts/setup.sh installs into .venv/openrlhf-0.11.2, which ships both; a git checkout of v0.11.2 works too).
# PYTHON: an interpreter with OpenRLHF's dependencies and pytest (default: .venv/openrlhf-cpu, scripts/setup_openrlhf.sh).
# The patched tree comes first on PYTHONPATH, so it shadows the openrlhf installed in that interpreter.
# APPLIED=DIR keeps the patched tree in DIR/openrlhf (a new folder) instead of a temporary one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source=${1:-$root/.venv/openrlhf-0.11.2}
PYTHON=${PYTHON:-$root/.venv/openrlhf-cpu/bin/python}
version=$(cat "$here/OPENRLHF_VERSION")
for dist in "$source"/openrlhf-*.dist-info; do  # an install: its version must be the series' base
    [ -d "$dist" ] || continue
    grep -qx "Version: $version" "$dist/METADATA" || { echo "$source is not openrlhf $version ($dist)"; exit 1; }
done
[ -d "$source/openrlhf" ] && [ -d "$source/tests" ] || { echo "$source has no openrlhf/ and tests/"; exit 1; }
if [ -n "${APPLIED:-}" ]; then
    work=$APPLIED
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi
mkdir "$work/openrlhf"
cp -r "$source/openrlhf" "$source/tests" "$work/openrlhf/"
find "$work/openrlhf" -name __pycache__ -prune -exec rm -rf {} +
cd "$work/openrlhf"
git init -q
git add -A
git -c user.name=apply -c user.email=apply@localhost commit -qm "openrlhf $version"
git -c user.name=apply -c user.email=apply@localhost am -q "$here"/patches/*.patch
echo "applied $(ls "$here"/patches/*.patch | wc -l) patches on openrlhf $version"
"$PYTHON" -m py_compile examples/python/agent_func_gec.py examples/python/reward_func_math_verify.py
bash -n examples/scripts/train_gepo_ray.sh
bash -n examples/scripts/train_edge_grpo_ray.sh
PYTHONPATH=$work/openrlhf "$PYTHON" -m pytest -q -p no:cacheprovider -W ignore tests
