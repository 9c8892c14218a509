"""The DSA (DeepSeek sparse attention) backend's graph-captured page table (spec section 3).

The graph keeps ``page_table``, a token-granular map (one row per query token, so ``bs * D`` rows
in verify) from token position to KV slot, and for ``ps > 1`` the page-level
``real_page_table = page_table[:, 0::ps] // ps`` the kernels index.

Two replays exist. The *dynamic* one copies exactly the ``Lk`` columns the step reads, so a buffer
that is too narrow raises a shape error. The *static* one always copies the buffer's full width and
lets the kernels bound their reads by ``cache_seqlens``: a buffer that is too narrow then raises
nothing, the table is silently truncated, and a kernel reads past the row.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from workbench.backends.rules import DSA_PAGE_TABLE_RULES, check_rule
from workbench.model.geometry import Mode, ServingGeometry, cdiv


class Replay(str, enum.Enum):
    DYNAMIC = "dynamic"  # Lk = the step's reads (in force at both seed fixes)
    STATIC = "static"  # Lk = B in every mode (a later engine version)

    @classmethod
    def parse(cls, value: str | Replay) -> Replay:
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(r.value for r in cls)
            raise ValueError(f"replay: {value!r} is not one of {allowed}") from None


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
        width = DSA_PAGE_TABLE_RULES[check_rule(rule)](geometry)
        ps = geometry.page_size
        page_table = torch.zeros((rows, width), dtype=torch.int32, device=device)
        real = torch.zeros((rows, cdiv(width, ps)), dtype=torch.int32, device=device) if ps > 1 else None
        return cls(page_table, real, ps)

    @property
    def width_tokens(self) -> int:
        return self.page_table.shape[1]

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
