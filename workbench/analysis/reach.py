"""Reachability: the largest committed length a real run reaches, and why.

A boundary says at which committed length ``s`` a step first fails; whether a deployment can crash
depends on whether a run gets there. For SGLang the answer comes from its scheduler, release by
release (the facts in ``data/engines/sglang/<version>.json``, section ``reach``, learned by running
the release's own functions: ``workbench/engines/sglang/scheduler_calls.py``):

* ``max_req_len = min(ctx - 1, pool - 1)``; a request's ``max_new_tokens`` is clipped to
  ``max_req_len - input_len - 1`` and, from 0.5.14, to what an empty pool holds
  (``pool - cdiv(input_len, ps) * ps - ps - 1``). So a request holds at most
  ``T = min(ctx - 2, pool - 2[, pool - ps - 1])`` tokens, input and outputs together.
* A request is finished once it has ``max_new_tokens`` outputs. Without overlap scheduling every
  batch's result is processed before the next batch is formed: a decode batch runs at ``s <= T - 1``,
  a speculative batch (draft steps and verify at the committed ``s = input + outputs - 1``) at
  ``s <= T - 2``.
* With overlap (the default from 0.5.14, and for decode in every release) the next batch is formed
  while one is in flight, whose accepted tokens the device already counts: a speculative batch runs
  at up to ``T - 2 + a_max``, where ``a_max`` is the recipe's largest accept length (EAGLE
  ``min(steps + 1, D)``, NGRAM ``D``). From 0.5.22 the loop leaves out a request whose in-flight
  result will finish it by length (``_reqs_finishing_inflight``): one token less, ``T - 3 + a_max``;
  decode stays at ``T - 1`` with that skip and ``T`` without it.
* Draft-extend (spec v2) writes the verify's ``D`` window again: its ``seq_lens`` are the batch's
  ``s + D``. Spec v1 (the default up to 0.5.10) extends only unfinished requests by what they
  accepted, ``s + a <= T - 2``.

Worked example (0.5.23, ctx 32768, a pool larger than the context, so T = 32766): NGRAM with 16
draft tokens reaches 32766 - 3 + 16 = 32779 with overlap on and 32764 with it off; EAGLE (5, 4, 8)
32769 / 32764; EAGLE (3, 1, 4) 32767 / 32764.

vLLM's V1 launches take their release's measured scheduler (``preflight.resolve_vllm``: the last step
at ``max_model_len - 2``, no overshoot); V0 and platform-plugin launches keep the constant rule read
from the source (``data/launch_defaults.json``): ``max_model_len - 1``, no overshoot.
``overshoot`` given explicitly is a what-if: the cap ``ctx - 1`` plus that many tokens, for every mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from workbench.engines.store import learned
from workbench.engines.store.launch_defaults import LaunchVersion, load_launch_data
from workbench.model.geometry import Mode, ServingGeometry, cdiv

MAX_OVERSHOOT = 1024  # far past anything a step carries (D is at most 1024)
# A prompt is admitted below max_req_input_len = max_req_len - 5 (tp_worker.py:572 in 0.5.23, 155 in
# 0.5.2; validate_input_length refuses len >= it, managers/utils.py:259-289): at most max_req_len - 6.
ADMITTED_BELOW = 6
ACCEPT_FORMS = ("min(steps + 1, draft_tokens)", "draft_tokens")


@dataclass(frozen=True)
class SchedulerFacts:
    """How one SGLang release's scheduler lets a request grow (its learned ``reach`` section)."""

    engine: str  # the release the facts were learned from
    clip_offset: int  # max_new_tokens <= max_req_len - input_len - clip_offset
    memory_clip: bool  # max_new_tokens <= pool - cdiv(input_len, ps) * ps - ps - 1
    inflight_skip: bool  # the overlap loop skips a request its in-flight result finishes
    overlap_default: Mapping[str, bool]  # "plain" / "speculative": on unless --disable-overlap-schedule
    worker_without_overlap: str  # "v1" or "v2": the speculative worker when overlap is off
    max_accept: Mapping[str, str]  # algorithm -> one of ACCEPT_FORMS
    sources: Mapping[str, str]  # fact -> how it was obtained (measured: function, states / read: file:line)

    def accept(self, g: ServingGeometry, algorithm: str) -> int:
        form = self.max_accept.get("NGRAM" if algorithm == "NGRAM" else "EAGLE")
        if form == "draft_tokens":
            return g.draft_tokens
        return min(g.spec_steps + 1, g.draft_tokens)


@dataclass(frozen=True)
class Conditions:
    """What a run's reach depends on besides the geometry: each with where it came from."""

    overlap: bool | None = None  # None: the release's default
    overlap_source: str = ""
    pool_tokens: int | None = None  # None: a pool larger than any one request
    pool_source: str = "assumed larger than the context"
    algorithm: str | None = None  # "EAGLE", "NGRAM" (None: from the geometry, EAGLE with drafts)


@dataclass(frozen=True)
class ReachRule:
    """How far one engine version lets a request get: its scheduler's facts, or a constant."""

    engine: str
    cap_offset: int  # the scheduler caps committed tokens at ctx - cap_offset
    overshoot: int | None  # a constant overshoot past the cap (vLLM: 0; a what-if); None: derived
    clamps_reads: bool  # reads (lookahead included) are clamped to ctx
    sources: dict[str, str]
    scheduler: SchedulerFacts | None = None
    substituted: str | None = None  # the release whose facts stand in, where not this one's own
    assumed: str | None = None  # what the rule takes without having measured it, said in the verdict

    def with_overshoot(self, overshoot: int | None) -> ReachRule:
        if overshoot is None:
            return self
        if isinstance(overshoot, bool) or not isinstance(overshoot, int) or not 0 <= overshoot <= MAX_OVERSHOOT:
            raise ValueError(f"--overshoot: {overshoot!r} is out of range (allowed: 0 to {MAX_OVERSHOOT})")
        return replace(self, overshoot=overshoot, sources={**self.sources, "overshoot": "--overshoot (a what-if)"})

    def overlap_default(self, speculative: bool) -> bool | None:
        if self.scheduler is None:
            return None
        return self.scheduler.overlap_default["speculative" if speculative else "plain"]


@dataclass(frozen=True)
class Reach:
    """The largest committed length a run reaches in one mode, and why."""

    largest_committed: int
    cap: int  # ctx - 1, the scheduler's request cap
    overshoot: int  # largest_committed - cap (negative: a run stops short of the cap)
    table_bound: int  # the largest committed length the request table holds in this mode
    why: str = ""  # the terms: recipe, overlap, worker, pool
    conditions: tuple[str, ...] = field(default_factory=tuple)  # what must hold for a run to get there

    def margin(self, first_failing: int | None) -> int | None:
        """``first - reach - 1`` (``verdict_numbers.margin``): >= 0 safe, < 0 a run reaches it."""
        from workbench.analysis.verdict_numbers import margin

        return margin(first_failing, self.largest_committed)

    def reaches(self, first_failing: int | None) -> bool:
        return first_failing is not None and first_failing <= self.largest_committed


def _cap_offset(expression: object, engine: str) -> int:
    """``ctx - 1`` as data: ``"context_len - 1"`` or ``"max_model_len - 1"``."""
    text = str(expression).replace(" ", "")
    for name in ("context_len-", "max_model_len-"):
        if text.startswith(name) and text[len(name):].isdigit():
            return int(text[len(name):])
    raise ValueError(f"{engine}: reach.committed_cap: {expression!r} is not 'context_len - N'")


def scheduler_facts(engine: str) -> tuple[SchedulerFacts | None, str | None]:
    """The learned facts for ``engine`` (a pseudo-version takes its release's), and the release they
    were learned from where that is another one (the nearest learned release)."""
    from workbench.engines.store import releases

    release = engine.split("+", 1)[0]
    candidates = learned.learned_releases(release.split("==", 1)[0])
    with_reach = [c for c in candidates if learned.section(c, "reach")]
    chosen = releases.nearest(with_reach, release) if with_reach else None
    if chosen is None:
        return None, None
    section = learned.section(chosen, "reach") or {}
    return parse_facts(chosen, section), (chosen if chosen != release else None)


def parse_facts(engine: str, section: Mapping[str, object]) -> SchedulerFacts:
    def value(name: str) -> object:
        fact = section.get(name)
        if not isinstance(fact, dict) or "value" not in fact:
            raise ValueError(f"{engine}: learned reach.{name}: missing")
        return fact["value"]

    accept = value("max_accept")
    overlap = value("overlap_default")
    if not isinstance(accept, dict) or any(v not in ACCEPT_FORMS for v in accept.values()):
        raise ValueError(f"{engine}: learned reach.max_accept: {accept!r} (allowed forms: {', '.join(ACCEPT_FORMS)})")
    if not isinstance(overlap, dict):
        raise ValueError(f"{engine}: learned reach.overlap_default: {overlap!r} is not an object")
    return SchedulerFacts(engine=engine, clip_offset=int(str(value("clip_offset"))),
                          memory_clip=bool(value("memory_clip")), inflight_skip=bool(value("inflight_skip")),
                          overlap_default={k: bool(v) for k, v in overlap.items()},
                          worker_without_overlap=str(value("worker_without_overlap")), max_accept=dict(accept),
                          sources={k: _how(v) for k, v in section.items() if isinstance(v, dict)})


def _how(fact: Mapping[str, object]) -> str:
    if fact.get("how") == "measured":
        return f"measured: {fact.get('function')} on {fact.get('states')} states"
    if fact.get("how") == "read":
        return f"read: {fact.get('source')}"
    return f"absent: {fact.get('reason')}"


def reach_rule(version: LaunchVersion | str) -> ReachRule:
    """The version's reach: its learned scheduler facts, or the constant of ``launch_defaults.json``."""
    if isinstance(version, str):
        version = load_launch_data().version(version)
    entries = version.reach
    missing = [k for k in ("committed_cap", "overshoot", "lookahead_clamp") if k not in entries]
    if missing:
        raise ValueError(f"{version.engine}: reach.{missing[0]}: missing in the launch data")
    facts, substituted = scheduler_facts(version.engine) if version.family == "sglang" else (None, None)
    overshoot = entries["overshoot"].value
    if not isinstance(overshoot, int):
        raise ValueError(f"{version.engine}: reach.overshoot: {overshoot!r} is not an integer")
    return ReachRule(
        engine=version.engine,
        cap_offset=_cap_offset(entries["committed_cap"].value, version.engine),
        overshoot=None if facts is not None else overshoot,
        clamps_reads=entries["lookahead_clamp"].value is not None,
        sources={k: v.source for k, v in entries.items()}, scheduler=facts, substituted=substituted,
    )


# ---- the model ---------------------------------------------------------------------------------


def request_budget(facts: SchedulerFacts, ctx: int, pool: int | None, page_size: int) -> int:
    """``T``: the most tokens (input and outputs) one request holds, over every input length."""
    cap = ctx - 1 if pool is None else min(ctx - 1, pool - 1)
    budget = cap - facts.clip_offset
    if facts.memory_clip and pool is not None:
        budget = min(budget, pool - page_size - 1)  # an input that fills whole pages
    return budget


def clip(facts: SchedulerFacts, ctx: int, pool: int | None, page_size: int, input_len: int,
         requested: int | None) -> int:
    """``max_new_tokens`` after the scheduler's clipping (the conformance row's model side)."""
    cap = ctx - 1 if pool is None else min(ctx - 1, pool - 1)
    budget = min(requested if requested is not None else 1 << 30, cap - input_len - facts.clip_offset)
    if facts.memory_clip and pool is not None:
        budget = min(budget, pool - cdiv(input_len, page_size) * page_size - page_size - 1)
    return max(0, budget)


def longest_step(facts: SchedulerFacts, *, input_len: int, max_new_tokens: int, speculative: bool, overlap: bool,
                 max_accept: int) -> int | None:
    """The largest committed length a batch carrying one request runs at (None: no batch does).

    Normal loop: a batch runs while outputs < M. Overlap: the batch is formed with ``o`` outputs
    processed and ``a`` in flight; it runs while ``o < M`` (and ``o + 1 < M`` with the in-flight
    skip); the prefill's one token is the first in flight."""
    m = max_new_tokens
    offset = input_len - (1 if speculative else 0)
    accept = max_accept if speculative else 1
    if not overlap:
        return offset + m - 1 if m >= 2 else None
    # o must satisfy o < M, or o + 1 < M with the skip; but the batch formed while the prefill is in
    # flight (o = 0) runs whatever M is unless skipped: finishing is only checked on a processed result.
    largest_processed = m - 2 if facts.inflight_skip else max(m - 1, 0)
    if largest_processed < 0:
        return None
    if largest_processed == 0:
        return offset + 1  # only the batch formed while the prefill (one token) is in flight
    return offset + largest_processed + accept


def longest_reservation(facts: SchedulerFacts, *, input_len: int, max_new_tokens: int, overlap: bool) -> int | None:
    """The largest committed length a speculative decode batch carrying one request is formed at (None:
    none is), which is what its reservation starts from (``kv_committed_len``: the accepted tokens of
    processed results only, the prefill's token at once; a verify in flight is not in it).

    Normal loop: formed while ``1 <= o < M``: ``input + M - 2``. Overlap: formed with ``o`` processed
    (``o < M``, ``o + 1 < M`` with the in-flight skip), the first while the prefill is in flight (``o = 0``,
    committed ``input``). Worked example (0.5.23, in-flight skip): input 32700, M 66: the last batch is
    formed at o = 64, committed 32763."""
    m = max_new_tokens
    if not overlap:
        return input_len + m - 2 if m >= 2 else None
    # the batch formed while the prefill is in flight runs whatever M is unless skipped (``longest_step``)
    largest_processed = m - 2 if facts.inflight_skip else max(m - 1, 0)
    if largest_processed < 0:
        return None
    return input_len + max(largest_processed, 1) - 1


def reservation_reach(rule: ReachRule, g: ServingGeometry, conditions: Conditions | None = None) -> Reach:
    """The largest committed length a speculative decode step's reservation starts from: the request
    table's own buffer (``backends/sglang/req_to_token.py``). Without the scheduler's facts (a what-if
    ``overshoot``, a constant rule) it is the verify's reach."""
    cond = conditions or Conditions()
    if rule.overshoot is not None or rule.scheduler is None:
        verify = reach(rule, g, Mode.TARGET_VERIFY, 0, cond)
        return replace(verify, table_bound=g.request_table_width - 1, why=f"{verify.why} (the verify's reach)")
    facts = rule.scheduler
    overlap = cond.overlap if cond.overlap is not None else facts.overlap_default["speculative"]
    budget = request_budget(facts, g.context_len, cond.pool_tokens, g.page_size)
    # The longest request reserves from T - 2 (T - 3 with the skip); the batch formed while a prefill is
    # in flight reserves from the prompt itself, the longest the scheduler admits (ADMITTED_BELOW).
    cap = g.context_len - 1 if cond.pool_tokens is None else min(g.context_len - 1, cond.pool_tokens - 1)
    prompt = max(1, cap - ADMITTED_BELOW)
    m = clip(facts, g.context_len, cond.pool_tokens, g.page_size, prompt, None)
    found = [longest_reservation(facts, input_len=budget - 3, max_new_tokens=3, overlap=overlap),
             longest_reservation(facts, input_len=prompt, max_new_tokens=m, overlap=overlap)]
    largest = max(f for f in found if f is not None)
    cap = g.context_len - rule.cap_offset
    terms = [f"T = {budget}" + (f" (pool {cond.pool_tokens}: {cond.pool_source})" if cond.pool_tokens else ""),
             f"overlap {'on' if overlap else 'off'}" + (f" ({cond.overlap_source})" if cond.overlap_source else
                                                       " (the release's default)"),
             "the batch's committed length when it is formed (processed results only)"]
    if overlap:
        terms.append("in-flight skip" if facts.inflight_skip else "no in-flight skip")
    if rule.substituted:
        terms.append(f"facts of {rule.substituted}")
    return Reach(largest, cap, largest - cap, g.request_table_width - 1, "; ".join(terms),
                 (f"overlap {'on' if overlap else 'off'}",))


def speculative_worker(facts: SchedulerFacts, overlap: bool) -> str:
    return "v2" if overlap else facts.worker_without_overlap


def reach(rule: ReachRule, geometry: ServingGeometry, mode: Mode, step_id: int = 0,
          conditions: Conditions | None = None) -> Reach:
    """The largest committed length a run reaches in ``mode``, never past what the request table holds."""
    g, cond = geometry, conditions or Conditions()
    cap = g.context_len - rule.cap_offset
    bound = g.max_committed_len(mode, step_id)
    if rule.overshoot is not None or rule.scheduler is None:
        overshoot = rule.overshoot or 0
        largest = max(1, min(cap + (overshoot if g.speculative else 0), bound))
        why = (f"ctx - {rule.cap_offset} + overshoot {overshoot} ({rule.sources.get('overshoot', '')})"
               if g.speculative else f"ctx - {rule.cap_offset} ({rule.sources.get('committed_cap', '')})")
        return Reach(largest, cap, largest - cap, bound, why, ())
    return _scheduler_reach(rule, rule.scheduler, g, mode, cond, cap, bound)


def _scheduler_reach(rule: ReachRule, facts: SchedulerFacts, g: ServingGeometry, mode: Mode, cond: Conditions,
                     cap: int, bound: int) -> Reach:
    overlap = cond.overlap if cond.overlap is not None else facts.overlap_default["speculative" if g.speculative else "plain"]
    budget = request_budget(facts, g.context_len, cond.pool_tokens, g.page_size)
    algorithm = cond.algorithm or "EAGLE"
    accept = facts.accept(g, algorithm) if g.speculative else 1
    # The longest request: input and max_new_tokens summing to T, with max_new_tokens 3 (enough for
    # every case of ``longest_step``; a longer one reaches the same length).
    step = longest_step(facts, input_len=budget - 3, max_new_tokens=3, speculative=g.speculative, overlap=overlap,
                        max_accept=accept)
    assert step is not None
    worker = speculative_worker(facts, overlap) if g.speculative else None
    terms = [f"T = {budget}" + (f" (pool {cond.pool_tokens}: {cond.pool_source})" if cond.pool_tokens else ""),
             f"overlap {'on' if overlap else 'off'}" + (f" ({cond.overlap_source})" if cond.overlap_source else
                                                       " (the release's default)")]
    if g.speculative:
        terms.append(f"{algorithm} a_max {accept}, spec {worker}")
        if overlap:
            terms.append("in-flight skip" if facts.inflight_skip else "no in-flight skip")
    if mode is Mode.DRAFT_EXTEND:
        if worker == "v2":
            step += g.draft_tokens
            terms.append(f"draft-extend + D {g.draft_tokens}")
        else:
            step = budget - 2
            terms.append("v1 draft-extend: unfinished requests only")
    largest = max(1, step)
    if largest > bound:  # the engine gets there: its request-table row is too narrow for the step
        terms.append(f"past the request table's {bound} for this mode (the request-table row overflows)")
    if rule.substituted:
        terms.append(f"facts of {rule.substituted}")
    conditions = (f"overlap {'on' if overlap else 'off'}",) + ((f"accept length {accept}",) if g.speculative and overlap else ())
    return Reach(largest, cap, largest - cap, bound, "; ".join(terms), conditions)


def default_reach(engine: str, g: ServingGeometry, mode: Mode, step_id: int = 0, *, algorithm: str | None = None,
                  overshoot: int | None = None) -> Reach:
    """The reach at the release's defaults (overlap as it ships, a pool larger than the context), or the
    what-if of an explicit ``overshoot``; the atlas's rows use it."""
    rule = rule_for(engine).with_overshoot(overshoot)
    return reach(rule, g, mode, step_id, Conditions(algorithm=algorithm))


def rule_for(engine: str) -> ReachRule:
    """``engine``'s reach rule: its launch data's, or for a release without launch data the newest
    release's launch rule with this release's own scheduler facts (the nearest learned ones)."""
    data = load_launch_data()
    if engine in data.versions:
        return reach_rule(data.versions[engine])
    base = engine.split("+", 1)[0]
    if base in data.versions:
        return reach_rule(data.versions[base])
    newest = reach_rule(data.version(data.newest["sglang"]))
    facts, substituted = scheduler_facts(engine)
    if facts is None:
        return newest
    return replace(newest, engine=engine, scheduler=facts, substituted=substituted)
