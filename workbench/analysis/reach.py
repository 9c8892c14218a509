"""Reachability: the largest committed length a real run reaches, and the margin to a failure.

A boundary says at which committed length a step first fails; whether a deployment can crash
depends on whether a run ever gets there. Each engine caps a request near its context limit, as
its version data says (``data/launch_defaults.json``, ``reach``):

* SGLang caps a request at ``ctx - 1`` committed tokens (``max_req_len``), but one step may carry
  a request past the cap (multi-token acceptance, the overlap scheduler letting a finished request
  ride one more verify). That **overshoot** is explicit: the version's documented default (2: a
  run reaches ``ctx + 1``), or what the user says. Verify reads ``s + D`` past it, unclamped.
* vLLM schedules no position at ``max_model_len`` or past it (``max_model_len - 1``, no
  overshoot), and clamps the KV slots a step reserves, lookahead included, to ``max_model_len``.

Worked example (the first seed, QwQ-32B on Ascend, ctx 32768, NGRAM D 16, ps 128): the cap is
32767, the overshoot 2, so a run reaches 32769. The Ascend table before the fix (256 pages) first
fails at 32753: margin 32753 - 32769 = -16, reachable. After it (257 pages, W 32927 under G3) the
first failure is at 32881: margin +112, a run stops 112 tokens short of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.engines.launch import LaunchVersion, load_launch_data
from workbench.model.geometry import Mode, ServingGeometry

MAX_OVERSHOOT = 1024  # far past anything a step carries (D is at most 1024)


@dataclass(frozen=True)
class ReachRule:
    """How far one engine version lets a request get, read from its source."""

    engine: str
    cap_offset: int  # the scheduler caps committed tokens at ctx - cap_offset
    overshoot: int  # committed tokens one step may carry past the cap
    clamps_reads: bool  # reads (lookahead included) are clamped to ctx
    sources: dict[str, str]

    def with_overshoot(self, overshoot: int | None) -> ReachRule:
        if overshoot is None:
            return self
        if isinstance(overshoot, bool) or not isinstance(overshoot, int) or not 0 <= overshoot <= MAX_OVERSHOOT:
            raise ValueError(f"--overshoot: {overshoot!r} is out of range (allowed: 0 to {MAX_OVERSHOOT})")
        return ReachRule(self.engine, self.cap_offset, overshoot, self.clamps_reads, self.sources)


@dataclass(frozen=True)
class Reach:
    """The largest committed length a run reaches in one mode, and why."""

    largest_committed: int
    cap: int  # the scheduler's cap
    overshoot: int
    table_bound: int  # the largest committed length the request table holds in this mode

    def margin(self, first_failing: int | None) -> int | None:
        """Tokens between the largest committed length reached and the first failing one: > 0 is
        safe by that many tokens, <= 0 is a failure a run reaches. None: nothing fails."""
        return None if first_failing is None else first_failing - self.largest_committed

    def reaches(self, first_failing: int | None) -> bool:
        return first_failing is not None and first_failing <= self.largest_committed


def _cap_offset(expression: object, engine: str) -> int:
    """``ctx - 1`` as data: ``"context_len - 1"`` or ``"max_model_len - 1"``."""
    text = str(expression).replace(" ", "")
    for name in ("context_len-", "max_model_len-"):
        if text.startswith(name) and text[len(name):].isdigit():
            return int(text[len(name):])
    raise ValueError(f"{engine}: reach.committed_cap: {expression!r} is not 'context_len - N'")


def reach_rule(version: LaunchVersion | str) -> ReachRule:
    """The version's reach, from ``data/launch_defaults.json``."""
    if isinstance(version, str):
        version = load_launch_data().version(version)
    entries = version.reach
    missing = [k for k in ("committed_cap", "overshoot", "lookahead_clamp") if k not in entries]
    if missing:
        raise ValueError(f"{version.engine}: reach.{missing[0]}: missing in the launch data")
    overshoot = entries["overshoot"].value
    if not isinstance(overshoot, int):
        raise ValueError(f"{version.engine}: reach.overshoot: {overshoot!r} is not an integer")
    return ReachRule(
        engine=version.engine,
        cap_offset=_cap_offset(entries["committed_cap"].value, version.engine),
        overshoot=overshoot,
        clamps_reads=entries["lookahead_clamp"].value is not None,
        sources={k: v.source for k, v in entries.items()},
    )


def reach(rule: ReachRule, geometry: ServingGeometry, mode: Mode, step_id: int = 0) -> Reach:
    """The largest committed length a run reaches in ``mode``: the cap plus the overshoot, never
    past what the request table holds (a step past it is not a state the engine can be in)."""
    cap = geometry.context_len - rule.cap_offset
    bound = geometry.max_committed_len(mode, step_id)
    return Reach(max(1, min(cap + rule.overshoot, bound)), cap, rule.overshoot, bound)
