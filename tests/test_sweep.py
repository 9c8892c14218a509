"""Sweeps against an independent closed form; the cache, its corruption, and kill-and-resume."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from reference import ceil_div, dsa_width_tokens, npu_width_pages, request_table_width

import workbench.analysis.boundary
from workbench.analysis.cases import TableCase
from workbench.analysis.sweep import SweepGrid, allocator_exact_fit_sweep, cache_paths, request_trace, run_sweep, table_cases
from workbench.model.geometry import Mode, ServingGeometry

ROOT = Path(__file__).resolve().parent.parent
SMALL = SweepGrid(context_lens=(40, 67), page_sizes=(1, 4, 16), draft_tokens=(0, 3, 5), overshoot=2, max_bs=2)


def expected_first_failure(row: pd.Series) -> int | None:
    """Scan every committed length with the conditions of docs/semantics.md#replays."""
    ctx, ps, d = int(row.context_len), int(row.page_size), int(row.draft_tokens)
    w = request_table_width(ctx, ps, d, steps=5)
    verify = row["mode"] == "target-verify"
    table_bound = (w - d if verify else w - 1) if d else ctx - 1
    bound = max(1, min(table_bound, ctx - 1 + 2))
    lookahead = d if verify else 0
    for s in range(1, bound + 1):
        if row.component == "npu-block-table":
            fails = ceil_div(s + lookahead, ps) > npu_width_pages(row.rule, ctx, ps, d, w)
        else:
            fails = s + lookahead > dsa_width_tokens(row.rule, ctx, d, w)
        if fails:
            return s
    return None


@pytest.fixture(scope="module")
def small_frame() -> pd.DataFrame:
    return run_sweep(SMALL, cache_dir=None, progress=False)


def test_rows_agree_with_the_closed_form(small_frame: pd.DataFrame) -> None:
    # 2 ctx x 3 ps: NPU 3 drafts x 4 rules x 2 modes minus verify-without-drafts (4 rules); DSA 3 drafts
    # x 3 rules x 2 modes minus 3, twice (two replays).
    assert len(small_frame) == 6 * ((24 - 4) + 2 * (18 - 3))
    assert small_frame.confirmed.all()
    for _, row in small_frame.iterrows():
        expected = expected_first_failure(row)
        got = row.first_failing_seq_len
        assert (None if pd.isna(got) else int(got)) == expected, row.to_dict()
        if expected is None:
            assert row.outcome == "ok" and row.error is None and pd.isna(row.failing_offset)
        else:
            assert row.failing_offset == expected - row.context_len
            static = row.component == "dsa-page-table" and row.replay == "static"
            assert row.outcome == ("silent-overread" if static else "shape-error")
            assert isinstance(row.error, str) and row.error


def test_rule_facts(small_frame: pd.DataFrame) -> None:
    assert small_frame[small_frame.rule == "req-to-token"].first_failing_seq_len.isna().all()
    npu_verify = small_frame[(small_frame.component == "npu-block-table") & (small_frame.rule == "context")
                             & (small_frame["mode"] == "target-verify")]
    assert len(npu_verify) == 2 * 3 * 2
    # B * ps - D + 1, B = cdiv(ctx, ps), when within the search (docs/semantics.md#first-failing-length)
    for _, row in npu_verify.iterrows():
        b = ceil_div(row.context_len, row.page_size)
        first = b * row.page_size - row.draft_tokens + 1
        if first <= row.max_seq_len:
            assert row.first_failing_seq_len == first
        else:  # a page rounded up past the context absorbs the drafts (ctx 67, ps 16: 80 tokens)
            assert pd.isna(row.first_failing_seq_len)
    assert npu_verify.first_failing_seq_len.notna().sum() >= 6
    assert set(small_frame.buffer_unit) == {"pages", "tokens"}
    assert (small_frame.overhead_bytes == small_frame.buffer_bytes - small_frame.min_safe_bytes).all()


def test_a_measured_sweep_records_the_bytes_torch_allocated(small_frame: pd.DataFrame) -> None:
    assert small_frame.measured_bytes.isna().all() and (small_frame.path == "none").all()  # CPU: copy only
    measured = run_sweep(dataclasses.replace(SMALL, measure_memory=True), cache_dir=None, progress=False)
    for _, row in measured.iterrows():  # int32 buffers with the engine's rows (max_bs 2; verify: 2 * D)
        ctx, ps, d = int(row.context_len), int(row.page_size), int(row.draft_tokens)
        w = request_table_width(ctx, ps, d, steps=5)
        if row.component == "npu-block-table":
            expected = 2 * npu_width_pages(row.rule, ctx, ps, d, w) * 4
        else:
            rows = 2 * (d if row["mode"] == "target-verify" else 1)
            width = dsa_width_tokens(row.rule, ctx, d, w)
            expected = rows * width * 4 + (rows * ceil_div(width, ps) * 4 if ps > 1 else 0)
        assert row.measured_bytes == expected, row.to_dict()
    assert set(measured.measure_method) == {"untyped_storage().nbytes()"}
    pd.testing.assert_frame_equal(measured.drop(columns=["measured_bytes", "measure_method"]),
                                  small_frame.drop(columns=["measured_bytes", "measure_method"]))


def test_invalid_combinations_are_skipped() -> None:
    cases = table_cases(SweepGrid(context_lens=(64,), page_sizes=(1,), draft_tokens=(0,), modes=("target-verify", "draft-decode")))
    assert cases == []
    dsa = table_cases(SweepGrid(components=("dsa-page-table",), context_lens=(64,), page_sizes=(1,), draft_tokens=(4,),
                                modes=("draft-decode", "decode"), rules=("context",)))
    assert [(c.mode, c.replay.value) for c in dsa] == [(Mode.DECODE, "dynamic"), (Mode.DECODE, "static")]


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("page_sizes", (0,), "page_sizes: 0 is out of range"),
    ("rules", ("widest",), "rules: 'widest' is not one of context"),
    ("modes", (), "modes: empty"),
    ("overshoot", -1, "overshoot: -1"),
    ("step_id", 5, "step_id: 5 is out of range (allowed: integers 0 to 4)"),
])
def test_grid_validation_names_the_field(field: str, value: object, needle: str) -> None:
    with pytest.raises(ValueError) as err:
        SweepGrid(**{field: value})  # type: ignore[arg-type]
    assert needle in str(err.value)


def test_grid_key_is_stable_and_distinguishes_grids() -> None:
    assert SweepGrid().key() == SweepGrid().key()
    assert SweepGrid(context_lens=[4096]).key() == SweepGrid(context_lens=(4096,)).key()  # type: ignore[arg-type]
    assert SweepGrid(overshoot=1).key() != SweepGrid().key()


def test_second_run_reads_the_cache_and_a_truncated_file_is_recomputed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_frame: pd.DataFrame
) -> None:
    grid = SweepGrid(context_lens=(40,), page_sizes=(4,), draft_tokens=(0, 3))
    first = run_sweep(grid, cache_dir=tmp_path, progress=False, chunk_size=7)
    final, chunks = cache_paths(grid, tmp_path, "cpu", 7)
    assert final.exists() and not chunks.exists()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached sweep ran a boundary search")

    with monkeypatch.context() as patch:
        patch.setattr(workbench.analysis.boundary, "fast_boundaries", refuse)
        pd.testing.assert_frame_equal(run_sweep(grid, cache_dir=tmp_path, progress=False, chunk_size=7), first)

    data = final.read_bytes()
    final.write_bytes(data[: len(data) // 2])
    with pytest.warns(UserWarning, match=final.name):
        again = run_sweep(grid, cache_dir=tmp_path, progress=False, chunk_size=7)
    pd.testing.assert_frame_equal(again, first)
    assert len(pd.read_parquet(final)) == len(first)


KILLED_RUN = """
import signal, sys, time
from pathlib import Path
import workbench.analysis.sweep as sweep
# A test run started as a background job inherits SIGINT ignored (a non-interactive shell's "&"),
# and Python keeps it so: the interrupt this test sends must reach the sweep as a KeyboardInterrupt.
signal.signal(signal.SIGINT, signal.default_int_handler)
real = sweep.sweep_row
def slow(*args, **kwargs):
    # Once a chunk is on disk, wait for the test's signal: a busy machine must not let the
    # sweep finish between the test seeing the chunk and its signal (a fixed delay did, in CI).
    time.sleep(60 if list(Path(sys.argv[1]).rglob("chunk-*.parquet")) else 0.05)
    return real(*args, **kwargs)
sweep.sweep_row = slow
grid = sweep.SweepGrid(context_lens=(40, 67), page_sizes=(4,), draft_tokens=(0, 3))
sweep.run_sweep(grid, cache_dir=sys.argv[1], progress=False, chunk_size=4)
"""


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_kill_and_resume(stop: signal.Signals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    grid = SweepGrid(context_lens=(40, 67), page_sizes=(4,), draft_tokens=(0, 3))
    total = len(table_cases(grid))
    final, chunks = cache_paths(grid, tmp_path, "cpu", 4)
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(KILLED_RUN), str(tmp_path)], cwd=ROOT,
                             stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not list(chunks.glob("chunk-*.parquet")) and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.01)
    child.send_signal(stop)  # SIGINT: a KeyboardInterrupt mid-chunk; SIGKILL: no chance to clean up
    assert child.wait() != 0, "the sweep finished before it could be interrupted"
    done = len(list(chunks.glob("chunk-*.parquet")))
    assert 1 <= done < ceil_div(total, 4) and not final.exists()

    calls: list[object] = []
    real = workbench.analysis.boundary.fast_boundaries

    def counting(cases: list[object], **kwargs: object) -> object:
        calls.extend(cases)
        return real(cases, **kwargs)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(workbench.analysis.boundary, "fast_boundaries", counting)
        resumed = run_sweep(grid, cache_dir=tmp_path, progress=False, chunk_size=4)
    assert len(calls) <= total - 4 * done
    uninterrupted = run_sweep(grid, cache_dir=None, progress=False)
    pd.testing.assert_frame_equal(resumed, uninterrupted)


def test_exact_fit_sweep_matches_the_spec() -> None:
    frame = allocator_exact_fit_sweep(page_sizes=(4, 128), max_batch=5)
    assert set(frame.gather) == {"npu-legacy", "npu-clamped", "cuda-masked"}
    for _, row in frame.iterrows():
        opens = [c == "o" for c in row.pattern]
        needed, free = sum(opens), row.free_pages
        trailing = needed > 0 and not opens[-1]  # a non-opening row after the last opening row
        if row.gather == "cuda-masked":
            expected = "silent-overread" if free < needed else "ok"
        elif free < needed:
            expected = "out-of-memory"
        elif row.gather == "npu-legacy" and free == needed and trailing:
            expected = "index-error"
        else:
            expected = "ok"
        assert row.outcome == expected, row.to_dict()
        assert free <= needed + 2
    seed = frame[(frame.batch == "seed [5, 10, 7]") & (frame.free_pages == 1) & (frame.page_size == 4)]
    assert seed.set_index("gather").outcome.to_dict() == {
        "npu-legacy": "index-error", "npu-clamped": "ok", "cuda-masked": "ok"}
    assert "index 1 is out of bounds for dimension 0 with size 1" in seed.set_index("gather").error["npu-legacy"]


def test_request_trace_follows_one_request_to_the_bound() -> None:
    # ctx 256, ps 64, D 16: B = 4 pages = 256 tokens, W = 276, verify bound W - D = 260.
    geometry = ServingGeometry(context_len=256, page_size=64, draft_tokens=16)
    case = TableCase(component="npu-block-table", geometry=geometry, rule="context", mode=Mode.TARGET_VERIFY)
    trace = request_trace(case, steps=40)
    assert trace.seq_len.tolist() == list(range(221, 261))
    assert (trace.reads == trace.seq_len + 16).all()
    assert (trace.buffer_capacity_tokens == 256).all() and (trace.request_table_width == 276).all()
    assert trace[trace.outcome != "ok"].seq_len.min() == 241  # B * ps - D + 1
    assert set(trace[trace.seq_len >= 241].outcome) == {"shape-error"}


def test_exact_fit_sweep_runs_device_probes_through_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off the CPU every allocator probe goes through the child-process path; the records it
    returns (here produced in-process by the same child target) become the sweep's rows."""
    from workbench.analysis.sweep import allocator_exact_fit_sweep
    from workbench.devices import isolation

    calls: list[dict] = []

    def fake_run_isolated(target, payload, *, timeout_s):  # type: ignore[no-untyped-def]
        calls.append(dict(payload))
        return target({**payload, "device": "cpu"})

    monkeypatch.setattr(isolation, "run_isolated", fake_run_isolated)
    monkeypatch.setattr(isolation, "needs_isolation", lambda case, device: True)
    isolated = allocator_exact_fit_sweep(page_sizes=(4,), max_batch=3, gathers=("npu-legacy",), device="cpu")
    monkeypatch.undo()
    direct = allocator_exact_fit_sweep(page_sizes=(4,), max_batch=3, gathers=("npu-legacy",), device="cpu")
    assert len(calls) == len(direct) > 0
    pd.testing.assert_frame_equal(isolated.drop(columns="out_cache_loc"), direct.drop(columns="out_cache_loc"))
    assert "index-error" in set(isolated.outcome)
