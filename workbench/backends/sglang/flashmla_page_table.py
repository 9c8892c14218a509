"""SGLang's FlashMLA backend: the graph-captured block table ``cuda_graph_kv_indices``.

``init_cuda_graph_state`` (``flashmla_backend.py:274-286``) makes it ``(max_bs, (ctx + 64) // 64)``
int32 (FlashMLA's page size is the constant 64): one page more than ``ctx`` needs when 64 divides
``ctx``, the page holding token ``ctx`` otherwise — slack for an overshoot of at most
``64 - ctx % 64`` tokens, not for the draft tokens in general. Replay
(``_apply_decode_target_verify_metadata``, 328-380) adds D to ``seq_lens`` in a verify and runs
``create_flashmla_kv_indices_triton`` (``kernels/ops/attention/kv_indices.py:194-250``) over a grid
of ``cdiv(B, 64)`` programs of 64 pages each (``get_num_kv_index_blocks_flashmla`` of the row
stride): a row's stores are masked by its own page count ``cdiv(s + delta, 64)`` only, so pages
past ``B`` go into the next row, up to the grid's end (``page_writes.grid_pages``). A silent
overwrite; where ``B`` is a multiple of 64 the grid ends at the row's end, and the same step is
a silent over-read (the kernel's ``seq_lens_k`` bound is ``s + delta``).

Modes: decode, target verify (``delta = D``) and draft extend (whose ``seq_lens`` already hold
the window: ``delta = 0``); the drafter's multi-step decode is not modelled.

Worked examples (EAGLE (3, 1, 4)): ctx 8190 gives B = (8190 + 64) // 64 = 128 pages = 8192 tokens;
a verify at s = 8189 reads 8193 tokens, 129 pages, but 128 is a multiple of 64, so the grid stops
at the row's end: over-read. ctx 8200 gives B = 129 pages (8256 tokens) and a grid of 192 pages;
under G3 (W = 8271, verify s <= 8267) a verify at s = 8253 reads 8257 tokens, 130 pages, and
page 129 is stored at row 1, column 0: overwrite. Under G1 (W = 8208) no verify gets there.
First failing committed length: ``B * 64 - delta + 1``, the generic closed form.

Checked against: the kernel's code, read and restated in plain Python in
``tests/test_sglang_page_builders.py``; the engine's Triton kernel itself under the interpreter
by ``workbench conformance`` (row ``kv_indices.create_flashmla_kv_indices_triton[flashmla]``)
where triton is cached.
"""

from __future__ import annotations

from types import MappingProxyType

from workbench.backends.base import Seed, SizingRule, cdiv_grid
from workbench.backends.page_writes import GRID_OPTIONS, PER_REQUEST, LivePageBackend, grid_pages
from workbench.model.cases import TableCase
from workbench.model.geometry import Mode, ServingGeometry, cdiv

FLASHMLA_PAGE_SIZE = 64  # flashmla_backend.py:39, a constant of the backend


def flashmla_context(g: ServingGeometry) -> int:
    """The engine's width: ``(ctx + 64) // 64`` pages, one page of slack past the context."""
    return (g.context_len + FLASHMLA_PAGE_SIZE) // FLASHMLA_PAGE_SIZE


def flashmla_req_to_token(g: ServingGeometry) -> int:
    """Proposed, in no release: ``cdiv(W, 64)`` pages, as DeepSeek-V4 sizes by ``req_to_token.shape[1]``."""
    return cdiv(g.request_table_width, FLASHMLA_PAGE_SIZE)


RULES = {
    "context": SizingRule(
        "context", flashmla_context, lambda x: (x.ctx + FLASHMLA_PAGE_SIZE) // FLASHMLA_PAGE_SIZE,
        change="FlashMLA's cuda_graph_kv_indices in 0.5.23 (flashmla_backend.py:282)",
        quirk="one page of slack past the context: a verify near the cap needs up to cdiv(D, 64) more"),
    "req-to-token": SizingRule(
        "req-to-token", flashmla_req_to_token, lambda x: cdiv_grid(x.w, x.ps),
        change="a proposed fix (not in any release), as the DeepSeek-V4 backend sizes its table",
        quirk="every page of req_to_token fits: no committed length the table holds can overflow it"),
}

_CASE = {"component": "sglang-flashmla-page-table", "context_len": 8190, "page_size": 64, "draft_tokens": 4,
         "spec_steps": 3, "spec_topk": 1, "seq_lens": [8189], "mode": "target-verify", "max_bs": 2}
_G3 = {**_CASE, "context_len": 8200, "seq_lens": [8253], "width_gen": "g3"}

FLASHMLA_SEED = Seed(
    name="flashmla-page-table",
    story="FlashMLA with EAGLE (3, 1, 4), ctx 8190: the page of slack does not hold a verify at the cap",
    before={**_CASE, "rule": "context"},
    after={**_CASE, "rule": "req-to-token"},
    expected_error="silent over-read: request 0 reads 8193 tokens but its cuda_graph_kv_indices row covers 8192",
)
FLASHMLA_OVERWRITE_SEED = Seed(
    name="flashmla-page-table-overwrite",
    story="ctx 8200 under G3: B = 129 pages is not a multiple of 64, and the verify's page 129 lands in row 1",
    before={**_G3, "rule": "context"},
    after={**_G3, "rule": "req-to-token"},
    expected_error="silent overwrite: request 0 wrote 1 entries past its cuda_graph_kv_indices row into row 1",
)


class FlashMlaPageTableBackend(LivePageBackend):
    name = "sglang-flashmla-page-table"
    engine = "sglang"
    device_family = "cuda"
    buffer_name = "cuda_graph_kv_indices"
    unit = "pages"
    page_sizes = (FLASHMLA_PAGE_SIZE,)  # a constant of the backend: the atlas runs it at 64
    short = "flashmla"
    pad_seq_len = 1  # get_cuda_graph_seq_len_fill_value (flashmla_backend.py:431)
    rules = RULES
    modes = (Mode.DECODE, Mode.TARGET_VERIFY, Mode.DRAFT_EXTEND)
    case_fields = frozenset({"grid"})
    case_options = MappingProxyType({"grid": GRID_OPTIONS})
    on_overflow = ("silent-overwrite where B is not a multiple of 64 pages (the builder's grid reaches past the row), "
                   "else silent-overread")
    seeds = (FLASHMLA_SEED, FLASHMLA_OVERWRITE_SEED)

    def case_problem(self, case: TableCase) -> str | None:
        ps = case.geometry.page_size
        if ps != FLASHMLA_PAGE_SIZE:
            return f"page_size: {ps} is not {FLASHMLA_PAGE_SIZE} (FlashMLA's page size is a constant)"
        return None

    def write_limit(self, case: TableCase, width: int) -> int | None:
        if self.option(case, "grid") == PER_REQUEST:  # to 0.5.12.post1: every live page is stored
            return None
        return grid_pages(width, FLASHMLA_PAGE_SIZE)


BACKEND = FlashMlaPageTableBackend()
