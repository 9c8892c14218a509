"""The engine's side for releases whose entry points differ from 0.5.23's (worker process only).

Chosen by what the engine's object has, never by a version: ``calls`` hands a call here
when the method it makes is missing and the older one is present.

* The NPU allocator was ``AscendPagedTokenToKVPoolAllocator`` before it was
  ``NPUPagedTokenToKVPoolAllocator``, and the allocators' ``alloc_decode(seq_lens, last_loc)`` /
  ``alloc_extend(prefix_lens, seq_lens, last_loc, n)`` took no CPU copies of the lengths before
  they took them: ``adapt`` gives a release's module the name conformance calls and calls its
  methods with the arguments they take (``adapt_signatures``).
* The DSA backend up to 0.5.12 (``NativeSparseAttnBackend``) captures and replays through the
  public pair ``init_forward_metadata_capture_cuda_graph`` / ``init_forward_metadata_replay_cuda_graph``
  (0.5.10: ``nsa_backend.py:780, 935``), where later releases split them into
  ``_build_forward_metadata_cuda_graph`` / ``_apply_cuda_graph_metadata``. The arithmetic and the
  copies run are the engine's own either way.
"""

from __future__ import annotations

from typing import Any

import torch

from workbench.engines.checking.states import State


def has_public_graph_pair(backend: Any) -> bool:
    return hasattr(backend, "init_forward_metadata_capture_cuda_graph") and \
        hasattr(backend, "init_forward_metadata_replay_cuda_graph")


def dsa_capture_and_replay(backend: Any, state: State, forward_mode: Any, spec: Any, spec_replay: Any,
                           rows_per_request: int) -> None:
    """Capture for ``bs`` requests of length 1, then one replay at the state's lengths, through
    the public pair (the replay reads ``seq_lens_cpu``: the same lengths on the host)."""
    bs = len(state["seq_lens"])
    rows = torch.arange(1, bs + 1)
    backend.init_forward_metadata_capture_cuda_graph(bs, bs * rows_per_request, rows, torch.ones(bs, dtype=torch.int64),
                                                     None, forward_mode, spec)
    seq_lens = torch.tensor(state["seq_lens"], dtype=torch.int64)
    backend.init_forward_metadata_replay_cuda_graph(bs, rows, seq_lens, int(seq_lens.sum()), None, forward_mode,
                                                    spec_replay, seq_lens)


CONFORMANCE_NAMES = {"npu_alloc": "NPUPagedTokenToKVPoolAllocator", "paged": "PagedTokenToKVPoolAllocator"}


def adapt(modules: dict[str, Any], found_names: dict[str, str]) -> None:
    """Alias each allocator class under the name conformance calls (``found_names``: module key ->
    the class name the learner found) and adapt its methods' arguments."""
    import inspect

    for key, wanted in CONFORMANCE_NAMES.items():
        module, present = modules.get(key), found_names.get(key, wanted)
        if module is None or not hasattr(module, present):
            continue
        cls = getattr(module, present)
        setattr(module, wanted, cls)
        decode, extend = cls.__dict__.get("alloc_decode"), cls.__dict__.get("alloc_extend")
        if decode is not None and len(inspect.signature(decode).parameters) == 3:  # (self, seq_lens, last_loc)
            cls.alloc_decode = lambda self, seq, _cpu, last, _f=decode: _f(self, seq, last)
        if extend is not None and len(inspect.signature(extend).parameters) == 5:  # (self, prefix, seq, last, n)
            cls.alloc_extend = lambda self, p, _pc, s, _sc, last, n, _f=extend: _f(self, p, s, last, n)
