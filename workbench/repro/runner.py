"""Running a written reproducer here, with the engine's wheel from the workbench's cache.

A maintainer runs a script in a fresh virtual environment (its header says how). Here the same
script runs with this interpreter and the cached wheel's folders on ``PYTHONPATH`` (the unpacked
wheel, its small dependencies, triton where the script needs it, the torchvision a version's
transformers asks for), from a folder of its own: the script imports nothing of the workbench,
and ``block_workbench`` makes sure of it. Its last line, ``repro-summary: {...}``, is what it
claims and whether each claim held.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.engines.store.wheels import EngineInstall, fetch, fetch_triton, triton_dir
from workbench.repro.conditions import needs_torchvision
from workbench.repro.findings import Finding

SUMMARY_PREFIX = "repro-summary: "


@dataclass(frozen=True)
class ScriptRun:
    """One run of a reproducer: its exit status, wall time, output and parsed summary."""

    returncode: int
    seconds: float
    output: str
    summary: dict[str, object] | None

    @property
    def reproduced(self) -> bool:
        return self.returncode == 0 and bool(self.summary and self.summary.get("reproduced"))

    def steps(self) -> list[dict[str, object]]:
        steps = (self.summary or {}).get("steps", [])
        return list(steps) if isinstance(steps, list) else []

    def step(self, label: str) -> dict[str, object] | None:
        """The first step with this label ("first failing length", "one below", ...), as the script ran it."""
        return next((s for s in self.steps() if s.get("label") == label), None)


def parse_summary(output: str) -> dict[str, object] | None:
    for line in reversed(output.splitlines()):
        if line.startswith(SUMMARY_PREFIX):
            found = json.loads(line[len(SUMMARY_PREFIX):])
            return found if isinstance(found, dict) else None
    return None


def needs_triton(script: Path) -> bool:
    return "NEEDS_TRITON = True" in script.read_text()


def engine_paths(finding: Finding, script: Path, *, fetch_missing: bool = True) -> list[Path]:
    """The folders that stand for a fresh environment's installs: the engine's wheel and its small
    dependencies (fetched into the workbench's cache when absent), triton where the script runs a
    Triton kernel, and the torchvision a version's transformers asks for."""
    install: EngineInstall = fetch(finding.release)
    paths = [install.src, install.deps]
    if needs_triton(script):
        found = triton_dir()
        paths.append(found if found is not None or not fetch_missing else fetch_triton())  # type: ignore[arg-type]
    if install.torchvision.exists() and needs_torchvision(finding.release):
        paths.append(install.torchvision)
    return [p for p in paths if p is not None]


def block_workbench(folder: Path) -> Path:
    """A folder holding a ``workbench`` package that refuses to import: put first on the path, it
    proves a script runs without the workbench."""
    package = folder / "workbench"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(
        'raise ImportError("a reproducer must not import workbench: it is standalone")\n')
    return folder


def run_script(finding: Finding, script: Path, *, timeout: float = 1800, workdir: Path | None = None) -> ScriptRun:
    """Run ``script`` with this interpreter and the cached wheel on ``PYTHONPATH`` (see the module note)."""
    workdir = workdir or script.parent / ".run"
    workdir.mkdir(parents=True, exist_ok=True)
    blocker = block_workbench(workdir / "blocker")
    paths = [blocker, *engine_paths(finding, script)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    env.setdefault("TRITON_INTERPRET", "1")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(script.resolve())], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=timeout)
    output = done.stdout + done.stderr
    return ScriptRun(done.returncode, time.perf_counter() - started, output, parse_summary(done.stdout))
