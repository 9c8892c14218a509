"""SGLang's request table as a buffer: the speculative decode step's reservation written into ``req_to_token``.

With spec v2 (every speculative run from 0.5.14; EAGLE with ``SGLANG_ENABLE_SPEC_V2`` before), each
decode batch reserves KV slots ahead of the drafts and the verify, when the batch is formed: per
request, from its allocated length ``a`` to ``nxt`` (paths inside the wheel):

* ``committed-plus-reserve`` (0.5.6-0.5.10, ``speculative/eagle_info_v2.py:96-103`` in 0.5.10):
  ``nxt = committed + R``;
* ``at-least-allocated`` (0.5.12-0.5.15, ``eagle_info_v2.py:43-60`` in 0.5.14):
  ``nxt = max(a, committed + R)``;
* ``page-aligned`` (0.5.16-0.5.23, ``mem_cache/allocation_sizing.py:73-93`` in 0.5.23):
  ``nxt = max(a, cdiv(committed + R, ps) * ps)``;

with ``R = 2 * max(steps * topk, D)`` at page size 1 (``get_alloc_reserve_per_decode``: the double
buffer absorbs the committed length's lag under overlap). The new slots go into
``req_to_token[row, a:nxt]`` through the Triton kernel ``assign_req_to_token_pool``
(``mem_cache/allocation.py:692-721`` in 0.5.23), which stores at ``row * W + col`` masked by ``nxt``
alone: past the row's ``W = ctx + extra`` columns the stores land in the next pool row (another
request's prefix, or a free row) and, from the last row, past the table. The row is
``ctx + 4 + D`` wide at page size 1 in every release (the width generations widen it only at
``ps > 1``), so the reservation passes it once ``committed > W - R``:

    first failing committed length = floor(W / ps) * ps - R + 1     (page-aligned)
                                   = W - R + 1                       (the other rules)

Worked example (0.5.23, ctx 32768, ps 1): NGRAM with 16 drafts (topk 10) has ``R = 32`` and
``W = 32788``: from 32757 on; EAGLE (5, 4, 8) ``R = 40``, ``W = 32780``: from 32741 on; EAGLE
(3, 1, 4) ``R = 8``, ``W = 32776``: from 32769, past anything the scheduler lets a request commit.

Checks, by what a release does before the writes:

* ``none``: the stores run past the row (``silent-overwrite``);
* ``paged-topk-assert`` (0.5.13 on): at ``ps > 1`` with ``topk > 1`` only, an assert that the
  largest ``nxt`` fits the row (``host-assert``); at page size 1 the stores run unchecked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from workbench.backends.base import INT32_BYTES
from workbench.model.geometry import ServingGeometry, cdiv
from workbench.model.outcome import Outcome, Overwrite, ProbeResult

NAME = "sglang-req-to-token"
CHECKS = ("none", "paged-topk-assert")


@dataclass(frozen=True)
class ReservationRule:
    """How one release computes a request's next allocated length (``nxt``)."""

    name: str
    next_len: Callable[[ServingGeometry, int, int], int]  # (g, committed, allocated) -> nxt
    aligned: bool  # rounds up to whole pages (the closed form's floor(W / ps) * ps)
    change: str


def reserve(g: ServingGeometry) -> int:
    """``R = 2 * alloc_len_per_decode`` (``get_alloc_reserve_per_decode``)."""
    return 2 * g.alloc_len_per_decode


RULES: dict[str, ReservationRule] = {
    "committed-plus-reserve": ReservationRule(
        "committed-plus-reserve", lambda g, c, a: c + reserve(g), False,
        "0.5.6-0.5.10: nxt = committed + R (eagle_info_v2.py:96-103 in 0.5.10)"),
    "at-least-allocated": ReservationRule(
        "at-least-allocated", lambda g, c, a: max(a, c + reserve(g)), False,
        "0.5.12-0.5.15: nxt = max(allocated, committed + R) (eagle_info_v2.py:43-60 in 0.5.14)"),
    "page-aligned": ReservationRule(
        "page-aligned", lambda g, c, a: max(a, cdiv(c + reserve(g), g.page_size) * g.page_size), True,
        "0.5.16-0.5.23: nxt = max(allocated, cdiv(committed + R, ps) * ps) (allocation_sizing.py:73-93 in 0.5.23)"),
}


class ReservationRefused(AssertionError):
    """The release's host assert refused the step (``paged-topk-assert``), with its numbers."""


def checked(g: ServingGeometry, check: str) -> bool:
    """Whether ``check`` runs for this launch: the assert guards ``ps > 1`` with ``topk > 1`` only."""
    if check not in CHECKS:
        raise ValueError(f"check: {check!r} is not one of {', '.join(CHECKS)}")
    return check == "paged-topk-assert" and g.page_size > 1 and g.spec_topk > 1


def applies(g: ServingGeometry) -> str | None:
    """Why a setting writes no reservation, or None: only a speculative decode step reserves."""
    return None if g.speculative else "no speculative decoding: a decode step takes one slot at s (alloc_for_decode)"


def first_failure(g: ServingGeometry, rule: str) -> int | None:
    """The smallest committed length whose reservation passes the row, for a request whose allocated
    length is one a run leaves (at most the previous reservation); None when the row holds every
    length it can hold. Closed form (module note); ``tests/test_req_to_token.py`` scans lengths."""
    width, ps = g.request_table_width, g.page_size
    top = floor_to_page(width, ps) if RULES[rule].aligned else width
    first = max(top - reserve(g) + 1, 1)
    return first if first <= width - 1 else None


def floor_to_page(n: int, page_size: int) -> int:
    return n // page_size * page_size


def outcome_of(g: ServingGeometry, check: str) -> Outcome:
    return Outcome.HOST_ASSERT if checked(g, check) else Outcome.SILENT_OVERWRITE


def next_lens(g: ServingGeometry, rule: str, committed: Sequence[int], allocated: Sequence[int]) -> list[int]:
    return [RULES[rule].next_len(g, c, a) for c, a in zip(committed, allocated)]


@dataclass(frozen=True)
class Reservation:
    """One step's reservation replayed: each request's new allocated length and the first store past
    a row (None: every store inside its row)."""

    allocated: list[int]
    overwrite: Overwrite | None


def replay(g: ServingGeometry, rule: str, check: str, table: torch.Tensor, table_rows: int, rows: Sequence[int],
           committed: Sequence[int], allocated: Sequence[int], slots: torch.Tensor) -> Reservation:
    """Write one step's reservation into ``table`` as the engine's kernel does.

    ``table`` is flat: ``table_rows`` rows of ``W`` back to back, then any spare entries (the memory
    past the pool's allocation; stores past ``table`` are dropped). ``slots`` are the allocator's
    new slots in batch order. The host check runs first (``ReservationRefused``). Requests are
    written in batch order, so where a spill meets another request's own stores the later request's
    store stays (the interpreter's program order; on a GPU the programs race).

    Worked example: W 8, R 4, a request in row 1 at committed 6, allocated 6: it writes columns 6..9,
    the last two into row 2's columns 0 and 1.
    """
    width = g.request_table_width
    nxt = next_lens(g, rule, committed, allocated)
    if checked(g, check) and max(nxt) > width:
        raise ReservationRefused(f"spec v2 page>1 topk>1 draft over-allocation ({max(nxt)}) exceeds "
                                 f"req_to_token row width ({width}); page_size={g.page_size}")
    flat = table.reshape(-1)
    offset, first = 0, None
    for i, (row, a, n) in enumerate(zip(rows, allocated, nxt)):
        count = max(0, n - a)
        start = row * width + a
        end = min(start + count, flat.numel())
        if end > start:
            flat[start:end] = slots[offset : offset + end - start].to(flat.dtype)
        offset += count
        if n > width and first is None:
            into = row + 1 if row + 1 < table_rows else None
            first = Overwrite(writer=i, row=into, entries=n - max(a, width))
    return Reservation(nxt, first)


def table_bytes(g: ServingGeometry, rows: int) -> int:
    """The request table's bytes: ``rows`` rows of ``W`` int32 (the pool's ``max_running_requests + 1``)."""
    return rows * g.request_table_width * INT32_BYTES


def safe_extra(g: ServingGeometry, reachable: int, rule: str) -> int:
    """Columns a row needs beyond ``ctx`` so the reservation at ``reachable`` stays inside it."""
    return max(g.req_to_token_extra, RULES[rule].next_len(g, reachable, 0) - g.context_len)


def probe(g: ServingGeometry, rule: str, check: str, committed: Sequence[int], device: torch.device | str = "cpu"
          ) -> ProbeResult:
    """The step executed on a table whose rows 1.. hold the batch (row 0: the padding row) and one
    more pool row after it (another request's, or free), each request freshly prefilled (allocated =
    committed), with spare memory after the pool."""
    width, bs = g.request_table_width, len(committed)
    nxt = next_lens(g, rule, committed, committed)
    spare = cdiv(max(0, max(nxt) - width), width) + 1
    table_rows = bs + 2
    table = torch.full(((table_rows + spare) * width,), -1, dtype=torch.int32, device=device)
    slots = torch.arange(1, 1 + sum(n - c for n, c in zip(nxt, committed)), dtype=torch.int32, device=device)
    try:
        done = replay(g, rule, check, table, table_rows, range(1, bs + 1), committed, committed, slots)
    except ReservationRefused as error:
        return ProbeResult(Outcome.HOST_ASSERT, f"AssertionError: {error}", buffer_width=width,
                           request_table_width=width, device=str(device))
    if done.overwrite is not None:
        return ProbeResult(Outcome.SILENT_OVERWRITE, done.overwrite.message("req_to_token"), buffer_width=width,
                           request_table_width=width, device=str(device))
    return ProbeResult(Outcome.OK, buffer_width=width, request_table_width=width, device=str(device))


@dataclass(frozen=True)
class ReservationBackend:
    """The registry's view of this module (``backends.RESERVATION_BACKENDS``)."""

    name: str
    engine: str
    device_family: str
    buffer: str
    rules: dict[str, ReservationRule]
    source: str

    def first_failure(self, g: ServingGeometry, rule: str) -> int | None:
        return first_failure(g, rule)

    def applies(self, g: ServingGeometry) -> str | None:
        return applies(g)

    def outcome_of(self, g: ServingGeometry, check: str) -> Outcome:
        return outcome_of(g, check)

    def probe(self, g: ServingGeometry, rule: str, check: str, committed: Sequence[int],
              device: torch.device | str = "cpu") -> ProbeResult:
        return probe(g, rule, check, committed, device)


BACKEND = ReservationBackend(
    name=NAME, engine="sglang", device_family="cuda", buffer="req_to_token", rules=RULES,
    source="speculative/eagle_utils.py:857-921, mem_cache/allocation.py:692-721, 780-848 (0.5.23)")

__all__ = ["BACKEND", "CHECKS", "RULES", "Reservation", "ReservationBackend", "ReservationRefused", "ReservationRule",
           "applies", "first_failure", "next_lens", "probe", "replay", "reserve"]
