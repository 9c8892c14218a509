#!/usr/bin/env bash
# Create .venv in the checkout and install workbench (editable) with the notebook and test extras,
# and register the notebooks' git clean filter (scripts/install_git_filters.sh).
#
# torch: a torch that the system Python already imports (a CUDA build, or one pinned by torch_npu)
# is used as it is, through --system-site-packages. Otherwise WORKBENCH_TORCH is installed
# (default torch==2.13.0). Where pip's index serves a CUDA build by default, point PIP_INDEX_URL or
# PIP_EXTRA_INDEX_URL at a CPU wheel index, or set WORKBENCH_TORCH, to keep the download small.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv
STAMP="$VENV/.workbench-installed"

# Notebooks keep their outputs on disk, git sees them without (scripts/nbstrip.py, a clean
# filter): registered every time, it is cheap.
bash scripts/install_git_filters.sh "$PYTHON"
# An earlier set-up linked a JupyterLab save hook that wrote notebooks without their outputs; the
# filter replaced it, and a link left behind would point at a file that is gone.
OLD_HOOK="$VENV/etc/jupyter/jupyter_server_config.py"
if [[ -L "$OLD_HOOK" && "$(readlink "$OLD_HOOK")" == */scripts/jupyter_server_config.py ]]; then
    rm -f "$OLD_HOOK"
fi

if [[ -f "$STAMP" && "$STAMP" -nt pyproject.toml && "$STAMP" -nt scripts/setup.sh ]]; then
    exit 0  # already set up for this pyproject.toml
fi

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "setup: $("$PYTHON" --version 2>&1) is too old; workbench needs Python 3.10 or newer (set PYTHON=...)" >&2
    exit 2
fi

system_torch=no
if TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PYTHON" -c 'import torch' >/dev/null 2>&1; then
    system_torch=yes
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    if [[ $system_torch == yes ]]; then
        echo "setup: using the system's torch ($(TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PYTHON" -c 'import torch; print(torch.__version__)'))"
        "$PYTHON" -m venv --system-site-packages "$VENV"
    else
        "$PYTHON" -m venv "$VENV"
    fi
fi

pip=("$VENV/bin/python" -m pip install --disable-pip-version-check --quiet)
if ! TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
    echo "setup: installing ${WORKBENCH_TORCH:-torch==2.13.0}"
    "${pip[@]}" "${WORKBENCH_TORCH:-torch==2.13.0}"
fi
echo "setup: installing workbench with the notebook, test and ray extras"
"${pip[@]}" -e ".[notebooks,test,ray]"
touch "$STAMP"
