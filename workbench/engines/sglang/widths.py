"""The width of every graph buffer SGLang sizes at capture, measured by its own code (worker only).

One ``WidthProbe`` per buffer the workbench models: the engine classes that may hold it (searched
by name in the wheel, ``locate.py``: the adapter is keyed by what it finds, never by a version),
the method that sizes it, the arguments a capture passes, and where in the object the buffer ends
up. ``measure`` runs that method on the meta device (``engine_objects.py``) for one state of the
measuring grid and returns the buffer's width in the workbench backend's unit (pages or tokens
for a table, entries for a pooled step row).

The objects are set up as ``calls`` sets them up for conformance (the Ascend and DSA
backends) or with the settings every backend reads (``_settings``); what a method reads beyond
that is filled by ``engine_objects.call_filling`` and recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from workbench.engines.checking.answers import MADE_HERE
from workbench.engines.checking.states import State, geometry_of
from workbench.engines.sandbox import engine_objects as eo
from workbench.engines.sglang import calls as ec


def _settings(state: State) -> dict[str, Any]:
    """What an attention backend's ``__init__`` keeps from the model runner and server arguments,
    as the state's launch sets them (one device, DCP off, no sliding-window pool, no MLA)."""
    d = state["draft_tokens"]
    return {MADE_HERE: True, "max_context_len": state["context_len"], "page_size": state["page_size"],
            "device": "cpu", "speculative_num_draft_tokens": d or None, "num_draft_tokens": d or None,
            "speculative_num_steps": state["spec_steps"], "topk": state["spec_topk"],
            "speculative_eagle_topk": state["spec_topk"], "speculative_step_id": 0, "is_draft_worker": False,
            "use_sliding_window_kv_pool": False, "is_hybrid_swa": False, "use_mla": False, "num_wrappers": 1,
            "dcp_world_size": 1, "dcp_size": 1, "attn_dcp_size": 1, "kv_index_translator": untranslated_pool(state),
            "req_to_token": torch.zeros((2, geometry_of(state).request_table_width), dtype=torch.int32,
                                        device="meta")}


def untranslated_pool(state: State) -> SimpleNamespace:
    """The KV index translator (0.5.19 on) of a pool that needs no translation, as a server without
    it has: ``is_translating`` False, no capture tables, and the token table itself as the source a
    kernel reads (``read_source``'s plain plan: its row stride its width)."""
    width = geometry_of(state).request_table_width
    table = torch.zeros((state["max_bs"] + 1, width), dtype=torch.int32, device="meta")
    plan = SimpleNamespace(row_ids=torch.zeros(state["max_bs"], dtype=torch.int64, device="meta"), ids=table,
                           row_stride=width, entry_page_size=1, v2p=None)
    return SimpleNamespace(is_translating=False, make_capture_tables=lambda **kwargs: None,
                           read_source=lambda *args, **kwargs: plan)


def _made(module: ModuleType, cls: type, state: State) -> Any:
    return eo.make(cls, _settings(state))


def _ascend(module: ModuleType, cls: type, state: State) -> Any:
    b = ec.ascend_backend(module, state)
    b.device = "cpu"
    return b


def _dsa(module: ModuleType, cls: type, state: State) -> Any:
    b = ec.dsa_backend(module, state, None)
    b.req_to_token = torch.zeros((2, geometry_of(state).request_table_width), dtype=torch.int32, device="meta")
    return b


def _aiter_paged(module: ModuleType, cls: type, state: State) -> Any:
    """AITER with the page-table decode (its unified verify reads that table), and the indptr
    rows its ``__init__`` allocates."""
    obj = _made(module, cls, state)
    obj.decode_uses_page_table = True
    obj.kv_indptr = torch.zeros((1, state["max_bs"] + 1), dtype=torch.int32)
    obj.qo_indptr = torch.zeros((1, state["max_bs"] + 1), dtype=torch.int32)
    return obj


def _graph_args(state: State) -> tuple[int, int]:
    """``(max_bs, max_num_tokens)`` as the graph runner passes them: query rows per request
    times ``max_bs`` (D in a verify graph with speculation, one otherwise)."""
    return state["max_bs"], state["max_bs"] * max(1, state["draft_tokens"])


def _dsa_args(state: State) -> tuple[int, int]:
    return state["max_bs"], ec.dsa_rows({**state, "mode": "target-verify"})


def _second_dim(path: str) -> Callable[[Mapping[str, tuple[int, ...]]], int]:
    def width(tensors: Mapping[str, tuple[int, ...]]) -> int:
        return tensors[path][1]
    return width


@dataclass(frozen=True)
class WidthProbe:
    component: str  # the workbench backend
    classes: tuple[str, ...]  # the engine classes that may hold the buffer, searched in this order
    buffer: str  # the tensor's attribute path in the object once sized
    unit: str  # "pages", "tokens", "entries"
    setup: Callable[[ModuleType, type, State], Any] = _made
    args: Callable[[State], tuple[Any, ...]] = _graph_args
    width: Callable[[Mapping[str, tuple[int, ...]]], int] | None = None
    method: str = "init_cuda_graph_state"
    page_sizes: tuple[int, ...] | None = None  # the page sizes the buffer exists at (None: the grid's)
    key: str | None = None  # a pooled buffer's key ("draft-decode")
    older_names: tuple[str, ...] = ()  # the buffer's attribute path in releases that named it otherwise

    def path_in(self, tensors: Mapping[str, tuple[int, ...]]) -> str | None:
        """The buffer's path among the tensors made: by its name, or an older one."""
        return next((p for p in (self.buffer, *self.older_names) if p in tensors), None)

    def read(self, tensors: Mapping[str, tuple[int, ...]]) -> int:
        path = self.path_in(tensors)
        if path is None:
            made = ", ".join(f"{k} {list(v)}" for k, v in tensors.items()) or "none"
            raise LookupError(f"{self.method} made no {self.buffer} (tensors made: {made[:300]})")
        return (self.width or _second_dim(path))(tensors)

    @property
    def name(self) -> str:
        return self.component if self.key is None else f"{self.component}[{self.key}]"


TABLE_PROBES = (
    WidthProbe("sglang-ascend-block-tables", ("AscendAttnBackend",), "graph_metadata.block_tables", "pages",
               setup=_ascend),
    WidthProbe("sglang-dsa-page-table", ("DeepseekSparseAttnBackend", "NativeSparseAttnBackend"),
               "decode_cuda_graph_metadata.page_table", "tokens", setup=_dsa, args=_dsa_args),
    WidthProbe("sglang-fa3-page-table", ("FlashAttentionBackend",), "decode_cuda_graph_metadata.page_table", "pages"),
    WidthProbe("sglang-xpu-page-table", ("XPUAttentionBackend",), "decode_cuda_graph_metadata.page_table", "pages"),
    WidthProbe("sglang-trtllm-mha-page-table", ("TRTLLMHAAttnBackend",), "decode_cuda_graph_metadata.page_table",
               "pages"),
    # FlashMLA's kernels take pages of 64 tokens whatever the pool's page size (PAGE_SIZE)
    WidthProbe("sglang-flashmla-page-table", ("FlashMLABackend",), "cuda_graph_kv_indices", "pages", page_sizes=(64,)),
    WidthProbe("sglang-trtllm-mla-page-table", ("TRTLLMMLABackend",), "decode_cuda_graph_kv_indices", "pages",
               older_names=("cuda_graph_kv_indices",)),
    WidthProbe("sglang-aiter-page-table", ("AiterAttnBackend",), "cuda_graph_page_table", "pages", setup=_aiter_paged),
)


def measure(probe: WidthProbe, module: ModuleType, cls: type, state: State, package_root: str) -> tuple[int, str]:
    """The buffer's width for ``state``, and a note of what was filled in (``Filled.note``). A
    method that raises after making the buffer (FlashMLA asks the device for its SM count next)
    still measured it: the width is read from what it made before the error."""
    obj = probe.setup(module, cls, state)
    try:
        _, filled = eo.call_filling(obj, probe.method, *probe.args(state), package_root=package_root)
        note = filled.note()
    except Exception as error:  # noqa: BLE001 - the buffer may be made before a device-only call
        if probe.path_in(eo.tensors_of(obj)) is None:
            raise
        note = f"stopped after making it: {type(error).__name__}: {str(error).splitlines()[0][:120]}"
    return probe.read(eo.tensors_of(obj)), note


def spec_shapes() -> tuple[dict[str, Any], ...]:
    """The speculative settings of the measuring grid: none, EAGLE chains and trees, NGRAM."""
    return (
        {"algorithm": None, "draft_tokens": 0, "spec_steps": 1, "spec_topk": 1, "draft_has_kv": True},
        {"algorithm": "EAGLE", "draft_tokens": 4, "spec_steps": 3, "spec_topk": 1, "draft_has_kv": True},
        {"algorithm": "EAGLE", "draft_tokens": 8, "spec_steps": 5, "spec_topk": 4, "draft_has_kv": True},
        {"algorithm": "NGRAM", "draft_tokens": 16, "spec_steps": 1, "spec_topk": 10, "draft_has_kv": False},
    )


GRID_CONTEXTS = (1000, 4096, 4097, 32768, 90000, 131072, 1048576)
GRID_PAGE_SIZES = (1, 16, 64, 128)
GRID_MAX_BS = (1, 16)


def grid(width_gen: str, page_sizes: tuple[int, ...] | None = None) -> list[State]:
    """The measuring grid: contexts (page multiples and not, 1K to 1M) x page sizes x the
    speculative shapes x captured batch sizes, under the release's width generation."""
    return [{"context_len": ctx, "page_size": ps, **shape, "max_bs": bs, "width_gen": width_gen, "mode": "decode",
             "step_id": 0, "hybrid_swa": False}
            for ctx in GRID_CONTEXTS for ps in page_sizes or GRID_PAGE_SIZES for shape in spec_shapes()
            for bs in GRID_MAX_BS]


def stand_ins() -> SimpleNamespace:
    """Sub-backends a multi-step drafter hands its step buffers to (their own sizing is not
    this buffer's): each takes the buffer and does nothing."""
    return SimpleNamespace(init_cuda_graph_state=lambda *args, **kwargs: None)
