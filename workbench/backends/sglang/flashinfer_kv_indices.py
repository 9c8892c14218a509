"""SGLang's FlashInfer backend (MHA models): its flat ``kv_indices`` buffers.

Paths inside the wheel, ``sglang/srt/layers/attention/flashinfer_backend.py`` unless named.

* ``draft-decode``: the multi-step EAGLE drafter's ``cuda_graph_kv_indices``, ``(steps, width)``,
  one row per draft step. 0.5.10-0.5.12: ``width = max_bs * max_context_len`` (1627-1631 in 0.5.10),
  no ``topk`` factor, though ``generate_draft_decode_kv_indices`` packs ``topk`` branches per
  request, and no check: with ``topk > 1`` a full batch writes past the last row long before the
  context end. 0.5.14 on: ``draft_kv_indices_buffer_width = max_bs * topk * ctx`` and
  ``assert_buffer_fits`` in ``common_template`` (0.5.23: 2504-2513, 2630-2640).
* ``draft-decode-eager``: the same drafter without a graph allocates ``(steps, bs * topk * ctx)``
  per call (0.5.10: 1606-1613; 0.5.23: 2609): no slack, so one request within ``steps`` tokens of
  the context end overflows it (0.5.14 on: the same assert).
* ``target-verify``: ``max_num_tokens * ctx`` with ``max_num_tokens = max_bs * D`` at capture
  (1106-1111; ``model_executor/runner/decode_cuda_graph_runner.py:359-361``), written with
  ``seq_lens + D`` per request (``generate_attn_arg_prefill``, 2273-2285): ``D * ctx`` of room per
  request, so only ``D = 1`` can fail. The copy into it happens in flashinfer's ``plan`` or
  SGLang's ``fast_prefill_plan``, neither modelled: an overflow is shown as an unchecked write.
"""

from __future__ import annotations

import workbench.backends.pooled as p
from workbench.model.geometry import Mode

DRAFT_WHAT = "EAGLE draft kv_indices row (size max_bs * topk * max_context_len)"
DRAFT_RULES = {
    "max-bs-topk-ctx": p.CapacityRule("max-bs-topk-ctx", p.max_bs_times(p.topk_context),
                                      "0.5.14: draft_kv_indices_buffer_width = max_bs * topk * ctx"),
    "max-bs-ctx": p.CapacityRule("max-bs-ctx", p.max_bs_times(p.context),
                                 "0.5.10-0.5.12: max_bs * ctx, no topk factor"),
}
EAGER_RULES = {"batch-topk-ctx": p.CapacityRule("batch-topk-ctx", p.max_bs_times(p.topk_context),
                                                "every version: (steps, bs * topk * ctx) per call")}

BACKEND = p.PooledBackend(
    name="sglang-flashinfer-kv-indices", engine="sglang", device_family="cuda", launch_names=("flashinfer",),
    buffers=(
        *p.draft_buffers(DRAFT_WHAT, DRAFT_RULES, EAGER_RULES, attention="mha",
                         graph_source="flashinfer_backend.py:2504-2513, 2630-2640 (0.5.23); 1627-1631 (0.5.10)",
                         eager_source="flashinfer_backend.py:2609 (0.5.23); 1606-1613 (0.5.10)"),
        p.PooledBuffer("target-verify", Mode.TARGET_VERIFY, "flashinfer verify kv_indices",
                       {"max-tokens-ctx": p.CapacityRule("max-tokens-ctx", p.max_bs_times(lambda g: g.draft_tokens * g.context_len),
                                                         "every version: max_num_tokens * ctx, max_num_tokens = max_bs * D")},
                       p.verify_row, p.one_row, p.request_bs, per_call=False, attention="mha", applies=p.speculative,
                       source="flashinfer_backend.py:1106-1111, 1964, 2273-2285 (0.5.23)"),
    ),
    note="the decode buffer (max_num_tokens * ctx for one token per request) cannot overflow: not modelled",
)
