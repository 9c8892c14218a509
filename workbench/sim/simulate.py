"""A seeded serving run: requests admitted, prefilled, stepped through the graphs, retired.

A boundary says whether one step can fail; a run says how often a workload gets there, and which
request gets there first. Every step uses the core's real objects: one ``PagedAllocator``, one
``RequestTable`` (``max_bs + 1`` rows, row 0 the dummy), and the graph buffers of every backend the
run names (``SimConfig.components``; the NPU block tables and the DSA page table by default)
captured ONCE for ``max_bs`` (each backend's ``graph_rows``: ``max_bs`` rows, or ``max_bs * D`` for
DSA's verify) and replayed every step with the batch padded to its capture bucket (1, 2, 4, ...
max_bs; padded rows read pool row 0 with the backend's ``pad_seq_len``: 0 on the NPU, 1 on DSA).

One scheduler iteration::

    admit     while a row is free, prefill the next waiting request (eager ``alloc_extend``) if
              available >= its prompt pages + conservativeness * remaining output of the batch
              (the engine's new-token ratio, held constant; 0 = optimistic admission)
    room      the step needs P new pages; it runs when available >= P * ps (an exact fit runs),
              otherwise the newest request is retracted (pages freed, re-queued in front)
    allocate  decode (no speculation): ``alloc_decode(seq_lens = s + 1, last_loc)`` under the gather
              verify: ``alloc_extend(prefix = allocated, seq = s + D)`` for the D draft slots
    replay    every backend's table, classified as a probe classifies them (``classify_replay``)
    commit    decode: s += 1; verify: s += k, k from the acceptance model, clipped to the output
              length and to ``ctx - 1 + overshoot``
    retire    at the output length, or at the scheduler's cap ``ctx - 1``; with ``overshoot > 0``
              a request at the cap rides one more verify first (the overlap scheduler sees its
              finish a step late), so that verify reads ``s + D`` with ``s`` up to ``ctx - 1 + o``

Draft slots (a choice, documented): a request keeps every slot it was given until it retires, as
the engine's allocated-versus-committed lengths do. Slots of rejected drafts are not freed; the next
verify writes its drafts over them and only allocates past them. Freeing them would free whole
pages that still hold accepted tokens. On a failure the run stops (``stop_on_failure``) or records
it and runs on: a failed table replay changes no state; a failed legacy gather is redone with the
clamped one (what the fixed engine takes), so later steps stay comparable.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from workbench import backends
from workbench.analysis.probe import Replayed, classify_replay
from workbench.backends.base import Buffers, TableBackend
from workbench.devices.device import one_torch_thread
from workbench.model.allocator import PagedAllocator
from workbench.model.cases import TableCase
from workbench.model.geometry import Mode, ServingGeometry, cdiv
from workbench.model.outcome import Outcome
from workbench.model.request_table import DUMMY_ROW, RequestTable
from workbench.sim.workload import (
    Request,
    SimConfig,
    Workload,
    check_requests,
)


@dataclass(frozen=True)
class TableStep:
    """One backend's table in one step: its width and what the replay came to."""

    short: str  # the backend's column prefix ("npu", "dsa")
    unit: str  # "pages" or "tokens"
    width: int
    outcome: str
    mode: str | None = None  # None: the step's own mode; else another graph the step replays

    def columns(self) -> dict[str, object]:
        """The record's flat columns for this table: ``npu_width_pages``, ``npu_outcome`` (another
        graph's: ``npu_draft_decode_outcome``)."""
        prefix = self.short if self.mode is None else f"{self.short}_{self.mode.replace('-', '_')}"
        return {f"{prefix}_width_{self.unit}": self.width, f"{prefix}_outcome": self.outcome}


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """One graph step of a run. Tuples run over the batch, in batch order."""

    step: int
    mode: str
    bucket: int  # captured batch size replayed (batch padded up to it)
    req_ids: tuple[int, ...]
    committed: tuple[int, ...]  # committed lengths before the step
    seq_lens: tuple[int, ...]  # what the replay got: s (verify) or s + 1 (decode)
    reads: tuple[int, ...]  # tokens each request's kernels read
    accepted: tuple[int, ...]  # tokens committed by the step
    new_pages: int
    free_pages_before: int
    free_pages_after: int
    exact_fit: bool  # the step took every free page
    out_cache_loc: tuple[int, ...]  # slots handed out by the step
    last_loc: tuple[int, ...]  # decode only: the allocator call's last_loc
    free_list_before: tuple[int, ...]  # decode only: the free list the gather read
    alloc_outcome: str
    tables: tuple[TableStep, ...]  # every backend's table, in the run's component order
    outcome: str  # the first failure of the step, in engine order, or ok
    failing_component: str | None
    failing_request: int | None
    error: str | None
    admitted: tuple[int, ...]
    retracted: tuple[int, ...]
    retired: tuple[int, ...]

    def __getattr__(self, name: str) -> object:
        """A table's flat column by name (``record.npu_outcome``, ``record.dsa_width_tokens``)."""
        for table in self.__dict__.get("tables", ()):
            columns = table.columns()
            if name in columns:
                return columns[name]
        raise AttributeError(name)


@dataclass(frozen=True)
class SimRun:
    config: SimConfig
    seed: int
    requests: tuple[Request, ...]
    records: tuple[StepRecord, ...]
    completed: bool  # every request retired
    stop_reason: str  # "completed", "failure", "out-of-memory" or "max-steps"

    @property
    def failures(self) -> tuple[StepRecord, ...]:
        return tuple(r for r in self.records if Outcome(r.outcome).failed)

    @property
    def first_failure(self) -> StepRecord | None:
        return next(iter(self.failures), None)


@dataclass
class _Live:
    """A running request (mutable: the engine's Req)."""

    req: Request
    row: int
    committed: int
    riding: bool = False  # at the cap, riding one more verify before it retires


@dataclass(frozen=True)
class _Alloc:
    outcome: Outcome
    error: str | None
    slots: tuple[int, ...]
    failing_row: int | None = None


def capture_buckets(max_bs: int) -> tuple[int, ...]:
    """Batch sizes captured at start-up: powers of two below ``max_bs``, then ``max_bs``."""
    return tuple(sorted({1 << i for i in range(max_bs.bit_length()) if 1 << i < max_bs} | {max_bs}))


def exact_fit_victim(seq_lens: Sequence[int], page_size: int) -> int | None:
    """Index of the first row that opens no page yet comes after every page-opening row.

    On an exactly full pool the legacy gather reads ``free_pages[n_new]`` for that row. Worked
    example (the seed), ps 4, seq_lens [5, 10, 7]: row 0 opens a page, rows 1 and 2 do not; row 1
    is the first after the last opener, so it is the victim.
    """
    opens = [s % page_size == 1 % page_size for s in seq_lens]
    last_opener = max((i for i, o in enumerate(opens) if o), default=None)
    if last_opener is None:
        return None
    return next((i for i in range(last_opener + 1, len(opens)) if not opens[i]), None)


@dataclass(frozen=True)
class _Graph:
    """One captured graph of a run: a backend's buffers for one mode."""

    name: str  # the component as the run names it
    backend: TableBackend
    buffers: Buffers
    case: TableCase  # the mode, step and replay it is replayed with
    extra: bool  # another graph than the step's own mode

    def reads(self, committed: Sequence[int], g: ServingGeometry) -> list[int]:
        """Tokens each request's kernel reads: its committed length plus the mode's lookahead."""
        look = self.backend.lookahead(g, self.case.mode, self.case.step_id)
        return [s + look for s in committed]

    def table_step(self, outcome: str) -> TableStep:
        return TableStep(self.backend.short, self.backend.unit, self.buffers.read_table.shape[1], outcome,
                         self.case.mode.value if self.extra else None)


class _Engine:
    """The mutable state of one run: pool, request table, captured buffers, queues."""

    def __init__(self, config: SimConfig, requests: Sequence[Request], rng: random.Random, device: str) -> None:
        g = config.geometry
        self.config, self.rng, self.g = config, rng, g
        self.alloc = PagedAllocator(g.page_size, config.pool_pages, device=device)
        self.table = RequestTable(g.max_bs + 1, g.request_table_width, self.alloc)
        # Captured once for max_bs, as init_cuda_graph_state does: each component's graph of each mode.
        self.graphs: list[_Graph] = []
        for mode in config.replayed_modes:
            step_id = g.spec_steps - 1 if mode is Mode.DRAFT_DECODE else 0
            step_case = TableCase(component="", geometry=g, rule=config.rule, mode=mode, step_id=step_id,
                                  replay=config.replay, options=config.options)
            for name in config.components:
                backend = backends.backend_of(name)
                if backend.mode_problem(mode) or g.invalid_mode_reason(mode, step_id):
                    continue  # this backend captures no such graph
                buffers = backend.allocate(g, backend.width(g, config.rule), rows=backend.graph_rows(g, mode),
                                           case=step_case, device=device)
                self.graphs.append(_Graph(name, backend, buffers, step_case, mode is not config.mode))
        self.buckets = capture_buckets(g.max_bs)
        self.waiting: deque[tuple[Request, int]] = deque((r, r.prompt_len) for r in requests)
        self.running: list[_Live] = []
        self.free_rows = list(range(g.max_bs, 0, -1))
        self.draws = 0

    # ---- scheduling ---------------------------------------------------------------------------

    def admit(self) -> tuple[int, ...]:
        admitted = []
        while self.waiting and self.free_rows:
            req, length = self.waiting[0]
            if self.running and not self._fits(req, length):
                break
            self.waiting.popleft()
            row = self.free_rows.pop()
            self.table.extend(row, length)  # prefill: eager alloc_extend, no graph replay
            self.running.append(_Live(req, row, length))
            admitted.append(req.req_id)
        return tuple(admitted)

    def _fits(self, req: Request, length: int) -> bool:
        ps = self.g.page_size
        remaining = sum(_remaining(live.req, live.committed) for live in self.running) + _remaining(req, length)
        need = cdiv(length, ps) * ps + math.ceil(self.config.conservativeness * remaining)
        return self.alloc.available_size() >= need

    def make_room(self) -> tuple[tuple[int, ...], bool]:
        """Retract the newest requests until the step's pages fit; True when even one does not."""
        retracted: list[int] = []
        while self.alloc.available_size() < self.pages_needed() * self.g.page_size:
            if len(self.running) == 1:
                return tuple(retracted), True
            victim = self.running.pop()
            self._release(victim)
            self.waiting.appendleft((victim.req, victim.committed))  # re-prefilled in full later
            retracted.append(victim.req.req_id)
        return tuple(retracted), False

    def pages_needed(self) -> int:
        """Pages the next step opens, summed over the batch.

        Verify, ps 4, D 4: committed 6 with 8 slots already allocated writes drafts at 6..9, so it
        opens cdiv(10, 4) - cdiv(8, 4) = 1 page. Decode: a request opens one iff (s + 1) % ps == 1.
        """
        ps, d = self.g.page_size, self.g.draft_tokens
        if self.g.speculative:
            return sum(max(0, cdiv(x.committed + d, ps) - cdiv(self.table.filled[x.row], ps)) for x in self.running)
        return sum(1 for x in self.running if (x.committed + 1) % ps == 1 % ps)

    def _release(self, live: _Live) -> None:
        self.table.release(live.row)
        self.free_rows.append(live.row)

    # ---- one step -----------------------------------------------------------------------------

    def allocate_decode(self, batch: list[_Live]) -> tuple[_Alloc, tuple[int, ...], tuple[int, ...]]:
        seq = [x.committed + 1 for x in batch]
        last = [int(self.table.req_to_token[x.row, x.committed - 1]) for x in batch]
        free_list = tuple(self.alloc.free_pages.tolist())
        overreads = len(self.alloc.overreads)
        result = _Alloc(Outcome.OK, None, ())
        try:
            out = self.alloc.alloc_decode(seq, last, backends.gather_of(self.config.gather.value))
        except IndexError as err:
            result = _Alloc(Outcome.INDEX_ERROR, str(err), (), exact_fit_victim(seq, self.g.page_size))
            # The NPU stops here (an AI Core error); to run on, take what the fixed gather takes.
            fixed = backends.gather_of(self.config.gather.value).fixed_by
            if fixed is None:
                raise
            out = self.alloc.alloc_decode(seq, last, backends.gather_of(fixed))
        if len(self.alloc.overreads) > overreads:
            result = _Alloc(Outcome.SILENT_OVERREAD, self.alloc.overreads[-1], ())
        if out is None:
            return _Alloc(Outcome.OUT_OF_MEMORY, "alloc_decode returned None", ()), tuple(last), free_list
        for x, slot in zip(batch, out.tolist()):
            self.table.req_to_token[x.row, x.committed] = slot
            self.table.filled[x.row] = x.committed + 1
        return dataclasses.replace(result, slots=tuple(out.tolist())), tuple(last), free_list

    def allocate_drafts(self, batch: list[_Live]) -> _Alloc:
        """Slots for positions ``allocated .. s + D - 1``: the verify's drafts, past earlier ones."""
        prefix = [self.table.filled[x.row] for x in batch]
        seq = [max(p, x.committed + self.g.draft_tokens) for p, x in zip(prefix, batch)]
        last = [int(self.table.req_to_token[x.row, p - 1]) for p, x in zip(prefix, batch)]
        out = self.alloc.alloc_extend(prefix, seq, last)
        if out is None:
            return _Alloc(Outcome.OUT_OF_MEMORY, "alloc_extend returned None", ())
        slots = out.to(torch.int32)
        offset = 0
        for x, p, s in zip(batch, prefix, seq):
            self.table.req_to_token[x.row, p:s] = slots[offset : offset + s - p]
            self.table.filled[x.row] = s
            offset += s - p
        return _Alloc(Outcome.OK, None, tuple(out.tolist()))

    def replay(self, batch: list[_Live], seq_lens: list[int], reads: list[int]) -> list[tuple[Outcome, str | None, int]]:
        """Every captured graph, the batch padded to its bucket; (outcome, error, widest request) each.

        The step's own graph reads ``reads``; another mode's graph reads the committed lengths plus
        its own lookahead (a draft step ``step_id + 1``, draft-extend nothing past its length: the
        committed one plus ``draft_extend_window``).
        """
        pad = next(b for b in self.buckets if b >= len(batch)) - len(batch)
        rows = [x.row for x in batch] + [DUMMY_ROW] * pad
        r2t, num_slots = self.table.req_to_token, (self.alloc.num_pages + 1) * self.g.page_size
        committed = [x.committed for x in batch]
        results = []
        for graph in self.graphs:
            lens, graph_reads = (seq_lens, reads) if not graph.extra else (committed, graph.reads(committed, self.g))
            if graph.extra and graph.case.mode is Mode.DRAFT_EXTEND and self.config.draft_extend_window:
                # under speculation v2 the draft-extend replays the verify window
                lens = [c + self.config.draft_extend_window for c in committed]
                graph_reads = graph.reads(lens, self.g)

            def replay(graph: _Graph = graph, lens: list[int] = lens) -> Replayed:
                padded = lens + [graph.backend.pad_seq_len] * pad  # padding never raises max(seq_lens)
                overwrite = graph.backend.replay(graph.buffers, r2t, rows, padded, graph.case, num_slots=num_slots)
                return graph.backend.capacity_tokens(self.g, graph.buffers.read_table.shape[1]), overwrite

            widest = max(range(len(batch)), key=lambda i: graph_reads[i])  # the request that sets max_len
            results.append((*classify_replay(graph.backend, replay, graph_reads), widest))
        return results

    def commit(self, batch: list[_Live]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Accept tokens, then retire finished requests; returns (accepted, retired ids)."""
        cap = self.g.context_len - 1
        accepted = []
        for x in batch:
            k = 1
            if self.g.speculative:
                k = self.config.acceptance.draw(self.rng, self.g.draft_tokens, self.draws)
                self.draws += 1
            ceiling = min(x.req.prompt_len + x.req.output_len, cap + self.config.overshoot)
            new = min(x.committed + k, ceiling)
            accepted.append(new - x.committed)
            x.committed = new
        retired = []
        for x in batch:
            at_cap = x.committed >= cap
            done = x.committed >= x.req.prompt_len + x.req.output_len
            if at_cap and not done and self.config.overshoot and not x.riding:
                x.riding = True  # the overlap scheduler sees the finish one step late
            elif at_cap or done:
                self.running.remove(x)
                self._release(x)
                retired.append(x.req.req_id)
        return tuple(accepted), tuple(retired)


def _remaining(req: Request, committed: int) -> int:
    return max(0, req.prompt_len + req.output_len - committed)


# ---- the run ------------------------------------------------------------------------------------


def simulate(
    config: SimConfig, workload: Workload, seed: int, *, device: str = "cpu", check_integrity: bool = False
) -> SimRun:
    """One seeded run; the same (config, workload, seed) gives the same records.

    ``check_integrity`` runs the allocator's ``check_integrity()`` after every step (tests).
    A run steps small tensors, where torch's intra-op threads only add hand-off cost (measured:
    a 3-row ``repeat_interleave`` takes 2.8 ms with 2 threads on a busy 2-core machine, 0.008 ms
    with one), so the run holds torch to one thread and restores the setting afterwards.
    """
    with one_torch_thread():
        return _simulate(config, workload, seed, device, check_integrity)


def _simulate(config: SimConfig, workload: Workload, seed: int, device: str, check_integrity: bool) -> SimRun:
    rng = random.Random(seed)
    requests = workload.requests(rng)
    check_requests(config, requests)
    engine = _Engine(config, requests, rng, device)
    records: list[StepRecord] = []
    stop_reason = "max-steps"
    for step in range(config.max_steps):
        admitted = engine.admit()
        if not engine.running:
            stop_reason = "completed"
            break
        retracted, short = engine.make_room()
        record = _step(engine, step, admitted, retracted, short)
        records.append(record)
        if check_integrity:
            engine.alloc.check_integrity()
        if record.outcome == Outcome.OUT_OF_MEMORY.value:
            stop_reason = "out-of-memory"
            break
        if Outcome(record.outcome).failed and config.stop_on_failure:
            stop_reason = "failure"
            break
    completed = not engine.waiting and not engine.running
    return SimRun(config, seed, tuple(requests), tuple(records), completed, "completed" if completed else stop_reason)


def _step(engine: _Engine, step: int, admitted: tuple[int, ...], retracted: tuple[int, ...], short: bool) -> StepRecord:
    g, batch = engine.g, list(engine.running)
    committed = [x.committed for x in batch]
    speculative = g.speculative
    seq_lens = committed if speculative else [s + 1 for s in committed]
    reads = [s + g.draft_tokens for s in committed] if speculative else seq_lens
    new_pages, free_before = engine.pages_needed(), len(engine.alloc.free_pages)
    last_loc: tuple[int, ...] = ()
    free_list: tuple[int, ...] = ()
    if short:
        alloc = _Alloc(Outcome.OUT_OF_MEMORY, f"the step needs {new_pages} pages, {free_before} are free", ())
    elif speculative:
        alloc = engine.allocate_drafts(batch)
    else:
        alloc, last_loc, free_list = engine.allocate_decode(batch)
    outcomes: list[tuple[str, Outcome, str | None, int | None]] = [
        ("allocator", alloc.outcome, alloc.error, alloc.failing_row)]
    if alloc.outcome is not Outcome.OUT_OF_MEMORY:
        replayed = engine.replay(batch, seq_lens, reads)
        outcomes += [(graph.name, *result) for graph, result in zip(engine.graphs, replayed)]
    first = next((o for o in outcomes if o[1] is not Outcome.OK), None)
    accepted, retired = ((), ()) if alloc.outcome is Outcome.OUT_OF_MEMORY else engine.commit(batch)
    by_graph = [outcome.value for _, outcome, _, _ in outcomes[1:]]
    return StepRecord(
        step=step, mode=engine.config.mode.value,
        bucket=next(b for b in engine.buckets if b >= len(batch)),
        req_ids=tuple(x.req.req_id for x in batch), committed=tuple(committed), seq_lens=tuple(seq_lens),
        reads=tuple(reads), accepted=accepted,
        new_pages=new_pages, free_pages_before=free_before, free_pages_after=len(engine.alloc.free_pages),
        exact_fit=0 < new_pages == free_before, out_cache_loc=alloc.slots, last_loc=last_loc,
        free_list_before=free_list, alloc_outcome=outcomes[0][1].value,
        tables=tuple(graph.table_step(by_graph[i] if i < len(by_graph) else "not-run")
                     for i, graph in enumerate(engine.graphs)),
        outcome=first[1].value if first else Outcome.OK.value,
        failing_component=first[0] if first else None,
        failing_request=batch[first[3]].req.req_id if first and first[3] is not None else None,
        error=first[2] if first else None,
        admitted=admitted, retracted=retracted, retired=retired,
    )
