"""The serving-run simulation: determinism, allocator integrity, agreement with the core's probes.

Expected values come from the seeds (the QwQ boundary 32753, torch's message, the exact-fit gather)
or from the core's own probes and boundary search run on the state each step recorded.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

from workbench.analysis.boundary import find_boundary
from workbench.analysis.cases import AllocatorCase, TableCase
from workbench.analysis.probe import probe_allocator, probe_table
from workbench.backends.sglang.dsa_page_table import Replay
from workbench.cli import main
from workbench.model.geometry import Mode, ServingGeometry
from workbench.sim.simulate import SimRun, capture_buckets, exact_fit_victim, simulate
from workbench.sim.simulate_summary import compare, explore, failure_share, records_frame, requests_frame, sweep
from workbench.sim.workload import (
    Acceptance,
    LengthDist,
    Request,
    SimConfig,
    Workload,
    exact_fit_scenario,
    qwq_scenario,
    read_trace,
)

ROOT = Path(__file__).resolve().parent.parent
QWQ_ERROR = "The size of tensor a (256) must match the size of tensor b (257) at non-singleton dimension 1"
# Requests that start a few dozen tokens short of the QwQ context, so a run takes seconds.
QWQ_SHORT = Workload(trace=(Request(0, 32700, 200), Request(1, 32740, 100), Request(2, 32600, 30)))
EXACT_FIT_SEED = 1  # a seed whose npu-legacy run meets an exact fit early (found by the first test)


def _qwq(rule: str, acceptance: str = "fixed:1", max_bs: int = 2) -> SimConfig:
    config, _ = qwq_scenario(rule=rule, acceptance=Acceptance.parse(acceptance), max_bs=max_bs)
    return config


def _table_case(run: SimRun, component: str, seq_lens: tuple[int, ...]) -> TableCase:
    c = run.config
    return TableCase(component=component, geometry=c.geometry, rule=c.rule, mode=c.mode, seq_lens=seq_lens,
                     replay=c.replay if component == "dsa-page-table" else Replay.DYNAMIC)


def _assert_agrees_with_probes(run: SimRun) -> int:
    """Every recorded step, replayed by the core's probes on the same state, gives the same outcome."""
    checked = 0
    for r in run.records:
        for component, outcome in (("npu-block-table", r.npu_outcome), ("dsa-page-table", r.dsa_outcome)):
            result = probe_table(_table_case(run, component, r.seq_lens))
            assert result.outcome.value == outcome, (r.step, component, result.error)
            checked += 1
        if r.mode == "decode":
            case = AllocatorCase(gather=run.config.gather, page_size=run.config.geometry.page_size,
                                 seq_lens=r.seq_lens, last_loc=r.last_loc, free_pages=r.free_list_before)
            result = probe_allocator(case)
            assert result.outcome.value == r.alloc_outcome, (r.step, result.error)
            if result.outcome.value == "ok":
                assert tuple(result.out_cache_loc or ()) == r.out_cache_loc
            checked += 1
    return checked


# ---- the two "done when" facts ------------------------------------------------------------------


def test_qwq_context_rule_fails_where_the_boundary_says_and_req_to_token_completes() -> None:
    run = simulate(_qwq("context"), QWQ_SHORT, seed=0, check_integrity=True)
    first = run.first_failure
    assert first is not None and first.mode == "target-verify"
    assert (first.failing_component, first.outcome, first.error) == ("npu-block-table", "shape-error", QWQ_ERROR)
    case = _table_case(run, "npu-block-table", (1,))
    boundary = find_boundary(case)
    assert boundary.first_failing_seq_len == 32753  # the Ascend seed
    # Acceptance fixed:1 commits one token a step, so the longest request meets the boundary exactly.
    assert first.committed[first.req_ids.index(first.failing_request)] == max(first.committed) == 32753
    assert all(max(r.committed) < 32753 and r.outcome == "ok" for r in run.records[:-1])
    assert first.dsa_outcome == "shape-error"  # DSA under the context rule: B = ctx tokens, same step

    fixed = simulate(_qwq("req-to-token"), QWQ_SHORT, seed=0, check_integrity=True)
    assert fixed.completed and not fixed.failures
    n = len(run.records)  # the same run, step for step, up to the failure
    assert [r.committed for r in fixed.records[:n]] == [r.committed for r in run.records]
    assert [r.out_cache_loc for r in fixed.records[:n]] == [r.out_cache_loc for r in run.records]
    assert max(max(r.committed) for r in fixed.records) == 32766  # the cap ctx - 1 is never verified


def test_exact_fit_legacy_fails_clamped_completes_with_cuda_masked_allocations() -> None:
    runs = {g: simulate(exact_fit_scenario(gather=g)[0], exact_fit_scenario()[1], EXACT_FIT_SEED, check_integrity=True)
            for g in ("npu-legacy", "npu-clamped", "cuda-masked")}
    legacy = runs["npu-legacy"].first_failure
    assert legacy is not None and legacy.outcome == "index-error" and legacy.failing_component == "allocator"
    assert legacy.exact_fit and legacy.new_pages == legacy.free_pages_before == len(legacy.free_list_before)
    assert legacy.error == f"index {legacy.new_pages} is out of bounds for dimension 0 with size {legacy.new_pages}"
    # The victim is the first row that opens no page after the last page-opening row.
    victim = exact_fit_victim(legacy.seq_lens, 4)
    assert victim is not None and legacy.failing_request == legacy.req_ids[victim]
    clamped, masked = runs["npu-clamped"], runs["cuda-masked"]
    assert clamped.completed and masked.completed and not clamped.failures and not masked.failures
    assert any(r.exact_fit for r in clamped.records)
    assert [r.out_cache_loc for r in clamped.records] == [r.out_cache_loc for r in masked.records]
    # Up to the failure the legacy run made the same allocations.
    n = len(runs["npu-legacy"].records) - 1
    assert [r.out_cache_loc for r in runs["npu-legacy"].records[:n]] == [r.out_cache_loc for r in clamped.records[:n]]


# ---- determinism, integrity, probes -------------------------------------------------------------


def test_same_seed_same_run_and_another_seed_another_run() -> None:
    config, workload = exact_fit_scenario(gather="npu-clamped")
    a, b, c = (simulate(config, workload, s) for s in (3, 3, 4))
    assert a.records == b.records and a.requests == b.requests
    assert records_frame(a).equals(records_frame(b))
    assert a.requests != c.requests
    spec = _qwq("req-to-token", "geometric:0.6")
    assert simulate(spec, QWQ_SHORT, 5).records == simulate(spec, QWQ_SHORT, 5).records


@pytest.mark.parametrize("gather", ["npu-legacy", "npu-clamped", "cuda-masked"])
def test_integrity_after_every_step_and_probes_agree(gather: str) -> None:
    config, workload = exact_fit_scenario(gather=gather)
    config = config.replace(stop_on_failure=False)  # run on past legacy failures: more states to check
    run = simulate(config, workload, EXACT_FIT_SEED, check_integrity=True)
    assert run.completed
    assert sum(r.retracted != () for r in run.records) > 0  # optimistic admission forces retractions
    assert _assert_agrees_with_probes(run) == 3 * len(run.records)
    if gather == "npu-legacy":
        assert all(r.exact_fit for r in run.failures) and len(run.failures) >= 1


def test_speculative_run_with_retractions_keeps_integrity() -> None:
    geometry = ServingGeometry(context_len=256, page_size=4, draft_tokens=4, spec_steps=3, max_bs=4)
    config = SimConfig(geometry=geometry, num_pages=48, conservativeness=0.0,
                       acceptance=Acceptance(kind="geometric", rate=0.7))
    workload = Workload(num_requests=8, prompt=LengthDist(8, 60), output=LengthDist(20, 120))
    run = simulate(config, workload, 2, check_integrity=True)
    assert run.completed and not run.failures
    assert sum(len(r.retracted) for r in run.records) > 0
    for r in run.records:  # verify commits 1..D tokens, and only as many as the output has left
        assert all(1 <= k <= 4 for k in r.accepted)
    assert _assert_agrees_with_probes(run) == 2 * len(run.records)


def test_overshoot_rides_one_more_verify_and_meets_the_dsa_boundary() -> None:
    # The DSA seed's shape at a small context: B = ctx + D fails at s = ctx + 1 (two past the cap).
    geometry = ServingGeometry(context_len=1000, page_size=64, draft_tokens=6, spec_steps=5, max_bs=1)
    workload = Workload(trace=(Request(0, 990, 100),))
    base = SimConfig(geometry=geometry, rule="context-plus-draft", acceptance=Acceptance(kind="fixed", count=6))
    boundary = find_boundary(TableCase(component="dsa-page-table", geometry=geometry, rule="context-plus-draft",
                                       mode=Mode.TARGET_VERIFY))
    assert boundary.first_failing_seq_len == 1001
    # k = 6 a step from 990: 996, then the cap 999 clips to 999 + overshoot; with overshoot the
    # request rides one more verify at that length before it retires.
    for overshoot, lengths in ((0, [(990,), (996,)]), (1, [(990,), (996,), (1000,)])):
        run = simulate(base.replace(overshoot=overshoot), workload, 0, check_integrity=True)
        assert run.completed and not run.failures
        assert [r.committed for r in run.records] == lengths
    run = simulate(base.replace(overshoot=2), workload, 0, check_integrity=True)
    first = run.first_failure
    assert first is not None and first.committed == (1001,) and first.failing_component == "dsa-page-table"
    assert first.error == "The size of tensor a (1006) must match the size of tensor b (1007) at non-singleton dimension 1"
    assert [r.committed for r in run.records] == [(990,), (996,), (1001,)]
    with pytest.raises(ValueError, match="overshoot: 6 is out of range"):
        base.replace(overshoot=6)


def test_static_dsa_replay_is_a_silent_overread() -> None:
    run = simulate(_qwq("context").replace(replay=Replay.STATIC), Workload(trace=(Request(0, 32745, 30),)), seed=0)
    assert len(run.records) == 9 and run.records[-1].committed == (32753,)
    first = run.first_failure
    assert first is not None and first.dsa_outcome == "silent-overread" and first.npu_outcome == "shape-error"
    assert first.error == QWQ_ERROR  # the NPU replay comes first in the step
    assert _assert_agrees_with_probes(run) == 2 * len(run.records)


def test_padding_to_the_capture_bucket() -> None:
    assert capture_buckets(1) == (1,) and capture_buckets(6) == (1, 2, 4, 6) and capture_buckets(8) == (1, 2, 4, 8)
    run = simulate(_qwq("req-to-token", "fixed:4", max_bs=4), QWQ_SHORT, seed=0)
    assert {(len(r.req_ids), r.bucket) for r in run.records} >= {(3, 4), (2, 2), (1, 1)}


# ---- summaries, workload parsing, command line, notebook ---------------------------------------


def test_share_moves_with_draft_tokens_and_frames_are_tidy() -> None:
    # ctx 1024 = 8 pages of 128: under the context rule a verify fails iff s + D > 1024, and a
    # request retires at 1023, so D = 2 never fails and D = 16 fails whenever a request nears the cap.
    geometry = ServingGeometry(context_len=1024, page_size=128, draft_tokens=2, max_bs=2)
    config = SimConfig(geometry=geometry, rule="context", acceptance=Acceptance(kind="geometric", rate=0.5))
    workload = Workload(num_requests=2, prompt=LengthDist(960, 1000), output=LengthDist(40, 80))
    frame = sweep(config, workload, "draft_tokens", [2, 16], seeds=range(3), rules=["context", "req-to-token"])
    share = {(row.value, row.rule): row.share for row in frame.itertuples()}
    assert share == {(2, "context"): 0.0, (2, "req-to-token"): 0.0, (16, "context"): 1.0, (16, "req-to-token"): 0.0}
    summaries = compare(config.replace(geometry=geometry.replace(draft_tokens=16)), workload, [0, 1])
    assert summaries["first_failing_step"].dtype == "Int64"
    assert failure_share(summaries)["failed_runs"].tolist() == [2]
    steps = requests_frame(simulate(config, workload, 0))
    assert list(steps.columns) == ["step", "req_id", "committed", "reads", "outcome", "failing"]
    assert (steps["reads"] == steps["committed"] + 2).all()


def test_workload_parsing_and_trace_files(tmp_path: Path) -> None:
    assert LengthDist.parse("500") == LengthDist(500, 500) and LengthDist.parse("1:9") == LengthDist(1, 9)
    for bad in ("x", "9:1", "1:2:3", "0"):
        with pytest.raises(ValueError, match="lengths"):
            LengthDist.parse(bad)
    assert Acceptance.parse("trace:1,4").label() == "trace:1,4"
    assert [Acceptance.parse("trace:1,4,9").draw(None, 6, i) for i in range(4)] == [1, 4, 6, 1]  # type: ignore[arg-type]
    for bad in ("fixed:0", "geometric:2", "trace:", "poisson:1"):
        with pytest.raises(ValueError, match="acceptance"):
            Acceptance.parse(bad)
    (tmp_path / "t.csv").write_text("prompt_len,output_len\n10,5\n20,6\n")
    (tmp_path / "t.jsonl").write_text('{"prompt_len": 10, "output_len": 5}\n{"prompt_len": 20, "output_len": 6}\n')
    expected = (Request(0, 10, 5), Request(1, 20, 6))
    assert read_trace(tmp_path / "t.csv") == expected == read_trace(tmp_path / "t.jsonl")
    with pytest.raises(ValueError, match="trace: entry 1"):
        (tmp_path / "bad.csv").write_text("prompt_len,output\n10,5\n")
        read_trace(tmp_path / "bad.csv")


def test_explorer_wraps_the_library() -> None:
    shown = explore("exact-fit", gather="npu-legacy", seed=EXACT_FIT_SEED)
    assert shown.summary["outcome"] == "index-error" and not shown.steps.empty
    calmer = explore("exact-fit", gather="npu-legacy", seed=EXACT_FIT_SEED, changes={"conservativeness": 1.0})
    assert calmer.summary["exact_fit_steps"] == 0 and calmer.summary["failed"] is False
    with pytest.raises(ValueError, match="scenario"):
        explore("nope")


def test_cli_simulate_json_and_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--rule", "context,req-to-token", "--context-len", "32768", "--page-size", "128",
            "--draft-tokens", "16", "--spec-topk", "10", "--no-draft-kv", "--max-bs", "2", "--requests", "2",
            "--prompt-len", "32740", "--output-len", "30", "--seeds", "2"]
    out = io.StringIO()
    assert main([*argv, "--out", str(tmp_path / "s.json")], out) == 0
    rows = json.loads((tmp_path / "s.json").read_text())
    assert [(r["rule"], r["seed"], r["failed"], r["failing_committed_len"]) for r in rows] == [
        ("context", 0, True, 32753), ("context", 1, True, 32753), ("req-to-token", 0, False, None),
        ("req-to-token", 1, False, None)]
    assert "context            npu-clamped failed 2/2 runs" in out.getvalue()
    assert "simulate" in capsys.readouterr().err  # the progress bar
    assert main([*argv, "--seeds", "1", "--out", str(tmp_path / "s.parquet")], io.StringIO()) == 0
    assert pd.read_parquet(tmp_path / "s.parquet")["failed"].tolist() == [True, False]


@pytest.mark.parametrize(("extra", "message"), [
    (["--acceptance", "fixed:x"], "acceptance"), (["--gather", "gpu"], "gather"),
    (["--prompt-len", "40000"], "prompt_len: 40000 is out of range"), (["--out", "x.csv"], "out:"),
    (["--num-pages", "1"], "num_pages: 1 cannot hold"),
])
def test_cli_simulate_bad_input_is_one_line_exit_2(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--context-len", "32768", "--page-size", "128", "--prompt-len", "100", "--seeds", "1", *extra]
    assert main(argv, io.StringIO()) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("workbench: error: ") and message in err[-1]


def test_notebook_runs_with_small_parameters(small_report: tuple[Path, list[object], str]) -> None:
    """Notebook 04 as the session's small report ran it (``conftest.small_report``: its declared
    test parameters, 3 run seeds per point), rather than a run of its own."""
    out, runs, log = small_report
    run = next(r for r in runs if getattr(r, "name", "") == "04_serving_runs")
    assert getattr(run, "error", "?") is None, log
    figures = sorted(p.name for p in (out / "figures").glob("04_*.json"))
    # notebook 04 draws a fourth figure since issue 15 (the first failing step per acceptance rate)
    assert figures == ["04_exact_fit.json", "04_first_failing_step.json", "04_qwq_run.json", "04_share_sweeps.json"]
