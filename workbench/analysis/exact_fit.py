"""The allocator at an exactly full free pool: batches, consistent states, and the boundary.

A decode step needs one new page for every row whose new token opens a page. With fewer free
pages than that, ``alloc_decode`` fails: out of memory on the NPU, a read past the free list on the
CUDA masked gather (which checks capacity after its kernel). The legacy NPU gather fails once
more, at the exact fit, when a row that opens no page comes after the last one that does: every
row gathers ``free_pages[opening rows before it]``, and that row's index is one past the list. So
the smallest free pool a step succeeds with is, by closed form,

    first_ok_free = needed + 1   a gather that indexes every row (the NPU's legacy one), and a
                                 non-opening row follows the last opening row
                  = needed       otherwise

and ``allocator_boundaries`` confirms it as the table sweeps do: the step at ``first_ok_free``
executed (ok) and the step one page below executed (out of memory, or a failure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from workbench import backends
from workbench.analysis.boundary import PredictionMismatch
from workbench.analysis.cases import AllocatorCase
from workbench.analysis.probe import probe_allocator
from workbench.model.allocator import Gather
from workbench.model.outcome import Outcome, ProbeResult


def batch_compositions(max_batch: int) -> dict[str, tuple[bool, ...]]:
    """Named batches: ``True`` for a row whose new token opens a page.

    The legacy gather breaks only when a non-opening row comes after the last opening row,
    so the set holds batches on both sides of that line (the seed's batch is "opener first").
    """
    n = max_batch
    half = n // 2
    batches = {
        "single opener": (True,),
        "single non-opener": (False,),
        "seed [5, 10, 7]": (True, False, False),
        "opener first": (True,) + (False,) * (n - 1),
        "opener last": (False,) * (n - 1) + (True,),
        "all open": (True,) * n,
        "none open": (False,) * n,
        "alternating, opener first": tuple(i % 2 == 0 for i in range(n)),
        "alternating, opener last": tuple(i % 2 == 1 for i in range(n)),
        "openers first half": (True,) * half + (False,) * (n - half),
        "openers second half": (False,) * (n - half) + (True,) * half,
    }
    # Drop names whose batch repeats an earlier one (small max_batch makes several coincide).
    unique: dict[str, tuple[bool, ...]] = {}
    for name, opens in batches.items():
        if opens and opens not in unique.values():
            unique[name] = opens
    return unique


def exact_fit_case(gather: Gather, page_size: int, opens: Sequence[bool], num_free: int) -> AllocatorCase:
    """A consistent allocator state: row ``i`` holds its last token on its own page ``i + 1``.

    Worked example, ps = 4, row 0 opens a page: seq_len 5 (4 old tokens + 1 new), its last token
    at slot 1 * 4 + 3 = 7, the last of page 1, and (7 + 2) % 4 == 5 % 4. Row 1 does not open one:
    seq_len 4 * 2 + 2 = 10, last token at slot 2 * 4 = 8, and (8 + 2) % 4 == 10 % 4. Free pages
    follow the owned ones, so they never hold a request's token.
    """
    ps = page_size
    seq_lens, last_loc = [], []
    for i, opening in enumerate(opens):
        page = i + 1
        if opening:
            seq_lens.append(ps * (i + 1) + 1)
            last_loc.append(page * ps + ps - 1)
        else:
            seq_lens.append(ps * (i + 1) + 2)
            last_loc.append(page * ps)
    free = tuple(range(len(opens) + 1, len(opens) + 1 + num_free))
    return AllocatorCase(gather=gather, page_size=ps, seq_lens=tuple(seq_lens), last_loc=tuple(last_loc), free_pages=free)


@dataclass(frozen=True)
class AllocatorConfig:
    """One batch of decoding rows (``True``: the row's new token opens a page) under one gather."""

    gather: Gather
    page_size: int
    opens: tuple[bool, ...]


@dataclass(frozen=True)
class AllocatorBoundary:
    first_ok_free: int  # the smallest free pool, in pages, the step succeeds with
    ok: ProbeResult  # the executed step at first_ok_free
    below: ProbeResult | None  # the executed step one page below: out of memory or a failure (None at 0)


def predict_first_ok_free(
    gathers: Sequence[str], needed: npt.ArrayLike, trailing: npt.ArrayLike
) -> npt.NDArray[np.int64]:
    """The closed form above over whole arrays: ``needed`` new pages per batch, ``trailing``
    whether a non-opening row follows its last opening row. Which gathers fail at the exact fit
    is each gather's own word (``DecodeGather.exact_fit_fails``)."""
    names = np.asarray(gathers)
    trailing_rows = np.asarray(trailing, dtype=bool)
    extra = np.zeros(len(names), dtype=bool)
    for name in np.unique(names):
        rows = names == name
        extra[rows] = backends.gather_of(str(name)).exact_fit_fails(trailing_rows[rows])
    first: npt.NDArray[np.int64] = np.asarray(needed, dtype=np.int64) + extra
    return first


def allocator_boundaries(configs: Sequence[AllocatorConfig], device: str = "cpu") -> list[AllocatorBoundary]:
    """Every config's predicted boundary, executed on both sides; ``PredictionMismatch`` if not."""
    needed = [sum(c.opens) for c in configs]
    trailing = [n > 0 and not c.opens[-1] for n, c in zip(needed, configs)]
    predicted = predict_first_ok_free([c.gather.value for c in configs], needed, trailing)
    found = []
    for config, first in zip(configs, predicted.tolist()):
        ok = probe_allocator(exact_fit_case(config.gather, config.page_size, config.opens, first), device)
        below = probe_allocator(exact_fit_case(config.gather, config.page_size, config.opens, first - 1), device) \
            if first > 0 else None
        if ok.outcome is not Outcome.OK or (below is not None and below.outcome is Outcome.OK):
            raise PredictionMismatch(
                f"{config}: predicted the first free pool that works at {first} pages, but execution gave "
                f"{ok.outcome.value} there and {below.outcome.value if below else '-'} below"
            )
        found.append(AllocatorBoundary(first, ok, below))
    return found


__all__ = ["AllocatorBoundary", "AllocatorConfig", "allocator_boundaries", "batch_compositions", "exact_fit_case",
           "predict_first_ok_free"]
