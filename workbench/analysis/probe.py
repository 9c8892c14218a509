"""Execute one engine step on real tensors and say what it came to.

A probe builds the state the engine would be in (a request table filled as a fresh allocator fills it,
buffers sized by the rule), runs the replay or the allocation exactly as the engine does, and
classifies what happened. Errors are torch's own: a failed ``copy_`` is a shape error, a gather
past its tensor an index error. What torch cannot see (a kernel reading past a truncated row, a
kernel reading past the free list) is checked afterwards and reported as a silent over-read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from workbench import backends
from workbench.analysis import capture_cache
from workbench.analysis.cases import AllocatorCase, Case, TableCase
from workbench.backends.base import TableBackend
from workbench.backends.case_backend import BackendCase
from workbench.devices.graph import GRAPH_PATH, NO_READ, choose_path
from workbench.model.allocator import PagedAllocator, pages_needed_for_decode
from workbench.model.outcome import Outcome, Overwrite, ProbeResult, invalid


def probe(case: Case | BackendCase, device: torch.device | str = "cpu") -> ProbeResult:
    if isinstance(case, AllocatorCase):
        return probe_allocator(case, device)
    if isinstance(case, TableCase):
        return probe_table(case, device)
    result: ProbeResult = backends.case_backend_of(case.component).probe(case, device)  # it runs its own step
    return result


# ---- tables ------------------------------------------------------------------------------------


def table_case_problem(case: TableCase) -> str | None:
    """Why ``case`` is not a state the engine can replay, or None."""
    g, mode = case.geometry, case.mode
    backend = backends.backend_of(case.component)
    reason = g.invalid_mode_reason(mode, case.step_id) or backend.mode_problem(mode)
    if reason:
        return reason
    if not case.seq_lens:
        return "seq_lens: empty (a batch has at least one request)"
    bound = g.max_committed_len(mode, case.step_id)
    for s in case.seq_lens:
        if s < 1:
            return f"seq_lens: {s} is below 1 (a committed length counts at least one token)"
        if s > bound:
            return f"seq_lens: {s} is past the largest committed length the request table holds in {mode.value} ({bound})"
    if len(case.seq_lens) > g.max_bs:
        return f"seq_lens: {len(case.seq_lens)} requests exceed the captured max_bs ({g.max_bs})"
    return backend.case_problem(case)


def step_reads(case: TableCase, seq_len: int) -> int:
    """Tokens one request's kernel reads in this step: its committed length plus the lookahead."""
    return seq_len + backends.backend_of(case.component).lookahead(case.geometry, case.mode, case.step_id)


def probe_table(
    case: TableCase, device: torch.device | str = "cpu", *, kernel_read: bool | None = True
) -> ProbeResult:
    """Replay ``case`` into its graph buffers and classify the step.

    ``kernel_read``: after the replay, run the kernel-like read of the buffers (True), skip it
    (False), or run it only where it is a captured graph (None, what sweeps use). On the CPU the
    read cannot change an outcome: every live entry it follows names a slot of the pool, since
    the replay copied it from the request table. On CUDA / NPU it is the graph replay itself.
    The result's ``path`` says what ran: ``graph``, ``eager`` or ``none``.
    """
    problem = table_case_problem(case)
    if problem:
        return invalid(problem)
    g = case.geometry
    backend = backends.backend_of(case.component)
    width = g.request_table_width
    reads = [step_reads(case, s) for s in case.seq_lens]
    # Each request holds slots for every position the step touches (verify writes its D drafts),
    # page aligned, exactly as a fresh allocator fills them.
    lengths = [min(r, width) for r in reads]
    table = capture_cache.request_slots(lengths, width, g.page_size, device)
    path = choose_path(device)  # a captured graph on CUDA / NPU, the same read run eagerly on the CPU
    read = kernel_read if kernel_read is not None else path == GRAPH_PATH
    buffer_width = backend.width(g, case.rule)

    def replay() -> Replayed:
        return _replay(backend, case, buffer_width, table, reads, device, path, read)

    outcome, error = classify_replay(backend, replay, reads)
    return _result(case, outcome, error, buffer_width, max(reads), device, path if read else NO_READ)


Replayed = tuple[int, Overwrite | None]  # tokens a buffer row covers; the first write past a row


def classify_replay(backend: TableBackend, replay: Callable[[], Replayed], reads: Sequence[int]) -> tuple[Outcome, str | None]:
    """Run ``replay`` and classify it as a probe does.

    A ``copy_`` that raises is a shape error, a gather past its tensor an index error; a replay
    that wrote past a row's end is a silent overwrite; one that succeeds while some request reads
    more tokens than its row covers is a silent over-read. Shared with the serving-run simulation,
    so a run and a probe of the same state agree.
    """
    try:
        capacity, overwrite = replay()
    except RuntimeError as err:
        return Outcome.SHAPE_ERROR, str(err)
    except IndexError as err:
        return Outcome.INDEX_ERROR, str(err)
    if overwrite is not None:
        return Outcome.SILENT_OVERWRITE, overwrite.message(backend.buffer_name)
    over = [(i, r) for i, r in enumerate(reads) if r > capacity]
    if over:
        row, r = over[0]
        return Outcome.SILENT_OVERREAD, (
            f"silent over-read: request {row} reads {r} tokens but its {backend.buffer_name} row covers {capacity}")
    return Outcome.OK, None


def _replay(
    backend: TableBackend, case: TableCase, width: int, table: capture_cache.RequestSlots, reads: list[int],
    device: torch.device | str, path: str, read: bool,
) -> Replayed:
    """Replay into the captured buffers, then (if ``read``) the kernel-like read; returns the tokens
    a buffer row covers and the first write past a row."""
    g = case.geometry
    bs = len(case.seq_lens)
    state = capture_cache.captured(backend, case, width, rows=backend.probe_rows(case, width),
                                   num_slots=table.num_slots, device=device, path=path)
    overwrite = backend.replay(state.buffers, table.req_to_token, range(1, bs + 1), list(case.seq_lens), case,
                               num_slots=table.num_slots)  # the host-side copy_: a shape error is raised here
    if read:
        state.read().run(backend.read_lengths(case, reads))
    # A page-level table of cdiv(B, ps) pages covers more than B tokens, but a token-granular
    # backend copied only the first B from the request table: its capacity is its width.
    return backend.capacity_tokens(g, width), overwrite


def _result(
    case: TableCase, outcome: Outcome, error: str | None, width: int, reads: int, device: torch.device | str,
    path: str = "eager",
) -> ProbeResult:
    return ProbeResult(
        outcome, error, buffer_width=width, request_table_width=case.geometry.request_table_width,
        reads=reads, device=str(torch.device(device)), path=path,
    )


# ---- allocator ---------------------------------------------------------------------------------


def allocator_case_problem(case: AllocatorCase) -> str | None:
    """Why ``case`` is not a state the allocator can be in, or None."""
    ps = case.page_size
    if len(case.seq_lens) != len(case.last_loc):
        return f"last_loc: {len(case.last_loc)} entries for {len(case.seq_lens)} seq_lens"
    for s, loc in zip(case.seq_lens, case.last_loc):
        if s < 2:
            return f"seq_lens: {s} is below 2 (a decoding request has a token before the new one)"
        if loc < 0:
            return f"last_loc: {loc} is negative (it is the slot of the request's last token)"
        if (loc + 2) % ps != s % ps:
            return (
                f"last_loc: {loc} is inconsistent with seq_lens {s} at page size {ps} "
                f"(the engine's check (last_loc + 2) % ps == seq_lens % ps fails)"
            )
        if loc < ps:
            return f"last_loc: {loc} lies in the reserved page 0"
    listed = list(case.free_pages) + list(case.parked_pages)
    if any(p < 1 for p in listed):
        return f"free_pages: page {min(listed)} is not a page id (page 0 is reserved; ids start at 1)"
    if len(set(listed)) != len(listed):
        return "free_pages: a page is listed twice (free and parked pages must be distinct)"
    held = {loc // ps for loc in case.last_loc}
    both = sorted(held & set(listed))
    if both:
        return f"free_pages: page {both[0]} is listed free but holds a request's last token"
    return None


def probe_allocator(case: AllocatorCase, device: torch.device | str = "cpu") -> ProbeResult:
    problem = allocator_case_problem(case)
    if problem:
        return invalid(problem)
    ps = case.page_size
    top = max([*case.free_pages, *case.parked_pages, *(loc // ps for loc in case.last_loc)])
    alloc = PagedAllocator.from_free_list(ps, case.free_pages, num_pages=top, device=device)
    if case.parked_pages:
        alloc.need_sort = True
        alloc.release_pages = torch.as_tensor(case.parked_pages, dtype=torch.int64, device=alloc.device)
        alloc.owned_pages[alloc.release_pages] = False
    dev = str(alloc.device)
    try:
        out = alloc.alloc_decode(list(case.seq_lens), list(case.last_loc), backends.gather_of(case.gather.value))
    except IndexError as err:
        return ProbeResult(Outcome.INDEX_ERROR, str(err), device=dev)
    after = alloc.free_pages.tolist()
    if alloc.overreads:
        return ProbeResult(Outcome.SILENT_OVERREAD, alloc.overreads[0], free_pages_after=after, device=dev)
    if out is None:
        need = pages_needed_for_decode(case.seq_lens, ps)
        message = f"alloc_decode returned None: {need} new pages needed, {len(after)} free after merging"
        return ProbeResult(Outcome.OUT_OF_MEMORY, message, free_pages_after=after, device=dev)
    return ProbeResult(Outcome.OK, None, out_cache_loc=out.tolist(), free_pages_after=after, device=dev)

