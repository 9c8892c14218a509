"""SGLang's XPU attention backend: the graph-captured ``page_table``.

``init_cuda_graph_state`` makes ``page_table`` ``(max_bs, cdiv(ctx, ps))`` int32, blind to the
draft tokens, as FA3 does. Replay runs the same fused Triton kernel as FA3
(``normal_decode_set_metadata``), but XPU passes ``max_seq_pages = cdiv(max(s) + delta, ps)``, the
batch's own need, not the buffer's width: the kernel's store mask is ``col < min(cdiv(s + delta,
ps), max_seq_pages)``, so every live page is stored, and a page past the row's end lands in the
next request's row (the last row of the buffer stores past its end). ``delta`` is D in a verify,
``step_id + 1`` in a draft step, 0 in decode and draft-extend (whose ``seq_lens`` already count
the extend tokens). The outcome is a silent overwrite.

Worked example: ctx 8192, ps 64, NGRAM D 16: B = 128 pages. A verify at s = 8177 reads 8193
tokens, cdiv(8193, 64) = 129 pages: page 128 of request 0 is stored at row 1, column 0.
First failing committed length: ``B * ps - delta + 1`` (8177 here), the generic closed form.

Engine (0.5.23): ``srt/layers/attention/xpu_backend.py`` 1631-1650 (the buffer), 1671-1693 (the
offsets per mode), 1760-1770 (``max_seq_len_k = max(s) + offset``), 1845-1883 (the kernel call
with ``max_seq_pages`` from it); the kernel in ``kernels/ops/attention/metadata.py`` 195-290,
which asserts a power-of-two page size (536). Checked against: the kernel's code read line by line
and restated in plain Python in ``tests/test_sglang_page_builders.py``, and the kernel itself
under ``TRITON_INTERPRET=1`` by ``workbench conformance`` (row
``metadata.normal_decode_set_metadata[xpu]``) where triton is cached.
"""

from __future__ import annotations

from workbench.backends.base import Seed, SizingRule, cdiv_grid
from workbench.backends.page_writes import LivePageBackend
from workbench.model.cases import TableCase
from workbench.model.geometry import ServingGeometry, cdiv


def xpu_context(g: ServingGeometry) -> int:
    """The engine's width: ``cdiv(ctx, ps)`` pages, blind to the draft tokens."""
    return cdiv(g.context_len, g.page_size)


def xpu_req_to_token(g: ServingGeometry) -> int:
    """Proposed, in no release: ``cdiv(W, ps)`` pages, as DeepSeek-V4 sizes by ``req_to_token.shape[1]``."""
    return cdiv(g.request_table_width, g.page_size)


RULES = {
    "context": SizingRule(
        "context", xpu_context, lambda x: cdiv_grid(x.ctx, x.ps),
        change="XPU's page_table in 0.5.23 (xpu_backend.py:1633)",
        quirk="blind to the draft tokens; the kernel's writes are bounded by the batch, not the width"),
    "req-to-token": SizingRule(
        "req-to-token", xpu_req_to_token, lambda x: cdiv_grid(x.w, x.ps),
        change="a proposed fix (not in any release), as the DeepSeek-V4 backend sizes its table",
        quirk="every page of req_to_token fits: no committed length the table holds can overflow it"),
}

_CASE = {"component": "sglang-xpu-page-table", "context_len": 8192, "page_size": 64, "draft_tokens": 16,
         "spec_topk": 10, "draft_has_kv": False, "seq_lens": [8177], "mode": "target-verify", "max_bs": 2}

XPU_SEED = Seed(
    name="xpu-page-table",
    story="XPU with NGRAM (D 16), ctx 8192, ps 64: a verify 16 tokens from the context writes page 128 into row 1",
    before={**_CASE, "rule": "context"},
    after={**_CASE, "rule": "req-to-token"},
    expected_error="silent overwrite: request 0 wrote 1 entries past its page_table row into row 1",
)


class XpuPageTableBackend(LivePageBackend):
    name = "sglang-xpu-page-table"
    engine = "sglang"
    device_family = "xpu"
    buffer_name = "page_table"
    launch_names = ("intel_xpu",)  # --attention-backend intel_xpu (--device xpu)
    unit = "pages"
    short = "xpu"
    # 0.5.23 runs intel_xpu at 64 or 128 (MLA also 16, 32) and moves any other to 128
    # (srt/arg_groups/overrides.py:1324-1337, _intel_xpu_page_constraint)
    page_sizes = (64, 128)
    pad_seq_len = 1  # get_cuda_graph_seq_len_fill_value (xpu_backend.py:1627)
    rules = RULES
    on_overflow = "silent-overwrite: max_seq_pages comes from max(s) + delta, so pages past the width go into the next row"
    seeds = (XPU_SEED,)

    def case_problem(self, case: TableCase) -> str | None:
        ps = case.geometry.page_size
        if ps & (ps - 1):
            return f"page_size: {ps} is not a power of two (the fused page-table kernel asserts one)"
        return None

    def write_limit(self, case: TableCase, width: int) -> int | None:
        return None  # max_seq_pages = cdiv(max(s) + delta, ps) >= every row's live pages


BACKEND = XpuPageTableBackend()
