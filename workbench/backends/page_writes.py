"""Page-table builders that write each row's live pages, as SGLang's Triton builders do.

Several SGLang backends fill a graph-captured ``(rows, B)`` int32 page table not with ``copy_``
but with a Triton kernel: program ``i`` reads the first slot of each of its request's live pages
from ``req_to_token`` and stores ``slot // ps`` at ``page_table + i * B + p``. The store is masked
by the request's page count and by whatever the kernel's grid covers, never by the row's end:
a page ``p >= B`` lands at flat offset ``i * B + p``, in row ``i + 1`` (or past the buffer for
the last row). What bounds the writes is therefore each backend's own business:

* ``limit = B`` (FA3, TRT-LLM MHA's graph kernel): the writes stop at the row's end and a step
  that needs more pages is a silent over-read;
* ``limit = None`` (XPU: the grid is sized from ``max(s) + delta``): every live page is written;
* ``limit = grid_pages(B, ps)`` (the ``create_flashmla_kv_indices_triton`` and TRT-LLM MHA page
  builders: one program per 4096 tokens of the *buffer's* width): pages up to the last program's
  end are written, so a width that is not a multiple of ``4096 // ps`` pages leaves room to
  spill into the next row, and one that is (TRT-LLM MLA pads to it) does not.

On a GPU the rows' programs run concurrently, so a spill into row ``i + 1`` races that row's own
stores; here rows are written in batch order (the next row's own pages land last). Either order
corrupts a request's metadata: the write past the row is what is reported.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from workbench.backends.base import Buffers, TableBackend
from workbench.model.cases import TableCase
from workbench.model.geometry import ServingGeometry, cdiv
from workbench.model.outcome import Overwrite

KERNEL_BLOCK_TOKENS = 4096  # tokens one program of the FlashMLA / TRT-LLM MHA page builders covers
# How ``create_flashmla_kv_indices_triton`` is launched (a case option, learned per release): a program
# per request and block of the row's pages (``get_num_kv_index_blocks_flashmla``, 0.5.13 on), or one
# program per request looping over every page the request has (to 0.5.12.post1): no grid bounds its stores.
ROW_BLOCKS, PER_REQUEST = "row-blocks", "per-request"
GRID_OPTIONS = (ROW_BLOCKS, PER_REQUEST)


def grid_pages(width: int, page_size: int, block_tokens: int = KERNEL_BLOCK_TOKENS) -> int:
    """Pages the builder's grid covers per row: ``cdiv(B, npb) * npb`` with ``npb = block_tokens // ps``.

    Worked example: ps 64 gives 64 pages per program; B = 129 pages (FlashMLA at ctx 8192) needs
    3 programs, which cover 192 pages: a row may write up to 63 pages past its end.
    """
    per_program = block_tokens // page_size
    return cdiv(width, per_program) * per_program


def live_pages(tokens: int, page_size: int, limit: int | None) -> int:
    """Pages a row's program stores: ``cdiv(tokens, ps)``, cut at ``limit`` where the kernel has one."""
    pages = cdiv(tokens, page_size)
    return pages if limit is None else min(pages, limit)


@dataclass
class PagedTable:
    """A graph-captured page table and the per-row bound the attention kernel reads by."""

    page_table: torch.Tensor  # (rows, B) int32, B in pages; contiguous, so row i + 1 follows row i
    cache_seqlens: torch.Tensor  # (rows,) int32: tokens the attention kernel reads per row
    page_size: int

    @classmethod
    def of_width(cls, width: int, page_size: int, *, rows: int, device: torch.device | str = "cpu",
                 fill: int = 0) -> PagedTable:
        return cls(torch.full((rows, width), fill, dtype=torch.int32, device=device),
                   torch.zeros(rows, dtype=torch.int32, device=device), page_size)

    @property
    def read_table(self) -> torch.Tensor:
        return self.page_table

    @property
    def entry_tokens(self) -> int:
        return self.page_size

    def write(self, req_to_token: torch.Tensor, rows: Sequence[int], lengths: Sequence[int],
              limit: int | None, *, pages: int | None = None) -> Overwrite | None:
        """Store each request's live pages through the table's flat storage; returns the first
        write past a row's end (into the next row, or past the buffer), or None. ``pages``: a kernel
        that stores a fixed number of columns in every row, live or not (stale slots of
        ``req_to_token`` past the request's end included), instead of the live pages.

        Worked example: ps 16, B 4, one request of 66 tokens, limit None: cdiv(66, 16) = 5 pages
        go to flat offsets 0..4; offset 4 is row 1, column 0 (past the buffer if there is no row 1).
        """
        ps = self.page_size
        num_rows, width = self.page_table.shape
        flat = self.page_table.view(-1)  # (rows * B,) int32, a view: writes land in the table
        first: Overwrite | None = None
        for i, (r, tokens) in enumerate(zip(rows, lengths)):
            live = live_pages(tokens, ps, limit) if pages is None else pages
            src = req_to_token[r, 0 : live * ps : ps]  # (live,) int32: the first slot of each page
            assert src.shape[0] == live, "a row's pages reach past req_to_token (no such state is probed)"
            start = i * width
            end = min(start + live, flat.shape[0])  # a GPU stores past the buffer too; here they are dropped
            flat[start:end] = src[: end - start] // ps
            if live > width and first is None:
                first = Overwrite(writer=i, row=i + 1 if i + 1 < num_rows else None, entries=live - width)
        bs = len(lengths)
        self.cache_seqlens[:bs] = torch.as_tensor(list(lengths), dtype=torch.int32, device=self.cache_seqlens.device)
        return first


class LivePageBackend(TableBackend):
    """A backend whose replay is one of the builders above: ``cache_seqlens = s + lookahead`` and
    each row's live pages, cut at ``write_limit``. Subclasses say the limit and the rows."""

    @abstractmethod
    def write_limit(self, case: TableCase, width: int) -> int | None:
        """Pages a row's program may store (None: every live page)."""

    def probe_rows(self, case: TableCase, width: int) -> int:
        """The batch's rows and, where the captured graph has one, the row after it: a write past
        the last request's row lands there (a padded row), or past the buffer when the batch
        fills ``max_bs``. More rows would change nothing but the bytes a probe allocates."""
        bs = len(case.seq_lens)
        return bs + 1 if bs < case.geometry.max_bs else bs

    def read_lengths(self, case: TableCase, reads: Sequence[int]) -> list[int]:
        rows = self.probe_rows(case, 0)
        return [*reads, *[0] * (rows - len(reads))]  # the row after the batch is read by nobody

    def allocate(self, geometry: ServingGeometry, width: int, *, rows: int, case: TableCase,
                 device: torch.device | str) -> PagedTable:
        return PagedTable.of_width(width, geometry.page_size, rows=rows, device=device)

    def replay(self, buffers: Buffers, req_to_token: torch.Tensor, rows: Sequence[int], seq_lens: Sequence[int],
               case: TableCase, *, num_slots: int, query_rows: int | None = None) -> Overwrite | None:
        assert isinstance(buffers, PagedTable)
        look = self.lookahead(case.geometry, case.mode, case.step_id)
        width = buffers.page_table.shape[1]
        return buffers.write(req_to_token, rows, [s + look for s in seq_lens], self.write_limit(case, width))


__all__ = ["GRID_OPTIONS", "KERNEL_BLOCK_TOKENS", "PER_REQUEST", "ROW_BLOCKS", "LivePageBackend", "PagedTable",
           "grid_pages", "live_pages"]
