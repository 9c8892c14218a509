"""SGLang's page tables filled by Triton builders: XPU, TRT-LLM MHA, FlashMLA, TRT-LLM MLA (issue 13).

Expected values come from reading the engine (0.5.23; each backend module names its lines) and
are restated below in plain Python: each kernel program by program, over its launch grid, with
its store mask, writing into the flat storage of the table as pointer arithmetic does. Widths are
recomputed from the engine's formulas (``math.lcm`` for TRT-LLM MLA). Boundaries are compared
with a scan that executes every committed length.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest
from reference import ceil_div, request_table_width

from workbench.analysis.boundary import find_boundary, predict_boundaries, probe_step, search_bound
from workbench.analysis.cases import CaseError, parse_case
from workbench.analysis.probe import probe, probe_table
from workbench.analysis.sweep import SweepGrid, run_sweep
from workbench.backends import backend_of
from workbench.backends.page_writes import PagedTable
from workbench.model.cases import TableCase
from workbench.model.geometry import Mode, ServingGeometry
from workbench.model.request_table import RequestTable
from workbench.present.words import COLOURS

XPU, TRT_MHA, FLASHMLA, TRT_MLA, AITER = (
    "sglang-xpu-page-table", "sglang-trtllm-mha-page-table", "sglang-flashmla-page-table",
    "sglang-trtllm-mla-page-table", "sglang-aiter-page-table")
BLOCK_TOKENS = 4096  # _MHA_KV_INDEX_BLOCK_TOKENS and _FLASHMLA_CREATE_KV_BLOCK_SIZE in the kernels


# ---- the engine's formulas and kernels, restated ----------------------------------------------


def width_pages(component: str, rule: str, ctx: int, ps: int, w: int, mla_constants: tuple[int, int] = (128, 4096)
                ) -> int:
    tokens = ctx if rule == "context" else w
    if component == FLASHMLA:
        return (ctx + 64) // 64 if rule == "context" else ceil_div(w, 64)
    if component == TRT_MLA:  # _calc_padded_blocks: TRTLLM_BLOCK_CONSTRAINT, then the builder's tokens per program
        constraint, block_tokens = mla_constants
        blocks = ceil_div(tokens, ps)
        lcm = math.lcm(constraint // ps, block_tokens // ps)
        return blocks if blocks % lcm == 0 else ceil_div(blocks, lcm) * lcm
    return ceil_div(tokens, ps)


def builder_stores(kind: str, width: int, ps: int, lengths: list[int], block_tokens: int = BLOCK_TOKENS
                   ) -> list[tuple[int, int, int]]:
    """(request, flat offset, logical page) of every store, program by program over the kernel's grid.

    kind: "fused" (normal_decode_set_metadata with XPU's max_seq_pages = cdiv(max(L), ps)),
    "graph" (update_trtllm_mha_graph_metadata, max_seq_pages = width), "blocks" (the
    TRT-LLM MHA page-table builder and create_flashmla_kv_indices_triton: programs of
    4096 // ps pages over cdiv(width, 4096 // ps) programs, masked by the request's pages only).
    """
    stores: list[tuple[int, int, int]] = []
    for pid, length in enumerate(lengths):
        pages = ceil_div(length, ps)
        if kind == "fused":
            max_seq_pages = ceil_div(max(lengths), ps)
            block_cols = 128
            for pid_c in range(ceil_div(max_seq_pages, block_cols)):  # store mask: col < min(pages, max_seq_pages)
                cols = range(pid_c * block_cols, min((pid_c + 1) * block_cols, pages, max_seq_pages))
                stores.extend((pid, pid * width + col, col) for col in cols)
        elif kind == "graph":
            stores.extend((pid, pid * width + col, col) for col in range(min(pages, width)))
        elif kind == "scatter":  # scatter_req_to_token_to_page_table_kernel, BLOCK_SIZE 1024 pages
            for block_id in range(ceil_div(max(width, 1), 1024)):
                if block_id * 1024 >= pages:
                    continue  # the program returns early
                kept = range(block_id * 1024, min((block_id + 1) * 1024, pages))  # mask: offsets < num_blocks
                stores.extend((pid, pid * width + page, page) for page in kept)
        else:
            per_program = block_tokens // ps
            for blk in range(ceil_div(width, per_program)):
                if blk >= ceil_div(length, block_tokens):
                    continue  # the program returns early
                kept = range(blk * per_program, min((blk + 1) * per_program, pages))  # store mask: page < pages
                stores.extend((pid, pid * width + page, page) for page in kept)
    return stores


def kind_of(component: str, path: str) -> str:
    if component == XPU:
        return "fused"
    if component == AITER:
        return "scatter"
    if component == TRT_MHA and path == "graph":
        return "graph"
    return "blocks"


def lookahead(mode: str, d: int, step_id: int) -> int:
    return {"target-verify": d, "draft-decode": step_id + 1}.get(mode, 0)


# ---- replay contents ---------------------------------------------------------------------------


@pytest.mark.parametrize(("component", "path", "ps", "width"), [
    (XPU, "graph", 16, 4), (TRT_MHA, "graph", 16, 4), (TRT_MHA, "eager", 16, 4), (FLASHMLA, "graph", 64, 3),
    (TRT_MLA, "graph", 64, 64), (TRT_MHA, "eager", 1024, 4), (TRT_MHA, "eager", 1024, 3), (AITER, "graph", 16, 4),
    (AITER, "graph", 1, 1024),
])
def test_replay_stores_what_the_kernel_stores(component: str, path: str, ps: int, width: int) -> None:
    """The CPU run of docs/engine-facts.md#sglang-page-builders-on-a-cpu (ps 16, 4 pages, a verify
    reading 66 tokens), and the grid's edge cases."""
    lengths = [width * ps + 2, ps + 1, 1]  # the first needs one page more than the row holds
    rows = len(lengths)
    table = RequestTable.with_requests([min(n, (width + 1) * ps) for n in lengths], (width + 1) * ps, ps,
                                       "cpu").req_to_token
    buffers = PagedTable.of_width(width, ps, rows=rows)
    buffers.page_table.fill_(-7)  # what an earlier replay left
    backend = backend_of(component)
    case = TableCase(component=component, geometry=ServingGeometry(context_len=width * ps, page_size=ps),
                     rule="context", mode=Mode.DECODE, options=(("path", path),) if component == TRT_MHA else ())
    overwrite = backend.replay(buffers, table, [1, 2, 3], lengths, case, num_slots=0)
    expected = [-7] * (rows * width)
    for request, offset, page in builder_stores(kind_of(component, path), width, ps, lengths):
        if offset < rows * width:  # rows are written in batch order: a next row's own stores land after a spill
            expected[offset] = int(table[request + 1, page * ps]) // ps
    assert buffers.page_table.flatten().tolist() == expected
    spilled = len(builder_stores(kind_of(component, path), width, ps, lengths[:1])) - width
    if spilled > 0:
        assert overwrite is not None and (overwrite.writer, overwrite.row, overwrite.entries) == (0, 1, spilled)
    else:
        assert overwrite is None
    assert buffers.cache_seqlens.tolist() == lengths


def test_the_last_row_writes_past_the_buffer_and_the_message_says_so() -> None:
    result = probe(parse_case({"component": XPU, "rule": "context", "context_len": 64, "page_size": 16,
                               "draft_tokens": 4, "seq_lens": [20, 62], "mode": "target-verify"}))
    assert result.outcome.value == "silent-overwrite"
    assert result.error == "silent overwrite: request 1 wrote 1 entries past its page_table row and past the end of the buffer"
    into_padded = probe(parse_case({"component": XPU, "rule": "context", "context_len": 64, "page_size": 16,
                                    "draft_tokens": 4, "seq_lens": [62, 20], "mode": "target-verify", "max_bs": 4}))
    assert into_padded.error == "silent overwrite: request 0 wrote 1 entries past its page_table row into row 1"


# ---- widths ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ps", "ctx", "pages"), [(64, 8192, 128), (64, 8000, 128), (32, 8000, 256), (16, 100, 256),
                                                  (128, 8192, 64), (1, 5000, 8192)])
def test_trtllm_mla_pads_the_width_to_the_lcm(ps: int, ctx: int, pages: int) -> None:
    # by hand: ps 64 -> lcm(2, 64) = 64 pages; ps 32 -> lcm(4, 128) = 128; ps 16 -> 256; ps 128 -> 32; ps 1 -> 4096
    g = ServingGeometry(context_len=ctx, page_size=ps)
    assert backend_of(TRT_MLA).width(g, "context") == pages


def test_flashmla_has_one_page_of_slack_and_needs_page_size_64() -> None:
    g = ServingGeometry(context_len=8192, page_size=64)
    assert backend_of(FLASHMLA).width(g, "context") == 129
    assert backend_of(FLASHMLA).width(g.replace(context_len=8191), "context") == 128
    bad = probe(parse_case({"component": FLASHMLA, "rule": "context", "context_len": 64, "page_size": 32,
                            "seq_lens": [10], "mode": "decode"}))
    assert (bad.outcome.value, bad.error) == ("invalid", "page_size: 32 is not 64 (FlashMLA's page size is a constant)")


# ---- closed form against an executed scan ------------------------------------------------------


def _small_cases(component: str, count: int, seed: int) -> list[TableCase]:
    """Small configurations: few committed lengths each, so every one of them is executed."""
    rng = random.Random(seed)
    backend = backend_of(component)
    cases: list[TableCase] = []
    while len(cases) < count:
        d = rng.choice((0, 1, 2, 4, 6))
        topk = rng.choice((1, 2))
        if component == FLASHMLA:
            ps, ctx, topk = 64, rng.randint(2, 60), 1
        elif component == TRT_MLA:  # with the scaled constants of the scan: rows of 64 tokens
            ps, topk = rng.choice((1, 2, 4, 8, 16, 32)), 1
            ctx = 64 - rng.randint(0, 12) if rng.random() < 0.5 else rng.randint(2, 50)
        else:
            ps, ctx = rng.choice((1, 2, 4, 8, 16)), rng.randint(2, 48)
        if component == AITER:
            topk = 1
        g = ServingGeometry(context_len=ctx, page_size=ps, draft_tokens=d, spec_steps=rng.randint(1, 3),
                            spec_topk=topk, draft_has_kv=rng.random() < 0.7,
                            width_gen=rng.choice(("g1", "g2", "g3")), max_bs=rng.choice((1, 2)))
        modes = [m for m in backend.modes if d or m is Mode.DECODE]
        if not modes:  # AITER has a verify graph only: it needs draft tokens
            continue
        mode = rng.choice(modes)
        step_id = rng.randrange(g.spec_steps) if mode is Mode.DRAFT_DECODE else 0
        path = rng.choice(("graph", "eager", "ragged-verify")) if component == TRT_MHA else None
        if path == "ragged-verify" and mode is not Mode.TARGET_VERIFY:
            path = "eager"
        cases.append(TableCase(component=component, geometry=g, rule=rng.choice(("context", "req-to-token")),
                               mode=mode, step_id=step_id, options=(("path", path),) if path else ()))
    return cases


SCALED_MLA = (32, 64)  # TRT-LLM MLA's 128 and 4096 scaled down, so a padded row is 64 tokens, not 4096


@pytest.mark.parametrize(("component", "seed"), [(XPU, 21), (TRT_MHA, 22), (FLASHMLA, 23), (TRT_MLA, 24), (AITER, 25)])
def test_closed_form_equals_an_executed_scan_of_every_committed_length(
    component: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if component == TRT_MLA:
        # Real rows are a multiple of 4096 tokens: scanning one takes 4096 probes. The rule and the
        # builder read the constants at call time, so the scan runs them scaled down, and the
        # reference below computes with the same scaled constants (the real ones: the next test).
        from workbench.backends.sglang import trtllm_mla_page_table as mla

        monkeypatch.setattr(mla, "TRTLLM_BLOCK_CONSTRAINT", SCALED_MLA[0])
        monkeypatch.setattr(mla, "BUILDER_BLOCK_TOKENS", SCALED_MLA[1])
    constants = SCALED_MLA if component == TRT_MLA else (128, BLOCK_TOKENS)
    cases = _small_cases(component, 500, seed)
    predicted = predict_boundaries(cases)
    kinds: dict[str, int] = {}
    for case, first in zip(cases, predicted):
        g = case.geometry
        path = case.option("path", "graph")
        w = request_table_width(g.context_len, g.page_size, g.draft_tokens, g.spec_steps, g.spec_topk,
                                g.draft_has_kv, g.width_gen)
        width = width_pages(component, case.rule, g.context_len, g.page_size, w, constants)
        look = lookahead(case.mode.value, g.draft_tokens, case.step_id)
        scanned = None
        for s in range(1, search_bound(case) + 1):
            outcome = probe_step(case, s).outcome.value
            stored = len(builder_stores(kind_of(component, path), width, g.page_size, [s + look], constants[1]))
            expected = ("silent-overwrite" if stored > width else
                        "silent-overread" if s + look > width * g.page_size else "ok")
            assert outcome == expected, (case, s)
            if scanned is None and outcome != "ok":
                scanned = s
        assert first == scanned, case
        kind = "none" if scanned is None else probe_step(case, scanned).outcome.value
        kinds[kind] = kinds.get(kind, 0) + 1
    assert kinds.get("none", 0) > 50 and sum(v for k, v in kinds.items() if k != "none") > 50, kinds
    # FlashMLA over-reads only where (ctx + 64) // 64 is a multiple of 64 pages (ctx >= 4032): its seed
    expected_kinds = {XPU: {"silent-overwrite"}, FLASHMLA: {"silent-overwrite"}, TRT_MLA: {"silent-overread"},
                      AITER: {"silent-overwrite"}}.get(
        component, {"silent-overwrite", "silent-overread"})
    assert set(kinds) - {"none"} == expected_kinds, kinds


@pytest.mark.parametrize(("ctx", "ps", "d", "gen"), [(4090, 64, 4, "g1"), (4094, 32, 2, "g1"), (8180, 128, 6, "g3")])
def test_trtllm_mla_real_constants_scan(ctx: int, ps: int, d: int, gen: str) -> None:
    """With the engine's own constants, on rows near a multiple of 4096 tokens: every length executed."""
    case = TableCase(component=TRT_MLA, geometry=ServingGeometry(context_len=ctx, page_size=ps, draft_tokens=d,
                                                                 spec_steps=d, width_gen=gen),
                     rule="context", mode=Mode.TARGET_VERIFY)
    capacity = width_pages(TRT_MLA, "context", ctx, ps, 0) * ps
    assert capacity % 4096 == 0
    scanned = next((s for s in range(1, search_bound(case) + 1) if probe_step(case, s).outcome.failed), None)
    expected = capacity - d + 1 if capacity - d + 1 <= search_bound(case) else None
    assert scanned == expected == predict_boundaries([case])[0]
    if scanned is not None:
        assert probe_step(case, scanned).outcome.value == "silent-overread"


# ---- seeds, paths, searches --------------------------------------------------------------------


@pytest.mark.parametrize("component", [XPU, TRT_MHA, FLASHMLA, TRT_MLA, AITER])
def test_seed_cases_fail_before_and_pass_after(component: str) -> None:
    backend = backend_of(component)
    assert backend.seeds
    for seed in backend.seeds:
        assert probe(parse_case(seed.before)).error == seed.expected_error
        assert probe(parse_case(seed.after)).outcome.value == "ok"


def test_trtllm_mha_path_field_is_the_backends_and_checked() -> None:
    base = {"component": TRT_MHA, "rule": "context", "context_len": 64, "page_size": 16, "draft_tokens": 4,
            "seq_lens": [62], "mode": "target-verify"}
    assert probe(parse_case(base)).outcome.value == "silent-overread"
    assert probe(parse_case({**base, "path": "eager"})).outcome.value == "silent-overwrite"
    assert probe(parse_case({**base, "path": "ragged-verify"})).outcome.value == "silent-overwrite"
    with pytest.raises(CaseError, match=r"path: 'fast' is not one of graph, eager, ragged-verify"):
        parse_case({**base, "path": "fast"})
    with pytest.raises(CaseError, match=r"path: applies to sglang-trtllm-mha-page-table only"):
        parse_case({**base, "component": XPU, "path": "eager"})
    ragged_decode = probe(parse_case({**base, "mode": "decode", "path": "ragged-verify"}))
    assert ragged_decode.error == "path: ragged-verify is a target-verify path (mode is decode)"


def test_bisection_and_command_line_agree_with_the_closed_form() -> None:
    data = {"component": XPU, "rule": "context", "context_len": 8192, "page_size": 64, "draft_tokens": 16,
            "spec_topk": 10, "draft_has_kv": False, "mode": "target-verify"}
    case = parse_case(data, need_seq_lens=False)
    assert isinstance(case, TableCase)
    found = find_boundary(case)
    assert (found.first_failing_seq_len, found.confirmed) == (8192 - 16 + 1, True)
    assert found.failing is not None and found.failing.outcome.value == "silent-overwrite"
    out = subprocess.run([sys.executable, "-m", "workbench", "boundary", "--cases", "-"], input=json.dumps(data) + "\n",
                         capture_output=True, text=True, check=True).stdout
    record = json.loads(out)
    assert (record["first_failing_seq_len"], record["outcome"]) == (8177, "silent-overwrite")


def test_sweeps_take_the_new_backends_and_count_overwrites_as_failures() -> None:
    grid = SweepGrid(components=(XPU, TRT_MHA, FLASHMLA, TRT_MLA), context_lens=(4000, 8192), page_sizes=(64,),
                     draft_tokens=(0, 4))
    frame = run_sweep(grid, cache_dir=None, progress=False)
    assert set(frame.component) >= {XPU, TRT_MHA, FLASHMLA, TRT_MLA} and frame.confirmed.all()
    xpu = frame[(frame.component == XPU) & (frame["mode"] == "target-verify") & (frame.rule == "context")]
    # B * ps - D + 1 with B = cdiv(ctx, 64): 8192 - 3; at ctx 4000, B * ps = 4032 is past every read (W = 4008)
    assert xpu[xpu.context_len == 8192].first_failing_seq_len.tolist() == [8189]
    assert xpu[xpu.context_len == 4000].first_failing_seq_len.isna().all()
    assert frame[frame.rule == "req-to-token"].first_failing_seq_len.isna().all()


def test_the_kernel_like_read_runs_over_the_padded_row() -> None:
    case = parse_case({"component": TRT_MHA, "rule": "context", "context_len": 64, "page_size": 16, "draft_tokens": 4,
                       "seq_lens": [62], "mode": "target-verify", "max_bs": 3})
    assert isinstance(case, TableCase)
    assert probe_table(case, kernel_read=True).outcome.value == "silent-overread"
    assert probe_table(case, kernel_read=False).outcome.value == "silent-overread"


def test_a_request_trace_marks_the_overwrites_as_failing_steps_in_their_words_colour() -> None:
    from workbench.analysis.sweep import request_trace
    from workbench.present.plots import request_trace_plot

    case = parse_case({"component": XPU, "rule": "context", "context_len": 256, "page_size": 16, "draft_tokens": 4,
                       "mode": "target-verify"}, need_seq_lens=False)
    assert isinstance(case, TableCase)
    frame = request_trace(case, steps=12)
    failing = frame[frame.outcome != "ok"]
    assert set(failing.outcome) == {"silent-overwrite"} and (failing.seq_len >= 256 - 4 + 1).all()
    markers = [t for t in request_trace_plot(frame).data if t.name == "step fails silently: silent-overwrite"]
    assert len(markers) == 1 and markers[0].marker.color == COLOURS["fails silently"]  # the word's colour, as everywhere


@pytest.mark.parametrize("component", [XPU, TRT_MHA, FLASHMLA, TRT_MLA, AITER])
def test_the_engine_version_names_the_release_rule(component: str) -> None:
    case = parse_case({"component": component, "engine": "sglang==0.5.23", "context_len": 8192, "page_size": 64,
                       "draft_tokens": 4, "seq_lens": [100], "mode": "target-verify"})
    assert isinstance(case, TableCase)
    assert (case.rule, case.geometry.width_gen) == ("context", "g3")  # every release sizes by ctx; W is G3
