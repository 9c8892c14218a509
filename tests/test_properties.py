"""Property tests over random engine states: executed probes against an independent predicate,
monotone boundaries, and allocator workloads that must keep their books straight.

CI runs the default profile (more than 10,000 generated cases in all; the count is printed at the
end of the run). ``WORKBENCH_PROPERTIES=long`` runs 100 times as many.
"""

from __future__ import annotations

import dataclasses
import os

import hypothesis.strategies as st
from hypothesis import HealthCheck, assume, given, settings
from reference import alloc_decode, predict_table_probe, request_table_width

from workbench.analysis import capture_cache
from workbench.analysis.boundary import find_boundary
from workbench.analysis.cases import AllocatorCase, TableCase
from workbench.analysis.probe import probe_allocator, probe_table
from workbench.backends import gather_of
from workbench.backends.sglang.dsa_page_table import Replay
from workbench.model.allocator import Gather, PagedAllocator
from workbench.model.geometry import Mode, ServingGeometry

SCALE = 100 if os.environ.get("WORKBENCH_PROPERTIES") == "long" else 1
CASES = {"count": 0}  # read by conftest.py for the end-of-run summary


def _settings(examples: int) -> settings:
    return settings(max_examples=examples * SCALE, deadline=None, derandomize=SCALE == 1, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _count() -> None:
    CASES["count"] += 1


context_lens = st.one_of(st.integers(1, 600), st.integers(1, 1 << 20), st.sampled_from([32768, 90000, 131072, 202752]))


@st.composite
def table_cases(draw: st.DrawFn) -> TableCase:
    component = draw(st.sampled_from(["npu-block-table", "dsa-page-table"]))
    d = draw(st.one_of(st.just(0), st.integers(1, 32)))
    geometry = ServingGeometry(
        context_len=draw(context_lens),
        page_size=draw(st.one_of(st.integers(1, 256), st.sampled_from([1, 64, 128, 256]))),
        draft_tokens=d,
        spec_steps=draw(st.integers(1, 8)),
        spec_topk=draw(st.integers(1, 10)),
        draft_has_kv=draw(st.booleans()),
        max_bs=4,
        width_gen=draw(st.sampled_from(["g1", "g2", "g3"])),
    )
    modes = ["decode"] + (["target-verify", "draft-extend"] if d else [])
    if d and component == "npu-block-table":
        modes.append("draft-decode")
    mode = Mode(draw(st.sampled_from(modes)))
    step_id = draw(st.integers(0, geometry.spec_steps - 1)) if mode is Mode.DRAFT_DECODE else 0
    bound = geometry.max_committed_len(mode, step_id)
    assume(bound >= 1)  # a context of one token without speculation holds no committed length
    # mixed lengths, biased towards the end of the table where the boundaries are
    near_end = st.integers(max(1, bound - 3 * geometry.page_size - 40), bound)
    seq_lens = tuple(draw(st.lists(st.one_of(near_end, st.integers(1, bound)), min_size=1, max_size=4)))
    return TableCase(
        component=component, geometry=geometry, mode=mode, seq_lens=seq_lens, step_id=step_id,
        rule=draw(st.sampled_from(["context", "context-plus-draft", "req-to-token"])),
        replay=Replay(draw(st.sampled_from(["dynamic", "static"]))) if component == "dsa-page-table" else Replay.DYNAMIC,
        hybrid_swa=draw(st.booleans()) if component == "npu-block-table" else False,
        accept_len=draw(st.integers(1, 4)),
    )


def _w(g: ServingGeometry) -> int:
    return request_table_width(g.context_len, g.page_size, g.draft_tokens, g.spec_steps, g.spec_topk, g.draft_has_kv,
                               g.width_gen)


@_settings(4000)
@given(table_cases())
def test_executed_table_probe_equals_the_spec_predicate(case: TableCase) -> None:
    _count()
    g = case.geometry
    result = probe_table(case)
    expected = predict_table_probe(case.component, case.rule, g.context_len, g.page_size, g.draft_tokens, _w(g),
                                   case.mode.value, list(case.seq_lens), case.step_id, case.replay.value, case.accept_len)
    assert (result.outcome.value, result.error) == expected
    assert result.request_table_width == _w(g)


@_settings(600)
@given(table_cases(), table_cases())
def test_reused_buffers_and_the_skipped_read_never_change_a_probe(case: TableCase, other: TableCase) -> None:
    """A probe on buffers an earlier probe of the same geometry left behind, with or without the
    kernel-like read, equals the probe on an empty cache: the probe's result, path aside."""
    _count()
    capture_cache.clear()
    alone = probe_table(case)
    assert alone.path == "eager"
    capture_cache.clear()
    probe_table(dataclasses.replace(other, geometry=case.geometry, component=case.component, rule=case.rule))
    probe_table(dataclasses.replace(case, seq_lens=(case.geometry.max_committed_len(case.mode, case.step_id),)))
    warm = probe_table(case)
    skipped = probe_table(case, kernel_read=False)
    assert warm == alone
    assert skipped.path == "none"
    assert dataclasses.replace(skipped, path="eager") == alone


@_settings(300)
@given(table_cases(), st.randoms(use_true_random=False))
def test_boundaries_are_monotone(case: TableCase, rng) -> None:  # type: ignore[no-untyped-def]
    _count()
    case = dataclasses.replace(case, seq_lens=())
    boundary = find_boundary(case)
    assert boundary.confirmed
    bound = boundary.max_seq_len
    first = boundary.first_failing_seq_len
    passing = range(1, (first or bound + 1))
    failing = range(first, bound + 1) if first else range(0)
    for sample, must_fail in ((passing, False), (failing, True)):
        picks = {sample[0], sample[-1], *(rng.choice(sample) for _ in range(3))} if len(sample) else set()
        for s in picks:
            assert probe_table(dataclasses.replace(case, seq_lens=(s,))).outcome.failed is must_fail, s


@st.composite
def decode_states(draw: st.DrawFn) -> AllocatorCase:
    ps = draw(st.one_of(st.integers(1, 256), st.sampled_from([1, 2, 4, 64, 128])))
    bs = draw(st.integers(1, 12))
    pages = draw(st.permutations(list(range(1, 3 * bs + 12))))
    seq_lens, last_loc = [], []
    for row in range(bs):
        opens = draw(st.booleans())
        full_pages = draw(st.integers(0, 4))
        offset = 1 if opens else draw(st.integers(2, max(2, ps)))
        seq = max(2, full_pages * ps + offset) if ps > 1 else draw(st.integers(2, 99))
        seq_lens.append(seq)
        last_loc.append(pages[row] * ps + (seq - 2) % ps)
    rest = pages[bs:]
    opening = sum(1 for s in seq_lens if s % ps == 1 % ps)
    # exact fit is the interesting pool size, so draw it often
    num_free = draw(st.one_of(st.just(opening), st.integers(0, len(rest))))
    free = rest[: min(num_free, len(rest))]
    return AllocatorCase(gather=Gather(draw(st.sampled_from([g.value for g in Gather]))), page_size=ps,
                         seq_lens=tuple(seq_lens), last_loc=tuple(last_loc), free_pages=tuple(free))


@_settings(4000)
@given(decode_states())
def test_alloc_decode_equals_the_spec_predicate(case: AllocatorCase) -> None:
    _count()
    result = probe_allocator(case)
    outcome, out, free_after = alloc_decode(case.page_size, list(case.seq_lens), list(case.last_loc),
                                            list(case.free_pages), case.gather.value)
    assert result.outcome.value == outcome
    if outcome == "ok":
        assert result.out_cache_loc == out
        assert result.free_pages_after == free_after


operations = st.lists(st.tuples(st.sampled_from(["extend", "decode", "verify", "free", "fill"]), st.integers(0, 10**6)),
                      min_size=5, max_size=40)


@_settings(1700)
@given(st.integers(1, 64), st.integers(4, 48), st.booleans(), operations)
def test_allocator_workloads_keep_integrity_and_leak_nothing(ps: int, num_pages: int, need_sort: bool,
                                                             ops: list[tuple[str, int]]) -> None:
    _count()
    alloc = PagedAllocator(ps, num_pages, need_sort=need_sort)
    requests: list[list[int]] = []  # each request's slots in position order
    for op, r in ops:
        if op in ("extend", "fill") or not requests:
            # "fill" takes exactly what is free: the exact-fit pools the legacy gather trips on
            free_tokens = alloc.available_size()
            n = free_tokens if op == "fill" and free_tokens else 1 + r % (3 * ps)
            slots = alloc.alloc_extend([0], [n], [-1])
            if slots is not None:
                requests.append(slots.tolist())
        elif op == "decode":
            seq = [len(slots) + 1 for slots in requests]
            out = alloc.alloc_decode(seq, [slots[-1] for slots in requests], gather_of("npu-clamped" if r % 2 else "cuda-masked"))
            if out is not None:
                for slots, slot in zip(requests, out.tolist()):
                    slots.append(slot)
        elif op == "verify":  # speculative verify with ps > 1: extend by D tokens from prefix s
            victim = requests[r % len(requests)]
            d = 1 + r % 8
            out = alloc.alloc_extend([len(victim)], [len(victim) + d], [victim[-1]])
            if out is not None:
                victim.extend(out.tolist())
        else:
            alloc.free(requests.pop(r % len(requests)))
        alloc.check_integrity()
        every = [s for slots in requests for s in slots]
        assert len(every) == len(set(every))
        assert all(slot % ps == k % ps for slots in requests for k, slot in enumerate(slots))
        assert all(slot // ps != 0 for slot in every)
    for slots in requests:
        alloc.free(slots)
    alloc.check_integrity()
    alloc.merge_and_sort_free()
    assert sorted(alloc.free_pages.tolist()) == list(range(1, num_pages + 1))
