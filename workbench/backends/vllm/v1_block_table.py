"""vLLM v1: the worker's block table against the blocks the KV cache manager gives a request in a
decode step that verifies draft tokens (docs/engine-facts.md#vllm-v1-block-table).

The table is ``(max_num_reqs, W)`` int32, ``W = cdiv(max_model_len, block_size)`` aligned as the
release aligns it (the alignment the indexer backend learned for the same table). Each step the
scheduler gives a running request ``n = 1 + d`` new tokens (the sampled one and its ``d`` drafts),
the KV cache manager's ``allocate_slots`` gives it the blocks those tokens (and the lookahead slots)
need, the model runner appends the new blocks to the request's row, and the step's slot mapping
reads the row at ``position // block_size`` for each position ``c .. c + n - 1`` (``c``: the
committed tokens).

What each release does near ``max_model_len``, from its own code (``workbench engines learn``,
section ``kv``):

* ``slots`` (measured, by running ``allocate_slots`` on a CPU): ``capped`` (0.9.0 on): the
  slots, lookahead included, are ``min(c + n + lookahead, max_model_len)``, so a request never
  holds more than ``cdiv(max_model_len, block_size)`` blocks; ``preallocated`` (0.8.2, 0.8.3): the
  manager gives ``preallocate_tokens`` worth of extra blocks but never more than
  ``cdiv(max_model_len, block_size)``, and asserts that a step needing a new block gets one:
  ``assert num_new_blocks > 0`` fails once the request's row is full; ``row-limited`` (0.8.4,
  0.8.5): the lookahead slots counted too (the preallocation less the lookahead's whole blocks in
  0.8.4, none in 0.8.5), the same limit and assertion.
* ``scheduler_cap`` (measured, by running ``Scheduler.schedule`` and ``update_from_output`` on a
  CPU, ``decode_step`` below): what the scheduler gives a running request's step at each
  committed length ``c``, and where ``check_stop`` finishes the request. Every release finishes a
  request once it holds ``max_model_len`` tokens, so a step runs at ``c <= max_model_len - 2``;
  ``n`` is ``1 + d`` capped by one of ``CAPS``: ``uncapped`` (0.8.2 to 0.8.4: the drafts run past
  ``max_model_len``), ``to-limit`` (``max_model_len - c``, 0.8.5 to 0.9.1) or ``below-limit``
  (``max_model_len - 1 - c``, 0.9.2 on; ``max_model_len - c - sampled`` with one token sampled
  a step in the newest). The line of ``Scheduler.schedule`` that caps is kept beside it.
* ``async_cap`` (measured, section ``async``, by running ``AsyncScheduler`` as the engine core's
  batch queue drives it: ``vllm.learn_async``): the form of ``CAPS`` that gives every step the
  asynchronous scheduler forms, at the ``num_computed_tokens`` it counts with the step before still
  in flight. Absent where the release schedules no drafter asynchronously (before 0.11.1).

Worked example (0.8.2, n-gram with 3 drafts, ``max_model_len`` 4096, block size 16): rows of 256
blocks. A request that has committed 4093 tokens and drafted 3 asks for ``cdiv(4093 + 4, 16) = 257``
blocks; its row already holds 256 (the preallocation filled it), so ``allocate_slots`` asserts and
the engine core dies. At 4092 it needs 256 and the step runs. From 0.9.0.1 the scheduler gives
``min(4, 4096 - 4093) = 3`` tokens and the manager caps the slots at 4096: 256 blocks, no failure
at any length.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from workbench.backends.case_backend import (
    BackendCase,
    BoolArray,
    CaseBackend,
    CaseSeed,
    IntArray,
    choice_field,
    int_field,
    int_list_field,
    reject_unknown,
)
from workbench.backends.vllm.indexer_block_table import ALIGNMENTS
from workbench.engines.store import vllm_releases
from workbench.model.geometry import cdiv
from workbench.model.outcome import Outcome, ProbeResult, invalid

NAME = "vllm-v1-block-table"
SECTION = "kv"  # the learned section these facts live in (its own learner: ``learn_vllm.learn_kv``)
ASYNC_SECTION = "async"  # the asynchronous scheduler's cap (its own learner: ``vllm.learn_async``)
SLOTS = ("capped", "preallocated", "row-limited")
# How a release's scheduler caps a running request's step of 1 + d tokens at committed length c:
# the offset o of min(1 + d, max_model_len - o - c), None where it does not.
CAPS: dict[str, int | None] = {"uncapped": None, "to-limit": 0, "below-limit": 1}
ASSERT_ERROR = "AssertionError: "  # allocate_slots' ``assert num_new_blocks > 0`` carries no message
MAX_MODEL_LEN = 1 << 24


@dataclass(frozen=True)
class KvRelease:
    """What one release's KV cache manager and scheduler do near ``max_model_len``."""

    slots: str  # a key of SLOTS
    preallocate_tokens: int  # extra tokens' worth of blocks a ``preallocated`` manager gives
    scheduler_cap: str  # a key of CAPS
    table_alignment: str  # a key of ALIGNMENTS
    async_cap: str | None = None  # a key of CAPS; None where the asynchronous scheduler was not measured

    @property
    def scheduler_caps(self) -> bool:
        """Whether the scheduler keeps a step's positions below ``max_model_len``."""
        return CAPS[self.scheduler_cap] is not None


def releases() -> dict[str, KvRelease]:
    """Every learned vLLM release whose ``kv`` section measured the slots policy, oldest first."""
    found: dict[str, KvRelease] = {}
    tables = vllm_releases.learned_facts("vllm-indexer-block-table")
    asynchronous = vllm_releases.learned_facts(NAME, section_name=ASYNC_SECTION)
    for engine, facts in vllm_releases.learned_facts(NAME, section_name=SECTION).items():
        alignment = (tables.get(engine, {}).get("table_alignment") or {}).get("value")
        if (facts.get("slots", {}).get("value") not in SLOTS or alignment not in ALIGNMENTS
                or facts.get("scheduler_cap", {}).get("value") not in CAPS):
            continue
        found[engine] = KvRelease(
            slots=str(facts["slots"]["value"]), preallocate_tokens=int(facts["preallocate_tokens"]["value"] or 0),
            scheduler_cap=str(facts["scheduler_cap"]["value"]), table_alignment=str(alignment),
            async_cap=(asynchronous.get(engine, {}).get("async_cap") or {}).get("value"))
    return found


def _context_parallel(extra: Mapping[str, object]) -> tuple[int, int]:
    """The launch's decode and prefill context-parallel sizes: each splits a request's blocks
    across ranks, which this model does not."""
    return int(str(extra.get("dcp_size") or 1)), int(str(extra.get("pcp_size") or 1))


def bracketing_release(engine: str) -> str | None:
    """The measured release whose facts a launch of ``engine`` takes (``vllm_releases.bracketing``):
    None where its KV cache manager was never run (``workbench engines learn vllm==X`` runs it)."""
    return vllm_releases.bracketing(releases(), engine)


def scheduled(cap: str, max_model_len: int, computed: int, drafts: int) -> int:
    """Tokens a scheduler of form ``cap`` gives a running request's step at committed length
    ``computed``: the sampled one and its ``drafts``, capped."""
    offset = CAPS[cap]
    n = 1 + drafts
    return n if offset is None else max(0, min(n, max_model_len - offset - computed))


def decode_step(cap: str, max_model_len: int, computed: int, drafts: int) -> dict[str, Any]:
    """What ``vllm_buffers.decode_step`` reports of a release whose scheduler caps as ``cap``: the
    request stops on its sampled token once it holds ``max_model_len`` tokens (``check_stop``),
    else its next step's tokens and draft tokens."""
    if computed + 1 >= max_model_len:
        return {"stopped": True}
    n = scheduled(cap, max_model_len, computed, drafts)
    return {"scheduled": n, "drafts": max(0, n - 1)}


def last_step(cap: str, max_model_len: int, drafts: int) -> int:
    """The largest committed length at which a request still gets a step (``decode_step``)."""
    return max(c for c in range(max(1, max_model_len - 3 - drafts), max_model_len)
               if decode_step(cap, max_model_len, c, drafts).get("scheduled"))


def held_after(slots: str, preallocate_tokens: int, max_model_len: int, block_size: int, held: int,
               tokens: int, lookahead: int = 0) -> int | str:
    """The blocks a request holds after ``allocate_slots`` asks for ``tokens`` slots (computed,
    new and, where the manager takes them, ``lookahead``), holding ``held`` before;
    ``ASSERT_ERROR`` where the manager asserts. A ``row-limited`` manager preallocates what its
    preallocation leaves after the lookahead's whole blocks (0.8.4: ``max(0, cdiv(64, bs) -
    lookahead // bs)``; 0.8.5 preallocates nothing)."""
    cap = cdiv(max_model_len, block_size)
    if slots == "capped":
        return max(held, cdiv(min(tokens, max_model_len), block_size))
    needed = cdiv(tokens, block_size) - held
    if needed <= 0:
        return held
    extra = cdiv(preallocate_tokens, block_size)
    if slots == "row-limited":
        extra = max(0, extra - lookahead // block_size)
    given = min(needed + extra, cap - held)
    return ASSERT_ERROR if given <= 0 else held + given


def allocation(slots: str, preallocate_tokens: int, max_model_len: int, block_size: int, computed: int,
               new_tokens: int, lookahead: int) -> dict[str, Any]:
    """What ``allocate_slots`` answers for a request: its prefill of ``computed`` tokens (when any),
    then a step of ``new_tokens`` with ``lookahead`` slots (a ``preallocated`` manager takes none):
    ``{"held": blocks}`` or ``{"error": ...}``, as ``vllm_buffers.kv_slots`` reports the engine's."""
    held: int | str = 0
    if computed:
        held = held_after(slots, preallocate_tokens, max_model_len, block_size, 0, computed)
    if isinstance(held, int):
        extra = 0 if slots == "preallocated" else lookahead  # 0.8.2 and 0.8.3 take no lookahead slots
        held = held_after(slots, preallocate_tokens, max_model_len, block_size, held, computed + new_tokens + extra,
                          extra)
    return {"error": held} if isinstance(held, str) else {"held": held}


@dataclass(frozen=True, kw_only=True)
class V1StepCase(BackendCase):
    """One decode step of one request that verifies ``drafts`` draft tokens."""

    engine: str  # "vllm==0.8.2"
    max_model_len: int
    block_size: int
    drafts: int  # d: tokens the drafter proposed for this step
    lookahead: int = 0  # slots the scheduler reserves past the step (the drafter's next writes)
    seq_lens: tuple[int, ...]  # the request's tokens entering the step, the sampled one included (c + 1)

    @property
    def release(self) -> KvRelease:
        return releases()[self.engine]

    @property
    def width(self) -> int:
        return ALIGNMENTS[self.release.table_alignment](cdiv(self.max_model_len, self.block_size), self.block_size)

    def scheduled(self, committed: int) -> int:
        """New tokens the scheduler gives the step: the sampled one and the drafts, capped."""
        return scheduled(self.release.scheduler_cap, self.max_model_len, committed, self.drafts)


SEED_V082_NGRAM = CaseSeed(
    name="vllm-0.8.2-ngram-full-row",
    story="vLLM 0.8.2 (V1), n-gram with 3 drafts, block size 16, max_model_len 4096: the 257th block asserts",
    failing={"component": NAME, "engine": "vllm==0.8.2", "max_model_len": 4096, "block_size": 16, "drafts": 3,
             "seq_lens": [4094]},
    expected_error="AssertionError in KVCacheManager.allocate_slots: the step needs 257 blocks, the row holds 256",
    passing=(
        {"component": NAME, "engine": "vllm==0.8.2", "max_model_len": 4096, "block_size": 16, "drafts": 3,
         "seq_lens": [4093]},
        {"component": NAME, "engine": "vllm==0.9.0.1", "max_model_len": 4096, "block_size": 16, "drafts": 3,
         "lookahead": 3, "seq_lens": [4094]},
    ),
)


class V1BlockTableBackend(CaseBackend[V1StepCase]):
    name = NAME
    engine = "vllm"
    device_family = "cuda"
    buffer_name = "block_table"
    fields = frozenset({"component", "engine", "max_model_len", "block_size", "drafts", "lookahead", "seq_lens"})
    scan_field = "seq_lens"
    scan_label = "seq_len"  # the search runs one request
    boundary_rejects = ("seq_lens",)
    launch_names = ("v1-block-table",)  # every V1 launch on a CUDA GPU (preflight's resolve_vllm)
    eager_path = True  # allocate_slots and the worker's block table serve eager steps alike
    seeds = (SEED_V082_NGRAM,)

    def launch_case(self, engine: str, max_model_len: int, block_size: int,
                    extra: Mapping[str, object]) -> V1StepCase | None:
        """One request verifying the launch's drafts, its length searched; None where the release's
        KV manager was never measured, or a DCP split the model does not cover."""
        release = bracketing_release(engine)
        if release is None or _context_parallel(extra) != (1, 1):
            return None
        return self.parse({"component": self.name, "engine": release, "max_model_len": max_model_len,
                           "block_size": block_size, "drafts": int(str(extra.get("num_speculative_tokens") or 0)),
                           "lookahead": int(str(extra.get("lookahead") or 0))}, boundary=True)

    def launch_gap(self, engine: str, extra: Mapping[str, object]) -> str:
        dcp, pcp = _context_parallel(extra)
        if (dcp, pcp) != (1, 1):
            return f"a context-parallel split (dcp {dcp}, pcp {pcp}) is not modelled"
        return (f"{engine}'s KV cache manager was never run (workbench engines learn {engine}), and the measured "
                "releases on either side of it differ or are missing")

    def release_cases(self) -> tuple[dict[str, object], ...]:
        return tuple({**SEED_V082_NGRAM.failing, "engine": engine} for engine in releases())

    def parse(self, data: Mapping[str, object], *, boundary: bool = False) -> V1StepCase:
        reject_unknown(data, self.fields)
        length = int_field(data, "max_model_len", high=MAX_MODEL_LEN)
        return V1StepCase(
            component=str(data["component"]), engine=choice_field(data, "engine", tuple(releases())),
            max_model_len=length, block_size=int_field(data, "block_size"), drafts=int_field(data, "drafts", 0, low=0),
            lookahead=int_field(data, "lookahead", 0, low=0),
            seq_lens=(1,) if boundary else int_list_field(data, "seq_lens"),  # a boundary sets its own
        )

    def case_problem(self, case: V1StepCase) -> str | None:
        for s in case.seq_lens:
            if not 1 <= s < case.max_model_len:  # a request of max_model_len tokens has stopped
                return f"seq_lens: {s} is out of range (allowed: 1 to max_model_len - 1 = {case.max_model_len - 1})"
        return None

    def probe(self, case: V1StepCase, device: torch.device | str = "cpu") -> ProbeResult:
        problem = self.case_problem(case)
        if problem:
            return invalid(problem)
        release, width, bs = case.release, case.width, case.block_size
        table = torch.zeros((len(case.seq_lens), width), dtype=torch.int32, device=device)  # the worker's table
        done = ProbeResult(Outcome.OK, None, buffer_width=width, reads=max(case.seq_lens) + case.drafts,
                           device=str(torch.device(device)))
        for row, seq_len in enumerate(case.seq_lens):
            committed = seq_len - 1
            n = case.scheduled(committed)
            got = allocation(release.slots, release.preallocate_tokens, case.max_model_len, bs, committed, n,
                             case.lookahead)
            if "error" in got:
                needed = cdiv(committed + n, bs)
                return ProbeResult(Outcome.HOST_ASSERT, f"AssertionError in KVCacheManager.allocate_slots: the step "
                                   f"needs {needed} blocks, the row holds {cdiv(case.max_model_len, bs)}",
                                   buffer_width=width, table_width=needed, reads=committed + n, device=done.device)
            held = int(got["held"])
            ids = torch.arange(1, held + 1, dtype=torch.int32, device=device)
            try:  # the runner appends the request's blocks to its row
                table[row, :held].copy_(ids)
            except RuntimeError as error:
                return ProbeResult(Outcome.SHAPE_ERROR, str(error), buffer_width=width, table_width=held,
                                   reads=committed + n, device=done.device)
            last = (committed + n - 1) // bs  # the slot mapping's block index of the step's last position
            if last >= width:
                return ProbeResult(Outcome.SILENT_OVERREAD, f"silent over-read: position {committed + n - 1} reads "
                                   f"block {last + 1} of a row of {width}", buffer_width=width, table_width=held,
                                   reads=committed + n, device=done.device)
        return done

    def at(self, case: V1StepCase, value: int) -> V1StepCase:
        return V1StepCase(component=case.component, engine=case.engine, max_model_len=case.max_model_len,
                          block_size=case.block_size, drafts=case.drafts, lookahead=case.lookahead, seq_lens=(value,))

    def scan_range(self, case: V1StepCase) -> tuple[int, int]:
        """Every length a running request can have (one of ``max_model_len`` tokens has stopped)."""
        return 1, case.max_model_len - 1

    def fails_grid(self, case: V1StepCase, values: IntArray) -> BoolArray:
        """Closed form: a ``capped`` manager never fails (the slots stop at ``max_model_len``, which
        the row covers, and every scheduler keeps the step's positions at or below it). Otherwise,
        at ``c = seq_len - 1``: the prefill holds ``min(cdiv(c, bs) + cdiv(preallocate, bs), row)``
        blocks; a step whose blocks, ``cdiv(c + n (+ lookahead, row-limited), bs)``, pass a full row
        asserts, and a step whose last position's block is past the table reads past it."""
        release, bs = case.release, case.block_size
        if release.slots == "capped":
            return np.zeros(len(values), dtype=bool)
        row = cdiv(case.max_model_len, bs)
        committed = values - 1
        offset = CAPS[release.scheduler_cap]
        n = np.full(len(values), 1 + case.drafts) if offset is None else \
            np.clip(np.minimum(1 + case.drafts, case.max_model_len - offset - committed), 0, None)
        held = np.where(committed > 0, np.minimum(-(-committed // bs) + cdiv(release.preallocate_tokens, bs), row), 0)
        lookahead = case.lookahead if release.slots == "row-limited" else 0
        asserts = (-(-(committed + n + lookahead) // bs) > held) & (held >= row)
        return np.asarray(asserts | ((committed + n - 1) // bs >= case.width), dtype=bool)


BACKEND = V1BlockTableBackend()
