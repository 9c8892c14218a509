"""The atlas's rows for the request table written by a speculative decode step's reservation
(``backends/sglang/req_to_token.py``).

One row per version whose data names the reservation, model preset and speculative recipe that takes
the path (``algorithms``, ``topk_max`` in the version's entry), at page size 1 (where the writer runs
unchecked, and where conformance runs the engine's own step). Its boundary is one request's: the
committed length whose reservation passes the row (the closed form; the summary's worst setting is
executed at it and one below, ``confirm_boundary``). Its reach is the committed length a batch is
formed at (``analysis.reach.reservation_reach``); where a release's default speculative worker is v1
(0.5.10), the path needs spec v2 and so overlap (``SGLANG_ENABLE_SPEC_V2=1``), and the row says so.
``confirm_by_step_walk`` runs one request's reservations step after step, each executed, up to the
reach. The fix is a row wide enough for the reservation at the reach, costed for the pool's rows
(``max_bs + 1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd  # type: ignore[import-untyped]
import torch

from workbench.analysis.memory import ModelPreset
from workbench.analysis.reach import Conditions, Reach, reservation_reach, rule_for, speculative_worker
from workbench.analysis.verdict_numbers import kv_budget_bytes, kv_share, reached
from workbench.analysis.verdict_numbers import margin as margin_of
from workbench.atlas.reaches import Reaches
from workbench.backends.sglang import req_to_token as rt
from workbench.engines.store.versions import EngineVersion
from workbench.model.geometry import ServingGeometry

PAGE_SIZES = (1,)
MODE = "decode-reservation"  # the step that writes it: a decode batch formed for speculation
WALK_LEAD = 8


@dataclass(frozen=True)
class ReservationConfig:
    engine: str
    rule: str
    check: str
    preset: ModelPreset
    recipe: str
    geometry: ServingGeometry


def entry(version: EngineVersion) -> dict[str, object] | None:
    found = version.case_fields(rt.NAME).get("reservation")
    return found if isinstance(found, dict) else None


def takes_path(found: dict[str, object], g: ServingGeometry) -> bool:
    algorithm = "EAGLE" if g.draft_has_kv else "NGRAM"
    top = found.get("topk_max")
    algorithms = found.get("algorithms", ())
    return (rt.applies(g) is None and isinstance(algorithms, list) and algorithm in algorithms
            and (top is None or g.spec_topk <= int(str(top))))


def configurations(versions: Sequence[EngineVersion], settings: Sequence[tuple[ModelPreset, str, ServingGeometry]]
                   ) -> list[ReservationConfig]:
    out = []
    for version in versions:
        found = entry(version)
        if found is None:
            continue  # the version's data says nothing of the reservation: no row rather than a guess
        for preset, recipe, g in settings:
            if takes_path(found, g):
                out.append(ReservationConfig(version.engine, str(found["rule"]), str(found["check"]), preset, recipe, g))
    return out


def where(engine: str, g: ServingGeometry, overshoot: int | None = None, reaches: Reaches | None = None) -> Reach:
    """The reservation's reach at the release's defaults; where the default speculative worker is v1,
    with the overlap that spec v2 turns on (the path exists only there). ``reaches``: the atlas's
    rules kept (at the same ``overshoot``), else read here."""
    rule = reaches.rule(engine) if reaches is not None and reaches.overshoot == overshoot \
        else rule_for(engine).with_overshoot(overshoot)
    algorithm = "EAGLE" if g.draft_has_kv else "NGRAM"
    facts = rule.scheduler
    if facts is not None and speculative_worker(facts, facts.overlap_default["speculative"]) != "v2":
        return reservation_reach(rule, g, Conditions(overlap=True, algorithm=algorithm,
                                                     overlap_source="SGLANG_ENABLE_SPEC_V2=1: spec v2 runs with overlap"))
    return reservation_reach(rule, g, Conditions(algorithm=algorithm))


def row(config: ReservationConfig, overshoot: int | None, reaches: Reaches | None = None) -> dict[str, object]:
    """One setting's row, in the table rows' columns (``atlas._row``) plus the batch's."""
    g = config.geometry
    first = rt.first_failure(g, config.rule)
    at = where(config.engine, g, overshoot, reaches)
    reachable = min(at.largest_committed, at.table_bound)
    margin = margin_of(first, reachable)
    status = "safe" if first is None else ("reachable" if reached(first, reachable) else "unreachable")
    rows = g.max_bs + 1
    engine_bytes = rt.table_bytes(g, rows)
    safe_bytes = rows * (g.context_len + rt.safe_extra(g, reachable, config.rule)) * 4
    kv_budget = kv_budget_bytes(g.max_bs, g.context_len, config.preset.kv_bytes_per_token)
    return {
        "engine": config.engine, "backend": rt.NAME, "rule": config.rule, "width_gen": g.width_gen,
        "replay": config.check, "mode": MODE, "step_id": 0, "preset": config.preset.name, "recipe": config.recipe,
        "context_len": g.context_len, "page_size": g.page_size, "draft_tokens": g.draft_tokens,
        "spec_steps": g.spec_steps, "spec_topk": g.spec_topk, "draft_has_kv": g.draft_has_kv, "max_bs": g.max_bs,
        "request_table_width": g.request_table_width, "buffer_width": g.request_table_width, "buffer_unit": "entries",
        "first_failing_seq_len": first, "outcome": "ok" if first is None else rt.outcome_of(g, config.check).value,
        "error": None, "reachable_len": reachable, "margin": margin, "status": status,
        "engine_bytes": engine_bytes, "safe_bytes": safe_bytes, "extra_bytes": max(0, safe_bytes - engine_bytes),
        "kv_budget_bytes": kv_budget, "extra_share_of_kv": kv_share(safe_bytes - engine_bytes, kv_budget),
        "reach_why": at.why, "scheduler_reach": at.largest_committed, "batch": 1,
        "pool_tokens": None if first is None else first,
    }


def _parts(r: pd.Series) -> tuple[ServingGeometry, str, str]:
    g = ServingGeometry(context_len=int(r.context_len), page_size=int(r.page_size), draft_tokens=int(r.draft_tokens),
                        spec_steps=int(r.spec_steps), spec_topk=int(r.spec_topk), draft_has_kv=bool(r.draft_has_kv),
                        max_bs=int(r.max_bs), width_gen=str(r.width_gen))
    return g, str(r.rule), str(r.replay)


def confirm_boundary(r: pd.Series, device: str = "cpu") -> dict[str, object]:
    """The row's boundary executed: one request at the first failing length fails with the row's
    outcome, one token below it passes (a safe row has nothing to execute: None)."""
    if pd.isna(r.first_failing_seq_len):
        return {"outcome": "ok", "error": None, "boundary_confirmed": None}
    g, rule, check = _parts(r)
    first = int(r.first_failing_seq_len)
    failing = rt.probe(g, rule, check, [first], device)
    below = rt.probe(g, rule, check, [first - 1], device) if first > 1 else None
    confirmed = failing.outcome.failed and (below is None or not below.outcome.failed)
    return {"outcome": failing.outcome.value, "error": failing.error, "boundary_confirmed": confirmed}


def confirm_by_step_walk(r: pd.Series, device: str = "cpu", *, lead: int = WALK_LEAD) -> dict[str, object]:
    """One request prefilled ``lead`` tokens short of the failing length (or of the reach), then one
    decode preparation a step, each executed on a table with a neighbour row after it, one accepted
    token a step, its allocated length carried over: up to the reach. Confirmed: a reachable failure
    is first met at the row's length with its outcome; any other row's request reaches the cap clean."""
    g, rule, check = _parts(r)
    width, reach = g.request_table_width, int(r.reachable_len)
    reachable = r.status == "reachable"
    target = int(r.first_failing_seq_len) if reachable else reach
    start = max(1, target - lead)
    allocated, hit, outcome = start, None, "ok"
    for s in range(start, reach + 1):
        table = torch.full((4 * width,), -1, dtype=torch.int32, device=device)
        nxt = rt.next_lens(g, rule, [s], [allocated])[0]
        slots = torch.arange(1, max(1, nxt - allocated) + 1, dtype=torch.int32, device=device)
        try:
            done = rt.replay(g, rule, check, table, 3, [1], [s], [allocated], slots)
        except rt.ReservationRefused:
            hit, outcome = s, "host-assert"
            break
        if done.overwrite is not None:
            hit, outcome = s, "silent-overwrite"
            break
        allocated = done.allocated[0]
    confirmed = (hit == target and outcome == r.outcome) if reachable else hit is None
    return {"run_model": f"step walk: one request, {start}-{hit or reach}", "run_committed_len": hit or reach,
            "run_outcome": outcome, "run_confirmed": confirmed}
