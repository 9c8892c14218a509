"""SGLang's FlashAttention (FA3) backend: the graph-captured ``page_table``.

``init_cuda_graph_state`` makes ``page_table`` ``(max_bs, cdiv(ctx, ps))`` int32 for decode, draft
decode (topk 1), target verify and draft extend, blind to the draft tokens. Replay does not copy
with ``copy_``: a fused Triton kernel (``normal_decode_set_metadata``) writes, per row, the live
pages ``min(cdiv(s + delta, ps), max_num_pages)`` and sets ``cache_seqlens = s + delta``, where
``delta`` is D in a verify and ``step_id + 1`` in a draft step. The writes stop at the width; the
attention kernel's bound does not. A step that needs more pages than the row holds therefore
raises nothing: the attention kernel reads ``cache_seqlens`` tokens through a row that covers
fewer, a silent over-read.

Worked example: ctx 8192, ps 1 (FA3's default), EAGLE (3, 1, 4): B = 8192 tokens. A verify at the
scheduler's cap s = 8191 sets cache_seqlens = 8195 and reads 3 positions past the row.

Engine (0.5.23): ``srt/layers/attention/flashattention_backend.py`` 196 (``max_num_pages``),
2432-2447 (the buffer), 2953-2980 and 3010-3195 (replay); the kernel in
``kernels/ops/attention/metadata.py`` 195-275 (``_fused_decode_metadata_kernel``), which asserts a
power-of-two page size (536).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from workbench.backends.base import Buffers, Grid, IntArray, Seed, SizingRule, TableBackend, cdiv_grid
from workbench.model.cases import TableCase
from workbench.model.geometry import Mode, ServingGeometry, cdiv


def fa3_context(g: ServingGeometry) -> int:
    """The engine's width in every release: ``cdiv(ctx, ps)`` pages, blind to the draft tokens."""
    return cdiv(g.context_len, g.page_size)


def fa3_req_to_token(g: ServingGeometry) -> int:
    """Proposed, in no release: ``cdiv(W, ps)`` pages, as DeepSeek-V4 sizes by ``req_to_token.shape[1]``."""
    return cdiv(g.request_table_width, g.page_size)


RULES = {
    "context": SizingRule(
        "context", fa3_context, lambda x: cdiv_grid(x.ctx, x.ps),
        change="FA3's page_table since the backend's first release (unchanged in 0.5.23)",
        quirk="blind to the draft tokens a verify or a draft step reads past the context"),
    "req-to-token": SizingRule(
        "req-to-token", fa3_req_to_token, lambda x: cdiv_grid(x.w, x.ps),
        change="a proposed fix (not in any release), as the DeepSeek-V4 backend sizes its table",
        quirk="every page of req_to_token fits: no committed length the table holds can overflow it"),
}


@dataclass
class Fa3PageTable:
    """The static buffers one captured FA3 graph reads."""

    page_table: torch.Tensor  # (rows, B) int32, B in pages
    cache_seqlens: torch.Tensor  # (rows,) int32: the attention kernel's per-row bound, in tokens
    page_size: int

    @classmethod
    def of_width(cls, width: int, page_size: int, *, rows: int, device: torch.device | str = "cpu") -> Fa3PageTable:
        return cls(torch.zeros((rows, width), dtype=torch.int32, device=device),
                   torch.zeros(rows, dtype=torch.int32, device=device), page_size)

    @property
    def read_table(self) -> torch.Tensor:
        return self.page_table

    @property
    def entry_tokens(self) -> int:
        return self.page_size

    def replay(self, req_to_token: torch.Tensor, rows: Sequence[int], seq_lens: Sequence[int], delta: int) -> None:
        """Write each row's live pages as the fused kernel does: at most the width, never past it.

        Worked example: ps 16, B 4 pages, s 62, delta 4 (a verify with D 4): cache_seqlens 66 needs
        cdiv(66, 16) = 5 pages; the kernel writes min(5, 4) = 4 and stops at the row's end.
        """
        bs = len(rows)
        ps, width = self.page_size, self.page_table.shape[1]
        lengths = torch.as_tensor([s + delta for s in seq_lens], dtype=torch.int32, device=self.page_table.device)
        live = torch.clamp((lengths + ps - 1) // ps, max=width)  # (bs,) pages written per row
        top = int(live.max())
        index = torch.as_tensor(list(rows), dtype=torch.int64, device=req_to_token.device)
        src = req_to_token[:, 0 : top * ps : ps].index_select(0, index)  # (bs, top) first slot of each page
        if ps > 1:
            src = src // ps
        written = torch.arange(top, device=src.device)[None, :] < live[:, None]  # (bs, top) bool
        dst = self.page_table[:bs, :top]
        dst.copy_(torch.where(written, src, dst))  # columns past a row's live pages are left alone
        self.cache_seqlens[:bs] = lengths


FA3_SEED = Seed(
    name="fa3-page-table",
    story="FA3 with EAGLE (3, 1, 4), ctx 8192, ps 1: a verify at the scheduler's cap reads past page_table",
    before={
        "component": "sglang-fa3-page-table", "rule": "context", "context_len": 8192, "page_size": 1,
        "draft_tokens": 4, "spec_steps": 3, "spec_topk": 1, "seq_lens": [8191], "mode": "target-verify",
    },
    after={
        "component": "sglang-fa3-page-table", "rule": "req-to-token", "context_len": 8192, "page_size": 1,
        "draft_tokens": 4, "spec_steps": 3, "spec_topk": 1, "seq_lens": [8191], "mode": "target-verify",
    },
    expected_error="silent over-read: request 0 reads 8195 tokens but its page_table row covers 8192",
)


class Fa3PageTableBackend(TableBackend):
    name = "sglang-fa3-page-table"
    engine = "sglang"
    device_family = "cuda"
    launch_names = ("fa3",)
    buffer_name = "page_table"
    unit = "pages"
    page_sizes = (1, 64)  # FA3 runs at the engine default 1, or a --page-size such as 64
    short = "fa3"
    pad_seq_len = 1  # the CUDA graph runner's fill value for padded rows
    rules = RULES
    on_overflow = "silent-overread: the kernel's writes stop at the width, the attention kernel reads cache_seqlens"
    seeds = (FA3_SEED,)

    def lookahead(self, geometry: ServingGeometry, mode: Mode, step_id: int = 0) -> int:
        """With topk above 1 a verify and a draft step read the prefix through ``page_table`` and the
        drafts through a separate expand table: no lookahead (``_spec_read_seq_len_delta``,
        flashattention_backend.py:867-888 in 0.5.23)."""
        return 0 if geometry.spec_topk > 1 else super().lookahead(geometry, mode, step_id)

    def lookahead_grid(self, grid: Grid) -> IntArray:
        out: IntArray = np.where(grid.topk > 1, 0, super().lookahead_grid(grid))
        return out

    def case_problem(self, case: TableCase) -> str | None:
        ps = case.geometry.page_size
        if ps & (ps - 1):
            return f"page_size: {ps} is not a power of two (the FA3 page-table kernel asserts one)"
        return None

    def allocate(self, geometry: ServingGeometry, width: int, *, rows: int, case: TableCase,
                 device: torch.device | str) -> Fa3PageTable:
        return Fa3PageTable.of_width(width, geometry.page_size, rows=rows, device=device)

    def replay(self, buffers: Buffers, req_to_token: torch.Tensor, rows: Sequence[int], seq_lens: Sequence[int],
               case: TableCase, *, num_slots: int, query_rows: int | None = None) -> None:  # never writes past a row
        assert isinstance(buffers, Fa3PageTable)
        buffers.replay(req_to_token, rows, seq_lens, self.lookahead(case.geometry, case.mode, case.step_id))


BACKEND = Fa3PageTableBackend()
