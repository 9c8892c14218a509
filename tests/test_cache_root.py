"""Where the workbench keeps its cache (``workbench.engines.cache_root``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.engines import learned, wheels
from workbench.engines.cache_root import cache_root


def test_an_empty_workbench_cache_is_unset_not_the_current_folder(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    # `WORKBENCH_CACHE= workbench engines fetch --triton` once put a gigabyte into the checkout
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WORKBENCH_CACHE", "")
    assert cache_root() == tmp_path / ".cache" / "workbench"
    assert wheels.cache_root() == tmp_path / ".cache" / "workbench" / "engines"
    assert learned.cache_dir() == tmp_path / ".cache" / "workbench" / "learned"
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "mine"))
    assert wheels.cache_root() == tmp_path / "mine" / "engines"
