"""SGLang's CUDA paged allocator: a Triton kernel, one program per row.

Only rows that open a page read ``free_pages[start]``, so an exactly full pool is safe. Up to 0.5.18
(docs/engine-facts.md#sglang-cuda-allocator) it checks capacity *after* the kernel: on a real
shortage the kernel has already read past the free list (on a GPU an illegal memory access) before ``alloc_decode`` returns None.
The workbench records that read as a silent over-read. It merges parked pages when the batch
*might* need more than is free (``bs > len(free_pages)``), before it has counted the openers.

Engine: ``srt/mem_cache/allocator/paged.py``; the kernel in ``srt/kernels/ops/memory/allocator.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from workbench.backends.base import Seed
from workbench.backends.gather import DecodeGather

if TYPE_CHECKING:
    from workbench.model.allocator import PagedAllocator


class CudaMaskedGather(DecodeGather):
    name = "cuda-masked"
    engine = "sglang"
    device_family = "cuda"
    change = "the CUDA allocator's Triton kernel, capacity checked after it (before 0.5.23)"
    quirk = "only page-opening rows read; a short pool is read past before None is returned"

    def decode(self, alloc: PagedAllocator, need: torch.Tensor, start: torch.Tensor, last: torch.Tensor,
               num_new_pages: int, batch: int) -> torch.Tensor | None:
        if batch > len(alloc.free_pages):
            alloc.merge_and_sort_free()
        out = self._kernel(alloc, need, start, last)
        if num_new_pages > len(alloc.free_pages):
            return None  # the kernel has already read past the free list
        return out

    @staticmethod
    def _kernel(alloc: PagedAllocator, need: torch.Tensor, start: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """One program per row; only page-opening rows load ``free_pages[start]``, unbounded."""
        opening = need.bool()
        index = start[opening]
        num_free = len(alloc.free_pages)
        past = index >= num_free
        if bool(past.any()):
            alloc.overreads.append(
                f"alloc_decode read free_pages[{int(index[past].max())}] past its {num_free} "
                f"entries before its capacity check returned None"
            )
        loaded = alloc.free_pages[index.clamp(max=max(num_free - 1, 0))] if num_free else index
        out = last + 1
        out[opening] = loaded * alloc.page_size
        return out


class CudaCheckedGather(CudaMaskedGather):
    name = "cuda-checked"
    in_defaults = False  # a version's behaviour (0.5.23), not one of the three seeds' gathers
    change = "sglang 0.5.23: capacity checked before the kernel (srt/mem_cache/allocator/paged.py:290-300)"
    quirk = "only page-opening rows read, and never on a short pool: None before any read"

    def decode(self, alloc: PagedAllocator, need: torch.Tensor, start: torch.Tensor, last: torch.Tensor,
               num_new_pages: int, batch: int) -> torch.Tensor | None:
        if batch > len(alloc.free_pages):  # merges on the batch size, as before
            alloc.merge_and_sort_free()
        if num_new_pages > len(alloc.free_pages):
            return None
        return self._kernel(alloc, need, start, last)


GATHERS: tuple[DecodeGather, ...] = (CudaMaskedGather(), CudaCheckedGather())
SEEDS: tuple[Seed, ...] = ()
