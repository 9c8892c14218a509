"""SGLang's NPU paged allocator: ``alloc_decode`` gathers for every row.

The NPU version computes every row's free-list index and gathers for all of them, masking rows
that open no page by arithmetic. A row after the last page-opening row has ``start == n_new``,
which is in range only while the free list holds more than ``n_new`` pages: on an exactly full
pool the legacy gather reads past the list (``IndexError`` on a CPU, an AI Core error on the NPU).
The fix clamps the index to ``n_new - 1``. Both check capacity before indexing.

Engine: ``srt/hardware_backend/npu/allocator_npu.py`` (0.5.23: 100-137, the clamp at 128).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

from workbench.backends.base import Seed
from workbench.backends.gather import DecodeGather

if TYPE_CHECKING:
    from workbench.model.allocator import PagedAllocator


class _NpuGather(DecodeGather):
    engine = "sglang"
    device_family = "ascend-npu"
    clamp: bool

    def decode(self, alloc: PagedAllocator, need: torch.Tensor, start: torch.Tensor, last: torch.Tensor,
               num_new_pages: int, batch: int) -> torch.Tensor | None:
        if not alloc.ensure_pages(num_new_pages):  # merges parked pages first, as the engine does
            return None
        if num_new_pages == 0:
            return last + 1
        if self.clamp:
            start = start.clamp(max=num_new_pages - 1)
        # Every row gathers; arithmetic masks the rows that open no page. Worked example (the
        # seed), ps 4, seq_lens [5, 10, 7], free_pages [11]: need [1, 0, 0], start [0, 1, 1];
        # unclamped, free_pages[[0, 1, 1]] reads index 1 of a list of 1.
        out: torch.Tensor = (last + 1) * (1 - need) + alloc.free_pages[start] * alloc.page_size * need
        return out


class NpuLegacyGather(_NpuGather):
    name = "npu-legacy"
    clamp = False
    fixed_by = "npu-clamped"
    change = "the NPU allocator before the third seed's fix"
    quirk = "gathers free_pages[start] for every row: out of bounds on an exactly full pool"

    def exact_fit_fails(self, trailing: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """A row that opens no page after the last row that does indexes one past the list."""
        fails: npt.NDArray[np.bool_] = trailing.copy()
        return fails


class NpuClampedGather(_NpuGather):
    name = "npu-clamped"
    clamp = True
    change = "the third seed's fix (in force in sglang 0.5.23)"
    quirk = "clamps the index of rows that open no page: an exact fit is safe"


GATHERS: tuple[DecodeGather, ...] = (NpuLegacyGather(), NpuClampedGather())


EXACT_FIT_SEED = Seed(
    name="allocator",
    story="NPU alloc_decode on an exactly full free pool: ps=4, seq_lens [5, 10, 7], one free page",
    before={
        "component": "allocator", "gather": "npu-legacy", "page_size": 4, "seq_lens": [5, 10, 7],
        "last_loc": [11, 20, 29], "free_pages": [11],
    },
    after={
        "component": "allocator", "gather": "npu-clamped", "page_size": 4, "seq_lens": [5, 10, 7],
        "last_loc": [11, 20, 29], "free_pages": [11],
    },
    expected_error="index 1 is out of bounds for dimension 0 with size 1",
)
SEEDS = (EXACT_FIT_SEED,)
