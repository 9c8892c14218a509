"""SGLang's flat kv_indices buffers pooled across a batch (FlashInfer, FlashInfer MLA, Triton, AITER).

Expected values restate the engine's arithmetic as read in the wheels (file:line in each backend
module's note and in data/engines.json): the capacity each ``init_cuda_graph_state`` (or eager
call) allocates, what ``generate_draft_decode_kv_indices`` / ``create_flashinfer_kv_indices_triton``
store per request, ``draft_kv_indices_used_len`` and ``assert_buffer_fits``'s message, written out
again here; every committed length of the worst batch is executed on real tensors.
"""

from __future__ import annotations

import random

import pytest
import torch
from reference import ceil_div, request_table_width

from workbench import backends
from workbench.backends.pooled import PooledOverflow
from workbench.engines.store.versions import load_versions
from workbench.model.geometry import ServingGeometry

BUFFERS = [(b.name, buf.key, rule) for b in backends.POOLED_BACKENDS for buf in b.buffers for rule in buf.rules]


def engine_capacity(rule: str, ctx: int, ps: int, d: int, topk: int, max_bs: int, requests: int) -> int:
    """Entries of one step row, as each version's ``init_cuda_graph_state`` (or eager call) sizes it."""
    return {"max-bs-ctx": max_bs * ctx,  # 0.5.10 FlashInfer draft, FlashInfer MLA verify
            "max-bs-topk-ctx": max_bs * topk * ctx,  # draft_kv_indices_buffer_width
            "batch-topk-ctx": requests * topk * ctx,  # eager: (steps, batch_size * topk * ctx) per call
            "max-tokens-ctx": max_bs * d * ctx,  # FlashInfer verify: max_num_tokens = max_bs * D
            "paged-ctx": max_bs * ceil_div(ctx, ps),  # AITER 0.5.10
            "paged-ctx-plus-draft": max_bs * (ceil_div(ctx, ps) * ps + d)}[rule]  # AITER 0.5.14 on


def engine_used(mode: str, seq_lens: list[int], d: int, topk: int, steps: int) -> int:
    """What the last step row needs: draft_kv_indices_used_len(sum, topk, topk * n, steps) for a
    draft; sum(seq_lens + D) (kv_lens of an MLA verify) otherwise."""
    if mode.startswith("draft-decode"):
        return sum(seq_lens) * topk + topk * len(seq_lens) * steps
    return sum(s + d for s in seq_lens)


def run(backend: str, key: str, rule: str, check: str, g: ServingGeometry, seq_lens: list[int]) -> str:
    return backends.pooled_backend_of(backend).buffer(key).probe(g, rule, check, seq_lens).outcome.value


@pytest.mark.parametrize(("backend", "key", "rule"), BUFFERS)
def test_closed_form_equals_an_executed_scan_of_the_worst_batch(backend: str, key: str, rule: str) -> None:
    buffer = backends.pooled_backend_of(backend).buffer(key)
    rng = random.Random(f"{backend}{key}{rule}")
    failing = tried = 0
    while tried < 60:
        d = rng.choice((1, 2, 4, 6))
        g = ServingGeometry(context_len=rng.randint(2, 40), page_size=1, draft_tokens=d,
                            spec_steps=rng.randint(1, 4), spec_topk=rng.choice((1, 2, 3)),
                            width_gen=rng.choice(("g1", "g3")), max_bs=rng.randint(1, 3))
        if buffer.applies(g) is not None:
            continue
        tried += 1
        n = 1 if key.endswith("eager") else g.max_bs  # a per-call buffer fails for one request as for many
        w = request_table_width(g.context_len, 1, d, g.spec_steps, g.spec_topk, True, g.width_gen)
        bound = w - d if buffer.mode.value == "target-verify" else w - 1
        capacity = engine_capacity(rule, g.context_len, 1, d, g.spec_topk, g.max_bs, n)
        check = rng.choice(("assert", "copy", "none"))
        scanned = None
        for s in range(1, bound + 1):
            over = engine_used(key, [s] * n, d, g.spec_topk, g.spec_steps) > capacity
            expected = {"assert": "host-assert", "copy": "shape-error", "none": "silent-overwrite"}[check]
            assert run(backend, key, rule, check, g, [s] * n) == (expected if over else "ok"), (g, s, check)
            if over and scanned is None:
                scanned = s
        assert buffer.first_failure(g, rule) == scanned, g
        failing += scanned is not None
    assert failing > 0


def test_the_assert_speaks_the_engines_words() -> None:
    """assert_buffer_fits: f"{what}: used {used} > capacity {capacity}" + " (bs=..., seq_lens_sum=...)"."""
    g = ServingGeometry(context_len=100, page_size=1, draft_tokens=4, spec_steps=3, spec_topk=2, max_bs=2)
    draft = backends.pooled_backend_of("sglang-flashinfer-kv-indices").buffer("draft-decode")
    result = draft.probe(g, "max-bs-topk-ctx", "assert", [98, 98])  # 2 * 2 * (98 + 3) = 404 > 400
    assert result.outcome.value == "host-assert"
    assert result.error == ("AssertionError: EAGLE draft kv_indices row (size max_bs * topk * max_context_len): "
                            "used 404 > capacity 400 (bs=4, seq_lens_sum=196)")
    verify = backends.pooled_backend_of("sglang-aiter-kv-indices").buffer("target-verify")
    g1 = ServingGeometry(context_len=100, page_size=1, draft_tokens=4, spec_steps=3, max_bs=1)
    with pytest.raises(PooledOverflow, match=r"^aiter target_verify kv_indices: used 105 > capacity 104 "
                                             r"\(bs=1, seq_lens_sum=101\)$"):
        verify.replay(g1, "paged-ctx-plus-draft", "assert", torch.zeros((3, 120), dtype=torch.int32), [1], [101])


def test_an_unchecked_draft_row_spills_into_the_next_steps_row_then_past_the_buffer() -> None:
    """Triton's draft buffer (steps, max_bs * topk * ctx), no check: ctx 10, topk 1, steps 3, one
    request at s = 8 writes 9, 10, 11 entries into rows 0, 1, 2 of 10: row 2 spills 1 past the
    buffer; at s = 9 row 1 spills 1 into row 2 first."""
    g = ServingGeometry(context_len=10, page_size=1, draft_tokens=4, spec_steps=3, max_bs=1)
    buffer = backends.pooled_backend_of("sglang-triton-kv-indices").buffer("draft-decode")
    at8 = buffer.probe(g, "max-bs-topk-ctx", "none", [8])
    assert at8.error == "silent overwrite: request 0 wrote 1 entries past its kv_indices row and past the end of the buffer"
    at9 = buffer.probe(g, "max-bs-topk-ctx", "none", [9])
    assert at9.error == "silent overwrite: request 0 wrote 1 entries past its kv_indices row into row 2"
    assert buffer.probe(g, "max-bs-topk-ctx", "none", [7]).outcome.value == "ok"


def test_the_stores_land_where_the_kernel_puts_them() -> None:
    """Row ``i`` of a draft buffer holds, per request and branch, the prefix then ``i + 1`` slots
    from ``s + t * steps`` (generate_draft_decode_kv_indices, ps 1); a verify row the prefix then D."""
    g = ServingGeometry(context_len=20, page_size=1, draft_tokens=3, spec_steps=2, spec_topk=2, max_bs=2)
    table = torch.arange(4 * 30, dtype=torch.int32).reshape(4, 30)
    buffer = backends.pooled_backend_of("sglang-triton-kv-indices").buffer("draft-decode")
    runs = buffer._segments(g, 30, [1, 2], [3, 1], 1)
    stream = torch.cat([table.reshape(-1)[a : a + n] for a, n in runs]).tolist()
    expected = []
    for r, s in ((1, 3), (2, 1)):
        for t in range(2):
            expected += [30 * r + j for j in range(s)] + [30 * r + s + t * 2 + j for j in range(2)]
    assert stream == expected
    verify = backends.pooled_backend_of("sglang-aiter-kv-indices").buffer("target-verify")
    runs = verify._segments(g, 30, [1, 2], [3, 1], 0)
    assert torch.cat([table.reshape(-1)[a : a + n] for a, n in runs]).tolist() == [
        30, 31, 32, 33, 34, 35, 60, 61, 62, 63]


def test_the_worked_cases_of_the_atlas() -> None:
    """0.5.10's FlashInfer draft buffer had no topk factor: QwQ-32B with EAGLE (5, 4, 8), ctx 32768,
    32 graph rows: topk * (s + steps) > ctx from s = 32768 / 4 - 5 + 1 = 8188. 0.5.14 on: the
    topk factor and the assert: s + steps > ctx from s = 32764, inside the cap (ctx - 1 + 2 = 32769)."""
    g = ServingGeometry(context_len=32768, page_size=1, draft_tokens=8, spec_steps=5, spec_topk=4, max_bs=32,
                        width_gen="g3")
    draft = backends.pooled_backend_of("sglang-flashinfer-kv-indices").buffer("draft-decode")
    assert draft.first_failure(g, "max-bs-ctx") == 8188
    assert draft.first_failure(g, "max-bs-topk-ctx") == 32764
    assert draft.probe(g, "max-bs-ctx", "none", [8188] * 32).outcome.value == "silent-overwrite"
    assert draft.probe(g, "max-bs-ctx", "none", [8187] * 32).outcome.value == "ok"
    mla = backends.pooled_backend_of("sglang-flashinfer-mla-kv-indices").buffer("target-verify")
    g5 = ServingGeometry(context_len=100, page_size=1, draft_tokens=4, spec_steps=3, max_bs=2)
    assert mla.first_failure(g5, "max-bs-ctx") == 97  # ctx - D + 1
    assert mla.probe(g5, "max-bs-ctx", "copy", [97, 50]).outcome.value == "ok"  # one short request makes room
    assert mla.probe(g5, "max-bs-ctx", "copy", [97, 97]).error.startswith(
        "The size of tensor a (200) must match the size of tensor b (202)")


def test_flashinfer_verify_with_two_or_more_drafts_never_fails_at_real_contexts() -> None:
    verify = backends.pooled_backend_of("sglang-flashinfer-kv-indices").buffer("target-verify")
    for ctx in (4096, 32768, 131072):
        for d in (2, 4, 16):
            g = ServingGeometry(context_len=ctx, page_size=64, draft_tokens=d, spec_steps=d, width_gen="g3", max_bs=8)
            assert verify.first_failure(g, "max-tokens-ctx") is None


def test_every_version_names_rules_and_checks_its_buffers_have() -> None:
    seen = set()
    for version in load_versions().values():
        for backend in backends.POOLED_BACKENDS:
            for key, entry in version.fields.get(backend.name, {}).items():
                buffer = backend.buffer(key)
                assert entry["rule"] in buffer.rules and entry["check"] in ("assert", "copy", "none"), (version, key)
                seen.add((backend.name, key))
    assert seen == {(b.name, buf.key) for b in backends.POOLED_BACKENDS for buf in b.buffers}


def test_a_caller_given_buffer_shows_the_stores_spare_space_included() -> None:
    """``replay(out=...)``: Triton's draft buffer, ctx 10, topk 1, steps 3, one request at s = 8 in
    row 1 of a table 20 wide: step i writes the 8 prefix slots then i + 1 from slot 8 (rows of 9,
    10, 11 entries), so row 2's last entry lands in the first spare entry after the 30."""
    g = ServingGeometry(context_len=10, page_size=1, draft_tokens=4, spec_steps=3, max_bs=1)
    buffer = backends.pooled_backend_of("sglang-triton-kv-indices").buffer("draft-decode")
    table = torch.arange(3 * 20, dtype=torch.int32).reshape(3, 20)
    out = torch.full((35,), -7, dtype=torch.int32)
    overwrite = buffer.replay(g, "max-bs-topk-ctx", "none", table, [1], [8], out=out)
    assert overwrite is not None and overwrite.row is None and overwrite.entries == 1
    rows = [list(range(20, 28)) + list(range(28, 28 + i + 1)) for i in range(3)]
    expected = rows[0] + [-7] + rows[1] + rows[2] + [-7] * 4
    assert out.tolist() == expected
    with pytest.raises(ValueError, match="30 entries at least"):
        buffer.replay(g, "max-bs-topk-ctx", "none", table, [1], [8], out=torch.zeros(29, dtype=torch.int32))
