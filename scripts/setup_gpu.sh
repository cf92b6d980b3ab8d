#!/usr/bin/env bash
# GPU set-up (Linux x86_64, NVIDIA driver for CUDA 13) in the order of verl 0.9.1's Dockerfile
# (docker/Dockerfile.stable.vllm): the CUDA torch first, then flash-attn built against it (--no-build-isolation),
# then verl's extras with edge-verl; for Megatron also Transformer Engine's PyTorch extension (built the same way),
# verl's mbridge and megatron-bridge without their dependencies and, with APEX=1, apex from NVIDIA's git. Every pip
# call is held to requirements/gpu-$BACKEND.txt, a real resolve. Idempotent. Not run by this project's CI (no GPU
# there). docs/INSTALL_GPU.md explains the choices and what differs from verl's own uv/wheelhouse install.
#   bash scripts/setup_gpu.sh                                       # FSDP recipes, Python 3.10-3.12, in .venv-gpu
#   BACKEND=megatron PYTHON=python3.12 bash scripts/setup_gpu.sh    # Megatron recipes, Python 3.12 only
#   MODE=image bash scripts/setup_gpu.sh      # inside verl's Docker image: its GPU stack stays as built
#   MODE=lock BACKEND=... bash scripts/setup_gpu.sh   # re-resolve requirements/gpu-$BACKEND.txt (metadata only)
#   MODE=check BACKEND=... PYTHON=... bash scripts/setup_gpu.sh   # pip resolves the install against it (dry run)
# The source builds need nvcc from a CUDA 13 toolkit (CUDA_HOME) and take long the first time (MAX_JOBS caps
# parallel compiles; set it lower when a build runs out of memory).
set -euo pipefail
cd "$(dirname "$0")/.."
BACKEND=${BACKEND:-fsdp}
MODE=${MODE:-venv}
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv-gpu}
APEX=${APEX:-0}
# Built from source after torch, so they are not in the extras and pinned here (the lock repeats them).
FLASH_ATTN_VERSION=2.8.3            # verl 0.9.1's pin (its flash-attn-cu130torch211 extra)
# megatron-bridge: PyPI's 0.5.1 is the newest release of branch r0.5.0, whose head verl ships as 0.5.2 from its own
# wheelhouse (not on PyPI; one code fix more: tied embeddings with virtual pipeline stages > 1). For verl's exact
# build set MEGATRON_BRIDGE=git+https://github.com/NVIDIA-NeMo/Megatron-Bridge.git@f83545d981f32310d96c3614008a99389d7ccc71
MEGATRON_BRIDGE_VERSION=0.5.1
MEGATRON_BRIDGE=${MEGATRON_BRIDGE:-megatron-bridge==$MEGATRON_BRIDGE_VERSION}
# mbridge: verl 0.9.1 builds it from this commit (its pyproject's [tool.uv.sources]), which still calls itself 0.15.1
# but is 101 commits past PyPI's 0.15.1; the extras resolve PyPI's, then this replaces it.
MBRIDGE_SOURCE=git+https://github.com/ISEEKYAN/mbridge.git@641a5a01de71080b2200d10e369090e40c9a351c
TRANSFORMER_ENGINE_VERSION=2.16.1   # verl's (its Dockerfile's v2.16.1, its wheelhouse's 2.16.1)
APEX_SOURCE=git+https://github.com/NVIDIA/apex.git   # as verl's Dockerfile; PyPI's "apex" is an unrelated package
case "$BACKEND" in
    fsdp) EXTRA=gpu; PYTHONS="3.10 3.11 3.12"; WHY="verl 0.9.1 supports Python 3.10-3.12" ;;
    megatron) EXTRA=gpu-megatron; PYTHONS="3.12"
        WHY="megatron-core 0.18.0 needs Python >=3.12 and megatron-bridge $MEGATRON_BRIDGE_VERSION <3.13" ;;
    *) echo "BACKEND=$BACKEND: use fsdp or megatron" >&2; exit 2 ;;
esac
LOCK=requirements/gpu-$BACKEND.txt
PIP=(-m pip install --disable-pip-version-check -c "$LOCK")

require_python() {  # $1: an interpreter that must fit BACKEND
    command -v "$1" >/dev/null || { echo "PYTHON=$1: not found" >&2; exit 2; }
    local version
    version=$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    case " $PYTHONS " in
        *" $version "*) ;;
        *) echo "BACKEND=$BACKEND needs Python ${PYTHONS// / or }; $1 is Python $version ($WHY)." \
                "Set PYTHON (e.g. PYTHON=python3.12, with a fresh VENV) or use verl's Docker image (MODE=image)." >&2
           exit 2 ;;
    esac
}

install_venv() {
    if [ -x "$VENV/bin/python" ]; then require_python "$VENV/bin/python"; else require_python "$PYTHON"; "$PYTHON" -m venv "$VENV"; fi
    local py=$VENV/bin/python
    "$py" -m pip install -q --disable-pip-version-check --upgrade pip
    # 1. The CUDA torch (PyPI's torch 2.11.0 is the CUDA 13.0 build) and what the source builds import.
    "$py" "${PIP[@]}" torch torchvision torchaudio setuptools wheel ninja psutil packaging
    # 2. flash-attn against that torch. FORCE_BUILD: its setup.py would otherwise fetch a prebuilt wheel that it
    #    names after CUDA 12 whatever CUDA torch was built with.
    if ! "$py" -m pip show -q flash-attn 2>/dev/null; then
        command -v nvcc >/dev/null || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] || {
            echo "flash-attn $FLASH_ATTN_VERSION builds from source: install a CUDA 13 toolkit and set CUDA_HOME" >&2; exit 2; }
        FLASH_ATTENTION_FORCE_BUILD=TRUE "$py" "${PIP[@]}" --no-build-isolation "flash-attn==$FLASH_ATTN_VERSION"
    fi
    # 3. verl's stack (pyproject.toml's extras), edge-verl and its lab (lab/: edge-verl reproduce).
    "$py" "${PIP[@]}" -e ".[$EXTRA,test]" -e ./lab
    [ "$BACKEND" = megatron ] || return 0
    # 4. Megatron: TE's PyTorch extension is an sdist built against torch (NVTE_PYTORCH_FORCE_BUILD: build it here
    #    instead of fetching a prebuilt wheel from GitHub); mbridge and megatron-bridge go in without their own
    #    dependencies (megatron-bridge's transformers <5.9 and flashinfer 0.6.8 contradict verl's transformers 5.9.0
    #    and vLLM 0.24's flashinfer 0.6.12), as verl installs them.
    NVTE_PYTORCH_FORCE_BUILD=TRUE "$py" "${PIP[@]}" --no-build-isolation "transformer-engine-torch==$TRANSFORMER_ENGINE_VERSION"
    "$py" -m pip install --disable-pip-version-check --no-deps --force-reinstall "mbridge @ $MBRIDGE_SOURCE"
    "$py" -m pip install --disable-pip-version-check --no-deps "$MEGATRON_BRIDGE"
    if [ "$APEX" = 1 ] && ! "$py" -c 'import amp_C' 2>/dev/null; then
        "$py" -m pip install -v --disable-pip-version-check --no-build-isolation \
            --config-settings "--build-option=--cpp_ext" --config-settings "--build-option=--cuda_ext" "$APEX_SOURCE"
    fi
}

# verl's image pins its CUDA libraries on purpose (e.g. an NCCL newer than torch's own pin), so no resolver may run
# over it: edge-verl and its lab go in without dependencies, as verl itself does there, and then whatever
# edge-verl[gpu] and the lab need that the image lacks (outside its GPU stack), each without dependencies, at the
# lock's versions.
install_into_image() {
    require_python "$PYTHON"
    "$PYTHON" -m pip install --disable-pip-version-check --no-deps -e . -e ./lab
    local unmet round
    for round in 1 2 3 4 5 6 7 8; do
        mapfile -t unmet < <("$PYTHON" -c 'from edge_verl.gpu_stack import print_unmet_requirements as p; p("edge-verl[gpu,test]", "edge-verl-lab")')
        [ ${#unmet[@]} -eq 0 ] && return 0
        echo "round $round, installing without dependencies: ${unmet[*]}"
        "$PYTHON" "${PIP[@]}" --no-deps "${unmet[@]}"
    done
    echo "still unmet after $round rounds: ${unmet[*]}" >&2
    exit 1
}

# A metadata-only resolve of everything the venv path installs, for every Python the BACKEND supports at once (uv's
# universal resolve: one pin per package, or one per Python range with a marker), written as pip constraints. uv,
# not pip: pip resolves for its own interpreter only and backtracks for many minutes over the Megatron set (into
# sdists of old multiprocess releases); the install itself is pip's, held to this file. Nothing is installed.
UV_VERSION=0.13.9
write_lock() {
    local scratch
    scratch=$(mktemp -d)
    trap "rm -rf '$scratch'" EXIT
    "$PYTHON" -m venv "$scratch/venv"
    "$scratch/venv/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION"
    # The packages that steps 1, 2 and 4 add outside the extras, with the dependencies the resolve cannot read from
    # the source builds: flash-attn needs einops; transformer_engine_torch 2.16.1 declares the last four.
    local extra=(setuptools wheel ninja psutil packaging einops)
    [ "$BACKEND" = megatron ] && extra+=(onnx onnxscript pydantic nvdlfw-inspect)
    printf '%s\n' ".[$EXTRA,test]" ./lab "${extra[@]}" > "$scratch/input.txt"
    local oldest=${PYTHONS%% *}
    "$scratch/venv/bin/uv" pip compile "$scratch/input.txt" --universal --python-version "$oldest" \
        --index-url "${LOCK_INDEX_URL:-https://pypi.org/simple}" --no-header --no-annotate --quiet -o "$scratch/resolved.txt"
    local built="flash-attn==$FLASH_ATTN_VERSION"
    [ "$BACKEND" = megatron ] && built+=" transformer-engine-torch==$TRANSFORMER_ENGINE_VERSION megatron-bridge==$MEGATRON_BRIDGE_VERSION"
    mkdir -p "$(dirname "$LOCK")"
    {
        echo "# pip constraints for BACKEND=$BACKEND bash scripts/setup_gpu.sh (pip install -c $LOCK ...), Python ${PYTHONS// /, }."
        echo "# MODE=lock: uv $UV_VERSION's universal resolve from PyPI for Python >=$oldest, $(date +%F)."
        echo "# Built from source (or installed without dependencies) after torch; pinned in scripts/setup_gpu.sh:"
        printf '%s\n' $built
        echo "# Resolved:"
        grep '==' "$scratch/resolved.txt"  # every pin; not the line of this project itself
    } > "$LOCK"
    echo "$LOCK: $(grep -c '==' "$scratch/resolved.txt") resolved pins + $(wc -w <<<"$built") built from source"
}

# What can be checked without a GPU: pip resolves exactly what install_venv asks for, held to the lock, on $PYTHON
# (a dry run: metadata only, nothing installed), and every pin installed outside that resolve exists on the index.
check_lock() {
    require_python "$PYTHON"
    local scratch
    scratch=$(mktemp -d)
    trap "rm -rf '$scratch'" EXIT
    "$PYTHON" -m venv "$scratch/venv"
    local py=$scratch/venv/bin/python
    "$py" -m pip install -q --disable-pip-version-check --upgrade pip
    local extra=(torch torchvision torchaudio setuptools wheel ninja psutil packaging einops)
    [ "$BACKEND" = megatron ] && extra+=(onnx onnxscript pydantic nvdlfw-inspect)
    "$py" "${PIP[@]}" -q --dry-run --ignore-installed --report "$scratch/report.json" ".[$EXTRA,test]" ./lab "${extra[@]}"
    "$py" - "$scratch/report.json" <<'PY'
import json, re, sys
installs = json.load(open(sys.argv[1]))["install"]
versions = {re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower(): item["metadata"]["version"] for item in installs}
shown = ", ".join(f"{name} {versions[name]}" for name in ("torch", "vllm", "verl", "transformers", "megatron-core", "transformer-engine") if name in versions)
print(f"resolved {len(installs)} packages on Python {sys.version.split()[0]}: {shown}")
PY
    # flash-attn and TE-torch ship only sdists whose metadata build imports torch (what made `pip install .[gpu]` fail),
    # so the index's version list is what can be checked here (for all three).
    local pin name version
    for pin in "flash-attn==$FLASH_ATTN_VERSION" "transformer-engine-torch==$TRANSFORMER_ENGINE_VERSION" \
        "megatron-bridge==$MEGATRON_BRIDGE_VERSION"; do
        [ "$BACKEND" = megatron ] || [ "${pin%%==*}" = flash-attn ] || continue
        name=${pin%%==*} version=${pin#*==}
        if "$py" -m pip index versions --disable-pip-version-check "$name" 2>/dev/null | grep -q "[ ,]$version\(,\|$\)"; then
            echo "on the index: $pin"
        else
            echo "NOT on the index: $pin" >&2; exit 1
        fi
    done
}

case "$MODE" in
    venv) install_venv; "$VENV/bin/edge-verl" doctor
          echo "ready: source $VENV/bin/activate; then e.g. bash recipes/run_edge_qwen2.5-math-7b_$BACKEND.sh" ;;
    image) install_into_image; "$PYTHON" -m edge_verl.cli doctor ;;
    lock) write_lock ;;
    check) check_lock ;;
    *) echo "MODE=$MODE: use venv, image, lock or check" >&2; exit 2 ;;
esac
