"""The atlas (issue 13, items 4-6): every backend, version and mode over realistic settings.

Expected values: docs/engine-facts.md#sglang-ascend-block-tables (0.5.23's Ascend gap: a QwQ NGRAM verify fails at 32881,
257 against 258 pages), the scheduler cap ctx - 1 (docs/engine-facts.md#sglang-scheduler-caps) with the default overshoot of 2, and
FA3's width read from the engine (cdiv(ctx, ps) pages, so a verify of D drafts at ps 1 first reads
past the row at ctx - D + 1).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from workbench.atlas.rows import configurations, confirm_by_runs, run_atlas, summarize
from workbench.present.atlas_figure import atlas_figure


@pytest.fixture(scope="module")
def atlas() -> pd.DataFrame:
    return run_atlas(["sglang==0.5.23"])


def _setting(frame: pd.DataFrame, backend: str, mode: str, preset: str, recipe: str, ctx: int, ps: int) -> pd.Series:
    rows = frame[(frame.backend == backend) & (frame["mode"] == mode) & (frame.preset == preset)
                 & (frame.recipe == recipe) & (frame.context_len == ctx) & (frame.page_size == ps)]
    assert len(rows) == 1
    return rows.iloc[0]


def _named_by_0523() -> set[str]:
    """The backends whose rule data/engines.json records for 0.5.23 (the data, not the atlas)."""
    from workbench.backends import table_backends
    from workbench.engines.store.versions import engine_version

    version = engine_version("sglang==0.5.23")
    return {b.label for b in table_backends() if "rule" in version.case_fields(b.name)}


def _pooled_named_by(engine: str) -> set[str]:
    """The pooled backends (flat kv_indices) whose buffers data/engines.json records for ``engine``."""
    from workbench.backends import POOLED_BACKENDS
    from workbench.engines.store.versions import engine_version

    version = engine_version(engine)
    return {b.name for b in POOLED_BACKENDS if version.case_fields(b.name)}


def _reservation_named_by(engine: str) -> set[str]:
    """The request table's reservation, where data/engines.json records one for ``engine``."""
    from workbench.backends import RESERVATION_BACKENDS
    from workbench.engines.store.versions import engine_version

    version = engine_version(engine)
    return {b.name for b in RESERVATION_BACKENDS if version.case_fields(b.name)}


def test_every_backend_the_version_names_has_rows_in_every_mode_it_captures(atlas: pd.DataFrame) -> None:
    assert {"npu-block-table", "dsa-page-table", "sglang-fa3-page-table"} <= _named_by_0523()
    assert set(atlas.backend) == _named_by_0523() | _pooled_named_by("sglang==0.5.23") | _reservation_named_by("sglang==0.5.23")
    assert set(atlas[atlas.backend == "dsa-page-table"]["mode"]) == {"decode", "target-verify", "draft-extend"}
    assert set(atlas[atlas.backend == "npu-block-table"]["mode"]) == {"decode", "target-verify", "draft-decode",
                                                                       "draft-extend"}
    table = atlas[atlas.buffer_unit != "entries"]
    assert (table.status != "refused").sum() == len(configurations(["sglang==0.5.23"]))
    assert len(table) == len(configurations(["sglang==0.5.23"], with_refused=True))  # refused: a row, nothing run
    assert atlas.context_len.max() == 1048576  # GLM-5.2 at its own context


def test_the_ascend_gap_of_0523_is_a_failure_no_run_reaches(atlas: pd.DataFrame) -> None:
    # 0.5.23 refuses NGRAM on an NPU at start-up (_handle_ngram): the seed's recipe is not run, its rows say why
    ngram = atlas[(atlas.backend == "npu-block-table") & (atlas.draft_tokens == 16)]
    assert len(ngram) and set(ngram.status) == {"refused"} and ngram.first_failing_seq_len.isna().all()
    assert ngram.startup_refusal.str.contains("Ngram speculative decoding only supports CUDA").any()
    # GLM-5's EAGLE (3, 1, 4): (32768 + 127 + 4) // 128 = 257 pages; a verify reads s + 4
    row = _setting(atlas, "npu-block-table", "target-verify", "GLM-5", "own", 32768, 128)
    assert (row.rule, row.width_gen, row.buffer_width) == ("context-plus-draft", "g3", 257)
    assert row.first_failing_seq_len == 257 * 128 - 4 + 1 and row.reachable_len < 32768 + 4
    assert row.error == "The size of tensor a (257) must match the size of tensor b (258) at non-singleton dimension 1"
    assert (row.margin, row.status) == (32893 - row.reachable_len - 1, "unreachable")


def test_fa3_verify_reads_past_its_row_in_a_real_run(atlas: pd.DataFrame) -> None:
    row = _setting(atlas, "sglang-fa3-page-table", "target-verify", "QwQ-32B", "ngram-16", 32768, 1)
    assert (row.buffer_width, row.first_failing_seq_len, row.outcome) == (32768, 32768 - 16 + 1, "silent-overread")
    # the scheduler reaches 32779, past what the table holds in a verify (W - D = 32788 - 16): the run stops there
    assert row.reachable_len == 32772 and "past the request table" in row.reach_why
    assert row.status == "reachable" and row.margin == 32753 - 32772 - 1
    off = atlas[(atlas.backend == "sglang-fa3-page-table") & (atlas.recipe == "off")]
    assert set(off.status) == {"safe"}  # without speculation nothing reads past ctx - 1


def test_every_reachable_failure_reported_is_hit_by_a_serving_run(atlas: pd.DataFrame) -> None:
    summary = confirm_by_runs(summarize(atlas))
    reachable = summary[summary.status == "reachable"]
    assert len(reachable) >= 4
    assert reachable.run_confirmed.all(), reachable[["backend", "mode", "first_failing_seq_len", "run_committed_len"]]
    assert (reachable.run_committed_len >= reachable.first_failing_seq_len - 1).all()
    # A margin or a safe row: the run gets to the reachable length and no replay fails
    others = summary[~summary.status.isin(["reachable", "refused"])]
    assert len(others) and others.run_confirmed.all(), others[["backend", "mode", "reachable_len", "run_committed_len"]]
    assert (others.run_outcome == "ok").all() and (others.run_committed_len >= others.reachable_len - 1).all()


def test_the_vllm_rows_are_run_again_and_hit_where_the_reports_say() -> None:
    from workbench.atlas.rows import case_backend_rows

    summary = confirm_by_runs(summarize(case_backend_rows())).set_index(["backend", "engine"])
    v0 = summary.loc[("vllm-v0-graph-block-tables", "vllm==0.6.0")]
    # vLLM 5563: one request walking to the capture length fails first at seq_len 8186 (513 > 512 blocks)
    assert (v0.run_committed_len, v0.run_outcome, v0.run_confirmed) == (8186, "shape-error", True)
    # 0.6.2's worst deployment is xformers, whose builder still assigns the whole list (PR 8340
    # truncates in flash-attn and flashinfer only): the same first failing length
    still = summary.loc[("vllm-v0-graph-block-tables", "vllm==0.6.2")]
    assert (still.run_committed_len, still.run_outcome, still.run_confirmed) == (8186, "shape-error", True)
    assert "xformers" in str(still.case)
    indexer = summary.loc[("vllm-indexer-block-table", "vllm==0.23.0")]
    assert (indexer.run_model, indexer.run_outcome, indexer.run_confirmed) == ("the deployment's step", "shape-error", True)
    assert summary.loc[("vllm-indexer-block-table", "vllm==0.33.0")].run_confirmed


def test_the_figure_draws_one_cell_per_backend_version_and_mode(atlas: pd.DataFrame) -> None:
    summary = summarize(atlas)
    fig = atlas_figure(summary)
    heat = fig.data[0]
    # a row per backend and run of consecutive releases with the same cells: every pair is in one row's label
    pairs = summary[["backend", "engine"]].drop_duplicates()
    assert len(heat.y) <= len(pairs) and len(heat.x) == summary["mode"].nunique()
    for backend, engine in pairs.itertuples(index=False):
        version = engine.partition("==")[2] or engine
        assert sum(label.startswith(backend + "<br>") and version in label for label in heat.y) >= 1, (backend, engine)
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    # each word in two lines at most: a band of the colour bar is narrower than the word in one
    assert list(fig.data[0].colorbar.ticktext) == ["safe", "fails past<br>reach", "fails<br>loudly", "fails<br>silently",
                                                   "refused at<br>start-up", "n/a"]
    assert fig.layout.width <= 940  # JupyterLab's output area at a 1400 px window


def test_the_command_prints_summary_rows_as_json() -> None:
    done = subprocess.run([sys.executable, "-m", "workbench", "atlas", "--engine", "sglang==0.5.23", "--json", "--no-runs"],
                          capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert {r["backend"] for r in rows} == (_named_by_0523() | _pooled_named_by("sglang==0.5.23")
                                          | _reservation_named_by("sglang==0.5.23"))
    for r in rows:
        assert {"first_failing_seq_len", "reachable_len", "margin", "status", "outcome", "error"} <= set(r)
    bad = subprocess.run([sys.executable, "-m", "workbench", "atlas", "--engine", "sglang==0.0.0"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "engine: 'sglang==0.0.0' is not a modelled version" in bad.stderr


def test_the_vllm_crash_reports_are_rows_of_the_atlas() -> None:
    from workbench.atlas.rows import case_backend_rows

    rows = case_backend_rows()
    indexer = rows[rows.backend == "vllm-indexer-block-table"].set_index(["engine", "reachable_len"])
    # vLLM 46074: 350000 fails on 0.23.0 (5469 against 5470 blocks) and not on 0.33.0; 300000 runs
    assert indexer.loc[("vllm==0.23.0", 350000)].status == "reachable"
    assert "(5469) must match the existing size (5470)" in indexer.loc[("vllm==0.23.0", 350000)].error
    assert indexer.loc[("vllm==0.33.0", 350000)].status == "safe"
    assert indexer.loc[("vllm==0.23.0", 300000)].status == "safe"
    v0 = rows[rows.backend == "vllm-v0-graph-block-tables"]
    # vLLM 5563 / 8145: a graph row of 512 blocks, 7 lookahead slots: 8186 is the first seq_len past it
    assert set(v0[v0.engine == "vllm==0.6.0"].first_failing_seq_len) == {8186}
    flash_attn = v0[~v0.case.str.contains("attention_backend")]  # the reports' backend (the default)
    assert set(flash_attn[flash_attn.engine == "vllm==0.6.2"].status) == {"safe"}


def test_a_run_that_contradicts_its_row_is_not_confirmed(atlas: pd.DataFrame) -> None:
    """The confirmation can fail: the FA3 verify that reads past its row at 32753 (ctx - D + 1
    for ctx 32768, D 16: docs/semantics.md#first-failing-length), labelled safe, is caught by its run at the cap; and a safe
    V0 row (0.6.2 truncates) labelled as failing at 8186 is not hit by its walk."""
    from workbench.atlas.rows import case_backend_rows, confirm_by_run, confirm_by_walk

    fa3 = _setting(atlas, "sglang-fa3-page-table", "target-verify", "QwQ-32B", "ngram-16", 32768, 1).copy()
    fa3["status"] = "safe"
    run = confirm_by_run(fa3)
    assert (run["run_outcome"], run["run_confirmed"]) == ("silent-overread", False)
    assert run["run_committed_len"] == 32768 - 16 + 1
    rows = case_backend_rows()
    fixed = rows[(rows.backend == "vllm-v0-graph-block-tables") & (rows.engine == "vllm==0.6.2")].iloc[0].copy()
    fixed["status"], fixed["first_failing_seq_len"], fixed["outcome"] = "reachable", 8186, "shape-error"
    walked = confirm_by_walk(fixed)
    assert (walked["run_outcome"], walked["run_confirmed"]) == ("ok", False)


def test_the_pooled_buffers_fail_per_batch_and_their_runs_hit_where_the_rows_say() -> None:
    """The flat kv_indices rows (tests/test_pooled_kv_indices.py has their arithmetic): 0.5.10's
    FlashInfer draft buffer without the topk factor fails at 32768 / 4 - 5 + 1 = 8188 for QwQ-32B
    with EAGLE (5, 4, 8) and a full bucket of 32, unchecked (an overwrite); 0.5.14 on asserts at
    32768 - 5 + 1 = 32764; Triton never checks; AITER's verify gained D of slack in 0.5.14."""
    frame = run_atlas(["sglang==0.5.10", "sglang==0.5.23"])
    summary = confirm_by_runs(summarize(frame)).set_index(["backend", "engine", "mode"])
    old = summary.loc[("sglang-flashinfer-kv-indices", "sglang==0.5.10", "draft-decode")]
    assert (old.first_failing_seq_len, old.batch, old.outcome, old.status) == (8188, 32, "silent-overwrite", "reachable")
    assert (old.preset, old.recipe, old.pool_tokens) == ("QwQ-32B", "eagle-5-4-8", 32 * 8188)
    new = summary.loc[("sglang-flashinfer-kv-indices", "sglang==0.5.23", "draft-decode")]
    assert (new.first_failing_seq_len, new.outcome) == (32764, "host-assert")
    assert new.error.startswith("AssertionError: EAGLE draft kv_indices row (size max_bs * topk * max_context_len): "
                                f"used {32 * 4 * (32764 + 5)} > capacity {32 * 4 * 32768}")
    eager = summary.loc[("sglang-triton-kv-indices", "sglang==0.5.23", "draft-decode-eager")]
    assert (eager.batch, eager.outcome, eager.status) == (1, "silent-overwrite", "reachable")  # one request suffices
    aiter = summary.loc[("sglang-aiter-kv-indices", "sglang==0.5.10", "target-verify")]
    assert aiter.first_failing_seq_len == aiter.context_len - aiter.draft_tokens + 1 and aiter.status == "reachable"
    pooled = summary[(summary.buffer_unit == "entries") & (summary.status != "refused")]
    assert pooled.boundary_confirmed.dropna().astype(bool).all() and pooled.run_confirmed.astype(bool).all()
    assert set(pooled[pooled.status == "reachable"].run_committed_len) <= set(pooled.first_failing_seq_len)
    # FlashInfer MLA's verify is modelled from 0.5.18 (its copy before that is inside flashinfer, not
    # read): its 0.5.10 cell says so rather than "no such graph"
    heat = atlas_figure(summary.reset_index()).data[0]
    row = list(heat.y).index("sglang-flashinfer-mla-kv-indices<br>sglang 0.5.10")
    assert heat.text[row][list(heat.x).index("target-verify")] == "not modelled"
    assert heat.text[row][list(heat.x).index("decode")] == "no such graph"


def test_a_pooled_row_that_contradicts_its_batch_is_not_confirmed() -> None:
    """The walk can fail: a reachable row labelled one token later is hit one token early, and a
    row labelled safe meets its failure on the way to the cap."""
    from workbench.atlas.pooled import confirm_by_batch_walk

    summary = summarize(run_atlas(["sglang==0.5.23"]))
    row = summary[(summary.backend == "sglang-triton-kv-indices") & (summary["mode"] == "draft-decode-eager")].iloc[0]
    assert confirm_by_batch_walk(row)["run_confirmed"]
    late = row.copy()
    late["first_failing_seq_len"] = row.first_failing_seq_len + 1
    assert confirm_by_batch_walk(late)["run_confirmed"] is False
    safe = row.copy()
    safe["status"] = "safe"
    walked = confirm_by_batch_walk(safe)
    assert (walked["run_outcome"], walked["run_confirmed"]) == ("silent-overwrite", False)
