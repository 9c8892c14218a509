"""SGLang's flat (CSR) ``kv_indices`` graph buffers, pooled across a batch: when one can fail.

FlashInfer, FlashInfer MLA, Triton and AITER keep, besides (or instead of) a 2-D page table, one
flat int32 buffer per graph into which replay writes each request's KV slots back to back, at
offsets ``kv_indptr = cumsum(lengths)``. No row has an end of its own: what must fit is the sum
over the batch, so whether a step fails depends on the whole batch, not on one request, and the
per-request interface of ``TableBackend`` (one request, a boundary in its committed length)
cannot express it. This module states each buffer's capacity and the entries a batch needs, as
read in the engine, and replays the writes on a real tensor; ``first_full_batch_failure`` is the
boundary for the worst batch of a given longest length (every one of ``max_bs`` rows at it).

Buffers (0.5.23; [read] = read in the source, [inferred] = not traced to the last call):

* ``aiter-mla-verify``: ``cuda_graph_kv_indices`` of ``max_bs * (cdiv(ctx, ps) * ps + D)``
  (``aiter_backend.py:2804-2834``); the MLA target verify writes ``s + D`` per row and checks
  ``sum(s) + D * bs <= capacity`` first with ``assert_buffer_fits`` (3152-3163): an
  ``AssertionError`` on the host. A full batch fails from ``s = cdiv(ctx, ps) * ps + 1``: past
  the context, so only with overshoot (ps 1, G1: W - D = ctx + 4 holds it). [read]
* ``eagle-draft-decode``: the multi-step drafter's rows ``(steps, max_bs * topk * ctx)``
  (``flashinfer_backend.py:2630-2640``, ``flashinfer_mla_backend.py:1323``, ``triton_backend.py:2764``;
  ``speculative/spec_utils.py:298-320``): checked by ``assert_buffer_fits`` with
  ``seq_lens_sum * topk + topk * num_seqs * steps``. A full batch fails from ``s = ctx - steps + 1``:
  inside the scheduler's cap once every request of a full bucket is within ``steps`` of the end. [read]
* ``flashinfer-mla-verify``: ``cuda_graph_kv_indices`` of ``max_bs * ctx`` (``flashinfer_mla_backend.py:505``);
  the DFLASH fast verify plan copies ``sum(s + D)`` indices into it with
  ``_kv_indices_buf[: n].copy_(kv_indices)`` (1429): torch's size error when ``n > max_bs * ctx``
  (the slice clamps). A full batch fails from ``s = ctx - D + 1``, inside the cap. [read; whether
  ``generate_attn_arg_prefill`` has stored past the buffer before the copy is [inferred] not traced]
* ``flashinfer-verify`` / ``triton-verify``: ``max_num_tokens * ctx`` with ``max_num_tokens = max_bs * D``
  (``flashinfer_backend.py:1106``, ``triton_backend.py:1226``) against ``sum(s + D) <= max_bs * W``:
  fails only where ``W > D * ctx``, i.e. ``D = 1`` (a full batch at ``s >= ctx``, overshoot) or a
  context shorter than the request table's slack; for ``D >= 2`` at real contexts no reachable
  batch fails. Unchecked: such a write would run past the buffer (an overwrite). [inferred: the
  verify lengths ``s + D`` are read for FlashInfer MLA and AITER, assumed the same here]
* decode buffers (``max_bs * ctx`` for one token per request): ``sum(s) <= max_bs * (ctx - 1)``
  without speculation: no reachable batch fails. [read]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from workbench.model.geometry import Mode, ServingGeometry, cdiv
from workbench.model.outcome import Overwrite


@dataclass(frozen=True)
class PooledIndexBuffer:
    """One flat kv_indices buffer: its entries, what a batch needs, and the host check before the writes."""

    name: str
    mode: Mode
    capacity: Callable[[ServingGeometry], int]  # entries of the buffer a graph of max_bs rows holds
    per_request: Callable[[ServingGeometry, int], int]  # entries one request of committed length s writes
    checked: Callable[[ServingGeometry, Sequence[int]], int] | None  # what the host check adds up (None: unchecked)
    check: str  # "assert" (assert_buffer_fits), "copy" (a copy_ into a clamped slice), "none"
    source: str


def _aiter_capacity(g: ServingGeometry) -> int:
    return g.max_bs * (cdiv(g.context_len, g.page_size) * g.page_size + g.draft_tokens)


BUFFERS = {
    b.name: b for b in (
        PooledIndexBuffer(
            "aiter-mla-verify", Mode.TARGET_VERIFY, _aiter_capacity,
            lambda g, s: s + g.draft_tokens, lambda g, lens: sum(lens) + g.draft_tokens * len(lens), "assert",
            "aiter_backend.py:2804-2834, 3140-3163"),
        PooledIndexBuffer(
            "eagle-draft-decode", Mode.DRAFT_DECODE, lambda g: g.max_bs * g.spec_topk * g.context_len,
            lambda g, s: g.spec_topk * (s + g.spec_steps),
            lambda g, lens: sum(lens) * g.spec_topk + g.spec_topk * len(lens) * g.spec_steps, "assert",
            "speculative/spec_utils.py:298-320; flashinfer_backend.py:2498-2512, 2630-2640"),
        PooledIndexBuffer(
            "flashinfer-mla-verify", Mode.TARGET_VERIFY, lambda g: g.max_bs * g.context_len,
            lambda g, s: s + g.draft_tokens, lambda g, lens: sum(lens) + g.draft_tokens * len(lens), "copy",
            "flashinfer_mla_backend.py:505, 677-690, 1429"),
        PooledIndexBuffer(
            "flashinfer-verify", Mode.TARGET_VERIFY, lambda g: g.max_bs * g.draft_tokens * g.context_len,
            lambda g, s: s + g.draft_tokens, None, "none", "flashinfer_backend.py:1106; triton_backend.py:1226"),
    )
}


class PooledOverflow(AssertionError):
    """The engine's host check refused the batch (``assert_buffer_fits``), with its message."""


def replay_flat(buffer: PooledIndexBuffer, g: ServingGeometry, req_to_token: torch.Tensor, rows: Sequence[int],
                seq_lens: Sequence[int]) -> Overwrite | None:
    """Write the batch's CSR segments into a fresh buffer of ``capacity`` entries, as replay does.

    The host check runs first (an ``assert``: ``PooledOverflow``; a ``copy_`` into the clamped slice:
    torch's ``RuntimeError``); an unchecked write past the end is returned as an ``Overwrite``.
    Worked example: capacity 10, lengths [6, 6]: kv_indptr = [0, 6, 12]; request 1 writes
    offsets 6..11, two past the end.
    """
    capacity = buffer.capacity(g)
    flat = torch.zeros(capacity, dtype=torch.int32, device=req_to_token.device)  # (capacity,) int32
    lengths = [buffer.per_request(g, s) for s in seq_lens]
    total = sum(lengths)
    if buffer.check == "assert" and buffer.checked is not None:
        used = buffer.checked(g, seq_lens)
        if used > capacity:
            raise PooledOverflow(f"{buffer.name} kv_indices: used {used} > capacity {capacity} "
                                 f"(bs={len(seq_lens)}, seq_lens_sum={sum(seq_lens)})")
    stream = torch.cat([req_to_token[r].repeat(cdiv(n, req_to_token.shape[1]))[:n] for r, n in zip(rows, lengths)])
    if buffer.check == "copy":
        flat[:total].copy_(stream)  # the slice clamps at capacity: torch raises when total > capacity
        return None
    offset = 0
    for i, n in enumerate(lengths):
        end = min(offset + n, capacity)
        if end > offset:
            flat[offset:end] = stream[offset:end]
        if offset + n > capacity:
            return Overwrite(writer=i, row=None, entries=offset + n - max(offset, capacity))
        offset += n
    return None


def first_full_batch_failure(buffer: PooledIndexBuffer, g: ServingGeometry) -> int | None:
    """The smallest committed length at which a batch of ``max_bs`` requests, all at it, overflows.

    Closed form: the per-request need ``a * s + b`` (``a``, ``b`` from two evaluations) against
    ``capacity / max_bs``: first ``s = floor(capacity / max_bs - b) / a + 1``, within
    ``1 .. max_committed_len``. Worked example: FlashInfer MLA verify, ctx 100, D 4: need s + 4,
    capacity per row 100: s = 97.
    """
    per_row = buffer.capacity(g) // g.max_bs if buffer.capacity(g) % g.max_bs == 0 else None
    assert per_row is not None, "every buffer here is max_bs rows of equal size"
    b = buffer.per_request(g, 0)
    a = buffer.per_request(g, 1) - b
    first = max((per_row - b) // a + 1, 1)
    return first if first <= g.max_committed_len(buffer.mode) else None


__all__ = ["BUFFERS", "PooledIndexBuffer", "PooledOverflow", "first_full_batch_failure", "replay_flat"]
