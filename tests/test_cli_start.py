"""The command line parses before it imports anything heavy: ``workbench --help`` and a malformed
argument answer without torch, numpy, pandas, the backends or the engines (``workbench/cli.py``'s
module note). Measured from the interpreter's own import log (``python -X importtime``), so the
test fails on the import itself, not on a timing; ``scripts/bench_start.py`` prints the times."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "numpy", "pandas", "plotly", "workbench.backends", "workbench.engines", "workbench.analysis",
         "workbench.preflight", "workbench.present")


def _imported(args: list[str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``python -X importtime -m workbench ARGS``; the process and every module it imported.
    A wide terminal, so argparse wraps no name at its hyphens."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), "COLUMNS": "1000"}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "workbench", *args], capture_output=True,
                          text=True, env=env, timeout=120)
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done, names


def _heavy(names: set[str]) -> list[str]:
    return sorted(n for n in names if any(n == h or n.startswith(h + ".") for h in HEAVY))


def test_the_import_log_sees_torch_when_a_command_runs() -> None:
    """The check below can fail: a command that probes imports torch, and the log shows it."""
    done, names = _imported(["probe", "npu-block-table", "--rule", "context", "--context-len", "32768", "--page-size", "128",
                             "--draft-tokens", "16", "--seq-lens", "32753", "--mode", "target-verify"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "torch" in names and "workbench.backends" in names


@pytest.mark.parametrize("args", [["--help"], ["check", "--help"], ["atlas", "--help"], ["engines", "learn", "--help"]])
def test_help_imports_nothing_heavy(args: list[str]) -> None:
    done, names = _imported(args)
    assert done.returncode == 0 and "usage: workbench" in done.stdout
    assert _heavy(names) == []


@pytest.mark.parametrize(("args", "message"), [
    (["probe", "--context-len", "lots"], "argument --context-len: invalid int value: 'lots'"),
    (["no-such-command"], "argument command: invalid choice: 'no-such-command'"),
    (["--device", "tpu", "report"], "argument --device: invalid choice: 'tpu'"),
    (["atlas", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_an_argument_error_imports_nothing_heavy(args: list[str], message: str) -> None:
    done, names = _imported(args)
    assert done.returncode == 2
    assert message in done.stderr
    assert _heavy(names) == []


def test_a_case_command_s_help_still_lists_the_components() -> None:
    """The component names come from the registry when that help is printed (it may import torch)."""
    from workbench import backends

    done, _ = _imported(["probe", "--help"])
    assert done.returncode == 0
    listed = done.stdout.split("component  ", 1)[1].split(")", 1)[0]
    for name in (*backends.all_names(), "allocator", *backends.CASE_COMPONENTS):
        assert name in listed.split("(", 1)[1].split(", ")


def test_an_unknown_component_is_refused_with_the_names() -> None:
    from workbench import backends

    done, _ = _imported(["probe", "no-such-table", "--context-len", "64"])
    assert done.returncode == 2
    assert "argument component: invalid choice: 'no-such-table'" in done.stderr
    assert backends.all_names()[0] in done.stderr
