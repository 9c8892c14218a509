"""SGLang's FlashInfer MLA backend: its flat ``kv_indices`` buffers.

Paths inside the wheel, ``sglang/srt/layers/attention/flashinfer_mla_backend.py`` unless named.

* ``draft-decode`` / ``draft-decode-eager``: the multi-step EAGLE drafter, as FlashInfer's
  (``flashinfer_kv_indices``), but ``topk > 1`` raises at start-up (0.5.23: 1196), so the
  ``topk`` factor 0.5.14 added changes nothing here; 0.5.14 on checks with ``assert_buffer_fits``
  (0.5.23: 1251-1260; graph buffer 1319-1327), 0.5.10-0.5.12 do not.
* ``target-verify``: ``cuda_graph_kv_indices`` of ``max_bs * ctx`` with no room for the drafts
  (0.5.23: 506-510) while a verify writes ``seq_lens + D`` per request
  (``srt/speculative/eagle_info.py:116-120``). From 0.5.18 the verify plan is SGLang's
  ``fast_mla_prefill_plan``, whose ``_kv_indices_buf[: len(kv_indices)].copy_(kv_indices)``
  (0.5.18: 1286; 0.5.23: 1429, installed for every non-DFLASH verify at 406-411) raises torch's
  size error once a full batch needs more than the buffer: a full batch fails from
  ``s = ctx - D + 1``, inside the scheduler's cap. 0.5.10-0.5.16 copy inside flashinfer's own
  ``plan``, not read: those versions name no verify buffer in ``data/engines.json``. A DFLASH
  verify (0.5.20 on) packs straight into the buffer without a copy or a check: not modelled (the
  atlas runs no DFLASH recipe).
"""

from __future__ import annotations

import workbench.backends.pooled as p
from workbench.backends.sglang.flashinfer_kv_indices import DRAFT_RULES, DRAFT_WHAT, EAGER_RULES
from workbench.model.geometry import Mode, ServingGeometry


def _topk_one_draft(g: ServingGeometry) -> str | None:
    if g.spec_topk > 1:
        return "FlashInfer MLA refuses EAGLE topk > 1 at start-up"
    return p.multi_step_draft(g)


BACKEND = p.PooledBackend(
    name="sglang-flashinfer-mla-kv-indices", engine="sglang", device_family="cuda", launch_names=("flashinfer",),
    buffers=(
        *p.draft_buffers(DRAFT_WHAT, DRAFT_RULES, EAGER_RULES, attention="mla", applies=_topk_one_draft,
                         graph_source="flashinfer_mla_backend.py:1251-1260, 1319-1327 (0.5.23); 1009-1013 (0.5.10)",
                         eager_source="flashinfer_mla_backend.py:1298 (0.5.23); 988-995 (0.5.10)"),
        p.PooledBuffer("target-verify", Mode.TARGET_VERIFY, "flashinfer mla verify kv_indices",
                       {"max-bs-ctx": p.CapacityRule("max-bs-ctx", p.max_bs_times(p.context),
                                                     "every version: max_bs * ctx, no room for the drafts")},
                       p.verify_row, p.one_row, p.request_bs, per_call=False, attention="mla", applies=p.speculative,
                       source="flashinfer_mla_backend.py:506-510, 1429 (0.5.23); 1286 (0.5.18)"),
    ),
    note="0.5.10-0.5.16 verify copies inside flashinfer's plan (not read); DFLASH's direct verify write is not modelled",
)
