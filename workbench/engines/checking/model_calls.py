"""The workbench's side: its models, on the same conformance states, answering in the same form.

``behaviour`` is what the engine version under test ships (its entry in data/engines.json plus
what conformance itself pins per version, ``conformance.py``): the sizing rule, width generation,
replay kind, gather and capacity-check order the model must be run with to stand for that version.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from workbench.backends import backend_of, gather_of
from workbench.backends.page_writes import PagedTable
from workbench.backends.sglang.ascend_block_tables import NpuBlockTables, lockstep_full_to_swa
from workbench.backends.sglang.dsa_page_table import DsaPageTable
from workbench.engines.checking.answers import UNWRITTEN, Answer, catching, none, ok, tensor
from workbench.engines.checking.states import State, geometry_of
from workbench.model.allocator import Gather, PagedAllocator
from workbench.model.cases import Replay, TableCase
from workbench.model.geometry import Mode, cdiv

Behaviour = Mapping[str, Any]


def model_alloc_len(state: State, behaviour: Behaviour) -> Answer:
    g = geometry_of({**state, "context_len": 1, "max_bs": 1, "width_gen": behaviour["width_gen"]})
    return ok(value=g.alloc_len_per_decode)


def model_extra(state: State, behaviour: Behaviour) -> Answer:
    g = geometry_of({**state, "context_len": 1, "max_bs": 1, "width_gen": behaviour["width_gen"]})
    return ok(value=g.req_to_token_extra)


# ---- tables -------------------------------------------------------------------------------

def request_tables(state: State, seed: int) -> dict[str, torch.Tensor]:
    """``req_to_token`` (bs + 1, W) int32 with every row full, page aligned, on shuffled pages.

    Row 0 is the dummy row; row r holds logical page k in physical page ``pages[r - 1, k]``, so
    ``req_to_token[r, k * ps + j] = pages[r - 1, k] * ps + j``. Also ``full_to_swa``. A state may
    give the table's width itself (``columns``: a seed case whose lengths its geometry's ``W``
    does not hold).
    """
    g = geometry_of(state)
    ps, width, bs = g.page_size, state.get("columns", g.request_table_width), len(state["seq_lens"])
    per_row = cdiv(width, ps)
    gen = torch.Generator().manual_seed(seed)
    pages = (torch.randperm(bs * per_row, generator=gen) + 1).view(bs, per_row)  # (bs, per_row) int64
    slots = (pages[:, :, None] * ps + torch.arange(ps)).view(bs, per_row * ps)[:, :width]
    req_to_token = torch.cat((torch.zeros((1, width), dtype=torch.int64), slots)).to(torch.int32)
    full_to_swa = lockstep_full_to_swa(bs * per_row, ps) if state["hybrid_swa"] else torch.zeros(1, dtype=torch.int64)
    return {"req_to_token": req_to_token, "full_to_swa": full_to_swa}


def model_ascend_init(state: State, behaviour: Behaviour) -> Answer:
    def call() -> Answer:
        t = NpuBlockTables.allocate(geometry_of(state), behaviour["ascend_rule"], hybrid_swa=state["hybrid_swa"])
        swa = t.block_tables_swa
        return ok(block_tables=list(t.block_tables.shape), block_tables_swa=None if swa is None else list(swa.shape))
    return catching(call)


def model_ascend_replay(state: State, behaviour: Behaviour, tables: dict[str, torch.Tensor]) -> Answer:
    def call() -> Answer:
        g = geometry_of(state)
        bs = len(state["seq_lens"])
        t = NpuBlockTables.allocate(g, behaviour["ascend_rule"], hybrid_swa=state["hybrid_swa"])
        rows, mode = list(range(1, bs + 1)), Mode.parse(state["mode"])
        if state["branch"] == "mirror":
            t.replay(tables["req_to_token"], rows, state["seq_lens"], mode, draft_tokens=g.draft_tokens,
                     step_id=state["step_id"], full_to_swa=tables["full_to_swa"],
                     spec_fill=behaviour["ascend_spec_fill"])
        else:
            host = state["max_seq_len_host"] if state["branch"] == "host" else None
            t.replay_mirrorless(tables["req_to_token"], rows, mode, max_seq_len_host=host,
                                draft_tokens=g.draft_tokens, step_id=state["step_id"])
        swa = t.block_tables_swa[:bs] if t.block_tables_swa is not None and state["branch"] == "mirror" else None
        return ok(block_tables=tensor(t.block_tables[:bs]), block_tables_swa=tensor(swa))
    return catching(call)


def dsa_query_rows(state: State) -> int:
    return state["draft_tokens"] if state["mode"] in ("target-verify", "draft-extend") else 1


def dsa_table_rows(state: State, behaviour: Behaviour) -> int:
    """The rows the DSA page table is captured with: one per query row of the largest batch
    (``max_num_tokens``), or one per request (``max-bs``: the releases whose table served only
    sparse prefill and one-token decode, up to 0.5.5)."""
    if behaviour.get("dsa_rows") == "max-bs":
        return int(state["max_bs"])
    return int(state["max_bs"]) * max(1, dsa_query_rows(state))


def model_dsa_init(state: State, behaviour: Behaviour) -> Answer:
    def call() -> Answer:
        rows = dsa_table_rows(state, behaviour)
        t = DsaPageTable.allocate(geometry_of(state), behaviour["dsa_rule"], rows=rows)
        return ok(page_table=list(t.page_table.shape))
    return catching(call)


def model_dsa_replay(state: State, behaviour: Behaviour, tables: dict[str, torch.Tensor]) -> Answer:
    def call() -> Answer:
        g = geometry_of(state)
        bs, per_request = len(state["seq_lens"]), dsa_query_rows(state)
        t = DsaPageTable.allocate(g, behaviour["dsa_rule"], rows=dsa_table_rows(state, behaviour))
        # draft-extend's rows per request: the accept length at the seed fixes, D from 0.5.23
        accept = g.draft_tokens if behaviour["dsa_draft_extend_rows"] == "draft-tokens" else state.get("accept_len", 1)
        t.replay(tables["req_to_token"], list(range(1, bs + 1)), state["seq_lens"], Mode.parse(state["mode"]),
                 draft_tokens=g.draft_tokens, accept_len=accept, replay=Replay.parse(behaviour["dsa_replay"]))
        used = bs * per_request
        real = t.real_page_table[:used] if t.real_page_table is not None else None
        return ok(page_table=tensor(t.page_table[:used]), real_page_table=tensor(real))
    return catching(call)


# ---- allocators ---------------------------------------------------------------------------

def _allocator(state: State) -> PagedAllocator:
    ps = state["page_size"]
    top = max([1, *state["free_pages"], *state["parked_pages"], *(x // ps + 1 for x in state["last_loc"])])
    alloc = PagedAllocator.from_free_list(ps, state["free_pages"], num_pages=top)
    if state["parked_pages"]:
        alloc.need_sort = True
        alloc.release_pages = torch.tensor(state["parked_pages"], dtype=torch.int64)
    return alloc


def _after(alloc: PagedAllocator, out: torch.Tensor | None, extra: dict[str, Any]) -> Answer:
    free = tensor(alloc.free_pages)
    if out is None:
        return none(free_pages_after=free, **extra)
    return ok(out_cache_loc=tensor(out), free_pages_after=free, **extra)


def model_alloc_decode(state: State, gather: str, *, report_overread: bool = False,
                       out_dtype: torch.dtype = torch.int32) -> Answer:
    """``out_dtype``: the NPU allocator returns int32 slots, the CUDA one int64."""
    def call() -> Answer:
        alloc = _allocator(state)
        out = alloc.alloc_decode(state["seq_lens"], state["last_loc"], gather_of(Gather.parse(gather).value))
        out = None if out is None else out.to(out_dtype)
        extra = {"read_past_free_list": bool(alloc.overreads)} if report_overread else {}
        return _after(alloc, out, extra)
    return catching(call)


def model_alloc_extend(state: State, *, out_dtype: torch.dtype, merge_bound: bool = False,
                       capacity_check: str | None = None, tail: str = "guarded") -> Answer:
    """``merge_bound``: merge parked pages on the CUDA allocator's upper bound (0.5.23).
    ``tail``: the NPU allocator's tail write (``PagedAllocator.alloc_extend``).

    ``capacity_check`` ("before" or "after" the kernel, the CUDA allocator's order) adds
    ``read_past_free_list`` to the answer, as the CUDA rows report it.
    """
    def call() -> Answer:
        alloc = _allocator(state)
        bound = None
        if merge_bound:
            bound = (sum(state["seq_lens"]) - sum(state["prefix_lens"])) // state["page_size"] + len(state["seq_lens"]) + 1
        out = alloc.alloc_extend(state["prefix_lens"], state["seq_lens"], state["last_loc"], merge_bound=bound,
                                 capacity_check=capacity_check or "before", tail=tail)
        extra = {"read_past_free_list": bool(alloc.overreads)} if capacity_check else {}
        return _after(alloc, None if out is None else out.to(out_dtype), extra)
    return catching(call)


def model_fa3_replay(state: State, tables: dict[str, torch.Tensor], width: int, delta: int) -> Answer:
    def call() -> Answer:
        from workbench.backends.sglang.fa3_page_table import Fa3PageTable

        bs = len(state["seq_lens"])
        t = Fa3PageTable.of_width(width, state["page_size"], rows=bs)
        t.replay(tables["req_to_token"], list(range(1, bs + 1)), state["seq_lens"], delta)
        return ok(page_table=tensor(t.page_table), cache_seqlens=tensor(t.cache_seqlens))
    return catching(call)


def model_page_builder(state: State, tables: dict[str, torch.Tensor], *, cache_seqlens: bool) -> Answer:
    """The backend's ``replay`` on a ``PagedTable`` of the engine side's shape (``state["rows"]``
    rows, ``state["width"]`` wide, every entry ``UNWRITTEN``): the table, spill included, and
    the first ``bs`` entries of ``cache_seqlens`` where the engine's kernel writes them."""
    def call() -> Answer:
        bs = len(state["seq_lens"])
        table = PagedTable.of_width(state["width"], state["page_size"], rows=state["rows"], fill=UNWRITTEN)
        backend = backend_of(state["component"])
        case = TableCase(component=state["component"], geometry=geometry_of(state), rule=state["rule"],
                         mode=Mode.parse(state["mode"]), seq_lens=tuple(state["seq_lens"]), step_id=state["step_id"],
                         options=backend.options_of(state))
        backend.replay(table, tables["req_to_token"], list(range(1, bs + 1)), state["seq_lens"],
                                          case, num_slots=0)
        answer = ok(page_table=tensor(table.page_table))
        if cache_seqlens:
            answer["cache_seqlens"] = tensor(table.cache_seqlens[:bs])
        return answer
    return catching(call)


# ---- pooled flat kv_indices ---------------------------------------------------------------

def _pooled(state: State) -> Any:
    from workbench.backends import pooled_backend_of

    return pooled_backend_of(state["backend"]).buffer(state["key"])


def model_pooled_width(state: State) -> Answer:
    """The buffer's step row as the version's rule sizes it (``PooledBuffer.capacity``)."""
    return catching(lambda: ok(value=_pooled(state).capacity(geometry_of(state), state["rule"], state["requests"])))


def model_pooled_check(state: State) -> Answer:
    """``PooledBuffer.host_check`` (what ``replay`` runs first under ``check="assert"``), in the
    engine's form: ok, or the ``AssertionError`` and its message."""
    from workbench.backends.pooled import PooledOverflow

    try:
        _pooled(state).host_check(geometry_of(state), state["rule"], state["seq_lens"])
    except PooledOverflow as error:
        return {"outcome": "raised", "error": f"AssertionError: {error}"}
    return ok()


def model_pooled_writes(state: State, tables: dict[str, torch.Tensor]) -> Answer:
    """``PooledBuffer.replay`` with ``check="none"`` (the stores alone, as the kernel makes them)
    into a flat buffer ``state["total"]`` long, every entry ``UNWRITTEN``: the whole of it."""
    def call() -> Answer:
        out = torch.full((state["total"],), UNWRITTEN, dtype=torch.int32)
        n = len(state["seq_lens"])
        _pooled(state).replay(geometry_of(state), state["rule"], "none", tables["req_to_token"], range(1, n + 1),
                              state["seq_lens"], out=out)
        return ok(kv_indices=tensor(out))
    return catching(call)
