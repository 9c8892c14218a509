"""SGLang's AITER backend (ROCm): ``cuda_graph_page_table`` under the unified target verify.

``init_cuda_graph_state`` (``aiter_backend.py:2836-2846``) makes ``cuda_graph_page_table``
``(max_bs, cdiv(ctx, ps))`` int32 when decode reads a 2-D page table (Triton unified attention or
the 5-D KV layout), blind to the draft tokens. With unified verify (non-MLA, topk 1, on by
default: 548-553), the verify graph's replay (3287-3310) fills it with
``_build_verify_unified_metadata`` (1090-1150): ``scatter_req_to_token_to_page_table_kernel``
(``kernels/ops/attention/aiter_unified_page_table.py:49-90``) over a grid of
``cdiv(B, 1024)`` programs of 1024 pages, each row's stores masked by its own
``cdiv(s + D, ps)`` pages only, not by the width. Pages past ``B`` go into the next row (the last
row of the buffer past its end), up to the grid's end: a **silent overwrite**; where ``B`` is a
multiple of 1024 pages the grid ends at the row's end and the step is a silent over-read (the
attention kernel reads ``s + D``). First failing committed length: ``B * ps - D + 1``.

Worked example: ctx 8192, ps 16, EAGLE (3, 1, 4): B = 512 pages, one program of 1024. A verify
at s = 8189 reads 8193 tokens, 513 pages: page 512 is stored at row 1, column 0.

Not modelled here: the flat ``cuda_graph_kv_indices`` (pooled over the batch,
``aiter_kv_indices``); the plain-decode path's ``copy_`` into this table (3035-3057), whose
``cdiv(max(s), ps)`` columns fit while ``s <= ctx - 1`` (no speculation: no reachable failure); the
draft-decode path (``_build_unified_page_table_from_spec``, not traced).

Checked against: the kernel's code, read and restated in plain Python in
``tests/test_sglang_page_builders.py``; the engine's Triton kernel itself under the interpreter
by ``workbench conformance`` (row ``aiter_unified_page_table.scatter_req_to_token_to_page_table_kernel``)
where triton is cached.
"""

from __future__ import annotations

from workbench.backends.base import Seed, SizingRule, cdiv_grid
from workbench.backends.page_writes import LivePageBackend
from workbench.model.cases import TableCase
from workbench.model.geometry import Mode, ServingGeometry, cdiv

SCATTER_BLOCK_PAGES = 1024  # BLOCK_SIZE of _build_verify_unified_metadata: pages per program


def aiter_context(g: ServingGeometry) -> int:
    """The engine's width: ``cdiv(ctx, ps)`` pages, blind to the draft tokens."""
    return cdiv(g.context_len, g.page_size)


def aiter_req_to_token(g: ServingGeometry) -> int:
    """Proposed, in no release: ``cdiv(W, ps)`` pages, as DeepSeek-V4 sizes by ``req_to_token.shape[1]``."""
    return cdiv(g.request_table_width, g.page_size)


RULES = {
    "context": SizingRule(
        "context", aiter_context, lambda x: cdiv_grid(x.ctx, x.ps),
        change="AITER's cuda_graph_page_table in 0.5.23 (aiter_backend.py:2839-2846)",
        quirk="blind to the draft tokens; the verify scatter is bounded by s + D and its grid, not the width"),
    "req-to-token": SizingRule(
        "req-to-token", aiter_req_to_token, lambda x: cdiv_grid(x.w, x.ps),
        change="a proposed fix (not in any release), as the DeepSeek-V4 backend sizes its table",
        quirk="every page of req_to_token fits: no committed length the table holds can overflow it"),
}

_CASE = {"component": "sglang-aiter-page-table", "context_len": 8192, "page_size": 16, "draft_tokens": 4,
         "spec_steps": 3, "spec_topk": 1, "seq_lens": [8189], "mode": "target-verify", "max_bs": 2}

AITER_SEED = Seed(
    name="aiter-page-table",
    story="AITER unified verify, EAGLE (3, 1, 4), ctx 8192, ps 16: a verify 3 tokens from the end writes page 512 into row 1",
    before={**_CASE, "rule": "context"},
    after={**_CASE, "rule": "req-to-token"},
    expected_error="silent overwrite: request 0 wrote 1 entries past its cuda_graph_page_table row into row 1",
)


class AiterPageTableBackend(LivePageBackend):
    name = "sglang-aiter-page-table"
    engine = "sglang"
    device_family = "rocm"
    buffer_name = "cuda_graph_page_table"
    # --attention-backend aiter on a ROCm GPU, on the unified verify only: the engine process reads
    # AiterAttnBackend.__init__'s choice (a sliding-window KV pool or SGLANG_USE_AITER_UNIFIED_ATTN=1,
    # non-MLA, topk 1; engines/sglang/device_paths.py) and names this feature when it is taken
    launch_names = ("aiter-unified-verify",)
    unit = "pages"
    short = "aiter"
    # The engine default 1, or 64 with the vectorized 5-D KV layout on ROCm
    # (srt/arg_groups/overrides.py:1341-1363, _page_size_default)
    page_sizes = (1, 64)
    pad_seq_len = 1
    rules = RULES
    modes = (Mode.TARGET_VERIFY,)
    on_overflow = "silent-overwrite: the verify scatter stores cdiv(s + D, ps) pages per row, up to its grid's end"
    seeds = (AITER_SEED,)

    def case_problem(self, case: TableCase) -> str | None:
        if case.geometry.spec_topk != 1:
            return f"spec_topk: {case.geometry.spec_topk} (AITER's unified verify runs with topk 1 only)"
        return None

    def write_limit(self, case: TableCase, width: int) -> int | None:
        # Worked example: B = 512 -> one program of 1024 pages: up to 512 pages past the row
        return cdiv(width, SCATTER_BLOCK_PAGES) * SCATTER_BLOCK_PAGES


BACKEND = AiterPageTableBackend()
