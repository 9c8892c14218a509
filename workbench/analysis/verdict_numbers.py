"""One definition of each number a verdict shows, used by the atlas, the preflight, the notebooks
and the report alike.

* ``margin(first, reach) = first - reach - 1``: the committed lengths a run could still grow past
  its reach before the first failing one. ``>= 0``: safe by that many tokens; ``< 0``: a run reaches
  the failure (a FAILS row never shows margin 0). ``None``: nothing fails.
* ``kv_budget_bytes``: the KV cache of a full graph batch, ``max_bs * ctx * kv_bytes_per_token``.
* ``kv_share(extra_bytes, budget)``: what a fix adds over the engine's buffer, as a fraction of that
  budget (the extra bytes, never the fix's whole size); ``format_share`` writes it one way everywhere.

Worked example (the first seed's fix: QwQ-32B, ctx 32768, ``--cuda-graph-max-bs 16``, 262144 KV
bytes per token): the budget is 16 * 32768 * 262144 = 137438953472 bytes; the fix widens
``block_tables`` from 256 to 257 pages, one int32 more in each of 16 rows, 64 bytes, and
``format_share(kv_share(64, 137438953472))`` is ``"4.7e-10 (0.466 ppb)"``.
"""

from __future__ import annotations


def margin(first_failing: int | None, reach: int) -> int | None:
    return None if first_failing is None else first_failing - reach - 1


def reached(first_failing: int | None, reach: int) -> bool:
    return first_failing is not None and first_failing <= reach


def kv_budget_bytes(max_bs: int, context_len: int, kv_bytes_per_token: int | None) -> int | None:
    if kv_bytes_per_token is None:
        return None
    return max_bs * context_len * kv_bytes_per_token


def kv_share(extra_bytes: int, budget_bytes: int | None) -> float | None:
    """The extra bytes of a fix as a fraction of the KV budget (None without a budget)."""
    if not budget_bytes:
        return None
    return max(0, extra_bytes) / budget_bytes


def format_share(share: float | None) -> str:
    """``"2.3e-10 (0.23 ppb)"``: the fraction and its parts per billion, or ``"unknown"``."""
    if share is None:
        return "unknown (no KV bytes per token for this model)"
    if share == 0:
        return "0 (as wide as the engine's)"
    return f"{share:.2g} ({share * 1e9:.3g} ppb)"
