#!/usr/bin/env bash
# Register the notebooks' clean filter (scripts/nbstrip.py, named in .gitattributes) in this
# checkout's git config, so that running a notebook (JupyterLab's autosave, papermill in place)
# never shows in `git status` nor reaches a commit. Run by scripts/setup.sh; harmless to rerun.
#
#   bash scripts/install_git_filters.sh [PYTHON]     (default: python3; the filter needs no packages)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${1:-python3}"

if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    exit 0  # an unpacked archive, not a clone: no git status to keep clean
fi
# Git runs a filter from the top of the working tree, so the script's path is relative to it.
git config filter.workbench-nbstrip.clean "\"$PYTHON\" scripts/nbstrip.py"
git config filter.workbench-nbstrip.smudge cat
