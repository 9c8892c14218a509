"""SGLang's TRT-LLM MLA backend (and CuteDSL, its subclass): ``decode_cuda_graph_kv_indices``.

``init_cuda_graph_state`` (``trtllm_mla_backend.py:477-490``) makes it ``(max_bs, P)`` int32,
filled with -1, where ``P = _calc_padded_blocks(ctx)`` (336-357): ``cdiv(ctx, ps)`` pages rounded
up to a multiple of ``lcm(128 // ps, 4096 // ps)`` (TRT-LLM's block-count constraint and the
FlashMLA builder's pages per program). Replay (``_apply_cuda_graph_metadata``, 600-665) sets
``seq_lens_k = s + D`` in a verify (``s`` otherwise) and runs ``create_flashmla_kv_indices_triton``
over ``cdiv(P, 4096 // ps)`` programs: since ``P`` is a multiple of ``4096 // ps``, the grid ends
exactly at the row's end, so a row's stores never pass it, and a step that needs more pages than
``P`` leaves the attention kernel reading ``seq_lens_k`` tokens through a shorter row: a silent
over-read (the generic closed form: first failing ``s = P * ps - delta + 1``).

Worked example: ps 64, ctx 8192: cdiv(8192, 64) = 128 pages, lcm(2, 64) = 64, P = 128; a verify
with D 4 at s = 8189 reads 8193 tokens: over-read. ctx 8000: 125 pages round up to P = 128
(8192 tokens), so a verify near the cap fits: the padding is the slack, by accident.

Modes: decode, target verify, draft extend (``delta = 0``: its ``seq_lens`` hold the window).
The engine's ``128 // ps`` is 0 for ``ps > 128`` (``lcm(0, n) = 0``, and ``blocks % 0`` raises),
and the kernel's ``tl.arange`` needs a power of two: page sizes are powers of two up to 128.

Checked against: the padding rule computed independently in ``tests/test_sglang_page_builders.py``
(``math.lcm`` as the engine), the kernel restated there in plain Python, and the engine's Triton
kernel itself under the interpreter by ``workbench conformance`` (row
``kv_indices.create_flashmla_kv_indices_triton[trtllm-mla]``) where triton is cached.
"""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np
import torch

from workbench.backends.base import IntArray, Seed, SizingRule, cdiv_grid
from workbench.backends.page_writes import (
    GRID_OPTIONS,
    KERNEL_BLOCK_TOKENS,
    PER_REQUEST,
    LivePageBackend,
    PagedTable,
    grid_pages,
)
from workbench.model.cases import TableCase
from workbench.model.geometry import Mode, ServingGeometry, cdiv

# Module constants, read at call time (a test scales both down to scan every length of a padded row).
TRTLLM_BLOCK_CONSTRAINT = 128  # trtllm_mla_backend.py:99: block counts a multiple of 128 // ps
BUILDER_BLOCK_TOKENS = KERNEL_BLOCK_TOKENS  # tokens per program of create_flashmla_kv_indices_triton
NO_PAGE = -1  # the buffer's fill (torch.full(..., -1))


def padded_blocks(tokens: int, page_size: int) -> int:
    """``cdiv(tokens, ps)`` rounded up to a multiple of ``lcm(128 // ps, 4096 // ps)``.

    Worked example: ps 32, 8000 tokens: 250 pages, lcm(4, 128) = 128, padded to 256.
    """
    multiple = math.lcm(TRTLLM_BLOCK_CONSTRAINT // page_size, BUILDER_BLOCK_TOKENS // page_size)
    return cdiv(cdiv(tokens, page_size), multiple) * multiple


def _padded_grid(tokens: IntArray, ps: IntArray) -> IntArray:
    multiple = np.lcm(np.maximum(TRTLLM_BLOCK_CONSTRAINT // ps, 1), np.maximum(BUILDER_BLOCK_TOKENS // ps, 1))
    return cdiv_grid(cdiv_grid(tokens, ps), multiple) * multiple


RULES = {
    "context": SizingRule(
        "context", lambda g: padded_blocks(g.context_len, g.page_size), lambda x: _padded_grid(x.ctx, x.ps),
        change="TRT-LLM MLA's _calc_padded_blocks(max_context_len) in 0.5.23 (trtllm_mla_backend.py:485)",
        quirk="blind to the draft tokens; only the padding to lcm(128/ps, 4096/ps) pages leaves slack"),
    "req-to-token": SizingRule(
        "req-to-token", lambda g: padded_blocks(g.request_table_width, g.page_size),
        lambda x: _padded_grid(x.w, x.ps),
        change="a proposed fix (not in any release): the same padding applied to req_to_token.shape[1]",
        quirk="every page of req_to_token fits: no committed length the table holds can overflow it"),
}

_CASE = {"component": "sglang-trtllm-mla-page-table", "context_len": 8192, "page_size": 64, "draft_tokens": 4,
         "spec_steps": 3, "spec_topk": 1, "seq_lens": [8189], "mode": "target-verify", "max_bs": 2}

TRTLLM_MLA_SEED = Seed(
    name="trtllm-mla-page-table",
    story="TRT-LLM MLA with EAGLE (3, 1, 4), ctx 8192, ps 64: P = 128 pages, a verify at ctx - 3 reads past it",
    before={**_CASE, "rule": "context"},
    after={**_CASE, "rule": "req-to-token"},
    expected_error="silent over-read: request 0 reads 8193 tokens but its decode_cuda_graph_kv_indices row covers 8192",
)


class TrtllmMlaPageTableBackend(LivePageBackend):
    name = "sglang-trtllm-mla-page-table"
    engine = "sglang"
    device_family = "cuda"
    buffer_name = "decode_cuda_graph_kv_indices"
    launch_names = ("trtllm_mla",)  # --attention-backend trtllm_mla (Blackwell only: the engine refuses it elsewhere)
    unit = "pages"
    short = "trtmla"
    # 0.5.23 runs trtllm_mla at 32 or 64 and moves any other to 64
    # (srt/arg_groups/overrides.py:1155-1163, _mla_backend_page_constraints)
    page_sizes = (32, 64)
    pad_seq_len = 1
    rules = RULES
    modes = (Mode.DECODE, Mode.TARGET_VERIFY, Mode.DRAFT_EXTEND)
    case_fields = frozenset({"grid"})
    case_options = MappingProxyType({"grid": GRID_OPTIONS})
    on_overflow = "silent-overread: the width is a multiple of the builder's pages per program, so stores stop at it"
    seeds = (TRTLLM_MLA_SEED,)

    def case_problem(self, case: TableCase) -> str | None:
        ps = case.geometry.page_size
        if ps & (ps - 1) or ps > TRTLLM_BLOCK_CONSTRAINT:
            return (f"page_size: {ps} is not a power of two up to {TRTLLM_BLOCK_CONSTRAINT} "
                    f"(the padding rule needs {TRTLLM_BLOCK_CONSTRAINT} // ps > 0)")
        return None

    def allocate(self, geometry: ServingGeometry, width: int, *, rows: int, case: TableCase,
                 device: torch.device | str) -> PagedTable:
        return PagedTable.of_width(width, geometry.page_size, rows=rows, device=device, fill=NO_PAGE)

    def write_limit(self, case: TableCase, width: int) -> int | None:
        if self.option(case, "grid") == PER_REQUEST:  # to 0.5.12.post1: every live page is stored
            return None
        # == width under either rule: P is padded to a multiple of the builder's pages per program
        return grid_pages(width, case.geometry.page_size, BUILDER_BLOCK_TOKENS)


BACKEND = TrtllmMlaPageTableBackend()
