"""Lint and type checks run as part of the test suite, so the one test command covers them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> list[str]:
    if shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name):
        return [sys.executable, "-m", name]
    pytest.skip(f"{name} is not installed: install the test extra (pip install -e '.[test]')")


def test_ruff_is_clean() -> None:
    done = subprocess.run([*_tool("ruff"), "check", "workbench", "tests", "notebooks"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_is_clean() -> None:
    done = subprocess.run([*_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
