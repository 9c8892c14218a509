"""Parallel sweeps give the serial sweep's frame: a local process pool and a local Ray instance."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest

from workbench.analysis.executors import Executor
from workbench.analysis.sweep import SweepGrid, run_sweep

GRID = SweepGrid(context_lens=(300, 1000), page_sizes=(1, 64), draft_tokens=(0, 6), modes=("decode", "target-verify"))


def _serial() -> pd.DataFrame:
    return run_sweep(GRID, cache_dir=None, progress=False, chunk_size=7, executor=Executor(kind="serial"))


def test_process_pool_sweep_equals_the_serial_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    parallel = run_sweep(GRID, cache_dir=tmp_path, progress=False, chunk_size=7,
                         executor=Executor(kind="process", workers=2))
    pd.testing.assert_frame_equal(parallel, _serial())
    assert len(parallel) > 7 * 2, "the grid must span several chunks to exercise the pool"


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed: pip install -e '.[ray]'")
def test_local_two_cpu_ray_sweep_equals_the_serial_one() -> None:
    import ray

    try:
        parallel = run_sweep(GRID, cache_dir=None, progress=False, chunk_size=7, executor=Executor(kind="ray", workers=2))
        assert ray.cluster_resources().get("CPU") == 2
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(parallel, _serial())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(kind="dask"), "executor: 'dask' is not one of auto, serial, process, ray"),
        (dict(kind="process", workers=0), "workers: 0 is out of range"),
        (dict(kind="process", address="ray://x:10001"), "address: applies to the ray executor only"),
    ],
)
def test_bad_executor_settings(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        Executor(**kwargs)
