"""The DSA (DeepSeek sparse attention) backend's graph-captured page table.

The graph keeps ``page_table``, a token-granular map (one row per query token, so ``bs * D`` rows
in verify) from token position to KV slot, and for ``ps > 1`` the page-level
``real_page_table = page_table[:, 0::ps] // ps`` the kernels index.

Two replays exist. The *dynamic* one copies exactly the ``Lk`` columns the step reads, so a buffer
that is too narrow raises a shape error. The *static* one always copies the buffer's full width and
lets the kernels bound their reads by ``cache_seqlens``: a buffer that is too narrow then raises
nothing, the table is silently truncated, and a kernel reads past the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from workbench.backends.base import INT32_BYTES, Buffers, Grid, IntArray, Seed, SizingRule, TableBackend
from workbench.model.cases import Replay, TableCase
from workbench.model.geometry import Mode, ServingGeometry, cdiv

SEQ_FILL = 1  # the seq_len of a padded graph row on this backend


# ---- sizing rules (tokens) ------------------------------------------------------------------------


def dsa_context(g: ServingGeometry) -> int:
    """The original DSA backend: ``ctx`` tokens."""
    return g.context_len


def dsa_context_plus_draft(g: ServingGeometry) -> int:
    """The first DSA fix: ``ctx + D`` tokens (blind to the table's +4 slack and to overshoot)."""
    return g.context_len + g.draft_tokens


def dsa_req_to_token(g: ServingGeometry) -> int:
    """The second seed's fix: ``W = req_to_token.shape[1]`` tokens, as DeepSeek-V4 already did."""
    return g.request_table_width


RULES = {
    "context": SizingRule(
        "context", dsa_context, lambda x: x.ctx.copy(),
        change="the original DSA backend", quirk="blind to the draft tokens and to overshoot"),
    "context-plus-draft": SizingRule(
        "context-plus-draft", dsa_context_plus_draft, lambda x: x.ctx + x.d,
        change="the first DSA fix", quirk="blind to the request table's +4 slack: one token of overshoot fails"),
    "req-to-token": SizingRule(
        "req-to-token", dsa_req_to_token, lambda x: x.w.copy(),
        change="the second seed's fix (in force in sglang 0.5.23)",
        quirk="as wide as req_to_token, as the DeepSeek-V4 backend already was"),
}


def tokens_per_request(geometry: ServingGeometry, mode: Mode, accept_len: int = 1) -> int:
    """Query tokens (page-table rows) per request of a graph captured in ``mode``."""
    if mode is Mode.TARGET_VERIFY:
        return geometry.draft_tokens
    if mode is Mode.DRAFT_EXTEND:
        return accept_len
    return 1


@dataclass
class DsaPageTable:
    """The static buffers one captured graph reads."""

    page_table: torch.Tensor  # (rows, B) int32, B in tokens
    real_page_table: torch.Tensor | None  # (rows, cdiv(B, ps)) int32 when ps > 1
    page_size: int

    @classmethod
    def allocate(
        cls,
        geometry: ServingGeometry,
        rule: str,
        *,
        rows: int,
        device: torch.device | str = "cpu",
    ) -> DsaPageTable:
        """Buffers as ``init_cuda_graph_state`` makes them: ``rows`` is ``max_num_tokens``.

        The engine uses ``max_bs * tokens_per_request``; a probe passes what its batch needs,
        since whether a copy fails depends on widths only.
        """
        return cls.of_width(RULES[rule].width(geometry), geometry.page_size, rows=rows, device=device)

    @classmethod
    def of_width(cls, width: int, ps: int, *, rows: int, device: torch.device | str = "cpu") -> DsaPageTable:
        page_table = torch.zeros((rows, width), dtype=torch.int32, device=device)
        real = torch.zeros((rows, cdiv(width, ps)), dtype=torch.int32, device=device) if ps > 1 else None
        return cls(page_table, real, ps)

    @property
    def width_tokens(self) -> int:
        return self.page_table.shape[1]

    @property
    def read_table(self) -> torch.Tensor:
        return self.page_table

    @property
    def entry_tokens(self) -> int:
        return 1  # token-granular: one slot per entry

    def replay(
        self,
        req_to_token: torch.Tensor,
        rows: Sequence[int],
        seq_lens_cpu: Sequence[int],
        mode: Mode,
        *,
        draft_tokens: int = 0,
        accept_len: int = 1,
        replay: Replay = Replay.DYNAMIC,
        query_rows: int | None = None,
    ) -> int:
        """Fill the tables for one step and return ``Lk``, the columns the replay copied.

        ``query_rows`` overrides the query rows per request (``D`` in verify, ``accept_len`` in
        draft-extend): whether the copy fails, and torch's message, depend on the widths alone
        unless the destination is one column wide, so a probe may replay narrow.

        Worked example (the seed): ctx 90000, D 6, G1 so W = 90010, ``context-plus-draft`` rule
        so B = 90006. A verify at s = 90001 has Lk = 90007: the destination
        ``page_table[:6, :90007]`` clamps to 90006 columns, the source ``req_to_token[r, :90007]``
        has 90007.
        """
        if mode is Mode.DRAFT_DECODE:
            raise ValueError("mode: the DSA replay has no draft-decode mode (decode, target-verify, draft-extend)")
        bs = len(rows)
        index = torch.as_tensor(list(rows), dtype=torch.int64, device=req_to_token.device)
        lk = max(seq_lens_cpu[:bs])
        if mode is Mode.TARGET_VERIFY:
            lk += draft_tokens
        if replay is Replay.STATIC:
            lk = self.width_tokens
        # (bs, min(Lk, W)): the engine's req_to_token[index, :lk]; index_select is the same row
        # gather, a quarter faster on a CPU
        src = req_to_token[:, :lk].index_select(0, index)
        repeats = {Mode.TARGET_VERIFY: draft_tokens, Mode.DRAFT_EXTEND: accept_len}.get(mode, 1)
        if query_rows is not None:  # a narrow probe: fewer query rows, same widths (see probe.py)
            repeats = query_rows
        if repeats != 1:
            src = torch.repeat_interleave(src, repeats, dim=0)  # (bs * D, ...) in verify
        self.page_table[: src.shape[0], :lk].copy_(src)  # raises when the destination is narrower
        if self.real_page_table is not None:
            real = src[:, 0 :: self.page_size] // self.page_size
            self.real_page_table[: real.shape[0], : real.shape[1]].copy_(real)
        return lk


# ---- the backend --------------------------------------------------------------------------------

GLM_SEED = Seed(
    name="dsa-page-table",
    story="GLM-5.2 EAGLE (5, 1, 6) on DSA, ctx 90000, ps=64: page_table narrower than req_to_token",
    before={
        "component": "dsa-page-table", "rule": "context-plus-draft", "context_len": 90000,
        "page_size": 64, "draft_tokens": 6, "spec_steps": 5, "spec_topk": 1, "seq_lens": [90001],
        "mode": "target-verify",
    },
    after={
        "component": "dsa-page-table", "rule": "req-to-token", "context_len": 90000, "page_size": 64,
        "draft_tokens": 6, "spec_steps": 5, "spec_topk": 1, "seq_lens": [90001],
        "mode": "target-verify",
    },
    expected_error="The size of tensor a (90006) must match the size of tensor b (90007) at non-singleton dimension 1",
)

# Query tokens per request of the captured graph (max_num_tokens / max_bs,
# docs/semantics.md#graph-modes).
def graph_tokens_per_request(geometry: ServingGeometry, mode: Mode) -> int:
    if mode is Mode.TARGET_VERIFY:
        return geometry.draft_tokens
    if mode is Mode.DRAFT_DECODE:
        return geometry.spec_topk
    if mode is Mode.DRAFT_EXTEND:
        return geometry.spec_steps + 1
    return 1


class DsaPageTableBackend(TableBackend):
    name = "sglang-dsa-page-table"
    aliases = ("dsa-page-table",)
    engine = "sglang"
    device_family = "cuda"
    launch_names = ("dsa", "nsa")  # "nsa" is the deprecated alias (srt/arg_groups/choices.py:74-75)
    buffer_name = "page_table"
    unit = "tokens"
    pad_seq_len = SEQ_FILL
    page_sizes = (64,)  # DSA on CUDA forces 64 (docs/engine-facts.md#sglang-launch-defaults)
    short = "dsa"
    rules = RULES
    modes = (Mode.DECODE, Mode.TARGET_VERIFY, Mode.DRAFT_EXTEND)
    case_fields = frozenset({"replay"})
    replays = tuple(r.value for r in Replay)
    on_overflow = ("dynamic replay: shape-error (the copy_ of Lk columns); static replay: silent-overread "
                   "(the table is truncated and the kernel reads past the row)")
    in_defaults = True
    seeds = (GLM_SEED,)

    def lookahead(self, geometry: ServingGeometry, mode: Mode, step_id: int = 0) -> int:
        return geometry.draft_tokens if mode is Mode.TARGET_VERIFY else 0

    def lookahead_grid(self, grid: Grid) -> IntArray:
        out: IntArray = np.where(grid.mode == 1, grid.d, 0)
        return out

    def mode_problem(self, mode: Mode) -> str | None:
        if mode is Mode.DRAFT_DECODE:
            return "draft-decode: the DSA replay has no such mode (decode, target-verify, draft-extend)"
        return None

    def probe_rows(self, case: TableCase, width: int) -> int:
        """One query row per request, unless the buffer is one column wide.

        The engine's verify graph has ``bs * D`` query rows, each a copy of its request's row. Rows
        change neither whether the copy fails nor torch's message, except when the destination is
        one column wide (torch then names the shapes, rows included): a 1M-token verify then moves
        4 MB, not 4 MB * D.
        """
        return len(case.seq_lens) * self._query_rows(case, width)

    def _query_rows(self, case: TableCase, width: int) -> int:
        return tokens_per_request(case.geometry, case.mode, case.accept_len) if width <= 1 else 1

    def read_lengths(self, case: TableCase, reads: Sequence[int]) -> list[int]:
        per_request = self.probe_rows(case, self.width(case.geometry, case.rule)) // len(case.seq_lens)
        return [r for r in reads for _ in range(per_request)]  # query rows as repeat_interleave lays them out

    def allocate(self, geometry: ServingGeometry, width: int, *, rows: int, case: TableCase,
                 device: torch.device | str) -> DsaPageTable:
        return DsaPageTable.of_width(width, geometry.page_size, rows=rows, device=device)

    def replay(self, buffers: Buffers, req_to_token: torch.Tensor, rows: Sequence[int], seq_lens: Sequence[int],
               case: TableCase, *, num_slots: int, query_rows: int | None = None) -> None:  # never writes past a row
        assert isinstance(buffers, DsaPageTable)
        if query_rows is None and buffers.page_table.shape[0] < len(rows) * tokens_per_request(
                case.geometry, case.mode, case.accept_len):
            query_rows = buffers.page_table.shape[0] // len(rows)  # a probe's narrow buffers
        buffers.replay(req_to_token, rows, seq_lens, case.mode, draft_tokens=case.geometry.draft_tokens,
                       accept_len=case.accept_len, replay=case.replay, query_rows=query_rows)

    def graph_rows(self, geometry: ServingGeometry, mode: Mode) -> int:
        return geometry.max_bs * graph_tokens_per_request(geometry, mode)

    def table_bytes(self, geometry: ServingGeometry, width: int, mode: Mode, *, hybrid_swa: bool = False) -> int:
        """``page_table`` (max_bs * tokens_per_request, width tokens) int32, plus for ps > 1
        ``real_page_table`` with the same rows and ``cdiv(width, ps)`` columns."""
        columns = width + (cdiv(width, geometry.page_size) if geometry.page_size > 1 else 0)
        return self.graph_rows(geometry, mode) * columns * INT32_BYTES


BACKEND = DsaPageTableBackend()
