# Sourced by the CPU set-ups (setup.sh, setup_openrlhf.sh): the interpreter their venvs are made from.
# PYTHON when set; else the distribution's /usr/bin/python3 when it is a 3.10-3.12 with venv; else python3 on PATH.
# Why the distribution's first: everything these venvs run on CPU is Python-bound (a verl run's ~9 processes each
# spend ~7 s importing torch, tensordict, transformers and ray), and distributions build their Python with PGO and
# LTO (Debian, Ubuntu, Fedora), which pyenv's default build does not (no --enable-optimizations). Measured here,
# Debian 12's 3.11.2 against pyenv's 3.11.7, the same packages: `import verl` 6.0 s against 7.3-8.8 s, and a
# one-step `edge-verl demo` 84-90 CPU-seconds against 104-106 (wall 71-76 s against 87-89 s). A run's numbers
# do not depend on it (torch computes them).
choose_python() {
    if [ -n "${PYTHON:-}" ]; then
        echo "$PYTHON"
    elif [ -x /usr/bin/python3 ] && /usr/bin/python3 -c \
            'import sys, venv, ensurepip; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 12))' 2>/dev/null; then
        echo /usr/bin/python3
    else
        echo python3
    fi
}
