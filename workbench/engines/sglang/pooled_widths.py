"""The flat ``kv_indices`` buffers SGLang pools across a batch, measured by its own code (worker only).

Three buffers per backend, as ``workbench/backends/pooled.py`` models them:

* ``draft-decode``: the multi-step drafter's ``cuda_graph_kv_indices`` ``(steps, width)``, made by
  its ``init_cuda_graph_state`` (the step backends it hands each row to are stand-ins that keep
  nothing: their own sizing is not this buffer's); the width is a step row's entries;
* ``draft-decode-eager``: the ``(steps, width)`` buffer its ``init_forward_metadata`` makes per
  call for the batch at hand, handed to ``common_template``, which is replaced on the object by a
  recorder of the buffer (the kernels and planners it would launch need a device);
* ``target-verify``: the backend's ``init_cuda_graph_state`` flat buffer, its entries.

Whether a draft step checks its buffer on the host (``draft_check``) is measured by running the
release's ``common_template`` on a batch that does not fit, with the draft kernel replaced by a
recorder: the engine's ``AssertionError`` before the launch is ``assert``, reaching the launch
unchecked is ``none``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from workbench.engines.checking.states import State, geometry_of
from workbench.engines.sandbox import engine_objects as eo
from workbench.engines.sglang.widths import WidthProbe, _made, stand_ins

RECORDED = "recorded_kv_indices"  # where the recorder keeps the buffer an eager call was handed


def _drafter(module: ModuleType, cls: type, state: State) -> Any:
    obj = _made(module, cls, state)
    obj.attn_backends = [stand_ins() for _ in range(state["spec_steps"])]
    obj.kv_indptr = torch.zeros((state["spec_steps"], state["max_bs"] * state["spec_topk"] + 1), dtype=torch.int32)
    # no sliding draft window (the untranslated pool's plain read plan comes with the settings)
    obj.draft_window_size, obj.draft_sink_size, obj.window_rail = 0, 0, False
    # before the read plans (0.5.22): the token table itself, and its width
    width = geometry_of(state).request_table_width
    obj.req_to_token_pool = SimpleNamespace(req_to_token=torch.zeros((state["max_bs"] + 1, width), dtype=torch.int32,
                                                                     device="meta"))
    obj.pool_len = width
    return obj


def _recording_drafter(module: ModuleType, cls: type, state: State) -> Any:
    obj = _drafter(module, cls, state)

    def record(forward_batch: Any, kv_indices_buffer: torch.Tensor, call_fn: Any, **more: Any) -> None:
        setattr(obj, RECORDED, kv_indices_buffer)
    obj.common_template = record
    return obj


def eager_batch(state: State, seq_lens_sum: int | None = None) -> SimpleNamespace:
    """The forward batch a draft call sees: ``max_bs`` requests of the state's launch (meta tensors)."""
    n, topk = state["max_bs"], state["spec_topk"]
    table = torch.zeros((n + 1, geometry_of(state).request_table_width), dtype=torch.int32, device="meta")
    return SimpleNamespace(batch_size=n, seq_lens_sum=n if seq_lens_sum is None else seq_lens_sum, spec_info=None,
                           kv_loc_plan=None,
                           req_pool_indices=torch.zeros(n, dtype=torch.int64, device="meta"),
                           req_to_token_pool=SimpleNamespace(req_to_token=table),
                           seq_lens=torch.zeros(n, dtype=torch.int64, device="meta"),
                           positions=torch.zeros(n * topk, dtype=torch.int64, device="meta"))


def _verify(module: ModuleType, cls: type, state: State) -> Any:
    obj = _made(module, cls, state)
    # what __init__ allocates for the eager path and the graph buffers reuse (one row per wrapper)
    obj.kv_indptr = torch.zeros((1, state["max_bs"] + 1), dtype=torch.int32)
    obj.qo_indptr = torch.zeros((1, state["max_bs"] + 1), dtype=torch.int32)
    obj.kv_last_page_len = torch.ones(state["max_bs"], dtype=torch.int32)
    return obj


def _flat(path: str) -> Any:
    def width(tensors: Mapping[str, tuple[int, ...]]) -> int:
        size = 1
        for n in tensors[path]:
            size *= n
        return size
    return width


def _row(path: str) -> Any:
    return lambda tensors: tensors[path][1]


def _verify_args(state: State) -> tuple[int, int]:
    return state["max_bs"], state["max_bs"] * max(1, state["draft_tokens"])


DRAFTERS = {
    "sglang-flashinfer-kv-indices": ("FlashInferMultiStepDraftBackend",),
    "sglang-flashinfer-mla-kv-indices": ("FlashInferMLAMultiStepDraftBackend",),
    "sglang-triton-kv-indices": ("TritonMultiStepDraftBackend",),
    "sglang-aiter-kv-indices": ("AiterMultiStepDraftBackend",),
}
VERIFIERS = {
    "sglang-flashinfer-kv-indices": (("FlashInferAttnBackend",), "cuda_graph_kv_indices[0]"),
    "sglang-flashinfer-mla-kv-indices": (("FlashInferMLAAttnBackend",), "cuda_graph_kv_indices"),
    "sglang-aiter-kv-indices": (("AiterAttnBackend",), "cuda_graph_kv_indices"),
}

def _drafter_args(state: State) -> tuple[int, int]:
    """As the EAGLE draft graph runner passes them: ``max_num_token = max_bs * topk`` (a draft
    step's tokens per request are its topk branches)."""
    return state["max_bs"], state["max_bs"] * state["spec_topk"]


POOLED_PROBES = (
    *(WidthProbe(component, classes, "cuda_graph_kv_indices", "entries", setup=_drafter, args=_drafter_args,
                 width=_row("cuda_graph_kv_indices"), key="draft-decode") for component, classes in DRAFTERS.items()),
    *(WidthProbe(component, classes, RECORDED, "entries", setup=_recording_drafter, width=_row(RECORDED),
                 method="init_forward_metadata", args=lambda s: (eager_batch(s),), key="draft-decode-eager")
      for component, classes in DRAFTERS.items()),
    # page size 1: the atlas's (and the pooled models') only one; AITER's MLA verify ran at no other
    # where its buffer was unpaged (0.5.10), and FlashInfer's buffers hold token slots
    *(WidthProbe(component, classes, path, "entries", setup=_verify, width=_flat(path), args=_verify_args,
                 key="target-verify", page_sizes=(1,)) for component, (classes, path) in VERIFIERS.items()),
)


class KernelLaunched(Exception):
    """The draft kernel was reached: nothing checked the buffer on the host before it."""


class _Kernel:
    def __getitem__(self, grid: object) -> Any:
        def launch(*args: object, **kwargs: object) -> None:
            raise KernelLaunched
        return launch


def draft_check(module: ModuleType, cls: type, state: State) -> str:
    """``assert`` or ``none``: the release's ``common_template`` on a batch of ``max_bs`` requests
    whose lengths sum one past what a ``(steps, max_bs * topk * ctx)`` buffer holds."""
    obj = _drafter(module, cls, state)
    obj.generate_draft_decode_kv_indices = _Kernel()
    saved = getattr(module, "generate_draft_decode_kv_indices", None)
    module.generate_draft_decode_kv_indices = _Kernel()  # type: ignore[attr-defined]
    n, topk, ctx = state["max_bs"], state["spec_topk"], state["context_len"]
    buffer = torch.zeros((state["spec_steps"], n * topk * ctx), dtype=torch.int32, device="meta")
    batch = eager_batch(state, seq_lens_sum=n * ctx + 1)
    try:
        eo.call_filling(obj, "common_template", batch, buffer, lambda i, fb: None)
    except AssertionError:
        return "assert"
    except KernelLaunched:
        return "none"
    finally:
        if saved is not None:
            module.generate_draft_decode_kv_indices = saved  # type: ignore[attr-defined]
    raise RuntimeError("common_template neither checked the buffer nor launched the draft kernel")
