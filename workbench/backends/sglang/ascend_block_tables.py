"""SGLang's Ascend NPU backend: the graph-mode block tables.

``init_cuda_graph_state`` sizes ``block_tables`` (and, for hybrid sliding-window models,
``block_tables_swa``) once; every replay rebuilds the page ids of the batch from the request table
and ``copy_``s them in. The replay is the same before and after the fix: only the width changed,
so a step that needs more pages than the table has is torch's shape error.

Engine: ``srt/hardware_backend/npu/attention/ascend_backend.py`` (``init_cuda_graph_state``,
``_apply_cuda_graph_metadata``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import torch

from workbench.backends.base import Buffers, Grid, IntArray, Seed, SizingRule, TableBackend, cdiv_grid
from workbench.model.cases import TableCase
from workbench.model.geometry import Mode, ServingGeometry, cdiv

PAD_PAGE = 0  # columns past a request's pages, and padded rows, hold page 0
SEQ_FILL = 0  # the seq_len of a padded graph row on this backend
# What the replay fills in a speculative step (learned per release, ``spec_fill``): the step's reads
# (verify s + D, draft step s + step_id + 1; 0.5.10 on), the verify's only (a draft step fills s:
# 0.5.4.post2 to 0.5.9), or the committed s in every mode (to 0.5.4.post1)
STEP_READS, VERIFY_READS, COMMITTED = "step-reads", "verify-reads", "committed"


# ---- sizing rules (pages) -------------------------------------------------------------------------


def npu_context_floor(g: ServingGeometry) -> int:
    """The earliest Ascend backend (to 0.5.4.post1): ``ctx // ps`` pages, rounded down, so a context
    that is not a multiple of the page size loses its last partial page even without speculation."""
    return g.context_len // g.page_size


def npu_context(g: ServingGeometry) -> int:
    """Before the first seed's fix: ``cdiv(ctx, ps)`` pages, blind to the draft tokens."""
    return cdiv(g.context_len, g.page_size)


def npu_context_plus_draft(g: ServingGeometry) -> int:
    """The first seed's fix: ``(ctx + ps - 1 + D) // ps`` pages (blind to the table's +4 slack)."""
    return (g.context_len + g.page_size - 1 + g.draft_tokens) // g.page_size


def npu_req_to_token(g: ServingGeometry) -> int:
    """The later tightening: at least ``cdiv(W, ps)`` pages, so every request-table page fits."""
    return max(npu_context_plus_draft(g), cdiv(g.request_table_width, g.page_size))


def _context_plus_draft_grid(x: Grid) -> IntArray:
    out: IntArray = (x.ctx + x.ps - 1 + x.d) // x.ps
    return out


RULES = {
    "context-floor": SizingRule(
        "context-floor", npu_context_floor, lambda x: x.ctx // x.ps,
        change="the Ascend backend to 0.5.4.post1 (max_context_len // page_size)",
        quirk="rounds down: a context that is not a page multiple has no row for its last partial page"),
    "context": SizingRule(
        "context", npu_context, lambda x: cdiv_grid(x.ctx, x.ps),
        change="the Ascend backend before the first seed's fix",
        quirk="blind to the draft tokens a verify reads past the context"),
    "context-plus-draft": SizingRule(
        "context-plus-draft", npu_context_plus_draft, _context_plus_draft_grid,
        change="the first seed's fix (in force in sglang 0.5.23)",
        quirk="blind to the request table's +4 slack and the G2/G3 reserve"),
    "req-to-token": SizingRule(
        "req-to-token", npu_req_to_token, lambda x: np.maximum(_context_plus_draft_grid(x), cdiv_grid(x.w, x.ps)),
        change="a later tightening seen in the engine's tests (not in 0.5.23)",
        quirk="every page of req_to_token fits: no committed length the table holds can overflow it"),
}


def lockstep_full_to_swa(num_pages: int, page_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``full_to_swa``: (num_pages + 1) * ps + 1 int64, full-pool slot -> SWA-pool slot.

    The two pools are allocated in lockstep, page for page, so the map keeps offsets within a page.
    The workbench numbers SWA pages in reverse (full page k -> SWA page num_pages + 1 - k) so a
    replay that read the wrong map would show. Page 0 maps to 0; the trailing entry is -1.
    """
    full_page = torch.arange(num_pages + 1, dtype=torch.int64, device=device)
    swa_page = torch.where(full_page == 0, full_page, num_pages + 1 - full_page)
    offsets = torch.arange(page_size, dtype=torch.int64, device=device)
    slots = (swa_page[:, None] * page_size + offsets[None, :]).reshape(-1)
    return torch.cat((slots, torch.tensor([-1], dtype=torch.int64, device=device)))


@dataclass
class NpuBlockTables:
    """The static buffers one captured graph reads."""

    block_tables: torch.Tensor  # (rows, B) int32, B in pages
    block_tables_swa: torch.Tensor | None  # (rows, B) int32, hybrid SWA models only
    page_size: int

    @classmethod
    def allocate(
        cls,
        geometry: ServingGeometry,
        rule: str,
        *,
        rows: int | None = None,
        hybrid_swa: bool = False,
        device: torch.device | str = "cpu",
    ) -> NpuBlockTables:
        """Buffers as ``init_cuda_graph_state`` makes them: ``rows`` defaults to ``max_bs``.

        A probe passes the batch size instead: whether a copy fails depends on widths only.
        """
        return cls.of_width(RULES[rule].width(geometry), geometry.page_size,
                            rows=rows if rows is not None else geometry.max_bs, hybrid_swa=hybrid_swa, device=device)

    @classmethod
    def of_width(cls, width: int, page_size: int, *, rows: int, hybrid_swa: bool = False,
                 device: torch.device | str = "cpu") -> NpuBlockTables:
        shape = (rows, width)
        swa = torch.zeros(shape, dtype=torch.int32, device=device) if hybrid_swa else None
        return cls(torch.zeros(shape, dtype=torch.int32, device=device), swa, page_size)

    @property
    def width_pages(self) -> int:
        return self.block_tables.shape[1]

    @property
    def read_table(self) -> torch.Tensor:
        return self.block_tables

    @property
    def entry_tokens(self) -> int:
        return self.page_size

    def replay(
        self,
        req_to_token: torch.Tensor,
        rows: Sequence[int],
        seq_lens_cpu: Sequence[int],
        mode: Mode,
        *,
        draft_tokens: int = 0,
        step_id: int = 0,
        full_to_swa: torch.Tensor | None = None,
        spec_fill: str = STEP_READS,
    ) -> int:
        """Fill the tables for one step and return ``max_len``, the tokens the step fills.

        ``spec_fill`` (learned per release): ``step-reads`` fills what the step reads, a verify's
        ``s + D`` and a draft step's ``s + step_id + 1``; ``verify-reads`` a draft step's ``s`` only
        (0.5.4.post2 to 0.5.9 add nothing for it); ``committed`` ``s`` in every mode (to
        0.5.4.post1). Pages a step reads past what was filled hold ``PAD_PAGE``.

        Worked example (the seed): ctx 32768, ps 128, D 16, ``context`` rule, so B = 256 pages.
        A verify at s = 32753 reads max_len = 32769 tokens, P = cdiv(32769, 128) = 257 pages:
        the destination ``block_tables[:1, :257]`` clamps to 256 columns, the source has 257.
        """
        bs = len(rows)
        ps = self.page_size
        max_len = max(seq_lens_cpu[:bs])
        if mode is Mode.TARGET_VERIFY and spec_fill != COMMITTED:
            max_len += draft_tokens
        elif mode is Mode.DRAFT_DECODE and spec_fill == STEP_READS:
            max_len += step_id + 1
        num_pages = cdiv(max_len, ps)
        index = torch.as_tensor(list(rows), dtype=torch.int64, device=req_to_token.device)
        if self.block_tables_swa is not None:  # the engine fills the SWA table first
            if full_to_swa is None:
                raise ValueError("full_to_swa: required when the model is hybrid SWA")
            swa_src = full_to_swa[req_to_token[index, 0:max_len:ps].long()] // ps
            _fill(self.block_tables_swa, bs, num_pages, swa_src)
        # (bs, cdiv(min(max_len, W), ps)): the first slot of every page, as a page id
        src = req_to_token[:, 0:max_len:ps].index_select(0, index)  # req_to_token[index, 0:max_len:ps]
        if ps > 1:  # x // 1 is x, and integer division costs ~2 ns an entry on a CPU: 2 ms at 1M pages
            src = src // ps
        _fill(self.block_tables, bs, num_pages, src)
        return max_len


    def replay_mirrorless(
        self,
        req_to_token: torch.Tensor,
        rows: Sequence[int],
        mode: Mode,
        *,
        max_seq_len_host: int | None,
        draft_tokens: int = 0,
        step_id: int = 0,
    ) -> int:
        """The two replays without the CPU mirror ``seq_lens_cpu`` (SGLang 0.5.23,
        docs/engine-facts.md#sglang-ascend-block-tables).

        With ``max_seq_len_host`` (the scheduler's host-side max of the allocated lengths) the
        reads are that plus ``step_id + 1`` in a draft step and plus ``D`` in every other
        speculative mode, draft-extend included; the SWA table is not refreshed. With neither,
        a static copy of ``min(B, cdiv(W, ps))`` pages, which never raises. Returns the tokens
        the copy covered. Worked example: W = 32927, ps 128, B = 257: the static copy takes
        min(257, 258) = 257 pages of every row.
        """
        bs = len(rows)
        ps = self.page_size
        index = torch.as_tensor(list(rows), dtype=torch.int64, device=req_to_token.device)
        if max_seq_len_host is None:
            num_pages = min(self.width_pages, cdiv(req_to_token.shape[1], ps))
            max_len = num_pages * ps
        else:
            max_len = max_seq_len_host + (step_id + 1 if mode is Mode.DRAFT_DECODE else draft_tokens)
            num_pages = cdiv(max_len, ps)
        src = req_to_token[:, 0:max_len:ps].index_select(0, index) // ps
        _fill(self.block_tables, bs, num_pages, src)
        return max_len


def _fill(table: torch.Tensor, bs: int, num_pages: int, src: torch.Tensor) -> None:
    table[:bs, :num_pages].copy_(src)  # raises when the clamped destination is narrower
    table[:bs, num_pages:] = PAD_PAGE
    table[bs:, :] = PAD_PAGE


# ---- the backend --------------------------------------------------------------------------------

QWQ_SEED = Seed(
    name="npu-block-table",
    story="QwQ-32B on Ascend, ctx 32768, NGRAM D=16, ps=128: block_tables sized without the drafts",
    before={
        "component": "npu-block-table", "rule": "context", "context_len": 32768, "page_size": 128,
        "draft_tokens": 16, "spec_topk": 10, "draft_has_kv": False, "seq_lens": [32753],
        "mode": "target-verify",
    },
    after={
        "component": "npu-block-table", "rule": "context-plus-draft", "context_len": 32768,
        "page_size": 128, "draft_tokens": 16, "spec_topk": 10, "draft_has_kv": False,
        "seq_lens": [32753], "mode": "target-verify",
    },
    expected_error="The size of tensor a (256) must match the size of tensor b (257) at non-singleton dimension 1",
)


class AscendBlockTables(TableBackend):
    name = "sglang-ascend-block-tables"
    aliases = ("npu-block-table",)
    engine = "sglang"
    device_family = "ascend-npu"
    launch_names = ("ascend",)  # --attention-backend ascend; --device npu forces it
    buffer_name = "block_tables"
    unit = "pages"
    pad_seq_len = SEQ_FILL
    page_sizes = (128,)  # Ascend forces 128 (npu/utils.py:96-101, the default)
    short = "npu"
    rules = RULES
    case_fields = frozenset({"hybrid_swa", "spec_fill"})
    case_options = MappingProxyType({"spec_fill": (STEP_READS, VERIFY_READS, COMMITTED)})
    on_overflow = "shape-error: the replay's copy_ of cdiv(max_len, ps) pages into a narrower table raises"
    in_defaults = True
    seeds = (QWQ_SEED,)

    def allocate(self, geometry: ServingGeometry, width: int, *, rows: int, case: TableCase,
                 device: torch.device | str) -> NpuBlockTables:
        return NpuBlockTables.of_width(width, geometry.page_size, rows=rows, hybrid_swa=case.hybrid_swa, device=device)

    def replay(self, buffers: Buffers, req_to_token: torch.Tensor, rows: Sequence[int], seq_lens: Sequence[int],
               case: TableCase, *, num_slots: int, query_rows: int | None = None) -> None:  # never writes past a row
        assert isinstance(buffers, NpuBlockTables)
        g = case.geometry
        full_to_swa = None
        if buffers.block_tables_swa is not None:  # the SWA pool mirrors the full pool page for page
            full_to_swa = lockstep_full_to_swa(num_slots // g.page_size, g.page_size, req_to_token.device)
        buffers.replay(req_to_token, rows, seq_lens, case.mode, draft_tokens=g.draft_tokens, step_id=case.step_id,
                       full_to_swa=full_to_swa, spec_fill=self.option(case, "spec_fill"))

    def buffer_key(self, case: TableCase) -> tuple[object, ...]:
        return (case.hybrid_swa,)

    def table_bytes(self, geometry: ServingGeometry, width: int, mode: Mode, *, hybrid_swa: bool = False) -> int:
        """``block_tables`` (max_bs, width pages) int32, twice for hybrid SWA models."""
        return (2 if hybrid_swa else 1) * super().table_bytes(geometry, width, mode)


BACKEND = AscendBlockTables()
