"""vLLM's own sizing and fill functions for the buffers the vLLM backends model, called on a CPU.

Runs in the learn worker (``learn_worker``), over a release installed by ``loader``.
Each buffer is found by what the release defines, never by its version number (``locate``):

* the v1 block table's width: ``MultiGroupBlockTable`` (built as the model runner builds it:
  from ``max_model_len`` where it takes one, else from the group's ``max_num_blocks`` that
  ``AttentionSpec.max_num_blocks_per_req`` gives), or, where the table only takes a width the
  runner computes inline, nothing to call (the learner reads that line); from 0.34.0, where only
  the second model runner is left (``vllm/v1/worker/gpu/``), its ``BlockTables``, given the width
  its runner's ``initialize_kv_cache`` composes of two of the release's functions
  (``max_num_blocks_per_req``, then ``get_block_table_width``; ``RUNNER_WIDTH_CALLS`` must
  both appear in that method, or nothing is measured);
* the DSA indexer's ``expanded_block_table_buffer``: ``DeepseekV32IndexerMetadataBuilder``
  constructed by its own ``__init__`` on an engine config the release built
  (``create_engine_config`` on a small DSA model), its width read off the tensor it allocated;
  and its ``_prepare_decode_tensors`` on a decode batch (the variable-length path);
* V0's ``graph_block_tables`` width (``get_max_block_per_batch``) and each attention backend's
  metadata builder writing a decode batch's block lists into it (``build``);
* the v1 KV cache manager's ``allocate_slots``: the blocks it gives one request for a decode
  step (the sampled token, the draft tokens, the lookahead slots), or the error it raises; and the
  line of the scheduler's ``schedule`` that caps a running request's new tokens by
  ``max_model_len`` (read: the scheduler needs a whole engine's outputs to step).

The context-parallel size the engine asks for (``get_total_cp_world_size``, ``get_dcp_group``)
is answered per call with the state's ``dcp``, in the modules that ask.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import importlib
import inspect
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from workbench.model.geometry import cdiv

BLOCK_TABLE = "vllm.v1.worker.block_table"
RUNNER_TABLE = "vllm.v1.worker.gpu.block_table"  # the second model runner's (the only one from 0.34.0)
RUNNER = "vllm.v1.worker.gpu.model_runner"
RUNNER_WIDTH_CALLS = ("max_num_blocks_per_req(", "get_block_table_width(", "BlockTables(")
INDEXER = "vllm.v1.attention.backends.mla.indexer"
V0_RUNNER = "vllm.worker.model_runner"
KV_MANAGER = "vllm.v1.core.kv_cache_manager"
SCHEDULER = "vllm.v1.core.sched.scheduler"
V0_BUILDERS = {"flash-attn": ("vllm.attention.backends.flash_attn", "FlashAttentionMetadataBuilder"),
               "flashinfer": ("vllm.attention.backends.flashinfer", "FlashInferMetadataBuilder"),
               "xformers": ("vllm.attention.backends.xformers", "XFormersMetadataBuilder")}


def _module(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and name.startswith(error.name):
            return None  # the release has no such module
        raise


def _source(obj: Any) -> str:
    """``vllm/path.py:first-last`` of a function or class."""
    file = inspect.getsourcefile(obj) or "?"
    lines, first = inspect.getsourcelines(obj)
    short = file[file.rfind("/vllm/") + 1:] if "/vllm/" in file else file
    return f"{short}:{first}-{first + len(lines) - 1}"


# ---- the context-parallel size ------------------------------------------------------------------


@contextlib.contextmanager
def answering(modules: tuple[str, ...], answers: dict[str, Any]) -> Iterator[None]:
    """Each name of ``answers`` that a module of ``modules`` defines is the given value, for the
    duration (module-level functions the release's code calls by their module's name)."""
    saved: list[tuple[types.ModuleType, str, Any]] = []
    for name in modules:
        module = _module(name)
        if module is None:
            continue
        for attribute, value in answers.items():
            if attribute in vars(module):
                saved.append((module, attribute, vars(module)[attribute]))
                setattr(module, attribute, value)
    try:
        yield
    finally:
        for module, attribute, value in saved:
            setattr(module, attribute, value)


def cp_size(dcp: int, modules: tuple[str, ...]) -> contextlib.AbstractContextManager[None]:
    """``get_total_cp_world_size()`` and ``get_dcp_group().world_size`` answer ``dcp`` in ``modules``."""
    group = types.SimpleNamespace(world_size=dcp, rank_in_group=0)
    return answering(modules, {"get_total_cp_world_size": lambda: dcp, "get_dcp_group": lambda: group})


# ---- locating -------------------------------------------------------------------------------------


def locate() -> dict[str, Any]:
    """What the release has for each buffer: the function to call (``found``) and its source, or
    what was searched (``absent``)."""
    found: dict[str, Any] = {}
    table = _module(BLOCK_TABLE)
    group = getattr(table, "MultiGroupBlockTable", None) if table else None
    if group is not None:
        parameters = inspect.signature(group.__init__).parameters
        how = "max_model_len" if "max_model_len" in parameters else "max_num_blocks" if "max_num_blocks" in parameters else None
        # DCP exists where the table asks for its group's size (a release without it cannot be launched with -dcp)
        dcp = any(name in vars(table) for name in ("get_dcp_group", "get_total_cp_world_size"))
        found["block_table"] = {"found": f"{BLOCK_TABLE}.MultiGroupBlockTable", "takes": how, "source": _source(group),
                                "dcp": dcp}
    elif table is not None and hasattr(table, "BlockTable"):
        found["block_table"] = {"found": None, "takes": "max_num_blocks_per_req", "source": _source(table.BlockTable),
                                "searched": f"{BLOCK_TABLE}: BlockTable takes the width the model runner computes"}
    elif (runner_table := _runner_block_tables()) is not None:
        found["block_table"] = runner_table
    else:
        found["block_table"] = {"found": None, "searched": f"{BLOCK_TABLE} (no v1 block table)"}
    indexer = _module(INDEXER)
    builder = getattr(indexer, "DeepseekV32IndexerMetadataBuilder", None) if indexer else None
    found["indexer"] = ({"found": f"{INDEXER}.DeepseekV32IndexerMetadataBuilder", "source": _source(builder)}
                        if builder is not None else {"found": None, "searched": f"{INDEXER}.DeepseekV32IndexerMetadataBuilder"})
    runner = _module(V0_RUNNER)
    width = None
    for cls in (getattr(runner, n, None) for n in ("GPUModelRunnerBase", "ModelRunner")) if runner else ():
        if cls is not None and hasattr(cls, "get_max_block_per_batch"):
            width = cls
            break
    found["v0_width"] = ({"found": f"{V0_RUNNER}.{width.__name__}.get_max_block_per_batch",
                          "source": _source(width.get_max_block_per_batch)}
                         if width is not None else {"found": None, "searched": f"{V0_RUNNER}.*.get_max_block_per_batch"})
    builders = {}
    for backend, (module_name, class_name) in V0_BUILDERS.items():
        module = _module(module_name) if runner is not None else None
        cls = getattr(module, class_name, None) if module else None
        if cls is not None and hasattr(cls, "build"):
            builders[backend] = {"found": f"{module_name}.{class_name}.build", "source": _source(cls.build)}
    found["v0_builders"] = builders
    found["kv_manager"] = _kv_manager()
    return found


def _kv_manager() -> dict[str, Any]:
    """The v1 KV cache manager's ``allocate_slots`` (whether it takes lookahead slots), and the
    scheduler's line capping a running request's new tokens by ``max_model_len``."""
    manager = _module(KV_MANAGER)
    cls = getattr(manager, "KVCacheManager", None) if manager else None
    if cls is None or not hasattr(cls, "allocate_slots"):
        return {"found": None, "searched": f"{KV_MANAGER}.KVCacheManager.allocate_slots"}
    takes = inspect.signature(cls.allocate_slots).parameters
    # 0.8.x: blocks given beyond a step's need; the scheduler leaves the argument at its default
    preallocate = inspect.signature(cls).parameters.get("num_preallocate_tokens")
    return {"found": f"{KV_MANAGER}.KVCacheManager.allocate_slots", "source": _source(cls.allocate_slots),
            "lookahead": "num_lookahead_tokens" in takes, "scheduler_cap": scheduler_cap(),
            "preallocate_tokens": int(preallocate.default) if preallocate is not None else 0,
            "preallocate_parameter": preallocate is not None,
            "init_source": _source(cls.__init__)}


def scheduler_cap() -> dict[str, Any]:
    """The statement of ``Scheduler.schedule`` that caps a running request's ``num_new_tokens``
    by ``max_model_len`` (its text and ``file:line``; with the assignment it goes through, where
    the cap is a variable computed from ``max_model_len``), or what was searched."""
    import ast
    import textwrap

    module = _module(SCHEDULER)
    schedule = getattr(getattr(module, "Scheduler", None), "schedule", None) if module else None
    if schedule is None:
        return {"found": None, "searched": f"{SCHEDULER}.Scheduler.schedule"}
    lines, first = inspect.getsourcelines(schedule)
    file = inspect.getsourcefile(schedule) or "?"
    short = file[file.rfind("/vllm/") + 1:] if "/vllm/" in file else file
    text = textwrap.dedent("".join(lines))
    bounded: dict[str, ast.Assign] = {}  # names assigned from an expression of max_model_len
    assigns = sorted((n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Assign) and len(n.targets) == 1
                      and isinstance(n.targets[0], ast.Name)), key=lambda n: (n.lineno, n.col_offset))
    for node in assigns:  # in source order: a name is bounded before it is used
        target = node.targets[0]
        assert isinstance(target, ast.Name)
        segment = ast.get_source_segment(text, node) or ""
        names = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
        through = [bounded[n] for n in sorted(names) if n in bounded]
        if "max_model_len" in segment:
            bounded[target.id] = node
        is_min = isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "min"
        if target.id == "num_new_tokens" and is_min and ("max_model_len" in segment or through):
            parts = [*through, node]
            return {"found": "; ".join(" ".join((ast.get_source_segment(text, p) or "").split()) for p in parts),
                    "source": f"{short}:{first + parts[0].lineno - 1}-{first + (node.end_lineno or node.lineno) - 1}"}
    return {"found": None, "searched": f"{short}:{first}-{first + len(lines) - 1} (no num_new_tokens = min(...) "
                                       "bounded by max_model_len in Scheduler.schedule)"}


def _runner_block_tables() -> dict[str, Any] | None:
    """The second model runner's ``BlockTables``, where the runner's ``initialize_kv_cache``
    computes its widths with the calls of ``RUNNER_WIDTH_CALLS`` (else None: nothing known to call)."""
    table = _module(RUNNER_TABLE)
    tables = getattr(table, "BlockTables", None) if table else None
    runner = _module(RUNNER) if tables is not None else None
    method = getattr(getattr(runner, "GPUModelRunner", None), "initialize_kv_cache", None)
    if tables is None or method is None or not all(call in inspect.getsource(method) for call in RUNNER_WIDTH_CALLS):
        return None
    dcp = "cp_size" in inspect.signature(tables).parameters
    return {"found": f"{RUNNER_TABLE}.BlockTables", "takes": "runner-width", "source": _source(tables),
            "width_from": _source(method), "dcp": dcp}


# ---- the v1 block table -----------------------------------------------------------------------------


def _fill(cls: Any, known: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``cls`` that ``known`` names (by parameter name)."""
    parameters = inspect.signature(cls).parameters
    return {name: value for name, value in known.items() if name in parameters}


def attention_spec(block_size: int, mla: bool = False) -> Any:
    """The release's own attention spec of one KV cache group (MLA for the indexer's group)."""
    import torch

    specs = importlib.import_module("vllm.v1.kv_cache_interface")
    cls = getattr(specs, "MLAAttentionSpec" if mla else "FullAttentionSpec")
    known: dict[str, Any] = {"block_size": block_size, "num_kv_heads": 1, "head_size": 576 if mla else 128,
                             "dtype": torch.bfloat16, "use_mla": mla, "cache_dtype_str": "auto"}
    fields = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in known.items() if k in fields})


def block_table_width(max_model_len: int, block_size: int, dcp: int) -> int:
    """The width of the block table the model runner builds for one attention group."""
    import torch

    if _module(BLOCK_TABLE) is None:
        return _runner_table_width(max_model_len, block_size, dcp)
    module = importlib.import_module(BLOCK_TABLE)
    cls = module.MultiGroupBlockTable
    known: dict[str, Any] = {"max_num_reqs": 2, "max_model_len": max_model_len, "max_num_batched_tokens": 8,
                             "pin_memory": False, "device": torch.device("cpu"), "block_size": block_size,
                             "block_sizes": [block_size],
                             "kernel_block_sizes": [block_size], "num_speculative_tokens": 0,
                             "cp_kv_cache_interleave_size": 1}
    with cp_size(dcp, (BLOCK_TABLE, "vllm.v1.kv_cache_interface")):
        parameters = inspect.signature(cls).parameters
        if "max_model_len" not in parameters and "max_num_blocks" in parameters:  # the runner passes the group's blocks
            spec = attention_spec(block_size)
            config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(
                decode_context_parallel_size=dcp, prefill_context_parallel_size=1))
            known["max_num_blocks"] = [spec.max_num_blocks_per_req(config, max_model_len)]
        table = cls(**_fill(cls, known))
    first = table.block_tables[0]
    width = getattr(first, "max_num_blocks_per_req", None)
    return int(width) if width is not None else int(first.block_table.shape[1])


def _runner_table_width(max_model_len: int, block_size: int, dcp: int) -> int:
    """The second model runner's table for one full-attention group: the width its
    ``initialize_kv_cache`` passes (the group's ``max_num_blocks_per_req``, then
    ``get_block_table_width`` with the attention spec object's token alignment), read off the ``BlockTables`` made
    with it."""
    import torch

    specs = importlib.import_module("vllm.v1.kv_cache_interface")
    spec = attention_spec(block_size)
    config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(
        decode_context_parallel_size=dcp, prefill_context_parallel_size=1))
    blocks = specs.get_block_table_width(spec.max_num_blocks_per_req(config, max_model_len), spec.block_size,
                                         token_alignment=spec.block_table_token_alignment)
    cls = importlib.import_module(RUNNER_TABLE).BlockTables
    known = {"block_sizes": [block_size], "max_num_reqs": 2, "max_num_batched_tokens": 8,
             "max_num_blocks_per_group": [blocks], "device": torch.device("cpu"), "cp_size": dcp}
    with _host_buffers_unpinned():
        tables = cls(**_fill(cls, known))
    return int(tables.block_tables[0].gpu.shape[1])


def _host_buffers_unpinned() -> contextlib.AbstractContextManager[None]:
    """The runner's host staging buffers in plain memory: the stand-in platform is a GPU, so they
    would ask for pinned (or UVA) memory, which a CPU-only torch cannot allocate. Their size is
    not what is measured; the table is a device tensor of its own."""
    return answering(("vllm.v1.worker.gpu.buffer_utils",),
                     {"is_uva_available": lambda: False, "is_pin_memory_available": lambda: False})


# ---- the DSA indexer ----------------------------------------------------------------------------------


def runner_builder(backend: Any, spec: Any, config: Any, device: Any) -> Any:
    """A metadata builder made as the model runner makes it: through the release's
    ``AttentionGroup`` (its ``create_metadata_builders``, or the earlier static
    ``create_with_metadata_builders``), which passes what the builder takes (since 0.33-era
    releases: the block table's width); the builder class itself where there is neither."""
    utils = _module("vllm.v1.worker.utils")
    group_cls = getattr(utils, "AttentionGroup", None) if utils else None
    layers = ["model.layers.0.self_attn.indexer"]
    if group_cls is not None and hasattr(group_cls, "create_metadata_builders"):
        known = {"backend": backend, "layer_names": layers, "kv_cache_spec": spec, "kv_cache_group_id": 0}
        fields = {f.name for f in dataclasses.fields(group_cls)}
        group = group_cls(**{k: v for k, v in known.items() if k in fields})
        # 0.11.1 to 0.16.x require the kernel's block size (the runner's is the group's own here);
        # later releases default it and check it against the backend's sizes when given
        takes = inspect.signature(group.create_metadata_builders).parameters
        required = "kernel_block_size" in takes and takes["kernel_block_size"].default is inspect.Parameter.empty
        extra = {"kernel_block_size": getattr(spec, "block_size", None)} if required else {}
        group.create_metadata_builders(config, device, **extra)
        return group.metadata_builders[0]
    if group_cls is not None and hasattr(group_cls, "create_with_metadata_builders"):
        return group_cls.create_with_metadata_builders(backend, layers, spec, config, device).metadata_builders[0]
    return backend.get_builder_cls()(spec, layers, config, device)


class IndexerBench:
    """The indexer's metadata builder, made by its own ``__init__`` on an engine config."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.module = importlib.import_module(INDEXER)

    def builder(self, max_model_len: int, block_size: int, dcp: int) -> Any:
        import torch

        object.__setattr__(self.config.model_config, "max_model_len", max_model_len)
        # the deployment's DCP size, where the release reads it from the config (AttentionSpec)
        object.__setattr__(self.config.parallel_config, "decode_context_parallel_size", dcp)
        spec = attention_spec(block_size, mla=True)
        # cp_utils: from 0.26.0 the builder divides by get_kv_cache_shard_count(), which asks get_dcp_group() there
        with cp_size(dcp, (INDEXER, "vllm.v1.kv_cache_interface", "vllm.v1.worker.utils", "vllm.v1.worker.cp_utils")), \
                self._current():
            return runner_builder(self.module.DeepseekV32IndexerBackend, spec, self.config, torch.device("cpu"))

    def width(self, max_model_len: int, block_size: int, dcp: int) -> int | None:
        """The buffer's width, or None where the builder allocates no such buffer (early releases)."""
        buffer = getattr(self.builder(max_model_len, block_size, dcp), "expanded_block_table_buffer", None)
        return None if buffer is None else int(buffer.shape[1])

    def fill(self, max_model_len: int, block_size: int, dcp: int, decode_lens: list[int], table_width: int) -> dict[str, Any]:
        """``_prepare_decode_tensors`` on a decode batch of ``decode_lens`` query rows per request,
        reading a block table ``table_width`` blocks wide (distinct ids): the error it raises, or
        the rows it wrote."""
        import torch

        builder = self.builder(max_model_len, block_size, dcp)
        requests = len(decode_lens)
        table = torch.arange(1, (requests + 1) * table_width + 1, dtype=torch.int32).view(requests + 1, table_width)
        lens = torch.tensor(decode_lens, dtype=torch.int32)
        seq_lens = torch.full((requests,), max(1, min(max_model_len, 1000)), dtype=torch.int32)
        query_start = torch.cumsum(lens, 0) - lens
        tokens = int(lens.sum())
        try:
            with self._current():
                builder._prepare_decode_tensors(seq_lens, table[:requests], lens, lens, query_start, requests, tokens,
                                                False, max(decode_lens), max(decode_lens))
        except RuntimeError as error:
            return {"error": str(error), "buffer_width": int(builder.expanded_block_table_buffer.shape[1])}
        rows = builder.expanded_block_table_buffer[:tokens]
        return {"error": None, "buffer_width": int(rows.shape[1]), "rows_checksum": int(rows.long().sum())}

    @contextlib.contextmanager
    def _current(self) -> Iterator[None]:
        config_module = importlib.import_module("vllm.config")
        setter = getattr(config_module, "set_current_vllm_config", None)
        if setter is None:
            yield
            return
        with setter(self.config):
            yield


# ---- V0 --------------------------------------------------------------------------------------------


def v0_width(max_seq_len_to_capture: int, block_size: int) -> int:
    runner = importlib.import_module(V0_RUNNER)
    cls = next(c for c in (getattr(runner, n, None) for n in ("GPUModelRunnerBase", "ModelRunner"))
               if c is not None and hasattr(c, "get_max_block_per_batch"))
    holder = types.SimpleNamespace(block_size=block_size, max_seq_len_to_capture=max_seq_len_to_capture)
    return int(cls.get_max_block_per_batch(holder))


def v0_rows(backend: str, graph_width: int, seq_lens: list[int], block_tables: list[list[int]]) -> dict[str, Any]:
    """A V0 metadata builder's ``build`` on a decode batch that replays the captured graph: the
    error it raised writing the rows into ``graph_block_tables``, and the rows."""
    import numpy as np

    module_name, class_name = V0_BUILDERS[backend]
    cls = getattr(importlib.import_module(module_name), class_name)
    builder = object.__new__(cls)
    runner = types.SimpleNamespace(graph_block_tables=np.zeros((len(block_tables), graph_width), dtype=np.int32),
                                   device="cpu", block_size=16, sliding_window=None, max_seq_len_to_capture=1 << 30)
    builder.runner = runner
    builder.input_builder = types.SimpleNamespace(inter_data_list=[], chunked_prefill_enabled=False, runner=runner)
    builder.prefill_seq_lens, builder.curr_seq_lens = [], list(seq_lens)
    builder.num_decode_tokens = len(seq_lens)
    builder.num_prefills = builder.num_prefill_tokens = 0
    builder.slot_mapping, builder.block_tables = [], [list(b) for b in block_tables]
    builder.context_lens, builder.query_start_loc = [], []
    builder.paged_kv_indices, builder.paged_kv_indptr, builder.paged_kv_last_page_len = [], [0], []
    builder.total_blocks, builder.is_profile_run, builder.use_v2_block_manager = 0, False, True
    builder.has_prefix_cache_hit, builder.multimodal_placeholder_maps = False, {}
    parameters = list(inspect.signature(cls.build).parameters)[1:]
    arguments: dict[str, Any] = {"seq_lens": list(seq_lens), "query_lens": [1] * len(seq_lens), "cuda_graph_pad_size": 0,
                                 "batch_size": len(seq_lens)}
    error = None
    try:
        builder.build(*(arguments[p] for p in parameters if p in arguments))
    except ValueError as raised:
        error = str(raised)
    except Exception as raised:  # noqa: BLE001 - past the row writes, the stand-ins end the build
        error = f"after the rows: {type(raised).__name__}"
    return {"error": error, "rows": runner.graph_block_tables.tolist()}


# ---- the v1 KV cache manager ----------------------------------------------------------------------


def _kv_cache_config(block_size: int, num_blocks: int) -> Any:
    """One full-attention KV cache group of ``num_blocks`` blocks (the release's own config classes)."""
    specs = importlib.import_module("vllm.v1.kv_cache_interface")
    group = specs.KVCacheGroupSpec(["model.layers.0.self_attn.attn"], attention_spec(block_size))
    fields = {f.name for f in dataclasses.fields(specs.KVCacheConfig)}
    known: dict[str, Any] = {"num_blocks": num_blocks, "kv_cache_groups": [group], "tensors": {},
                             "kv_cache_tensors": []}
    return specs.KVCacheConfig(**{k: v for k, v in known.items() if k in fields})


def _request(tokens: int) -> Any:
    """A request of ``tokens`` prompt tokens, made by the release's own ``Request``."""
    request_cls = importlib.import_module("vllm.v1.request").Request
    sampling = importlib.import_module("vllm.sampling_params").SamplingParams(max_tokens=1)
    known: dict[str, Any] = {"request_id": "r0", "prompt": None, "prompt_token_ids": [0] * tokens,
                             "multi_modal_inputs": None, "multi_modal_kwargs": None, "multi_modal_hashes": None,
                             "multi_modal_placeholders": None,
                             "sampling_params": sampling, "pooling_params": None, "eos_token_id": None,
                             "arrival_time": 0.0}
    return request_cls(**_fill(request_cls, known))


def kv_slots(max_model_len: int, block_size: int, computed: int, new_tokens: int, lookahead: int) -> dict[str, Any]:
    """The blocks ``KVCacheManager.allocate_slots`` gives one request: ``computed`` tokens
    allocated first (its prefill, when there are any), then a step of ``new_tokens`` (the sampled
    token and the drafts) with ``lookahead`` slots where the release takes them. Answers
    ``{"held": blocks}`` or ``{"error": the exception's type and text}``; prefix caching off."""
    cls = importlib.import_module(KV_MANAGER).KVCacheManager
    # a pool that never runs dry: every block of a row, twice, and what a 0.8.x manager preallocates
    num_blocks = 2 * cdiv(max_model_len + 256, block_size) + 8
    parameters = inspect.signature(cls).parameters
    if "kv_cache_config" in parameters:
        known: dict[str, Any] = {"kv_cache_config": _kv_cache_config(block_size, num_blocks),
                                 "max_model_len": max_model_len, "scheduler_block_size": block_size,
                                 "hash_block_size": block_size, "enable_caching": False, "log_stats": False}
    else:  # 0.8.x: the manager takes the block size and the pool itself
        known = {"block_size": block_size, "num_gpu_blocks": num_blocks, "max_model_len": max_model_len,
                 "enable_caching": False, "log_stats": False}
    manager = cls(**_fill(cls, known))
    request = _request(computed + 1)
    takes = inspect.signature(manager.allocate_slots).parameters
    try:
        if computed:
            manager.allocate_slots(request, computed)
            request.num_computed_tokens = computed
        step = {"num_lookahead_tokens": lookahead} if "num_lookahead_tokens" in takes else {}
        got = manager.allocate_slots(request, new_tokens, **step)
    except Exception as error:  # noqa: BLE001 - the engine's own refusal is the answer
        return {"error": f"{type(error).__name__}: {str(error).strip()}"}
    if got is None:
        return {"error": "no free blocks"}
    blocks = manager.get_block_ids(request.request_id) if hasattr(manager, "get_block_ids") else None
    if blocks is None:
        return {"held": len(manager.req_to_blocks[request.request_id])}
    first = blocks[0] if blocks and isinstance(blocks[0], (list, tuple)) else blocks
    return {"held": len(first)}


def _scheduler(config: Any, *, hashed: bool) -> tuple[Any, Any]:
    """The release's own ``Scheduler`` (``AsyncScheduler`` where ``config`` schedules
    asynchronously, as the engine core picks it) over a pool that never runs dry, and a maker of
    requests built by its own ``Request`` (``hashed``: with the block hasher prefix caching needs)."""
    scheduler_module = importlib.import_module(SCHEDULER)
    cls = scheduler_module.Scheduler
    if getattr(config.scheduler_config, "async_scheduling", False):
        cls = importlib.import_module("vllm.v1.core.sched.async_scheduler").AsyncScheduler
    block_size = int(config.cache_config.block_size)
    num_blocks = 4 * (cdiv(config.model_config.max_model_len, block_size) + 8)
    config.cache_config.num_gpu_blocks = num_blocks
    outputs = importlib.import_module("vllm.v1.structured_output")
    known: dict[str, Any] = {"vllm_config": config, "kv_cache_config": _kv_cache_config(block_size, num_blocks),
                             "structured_output_manager": outputs.StructuredOutputManager(config),
                             "block_size": block_size, "log_stats": False, "include_finished_set": False}
    for part in ("scheduler_config", "model_config", "cache_config", "lora_config", "speculative_config"):
        known[part] = getattr(config, part)  # 0.8.x takes the config's parts, not the whole
    scheduler = cls(**_fill(scheduler_module.Scheduler, known))  # AsyncScheduler takes the Scheduler's arguments
    hasher = _block_hasher(config, block_size) if hashed else None
    request_module = importlib.import_module("vllm.v1.request")
    sampling = importlib.import_module("vllm.sampling_params").SamplingParams

    def request(request_id: str, tokens: list[int], max_tokens: int) -> Any:
        made: dict[str, Any] = {"request_id": request_id, "prompt": None, "prompt_token_ids": tokens,
                                "multi_modal_inputs": None, "multi_modal_kwargs": None, "multi_modal_hashes": None,
                                "multi_modal_placeholders": None, "sampling_params": sampling(max_tokens=max_tokens),
                                "pooling_params": None, "eos_token_id": None, "arrival_time": 0.0,
                                "block_hasher": hasher}
        return request_module.Request(**_fill(request_module.Request, made))

    return scheduler, request


def _tokens(count: int, first: int = 0) -> list[int]:
    return [(7 * (first + i) + 3) % 30000 + 1 for i in range(count)]


def waiting_pad(config: Any, prompt_len: int, steps: int = 3) -> dict[str, Any]:
    """What the release's own scheduler schedules for a prompt sent again, all but its last token in
    the prefix cache, beside a running decode (vLLM PR 53962's state): ``{"scheduled": [the new
    request's tokens at each of ``steps`` schedules, 0 where it got none], "computed": [its
    num_computed_tokens after each]}``, or ``{"error": ...}``. ``config`` is a ``VllmConfig`` with
    prefix caching and speculative decoding; asynchronous scheduling takes ``AsyncScheduler``, which
    schedules the next step before the last one's output comes back, as the engine core does.

    The prompt is first scheduled whole for a request aborted at once (its full blocks stay cached),
    and a short request is admitted, so that the prompt's second request arrives while a decode runs."""
    scheduler, request = _scheduler(config, hashed=True)
    finished = importlib.import_module("vllm.v1.request").RequestStatus.FINISHED_ABORTED
    prompt = _tokens(prompt_len)
    try:
        scheduler.add_request(request("warm", list(prompt), 1))
        scheduler.schedule()
        scheduler.finish_requests("warm", finished)
        scheduler.add_request(request("running", [30001 + i for i in range(16)], 1 << 16))
        scheduler.schedule()
        again = request("again", list(prompt), 1 << 16)
        scheduler.add_request(again)
        scheduled, computed = [], []
        for _ in range(steps):
            output = scheduler.schedule()
            scheduled.append(int(output.num_scheduled_tokens.get("again", 0)))
            computed.append(int(again.num_computed_tokens))
    except Exception as error:  # noqa: BLE001 - the engine's own refusal is the answer
        return {"error": f"{type(error).__name__}: {str(error).strip()}"}
    return {"scheduled": scheduled, "computed": computed}


def decode_step(config: Any, computed: int, drafts: int) -> dict[str, Any]:
    """What the release does with a request whose prompt of ``computed`` tokens has been computed,
    one token sampled and ``drafts`` tokens drafted: ``{"stopped": True}`` where its own
    ``update_from_output`` (``check_stop``) finishes the request on that sampled token, else
    ``{"scheduled": n, "drafts": d}``, the tokens and draft tokens its own ``Scheduler.schedule``
    gives the request's next step; or ``{"error": ...}``. ``config`` schedules synchronously (every
    step's output back before the next step is formed), as the engine core then does.

    The prompt is scheduled (in chunks where the token budget asks) and each step's output handed
    to ``update_from_output``, as a model runner's would be: one sampled token a step (dropped by
    the scheduler until the prompt is computed), the drafts with the step that completes it."""
    scheduler, request = _scheduler(config, hashed=False)
    made = request("r", _tokens(computed), 1 << 30)
    token = _tokens(1, computed)[0]
    try:
        scheduler.add_request(made)
        given = 0
        while not made.output_token_ids:
            output = scheduler.schedule()
            step = int(output.num_scheduled_tokens.get("r", 0))
            if step == 0:
                return {"error": f"the prompt was not scheduled after {given} of its {computed} tokens"}
            given += step
            _hand_back(scheduler, output, token, _tokens(drafts, computed + 1) if given >= computed else [])
        if made.is_finished():
            return {"stopped": True}
        output = scheduler.schedule()
    except Exception as error:  # noqa: BLE001 - the engine's own refusal is the answer
        return {"error": f"{type(error).__name__}: {str(error).strip()}"}
    return {"scheduled": int(output.num_scheduled_tokens.get("r", 0)),
            "drafts": len((output.scheduled_spec_decode_tokens or {}).get("r", []))}


def async_steps(config: Any, computed: int, drafts: int, accepted: int, limit: int = 64) -> dict[str, Any]:
    """The decode steps the release's own ``AsyncScheduler`` forms for a request whose prompt holds
    ``computed`` tokens, driven as the engine core's batch queue drives it (two steps in flight: a
    step is formed before the output of the one before it comes back) until the request finishes:
    ``{"steps": [[c, n, d], ...], "finished": bool}``, each step's ``num_computed_tokens`` when it
    was formed (counting the tokens of the step still in flight), its tokens and its draft tokens;
    or ``{"error": ...}``. Each step's output samples its first ``accepted`` drafts and one token
    more, as a model runner's would; the drafts themselves stay with the worker (the scheduler
    holds placeholders), so none are handed back. ``config`` schedules asynchronously."""
    scheduler, request = _scheduler(config, hashed=False)
    made = request("r", _tokens(computed), 1 << 30)
    queue: collections.deque[tuple[Any, int, bool]] = collections.deque()  # (output, drafts verified, samples)
    steps: list[list[int]] = []
    produced = 0
    try:
        scheduler.add_request(made)
        while len(steps) < limit:
            if scheduler.has_requests():
                before = int(made.num_computed_tokens)
                output = scheduler.schedule()
                n = int(output.num_scheduled_tokens.get("r", 0))
                verified = len((output.scheduled_spec_decode_tokens or {}).get("r", []))
                if n and before >= computed:  # the prompt's own steps are not decode steps
                    steps.append([before, n, verified])
                queue.appendleft((output, verified, n > 0 and before + n >= computed))
                if len(queue) < 2 and (n > 0 or scheduler.has_requests()):
                    continue
            if not queue:
                break
            done, verified, samples = queue.pop()
            sampled = _tokens(1 + min(accepted, verified), computed + 1 + produced) if samples else []
            produced += len(sampled)
            scheduler.update_from_output(done, _output(sampled))
    except Exception as error:  # noqa: BLE001 - the engine's own refusal is the answer
        return {"error": f"{type(error).__name__}: {str(error).strip()}"}
    return {"steps": steps, "finished": bool(made.is_finished())}


def v0_decode_step(max_model_len: int, block_size: int, computed: int, async_output: bool) -> dict[str, Any]:
    """What the V0 engine does with a request whose prompt of ``computed`` tokens has been computed
    and one token sampled: ``{"scheduled": True}`` where the release's own ``Scheduler.schedule``
    gives it a next decode step, ``{"stopped": True}`` where it does not (its output processor's
    ``StopChecker.maybe_stop_sequence`` finished the sequence, or the scheduler held it back), or
    ``{"error": ...}`` where the release has no V0 engine.

    As ``LLMEngine`` runs them: the sampled token is appended to the sequence and its computed
    tokens advanced at once (``_advance_to_next_step``); without asynchronous output processing
    the stop checker then runs before the next schedule, with it (``async_output``: the scheduler
    was given an output callback) the next step is scheduled first and the stop check comes after."""
    try:
        scheduling = importlib.import_module("vllm.core.scheduler")
        checker_cls = importlib.import_module("vllm.engine.output_processor.stop_checker").StopChecker
    except ModuleNotFoundError as error:
        return {"error": f"{type(error).__name__}: {error}"}
    configs = importlib.import_module("vllm.config")
    sequences = importlib.import_module("vllm.sequence")
    sampling = importlib.import_module("vllm.sampling_params").SamplingParams
    known: dict[str, Any] = {"max_num_batched_tokens": max(max_model_len, 2048), "max_num_seqs": 8,
                             "max_model_len": max_model_len, "runner_type": "generate", "task": "generate",
                             "enable_chunked_prefill": False, "num_lookahead_slots": 0, "is_attention_free": False}
    scheduler_config = configs.SchedulerConfig(**_fill(configs.SchedulerConfig, known))
    cache_config = configs.CacheConfig(**_fill(configs.CacheConfig, {"block_size": block_size,
                                                                       "gpu_memory_utilization": 0.9, "swap_space": 0,
                                                                       "cache_dtype": "auto"}))
    cache_config.num_gpu_blocks = 4 * (cdiv(max_model_len, block_size) + 8)
    cache_config.num_cpu_blocks = 0
    scheduler = scheduling.Scheduler(scheduler_config, cache_config, None, 1, (lambda *a, **k: None) if async_output else None)
    seq = sequences.Sequence(**_fill(sequences.Sequence, {"seq_id": 0, "block_size": block_size, "eos_token_id": None,
                                                          "inputs": {"type": "token", "prompt_token_ids": _tokens(computed),
                                                                     "prompt": None}}))
    params = sampling(max_tokens=1 << 30, ignore_eos=True)
    group = sequences.SequenceGroup(**_fill(sequences.SequenceGroup, {"request_id": "r", "seqs": [seq], "arrival_time": 0.0,
                                                                      "sampling_params": params}))
    try:
        scheduler.add_seq_group(group)
        _, prefill, _ = scheduler.schedule()
        if not any(s.seq_group.request_id == "r" for s in prefill.scheduled_seq_groups):
            return {"error": f"the prompt of {computed} tokens was not scheduled"}
        group.update_num_computed_tokens(computed)  # the prompt computed: the sequence enters its decode stage
        token = _tokens(1, computed)[0]
        seq.append_token_id(token, {token: sequences.Logprob(0.0)})
        if not async_output:
            checker = checker_cls(**_fill(checker_cls, {"max_model_len": max_model_len,
                                                        "get_tokenizer_for_seq": lambda s: None}))
            checker.maybe_stop_sequence(seq, 0, params)
            if seq.is_finished():
                return {"stopped": True}
        _, decode, _ = scheduler.schedule()
    except Exception as error:  # noqa: BLE001 - the engine's own refusal is the answer
        return {"error": f"{type(error).__name__}: {str(error).strip()}"}
    if any(s.seq_group.request_id == "r" for s in decode.scheduled_seq_groups):
        return {"scheduled": True}
    return {"stopped": True}


def _output(sampled: list[int], drafts: list[int] | None = None) -> Any:
    """A model runner's output for request ``r``'s step: its ``sampled`` tokens (none for a prompt
    chunk) and, where the release's output carries them, the ``drafts`` proposed for the next step."""
    cls = importlib.import_module("vllm.v1.outputs").ModelRunnerOutput
    kind = next((str(f.type) for f in dataclasses.fields(cls) if f.name == "sampled_token_ids"), "")
    ids: Any = [np.array(sampled, dtype=np.int64)] if "ndarray" in kind else [list(sampled)]  # 0.11.x: an array
    known: dict[str, Any] = {"req_ids": ["r"], "req_id_to_index": {"r": 0}, "sampled_token_ids": ids,
                             "spec_token_ids": None if drafts is None else [drafts], "logprobs": None,
                             "prompt_logprobs_dict": {}, "pooler_output": []}  # a generating model runner pools nothing
    return cls(**_fill(cls, known))


def _hand_back(scheduler: Any, scheduled: Any, token: int, drafts: list[int]) -> None:
    """A model runner's output for request ``r``'s step, given to the scheduler as the engine core
    gives it: one sampled token, and the drafts (in the output where it has ``spec_token_ids``, else
    through the scheduler's ``update_draft_token_ids``, as later engine cores hand them over)."""
    outputs = importlib.import_module("vllm.v1.outputs")
    scheduler.update_from_output(scheduled, _output([token], drafts))
    if "spec_token_ids" not in inspect.signature(outputs.ModelRunnerOutput).parameters and drafts:
        scheduler.update_draft_token_ids(outputs.DraftTokenIds(["r"], [drafts]))


def _block_hasher(config: Any, block_size: int) -> Any:
    """The request block hasher the engine core gives every request when prefix caching is on (None
    where the release hashes blocks in the manager itself)."""
    utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
    if not hasattr(utils, "get_request_block_hasher"):
        return None
    hashing = _module("vllm.utils.hashing") or importlib.import_module("vllm.utils")
    function = hashing.get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
    utils.init_none_hash(function)
    return utils.get_request_block_hasher(block_size, function)
