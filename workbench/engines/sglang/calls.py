"""The engine's side: SGLang's own functions, called on a conformance state (worker process only).

Each ``engine_*`` function takes the loaded engine modules and one state and returns an answer
(``answers.py``). What is ours here is only the set-up a running server would have done:
backend objects are made with ``object.__new__`` and given just the attributes the measured
methods read, and the runtime-context getters (parallel state, schedule, speculative settings)
are replaced by ones that give the state's values with DCP off. The arithmetic, the copies and
the allocator's bookkeeping are the engine's own code.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from workbench.engines.checking.answers import MADE_HERE, UNWRITTEN, Answer, Moved, catching, none, ok, tensor
from workbench.engines.checking.states import State, geometry_of
from workbench.engines.sglang import calls_older as older
from workbench.model.geometry import Mode

NO_DCP = SimpleNamespace(dcp_enabled=False, attn_dcp_size=1, attn_tp_size=1, attn_cp_size=1)


def load(name: str) -> ModuleType:
    return importlib.import_module(name)


# ---- allocation_sizing --------------------------------------------------------------------

def _sizing_context(sizing: ModuleType, state: State) -> None:
    """Point the module's runtime-context getters at the state's launch settings."""
    spec = SimpleNamespace(speculative_algorithm=state["algorithm"], speculative_num_steps=state["spec_steps"],
                           speculative_eagle_topk=state["spec_topk"])
    sizing.get_spec = lambda: spec  # type: ignore[attr-defined]
    sizing.get_schedule = lambda: SimpleNamespace(page_size=state["page_size"])  # type: ignore[attr-defined]
    sizing.get_parallel = lambda: NO_DCP  # type: ignore[attr-defined]
    sizing.max_speculative_num_draft_tokens = lambda: state["draft_tokens"] or None  # type: ignore[attr-defined]


def _server_args(state: State) -> SimpleNamespace:
    """Up to 0.5.16 the sizing functions read ``server_args`` instead of the runtime context."""
    d = state["draft_tokens"] or None
    return SimpleNamespace(speculative_algorithm=state["algorithm"], speculative_num_steps=state["spec_steps"],
                           speculative_eagle_topk=state["spec_topk"], speculative_num_draft_tokens=d,
                           max_speculative_num_draft_tokens=d, page_size=state["page_size"])


def _sizing_call(sizing: ModuleType, name: str, state: State) -> Answer:
    function = getattr(sizing, name)
    _sizing_context(sizing, state)
    takes_args = bool(inspect.signature(function).parameters)
    return catching(lambda: ok(value=int(function(_server_args(state)) if takes_args else function())))


def engine_alloc_len(sizing: ModuleType, state: State) -> Answer:
    return _sizing_call(sizing, "get_alloc_len_per_decode", state)


def engine_extra(sizing: ModuleType, state: State) -> Answer:
    return _sizing_call(sizing, "get_req_to_token_extra_context_len", state)


# ---- forward modes and speculative inputs --------------------------------------------------

def forward_mode(fbi: ModuleType, mode: str) -> Any:
    fm = fbi.ForwardMode
    if mode in ("decode", "draft-decode"):
        return fm.DECODE
    if mode == "target-verify":
        return fm.TARGET_VERIFY
    return getattr(fm, "DRAFT_EXTEND_V2", None) or fm.DRAFT_EXTEND


def spec_info(mode: str, state: State | None = None) -> Any:
    """The drafter's input: present in speculative modes (an EAGLE/NGRAM one, never DFlash).

    In draft-extend it carries each request's accepted tokens (the state's ``accept_len``).
    """
    if mode == "decode":
        return None
    accepted = None
    if state is not None and "accept_len" in state:
        accepted = torch.full((len(state["seq_lens"]),), state["accept_len"], dtype=torch.int32)
    # ``accept_length`` is the same tensor under the name releases up to 0.5.14 read
    return SimpleNamespace(spec_input_type=None, num_accept_tokens=accepted, accept_length=accepted)


# ---- Ascend block tables ------------------------------------------------------------------

def ascend_backend(mod: ModuleType, state: State) -> Any:
    """An AscendAttnBackend as ``init_cuda_graph_state`` and the replay see it."""
    mod.get_parallel = lambda: NO_DCP  # type: ignore[attr-defined]
    b = object.__new__(mod.AscendAttnBackend)
    setattr(b, MADE_HERE, True)
    b.max_context_len = state["context_len"]
    b.page_size = state["page_size"]
    b.speculative_num_draft_tokens = state["draft_tokens"] or None
    b.device = "cpu"
    b.is_draft_worker = False
    b.is_hybrid_swa = state["hybrid_swa"]
    b.use_sliding_window_kv_pool = False
    b.enable_sparsity_driven_kv_offload = False
    b.q_head_num_padding = None
    b.tp_q_head_num = 1
    b.speculative_step_id = state["step_id"]
    b.speculative_step_offset_npu = torch.tensor(state["step_id"] + 1, dtype=torch.int32)
    b.sliding_window_size = 1 << 30  # masks are not compared; keep every position in the window
    b.graph_mode = False
    return b


def engine_ascend_init(mod: ModuleType, state: State) -> Answer:
    def call() -> Answer:
        b = ascend_backend(mod, state)
        b.init_cuda_graph_state(state["max_bs"], state["max_bs"] * max(1, state["draft_tokens"]))
        gm = b.graph_metadata
        swa = gm.get("block_tables_swa")
        return ok(block_tables=list(gm["block_tables"].shape), block_tables_swa=None if swa is None else list(swa.shape))
    return catching(call)


def engine_ascend_replay(mod: ModuleType, fbi: ModuleType, state: State, tables: dict[str, torch.Tensor]) -> Answer:
    """Capture for ``bs`` rows, then one replay through ``_apply_cuda_graph_metadata``.

    The branch is the state's: the CPU mirror (``seq_lens_cpu``), the host max length only, or
    neither (the static copy). Only the first ``bs`` rows are compared: the engine makes its
    buffers with ``torch.empty`` and never writes the rows past the captured batch.
    """
    def call() -> Answer:
        b = ascend_backend(mod, state)
        bs = len(state["seq_lens"])
        b.init_cuda_graph_state(state["max_bs"], state["max_bs"] * max(1, state["draft_tokens"]))
        b.req_to_token = tables["req_to_token"]
        b.full_to_swa_index_mapping = tables["full_to_swa"]
        fm = forward_mode(fbi, state["mode"])
        seq_lens = torch.tensor(state["seq_lens"], dtype=torch.int64)
        branch = state["branch"]
        if not hasattr(b, "_apply_cuda_graph_metadata"):
            _ascend_replay_before_0_5_12(b, state, fm, seq_lens, bs)
            return _ascend_tables(b, state, bs)
        mirrorless = "max_seq_len_host" in inspect.signature(b._apply_cuda_graph_metadata).parameters
        if branch != "mirror" and not mirrorless:
            raise Moved("this version's replay has only the CPU-mirror branch (no host max length, no static copy)")
        host = {"max_seq_len_host": state["max_seq_len_host"] if branch == "host" else None} if mirrorless else {}
        b._init_cuda_graph_metadata(bs, fm, seq_lens)
        b._apply_cuda_graph_metadata(
            bs=bs, req_pool_indices=torch.arange(1, bs + 1), seq_lens=seq_lens,
            seq_lens_cpu=seq_lens if branch == "mirror" else None, forward_mode=fm,
            spec_info=spec_info(state["mode"]), **host)
        return _ascend_tables(b, state, bs)
    return catching(call)


def _ascend_tables(b: Any, state: State, bs: int) -> Answer:
    gm = b.graph_metadata
    swa = gm["block_tables_swa"][:bs] if state["hybrid_swa"] and state["branch"] == "mirror" else None
    return ok(block_tables=tensor(gm["block_tables"][:bs]), block_tables_swa=tensor(swa))


def _ascend_replay_before_0_5_12(b: Any, state: State, fm: Any, seq_lens: torch.Tensor, bs: int) -> None:
    """Up to 0.5.10 capture and replay were the public pair; the replay had only the mirror branch."""
    if state["branch"] != "mirror":
        raise Moved("this version's replay has only the CPU-mirror branch (no host max length, no static copy)")
    b.is_dllm_model = False
    rows = torch.arange(1, bs + 1)
    b.init_forward_metadata_capture_cuda_graph(bs, bs, rows, seq_lens, None, fm, spec_info(state["mode"]))
    b.init_forward_metadata_replay_cuda_graph(bs, rows, seq_lens, int(seq_lens.sum()), None, fm,
                                              spec_info(state["mode"]), seq_lens)


# ---- DSA page table -----------------------------------------------------------------------

def _expand_seqlens(extend_seq_lens: torch.Tensor, cache_seqlens: torch.Tensor, total: int, *_: Any) -> torch.Tensor:
    """Our torch stand-in for ``seqlens_expand_triton``, a CUDA-only Triton helper.

    It fills ``dsa_seqlens_expanded`` (per query row, the KV length it attends: for a request of
    ``kv`` tokens and ``q`` query rows, ``kv - q + 1 .. kv``), which conformance does not
    compare; the page tables it does compare are filled by the engine's own code.
    """
    parts = [torch.arange(int(kv) - int(q) + 1, int(kv) + 1, dtype=torch.int32)
             for q, kv in zip(extend_seq_lens.tolist(), cache_seqlens.tolist())]
    return torch.cat(parts)[:total] if parts else torch.zeros(0, dtype=torch.int32)


def dsa_backend(mod: ModuleType, state: State, req_to_token: torch.Tensor | None) -> Any:
    if hasattr(mod, "seqlens_expand_triton"):
        mod.seqlens_expand_triton = _expand_seqlens  # type: ignore[attr-defined]
    b = object.__new__(mod.DeepseekSparseAttnBackend if hasattr(mod, "DeepseekSparseAttnBackend")
                       else mod.NativeSparseAttnBackend)
    setattr(b, MADE_HERE, True)
    b.device = "cpu"
    b.req_to_token = req_to_token if req_to_token is not None else torch.zeros(
        (1, geometry_of(state).request_table_width), dtype=torch.int32)
    b.max_context_len = state["context_len"]
    b.physical_page_size = state["page_size"]
    b.real_page_size = state["page_size"]
    b.page_size = state["page_size"]
    b.speculative_num_draft_tokens = state["draft_tokens"] or None
    b.speculative_step_id = state["step_id"]
    b.hisparse_coordinator = None
    b.dsa_index_kpool = 1
    b.use_fused_topk = False
    b.dsa_index_topk = 2048
    b.dsa_decode_impl = "flashmla_sparse"
    b.experimental_kpool_metadata_fusion = False
    b._memory_saver_adapter = SimpleNamespace(region=lambda **_: _NullContext())
    b._arange_buf = torch.arange(16, dtype=torch.int32)
    b._is_in_breakable_cuda_graph = lambda: True  # a graph replay: no MHA one-shot decision
    b._force_attn_forward_mla = False  # 0.5.9's switch, off unless the server forces MLA
    b._is_in_tc_piecewise_cuda_graph = lambda: False
    b._get_device_sm = lambda: 0
    b._is_blackwell = False
    b.dsa_topk_backend = SimpleNamespace(should_use_topk_v2=lambda: False)
    b.multi_ctas_kv_counter = None
    b.enable_auto_select_prefill_impl = False
    b.dsa_prefill_impl = "flashmla_sparse"
    b.use_mha = False
    b._ensure_multi_ctas_kv_counter_capacity = lambda n: None
    for name in ("decode_impl", "prefill_impl", "index_topk", "index_kpool", "topk_backend"):
        setattr(b, f"nsa_{name}", getattr(b, f"dsa_{name}"))  # the same settings before the rename to dsa_*
    for name in ("decode_impl", "prefill_impl"):
        # Earlier still they were module globals, declared at import and set by the backend's
        # __init__ (which the set-up does not run): the same values there.
        declared = f"NSA_{name.upper()}"
        if declared in getattr(mod, "__annotations__", {}) and not hasattr(mod, declared):
            setattr(mod, declared, getattr(b, f"dsa_{name}"))
    return b


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None


def dsa_rows(state: State) -> int:
    """``max_num_tokens``: query rows per request times ``max_bs`` (D in verify and draft-extend)."""
    per_request = state["draft_tokens"] if state["mode"] in ("target-verify", "draft-extend") else 1
    return int(state["max_bs"]) * max(1, int(per_request))


def engine_dsa_init(mod: ModuleType, state: State) -> Answer:
    def call() -> Answer:
        b = dsa_backend(mod, state, None)
        b.init_cuda_graph_state(state["max_bs"], dsa_rows(state))
        pt = b.decode_cuda_graph_metadata["page_table"]
        return ok(page_table=None if pt is None else list(pt.shape))
    return catching(call)


def engine_dsa_replay(mod: ModuleType, fbi: ModuleType, state: State, tables: dict[str, torch.Tensor]) -> Answer:
    """Capture for ``bs`` requests (``_build_forward_metadata_cuda_graph``), then one replay."""
    def call() -> Answer:
        b = dsa_backend(mod, state, tables["req_to_token"])
        bs = len(state["seq_lens"])
        fm = forward_mode(fbi, state["mode"])
        if not hasattr(b, "_apply_cuda_graph_metadata") or not hasattr(b, "_build_forward_metadata_cuda_graph"):
            if not older.has_public_graph_pair(b):
                raise Moved("this version's DSA backend has neither _build_forward_metadata_cuda_graph/"
                            "_apply_cuda_graph_metadata nor the public capture/replay pair")
            b.init_cuda_graph_state(state["max_bs"], dsa_rows(state))
            older.dsa_capture_and_replay(b, state, fm, spec_info(state["mode"]), spec_info(state["mode"], state),
                                         dsa_rows({**state, "max_bs": 1}))
            return _dsa_tables(b, state, bs)
        b.init_cuda_graph_state(state["max_bs"], dsa_rows(state))
        capture_lens = torch.ones(bs, dtype=torch.int64)
        rows = torch.arange(1, bs + 1)
        b._build_forward_metadata_cuda_graph(bs, None, rows, capture_lens, None, fm, spec_info(state["mode"]))
        seq_lens = torch.tensor(state["seq_lens"], dtype=torch.int64)
        b._apply_cuda_graph_metadata(bs, rows, seq_lens, seq_lens, fm, spec_info(state["mode"], state))
        return _dsa_tables(b, state, bs)
    return catching(call)


def _dsa_tables(b: Any, state: State, bs: int) -> Answer:
    md = b.decode_cuda_graph_metadata[bs]
    real = md.real_page_table if state["page_size"] > 1 else None
    return ok(page_table=tensor(md.page_table_1), real_page_table=tensor(real))


# ---- allocators ---------------------------------------------------------------------------

def allocator(cls: type, state: State, *, triton: bool = False) -> Any:
    """A paged allocator caught mid-run: the state's free list and parked (staged) pages."""
    a: Any = object.__new__(cls)
    setattr(a, MADE_HERE, True)
    a.page_size = state["page_size"]
    a.device = "cpu"
    a.debug_mode = False
    a.need_sort = bool(state["parked_pages"])
    a.free_pages = torch.tensor(state["free_pages"], dtype=torch.int64)
    parked = torch.tensor(state["parked_pages"], dtype=torch.int64)
    a.release_pages = parked  # the name up to 0.5.2x; later a list of "staged" tensors
    a.staged_pages = [parked] if len(parked) else []
    a.num_staged_pages = len(parked)
    a.roundup = a.page_size - 1
    a.use_triton_kernels = triton
    a.is_not_in_free_group = True
    a.free_group = []
    a.num_pages = max([0, *state["free_pages"], *state["parked_pages"]])
    a.ret_values = torch.empty((), dtype=torch.int64)  # the kernels' count out-parameter, up to 0.5.1
    return a


def _after(a: Any, out: Any) -> Answer:
    free = tensor(a.free_pages)
    if out is None:
        return none(free_pages_after=free)
    return ok(out_cache_loc=tensor(out), free_pages_after=free)


class _Watched:
    """The engine's decode kernel (or its torch fallback), noting a launch on a free list shorter
    than the pages the batch opens: the kernel then loads ``free_pages[start]`` past the list's
    end before the engine checks capacity (versions up to 0.5.18). Such a launch is recorded and
    not run: under the Triton interpreter the load past the tensor segfaults the process, as it
    faults a GPU. The engine's own code then goes on to its capacity check (and returns None).
    Every other launch runs as the engine makes it."""

    def __init__(self, kernel: Any, opening: int, free_arg: int) -> None:
        self.kernel, self.opening, self.free_arg, self.short_launch = kernel, opening, free_arg, False

    def _short(self, args: tuple[Any, ...]) -> bool:
        short = self.opening > len(args[self.free_arg])
        self.short_launch |= short
        return short

    def __getitem__(self, grid: Any) -> Any:
        launch = self.kernel[grid]

        def run(*args: Any, **kwargs: Any) -> Any:
            return None if self._short(args) else launch(*args, **kwargs)
        return run

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return None if self._short(args) else self.kernel(*args, **kwargs)


# The kernels (and torch fallbacks) that read the free list, with the position of ``free_pages``
# among their arguments: decode (seq_lens, last_loc, free_pages, ...), extend (prefix_lens,
# seq_lens, last_loc, free_pages, ...).
WATCHED = {"decode": (("alloc_decode_kernel", 2), ("alloc_decode_naive", 2)),
           "extend": (("alloc_extend_kernel", 3), ("alloc_extend_naive", 3))}


def _watching(watch: ModuleType | None, kind: str, opening: int, run: Callable[[], Any]) -> tuple[Any, bool]:
    """``run()`` with ``watch``'s kernels of ``kind`` watched; its result and whether one launched short."""
    if watch is None:
        return run(), False
    saved = [(name, getattr(watch, name)) for name, _ in WATCHED[kind] if hasattr(watch, name)]
    watchers = [_Watched(kernel, opening, dict(WATCHED[kind])[name]) for name, kernel in saved]
    for (name, _), watcher in zip(saved, watchers):
        setattr(watch, name, watcher)
    try:
        return run(), any(w.short_launch for w in watchers)
    finally:
        for name, kernel in saved:
            setattr(watch, name, kernel)


def engine_alloc_decode(cls: type, state: State, *, triton: bool = False, watch: ModuleType | None = None) -> Answer:
    """``watch``: the CUDA allocator's module, whose kernels are watched for short launches."""
    def call() -> Answer:
        a = allocator(cls, state, triton=triton)
        seq = torch.tensor(state["seq_lens"], dtype=torch.int64)
        last = torch.tensor(state["last_loc"], dtype=torch.int64)
        opening = sum(1 for s in state["seq_lens"] if s % state["page_size"] == 1)
        out, short = _watching(watch, "decode", opening, lambda: a.alloc_decode(seq, seq.clone(), last))
        answer = _after(a, out)
        if watch is not None:
            answer["read_past_free_list"] = short
        return answer
    return catching(call)


def engine_alloc_extend(cls: type, state: State, *, triton: bool = False, watch: ModuleType | None = None) -> Answer:
    def call() -> Answer:
        a = allocator(cls, state, triton=triton)
        prefix = torch.tensor(state["prefix_lens"], dtype=torch.int64)
        seq = torch.tensor(state["seq_lens"], dtype=torch.int64)
        last = torch.tensor(state["last_loc"], dtype=torch.int64)
        ps = state["page_size"]
        opening = sum(-(-s // ps) - (-(-p // ps)) for p, s in zip(state["prefix_lens"], state["seq_lens"]))
        out, short = _watching(watch, "extend", opening,
                               lambda: a.alloc_extend(prefix, prefix.clone(), seq, seq.clone(), last, int((seq - prefix).sum())))
        answer = _after(a, out)
        if watch is not None:
            answer["read_past_free_list"] = short
        return answer
    return catching(call)


def mode_of(state: State) -> Mode:
    return Mode.parse(state["mode"])


def engine_fa3_replay(meta: ModuleType, state: State, tables: dict[str, torch.Tensor], width: int,
                      delta: int) -> Answer:
    """FA3's replay of its decode-style graphs: the fused kernel over a ``(bs, width)`` page table,
    as ``_set_decode_page_metadata`` calls it (``max_seq_pages`` = the buffer's width)."""
    def call() -> Answer:
        bs = len(state["seq_lens"])
        page_table = torch.zeros((bs, width), dtype=torch.int32)
        cache_seqlens = torch.zeros(bs, dtype=torch.int32)
        cu_seqlens_k = torch.zeros(bs + 1, dtype=torch.int32)
        meta.normal_decode_set_metadata(
            cache_seqlens, cu_seqlens_k, page_table, tables["req_to_token"], torch.arange(1, bs + 1),
            width, torch.tensor(state["seq_lens"], dtype=torch.int64), delta, state["page_size"])
        return ok(page_table=tensor(page_table), cache_seqlens=tensor(cache_seqlens))
    return catching(call)


# ---- page-table builders (Triton kernels, interpreted) ------------------------------------
#
# Each builder fills a view of the first ``bs`` rows of a taller table (``state["rows"]`` rows,
# ``width`` wide, every entry ``UNWRITTEN``): a store past a row's end lands in the rows below,
# where it is seen (a spill past the batch's last row would otherwise go to foreign memory, which
# the interpreter does not stop). The arguments are those the backend's replay passes; ``delta``
# is what it adds to ``seq_lens`` (D in a verify, ``step_id + 1`` in a draft step, 0 otherwise).


def _builder_buffers(state: State, tables: dict[str, torch.Tensor], width: int) -> tuple[
        int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """bs, the backing table, req_pool_indices (rows 1..bs of req_to_token), seq_lens, req_to_token."""
    bs = len(state["seq_lens"])
    backing = torch.full((state["rows"], width), UNWRITTEN, dtype=torch.int32)
    return (bs, backing, torch.arange(1, bs + 1, dtype=torch.int64),
            torch.tensor(state["seq_lens"], dtype=torch.int64), tables["req_to_token"])


def engine_xpu_page_table(meta: ModuleType, state: State, tables: dict[str, torch.Tensor], width: int,
                          delta: int) -> Answer:
    """XPU's graph replay: ``normal_decode_set_metadata`` with ``max_seq_pages`` from the batch's
    own maximum (xpu_backend.py 1764-1770 ``max_seq_len_k = max(s) + offset``, 1867-1883)."""
    def call() -> Answer:
        bs, backing, rows, lens, req_to_token = _builder_buffers(state, tables, width)
        ps = state["page_size"]
        cache = torch.zeros(bs, dtype=torch.int32)
        meta.normal_decode_set_metadata(
            cache_seqlens_int32=cache, cu_seqlens_k=torch.zeros(bs + 1, dtype=torch.int32), page_table=backing[:bs],
            req_to_token=req_to_token, req_pool_indices=rows, max_seq_pages=(max(state["seq_lens"]) + delta + ps - 1) // ps,
            seq_lens=lens, seq_len_delta=delta, page_size=ps)
        return ok(page_table=tensor(backing), cache_seqlens=tensor(cache))
    return catching(call)


def engine_trtllm_mha_graph(graph: ModuleType, state: State, tables: dict[str, torch.Tensor], width: int,
                            delta: int) -> Answer:
    """TRT-LLM MHA's graph replay: ``update_trtllm_mha_graph_metadata`` with ``max_seq_pages =
    max_num_pages``, the buffer's width (trtllm_mha_backend.py 1013-1030). The draft-extend
    graph's ``cu_seqlens_q`` ramp (q_mode strided) is left out: it is not compared."""
    def call() -> Answer:
        bs, backing, rows, lens, req_to_token = _builder_buffers(state, tables, width)
        cache = torch.zeros(bs, dtype=torch.int32)
        graph.update_trtllm_mha_graph_metadata(
            req_pool_indices=rows, seq_lens=lens, req_to_token=req_to_token, cache_seqlens=cache,
            cu_seqlens_k=torch.zeros(bs + 1, dtype=torch.int32), page_table=backing[:bs], bs=bs, seqlen_offset=delta,
            max_seq_pages=width, page_size=state["page_size"])
        return ok(page_table=tensor(backing), cache_seqlens=tensor(cache))
    return catching(call)


def engine_trtllm_mha_eager(builder: ModuleType, state: State, tables: dict[str, torch.Tensor], width: int,
                            delta: int) -> Answer:
    """TRT-LLM MHA's eager path: ``build_trtllm_mha_page_table`` on a ``(bs, max_num_pages)`` table
    with ``cache_seqlens = s + delta`` (``_fill_page_table_device``, trtllm_mha_backend.py 577-603,
    called from ``init_forward_metadata`` 1366-1380)."""
    def call() -> Answer:
        bs, backing, rows, lens, req_to_token = _builder_buffers(state, tables, width)
        builder.build_trtllm_mha_page_table(
            req_to_token=req_to_token, req_pool_indices=rows, cache_seqlens=(lens + delta).to(torch.int32),
            page_table=backing[:bs], page_size=state["page_size"])
        return ok(page_table=tensor(backing))
    return catching(call)


def _flashmla_grid(kv: ModuleType, bs: int, pages: int, page_size: int) -> tuple[int, ...]:
    """The grid the release's backend launches the FlashMLA index builder on: a program per
    request and block of pages, the blocks counted from the row (``get_num_kv_index_blocks_flashmla``);
    a release without that helper (0.5.12.post1 and before) launches one program per request, which
    loops over all of the request's pages (the model's ``grid`` option ``per-request``)."""
    blocks = getattr(kv, "get_num_kv_index_blocks_flashmla", None)
    if blocks is None:
        return (bs,)
    return (bs, blocks(pages, page_size))


def engine_flashmla_kv_indices(kv: ModuleType, state: State, tables: dict[str, torch.Tensor], width: int,
                               delta: int) -> Answer:
    """FlashMLA's graph replay: ``create_flashmla_kv_indices_triton`` over the row stride's programs,
    at its default ``PAGED_SIZE`` 64 (``_apply_decode_target_verify_metadata``, flashmla_backend.py
    328-377: ``seq_lens + num_draft_tokens`` in a verify)."""
    def call() -> Answer:
        bs, backing, rows, lens, req_to_token = _builder_buffers(state, tables, width)
        table = backing[:bs]
        grid = _flashmla_grid(kv, bs, table.stride(0), 64)
        kv.create_flashmla_kv_indices_triton[grid](
            req_to_token, rows, lens + delta, None, table, req_to_token.stride(0), table.stride(0))
        return ok(page_table=tensor(backing))
    return catching(call)


def engine_trtllm_mla_kv_indices(kv: ModuleType, state: State, tables: dict[str, torch.Tensor], width: int,
                                 delta: int) -> Answer:
    """TRT-LLM MLA's graph replay: the same builder at the backend's page size, its grid from the
    table's width (``_apply_cuda_graph_metadata``, trtllm_mla_backend.py 604-667: in a verify the
    kernel reads the int32 ``seq_lens_k = s + D``, otherwise ``seq_lens`` itself)."""
    def call() -> Answer:
        bs, backing, rows, lens, req_to_token = _builder_buffers(state, tables, width)
        ps = state["page_size"]
        table = backing[:bs]
        grid = _flashmla_grid(kv, bs, table.shape[1], ps)
        kv.create_flashmla_kv_indices_triton[grid](
            req_to_token, rows, (lens + delta).to(torch.int32) if state["mode"] == "target-verify" else lens, None, table,
            req_to_token.stride(0), table.shape[1], PAGED_SIZE=ps)
        return ok(page_table=tensor(backing))
    return catching(call)


def engine_aiter_verify(aiter: ModuleType, state: State, tables: dict[str, torch.Tensor], width: int,
                        delta: int) -> Answer:
    """AITER's unified target verify: ``scatter_req_to_token_to_page_table_kernel`` over programs of
    1024 pages spanning ``max_blocks = cdiv(ctx, ps)``, the table's width, with ``DRAFT_NUM = D``
    (``_build_verify_unified_metadata``, aiter_backend.py 1090-1153)."""
    def call() -> Answer:
        bs, backing, rows, lens, req_to_token = _builder_buffers(state, tables, width)
        table = backing[:bs]
        block = 1024
        grid = (bs, (max(width, 1) + block - 1) // block)
        aiter.scatter_req_to_token_to_page_table_kernel[grid](
            req_to_token, rows, lens, table, req_to_token.stride(0), table.stride(0), None, None,
            DRAFT_NUM=delta, PAGE_SIZE=state["page_size"], BLOCK_SIZE=block, HAS_SWA=False)
        return ok(page_table=tensor(backing))
    return catching(call)


# ---- pooled flat kv_indices (FlashInfer, FlashInfer MLA, Triton, AITER) -------------------

# The engine module of each pooled backend, whose one ``assert_buffer_fits`` call gives the
# ``what`` of its message (srt/layers/attention/ in every version modelled).
POOLED_ENGINE_MODULES = {
    "sglang-flashinfer-kv-indices": "sglang.srt.layers.attention.flashinfer_backend",
    "sglang-flashinfer-mla-kv-indices": "sglang.srt.layers.attention.flashinfer_mla_backend",
    "sglang-aiter-kv-indices": "sglang.srt.layers.attention.aiter_backend",
    "sglang-triton-kv-indices": "sglang.srt.layers.attention.triton_backend",
}


def assert_call_what(backend: str) -> str:
    """The ``what`` string of the one ``assert_buffer_fits(used, capacity, what, bs=...,
    seq_lens_sum=...)`` call in the backend's engine module, read from its source (the module is
    not imported: it needs the attention libraries). The engine passes it as a literal at the
    call site (flashinfer_backend.py 0.5.23: 2507-2513), so this is the engine's own words."""
    import ast
    import importlib.util

    name = POOLED_ENGINE_MODULES[backend]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise Moved(f"this version has no {name}")
    with open(spec.origin, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "assert_buffer_fits"]
    if len(calls) != 1:
        raise Moved(f"{name} has {len(calls)} assert_buffer_fits calls, not one")
    call = calls[0]
    keywords = [k.arg for k in call.keywords]
    if len(call.args) != 3 or not isinstance(call.args[2], ast.Constant) or keywords != ["bs", "seq_lens_sum"]:
        raise Moved(f"{name}'s assert_buffer_fits call is not (used, capacity, '<what>', bs=, seq_lens_sum=)")
    return str(call.args[2].value)


def _has(module: ModuleType, name: str, why: str) -> Any:
    if not hasattr(module, name):
        raise Moved(f"this version has no {module.__name__}.{name}: {why}")
    return getattr(module, name)


def engine_draft_width(spec_utils: ModuleType, state: State) -> Answer:
    """``draft_kv_indices_buffer_width(num_seqs, topk, ctx)``: ``num_seqs = max_bs`` where a graph
    buffer is made (``init_cuda_graph_state``), the batch's size in an eager call
    (``init_forward_metadata``; flashinfer_backend.py 0.5.23: 2610-2612, 2634-2636)."""
    width = _has(spec_utils, "draft_kv_indices_buffer_width", "each backend sizes its draft buffer inline")
    num_seqs = state["max_bs"] if state["path"] == "graph" else state["requests"]
    return catching(lambda: ok(value=int(width(num_seqs, state["spec_topk"], state["context_len"]))))


def engine_draft_fits(spec_utils: ModuleType, utils: ModuleType, state: State, what: str) -> Answer:
    """The host check of a multi-step draft as ``common_template`` runs it (flashinfer_backend.py
    0.5.23: 2500-2513; flashinfer_mla_backend.py 1247-1260): ``assert_buffer_fits(
    draft_kv_indices_used_len(seq_lens_sum, topk, topk * num_seqs, steps), kv_indices.shape[1],
    what, bs=topk * num_seqs, seq_lens_sum=...)``, the buffer's row from
    ``draft_kv_indices_buffer_width`` as the graph (``max_bs``) or eager call (the batch) sizes it."""
    width = _has(spec_utils, "draft_kv_indices_buffer_width", "each backend sizes its draft buffer inline")
    used_len = _has(spec_utils, "draft_kv_indices_used_len", "no draft backend checks its buffer")
    fits = _has(utils, "assert_buffer_fits", "no backend checks its buffers on the host")
    num_seqs, topk = len(state["seq_lens"]), state["spec_topk"]
    bs, total = topk * num_seqs, sum(state["seq_lens"])

    def call() -> Answer:
        row = width(state["max_bs"] if state["path"] == "graph" else num_seqs, topk, state["context_len"])
        fits(used_len(total, topk, bs, state["spec_steps"]), row, what, bs=bs, seq_lens_sum=total)
        return ok()
    return catching(call)


def engine_verify_fits(utils: ModuleType, state: State, what: str) -> Answer:
    """AITER's MLA target-verify host check (aiter_backend.py 0.5.23: 3154-3163; 0.5.14:
    1673-1682): ``used = seq_lens_sum + num_draft_tokens * bs`` (the engine's inline expression,
    restated) against ``kv_indices.numel()``, which the engine sizes inline in
    ``init_cuda_graph_state`` (not run here): the state's ``capacity``, the model's rule."""
    fits = _has(utils, "assert_buffer_fits", "no backend checks its buffers on the host")
    bs, total = len(state["seq_lens"]), sum(state["seq_lens"])
    return catching(lambda: (fits(total + state["draft_tokens"] * bs, state["capacity"], what, bs=bs,
                                  seq_lens_sum=total), ok())[1])


def _kernel_params(kernel: Any) -> set[str]:
    """The parameter names of a ``@triton.jit`` kernel (interpreted or compiled)."""
    return set(inspect.signature(getattr(kernel, "fn", kernel)).parameters)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def engine_draft_kv_indices(cache_locs: ModuleType, state: State, tables: dict[str, torch.Tensor]) -> Answer:
    """``generate_draft_decode_kv_indices`` as ``common_template`` launches it (flashinfer_backend.py
    0.5.23: 2553-2581; 0.5.14: 1903-1920): grid ``(steps, num_seqs, topk)``, the ``(steps, width)``
    buffer a view of the start of a flat one ``state["total"]`` long (every entry ``UNWRITTEN``),
    so stores past the buffer land in the spare space after it, where they are compared.

    ``launch`` "token-blocks" (0.5.23, long contexts or the host-indptr plan): ``NUM_STEPS = steps``
    and ``token_blocks`` programs per step on axis 0; a version whose kernel has no ``NUM_STEPS``
    runs its one launch instead. The remaining arguments are the plain read plan: the token table
    itself (row stride = its width), no draft window, no page translation. ``kv_indptr`` is
    written too but not compared (the model has none)."""
    def call() -> Answer:
        kernel = cache_locs.generate_draft_decode_kv_indices
        n, topk, steps = len(state["seq_lens"]), state["spec_topk"], state["spec_steps"]
        width, req_to_token = state["width"], tables["req_to_token"]
        backing = torch.full((state["total"],), UNWRITTEN, dtype=torch.int32)
        kv_indices = backing[: steps * width].view(steps, width)
        kv_indptr = torch.zeros((steps, topk * n + 1), dtype=torch.int32)
        lens = torch.tensor(state["seq_lens"], dtype=torch.int64)
        positions = lens.repeat_interleave(topk)
        args = (torch.arange(1, n + 1, dtype=torch.int64), req_to_token, lens, kv_indices, kv_indptr, positions,
                req_to_token.shape[1], width, kv_indptr.shape[1], _pow2(n), _pow2(steps), _pow2(topk * n),
                state["page_size"])
        if state["launch"] == "token-blocks" and "NUM_STEPS" in _kernel_params(kernel):
            kernel[(steps * state["token_blocks"], n, topk)](*args, NUM_STEPS=steps)
        else:
            kernel[(steps, n, topk)](*args)
        return ok(kv_indices=tensor(backing))
    return catching(call)


def engine_verify_kv_indices(kv: ModuleType, state: State, tables: dict[str, torch.Tensor]) -> Answer:
    """``create_flashinfer_kv_indices_triton`` as AITER's MLA target verify launches it
    (aiter_backend.py 0.5.23: 3142-3174; 0.5.14: 1665-1691): ``kv_lens = seq_lens + D``,
    ``kv_indptr = cumsum(kv_lens)``, into a flat buffer ``state["total"]`` long whose first
    ``capacity`` entries are the graph's (every entry ``UNWRITTEN``). ``token_blocks`` > 1: the 2-D
    grid with ``TOKEN_BLOCK_PARALLEL`` (0.5.23 at long contexts); a version whose kernel has no
    such parameter runs its one-program-per-request launch instead."""
    def call() -> Answer:
        kernel = kv.create_flashinfer_kv_indices_triton
        n, req_to_token = len(state["seq_lens"]), tables["req_to_token"]
        kv_lens = torch.tensor(state["seq_lens"], dtype=torch.int64) + state["draft_tokens"]
        kv_indptr = torch.zeros(n + 1, dtype=torch.int32)
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        backing = torch.full((state["total"],), UNWRITTEN, dtype=torch.int32)
        args = (req_to_token, torch.arange(1, n + 1, dtype=torch.int64), kv_lens, kv_indptr, None, backing,
                req_to_token.stride(0))
        if state["token_blocks"] > 1 and "TOKEN_BLOCK_PARALLEL" in _kernel_params(kernel):
            kernel[(n, state["token_blocks"])](*args, TOKEN_BLOCK_PARALLEL=True)
        else:
            kernel[(n,)](*args)
        return ok(kv_indices=tensor(backing))
    return catching(call)
