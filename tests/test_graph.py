"""The kernel-like read, its capture/replay wrapper, and which path a probe reports."""

from __future__ import annotations

import random

import pytest
import torch
from devices import ACCELERATORS, require

from workbench.analysis.cases import parse_case
from workbench.analysis.probe import probe
from workbench.analysis.seeds import SEEDS
from workbench.devices.graph import CapturedRead, choose_path, gather_kv, median_seconds
from workbench.devices.isolation import isolated_probe


def _reference_read(table: list[list[int]], seq_lens: list[int], page_size: int) -> list[int]:
    """Plain Python: the sum of the slot ids (kv[i] = i) of every position t < seq_len the row covers."""
    sums = []
    for row, seq_len in zip(table, seq_lens):
        covered = min(seq_len, len(row) * page_size)
        sums.append(sum(row[t // page_size] * page_size + t % page_size for t in range(covered)))
    return sums


def test_the_worked_example() -> None:
    table = torch.tensor([[3, 7, 0]], dtype=torch.int32)
    out = gather_kv(table, torch.tensor([6], dtype=torch.int32), torch.arange(64), 4)
    assert out.tolist() == [12 + 13 + 14 + 15 + 28 + 29]


@pytest.mark.parametrize("page_size", [1, 4, 64])
def test_the_read_matches_a_plain_python_loop(page_size: int) -> None:
    rng = random.Random(page_size)
    num_pages = 50
    rows = [[rng.randrange(num_pages) for _ in range(6)] for _ in range(5)]
    seq_lens = [0, 1, page_size * 3 + 1, page_size * 6, page_size * 6 + 9]  # the last reads past the row's coverage
    kv = torch.arange(num_pages * page_size)
    out = gather_kv(torch.tensor(rows, dtype=torch.int32), torch.tensor(seq_lens, dtype=torch.int32), kv, page_size)
    assert out.tolist() == _reference_read(rows, seq_lens, page_size)


def test_dead_positions_never_index_the_pool() -> None:
    # Page 999 lies far outside a 16-slot pool, but past seq_len: masked, as a kernel masks its loads.
    table = torch.tensor([[1, 999]], dtype=torch.int32)
    assert gather_kv(table, torch.tensor([4], dtype=torch.int32), torch.arange(16), 4).tolist() == [4 + 5 + 6 + 7]
    with pytest.raises(IndexError):  # a live position there is a real out-of-bounds read
        gather_kv(table, torch.tensor([5], dtype=torch.int32), torch.arange(16), 4)


def test_paths() -> None:
    assert choose_path("cpu") == "eager"
    assert choose_path("cpu", "eager") == "eager"
    with pytest.raises(ValueError, match="'graph' needs a CUDA or NPU device, not cpu"):
        choose_path("cpu", "graph")
    with pytest.raises(ValueError, match="'jit' is not one of auto, graph, eager"):
        choose_path("cpu", "jit")


def test_a_captured_read_follows_copies_into_its_static_table() -> None:
    table = torch.zeros((2, 3), dtype=torch.int32)  # (rows, B pages) int32, as the engine's buffer
    read = CapturedRead.capture(table, 4, 64)
    assert read.path == "eager" and read.graph is None
    assert read.run([5, 5]).tolist() == [0 + 1 + 2 + 3 + 0, 0 + 1 + 2 + 3 + 0]  # all pad page 0
    table[:, :2].copy_(torch.tensor([[2, 3], [4, 5]], dtype=torch.int32))  # a replay's metadata copy_
    assert read.run([5, 8]).tolist() == _reference_read([[2, 3, 0], [4, 5, 0]], [5, 8], 4)
    with pytest.raises(ValueError, match="reads: 1 rows for a captured table of 2"):
        read.run([5])


def test_median_seconds_runs_warmup_then_repeats() -> None:
    calls: list[int] = []
    seconds = median_seconds(lambda: calls.append(1), "cpu", repeats=5, warmup=2)
    assert len(calls) == 7 and seconds >= 0
    with pytest.raises(ValueError, match="repeats: 0"):
        median_seconds(lambda: None, "cpu", repeats=0)


def _seed_results(device: str) -> list[tuple[str, str | None, str, str]]:
    results = []
    for seed in SEEDS:
        for case in (seed.before, seed.after):
            r = probe(parse_case(case), device)
            results.append((r.outcome.value, r.error, r.path, r.device))
    return results


def test_probes_on_the_cpu_run_eagerly_with_the_spec_outcomes() -> None:
    results = _seed_results("cpu")
    assert [r[0] for r in results] == ["shape-error", "ok", "shape-error", "ok", "index-error", "ok"]
    assert [r[1] for r in results][::2] == [seed.expected_error for seed in SEEDS]
    assert {(r[2], r[3]) for r in results} == {("eager", "cpu")}


def _device_checks(device: str) -> None:
    table = torch.zeros((2, 3), dtype=torch.int32, device=device)
    read = CapturedRead.capture(table, 4, 64)
    assert read.path == "graph"
    table[:, :2].copy_(torch.tensor([[2, 3], [4, 5]], dtype=torch.int32))
    assert read.run([5, 8]).tolist() == _reference_read([[2, 3, 0], [4, 5, 0]], [5, 8], 4)
    cpu = _seed_results("cpu")
    # The allocator seeds go through a child: the legacy gather is a device-side assert there.
    here = [isolated_probe(case, device) for seed in SEEDS for case in (seed.before, seed.after)]
    assert [r["outcome"] for r in here] == [r[0] for r in cpu]
    assert [r["error"] for r in here[:4]] == [r[1] for r in cpu[:4]]  # the copy_ errors are host-side: same text
    assert {r["path"] for r in here[:4]} == {"graph"}
    assert all(str(r.get("device", device)).startswith(device) for r in here)


@pytest.mark.parametrize("device", ACCELERATORS)
def test_graph_replay_agrees_with_the_cpu(device: str) -> None:
    require(device)
    _device_checks(device)


class _CountingGraph:
    """Stands in for torch.cuda.CUDAGraph where no device exists: replay() runs the captured body."""

    captures: list[_CountingGraph] = []

    def __init__(self, body: object) -> None:
        self.body = body
        self.replays = 0
        _CountingGraph.captures.append(self)

    def replay(self) -> None:
        self.replays += 1
        self.body()  # type: ignore[operator]


def test_searches_capture_one_graph_per_width_and_replay_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph path's bookkeeping, checked on the CPU with a stand-in graph: a trace of 40 steps
    at one width captures once and replays 40 times; each probe reports ``graph``."""
    import workbench.devices.graph
    from workbench.analysis import capture_cache
    from workbench.analysis.boundary import probe_step
    from workbench.analysis.sweep import request_trace

    monkeypatch.setattr(workbench.devices.graph, "graph_supported", lambda device: True)
    monkeypatch.setattr(workbench.devices.graph, "_capture", lambda body, device: _CountingGraph(body))
    _CountingGraph.captures = []
    capture_cache.clear()
    case = parse_case(SEEDS[0].before)
    trace = request_trace(case, steps=40)
    assert len(trace) == 40 and set(trace.outcome) == {"ok", "shape-error"}
    assert len(_CountingGraph.captures) == 1
    passed = int((trace.outcome == "ok").sum())
    assert _CountingGraph.captures[0].replays == passed  # a failed copy_ raises before the replay
    assert probe_step(case, 1000).path == "graph"  # another length of the same width: the same graph
    assert len(_CountingGraph.captures) == 1 and _CountingGraph.captures[0].replays == passed + 1
    capture_cache.clear()
