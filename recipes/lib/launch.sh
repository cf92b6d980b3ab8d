# Sourced by every recipe in recipes/ at its launch: the helpers that are not part of verl's command (the
# command itself, every override of it, is written out whole in each recipe).
#   check_python        $PYTHON must import verl and edge_verl; otherwise stop and say how to choose one
#   cpu_switch CONFIG   EDGE_VERL_CPU=1: the plugin's CPU backend for verl's trainer config CONFIG (tiny models
#                       only, the tests' runs): its overrides into the array CPU, its variables into RUN_ENV
#   print_command ARGS  DRY_RUN=1: the command, RUN_ENV in front, ready to paste; one argument per line

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

# shell_quote WORD: WORD as the shell reads it back (single quotes unless it is plain).
shell_quote() {
    if [[ $1 =~ ^[A-Za-z0-9_./:=+@%,-]+$ ]]; then
        printf '%s' "$1"
    else
        printf "'%s'" "${1//\'/\'\\\'\'}"
    fi
}

# The program (up to the last "-m MODULE" and verl's --config-name) on the first line, behind `env RUN_ENV...`.
print_command() {
    local words=("$@") head=0 index word
    for index in "${!words[@]}"; do
        [ "${words[index]}" = -m ] && head=$((index + 2))
    done
    [[ ${words[head]:-} == --config-name=* ]] && head=$((head + 1))
    printf 'env'
    for word in "${RUN_ENV[@]}" "${words[@]:0:head}"; do
        printf ' %s' "$(shell_quote "$word")"
    done
    for word in "${words[@]:head}"; do
        printf ' \\\n    %s' "$(shell_quote "$word")"
    done
    printf '\n'
}
