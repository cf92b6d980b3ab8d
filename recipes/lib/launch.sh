# Sourced by recipes/lib/defaults.sh, so by every recipe in recipes/: the helpers that are not part of verl's
# command (the command itself, every override of it, is written out whole in each recipe, its last line).
#   prepare_launch CONFIG ARGS  what runs before verl: check_python; RUN_ENV, exported; LAUNCH, the program the
#                       recipe's last line starts ("$PYTHON", or DRY_RUN=1's print_command); unless DRY_RUN=1, the
#                       checks on the recipe's OVERRIDES and the user's ARGS (docs/recipes.md#before-verl-starts)
#   check_python        $PYTHON must import verl and edge_verl; otherwise stop and say how to choose one
#   cpu_switch CONFIG   EDGE_VERL_CPU=1: the plugin's CPU backend for verl's trainer config CONFIG (tiny models
#                       only, the tests' runs): its overrides into the array CPU, its variables into RUN_ENV
#   print_command ARGS  DRY_RUN=1: the command, RUN_ENV in front, ready to paste; one argument per line

# CONFIG: verl's trainer config (an RL recipe: edge_verl's preflight checks every plugin option, the data files and
# the run identity on the config verl composes from these very overrides), or sft (the SFT recipe: no CPU backend;
# the run identity alone, as verl's SFT trainer runs none of the plugin's options).
prepare_launch() {
    local config_name=$1
    shift
    check_python
    RUN_ENV=(VERL_FILE_LOGGER_PATH="$VERL_FILE_LOGGER_PATH")  # what verl's processes read from the environment
    if [ "$config_name" != sft ]; then
        cpu_switch "$config_name"
    elif [ "$EDGE_VERL_CPU" = 1 ]; then
        echo "recipe error: the SFT recipe has no CPU backend (EDGE_VERL_CPU=1); run it on GPUs" >&2
        exit 2
    fi
    export "${RUN_ENV[@]}"
    LAUNCH=("$PYTHON")
    if [ "$DRY_RUN" = 1 ]; then
        LAUNCH=(print_command "$PYTHON")
    elif [ "$config_name" = sft ]; then
        "$PYTHON" -m edge_verl.cli run-identity "$CKPT_DIR" --method "$METHOD" --model "$MODEL_PATH" \
            --train-file "$TRAIN_FILE" --backend "$BACKEND" --seed "$SEED" --tag "$RUN_TAG"
    else
        "$PYTHON" -m edge_verl.cli preflight --config-name "$config_name" --method "$METHOD" --tag "$RUN_TAG" \
            "${OVERRIDES[@]}" "${CPU[@]}" "$@"
    fi
}

check_python() {
    if [ -z "$PYTHON" ] || ! "$PYTHON" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("verl") and u.find_spec("edge_verl")))' 2>/dev/null; then
        echo "recipe error: PYTHON=${PYTHON:-<none>} cannot import verl and edge_verl; activate the environment that has them" \
            "(e.g. source .venv-gpu/bin/activate) or set PYTHON=/path/to/bin/python" >&2
        exit 2
    fi
}

cpu_switch() {
    local config_name=$1 text
    CPU=()
    [ "$EDGE_VERL_CPU" = 1 ] || return 0
    # VLLM_CPU_KVCACHE_SPACE: GiB per vLLM server (CPU_ROLLOUT=vllm)
    RUN_ENV+=(EDGE_VERL_CPU=1 VERL_PLATFORM=cpu VERL_ENGINE_DEVICE=cuda VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}")
    # The set of the backend this config trains with (a Megatron recipe runs Megatron on CPU too).
    text=$("$PYTHON" -m edge_verl.cli cpu-overrides --config-name "$config_name" --tensor-parallel "$CPU_TENSOR_PARALLEL" \
        --rollout "$CPU_ROLLOUT") || exit $?
    mapfile -t CPU <<<"$text"
}

# The program (up to the last "-m MODULE" and verl's --config-name) on the first line, behind `env RUN_ENV...`;
# each word as Python's shlex.quote writes it (as is unless it holds a shell character), as edge_verl/recipes.py does.
print_command() {
    local words=("$@") head=0 index
    for index in "${!words[@]}"; do
        [ "${words[index]}" = -m ] && head=$((index + 2))
    done
    [[ ${words[head]:-} == --config-name=* ]] && head=$((head + 1))
    "$PYTHON" -c 'import shlex, sys; head, words = int(sys.argv[1]), [shlex.quote(word) for word in sys.argv[2:]]
print(" ".join(["env", *words[:head]]) + "".join(" \\\n    " + word for word in words[head:]))' \
        "$((${#RUN_ENV[@]} + head))" "${RUN_ENV[@]}" "${words[@]}"
}
