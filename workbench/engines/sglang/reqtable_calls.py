"""The engine's side of the request-table rows: SGLang's own decode preparation writing ``req_to_token``
(worker only).

A state is a batch the scheduler formed: each request's row, committed and allocated length, the
launch's speculative recipe and page size. The engine's own objects are built for it: the
``ReqToTokenPool`` (its ``W`` from the release's ``get_req_to_token_extra_context_len`` where the
release has one, else the width the version data reads), the ``TokenToKVPoolAllocator`` (or the paged
one), a ``RadixCache`` with the cache disabled (as ``--disable-radix-cache``), the engine's ``Req``
objects, and a ``ScheduleBatch`` made with ``object.__new__`` holding what decode preparation
reads. Then the scheduler's own call runs: ``ScheduleBatch.prepare_for_decode`` (0.5.15 on through
``spec_prepare_for_decode`` to ``eagle_prepare_for_decode``; before, ``EagleDraftInputV2Mixin.
prepare_for_decode`` on the batch's draft input), whose Triton writer ``assign_req_to_token_pool``
runs interpreted.

What is ours: the launch settings the release reads through its runtime-context getters
(``get_spec``, ``get_schedule``, ``get_global_server_args`` ...) are replaced, in every loaded engine
module that has them, by plain namespaces holding the state's values (a read of anything else
raises); the pool's table is the first rows of a taller buffer, so that stores past the pool's
allocation land in spare rows both sides compare (on a GPU they land in whatever memory follows).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from workbench.engines.checking.answers import MADE_HERE, Answer, Moved, catching, ok, tensor
from workbench.engines.checking.states import State

MODULE_PATHS = {
    "memory_pool": "sglang.srt.mem_cache.memory_pool",
    "allocator": "sglang.srt.mem_cache.allocator",
    "radix_cache": "sglang.srt.mem_cache.radix_cache",
    "cache_params": "sglang.srt.mem_cache.cache_init_params",
    "schedule_batch": "sglang.srt.managers.schedule_batch",
    "spec_info": "sglang.srt.speculative.spec_info",
    "eagle_info": "sglang.srt.speculative.eagle_info",
    "sampling_params": "sglang.srt.sampling.sampling_params",
}
OPTIONAL_PATHS = {  # absent in some releases: looked for by name (reqtable_checks.optional_modules)
    "sizing": ("sglang.srt.mem_cache.allocation_sizing", "sglang.srt.mem_cache.common"),
    "ngram_info": ("sglang.srt.speculative.ngram_info",),
}


def launch_settings(state: State) -> dict[str, Any]:
    """The server arguments decode preparation reads, as a launch with the state's recipe resolves them."""
    d = state["draft_tokens"]
    args = SimpleNamespace(speculative_algorithm=state["algorithm"], speculative_num_steps=state["spec_steps"],
                           speculative_eagle_topk=state["spec_topk"], speculative_num_draft_tokens=d,
                           max_speculative_num_draft_tokens=d, page_size=state["page_size"],
                           disable_overlap_schedule=False, enable_mamba_extra_buffer=False,
                           disable_radix_cache=True, enable_mamba_extra_buffer_lazy=_mamba_lazy_off())
    exec_bag = SimpleNamespace(mamba=SimpleNamespace(enable_mamba_extra_buffer_lazy=False))
    parallel = SimpleNamespace(attn_dcp_size=1, dcp_enabled=False, attn_tp_size=1, attn_cp_size=1)
    return {"get_spec": lambda: args, "get_schedule": lambda: args, "get_global_server_args": lambda: args,
            "get_server_args": lambda: args, "get_memory": lambda: args,
            "get_exec": lambda: exec_bag, "get_parallel": lambda: parallel,
            "max_speculative_num_draft_tokens": lambda: d}


def _mamba_lazy_off() -> Any:
    """Lazy mamba buffers off, in the shape the release's ``ServerArgs`` has: a method in 0.5.17
    (``server_args.py:8642``), a field elsewhere."""
    server_args = sys.modules.get("sglang.srt.server_args")
    declared = getattr(getattr(server_args, "ServerArgs", None), "enable_mamba_extra_buffer_lazy", None)
    return (lambda: False) if callable(declared) else False


def install_launch(state: State) -> None:
    """Point every loaded engine module's runtime-context getters at the state's launch settings."""
    getters = launch_settings(state)
    for name, module in list(sys.modules.items()):
        if not name.startswith("sglang.") or module is None:
            continue
        for getter, value in getters.items():
            if getter in vars(module):
                setattr(module, getter, value)


def width_extra(m: Mapping[str, ModuleType], state: State) -> int | None:
    """The release's own ``get_req_to_token_extra_context_len`` for the state's launch, or None where
    the release computes the width inline (``_init_pools``; 0.5.10 and before)."""
    sizing = m.get("sizing")
    function = getattr(sizing, "get_req_to_token_extra_context_len", None) if sizing is not None else None
    if function is None:
        return None
    install_launch(state)
    if inspect.signature(function).parameters:
        return int(function(launch_settings(state)["get_spec"]()))
    return int(function())


def _holder(req: Any, name: str) -> Any:
    """Where a request keeps ``name`` (its row, committed or allocated length): ``req.kv`` where the
    release has that field there (all three in 0.5.23, the allocated length alone in 0.5.18), else
    the request itself."""
    kv = getattr(req, "kv", None)
    return kv if kv is not None and hasattr(kv, name) else req


def _give_kv(m: Mapping[str, ModuleType], req: Any, allocated: int) -> None:
    """A prefilled request's KV record where the release makes one at allocation (0.5.18:
    ``ReqKvInfo(kv_allocated_len=..., swa_evicted_seqlen=0)``, ``mem_cache/allocation.py:372-378``)."""
    info = getattr(m["schedule_batch"], "ReqKvInfo", None)
    if getattr(req, "kv", False) is None and info is not None:
        taken = inspect.signature(info).parameters
        req.kv = info(**{k: v for k, v in {"kv_allocated_len": allocated, "swa_evicted_seqlen": 0}.items() if k in taken})


def allocated_len(req: Any) -> int:
    return int(_holder(req, "kv_allocated_len").kv_allocated_len)


def new_req(m: Mapping[str, ModuleType], i: int, input_len: int) -> Any:
    sampling = m["sampling_params"]
    params = sampling.SamplingParams(max_new_tokens=64)
    params.normalize(SimpleNamespace(encode=lambda text, add_special_tokens=False: [7] * len(text)))
    req_class = m["schedule_batch"].Req
    extra = {"vocab_size": 32000} if "vocab_size" in inspect.signature(req_class.__init__).parameters else {}
    return req_class(f"r{i}", "", [7] * input_len, params, **extra)


def _pool(m: Mapping[str, ModuleType], state: State, width: int, backing: torch.Tensor) -> Any:
    """The engine's ``ReqToTokenPool`` of the state's rows, its table a view of ``backing``."""
    cls = m["memory_pool"].ReqToTokenPool
    wanted = {"size": state["pool_rows"], "max_context_len": width, "device": "cpu", "enable_memory_saver": False}
    taken = inspect.signature(cls.__init__).parameters
    pool = cls(**{k: v for k, v in wanted.items() if k in taken})
    rows = pool.req_to_token.shape[0]
    if tuple(pool.req_to_token.shape) != (rows, width):
        raise Moved(f"ReqToTokenPool made a {list(pool.req_to_token.shape)} table for width {width}")
    pool.req_to_token = backing[: rows * width].view(rows, width)
    return pool


def _allocator(m: Mapping[str, ModuleType], state: State) -> Any:
    module = m["allocator"]
    ps, size = state["page_size"], state["kv_slots"]
    if ps == 1:
        allocator = module.TokenToKVPoolAllocator(size=size, dtype=torch.bfloat16, device="cpu", kvcache=None,
                                                  need_sort=False)
    else:
        allocator = module.PagedTokenToKVPoolAllocator(size=size, page_size=ps, dtype=torch.bfloat16, device="cpu",
                                                       kvcache=None, need_sort=False)
    # The free list the state hands out, in order (page ids at ps > 1), as ``clear()`` keeps it.
    allocator.free_pages = torch.tensor(state["free_pages"], dtype=torch.int64)
    return allocator


def _cache(m: Mapping[str, ModuleType], pool: Any, allocator: Any, ps: int) -> Any:
    params = m["cache_params"].CacheInitParams(disable=True, req_to_token_pool=pool,
                                                token_to_kv_pool_allocator=allocator, page_size=ps)
    return m["radix_cache"].RadixCache(params)


def _draft_input(m: Mapping[str, ModuleType], state: State) -> Any:
    """The batch's speculative input, whose method is the decode preparation up to 0.5.14
    (``EagleDraftInputV2Mixin``; NGRAM's ``NgramVerifyInput`` mixes it in from 0.5.14)."""
    ngram = getattr(m.get("ngram_info"), "NgramVerifyInput", None)
    cls = ngram if state["algorithm"] == "NGRAM" and ngram is not None else m["eagle_info"].EagleDraftInput
    made = object.__new__(cls)
    setattr(made, MADE_HERE, True)
    for owner in cls.__mro__:
        if "ALLOC_LEN_PER_DECODE" in vars(owner):
            # 0.5.6/0.5.8: the v2 worker sets it for its launch at start-up (eagle_worker_v2.py:99-101 in
            # 0.5.6: max(topk * steps, D); read), so each state's launch sets it again
            owner.ALLOC_LEN_PER_DECODE = max(state["spec_steps"] * state["spec_topk"], state["draft_tokens"])
    return made


def build_batch(m: Mapping[str, ModuleType], state: State, width: int, backing: torch.Tensor) -> Any:
    """The scheduler's decode batch for ``state`` on the engine's own objects (module note)."""
    install_launch(state)
    pool = _pool(m, state, width, backing)
    allocator = _allocator(m, state)
    cache = _cache(m, pool, allocator, state["page_size"])
    reqs = []
    for i, (row, committed, allocated) in enumerate(zip(state["rows"], state["committed"], state["allocated"])):
        req = new_req(m, i, state["input_lens"][i])
        _give_kv(m, req, allocated)
        for name, value in (("req_pool_idx", row), ("kv_committed_len", committed), ("kv_allocated_len", allocated)):
            setattr(_holder(req, name), name, value)
        reqs.append(req)
    batch = object.__new__(m["schedule_batch"].ScheduleBatch)
    setattr(batch, MADE_HERE, True)
    fields = {
        "reqs": reqs, "req_to_token_pool": pool, "token_to_kv_pool_allocator": allocator, "tree_cache": cache,
        "device": "cpu", "req_pool_indices": torch.tensor(state["rows"], dtype=torch.int64),
        "seq_lens": torch.tensor(state["committed"], dtype=torch.int64), "hisparse_coordinator": None,
        "spec_algorithm": m["spec_info"].SpeculativeAlgorithm.from_string(state["algorithm"]),
        "sampling_info": SimpleNamespace(penalizer_orchestrator=SimpleNamespace(is_required=False)),
        "enable_overlap": True, "model_config": SimpleNamespace(is_encoder_decoder=False),
        "input_embeds": None, "attn_cp_metadata": None, "forward_mode": None,
    }
    fields["seq_lens_cpu"] = fields["seq_lens"].clone()
    fields["seq_lens_sum"] = int(sum(state["committed"]))
    for name, value in fields.items():
        object.__setattr__(batch, name, value)
    object.__setattr__(batch, "spec_info", _draft_input(m, state))  # read up to 0.5.14 only
    object.__setattr__(batch, "maybe_wait_verify_done", lambda: None)  # 0.5.10: waits for the in-flight verify
    return batch


def engine_reservation(m: Mapping[str, ModuleType], state: State, table: torch.Tensor, free: list[int]) -> Answer:
    """``ScheduleBatch.prepare_for_decode`` on the state's batch, its pool's table the first rows of
    ``table`` (flat), the allocator handing out ``free`` in order: the table after it (the pool's rows
    and the spare rows past them), each request's allocated length after, or what it raised."""
    width = int(state["width"])
    backing = table.clone()
    state = {**state, "free_pages": free}

    def run() -> Answer:
        batch = build_batch(m, state, width, backing)
        m["schedule_batch"].ScheduleBatch.prepare_for_decode(batch)
        return ok(table=tensor(backing), allocated=[allocated_len(r) for r in batch.reqs])
    answer = catching(run)
    if answer["outcome"] == "raised":
        answer["table"] = tensor(backing)  # what was written before it raised (nothing, for the host check)
    return answer
