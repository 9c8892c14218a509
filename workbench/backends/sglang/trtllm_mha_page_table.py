"""SGLang's TRT-LLM MHA backend: ``page_table`` on three paths.

The width is ``max_num_pages = cdiv(ctx, ps)`` pages (``trtllm_mha_backend.py:351``), blind to
the draft tokens, for every table the backend keeps. Which kernel fills it depends on the path,
a case field ``path``:

* ``graph`` (default): the CUDA-graph buffers of ``init_cuda_graph_state`` (713-777), filled by
  ``update_trtllm_mha_graph_metadata`` (1013-1030) with ``max_seq_pages = max_num_pages``: a row's
  stores are ``min(cdiv(s + delta, ps), B)`` pages, so a step that needs more stops at the row's
  end while ``cache_seqlens = s + delta``: a **silent over-read**.
* ``eager``: ``init_forward_metadata`` (1238-1385) makes a fresh ``torch.empty((bs, B))`` and fills
  it with ``build_trtllm_mha_page_table`` (``kernels/ops/attention/trtllm_mha_page_table.py``),
  whose store mask is ``page < cdiv(cache_seqlens, ps)`` only, over a grid of
  ``cdiv(B, 4096 // ps)`` programs of ``4096 // ps`` pages: pages past ``B`` are stored into the
  next row (the last request's past the buffer, which has only ``bs`` rows) up to the grid's
  end, a **silent overwrite**. Where ``B`` is a multiple of ``4096 // ps`` the grid ends at the
  row's end and the same step is a silent over-read instead.
* ``ragged-verify``: a target verify with a ragged layout (1185-1215) fills the graph's verify
  buffer (``max_bs`` rows) out of graph with the same builder as ``eager``: an overwrite into
  the next row. Modelled with every request verifying all D drafts (the layout's widest row).

The graph kernel's fill is a second case field, ``graph_fill``, learned per release: ``live-pages``
(default) stores each row's ``min(cdiv(s + delta, ps), B)`` pages; ``row-width`` stores all ``B``
columns of every row, the pages past the request's end read from stale ``req_to_token`` slots (the
fused kernel of 0.5.15 and 0.5.16 masks by ``max_seq_pages`` only). Both stop at the row's end, so
the outcome of a step is the same; only the entries past a request's live pages differ.

Probes and boundaries take ``path`` from the case; sweeps and serving runs replay the graph
path (the default), as a graph-captured server does. ``delta`` is D in a verify, ``step_id + 1``
in a draft step, 0 otherwise. On every path the step fails first at ``s = B * ps - delta + 1``,
the generic closed form; only the outcome differs.

Worked example: ps 16, ctx 64 (B 4 pages), D 4: a verify at s = 62 needs cdiv(66, 16) = 5 pages.
Graph: 4 stored, cache_seqlens 66 > 64: over-read. Eager: the grid covers 256 pages, page 4 is
stored at row 1, column 0 (past the buffer for a batch of one).

Checked against: the two kernels' code, read and restated in plain Python in
``tests/test_sglang_page_builders.py``; the engine's Triton kernels themselves under the
interpreter by ``workbench conformance`` (rows
``trtllm_mha_graph_metadata.update_trtllm_mha_graph_metadata``, the graph path, and
``trtllm_mha_page_table.build_trtllm_mha_page_table``, eager) where triton is cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

import torch

from workbench.backends.base import Buffers, Seed, SizingRule, cdiv_grid
from workbench.backends.page_writes import KERNEL_BLOCK_TOKENS, LivePageBackend, PagedTable, grid_pages
from workbench.model.cases import TableCase
from workbench.model.geometry import Mode, ServingGeometry, cdiv
from workbench.model.outcome import Overwrite

GRAPH, EAGER, RAGGED = "graph", "eager", "ragged-verify"
LIVE_PAGES, ROW_WIDTH = "live-pages", "row-width"  # what the graph kernel stores in a row


def trtllm_mha_context(g: ServingGeometry) -> int:
    """The engine's width: ``max_num_pages = cdiv(ctx, ps)``, blind to the draft tokens."""
    return cdiv(g.context_len, g.page_size)


def trtllm_mha_req_to_token(g: ServingGeometry) -> int:
    """Proposed, in no release: ``cdiv(W, ps)`` pages, as DeepSeek-V4 sizes by ``req_to_token.shape[1]``."""
    return cdiv(g.request_table_width, g.page_size)


RULES = {
    "context": SizingRule(
        "context", trtllm_mha_context, lambda x: cdiv_grid(x.ctx, x.ps),
        change="TRT-LLM MHA's max_num_pages in 0.5.23 (trtllm_mha_backend.py:351)",
        quirk="blind to the draft tokens a verify or a draft step reads past the context"),
    "req-to-token": SizingRule(
        "req-to-token", trtllm_mha_req_to_token, lambda x: cdiv_grid(x.w, x.ps),
        change="a proposed fix (not in any release), as the DeepSeek-V4 backend sizes its table",
        quirk="every page of req_to_token fits: no committed length the table holds can overflow it"),
}

_CASE = {"component": "sglang-trtllm-mha-page-table", "context_len": 8192, "page_size": 64, "draft_tokens": 4,
         "spec_steps": 3, "spec_topk": 1, "seq_lens": [8190], "mode": "target-verify"}

TRTLLM_MHA_SEED = Seed(
    name="trtllm-mha-page-table",
    story="TRT-LLM MHA with EAGLE (3, 1, 4), ctx 8192, ps 64: a verify near the cap reads past the graph's row",
    before={**_CASE, "rule": "context"},
    after={**_CASE, "rule": "req-to-token"},
    expected_error="silent over-read: request 0 reads 8194 tokens but its page_table row covers 8192",
)
TRTLLM_MHA_EAGER_SEED = Seed(
    name="trtllm-mha-page-table-eager",
    story="the same step on the eager path: ctx 8000 (B 125 pages, not a multiple of 64) lets page 125 spill",
    before={**_CASE, "context_len": 8000, "seq_lens": [7998], "path": EAGER, "rule": "context"},
    after={**_CASE, "context_len": 8000, "seq_lens": [7998], "path": EAGER, "rule": "req-to-token"},
    expected_error="silent overwrite: request 0 wrote 1 entries past its page_table row and past the end of the buffer",
)


class TrtllmMhaPageTableBackend(LivePageBackend):
    name = "sglang-trtllm-mha-page-table"
    engine = "sglang"
    device_family = "cuda"
    buffer_name = "page_table"
    launch_names = ("trtllm_mha",)  # --attention-backend trtllm_mha
    unit = "pages"
    short = "trtmha"
    # 0.5.23 runs trtllm_mha at 16, 32, 64 or 128 and moves any other to 64
    # (srt/arg_groups/overrides.py:1174-1187, _mla_backend_page_constraints)
    page_sizes = (16, 32, 64, 128)
    pad_seq_len = 1  # get_cuda_graph_seq_len_fill_value (trtllm_mha_backend.py:1054)
    rules = RULES
    case_fields = frozenset({"path", "graph_fill"})
    case_options = MappingProxyType({"path": (GRAPH, EAGER, RAGGED), "graph_fill": (LIVE_PAGES, ROW_WIDTH)})
    on_overflow = ("graph: silent-overread (stores stop at max_num_pages); eager and ragged verify: silent-overwrite "
                   "(stores bounded by cache_seqlens and the grid, not the width)")
    seeds = (TRTLLM_MHA_SEED, TRTLLM_MHA_EAGER_SEED)

    def case_problem(self, case: TableCase) -> str | None:
        ps = case.geometry.page_size
        if KERNEL_BLOCK_TOKENS % ps:
            return f"page_size: {ps} does not divide {KERNEL_BLOCK_TOKENS} (the page-table builder asserts it)"
        if self.option(case, "path") == RAGGED and case.mode is not Mode.TARGET_VERIFY:
            return f"path: ragged-verify is a target-verify path (mode is {case.mode.value})"
        return None

    def probe_rows(self, case: TableCase, width: int) -> int:
        """Eager: the fresh table has the batch's rows only. Graph paths: see ``LivePageBackend``."""
        if self.option(case, "path") == EAGER:
            return len(case.seq_lens)
        return super().probe_rows(case, width)

    def buffer_key(self, case: TableCase) -> tuple[object, ...]:
        return (self.option(case, "path"),)

    def replay(self, buffers: Buffers, req_to_token: torch.Tensor, rows: Sequence[int], seq_lens: Sequence[int],
               case: TableCase, *, num_slots: int, query_rows: int | None = None) -> Overwrite | None:
        if self.option(case, "path") != GRAPH or self.option(case, "graph_fill") == LIVE_PAGES:
            return super().replay(buffers, req_to_token, rows, seq_lens, case, num_slots=num_slots,
                                  query_rows=query_rows)
        assert isinstance(buffers, PagedTable)
        look = self.lookahead(case.geometry, case.mode, case.step_id)
        width = buffers.page_table.shape[1]
        return buffers.write(req_to_token, rows, [s + look for s in seq_lens], width, pages=width)

    def write_limit(self, case: TableCase, width: int) -> int | None:
        if self.option(case, "path") == GRAPH:
            return width  # max_seq_pages = max_num_pages
        return grid_pages(width, case.geometry.page_size)


BACKEND = TrtllmMhaPageTableBackend()
