#!/usr/bin/env bash
# Register the notebooks' clean filter (scripts/nbstrip.py, named in .gitattributes) in this
# checkout's git config: a notebook saved with its outputs keeps them on disk, while git status,
# git diff and commits see it as committed, without them. Run by scripts/setup.sh (make setup);
# harmless to rerun.
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
# Checkout writes the committed bytes as they are.
git config filter.workbench-nbstrip.smudge cat
# A filter that cannot run is an error, never a commit of the outputs it would have stripped.
git config filter.workbench-nbstrip.required true
