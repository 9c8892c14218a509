"""The request-to-token table, filled from a real allocator so replays read realistic slots."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from workbench.model.allocator import PagedAllocator
from workbench.model.geometry import cdiv

DUMMY_ROW = 0  # padded graph rows point here


class RequestTable:
    """``req_to_token``: (rows, W) int32; ``[r, j]`` is the KV slot of position ``j`` of row ``r``.

    With ``ps > 1`` the slots of a request are page aligned, so ``req_to_token[r, k * ps] // ps``
    is the page id of its logical page ``k``: every block-table builder relies on that.
    """

    def __init__(self, num_rows: int, width: int, allocator: PagedAllocator) -> None:
        self.allocator = allocator
        self.req_to_token = torch.zeros((num_rows, width), dtype=torch.int32, device=allocator.device)
        self.filled = [0] * num_rows  # positions written per row

    @property
    def width(self) -> int:
        return self.req_to_token.shape[1]

    @classmethod
    def with_requests(
        cls, lengths: Sequence[int], width: int, page_size: int, device: torch.device | str = "cpu"
    ) -> RequestTable:
        """A table whose rows 1..n hold requests of ``lengths`` tokens, from an exactly sized pool."""
        num_pages = sum(cdiv(n, page_size) for n in lengths)
        table = cls(len(lengths) + 1, width, PagedAllocator(page_size, num_pages, device=device))
        for row, length in enumerate(lengths, start=1):
            table.extend(row, length)
        return table

    @classmethod
    def fresh_pool(
        cls, lengths: Sequence[int], width: int, page_size: int, device: torch.device | str = "cpu"
    ) -> torch.Tensor:
        """The ``req_to_token`` that ``with_requests`` builds, written by arithmetic alone.

        On a fresh pool the allocator hands out pages 1, 2, 3, ... in order, so request ``r``
        starting at page ``p`` holds slot ``p * ps + j`` at position ``j``. A probe needs only the
        table, not the allocator's books: this is the same tensor at a fraction of the cost
        (tests check the two agree). Returns (len(lengths) + 1, width) int32.
        """
        req_to_token = torch.zeros((len(lengths) + 1, width), dtype=torch.int32, device=device)
        first_page = 1
        for row, length in enumerate(lengths, start=1):
            req_to_token[row, :length] = torch.arange(
                first_page * page_size, first_page * page_size + length, dtype=torch.int32, device=device
            )
            first_page += cdiv(length, page_size)
        return req_to_token

    def extend(self, row: int, new_len: int) -> torch.Tensor:
        """Allocate slots for positions ``filled[row] .. new_len - 1`` and write them in the row."""
        prefix = self.filled[row]
        if not prefix <= new_len <= self.width:
            raise ValueError(f"new_len: {new_len} is out of range (allowed: {prefix} to {self.width})")
        last_loc = int(self.req_to_token[row, prefix - 1]) if prefix else -1
        slots = self.allocator.alloc_extend([prefix], [new_len], [last_loc])
        if slots is None:
            raise MemoryError(f"the KV pool cannot hold {new_len - prefix} more tokens for row {row}")
        self.req_to_token[row, prefix:new_len] = slots.to(torch.int32)
        self.filled[row] = new_len
        return slots

    def release(self, row: int) -> None:
        """Free every slot of ``row`` and clear it."""
        self.allocator.free(self.req_to_token[row, : self.filled[row]].long())
        self.req_to_token[row].zero_()
        self.filled[row] = 0
