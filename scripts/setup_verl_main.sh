#!/usr/bin/env bash
# A second environment, .venv-verl-main, in which edge-verl runs against a verl source checkout (verl's main
# branch) instead of the pinned verl 0.9.1; the default .venv is untouched. Used to run the project's suite
# against verl's next release by hand (docs/verl-versions.md):
#   bash scripts/setup_verl_main.sh /path/to/verl      # a checkout, e.g. of upstream/verl/VERL_COMMIT
#   .venv-verl-main/bin/python -m pytest -m "not e2e"
# Every other package is the default environment's exact version (pip freeze of .venv, built first when
# missing), so a difference between the two runs is verl's. verl's own dependencies that .venv lacks are added
# from the checkout's verl-core extra. TransferQueue stays PyPI's release: verl main names its git main, which
# needs GitHub (verl 0.9.1 takes the same PyPI release).
set -euo pipefail
cd "$(dirname "$0")/.."
VERL_SRC=$(cd "${1:?usage: setup_verl_main.sh /path/to/verl-checkout}" && pwd)
PYTHON=${PYTHON:-python3}
VENV=.venv-verl-main
[ -x .venv/bin/python ] || bash scripts/setup.sh
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
# Editable and local packages (edge-verl, the vLLM alias) and verl itself are installed from source below.
.venv/bin/python -m pip freeze --exclude-editable --disable-pip-version-check \
    | grep -v -i -E '^(verl|edge-verl|edge_verl|vllm)(==| @)' > "$constraints"
"${PIP[@]}" --upgrade pip
"${PIP[@]}" -r "$constraints"
"${PIP[@]}" --no-deps -e "$VERL_SRC"
# verl's verl-core extra as the checkout declares it, minus its git-only TransferQueue, within .venv's versions.
mapfile -t core < <("$VENV/bin/python" - "$VERL_SRC/pyproject.toml" <<'EOF'
import sys, tomllib
extras = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]
for requirement in extras["verl-core"]:
    if not requirement.startswith(("verl[", "TransferQueue")):
        print(requirement)
EOF
)
"${PIP[@]}" -c "$constraints" "${core[@]}"
"${PIP[@]}" --no-deps -e . ./scripts/vllm_cpu_alias
# As in setup.sh: PyPI's CUDA builds of these fail to load on a CPU torch and nothing here uses them.
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -c "import verl; print('verl', verl.__version__, 'from', verl.__file__)"
"$VENV/bin/edge-verl" doctor --cpu
