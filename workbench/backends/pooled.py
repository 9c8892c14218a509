"""Flat (CSR) ``kv_indices`` buffers pooled across a batch: what they hold, what a batch writes.

FlashInfer, FlashInfer MLA, Triton and AITER keep, besides (or instead of) a 2-D page table,
flat int32 buffers into which a step writes each request's KV slots back to back, at offsets
``kv_indptr = cumsum(lengths)``. No request has a row of its own: what must fit is the sum over
the batch, so whether a step fails depends on the batch, not on one request, and the
per-request interface of ``TableBackend`` cannot express it. A ``PooledBuffer`` states one such
buffer as an engine version sizes it (named ``CapacityRule``s, legacy and fixed side by side),
what one request writes into it, the host check a version runs before the writes, and replays
the writes on real tensors.

The worst batch of a longest length ``s`` is every request at ``s``: a captured graph's buffer
is sized for ``max_bs`` requests, so its worst batch is ``max_bs`` of them; a buffer allocated
per call for the batch at hand (``per_call``: the eager paths) fails for any batch whose mean
length is past the bound, one request included.

    first failing s = floor((capacity - n * b) / (n * a)) + 1     (a request writes a * s + b)

Checks, by what a version does before the writes:

* ``assert``: ``assert_buffer_fits(used, capacity, what, ...)``, an ``AssertionError`` on the
  host with the engine's message (``host-assert``);
* ``copy``: a ``copy_`` of the whole stream into ``buffer[:n]``, a slice that clamps at the
  buffer's end, so torch raises its size error (``shape-error``);
* ``none``: the stores run past the row, into the next step's row of a ``(steps, width)``
  buffer or past the allocation (``silent-overwrite``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from workbench.backends.base import INT32_BYTES, reachable_committed_len
from workbench.model.geometry import Mode, ServingGeometry, cdiv
from workbench.model.outcome import Outcome, Overwrite, ProbeResult

CHECKS = ("assert", "copy", "none")


@dataclass(frozen=True)
class CapacityRule:
    """How one version sizes the buffer: entries of one step's row, for a batch of ``n`` requests."""

    name: str
    entries: Callable[[ServingGeometry, int], int]
    change: str  # the engine change the rule stands for


@dataclass(frozen=True)
class PooledBuffer:
    """One flat buffer of one backend in one mode (see the module note)."""

    key: str  # "draft-decode", "draft-decode-eager", "target-verify": the backend's field in data/engines.json
    mode: Mode
    what: str  # the engine's words for the buffer in its assert (``assert_buffer_fits``'s ``what``)
    rules: Mapping[str, CapacityRule]
    # Entries request ``s`` writes into step row ``row`` (a verify has one row; a draft step ``i`` row ``i``).
    per_request: Callable[[ServingGeometry, int, int], int]
    rows: Callable[[ServingGeometry], int]
    check_bs: Callable[[ServingGeometry, int], int]  # the ``bs=`` the assert prints (draft: topk * requests)
    per_call: bool  # allocated per call for the batch at hand (eager) rather than at capture for max_bs
    attention: str  # the models whose layers write it: "mla", "mha" or "any"
    applies: Callable[[ServingGeometry], str | None]  # why a setting has no such buffer, or None
    source: str

    # ---- sizing ---------------------------------------------------------------------------------

    def capacity(self, g: ServingGeometry, rule: str, requests: int) -> int:
        return self.rules[rule].entries(g, requests if self.per_call else g.max_bs)

    def worst_batch(self, g: ServingGeometry) -> int:
        """Requests in the cheapest batch that fails first: ``max_bs`` for a graph's buffer, one for a
        buffer sized per call (its capacity grows with the batch, so only the mean length matters)."""
        return 1 if self.per_call else g.max_bs

    def graph_bytes(self, g: ServingGeometry, rule: str) -> int:
        return self.rows(g) * self.capacity(g, rule, self.worst_batch(g)) * INT32_BYTES

    def safe_bytes(self, g: ServingGeometry, reachable: int) -> int:
        """Bytes of a buffer that holds the worst batch at the reachable length."""
        n = self.worst_batch(g)
        return self.rows(g) * n * self.per_request(g, reachable, self.rows(g) - 1) * INT32_BYTES

    # ---- when it fails --------------------------------------------------------------------------

    def first_failure(self, g: ServingGeometry, rule: str) -> int | None:
        """The smallest committed length at which the worst batch, every request at it, overflows
        the last (largest) step row; None when nothing the request table holds does. Closed form
        (module note); ``tests/test_pooled_kv_indices.py`` scans every length against it."""
        n, last = self.worst_batch(g), self.rows(g) - 1
        b = self.per_request(g, 0, last)
        a = self.per_request(g, 1, last) - b
        first = max((self.capacity(g, rule, n) - n * b) // (n * a) + 1, 1)
        return first if first <= g.max_committed_len(self.mode) else None

    def reachable_len(self, g: ServingGeometry, *, overshoot: int = 2) -> int:
        return reachable_committed_len(g, self.mode, overshoot=overshoot)

    @staticmethod
    def outcome_of(check: str) -> Outcome:
        """What an overflowing step comes to under ``check`` (the module note)."""
        return {"assert": Outcome.HOST_ASSERT, "copy": Outcome.SHAPE_ERROR, "none": Outcome.SILENT_OVERWRITE}[check]

    # ---- one step on real tensors ---------------------------------------------------------------

    def host_check(self, g: ServingGeometry, rule: str, seq_lens: Sequence[int]) -> None:
        """The ``assert`` check alone, as ``replay`` runs it first: ``PooledOverflow`` with the
        engine's message when the last (largest) step row of the batch passes the capacity."""
        n, last = len(seq_lens), self.rows(g) - 1
        capacity = self.capacity(g, rule, n)
        used = sum(self.per_request(g, s, last) for s in seq_lens)
        if used > capacity:
            raise PooledOverflow(f"{self.what}: used {used} > capacity {capacity} "
                                 f"(bs={self.check_bs(g, n)}, seq_lens_sum={sum(seq_lens)})")

    def replay(self, g: ServingGeometry, rule: str, check: str, req_to_token: torch.Tensor, rows: Sequence[int],
               seq_lens: Sequence[int], out: torch.Tensor | None = None) -> Overwrite | None:
        """Write one step's CSR segments into a fresh ``(rows, capacity)`` buffer as the engine does.

        ``check`` runs first: ``assert`` raises ``PooledOverflow`` with the engine's message, ``copy``
        raises torch's size error; ``none`` writes, and the first store past a row comes back as an
        ``Overwrite`` (``row``: the next step's row, None past the buffer). ``req_to_token`` needs a
        spare row after the batch's: extension slots are read through the flat pool, as the kernel's
        pointer arithmetic does. Worked example: capacity 10, lengths [6, 6]: request 1 writes
        entries 6..11, two past the row.

        ``out``: write into this flat int32 tensor instead (the caller sees what was written), the
        rows back to back from its start; it may be longer than ``rows * capacity``, and stores past
        the buffer then land in that spare space (past ``out`` they are dropped, as without it).
        """
        n = len(seq_lens)
        capacity = self.capacity(g, rule, n)
        steps = self.rows(g)
        if check == "assert":
            self.host_check(g, rule, seq_lens)
        if out is None:
            buffer = torch.zeros(steps * capacity, dtype=torch.int32, device=req_to_token.device)
        elif out.dim() != 1 or out.numel() < steps * capacity:
            raise ValueError(f"out: a flat tensor of {steps * capacity} entries at least is needed "
                             f"({steps} rows of {capacity}), not shape {list(out.shape)}")
        else:
            buffer = out
        pool = req_to_token.reshape(-1)
        first: Overwrite | None = None
        for step in range(steps):
            segments = self._segments(g, req_to_token.shape[1], rows, seq_lens, step)
            start = step * capacity
            total = sum(length for _, length in segments)
            if check == "copy":  # the stream is built apart, then copied into buffer[:total], a clamped slice
                stream = torch.cat([pool[a : a + length] for a, length in segments])
                buffer[start : start + capacity][:total].copy_(stream)  # torch raises past the row
                continue
            offset = start
            for a, length in segments:  # each store where the kernel puts it: the flat buffer, rows back to back
                end = min(offset + length, buffer.numel())
                if end > offset:
                    buffer[offset:end] = pool[a : a + end - offset]
                offset += length
            if total > capacity and first is None:
                first = self._overwrite(g, seq_lens, step, capacity, steps)
        return first

    def _segments(self, g: ServingGeometry, width: int, rows: Sequence[int], seq_lens: Sequence[int],
                  step: int) -> list[tuple[int, int]]:
        """What one step row receives, as (start in the flat pool, length) runs in write order: per
        request (and per draft branch ``t``), its ``s`` prefix slots, then the slots past it that the
        row adds (a verify's ``D`` drafts; a draft step's new tokens, from slot ``s + t * steps``).
        The runs read through the flat pool, as the kernel's pointer arithmetic does."""
        branches = g.spec_topk if self.mode is Mode.DRAFT_DECODE else 1
        runs = []
        for r, s in zip(rows, seq_lens):
            extra = self.per_request(g, s, step) // branches - s
            for t in range(branches):
                ext = s + t * g.spec_steps if self.mode is Mode.DRAFT_DECODE else s
                runs += [(r * width, s), (r * width + ext, extra)]
        return runs

    def _overwrite(self, g: ServingGeometry, seq_lens: Sequence[int], step: int, capacity: int, steps: int) -> Overwrite:
        offset = 0
        for i, s in enumerate(seq_lens):
            n = self.per_request(g, s, step)
            if offset + n > capacity:
                spilled = sum(self.per_request(g, x, step) for x in seq_lens) - capacity
                return Overwrite(writer=i, row=step + 1 if step + 1 < steps else None, entries=spilled)
            offset += n
        raise AssertionError("called only for a row that overflows")

    def probe(self, g: ServingGeometry, rule: str, check: str, seq_lens: Sequence[int],
              device: torch.device | str = "cpu") -> ProbeResult:
        """The step executed on a request table whose rows hold distinct slots: its outcome and message."""
        steps, top = self.rows(g), max(seq_lens)
        columns = max(g.request_table_width, top + max(self.per_request(g, s, steps - 1) for s in seq_lens) - top + 1)
        bs = len(seq_lens)
        req_to_token = (torch.arange(bs + 2, dtype=torch.int32, device=device)[:, None] * columns
                        + torch.arange(columns, dtype=torch.int32, device=device))
        width = self.capacity(g, rule, bs)
        try:
            overwrite = self.replay(g, rule, check, req_to_token, range(1, bs + 1), seq_lens)
        except PooledOverflow as error:
            return ProbeResult(Outcome.HOST_ASSERT, f"AssertionError: {error}", buffer_width=width, device=str(device))
        except RuntimeError as error:
            return ProbeResult(Outcome.SHAPE_ERROR, str(error), buffer_width=width, device=str(device))
        if overwrite is not None:
            return ProbeResult(Outcome.SILENT_OVERWRITE, overwrite.message("kv_indices"), buffer_width=width,
                               device=str(device))
        return ProbeResult(Outcome.OK, buffer_width=width, device=str(device))


class PooledOverflow(AssertionError):
    """The engine's host check refused the batch (``assert_buffer_fits``), with its message."""


@dataclass(frozen=True)
class PooledBackend:
    """One engine backend's pooled buffers, one per mode and path; a version's data names, per
    buffer ``key``, the capacity rule and the check it ships (``data/engines.json``)."""

    name: str  # "sglang-flashinfer-kv-indices"
    engine: str
    device_family: str
    launch_names: tuple[str, ...]
    buffers: tuple[PooledBuffer, ...]
    note: str  # one line: which of the backend's flat buffers are not here, and why

    def buffer(self, key: str) -> PooledBuffer:
        for b in self.buffers:
            if b.key == key:
                return b
        raise ValueError(f"buffer: {key!r} is not one of {self.name}'s ({', '.join(b.key for b in self.buffers)})")


# ---- the shapes the backends share ------------------------------------------------------------

def draft_row(g: ServingGeometry, s: int, step: int) -> int:
    """A multi-step draft's step ``step`` writes ``s + step + 1`` slots per branch, ``topk`` branches
    (``generate_draft_decode_kv_indices``: ``kv_offset = cum * topk + bid * iters * topk + topk_id * (s + iters)``)."""
    return g.spec_topk * (s + step + 1)


def verify_row(g: ServingGeometry, s: int, step: int) -> int:
    """A target verify writes the prefix and the ``D`` draft slots: ``kv_lens = seq_lens + D``."""
    return s + g.draft_tokens


def prefix_row(g: ServingGeometry, s: int, step: int) -> int:
    """A step that writes the prefix alone (the drafts go in as extend k/v)."""
    return s


def draft_rows(g: ServingGeometry) -> int:
    return g.spec_steps


def one_row(g: ServingGeometry) -> int:
    return 1


def draft_bs(g: ServingGeometry, requests: int) -> int:
    return g.spec_topk * requests


def request_bs(g: ServingGeometry, requests: int) -> int:
    return requests


def multi_step_draft(g: ServingGeometry) -> str | None:
    """EAGLE's multi-step drafter runs its draft-decode attention only with a draft model keeping KV
    and more than one step (the first draft token comes from the draft extend)."""
    if not g.speculative or not g.draft_has_kv:
        return "no EAGLE draft model (speculation off, or a drafter without KV such as NGRAM)"
    if g.spec_steps < 2:
        return "one draft step: the multi-step draft decode has no attention steps"
    return None


def speculative(g: ServingGeometry) -> str | None:
    return None if g.speculative else "target verify needs draft tokens (speculation is off)"


def draft_buffers(what: str, rules: Mapping[str, CapacityRule], eager_rules: Mapping[str, CapacityRule], *,
                  attention: str, graph_source: str, eager_source: str,
                  applies: Callable[[ServingGeometry], str | None] = multi_step_draft) -> tuple[PooledBuffer, PooledBuffer]:
    """The multi-step EAGLE drafter's two buffers, which every backend with one has: the graph's
    ``(steps, width)`` buffer sized at capture (``draft-decode``) and the one the eager path sizes
    per call for its batch (``draft-decode-eager``); both written by ``generate_draft_decode_kv_indices``."""
    return (
        PooledBuffer("draft-decode", Mode.DRAFT_DECODE, what, rules, draft_row, draft_rows, draft_bs, per_call=False,
                     attention=attention, applies=applies, source=graph_source),
        PooledBuffer("draft-decode-eager", Mode.DRAFT_DECODE, what, eager_rules, draft_row, draft_rows, draft_bs,
                     per_call=True, attention=attention, applies=applies, source=eager_source),
    )


def max_bs_times(factor: Callable[[ServingGeometry], int]) -> Callable[[ServingGeometry, int], int]:
    """``requests * factor(g)``: the rules' common shape (the graph passes max_bs, eager its batch)."""
    return lambda g, requests: requests * factor(g)


def context(g: ServingGeometry) -> int:
    return g.context_len


def topk_context(g: ServingGeometry) -> int:
    return g.spec_topk * g.context_len


def paged_context(g: ServingGeometry) -> int:
    return cdiv(g.context_len, g.page_size)


def paged_context_plus_draft(g: ServingGeometry) -> int:
    return cdiv(g.context_len, g.page_size) * g.page_size + g.draft_tokens


__all__ = ["CHECKS", "CapacityRule", "PooledBackend", "PooledBuffer", "PooledOverflow"]
