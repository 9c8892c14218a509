"""Graph buffers made once per width and replayed many times, as the engine makes them.

The engine allocates its graph buffers once, at capture, and at every replay only ``copy_``s new
metadata into them. Probes do the same: the buffers of one shape, and on CUDA / NPU the read
captured over them, are made on first use and reused by every later probe of that shape (a sweep
probes each width twice, a trace forty times). Reused buffers hold what the last replay left, as
the engine's do; the dynamic replay rewrites what it reads, and the kernel-like read masks every
position past a row's length, so leftovers never change an outcome (tests compare every probe
against one made on an empty cache).

One request's row of a fresh pool is the same at every length: position ``j`` holds slot
``ps + j`` (``RequestTable.fresh_pool``). So single-request probes share one wide row per page
size and take a view of its first ``W`` columns: a (2, W) view has the shape, hence the copy
errors, of the probe's own table. Past the request's length the view holds slots of pages the
pool has not handed out, where a fresh table holds zeros; the dynamic replays copy only up to the
request's length, and the static one's extra columns are masked as above.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from workbench.backends.base import Buffers, TableBackend
from workbench.devices.graph import CapturedRead
from workbench.model.cases import TableCase
from workbench.model.geometry import cdiv
from workbench.model.request_table import RequestTable

MAX_ENTRIES = 16  # captured shapes kept per process: a sweep moves through widths in order
MAX_WIDE_ROWS = 8  # page sizes whose wide row is kept (16 MB each at a 1M context)


@dataclass(frozen=True)
class RequestSlots:
    """A probe's ``req_to_token`` and the KV pool slots its entries can name."""

    req_to_token: torch.Tensor  # (bs + 1, W) int32; row 0 is the dummy row
    num_slots: int


@dataclass
class Captured:
    """One shape's buffers and the read over them, captured on first use (a probe that does not
    read, such as a CPU sweep's, never pays for the KV pool the read gathers from)."""

    buffers: Buffers
    table: torch.Tensor  # what the kernels read (Buffers.read_table)
    page_size: int  # tokens per entry of ``table``
    num_slots: int
    path: str
    _read: CapturedRead | None = None

    def read(self) -> CapturedRead:
        if self._read is None:
            self._read = CapturedRead.capture(self.table, self.page_size, self.num_slots, path=self.path)
        return self._read


_wide_rows: OrderedDict[tuple[int, str], torch.Tensor] = OrderedDict()
_captured: OrderedDict[tuple[object, ...], Captured] = OrderedDict()


def clear() -> None:
    """Forget every cached table and capture (tests; a device reset)."""
    _wide_rows.clear()
    _captured.clear()


def request_slots(lengths: Sequence[int], width: int, page_size: int, device: torch.device | str) -> RequestSlots:
    """The request table of requests holding ``lengths`` slots each, as a fresh pool fills it.

    One request: a view of the cached wide row (see the module note). Several: ``fresh_pool``.
    """
    if len(lengths) != 1:
        table = RequestTable.fresh_pool(lengths, width, page_size, device)
        return RequestSlots(table, (sum(cdiv(n, page_size) for n in lengths) + 1) * page_size)
    key = (page_size, str(torch.device(device)))
    wide = _wide_rows.get(key)
    if wide is None or wide.shape[1] < width:
        # grow to the next power of two: a sweep over rising widths rebuilds it log2 times, not per width
        columns = 1 << max(width - 1, 1).bit_length()
        wide = torch.zeros((2, columns), dtype=torch.int32, device=device)
        torch.arange(page_size, page_size + columns, dtype=torch.int32, device=device, out=wide[1])
        _wide_rows[key] = wide
        while len(_wide_rows) > MAX_WIDE_ROWS:
            _wide_rows.popitem(last=False)
    _wide_rows.move_to_end(key)
    return RequestSlots(wide[:, :width], (cdiv(wide.shape[1], page_size) + 1) * page_size)


def captured(
    backend: TableBackend, case: TableCase, width: int, *, rows: int, num_slots: int, device: torch.device | str,
    path: str,
) -> Captured:
    """The buffers of this shape (``width``: the rule's width for the case, the cache key), made on
    first use and reused after."""
    ps = case.geometry.page_size
    key = (backend.name, rows, width, ps, backend.buffer_key(case), num_slots, str(torch.device(device)), path)
    found = _captured.get(key)
    if found is not None:
        _captured.move_to_end(key)
        return found
    buffers = backend.allocate(case.geometry, width, rows=rows, case=case, device=device)
    made = Captured(buffers, buffers.read_table, buffers.entry_tokens, num_slots, path)
    _captured[key] = made
    while len(_captured) > MAX_ENTRIES:
        _captured.popitem(last=False)
    return made


__all__ = ["Captured", "RequestSlots", "captured", "clear", "request_slots"]
