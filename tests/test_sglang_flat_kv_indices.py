"""SGLang's pooled flat kv_indices buffers (FlashInfer, FlashInfer MLA, Triton, AITER).

Expected values restate the engine's arithmetic (0.5.23): the capacities of each
``init_cuda_graph_state`` and the sums of ``assert_buffer_fits`` / the verify plan's copy, written
out again here; every committed length of a full batch is executed on real tensors.
"""

from __future__ import annotations

import random

import pytest
import torch
from reference import ceil_div, request_table_width

from workbench.backends.sglang_flat_kv_indices import BUFFERS, PooledOverflow, first_full_batch_failure, replay_flat
from workbench.model.geometry import ServingGeometry


def engine_capacity(name: str, ctx: int, ps: int, d: int, topk: int, max_bs: int) -> int:
    return {"aiter-mla-verify": max_bs * (ceil_div(ctx, ps) * ps + d),
            "eagle-draft-decode": max_bs * topk * ctx,
            "flashinfer-mla-verify": max_bs * ctx,
            "flashinfer-verify": max_bs * d * ctx}[name]


def engine_need(name: str, seq_lens: list[int], d: int, topk: int, steps: int) -> int:
    if name == "eagle-draft-decode":  # draft_kv_indices_used_len(seq_lens_sum, topk, bs, steps)
        return sum(seq_lens) * topk + topk * len(seq_lens) * steps
    return sum(s + d for s in seq_lens)


def run(name: str, g: ServingGeometry, seq_lens: list[int]) -> str:
    table = torch.arange(len(seq_lens) + 1, dtype=torch.int32)[:, None] * 1000 + torch.arange(
        g.request_table_width, dtype=torch.int32)
    try:
        overwrite = replay_flat(BUFFERS[name], g, table, range(1, len(seq_lens) + 1), seq_lens)
    except PooledOverflow:
        return "assert"
    except RuntimeError:
        return "copy-error"
    return "ok" if overwrite is None else "overwrite"


@pytest.mark.parametrize(("name", "seed"), [(n, i) for i, n in enumerate(BUFFERS)])
def test_closed_form_equals_an_executed_scan_of_full_batches(name: str, seed: int) -> None:
    rng = random.Random(seed)
    failing = 0
    for _ in range(500):
        d = rng.choice((1, 2, 4)) if name == "flashinfer-verify" else rng.choice((1, 2, 4, 6))
        g = ServingGeometry(context_len=rng.randint(2, 30), page_size=rng.choice((1, 2, 4, 16)), draft_tokens=d,
                            spec_steps=rng.randint(1, 4), spec_topk=rng.choice((1, 2)),
                            width_gen=rng.choice(("g1", "g3")), max_bs=rng.randint(1, 3))
        mode = BUFFERS[name].mode
        w = request_table_width(g.context_len, g.page_size, d, g.spec_steps, g.spec_topk, True, g.width_gen)
        bound = w - d if mode.value == "target-verify" else w - 1
        assert g.max_committed_len(mode) == bound
        capacity = engine_capacity(name, g.context_len, g.page_size, d, g.spec_topk, g.max_bs)
        scanned = None
        for s in range(1, bound + 1):
            batch = [s] * g.max_bs
            outcome = run(name, g, batch)
            over = engine_need(name, batch, d, g.spec_topk, g.spec_steps) > capacity
            expected = {"flashinfer-mla-verify": "copy-error", "flashinfer-verify": "overwrite"}.get(name, "assert")
            assert outcome == (expected if over else "ok"), (g, s)
            if over and scanned is None:
                scanned = s
        assert first_full_batch_failure(BUFFERS[name], g) == scanned, g
        failing += scanned is not None
    assert failing > 20  # the draft rows fail in every configuration: W - 1 >= ctx - steps + 1 always


def test_verify_inside_the_scheduler_cap_fails_for_flashinfer_mla_when_the_bucket_is_full() -> None:
    g = ServingGeometry(context_len=100, page_size=1, draft_tokens=4, spec_steps=3, max_bs=2)
    assert first_full_batch_failure(BUFFERS["flashinfer-mla-verify"], g) == 97  # ctx - D + 1, below ctx - 1
    assert run("flashinfer-mla-verify", g, [97, 97]) == "copy-error"
    assert run("flashinfer-mla-verify", g, [97, 50]) == "ok"  # the pool is shared: one short request makes room
    with pytest.raises(RuntimeError, match=r"The size of tensor a \(200\) must match the size of tensor b \(202\)"):
        replay_flat(BUFFERS["flashinfer-mla-verify"], g, torch.zeros((3, 200), dtype=torch.int32), [1, 2], [97, 97])


def test_flashinfer_verify_with_two_or_more_drafts_never_fails_at_real_contexts() -> None:
    for ctx in (4096, 32768, 131072):
        for d in (2, 4, 16):
            g = ServingGeometry(context_len=ctx, page_size=64, draft_tokens=d, spec_steps=d, width_gen="g3", max_bs=8)
            assert first_full_batch_failure(BUFFERS["flashinfer-verify"], g) is None


def test_aiter_needs_overshoot_and_the_assert_names_the_numbers() -> None:
    g = ServingGeometry(context_len=100, page_size=1, draft_tokens=4, spec_steps=3, max_bs=1)
    assert first_full_batch_failure(BUFFERS["aiter-mla-verify"], g) == 101  # past ctx - 1: overshoot 2
    with pytest.raises(PooledOverflow, match=r"used 105 > capacity 104 \(bs=1, seq_lens_sum=101\)"):
        replay_flat(BUFFERS["aiter-mla-verify"], g, torch.zeros((2, 108), dtype=torch.int32), [1], [101])
