"""The serving geometry: every size a graph-captured decode step is built from.

One frozen dataclass holds what the engine is launched with (context length, page size, the
speculative-decoding shape, the graph batch size and which generation of the request-table width
formula is in force). Everything derived from it is a property, so a sweep makes variants with
``dataclasses.replace`` and can never leave a stale derived value behind.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from workbench.model.choice import Choice

# Ranges accepted for each field. They are wide enough for every real deployment the project models
# (docs/engine-facts.md#realistic-settings: context lengths up to 1M tokens, page sizes up to 256, NGRAM
# drafts of 16 tokens) with room to explore, and narrow enough that the int32 tensors the engine uses cannot overflow.
MAX_CONTEXT_LEN = 1 << 24
MAX_PAGE_SIZE = 4096
MAX_DRAFT_TOKENS = 1024
MAX_SPEC_STEPS = 64
MAX_SPEC_TOPK = 64
MAX_GRAPH_BATCH = 4096

# The order is history's: g0 (0.5.0rc2) to g3; g2n is 0.5.13's g2, whose per-decode allocation
# counts the tree's page-aligned branches for drafters without KV (NGRAM) too (docs/semantics.md#width-generations).
WIDTH_GENERATIONS = ("g0", "g1", "g2n", "g2", "g3")

# Slack the request table has beyond the context length in every generation (docs/semantics.md#width-generations).
REQ_TO_TOKEN_SLACK = 4


def cdiv(a: int, b: int) -> int:
    """Ceiling division, as the engine writes it: ``(a + b - 1) // b``."""
    return (a + b - 1) // b


class Mode(Choice):
    """The forward mode a graph is captured and replayed in."""

    DECODE = "decode"
    TARGET_VERIFY = "target-verify"
    DRAFT_DECODE = "draft-decode"  # one step of the EAGLE multi-step drafter
    DRAFT_EXTEND = "draft-extend"



def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: {value!r} is not an integer (allowed: {low} to {high})")
    if not low <= value <= high:
        raise ValueError(f"{name}: {value} is out of range (allowed: {low} to {high})")


@dataclass(frozen=True, kw_only=True)
class ServingGeometry:
    """What the engine was launched with.

    ``draft_tokens`` is ``D``, the tokens verified per request per step; 0 means speculative
    decoding is off. ``spec_steps`` and ``spec_topk`` are the EAGLE drafter's shape;
    ``draft_has_kv`` is False for drafters that keep no KV cache of their own (NGRAM).
    """

    context_len: int
    page_size: int = 1
    draft_tokens: int = 0
    spec_steps: int = 1
    spec_topk: int = 1
    draft_has_kv: bool = True
    max_bs: int = 1
    width_gen: str = "g1"

    def __post_init__(self) -> None:
        _check_int("context_len", self.context_len, 1, MAX_CONTEXT_LEN)
        _check_int("page_size", self.page_size, 1, MAX_PAGE_SIZE)
        _check_int("draft_tokens", self.draft_tokens, 0, MAX_DRAFT_TOKENS)
        _check_int("spec_steps", self.spec_steps, 1, MAX_SPEC_STEPS)
        _check_int("spec_topk", self.spec_topk, 1, MAX_SPEC_TOPK)
        _check_int("max_bs", self.max_bs, 1, MAX_GRAPH_BATCH)
        if not isinstance(self.draft_has_kv, bool):
            raise ValueError(f"draft_has_kv: {self.draft_has_kv!r} is not a boolean (allowed: true, false)")
        if self.width_gen not in WIDTH_GENERATIONS:
            allowed = ", ".join(WIDTH_GENERATIONS)
            raise ValueError(f"width_gen: {self.width_gen!r} is not one of {allowed}")

    def replace(self, **changes: object) -> ServingGeometry:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @property
    def speculative(self) -> bool:
        return self.draft_tokens > 0

    @property
    def alloc_len_per_decode(self) -> int:
        """KV slots one request may take in one speculative step (the engine's reservation unit)."""
        if not self.speculative:
            return 1
        steps, topk, ps = self.spec_steps, self.spec_topk, self.page_size
        if ps == 1 or topk == 1 or (not self.draft_has_kv and self.width_gen != "g2n"):
            return max(steps * topk, self.draft_tokens)
        # Each of the topk branches opens pages of its own for its steps, from a partial page.
        return max(cdiv(ps - 1 + steps, ps) * ps * topk, self.draft_tokens)

    @property
    def req_to_token_extra(self) -> int:
        """Columns the request table has beyond ``context_len``, by width generation.

        Worked values (docs/semantics.md#width-generations): EAGLE D=6 steps=5 topk=1 ps=64 gives
        10 / 10 / 75 for g1 / g2 / g3; NGRAM D=16 topk=10 ps=128 gives 20 / 32 / 159, and 4 / 2560
        for g0 / g2n.
        """
        if self.width_gen == "g0":
            return REQ_TO_TOKEN_SLACK
        extra = REQ_TO_TOKEN_SLACK + self.draft_tokens
        if not self.speculative or self.page_size == 1 or self.width_gen == "g1":
            return extra
        reserve = 2 * self.alloc_len_per_decode
        if self.width_gen in ("g2", "g2n"):
            return max(extra, reserve) if self.spec_topk > 1 else extra
        return max(extra, reserve + self.page_size - 1)

    @property
    def request_table_width(self) -> int:
        """``W = req_to_token.shape[1]``."""
        return self.context_len + self.req_to_token_extra

    def lookahead(self, mode: Mode, step_id: int = 0) -> int:
        """Tokens a replay reads beyond the largest committed length, in ``mode``."""
        if mode is Mode.TARGET_VERIFY:
            return self.draft_tokens
        if mode is Mode.DRAFT_DECODE:
            return step_id + 1
        return 0

    def max_committed_len(self, mode: Mode, step_id: int = 0) -> int:
        """The largest committed length the request table can hold for a step in ``mode``.

        Without speculation the scheduler's cap (``ctx - 1``) is the bound. With it, a committed
        length may overshoot the context for a step, up to what the table can still hold: the
        verify step writes ``D`` draft slots after it (``W - D``), a draft step reads ``step_id + 1``
        tokens past it, and other modes need the token itself (``W - 1``).
        """
        if not self.speculative:
            return self.context_len - 1
        if mode is Mode.TARGET_VERIFY:
            return self.request_table_width - self.draft_tokens
        if mode is Mode.DRAFT_DECODE:
            return self.request_table_width - (step_id + 1)
        return self.request_table_width - 1

    def invalid_mode_reason(self, mode: Mode, step_id: int = 0) -> str | None:
        """Why ``mode`` is not a state this geometry can replay, or None when it is."""
        if mode in (Mode.TARGET_VERIFY, Mode.DRAFT_EXTEND) and not self.speculative:
            return f"{mode.value} needs draft tokens (draft_tokens is 0: speculation is off)"
        if mode is Mode.DRAFT_DECODE:
            if not self.speculative:
                return "draft-decode needs draft tokens (draft_tokens is 0: speculation is off)"
            if not 0 <= step_id < self.spec_steps:
                return f"step_id: {step_id} is out of range (allowed: 0 to {self.spec_steps - 1})"
        return None
