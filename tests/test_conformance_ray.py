"""Conformance of several releases spread over Ray gives the rows the one-machine run gives, in the
asked order (``workbench conformance --executor ray``): a local Ray instance of two CPUs stands for
a cluster, each release a task of its own."""

from __future__ import annotations

import io
import json

import pytest

from workbench.analysis.executors import Executor
from workbench.engines.checking import conformance

pytest.importorskip("ray")
RELEASES = ["sglang==0.5.23", "sglang==0.5.19"]
ONLY = ["get_req_to_token_extra_context_len", "alloc_decode"]  # quick rows of both releases


def _rows(executor: Executor, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, object]], str]:
    out = io.StringIO()
    status = conformance.main(RELEASES, as_json=True, states=30, seed=3, triton=False, out=out, only=ONLY,
                              executor=executor)
    return status, [json.loads(line) for line in out.getvalue().splitlines()], capsys.readouterr().err


@pytest.mark.engine
def test_ray_gives_the_rows_of_the_local_run(capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    local_status, local_rows, _ = _rows(Executor(kind="serial"), capsys)
    try:
        ray_status, ray_rows, progress = _rows(Executor(kind="ray", workers=2), capsys)
    finally:
        ray.shutdown()
    assert local_rows, "the local run gave no rows to compare"
    assert {row["engine"] for row in local_rows} == set(RELEASES)
    assert any(not row["skipped"] and row["states"] > 0 for row in local_rows)
    assert (ray_status, ray_rows) == (local_status, local_rows)
    assert progress.count("workbench conformance: [") == len(RELEASES)  # a line as each release finishes
