"""The three seed cases of ``shared/spec.md``, as probe cases (JSON-shaped dicts).

Each entry holds the case before and after its engine fix and the outcome the spec gives for
both, so the main job, the notebooks and the tests reproduce the same three stories.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Seed:
    name: str
    story: str
    before: dict[str, object]  # the case under the legacy rule or gather
    after: dict[str, object]  # the same step after the fix
    expected_error: str  # torch's message before the fix (spec sections 2-4)
    boundary_case: dict[str, object] | None = None  # without seq_lens, for the boundary search


QWQ_NPU = Seed(
    name="npu-block-table",
    story="QwQ-32B on Ascend, ctx 32768, NGRAM D=16, ps=128: block_tables sized without the drafts",
    before={
        "component": "npu-block-table", "rule": "context", "context_len": 32768, "page_size": 128,
        "draft_tokens": 16, "spec_topk": 10, "draft_has_kv": False, "seq_lens": [32753],
        "mode": "target-verify",
    },
    after={
        "component": "npu-block-table", "rule": "context-plus-draft", "context_len": 32768,
        "page_size": 128, "draft_tokens": 16, "spec_topk": 10, "draft_has_kv": False,
        "seq_lens": [32753], "mode": "target-verify",
    },
    expected_error="The size of tensor a (256) must match the size of tensor b (257) at non-singleton dimension 1",
)

GLM_DSA = Seed(
    name="dsa-page-table",
    story="GLM-5.2 EAGLE (5, 1, 6) on DSA, ctx 90000, ps=64: page_table narrower than req_to_token",
    before={
        "component": "dsa-page-table", "rule": "context-plus-draft", "context_len": 90000,
        "page_size": 64, "draft_tokens": 6, "spec_steps": 5, "spec_topk": 1, "seq_lens": [90001],
        "mode": "target-verify",
    },
    after={
        "component": "dsa-page-table", "rule": "req-to-token", "context_len": 90000, "page_size": 64,
        "draft_tokens": 6, "spec_steps": 5, "spec_topk": 1, "seq_lens": [90001],
        "mode": "target-verify",
    },
    expected_error="The size of tensor a (90006) must match the size of tensor b (90007) at non-singleton dimension 1",
)

EXACT_FIT = Seed(
    name="allocator",
    story="NPU alloc_decode on an exactly full free pool: ps=4, seq_lens [5, 10, 7], one free page",
    before={
        "component": "allocator", "gather": "npu-legacy", "page_size": 4, "seq_lens": [5, 10, 7],
        "last_loc": [11, 20, 29], "free_pages": [11],
    },
    after={
        "component": "allocator", "gather": "npu-clamped", "page_size": 4, "seq_lens": [5, 10, 7],
        "last_loc": [11, 20, 29], "free_pages": [11],
    },
    expected_error="index 1 is out of bounds for dimension 0 with size 1",
)

SEEDS = (QWQ_NPU, GLM_DSA, EXACT_FIT)


def boundary_case(case: dict[str, object]) -> dict[str, object]:
    """The same configuration without its batch, for ``workbench boundary``."""
    return {k: v for k, v in case.items() if k != "seq_lens"}
