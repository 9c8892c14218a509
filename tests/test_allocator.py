"""The paged allocator: the seed vector, the three gathers against a plain-Python reference,
``alloc_extend``'s three parts, and integrity under random workloads."""

from __future__ import annotations

import random

import pytest
import torch
from reference import alloc_decode, alloc_extend, ceil_div

from workbench.analysis.cases import AllocatorCase, parse_case
from workbench.analysis.probe import probe_allocator
from workbench.backends import gather_of
from workbench.model.allocator import IntegrityError, PagedAllocator
from workbench.model.outcome import Outcome

SEED = dict(component="allocator", page_size=4, seq_lens=[5, 10, 7], last_loc=[11, 20, 29], free_pages=[11])


def _probe(**data: object):
    case = parse_case(data)
    assert isinstance(case, AllocatorCase)
    return probe_allocator(case)


def test_exact_fit_seed_vector() -> None:
    before = _probe(**SEED, gather="npu-legacy")
    assert (before.outcome, before.error) == (Outcome.INDEX_ERROR, "index 1 is out of bounds for dimension 0 with size 1")
    after = _probe(**SEED, gather="npu-clamped")
    assert (after.outcome, after.out_cache_loc, after.free_pages_after) == (Outcome.OK, [44, 21, 30], [])
    cuda = _probe(**SEED, gather="cuda-masked")
    assert (cuda.outcome, cuda.out_cache_loc) == (Outcome.OK, [44, 21, 30])


def _random_decode_state(rng: random.Random) -> dict:
    ps = rng.choice([1, 2, 4, 16, 64])
    bs = rng.randint(1, 8)
    pages = list(range(1, 64))
    rng.shuffle(pages)
    seq_lens, last_loc = [], []
    for _ in range(bs):
        page = pages.pop()
        seq = rng.randint(1, 3) * ps + rng.randint(1, ps) if ps > 1 else rng.randint(2, 50)
        seq = max(seq, 2)
        # the last token (position seq - 2) sits at offset (seq - 2) % ps of the request's last page
        seq_lens.append(seq)
        last_loc.append(page * ps + (seq - 2) % ps)
    free = pages[: rng.randint(0, 6)]
    return dict(page_size=ps, seq_lens=seq_lens, last_loc=last_loc, free_pages=free)


@pytest.mark.parametrize("gather", ["npu-legacy", "npu-clamped", "cuda-masked"])
def test_alloc_decode_matches_the_reference_on_random_states(gather: str) -> None:
    rng = random.Random(7)
    outcomes = set()
    for _ in range(400):
        state = _random_decode_state(rng)
        result = _probe(component="allocator", gather=gather, **state)
        expected, out, free_after = alloc_decode(state["page_size"], state["seq_lens"], state["last_loc"],
                                                 state["free_pages"], gather)
        assert result.outcome.value == expected, state
        if expected == "ok":
            assert result.out_cache_loc == out
            assert result.free_pages_after == free_after
        outcomes.add(expected)
    # the random states must have exercised more than the happy path
    assert len(outcomes) >= 2


def test_exact_fit_is_where_the_legacy_gather_fails() -> None:
    # one page-opening row followed by rows that open none: fails only when free == needed
    base = dict(component="allocator", page_size=4, seq_lens=[5, 10], last_loc=[11, 20])
    assert _probe(**base, gather="npu-legacy", free_pages=[11, 12]).outcome is Outcome.OK
    assert _probe(**base, gather="npu-legacy", free_pages=[11]).outcome is Outcome.INDEX_ERROR
    assert _probe(**base, gather="npu-legacy", free_pages=[]).outcome is Outcome.OUT_OF_MEMORY
    assert _probe(**base, gather="cuda-masked", free_pages=[]).outcome is Outcome.SILENT_OVERREAD


def test_parked_pages_are_merged_and_sorted_when_the_free_list_runs_short() -> None:
    result = _probe(component="allocator", gather="npu-clamped", page_size=4, seq_lens=[5, 9], last_loc=[11, 31],
                    free_pages=[20], parked_pages=[15, 9])
    assert result.outcome is Outcome.OK
    assert result.out_cache_loc == [9 * 4, 15 * 4]
    assert result.free_pages_after == [20]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (dict(last_loc=[12, 20, 29]), "last_loc: 12 is inconsistent with seq_lens 5"),
        (dict(last_loc=[11, 20]), "last_loc: 2 entries for 3 seq_lens"),
        (dict(free_pages=[0]), "page 0 is not a page id"),
        (dict(free_pages=[11, 11]), "a page is listed twice"),
        (dict(free_pages=[5]), "page 5 is listed free but holds a request's last token"),
    ],
)
def test_inconsistent_allocator_states_are_invalid(change: dict, reason: str) -> None:
    result = _probe(**{**SEED, "gather": "npu-clamped", **change})
    assert result.outcome is Outcome.INVALID
    assert result.error is not None and reason in result.error


def test_alloc_extend_three_parts_match_the_reference() -> None:
    rng = random.Random(3)
    for _ in range(300):
        ps = rng.choice([1, 2, 4, 8, 64])
        alloc = PagedAllocator(ps, 40)
        order = list(range(1, 41))
        rng.shuffle(order)
        alloc.free_pages = torch.tensor(order)
        prefix = rng.randint(0, 3 * ps)
        seq = prefix + rng.randint(0, 3 * ps)
        # the old partial page, if any, is page 40's... take it off the free list first
        if prefix:
            held = [int(p) for p in alloc.free_pages[: ceil_div(prefix, ps)]]
            alloc.free_pages = alloc.free_pages[ceil_div(prefix, ps):]
            alloc.owned_pages[held] = True
            last_loc = held[-1] * ps + (prefix - 1) % ps
        else:
            last_loc = -1
        free_before = alloc.free_pages.tolist()
        out = alloc.alloc_extend([prefix], [seq], [last_loc])
        assert out is not None
        assert out.tolist() == alloc_extend(ps, prefix, seq, last_loc, free_before)
        assert len(free_before) - len(alloc.free_pages) == ceil_div(seq, ps) - ceil_div(prefix, ps)
        alloc.check_integrity()


def test_alloc_extend_returns_none_when_short_and_takes_nothing() -> None:
    alloc = PagedAllocator(4, 2)
    assert alloc.alloc_extend([0], [9], [-1]) is None
    assert alloc.free_pages.tolist() == [1, 2]
    alloc.check_integrity()


def test_random_workloads_keep_integrity_and_leak_nothing() -> None:
    rng = random.Random(11)
    for trial in range(30):
        ps = rng.choice([1, 2, 4, 16])
        alloc = PagedAllocator(ps, 64, need_sort=trial % 2 == 1)
        requests: dict[int, list[int]] = {}  # id -> slots in position order
        next_id = 0
        for _ in range(120):
            action = rng.random()
            if action < 0.3 or not requests:
                n = rng.randint(1, 3 * ps)
                slots = alloc.alloc_extend([0], [n], [-1])
                if slots is not None:
                    requests[next_id] = slots.tolist()
                    next_id += 1
            elif action < 0.8:
                ids = list(requests)
                seq = [len(requests[i]) + 1 for i in ids]
                last = [requests[i][-1] for i in ids]
                out = alloc.alloc_decode(seq, last, gather_of(rng.choice(["npu-clamped", "cuda-masked"])))
                if out is not None:
                    for i, slot in zip(ids, out.tolist()):
                        requests[i].append(slot)
            else:
                victim = rng.choice(list(requests))
                alloc.free(requests.pop(victim))
            alloc.check_integrity()
            every = [s for slots in requests.values() for s in slots]
            assert len(every) == len(set(every)), "a slot was handed to two requests"
            for slots in requests.values():  # page aligned: position k sits at offset k % ps
                assert all(slot % ps == k % ps for k, slot in enumerate(slots))
        for slots in requests.values():
            alloc.free(slots)
        alloc.check_integrity()
        alloc.merge_and_sort_free()
        assert sorted(alloc.free_pages.tolist()) == list(range(1, 65)), "pages leaked"


def test_integrity_check_catches_a_double_free_and_a_lost_page() -> None:
    alloc = PagedAllocator(4, 8)
    slots = alloc.alloc_extend([0], [5], [-1])
    assert slots is not None
    alloc.free(slots)
    alloc.free(slots)
    with pytest.raises(IntegrityError, match="2 pages were freed while not owned"):
        alloc.check_integrity()
    lost = PagedAllocator(4, 8)
    lost.free_pages = lost.free_pages[1:]
    with pytest.raises(IntegrityError, match="1 pages are neither free, parked nor owned"):
        lost.check_integrity()


def _in_page_allocator() -> PagedAllocator:
    """ps 4; request 0 holds page 1 (prefix 8), request 1 page 2 (prefix 9); pages 3..207 free."""
    return PagedAllocator.from_free_list(4, list(range(3, 208)), device="cpu")


def test_an_extend_ending_inside_its_prefix_page_takes_only_that_page_when_guarded() -> None:
    # Worked by hand: request 1 (prefix 9, seq 11) writes slots 9 and 10, after last_loc 8;
    # request 0 (prefix 8, seq 810) opens 201 pages, 3..203, its last token (809) on page 203 slot 1.
    out = _in_page_allocator().alloc_extend([8, 9], [810, 11], [7, 8])
    assert out is not None
    assert out[-2:].tolist() == [9, 10]
    assert out[:4].tolist() == [12, 13, 14, 15] and out[801] == 203 * 4 + 1
    assert len(set(out.tolist())) == len(out)


def test_the_unguarded_tail_writes_over_the_previous_request() -> None:
    # SGLang 0.5.0rc2 to 0.5.6 on Ascend: request 1 (flat positions 802, 803) still writes
    # 11 % 4 = 3 slots of the last page opened so far (page 203: slots 812, 813, 814) over the
    # three positions ending at its end, 801..803; 801 is request 0's token 809 (slot 813).
    alloc = _in_page_allocator()
    out = alloc.alloc_extend([8, 9], [810, 11], [7, 8], tail="unguarded")
    assert out is not None
    guarded = _in_page_allocator().alloc_extend([8, 9], [810, 11], [7, 8])
    assert guarded is not None and guarded[801:].tolist() == [813, 9, 10]
    assert out[801:].tolist() == [812, 813, 814]
    assert torch.equal(out[:801], guarded[:801])
    # slot 812 is now token 808's and token 809's; request 1's own slots 9 and 10 are never written
    assert alloc.double_handouts == 1 and not {9, 10} & set(out.tolist())


def test_an_unguarded_tail_reaching_before_the_batch_is_a_size_error() -> None:
    # The first request ends inside its page with fewer tokens before its end (2) than its tail (3):
    # the slice out[-1:2] is empty and three slots do not fit in it.
    alloc = PagedAllocator.from_free_list(4, [5, 6], device="cpu")
    with pytest.raises(RuntimeError, match="size"):
        alloc.alloc_extend([9], [11], [8], tail="unguarded")
