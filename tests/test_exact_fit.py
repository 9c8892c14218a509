"""The allocator's boundary: the closed form, confirmed by execution, equals an executed scan."""

from __future__ import annotations

import itertools

import pytest

from workbench.analysis.exact_fit import AllocatorConfig, allocator_boundaries, exact_fit_case
from workbench.analysis.probe import probe_allocator
from workbench.model.allocator import Gather
from workbench.model.outcome import Outcome


def _scanned_first_ok_free(config: AllocatorConfig) -> int:
    """Execute every free-pool size from 0 up; the first whose step is ok."""
    for free in range(len(config.opens) + 2):
        case = exact_fit_case(config.gather, config.page_size, config.opens, free)
        if probe_allocator(case).outcome is Outcome.OK:
            return free
    raise AssertionError(f"{config}: no free pool up to {len(config.opens) + 1} pages works")


@pytest.mark.parametrize("gather", list(Gather), ids=lambda g: g.value)
def test_boundaries_equal_an_executed_scan(gather: Gather) -> None:
    configs = [AllocatorConfig(gather, ps, opens) for ps in (2, 4, 128)
               for n in range(1, 6) for opens in itertools.product((True, False), repeat=n)]
    found = allocator_boundaries(configs)
    assert [b.first_ok_free for b in found] == [_scanned_first_ok_free(c) for c in configs]


def test_the_seed_batch_needs_one_page_more_under_the_legacy_gather() -> None:
    # the seed's batch shape (docs/semantics.md#exact-fit): the first row opens a page, the two after it do not
    seed = (True, False, False)
    legacy, clamped = allocator_boundaries([AllocatorConfig(Gather.NPU_LEGACY, 4, seed),
                                            AllocatorConfig(Gather.NPU_CLAMPED, 4, seed)])
    assert (legacy.first_ok_free, clamped.first_ok_free) == (2, 1)
    assert legacy.below is not None and legacy.below.outcome is Outcome.INDEX_ERROR
    assert legacy.below.error == "index 1 is out of bounds for dimension 0 with size 1"
    assert clamped.below is not None and clamped.below.outcome is Outcome.OUT_OF_MEMORY
