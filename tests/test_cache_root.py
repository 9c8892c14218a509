"""Where the workbench keeps its cache (``workbench.engines.store.cache_root``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.engines.store import learned, wheels
from workbench.engines.store.cache_root import cache_root


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


def test_a_fetch_holding_the_lock_clears_an_interrupted_fetch_and_says_so(tmp_path: Path) -> None:
    """Under the release's lock no other process is fetching it, so a folder without ``ready`` is
    what a stopped fetch left: removed at once (a fetch used to wait 15 silent minutes on it)."""
    folder = tmp_path / "vllm-0.6.1.post2"
    (folder / "wheel").mkdir(parents=True)
    (folder / "wheel" / "vllm-0.6.1.post2-cp38-abi3-manylinux1_x86_64.whl").write_bytes(b"half")
    said: list[str] = []
    wheels._clear_interrupted("vllm==0.6.1.post2", folder, said.append)
    assert not folder.exists()
    assert said == [f"vllm==0.6.1.post2: {folder} holds an interrupted fetch (no 'ready' file): removed, fetching again"]
    wheels._clear_interrupted("vllm==0.6.1.post2", folder, said.append)  # nothing left: nothing said
    assert len(said) == 1
