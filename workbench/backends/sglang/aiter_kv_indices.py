"""SGLang's AITER backend (ROCm): its flat ``kv_indices`` buffers.

Paths inside the wheel, ``sglang/srt/layers/attention/aiter_backend.py``. The 2-D
``cuda_graph_page_table`` is ``aiter_page_table``.

* ``target-verify`` (MLA models, which write ``seq_lens + D`` per request; MHA writes
  ``seq_lens``): 0.5.10-0.5.12 size ``cuda_graph_kv_indices`` ``max_bs * cdiv(ctx, ps)`` (0.5.10:
  1157-1165) with no check: at page size 1 a full batch from ``s = ctx - D + 1`` writes past the
  buffer's end. 0.5.14 on: ``max_bs * (cdiv(ctx, ps) * ps + D)`` and ``assert_buffer_fits``
  (0.5.23: 2806-2831, 3152-3163): only an overshoot past the context reaches it.
* ``draft-decode`` / ``draft-decode-eager``: as Triton's (``triton_kv_indices``), never
  checked (0.5.23: 5128-5176, 5199-5206, 5178).

Page size 1 only: 0.5.10's buffer counts pages while its verify writes tokens, which at larger
pages would fail at any length, and whether 0.5.10 ran AITER MLA with pages was not read.
"""

from __future__ import annotations

import workbench.backends.pooled as p
from workbench.backends.sglang.triton_kv_indices import EAGER_RULES, RULES
from workbench.model.geometry import Mode

WHAT = "aiter draft kv_indices row (unchecked)"
VERIFY_RULES = {
    "paged-ctx-plus-draft": p.CapacityRule("paged-ctx-plus-draft", p.max_bs_times(p.paged_context_plus_draft),
                                           "0.5.14: max_bs * (cdiv(ctx, ps) * ps + D), the draft slack"),
    "paged-ctx": p.CapacityRule("paged-ctx", p.max_bs_times(p.paged_context),
                                "0.5.10-0.5.12: max_bs * cdiv(ctx, ps), no room for the drafts"),
}

BACKEND = p.PooledBackend(
    name="sglang-aiter-kv-indices", engine="sglang", device_family="rocm", launch_names=("aiter",),
    buffers=(
        p.PooledBuffer("target-verify", Mode.TARGET_VERIFY, "aiter target_verify kv_indices", VERIFY_RULES,
                       p.verify_row, p.one_row, p.request_bs, per_call=False, attention="mla",
                       applies=p.speculative, source="aiter_backend.py:2806-2831, 3138-3163 (0.5.23); 1157-1165, 1747-1760 (0.5.10)"),
        *p.draft_buffers(WHAT, RULES, EAGER_RULES, attention="any",
                         graph_source="aiter_backend.py:5128-5176, 5199-5206 (0.5.23); 2843-2848 (0.5.10)",
                         eager_source="aiter_backend.py:5178 (0.5.23); 2822-2829 (0.5.10)"),
    ),
    note="page size 1 only (0.5.10 sizes pages, writes tokens); the 2-D page table is sglang_aiter_page_table",
)
