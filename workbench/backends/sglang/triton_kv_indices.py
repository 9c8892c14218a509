"""SGLang's Triton backend: the multi-step drafter's flat ``kv_indices`` buffers, never checked.

Paths inside the wheel, ``sglang/srt/layers/attention/triton_backend.py``.

* ``draft-decode``: ``(steps, max_bs * topk * ctx)`` in every version (0.5.10: ``max_num_tokens *
  ctx`` with ``max_num_tokens = max_bs * topk``, 1216-1220; 0.5.14 on the shared helper, 0.5.23:
  2762-2769), and unlike FlashInfer's no ``assert_buffer_fits`` in any version read (0.5.23:
  2570-2636): a full batch within ``steps`` tokens of the context end writes past the last row,
  out of the allocation.
* ``draft-decode-eager``: ``(steps, bs * topk * ctx)`` per call (0.5.10: 1195-1202; 0.5.23: 2717):
  one request within ``steps`` tokens of the end is enough.

The target verify writes ``seq_lens`` only (the drafts go in as extend k/v; 0.5.23: 515-526)
into ``max_bs * D * ctx``: it cannot overflow, so it is not here.
"""

from __future__ import annotations

import workbench.backends.pooled as p

RULES = {"max-bs-topk-ctx": p.CapacityRule("max-bs-topk-ctx", p.max_bs_times(p.topk_context),
                                           "every version: max_num_tokens * ctx, max_num_tokens = max_bs * topk")}
EAGER_RULES = {"batch-topk-ctx": p.CapacityRule("batch-topk-ctx", p.max_bs_times(p.topk_context),
                                                "every version: (steps, bs * topk * ctx) per call")}
WHAT = "triton draft kv_indices row (unchecked)"

BACKEND = p.PooledBackend(
    name="sglang-triton-kv-indices", engine="sglang", device_family="cuda", launch_names=("triton",),
    buffers=(
        *p.draft_buffers(WHAT, RULES, EAGER_RULES, attention="any",
                         graph_source="triton_backend.py:2570-2636, 2762-2769 (0.5.23); 1216-1220 (0.5.10)",
                         eager_source="triton_backend.py:2717 (0.5.23); 1195-1202 (0.5.10)"),
    ),
    note="the verify buffer holds seq_lens only (drafts as extend k/v) in max_bs * D * ctx: cannot overflow",
)
