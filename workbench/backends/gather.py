"""What every ``alloc_decode`` gather declares: how it reads new pages off the free list.

``PagedAllocator.alloc_decode`` computes, for the batch, which rows open a page (``need``), each
row's index into the free list (``start``, the exclusive prefix sum of ``need``) and the pages the
step needs; a gather turns that into the slots, or None when the pool is short. Each gather sits in
the module of the engine backend that ships it; the registry is in ``workbench.backends``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

if TYPE_CHECKING:  # the allocator calls its gathers; a gather only needs its free list
    from workbench.model.allocator import PagedAllocator


class DecodeGather(ABC):
    name: str  # the Gather value: "npu-legacy"
    engine: str  # "sglang"
    # the devices whose allocator ships it, as TableBackend's: "ascend-npu", "cuda"; "" claims no device
    device_family: str = ""
    change: str  # the engine change it stands for
    quirk: str  # one line: what it does at an exactly full or a short pool
    fixed_by: str | None = None  # the gather that fixed this one, where one did
    in_defaults: bool = True  # one of the three seeds' gathers: sweeps and explorers that name no gather cover these

    @abstractmethod
    def decode(self, alloc: PagedAllocator, need: torch.Tensor, start: torch.Tensor, last: torch.Tensor,
               num_new_pages: int, batch: int) -> torch.Tensor | None:
        """The step's slots (int64, one per row), or None when the pool is short.

        ``need`` (bs,) 0/1 rows that open a page; ``start`` (bs,) each row's index into
        ``alloc.free_pages``; ``last`` (bs,) the slot of each row's last token.
        """

    def exact_fit_fails(self, trailing: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """Per batch, whether a pool of exactly the pages it opens fails, given ``trailing``: whether a
        row that opens no page follows the batch's last row that does (the closed form of exact_fit)."""
        return np.zeros_like(trailing)
