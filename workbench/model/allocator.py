"""The paged KV-cache allocator, with the three ``alloc_decode`` gathers (docs/semantics.md#the-paged-allocator).

Page 0 is reserved: padded graph rows write their dummy KV into it, so it is never free and never
owned. Every other page is, at any moment, in exactly one of three places:

    free_pages      int64 page ids ready to hand out (freed pages go back to the *front*)
    release_pages   parked pages (disaggregated serving, ``need_sort``): merged and sorted into
                    ``free_pages`` only when it runs short
    owned           holding slots of some request

The engine itself keeps no record of ownership; the workbench keeps one (a page mask and a slot
mask) so that ``check_integrity`` can prove that no page leaks and no slot is handed out twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from workbench.model.choice import Choice
from workbench.model.geometry import cdiv

RESERVED_PAGE = 0  # padded tokens write here; never on the free list


class Gather(Choice):
    """How ``alloc_decode`` reads new pages off the free list, by name; each value's behaviour is
    declared by the backend module that ships it, a ``DecodeStep`` (``workbench.backends.gather_of``)."""

    NPU_LEGACY = "npu-legacy"  # gathers for every row: out of bounds on an exactly full pool
    NPU_CLAMPED = "npu-clamped"  # the fix: clamp the index of rows that open no page
    CUDA_MASKED = "cuda-masked"  # Triton kernel: only page-opening rows read; capacity checked after
    CUDA_CHECKED = "cuda-checked"  # the same kernel, capacity checked before it (SGLang 0.5.23)

class DecodeStep(Protocol):
    """The one thing ``alloc_decode`` asks of a gather: turn the batch's page openings into slots.

    The gathers themselves sit in the backend modules that ship them (``backends.gather``:
    ``DecodeGather``); the caller resolves a ``Gather`` name to one (``backends.gather_of``) and
    hands it in, so the model knows no backend (the backends sit above it)."""

    def decode(self, alloc: PagedAllocator, need: torch.Tensor, start: torch.Tensor, last: torch.Tensor,
               num_new_pages: int, batch: int) -> torch.Tensor | None: ...


class IntegrityError(AssertionError):
    """The allocator's bookkeeping is inconsistent; the message carries the counts."""


def _as_long(values: Sequence[int] | torch.Tensor, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(values, dtype=torch.int64, device=device)


class PagedAllocator:
    """Hands out KV slots a page at a time, as the engine's paged allocator does."""

    def __init__(
        self,
        page_size: int,
        num_pages: int,
        *,
        need_sort: bool = False,
        device: torch.device | str = "cpu",
    ) -> None:
        if page_size < 1:
            raise ValueError(f"page_size: {page_size} is out of range (allowed: 1 or more)")
        if num_pages < 0:
            raise ValueError(f"num_pages: {num_pages} is out of range (allowed: 0 or more)")
        self.page_size = page_size
        self.num_pages = num_pages
        self.need_sort = need_sort
        self.device = torch.device(device)
        self.free_pages = torch.arange(1, num_pages + 1, dtype=torch.int64, device=self.device)
        self.release_pages = torch.empty(0, dtype=torch.int64, device=self.device)
        # Workbench ledger, not engine state. (num_pages + 1,) bool and ((num_pages + 1) * ps,) bool.
        self.owned_pages = torch.zeros(num_pages + 1, dtype=torch.bool, device=self.device)
        self.handed_slots = torch.zeros((num_pages + 1) * page_size, dtype=torch.bool, device=self.device)
        self.double_handouts = 0
        self.double_frees = 0
        # Reads past the free list that the engine would not notice (the CUDA kernel on a shortage).
        self.overreads: list[str] = []

    @classmethod
    def from_free_list(
        cls,
        page_size: int,
        free_pages: Sequence[int],
        *,
        num_pages: int | None = None,
        device: torch.device | str = "cpu",
    ) -> PagedAllocator:
        """An allocator caught mid-run: ``free_pages`` in the given order, every other page owned."""
        top = max([0, *free_pages])
        alloc = cls(page_size, max(top, num_pages or 0), device=device)
        alloc.free_pages = _as_long(list(free_pages), alloc.device)
        alloc.owned_pages[1:] = True
        alloc.owned_pages[alloc.free_pages] = False
        # Which slots of the owned pages are in use is unknown, so none are marked handed out.
        return alloc

    # ---- capacity -------------------------------------------------------------------------

    def available_size(self) -> int:
        """Free slots, parked pages included (what the scheduler's admission check reads)."""
        return (len(self.free_pages) + len(self.release_pages)) * self.page_size

    def merge_and_sort_free(self) -> None:
        if len(self.release_pages):
            self.free_pages = torch.sort(torch.cat((self.free_pages, self.release_pages))).values
            self.release_pages = self.release_pages[:0]

    def ensure_pages(self, num_new_pages: int) -> bool:
        """Whether ``num_new_pages`` are free, merging parked pages first when they are not."""
        if num_new_pages > len(self.free_pages):
            self.merge_and_sort_free()
        return num_new_pages <= len(self.free_pages)

    # ---- allocation -----------------------------------------------------------------------

    def alloc_extend(
        self,
        prefix_lens: Sequence[int] | torch.Tensor,
        seq_lens: Sequence[int] | torch.Tensor,
        last_loc: Sequence[int] | torch.Tensor,
        *,
        merge_bound: int | None = None,
        capacity_check: str = "before",
        tail: str = "guarded",
    ) -> torch.Tensor | None:
        """Slots for positions ``prefix .. seq - 1`` of each request, or None when short.

        ``capacity_check="after"``: the CUDA allocator up to SGLang 0.5.18, whose kernel runs
        first; on a short pool it has read past the free list (recorded in ``overreads``) by
        the time it returns None. The default is the NPU allocator's order (and CUDA's in 0.5.23).

        ``merge_bound``: merge parked pages first when fewer pages than this are free. SGLang
        0.5.23's CUDA allocator does so on an upper bound of the pages a batch can open
        (``extend_tokens // ps + bs + 1``) before it counts them exactly; None merges only when
        the exact count is short, as the NPU allocator does.

        ``tail="unguarded"``: the NPU allocator of SGLang 0.5.0rc2 to 0.5.6, which writes each
        request's last ``seq % ps`` slots from the last page it opens even when its extend ends
        inside its prefix's partial page and opens none: the slots ``free_pages[k - 1] * ps + 0..``
        (``k`` the pages opened so far; ``free_pages[-1]`` before the first) go over that many
        output positions ending at the request's end, earlier requests' among them, and the slice
        starts below zero (an empty slice: a size error) when fewer tokens precede its end.

        Worked example, ps = 4, one request with prefix 6, seq 13, last_loc 21 (slot of token 5),
        free pages [9, 3]: positions 6, 7 finish the old page (slots 22, 23); positions 8..11 fill
        new page 9 (slots 36..39); position 12 opens page 3 (slot 12). Pages taken:
        cdiv(13, 4) - cdiv(6, 4) = 2. As on the NPU, capacity is checked before any index.
        """
        prefix = _as_long(prefix_lens, self.device)
        seq = _as_long(seq_lens, self.device)
        last = _as_long(last_loc, self.device)
        ps = self.page_size
        # (bs,) pages each request opens; exclusive prefix sum gives its offset in free_pages.
        new_pages = (seq + ps - 1) // ps - (prefix + ps - 1) // ps
        num_new_pages = int(new_pages.sum())
        if merge_bound is not None and merge_bound > len(self.free_pages):
            self.merge_and_sort_free()
        if not self.ensure_pages(num_new_pages):
            if capacity_check == "after":
                self.overreads.append(f"alloc_extend read free_pages past its {len(self.free_pages)} entries "
                                      f"({num_new_pages} new pages) before its capacity check returned None")
            return None
        counts = seq - prefix
        req = torch.repeat_interleave(torch.arange(len(seq), device=self.device), counts)
        first = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        pos = torch.arange(len(req), device=self.device) - first + prefix[req]  # token positions
        in_old_page = pos < ((prefix + ps - 1) // ps * ps)[req]
        out = last[req] + 1 + pos - prefix[req]  # part 1: after last_loc in the old partial page
        if num_new_pages:
            page_offset = torch.cumsum(new_pages, 0) - new_pages
            index = page_offset[req] + pos // ps - ((prefix + ps - 1) // ps)[req]
            index = torch.where(in_old_page, torch.zeros_like(index), index)
            new_slot = self.free_pages[index] * ps + pos % ps  # parts 2 and 3: fresh pages
            out = torch.where(in_old_page, out, new_slot)
        if tail == "unguarded":
            self._write_unguarded_tails(out, prefix, seq, new_pages)
        elif tail != "guarded":
            raise ValueError(f"tail: {tail!r} is not 'guarded' or 'unguarded'")
        self._take_pages(num_new_pages)
        self._hand_out(out)
        return out

    def _write_unguarded_tails(self, out: torch.Tensor, prefix: torch.Tensor, seq: torch.Tensor,
                               new_pages: torch.Tensor) -> None:
        """What ``tail="unguarded"`` writes over ``out`` (the guarded slots), request by request
        in batch order as that kernel runs. A request whose extend ends inside its prefix's
        partial page (``seq % ps`` tokens on it, no page opened) still takes the other two steps:
        the full pages, a count of ``-ps`` (the slice ``free_pages[k:k - 1]`` onto
        ``out[end:end - ps]``: empty unless ``k`` or ``end - ps`` falls below zero, where Python's
        slices wrap), then the tail. Every later request writes its own slots again after."""
        ps = self.page_size
        guarded = out.clone()
        ends = torch.cumsum(seq - prefix, 0)
        pages_so_far = torch.cumsum(new_pages, 0)  # k: pages opened by this request and those before
        slot_in_page = torch.arange(ps, device=self.device)
        for i in range(len(seq)):
            start, end, k = int(ends[i] - (seq[i] - prefix[i])), int(ends[i]), int(pages_so_far[i])
            out[start:end] = guarded[start:end]
            count = int(seq[i]) % ps
            if int(seq[i]) >= cdiv(int(prefix[i]), ps) * ps or not count:
                continue  # it opens a page, or ends on a page boundary: the guarded slots
            pages = self.free_pages[k:k - 1]
            out[end:end - ps] = (pages.view(-1, 1) * ps + slot_in_page.view(1, -1)).view(-1)
            out[end - count:end] = self.free_pages[k - 1] * ps + slot_in_page[:count]

    def alloc_decode(
        self,
        seq_lens: Sequence[int] | torch.Tensor,
        last_loc: Sequence[int] | torch.Tensor,
        gather: DecodeStep,
    ) -> torch.Tensor | None:
        """One new slot per request: ``seq_lens`` is the length *after* the new token.

        A row opens a page iff ``seq_lens % ps == 1`` (its new token is the first of a page); other
        rows take ``last_loc + 1``. Worked example (the seed vector), ps = 4,
        seq_lens [5, 10, 7], last_loc [11, 20, 29], free_pages [11]: need [1, 0, 0],
        start [0, 1, 1]. The legacy NPU gather reads ``free_pages[[0, 1, 1]]`` and raises IndexError;
        the clamped one clamps start to [0, 0, 0] and returns [44, 21, 30]. Each gather's code is in
        its backend's module: the caller passes the gather (``workbench.backends.gather_of(name)``).
        """
        seq = _as_long(seq_lens, self.device)
        last = _as_long(last_loc, self.device)
        ps = self.page_size
        # ``1 % ps`` is 1 for every real page size; for ps == 1 it makes every token open a page.
        need = (seq % ps == 1 % ps).long()  # (bs,) 0/1
        start = torch.cumsum(need, 0) - need  # exclusive prefix sum, every row
        num_new_pages = int((seq.cpu() % ps == 1 % ps).sum())  # on the CPU mirror, as the engine
        out = gather.decode(self, need, start, last, num_new_pages, len(seq))
        if out is None:
            return None
        self._take_pages(num_new_pages)
        self._hand_out(out)
        return out.int()

    def _take_pages(self, num_new_pages: int) -> None:
        taken = self.free_pages[:num_new_pages]
        self.owned_pages[taken] = True
        self.free_pages = self.free_pages[num_new_pages:]

    def _hand_out(self, slots: torch.Tensor) -> None:
        # a slot handed out before, or twice in this one answer (an unguarded tail's)
        self.double_handouts += int(self.handed_slots[slots].sum()) + len(slots) - len(torch.unique(slots))
        self.handed_slots[slots] = True

    # ---- release --------------------------------------------------------------------------

    def free(self, slots: Sequence[int] | torch.Tensor) -> None:
        """Return the pages of ``slots``: to the front of the free list, or parked."""
        slots = _as_long(slots, self.device)
        if len(slots) == 0:
            return
        pages = torch.unique(slots // self.page_size)
        self.double_frees += int((~self.owned_pages[pages]).sum())
        self.owned_pages[pages] = False
        self.handed_slots.view(-1, self.page_size)[pages] = False
        if self.need_sort:
            self.release_pages = torch.cat((self.release_pages, pages))
        else:
            self.free_pages = torch.cat((pages, self.free_pages))

    # ---- invariants -----------------------------------------------------------------------

    def check_integrity(self) -> None:
        """Every page 1..num_pages is free, parked or owned, exactly once; no slot twice."""
        counts = torch.zeros(self.num_pages + 1, dtype=torch.int64, device=self.device)
        for pages in (self.free_pages, self.release_pages):
            if len(pages) and (int(pages.min()) < 1 or int(pages.max()) > self.num_pages):
                raise IntegrityError(f"a listed page id is outside 1..{self.num_pages}: {pages.tolist()}")
            counts.index_add_(0, pages, torch.ones_like(pages))
        counts += self.owned_pages.long()
        problems = []
        if counts[RESERVED_PAGE]:
            problems.append(f"reserved page {RESERVED_PAGE} is free, parked or owned")
        lost = int((counts[1:] == 0).sum())
        repeated = int((counts[1:] > 1).sum())
        if lost:
            problems.append(f"{lost} pages are neither free, parked nor owned")
        if repeated:
            problems.append(f"{repeated} pages are in more than one place")
        if self.double_handouts:
            problems.append(f"{self.double_handouts} slots were handed out twice")
        if self.double_frees:
            problems.append(f"{self.double_frees} pages were freed while not owned")
        stray = int((self.handed_slots.view(-1, self.page_size).any(1) & ~self.owned_pages).sum())
        if stray:
            problems.append(f"{stray} pages hold handed-out slots but are not owned")
        if problems:
            raise IntegrityError("; ".join(problems))

    def num_owned_pages(self) -> int:
        return int(self.owned_pages.sum())


def pages_needed_for_decode(seq_lens: Sequence[int], page_size: int) -> int:
    """Pages a decode batch opens: one per row whose new token starts a page."""
    return sum(1 for s in seq_lens if s % page_size == 1 % page_size)


def pages_for_tokens(num_tokens: int, page_size: int) -> int:
    return cdiv(num_tokens, page_size)
