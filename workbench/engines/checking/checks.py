"""Every engine function conformance checks, with the states it tries and both sides' calls.

A ``Check`` names the engine modules it needs and the functions (table rows) it covers; its
``pairs`` yields, per state, the engine's call and the model's call, both still to be run. The
states of a row are the seed cases where the row has one, the sweep-grid boundaries (the
committed length at the first failing one and one below), then ``count`` seeded random states.
"""

from __future__ import annotations

import importlib
import inspect
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import ModuleType
from typing import Any

import torch

from workbench.analysis.seeds import GLM_DSA, QWQ_NPU
from workbench.backends import POOLED_BACKENDS, PooledBuffer, backend_of, pooled_backend_of
from workbench.engines.checking import model_calls as mc
from workbench.engines.checking import reqtable_checks, scheduler_checks
from workbench.engines.checking import states as st
from workbench.engines.checking.answers import Answer, Moved
from workbench.engines.sglang import calls as ec
from workbench.engines.sglang import reqtable_calls, scheduler_calls
from workbench.model.cases import TableCase
from workbench.model.geometry import Mode, cdiv

Pair = tuple[st.State, Callable[[], Answer], Callable[[], Answer]]
Pairs = Callable[[str, Mapping[str, ModuleType], Mapping[str, Any], random.Random, int], Iterator[Pair]]


@dataclass(frozen=True)
class Check:
    modules: tuple[str, ...]  # keys into the version's module paths (first one names the row's import)
    functions: tuple[str, ...]
    pairs: Pairs
    triton: tuple[str, ...] = field(default=())  # functions that run a Triton kernel
    # function -> the workbench backend whose model the row runs, where that model stands for the
    # versions whose entry in data/engines.json lists the backend only (the worker skips the others)
    backends: Mapping[str, str] = field(default_factory=dict)
    # True: the row's model needs no data/engines.json entry (it runs for every listed release)
    any_release: bool = False

    def needs_triton(self, function: str) -> bool:
        return function in self.triton


# Where each module lives in 0.5.23; a version whose files moved overrides it (conformance.py).
MODULE_PATHS = {
    "sizing": "sglang.srt.mem_cache.allocation_sizing",
    "ascend": "sglang.srt.hardware_backend.npu.attention.ascend_backend",
    "dsa": "sglang.srt.layers.attention.dsa_backend",
    "fbi": "sglang.srt.model_executor.forward_batch_info",
    "npu_alloc": "sglang.srt.hardware_backend.npu.allocator_npu",
    "paged": "sglang.srt.mem_cache.allocator.paged",
    "metadata": "sglang.kernels.ops.attention.metadata",
    "trtllm_mha_graph": "sglang.kernels.ops.attention.trtllm_mha_graph_metadata",
    "trtllm_mha_page_table": "sglang.kernels.ops.attention.trtllm_mha_page_table",
    "kv_indices": "sglang.kernels.ops.attention.kv_indices",
    "aiter_page_table": "sglang.kernels.ops.attention.aiter_unified_page_table",
    "spec_utils": "sglang.srt.speculative.spec_utils",
    "attn_utils": "sglang.kernels.ops.attention.utils",
    "cache_locs": "sglang.kernels.ops.speculative.cache_locs",
    **scheduler_calls.MODULE_PATHS,
    **reqtable_calls.MODULE_PATHS,
}


def import_modules(keys: Sequence[str], overrides: Mapping[str, str]) -> dict[str, ModuleType]:
    return {key: importlib.import_module(overrides.get(key, MODULE_PATHS[key])) for key in keys}


def settle_torch_without_triton() -> None:
    """Import the torch modules that probe for triton before any stand-in exists.

    torch caches "no triton" at import; were a stand-in ``triton`` in ``sys.modules`` first,
    torch would read its version and fail.
    """
    for name in ("torch._inductor.ir", "torch._inductor.debug", "torch._inductor.utils",
                 "torch._inductor.kernel", "torch._inductor.runtime.hints", "torch._dynamo"):
        importlib.import_module(name)


# ---- sizing -------------------------------------------------------------------------------

def _sizing_pairs(function: str, m: Mapping[str, ModuleType], b: Mapping[str, Any], rng: random.Random,
                  count: int) -> Iterator[Pair]:
    for state in st.sizing_states(rng, count):
        if function.endswith("get_alloc_len_per_decode"):
            yield state, partial(ec.engine_alloc_len, m["sizing"], state), partial(mc.model_alloc_len, state, b)
        else:
            yield state, partial(ec.engine_extra, m["sizing"], state), partial(mc.model_extra, state, b)


# ---- table states: seeds, boundaries, random ----------------------------------------------

def _seed_state(seed_case: Mapping[str, Any], algorithm: str, name: str) -> st.State:
    shape = {"spec_steps": 1, "spec_topk": 1, "draft_has_kv": True, "step_id": 0, "hybrid_swa": False,
             "width_gen": "g1", "max_bs": 1}
    keys = ("context_len", "page_size", "draft_tokens", "spec_steps", "spec_topk", "draft_has_kv", "seq_lens", "mode")
    return {**shape, **{k: seed_case[k] for k in keys if k in seed_case}, "algorithm": algorithm, "seed": name}


def _grid_boundaries(rng: random.Random, width_of: Callable[[st.State], int], look: Callable[[st.State], int],
                     unit: Callable[[st.State], int], modes: tuple[str, ...]) -> Iterator[st.State]:
    """The sweep grid's boundaries: the first committed length whose reads pass the width."""
    for ctx in (4096, 32768, 90000, 1048576):
        for ps in (1, 64, 128, 256):
            for d in (0, 4, 6, 16):
                for mode in modes:
                    if (not d and mode != "decode") or (ctx > 100_000 and (ps == 1 or d > 6)):
                        continue  # 1M-column token tables times 16 rows: the random states cover it
                    state: st.State = {"context_len": ctx, "page_size": ps, "draft_tokens": d, "spec_steps": max(1, d - 1),
                                       "spec_topk": 1, "draft_has_kv": True, "algorithm": "EAGLE" if d else None,
                                       "width_gen": rng.choice(("g1", "g2", "g3")), "mode": mode, "step_id": 0,
                                       "hybrid_swa": False, "max_bs": 1}
                    g = st.geometry_of(state)
                    top = g.max_committed_len(Mode.parse(mode))
                    first = min(width_of(state) * unit(state) - look(state) + 1, top)
                    yield from st.boundary_states(state, first)


def _table_states(rng: random.Random, count: int, seeds: Sequence[st.State], modes: tuple[str, ...],
                  width_of: Callable[[st.State], int], unit: Callable[[st.State], int]) -> Iterator[st.State]:
    def look(s: st.State) -> int:
        return st.geometry_of(s).lookahead(Mode.parse(s["mode"]), s["step_id"])

    yield from seeds
    yield from _grid_boundaries(rng, width_of, look, unit, modes)
    for _ in range(count):
        yield st.table_state(rng, modes=modes)


def _ascend_width(b: Mapping[str, Any]) -> Callable[[st.State], int]:
    from workbench.backends.sglang.ascend_block_tables import RULES

    return lambda s: RULES[b["ascend_rule"]].width(st.geometry_of(s))


def _dsa_width(b: Mapping[str, Any]) -> Callable[[st.State], int]:
    from workbench.backends.sglang.dsa_page_table import RULES

    return lambda s: RULES[b["dsa_rule"]].width(st.geometry_of(s))


ASCEND_SEEDS = [_seed_state(QWQ_NPU.before, "NGRAM", "QwQ-32B NGRAM verify at 32753 (the Ascend seed)")]


def _ascend_pairs(function: str, m: Mapping[str, ModuleType], b: Mapping[str, Any], rng: random.Random,
                  count: int) -> Iterator[Pair]:
    branch = function.split("[")[-1].rstrip("]") if "[" in function else "init"
    width, page = _ascend_width(b), (lambda s: s["page_size"])
    # a release whose backend keeps no sliding-window table (0.5.9) reads the full one for every
    # layer: a hybrid-SWA model is, to it, a model without one
    swa_table = "block_tables_swa" in inspect.getsource(m["ascend"].AscendAttnBackend)
    for i, state in enumerate(_table_states(rng, count, ASCEND_SEEDS, st.MODES, width, page)):
        state = {**state, "branch": branch, **({} if swa_table else {"hybrid_swa": False})}
        if branch == "init":
            yield state, partial(ec.engine_ascend_init, m["ascend"], state), partial(mc.model_ascend_init, state, b)
            continue
        if branch == "host":
            if not state["draft_tokens"]:
                continue  # without speculation the engine adds D = None: not a state it replays
            state["max_seq_len_host"] = max(state["seq_lens"]) + rng.randint(0, state["page_size"])
        tables = mc.request_tables(state, seed=i)
        yield (state, partial(ec.engine_ascend_replay, m["ascend"], m["fbi"], state, tables),
               partial(mc.model_ascend_replay, state, b, tables))


DSA_SEEDS = [_seed_state(GLM_DSA.before, "EAGLE", "GLM-5.2 EAGLE verify at 90001 (the DSA seed)")]


def _dsa_pairs(function: str, m: Mapping[str, ModuleType], b: Mapping[str, Any], rng: random.Random,
               count: int) -> Iterator[Pair]:
    mode = function.split("[")[-1].rstrip("]") if "[" in function else None
    modes = (mode,) if mode else ("decode", "target-verify", "draft-extend")
    seeds = [s for s in DSA_SEEDS if s["mode"] in modes]
    for i, state in enumerate(_table_states(rng, count, seeds, modes, _dsa_width(b), lambda s: 1)):
        # One query row per request in the capture as well (max_bs = bs): a DSA table is
        # rows x W int32, and every spare row would be zeros the two sides copy alike.
        state = {**state, "hybrid_swa": False, "max_bs": len(state["seq_lens"])}
        if state["mode"] == "draft-extend":  # tokens each request accepted: 1 .. D, one for the batch
            state["accept_len"] = rng.randint(1, state["draft_tokens"])
        if mode is None:
            yield state, partial(ec.engine_dsa_init, m["dsa"], state), partial(mc.model_dsa_init, state, b)
            continue
        width = st.geometry_of(state).request_table_width
        if width * len(state["seq_lens"]) * max(1, state["draft_tokens"]) > 1 << 22:
            # keep a state's tables near 16 MB: one request, and at most 4M/W query rows of it
            state = {**state, "seq_lens": state["seq_lens"][:1], "max_bs": 1}
            if state["draft_tokens"] > max(1, (1 << 22) // width) and mode != "decode" and "seed" not in state:
                state = _fewer_drafts(state, max(1, (1 << 22) // width))
        tables = mc.request_tables(state, seed=i)
        yield (state, partial(ec.engine_dsa_replay, m["dsa"], m["fbi"], state, tables),
               partial(mc.model_dsa_replay, state, b, tables))


def _fewer_drafts(state: st.State, draft_tokens: int) -> st.State:
    """The state with ``draft_tokens`` drafts (an EAGLE chain of that length), its lengths kept in the table."""
    state = {**state, "draft_tokens": draft_tokens, "spec_steps": max(1, draft_tokens - 1), "spec_topk": 1,
             "step_id": 0, "accept_len": min(state.get("accept_len", 1), draft_tokens)}
    top = st.geometry_of(state).max_committed_len(Mode.parse(state["mode"]))
    return {**state, "seq_lens": [min(s, top) for s in state["seq_lens"]]}


# ---- allocators ---------------------------------------------------------------------------

def _npu_alloc_pairs(function: str, m: Mapping[str, ModuleType], b: Mapping[str, Any], rng: random.Random,
                     count: int) -> Iterator[Pair]:
    cls = m["npu_alloc"].NPUPagedTokenToKVPoolAllocator
    if function.endswith("alloc_decode"):
        for state in [st.SEED_DECODE, *(st.decode_state(rng) for _ in range(count))]:
            yield (state, partial(ec.engine_alloc_decode, cls, state),
                   partial(mc.model_alloc_decode, state, b["npu_gather"]))
        return
    # Batches opening fewer than 200 pages go to an Ascend Triton kernel (sgl_kernel_npu) that
    # cannot run here; those at 200 or more take the engine's torch path, and a short pool
    # returns None before either (the states below make both).
    states = (st.extend_state(rng, min_new_pages=200 if j % 4 else 0, short=not j % 4) for j in range(count))
    for state in [st.EXTEND_IN_PAGE, *states]:
        yield (state, partial(ec.engine_alloc_extend, cls, state),
               partial(mc.model_alloc_extend, state, out_dtype=getattr(torch, b["npu_extend_dtype"]),
                       tail=b["npu_extend_tail"]))


def _cuda_alloc_pairs(function: str, m: Mapping[str, ModuleType], b: Mapping[str, Any], rng: random.Random,
                      count: int) -> Iterator[Pair]:
    cls = m["paged"].PagedTokenToKVPoolAllocator
    triton = "[triton]" in function
    if not triton and "use_triton_kernels" not in inspect.getsource(cls):
        raise Moved("this version has no torch fallback: its allocator launches the Triton kernels only")
    if "alloc_decode" in function:
        for state in [st.SEED_DECODE, *(st.decode_state(rng) for _ in range(count))]:
            yield (state, partial(ec.engine_alloc_decode, cls, state, triton=triton, watch=m["paged"]),
                   partial(mc.model_alloc_decode, state, b["cuda_gather"], out_dtype=torch.int64, report_overread=True))
        return
    for _ in range(count):
        state = st.extend_state(rng, pow2=triton)
        yield (state, partial(ec.engine_alloc_extend, cls, state, triton=triton, watch=m["paged"]),
               partial(mc.model_alloc_extend, state, out_dtype=torch.int64, merge_bound=b["cuda_merge_bound"],
                       capacity_check="after" if b["cuda_gather"] == "cuda-masked" else "before"))


FA3_PAGE_SIZES = (1, 2, 16, 64, 128, 256)  # the kernel asserts a power of two


def _fa3_pairs(function: str, m: Mapping[str, ModuleType], b: Mapping[str, Any], rng: random.Random,
               count: int) -> Iterator[Pair]:
    """The fused kernel ``normal_decode_set_metadata`` (interpreted) against ``Fa3PageTable.replay``.

    Contexts stay at 2048 or below: the interpreter runs one program per row and 128 pages, and
    widths, not lengths, are what the kernel's bound is about. Every state's seq_lens sit at the
    row's end (the boundary and around it) or anywhere below it.
    """
    from workbench.backends.sglang.fa3_page_table import RULES

    rule = str(b.get("fa3_rule", "context"))
    for i in range(count):
        state = st.table_state(rng, modes=("decode", "target-verify", "draft-decode"))
        state = {**state, "context_len": rng.randint(16, 2048), "page_size": rng.choice(FA3_PAGE_SIZES),
                 "hybrid_swa": False}
        g = st.geometry_of({**state, "max_bs": 1})
        width = RULES[rule].width(g)
        look = g.lookahead(Mode.parse(state["mode"]), state["step_id"])
        top = g.max_committed_len(Mode.parse(state["mode"]), state["step_id"])
        first = width * g.page_size - look + 1  # the first length whose read passes the row
        near = [max(1, min(top, first + rng.randint(-2, 1))) for _ in state["seq_lens"]]
        state["seq_lens"] = near if i % 3 else [rng.randint(1, top) for _ in state["seq_lens"]]
        tables = mc.request_tables(state, seed=i)
        yield (state, partial(ec.engine_fa3_replay, m["metadata"], state, tables, width, look),
               partial(mc.model_fa3_replay, state, tables, width, look))


# ---- page-table builders: XPU, TRT-LLM MHA (graph, eager), FlashMLA, TRT-LLM MLA, AITER ---

XPU, TRT_MHA, FLASHMLA, TRT_MLA, AITER = (
    "sglang-xpu-page-table", "sglang-trtllm-mha-page-table", "sglang-flashmla-page-table",
    "sglang-trtllm-mla-page-table", "sglang-aiter-page-table")


@dataclass(frozen=True)
class Builder:
    """One of the engine's Triton page-table builders, as one backend path calls it, and the
    workbench backend whose ``replay`` stands for it."""

    module: str  # key into MODULE_PATHS
    component: str  # the workbench backend
    engine: Callable[..., Answer]  # sglang_calls: (module, state, tables, width, delta) -> Answer
    page_sizes: tuple[int, ...]  # those the kernel and the backend allow
    # tokens one program of the builder's grid covers at page size ps (where the grid, not the
    # width, bounds a row's stores), or None: random contexts then go near its multiples too
    grid_tokens: Callable[[int], int] | None = None
    cache_seqlens: bool = False  # the kernel writes cache_seqlens (compared too)
    path: str | None = None  # TRT-LLM MHA's ``path`` option
    # case option -> the release's learned setting that gives it (behaviour.WHERE)
    learned: Mapping[str, str] = field(default_factory=dict)


BUILDERS: dict[str, Builder] = {
    # the kernel asserts a power-of-two page size (metadata.py:536); XPU runs 64/128 (MLA 16/32)
    "metadata.normal_decode_set_metadata[xpu]": Builder(
        "metadata", XPU, ec.engine_xpu_page_table, (1, 2, 16, 64, 128), cache_seqlens=True),
    # the backend's case check: 4096 % ps == 0 (the eager builder asserts it); 0.5.23 runs 16-128
    "trtllm_mha_graph_metadata.update_trtllm_mha_graph_metadata": Builder(
        "trtllm_mha_graph", TRT_MHA, ec.engine_trtllm_mha_graph, (1, 2, 16, 32, 64, 128, 256),
        cache_seqlens=True, path="graph", learned={"graph_fill": "trtmha_graph_fill"}),
    "trtllm_mha_page_table.build_trtllm_mha_page_table": Builder(
        "trtllm_mha_page_table", TRT_MHA, ec.engine_trtllm_mha_eager, (1, 2, 16, 32, 64, 128, 256, 1024),
        grid_tokens=lambda ps: 4096, path="eager"),
    "kv_indices.create_flashmla_kv_indices_triton[flashmla]": Builder(
        "kv_indices", FLASHMLA, ec.engine_flashmla_kv_indices, (64,), grid_tokens=lambda ps: 4096,
        learned={"grid": "flashmla_grid"}),
    # _calc_padded_blocks needs 128 // ps > 0 and tl.arange a power of two
    "kv_indices.create_flashmla_kv_indices_triton[trtllm-mla]": Builder(
        "kv_indices", TRT_MLA, ec.engine_trtllm_mla_kv_indices, (1, 2, 16, 32, 64, 128), grid_tokens=lambda ps: 4096,
        learned={"grid": "trtmla_grid"}),
    # any page size; AITER runs 1 or 64
    "aiter_unified_page_table.scatter_req_to_token_to_page_table_kernel": Builder(
        "aiter_page_table", AITER, ec.engine_aiter_verify, (1, 2, 16, 64), grid_tokens=lambda ps: 1024 * ps),
}

# The worked cases (docs/engine-facts.md#sglang-page-builders-on-a-cpu: ps 16, a row of 4 pages, a
# verify reading 66 tokens, which XPU, TRT-LLM MHA eager, FlashMLA and AITER store into the next row
# and TRT-LLM MHA's graph kernel stops at; and the grids' edge cases): function, page size, width in pages,
# committed lengths, D (each a target verify). Each is also tried with its lengths reversed: the
# interpreter runs a kernel's programs in batch order, so a first request's spill into row 1 is
# overwritten by row 1's own stores and its table equals one without the spill (9 of these 10
# cases); reversed, the long request is the last one and its spill lands in the row below the
# batch, which no request's own stores cover.
BUILDER_SEEDS: tuple[tuple[str, int, int, tuple[int, ...], int, str], ...] = (
    ("metadata.normal_decode_set_metadata[xpu]", 16, 4, (62, 20), 4,
     "worked case: ps 16, 4 pages, a verify reading 66 tokens stores a fifth page into row 1"),
    ("metadata.normal_decode_set_metadata[xpu]", 1, 8, (10, 3, 8), 2,
     "ps 1, 8 pages: rows 0 and 2 store 4 and 2 pages past their ends"),
    ("trtllm_mha_graph_metadata.update_trtllm_mha_graph_metadata", 16, 4, (62, 20), 4,
     "worked case: the graph kernel stops at the row's end (max_seq_pages = 4)"),
    ("trtllm_mha_page_table.build_trtllm_mha_page_table", 16, 4, (62, 20), 4,
     "worked case: the eager builder's grid of 256 pages lets page 4 into row 1"),
    ("trtllm_mha_page_table.build_trtllm_mha_page_table", 1024, 4, (4100, 5), 4,
     "ps 1024: 4 pages are the grid's one program, the store stops at the row's end"),
    ("trtllm_mha_page_table.build_trtllm_mha_page_table", 1024, 3, (3100, 5), 4,
     "ps 1024: 3 pages, the grid's program of 4 stores page 3 into row 1"),
    ("kv_indices.create_flashmla_kv_indices_triton[flashmla]", 64, 3, (190, 70), 4,
     "FlashMLA: 3 pages, a program of 64 stores page 3 into row 1"),
    ("kv_indices.create_flashmla_kv_indices_triton[trtllm-mla]", 64, 64, (4094, 70), 4,
     "TRT-LLM MLA: 64 pages (padded), the grid ends at the row's end"),
    ("aiter_unified_page_table.scatter_req_to_token_to_page_table_kernel", 16, 4, (62, 20), 4,
     "worked case: the verify scatter's program of 1024 pages stores page 4 into row 1"),
    ("aiter_unified_page_table.scatter_req_to_token_to_page_table_kernel", 1, 1024, (1022, 5), 4,
     "ps 1, 1024 pages: the grid ends at the row's end, no spill"),
)


def _rows_for(state: st.State, width: int, look: int) -> int:
    """Rows the table needs so that every store lands in it: the batch's and as many below as
    the longest spill reaches (one at least), since the kernels' stores are bounded by each
    request's live pages ``cdiv(s + look, ps)`` and never by the row."""
    ps = state["page_size"]
    reach = [i + cdiv(cdiv(s + look, ps), width) for i, s in enumerate(state["seq_lens"])]
    return max(len(state["seq_lens"]) + 1, *reach)


def _builder_seeds(function: str) -> Iterator[st.State]:
    builder = BUILDERS[function]
    cases = [(name, ps, width, lens, d, story) for name, ps, width, seq_lens, d, story in BUILDER_SEEDS
             for lens, story in ((seq_lens, story),
                                 (seq_lens[::-1], f"{story} (lengths reversed: the last request's spill, if any, "
                                                  "lands below the batch)"))]
    for name, ps, width, seq_lens, d, story in cases:
        if name != function:
            continue
        state: st.State = {"component": builder.component, "context_len": width * ps, "page_size": ps,
                           "draft_tokens": d, "spec_steps": 1, "spec_topk": 1, "draft_has_kv": True,
                           "width_gen": "g1", "max_bs": 1, "mode": "target-verify", "step_id": 0,
                           "hybrid_swa": False, "rule": "context", "seq_lens": list(seq_lens), "width": width,
                           "columns": max((width + 2) * ps, max(seq_lens) + d), "seed": story}
        if builder.path:
            state["path"] = builder.path
        yield {**state, "rows": _rows_for(state, width, d)}


def _builder_context(rng: random.Random, builder: Builder, ps: int) -> int:
    """16-2048 tokens (small widths: the interpreter runs one program per row and block); where
    the builder's grid bounds its stores, half the contexts are near one or two of the grid's
    programs instead, where the grid's end meets the row's end (or just misses it)."""
    if builder.grid_tokens is not None and rng.random() < 0.5:
        return max(16, rng.randint(1, 2) * builder.grid_tokens(ps) + rng.randint(-2 * ps, 2 * ps))
    return rng.randint(16, 2048)


def _builder_states(function: str, b: Mapping[str, Any], rng: random.Random, count: int) -> Iterator[st.State]:
    """The worked cases, then ``count`` seeded states: widths from the version's sizing rule,
    a third of the batches anywhere below the row's end, the others at it (the first length whose
    read passes the row, -2 .. +2), in every mode the backend has a graph for."""
    builder = BUILDERS[function]
    backend = backend_of(builder.component)
    modelled = b.get("backends", {})
    if builder.component not in modelled:
        raise Moved(f"this version's entry in data/engines.json does not list {builder.component}")
    rule = str(modelled[builder.component].get("rule", "context"))
    # a learned option the release's states could not tell apart is left at the backend's default,
    # under which every one of those states agreed
    learned = {option: b[setting] for option, setting in builder.learned.items() if b.get(setting) is not None}
    yield from ({**state, **learned} for state in _builder_seeds(function))
    modes = tuple(mode.value for mode in backend.modes)
    for i in range(count):
        while True:
            state = st.table_state(rng, modes=modes)
            ps = rng.choice(builder.page_sizes)
            state = {**state, "component": builder.component, "context_len": _builder_context(rng, builder, ps),
                     "page_size": ps, "hybrid_swa": False, "rule": rule, **({"path": builder.path} if builder.path else {}),
                     **learned}
            g = st.geometry_of({**state, "max_bs": 1})
            mode = Mode.parse(state["mode"])
            case = TableCase(component=builder.component, geometry=g, rule=rule, mode=mode, step_id=state["step_id"],
                             options=(("path", builder.path),) if builder.path else ())
            if backend.case_problem(case) is None:  # AITER's unified verify: topk 1 only
                break
        width = backend.width(g, rule)
        look = g.lookahead(mode, state["step_id"])
        top = g.max_committed_len(mode, state["step_id"])
        first = width * ps - look + 1  # the first length whose read passes the row
        near = [max(1, min(top, first + rng.randint(-2, 2))) for _ in state["seq_lens"]]
        state["seq_lens"] = near if i % 3 else [rng.randint(1, top) for _ in state["seq_lens"]]
        state["width"] = width
        yield {**state, "rows": _rows_for(state, width, look)}


def _builder_pairs(function: str, m: Mapping[str, ModuleType], b: Mapping[str, Any], rng: random.Random,
                   count: int) -> Iterator[Pair]:
    """The engine's builder (interpreted) filling a view of the first ``bs`` rows of a taller
    table, against the backend's ``replay`` on a ``PagedTable`` of the same shape: the tables,
    spill included, must be equal entry for entry.

    Every state the count asks for is run: at 1000 random states a row takes 15-40 s under the
    interpreter on one core (measured: XPU's fused kernel the slowest), so none is capped.
    """
    builder = BUILDERS[function]
    for i, state in enumerate(_builder_states(function, b, rng, count)):
        look = st.geometry_of(state).lookahead(Mode.parse(state["mode"]), state["step_id"])
        tables = mc.request_tables(state, seed=i)
        yield (state, partial(builder.engine, m[builder.module], state, tables, state["width"], look),
               partial(mc.model_page_builder, state, tables, cache_seqlens=builder.cache_seqlens))


def _builder_checks() -> Iterator[Check]:
    """One check per kernel module, one row per builder in it."""
    for module in dict.fromkeys(builder.module for builder in BUILDERS.values()):
        functions = tuple(f for f, builder in BUILDERS.items() if builder.module == module)
        yield Check((module,), functions, _builder_pairs, triton=functions,
                    backends={f: BUILDERS[f].component for f in functions})


# ---- pooled flat kv_indices: the draft helpers, the host checks, the two kernels ----------
#
# The states draw, per state, one of the pooled buffers the version's entry in data/engines.json
# lists for the row (its backend, key and rule): the model stands for what that entry says.

DRAFT_KEYS = ("draft-decode", "draft-decode-eager")
VERIFY_KEYS = ("target-verify",)
SPARE = 64  # entries after the furthest store the model makes: a kernel storing further is seen there
INT32_OFFSETS = 2**31  # draft_kv_indices_buffer_width asserts num_seqs * topk * ctx below it


def _pooled_listed(b: Mapping[str, Any], keys: tuple[str, ...], check: str | None = None) -> list[tuple[str, str, str]]:
    """(backend, key, rule) of every pooled buffer of ``keys`` the version's entry lists (with ``check``)."""
    listed = b.get("backends", {})
    return [(backend.name, key, str(entry["rule"])) for backend in POOLED_BACKENDS
            for key, entry in listed.get(backend.name, {}).items()
            if key in keys and (check is None or entry["check"] == check)]


def _require(listed: list[tuple[str, str, str]], what: str) -> list[tuple[str, str, str]]:
    if not listed:
        raise Moved(f"this version's entry in data/engines.json lists no {what}")
    return listed


def _need(module: ModuleType, *names: str, why: str) -> None:
    for name in names:
        if not hasattr(module, name):
            raise Moved(f"this version has no {module.__name__}.{name} ({why})")


def _pooled_geometry(rng: random.Random, choice: tuple[str, str, str], *, kernel: bool) -> st.State | None:
    """A launch for one buffer, or None where its backend has no such buffer (``applies``).

    Contexts: 64 .. 1M log-uniform for the host-side rows; under the interpreter 16 .. 2048
    log-uniform, up to 3 requests, 5 steps and topk 4 (it runs ``steps * requests * topk``
    programs at some 10 ms per block of 128 tokens each). Page size 1 or topk 1 only for the
    draft kernel: those are the cases whose extension slots the model reads as the kernel does
    (``s + t * steps``; at topk > 1 with pages the kernel starts each branch on pages of its own,
    which the model does not write)."""
    backend, key, rule = choice
    buffer = pooled_backend_of(backend).buffer(key)
    if buffer.mode is Mode.DRAFT_DECODE:
        steps = rng.randint(2, 5) if kernel else rng.randint(2, 7)
        topk = rng.choice((1, 1, 2, 2, 3, 4) if kernel else (1, 1, 2, 3, 4, 8))
        d = steps + 1 if topk == 1 else rng.randint(2, 16)
    else:
        steps, topk = rng.randint(1, 7), 1
        d = rng.choice((steps + 1, rng.randint(1, 16)))
    if kernel:
        ps = 1 if (topk > 1 or rule == "paged-ctx") else rng.choice((1, 16, 64))
    else:
        ps = 1 if rule == "paged-ctx" else rng.choice(st.PAGE_SIZES)  # AITER 0.5.10: page size 1 only
    max_bs = rng.randint(1, 3) if kernel else rng.choice((1, 2, 3, 4, 8, 16, 64, 256))
    state: st.State = {"backend": backend, "key": key, "rule": rule, "mode": buffer.mode.value,
                       "path": "eager" if buffer.per_call else "graph",
                       "context_len": int(2 ** rng.uniform(4, 11)) if kernel else st._context(rng), "page_size": ps,
                       "draft_tokens": d, "spec_steps": steps, "spec_topk": topk, "draft_has_kv": True,
                       "algorithm": "EAGLE", "width_gen": rng.choice(("g1", "g2", "g3")), "max_bs": max_bs,
                       "step_id": 0, "hybrid_swa": False}
    if buffer.applies(st.geometry_of(state)) is not None:
        return None
    if buffer.per_call:
        state["requests"] = rng.randint(1, 3)
    else:
        state["requests"] = max_bs if rng.random() < 2 / 3 else rng.randint(1, max_bs)
    return state


def _split_sum(rng: random.Random, total: int, n: int, top: int) -> list[int]:
    """``n`` lengths in 1 .. top summing to ``total`` (clipped to what they can sum to)."""
    total = max(n, min(total, n * top))
    lens = [total // n + (i < total % n) for i in range(n)]
    for _ in range(n):
        i, j = rng.randrange(n), rng.randrange(n)
        move = rng.randint(0, min(lens[i] - 1, top - lens[j]))
        lens[i] -= move
        lens[j] += move
    return lens


def _pooled_lens(rng: random.Random, state: st.State, near: bool) -> list[int]:
    """The batch's committed lengths: their sum at the largest that fits the last step row, -2 .. +2
    (``near``), or anywhere below the table's end."""
    buffer, g, n = _buffer_of(state), st.geometry_of(state), state["requests"]
    top = g.max_committed_len(buffer.mode)
    if not near:
        return [rng.randint(1, top) for _ in range(n)]
    last = buffer.rows(g) - 1
    b0 = buffer.per_request(g, 0, last)
    a = buffer.per_request(g, 1, last) - b0
    fits = (buffer.capacity(g, state["rule"], n) - n * b0) // a  # the largest sum of lengths that fits
    return _split_sum(rng, fits + rng.randint(-2, 2), n, top)


def _buffer_of(state: st.State) -> PooledBuffer:
    return pooled_backend_of(state["backend"]).buffer(state["key"])


def _pooled_states(rng: random.Random, count: int, listed: list[tuple[str, str, str]], *, kernel: bool,
                   lens: bool = True, keep: Callable[[st.State], bool] = lambda s: True) -> Iterator[st.State]:
    """``count`` states over ``listed``'s buffers, two thirds of the batches at the boundary."""
    made = 0
    while made < count:
        state = _pooled_geometry(rng, rng.choice(listed), kernel=kernel)
        if state is None or not keep(state):
            continue
        if lens:
            state["seq_lens"] = _pooled_lens(rng, state, near=made % 3 != 0)
        made += 1
        yield state


def _fits_int32(state: st.State) -> bool:
    """The engine's helper asserts ``num_seqs * topk * ctx < 2**31`` (int32 flat offsets), at start-up
    for a graph; the model has no such bound: states past it are left out (reported)."""
    num_seqs = state["max_bs"] if state["path"] == "graph" else state["requests"]
    return bool(num_seqs * state["spec_topk"] * state["context_len"] < INT32_OFFSETS)


def _seed(choice: tuple[str, str, str], story: str, seq_lens: list[int], **shape: Any) -> st.State:
    backend, key, rule = choice
    buffer = pooled_backend_of(backend).buffer(key)
    state: st.State = {"backend": backend, "key": key, "rule": rule, "mode": buffer.mode.value,
                       "path": "eager" if buffer.per_call else "graph", "page_size": 1, "draft_has_kv": True,
                       "algorithm": "EAGLE", "width_gen": "g1", "step_id": 0, "hybrid_swa": False,
                       "spec_topk": 1, **shape, "seq_lens": seq_lens, "requests": len(seq_lens), "seed": story}
    return state


# (backend, key, rule), story, lengths, geometry: each is tried where the version lists that buffer.
POOLED_SEEDS: dict[str, tuple[tuple[tuple[str, str, str], str, list[int], dict[str, int]], ...]] = {
    "utils.assert_buffer_fits[draft-decode]": (
        (("sglang-flashinfer-kv-indices", "draft-decode", "max-bs-topk-ctx"),
         "ctx 100, topk 2, steps 3, 2 graph rows at 98: used 404 > capacity 400", [98, 98],
         {"context_len": 100, "draft_tokens": 4, "spec_steps": 3, "spec_topk": 2, "max_bs": 2}),
        (("sglang-flashinfer-kv-indices", "draft-decode", "max-bs-topk-ctx"),
         "the same at 96 and 98: used 400, the capacity exactly", [96, 98],
         {"context_len": 100, "draft_tokens": 4, "spec_steps": 3, "spec_topk": 2, "max_bs": 2}),
    ),
    "utils.assert_buffer_fits[aiter-target-verify]": (
        (("sglang-aiter-kv-indices", "target-verify", "paged-ctx-plus-draft"),
         "ctx 100, D 4, one graph row at 101: used 105 > capacity 104", [101],
         {"context_len": 100, "draft_tokens": 4, "spec_steps": 3, "max_bs": 1}),
        (("sglang-aiter-kv-indices", "target-verify", "paged-ctx-plus-draft"),
         "the same at 100: used 104, the capacity exactly", [100],
         {"context_len": 100, "draft_tokens": 4, "spec_steps": 3, "max_bs": 1}),
    ),
    "cache_locs.generate_draft_decode_kv_indices": (
        (("sglang-triton-kv-indices", "draft-decode", "max-bs-topk-ctx"),
         "Triton, ctx 10, steps 3, one request at 8: row 2 stores 1 entry past the buffer", [8],
         {"context_len": 10, "draft_tokens": 4, "spec_steps": 3, "max_bs": 1}),
        (("sglang-triton-kv-indices", "draft-decode", "max-bs-topk-ctx"),
         "the same at 9: row 1 stores 1 entry into row 2, row 2 2 past the buffer", [9],
         {"context_len": 10, "draft_tokens": 4, "spec_steps": 3, "max_bs": 1}),
        (("sglang-flashinfer-kv-indices", "draft-decode", "max-bs-ctx"),
         "0.5.10's FlashInfer row (no topk factor), ctx 40, topk 4, steps 3, 2 rows at 30 and 5: "
         "every row spills, the last far past the buffer", [30, 5],
         {"context_len": 40, "draft_tokens": 8, "spec_steps": 3, "spec_topk": 4, "max_bs": 2}),
    ),
    "kv_indices.create_flashinfer_kv_indices_triton[target-verify]": (
        (("sglang-flashinfer-mla-kv-indices", "target-verify", "max-bs-ctx"),
         "FlashInfer MLA, ctx 100, D 4, 2 rows at 97: 202 entries into 200", [97, 97],
         {"context_len": 100, "draft_tokens": 4, "spec_steps": 3, "max_bs": 2}),
        (("sglang-aiter-kv-indices", "target-verify", "paged-ctx-plus-draft"),
         "AITER from 0.5.14, ctx 100, D 4, 2 rows at 102 (past the context, inside the table): "
         "212 entries into 208", [102, 102],
         {"context_len": 100, "draft_tokens": 4, "spec_steps": 3, "max_bs": 2}),
        (("sglang-aiter-kv-indices", "target-verify", "paged-ctx"),
         "0.5.10's AITER buffer, ctx 100, D 4, 2 rows at 97 and 50: fits", [97, 50],
         {"context_len": 100, "draft_tokens": 4, "spec_steps": 3, "max_bs": 2}),
        (("sglang-aiter-kv-indices", "target-verify", "paged-ctx"),
         "the same at 97 and 97: 202 entries into 200", [97, 97],
         {"context_len": 100, "draft_tokens": 4, "spec_steps": 3, "max_bs": 2}),
    ),
}


def _pooled_seeds(function: str, listed: list[tuple[str, str, str]]) -> list[st.State]:
    return [_seed(choice, story, list(lens), **shape) for choice, story, lens, shape in POOLED_SEEDS.get(function, ())
            if choice in listed]


def _row_uses(state: st.State) -> list[int]:
    """Entries each step row of the batch writes."""
    buffer, g = _buffer_of(state), st.geometry_of(state)
    return [sum(buffer.per_request(g, s, row) for s in state["seq_lens"]) for row in range(buffer.rows(g))]


def _kernel_state(rng: random.Random, state: st.State, *, seeded: bool) -> st.State:
    """The buffer's width (the model's capacity for the rule: the width itself is the width row's),
    the flat buffer's length (the furthest store the model makes, then ``SPARE``), and the launch."""
    buffer, g = _buffer_of(state), st.geometry_of(state)
    width = buffer.capacity(g, state["rule"], len(state["seq_lens"]))
    uses = _row_uses(state)
    reach = max(row * width + used for row, used in enumerate(uses))
    state = {**state, "width": width, "total": max(reach, len(uses) * width) + SPARE}
    if buffer.mode is Mode.DRAFT_DECODE:
        # The token-block launch runs a step's blocks after the other steps' first: where a row
        # spills into the next one, which store lands last is a race on a GPU and the
        # interpreter's order, not the engine's, so that launch is tried where only the last row
        # (into the spare space) may pass its end.
        blocks = not seeded and rng.random() < 1 / 3 and all(used <= width for used in uses[:-1])
        state.update(launch="token-blocks" if blocks else "historical", token_blocks=rng.randint(1, 3) if blocks else 1)
    else:
        state["token_blocks"] = 1 if seeded else rng.choice((1, 1, 2, 3))
    return state


def _kernel_tables(state: st.State, seed: int) -> dict[str, torch.Tensor]:
    """Request tables with spare rows after the batch's: the kernel reads a draft's extension slots
    ``s + t * steps + j`` through the flat pool, past the row's end at the longest lengths (the
    model reads the same entries)."""
    width = st.geometry_of(state).request_table_width
    spare = 1 + cdiv(state["spec_topk"] * state["spec_steps"], width)
    return mc.request_tables({**state, "seq_lens": [1] * (len(state["seq_lens"]) + spare)}, seed=seed)


def _pooled_pairs(function: str, m: Mapping[str, ModuleType], b: Mapping[str, Any], rng: random.Random,
                  count: int) -> Iterator[Pair]:
    """The draft-buffer helpers and host checks (pure Python), and the two kernels that fill the
    pooled buffers (interpreted), against ``PooledBuffer`` for the buffer each state draws.

    Every state the count asks for is run: at 200 the 0.5.23 draft kernel takes about 55 s under
    the interpreter (0.5.14's kernel about 40 s), the other rows under 3 s."""
    if function == "spec_utils.draft_kv_indices_buffer_width":
        _need(m["spec_utils"], "draft_kv_indices_buffer_width", why="each backend sizes its draft buffer inline")
        listed = _require(_pooled_listed(b, DRAFT_KEYS), "multi-step draft buffer")
        for state in _pooled_states(rng, count, listed, kernel=False, lens=False, keep=_fits_int32):
            yield state, partial(ec.engine_draft_width, m["spec_utils"], state), partial(mc.model_pooled_width, state)
    elif function == "utils.assert_buffer_fits[draft-decode]":
        _need(m["spec_utils"], "draft_kv_indices_buffer_width", "draft_kv_indices_used_len",
              why="no draft backend checks its buffer on the host")
        _need(m["attn_utils"], "assert_buffer_fits", why="no backend checks its buffers on the host")
        listed = _require(_pooled_listed(b, DRAFT_KEYS, "assert"), "draft buffer checked with assert_buffer_fits")
        whats = {backend: ec.assert_call_what(backend) for backend, _, _ in listed}
        for state in [*_pooled_seeds(function, listed),
                      *_pooled_states(rng, count, listed, kernel=False, keep=_fits_int32)]:
            yield (state, partial(ec.engine_draft_fits, m["spec_utils"], m["attn_utils"], state, whats[state["backend"]]),
                   partial(mc.model_pooled_check, state))
    elif function == "utils.assert_buffer_fits[aiter-target-verify]":
        _need(m["attn_utils"], "assert_buffer_fits", why="no backend checks its buffers on the host")
        listed = _require([c for c in _pooled_listed(b, VERIFY_KEYS, "assert") if c[0] == "sglang-aiter-kv-indices"],
                          "AITER target-verify buffer checked with assert_buffer_fits")
        what = ec.assert_call_what("sglang-aiter-kv-indices")
        for state in [*_pooled_seeds(function, listed), *_pooled_states(rng, count, listed, kernel=False)]:
            g = st.geometry_of(state)
            state = {**state, "capacity": _buffer_of(state).capacity(g, state["rule"], len(state["seq_lens"]))}
            yield state, partial(ec.engine_verify_fits, m["attn_utils"], state, what), partial(mc.model_pooled_check, state)
    else:
        draft = function == "cache_locs.generate_draft_decode_kv_indices"
        engine = ec.engine_draft_kv_indices if draft else ec.engine_verify_kv_indices
        module = m["cache_locs"] if draft else m["kv_indices"]
        for state, tables in kernel_states(function, b, rng, count):
            yield state, partial(engine, module, state, tables), partial(mc.model_pooled_writes, state, tables)


def kernel_states(function: str, b: Mapping[str, Any], rng: random.Random, count: int
                  ) -> Iterator[tuple[st.State, dict[str, torch.Tensor]]]:
    """The kernel rows' states and request tables: the worked cases whose buffer the version
    lists, then ``count`` seeded ones (FlashInfer's MHA verify goes through flashinfer's own plan:
    the verify row draws the MLA buffers, AITER's and FlashInfer MLA's, only)."""
    draft = function == "cache_locs.generate_draft_decode_kv_indices"
    listed = _require(_pooled_listed(b, DRAFT_KEYS if draft else VERIFY_KEYS),
                      "multi-step draft buffer" if draft else "target-verify buffer")
    if not draft:
        listed = _require([c for c in listed if pooled_backend_of(c[0]).buffer(c[1]).attention == "mla"],
                          "MLA target-verify buffer")
    seeds = _pooled_seeds(function, listed)
    for i, state in enumerate([*seeds, *_pooled_states(rng, count, listed, kernel=True)]):
        state = _kernel_state(rng, state, seeded=i < len(seeds))
        yield state, _kernel_tables(state, seed=i)


CHECKS = (
    Check(("sizing",), ("allocation_sizing.get_alloc_len_per_decode",
                        "allocation_sizing.get_req_to_token_extra_context_len"), _sizing_pairs),
    Check(("ascend", "fbi"), ("AscendAttnBackend.init_cuda_graph_state",
                              "AscendAttnBackend.replay[mirror]", "AscendAttnBackend.replay[host]",
                              "AscendAttnBackend.replay[static]"), _ascend_pairs),
    Check(("dsa", "fbi"), ("DeepseekSparseAttnBackend.init_cuda_graph_state",
                           "DeepseekSparseAttnBackend.replay[decode]", "DeepseekSparseAttnBackend.replay[target-verify]",
                           "DeepseekSparseAttnBackend.replay[draft-extend]"), _dsa_pairs),
    Check(("npu_alloc",), ("NPUPagedTokenToKVPoolAllocator.alloc_decode",
                           "NPUPagedTokenToKVPoolAllocator.alloc_extend"), _npu_alloc_pairs),
    Check(("paged",), ("PagedTokenToKVPoolAllocator.alloc_decode[triton]",
                       "PagedTokenToKVPoolAllocator.alloc_extend[triton]",
                       "PagedTokenToKVPoolAllocator.alloc_decode[torch]",
                       "PagedTokenToKVPoolAllocator.alloc_extend[torch]"), _cuda_alloc_pairs,
          triton=("PagedTokenToKVPoolAllocator.alloc_decode[triton]", "PagedTokenToKVPoolAllocator.alloc_extend[triton]")),
    Check(("metadata",), ("metadata.normal_decode_set_metadata",), _fa3_pairs,
          triton=("metadata.normal_decode_set_metadata",),
          backends={"metadata.normal_decode_set_metadata": "sglang-fa3-page-table"}),
    *_builder_checks(),
    Check(("spec_utils", "attn_utils"), ("spec_utils.draft_kv_indices_buffer_width",
                                         "utils.assert_buffer_fits[draft-decode]",
                                         "utils.assert_buffer_fits[aiter-target-verify]"), _pooled_pairs),
    Check(("cache_locs", "kv_indices"), ("cache_locs.generate_draft_decode_kv_indices",
                                         "kv_indices.create_flashinfer_kv_indices_triton[target-verify]"), _pooled_pairs,
          triton=("cache_locs.generate_draft_decode_kv_indices",
                  "kv_indices.create_flashinfer_kv_indices_triton[target-verify]")),
    Check(scheduler_checks.MODULES, scheduler_checks.FUNCTIONS, scheduler_checks.pairs, any_release=True),
    Check(reqtable_checks.MODULES, reqtable_checks.FUNCTIONS, reqtable_checks.pairs, triton=reqtable_checks.FUNCTIONS,
          backends={f: reqtable_checks.BACKEND for f in reqtable_checks.FUNCTIONS}),
)

