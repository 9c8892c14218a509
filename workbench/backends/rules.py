"""Sizing rules: how wide each graph-captured table is made at ``init_cuda_graph_state``.

A rule is a small pure function of the geometry. Legacy and fixed rules sit side by side under the
same three names for both backends, each docstring naming the engine change it stands for. The
NPU backend counts its ``block_tables`` width in pages (blocks); DSA counts ``page_table`` in tokens.
"""

from __future__ import annotations

from collections.abc import Callable

from workbench.model.geometry import ServingGeometry, cdiv

RULE_NAMES = ("context", "context-plus-draft", "req-to-token")
LEGACY_RULES = ("context", "context-plus-draft")  # each one is a rule some engine version shipped


def npu_context(g: ServingGeometry) -> int:
    """Before the first seed's fix: ``cdiv(ctx, ps)`` pages, blind to the draft tokens."""
    return cdiv(g.context_len, g.page_size)


def npu_context_plus_draft(g: ServingGeometry) -> int:
    """The first seed's fix: ``(ctx + ps - 1 + D) // ps`` pages (blind to the table's +4 slack)."""
    return (g.context_len + g.page_size - 1 + g.draft_tokens) // g.page_size


def npu_req_to_token(g: ServingGeometry) -> int:
    """The later tightening: at least ``cdiv(W, ps)`` pages, so every request-table page fits."""
    return max(npu_context_plus_draft(g), cdiv(g.request_table_width, g.page_size))


def dsa_context(g: ServingGeometry) -> int:
    """The original DSA backend: ``ctx`` tokens."""
    return g.context_len


def dsa_context_plus_draft(g: ServingGeometry) -> int:
    """The first DSA fix: ``ctx + D`` tokens (blind to the table's +4 slack and to overshoot)."""
    return g.context_len + g.draft_tokens


def dsa_req_to_token(g: ServingGeometry) -> int:
    """The second seed's fix: ``W = req_to_token.shape[1]`` tokens, as DeepSeek-V4 already did."""
    return g.request_table_width


Rule = Callable[[ServingGeometry], int]

NPU_BLOCK_TABLE_RULES: dict[str, Rule] = {
    "context": npu_context,
    "context-plus-draft": npu_context_plus_draft,
    "req-to-token": npu_req_to_token,
}

DSA_PAGE_TABLE_RULES: dict[str, Rule] = {
    "context": dsa_context,
    "context-plus-draft": dsa_context_plus_draft,
    "req-to-token": dsa_req_to_token,
}


def check_rule(rule: str) -> str:
    if rule not in RULE_NAMES:
        raise ValueError(f"rule: {rule!r} is not one of {', '.join(RULE_NAMES)}")
    return rule
