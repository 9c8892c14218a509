from __future__ import annotations

import sys
from pathlib import Path

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
