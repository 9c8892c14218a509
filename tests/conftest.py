from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    properties = sys.modules.get("test_properties")
    if properties is not None:
        count = properties.CASES["count"]  # type: ignore[attr-defined]
        terminalreporter.write_line(f"property-based cases generated and checked: {count}")


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> None:
    """Probes move one row at a time: torch's intra-op thread pool only adds hand-off cost
    (measured 20x slower with two threads on a loaded 2-core machine)."""
    import torch

    torch.set_num_threads(1)


def pytest_configure(config: pytest.Config) -> None:
    import os

    # No test reaches the internet: a check fetches a hub model's config files unless told offline.
    # The tests of that fetch unset this and point HF_ENDPOINT at a stand-in hub on 127.0.0.1.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Registered here rather than in pyproject.toml so that adding them does not re-run set-up.
    config.addinivalue_line("markers", "engine: runs a released engine's code (fetched once into the cache); "
                                       "deselect offline with -m 'not engine'")
    config.addinivalue_line("markers", "engine_versions: conformance of every modelled engine version (slow; "
                                       "WORKBENCH_ENGINE_VERSIONS=1)")
    config.addinivalue_line("markers", "repro_all: every finding's reproducer run with the cached wheel (slow; "
                                       "WORKBENCH_REPRO_ALL=1)")
    config.addinivalue_line("markers", "repro_venv: one reproducer in a fresh virtual environment (downloads torch; "
                                       "WORKBENCH_REPRO_VENV=1)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (minutes of engine processes each) run with ``WORKBENCH_SLOW=1``
    (``make test-slow``), so that ``make test`` stays within CI's time."""
    import os

    if os.environ.get("WORKBENCH_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: WORKBENCH_SLOW=1 (make test-slow) runs it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def small_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any], str]:
    """The whole main job (``make report``), every notebook with its small test parameters, built
    once for the session: ``test_notebooks`` checks the runs and the page,
    ``test_report_browser`` opens the page in Chromium. Returns (out, runs, log)."""
    from workbench.present.report import build_report

    out = tmp_path_factory.mktemp("small-report")
    log = io.StringIO()
    before = git_status()
    runs = build_report(out, "cpu", log, small=True)
    # What running every notebook did to the checkout (test_clean_runs: nothing)
    (out / "git-status.json").write_text(json.dumps({"before": before, "after": git_status()}))
    return out, runs, log.getvalue()


@pytest.fixture(autouse=True, scope="session")
def _engine_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The engine processes that read launch commands (``workbench.engines.commands.launch_service``): this
    session's own run folder, shared by every test (one process per release and GPU), all stopped
    at the end, so no process outlives the suite."""
    import os

    from workbench.engines.commands import launch_service

    previous = os.environ.get("WORKBENCH_RUN_DIR")
    os.environ["WORKBENCH_RUN_DIR"] = str(tmp_path_factory.mktemp("engine-processes"))
    try:
        yield
    finally:
        launch_service.stop_all()
        if previous is None:
            os.environ.pop("WORKBENCH_RUN_DIR", None)
        else:
            os.environ["WORKBENCH_RUN_DIR"] = previous


CHECKOUT = Path(__file__).resolve().parents[1]


def git_status() -> str | None:
    """``git status --porcelain`` of the checkout, untracked files listed one by one; None outside a clone."""
    try:
        done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=CHECKOUT,
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None
