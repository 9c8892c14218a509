"""The atlas's rows for flat buffers pooled across a batch (``backends/pooled.py``).

A pooled buffer has no per-request row, so its boundary is a batch's: the committed length at
which the worst batch, every request at that length, overflows (``max_bs`` requests for a graph's
buffer, one for a buffer sized per call). Each row carries that batch (``batch``) and the KV
tokens it holds (``pool_tokens``): a deployment whose KV pool is smaller never forms it. Reachable
lengths are the table backends' (SGLang's scheduler cap plus the overshoot). The closed form
gives every setting's boundary; ``confirm_boundary`` executes the worst setting's step at it and
one below, and ``confirm_by_batch_walk`` runs that batch in lockstep to the failure or the cap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd  # type: ignore[import-untyped]

from workbench import backends
from workbench.analysis.memory import ModelPreset
from workbench.analysis.verdict_numbers import kv_budget_bytes, kv_share, reached
from workbench.analysis.verdict_numbers import margin as margin_of
from workbench.atlas.reaches import Reaches
from workbench.backends.pooled import PooledBackend, PooledBuffer
from workbench.engines.store.versions import EngineVersion
from workbench.model.geometry import ServingGeometry

PAGE_SIZES = (1,)  # the flat buffers hold token slots; their backends' default page size on CUDA
# Releases whose data give the pooled buffers the same rule, check and width generation share rows (atlas._module_rows)
SHARED_BY = ("*pooled*", ("pooled", "width_gen"))
WALK_LEAD = 8  # steps the lockstep batch runs before the length a row names
# What ``confirm_boundary`` reads of a row (``_parts``, the first failing length and the batch): rows
# equal in these execute the same steps
EXECUTED_FROM = ("backend", "mode", "rule", "replay", "context_len", "page_size", "draft_tokens", "spec_steps",
                 "spec_topk", "draft_has_kv", "max_bs", "width_gen", "first_failing_seq_len", "batch")


@dataclass(frozen=True)
class PooledConfig:
    engine: str
    backend: PooledBackend
    buffer: PooledBuffer
    rule: str
    check: str
    preset: ModelPreset
    recipe: str
    geometry: ServingGeometry


def _attention(preset: ModelPreset) -> str:
    return "mla" if preset.kv_lora_rank is not None else "mha"


def configurations(versions: Sequence[EngineVersion], settings: Sequence[tuple[ModelPreset, str, ServingGeometry]]
                   ) -> list[PooledConfig]:
    """Every pooled buffer a version's data names x every setting whose model and recipe have it,
    cheapest buffer first (so that among settings of equal margin the summary shows the smallest)."""
    out = []
    for version in versions:
        for backend in backends.POOLED_BACKENDS:
            fields = version.case_fields(backend.name)
            for buffer in backend.buffers:
                entry = fields.get(buffer.key)
                if not isinstance(entry, dict):
                    continue  # the version's data says nothing of this buffer: no row rather than a guess
                for preset, recipe, g in settings:
                    if buffer.attention not in ("any", _attention(preset)) or buffer.applies(g) is not None:
                        continue
                    out.append(PooledConfig(version.engine, backend, buffer, str(entry["rule"]), str(entry["check"]),
                                            preset, recipe, g))
    return sorted(out, key=lambda c: c.buffer.graph_bytes(c.geometry, c.rule))


def row(config: PooledConfig, overshoot: int | None, reaches: Reaches | None = None) -> dict[str, object]:
    """One setting's row, in the table rows' columns (``atlas._row``) plus the batch's; ``reaches``:
    the atlas's reaches kept (at the same ``overshoot``), else computed here."""
    g, buffer = config.geometry, config.buffer
    first = buffer.first_failure(g, config.rule)
    memo = reaches if reaches is not None and reaches.overshoot == overshoot else Reaches(overshoot)
    where = memo.at(config.engine, g, buffer.mode, 0, "NGRAM" if not g.draft_has_kv else None)
    reachable = min(where.largest_committed, where.table_bound)  # a batch walk stops at the table's bound
    margin = margin_of(first, reachable)
    status = "safe" if first is None else ("reachable" if reached(first, reachable) else "unreachable")
    batch = buffer.worst_batch(g)
    engine_bytes = buffer.graph_bytes(g, config.rule)
    safe_bytes = buffer.safe_bytes(g, reachable)
    kv_budget = kv_budget_bytes(g.max_bs, g.context_len, config.preset.kv_bytes_per_token)
    return {
        "engine": config.engine, "backend": config.backend.name, "rule": config.rule, "width_gen": g.width_gen,
        "replay": config.check, "mode": buffer.key, "step_id": g.spec_steps - 1 if buffer.rows(g) > 1 else 0,
        "preset": config.preset.name, "recipe": config.recipe, "context_len": g.context_len, "page_size": g.page_size,
        "draft_tokens": g.draft_tokens, "spec_steps": g.spec_steps, "spec_topk": g.spec_topk,
        "draft_has_kv": g.draft_has_kv, "max_bs": g.max_bs, "request_table_width": g.request_table_width,
        "buffer_width": buffer.capacity(g, config.rule, batch), "buffer_unit": "entries",
        # The outcome the check predicts; the summary's worst setting executes it (``confirm_boundary``).
        "first_failing_seq_len": first, "outcome": "ok" if first is None else buffer.outcome_of(config.check).value,
        "error": None,
        "reachable_len": reachable, "margin": margin, "status": status,
        "engine_bytes": engine_bytes, "safe_bytes": safe_bytes, "extra_bytes": max(0, safe_bytes - engine_bytes),
        "kv_budget_bytes": kv_budget, "extra_share_of_kv": kv_share(safe_bytes - engine_bytes, kv_budget),
        "reach_why": where.why, "batch": batch, "pool_tokens": None if first is None else batch * first,
    }


def _parts(row: pd.Series) -> tuple[PooledBuffer, ServingGeometry, str, str]:
    backend = backends.pooled_backend_of(str(row.backend))
    g = ServingGeometry(context_len=int(row.context_len), page_size=int(row.page_size),
                        draft_tokens=int(row.draft_tokens), spec_steps=int(row.spec_steps),
                        spec_topk=int(row.spec_topk), draft_has_kv=bool(row.draft_has_kv), max_bs=int(row.max_bs),
                        width_gen=str(row.width_gen))
    return backend.buffer(str(row["mode"])), g, str(row.rule), str(row.replay)


def confirm_boundary(row: pd.Series, device: str = "cpu") -> dict[str, object]:
    """The row's boundary executed: the worst batch at the first failing length must fail with the
    row's outcome, one token below it must pass. Returns the outcome and torch's or the engine's
    message, and ``boundary_confirmed``; a safe row has nothing to execute (None)."""
    if pd.isna(row.first_failing_seq_len):
        return {"outcome": "ok", "error": None, "boundary_confirmed": None}
    buffer, g, rule, check = _parts(row)
    first, batch = int(row.first_failing_seq_len), int(row.batch)
    failing = buffer.probe(g, rule, check, [first] * batch, device)
    below = buffer.probe(g, rule, check, [first - 1] * batch, device) if first > 1 else None
    confirmed = failing.outcome.failed and (below is None or not below.outcome.failed)
    return {"outcome": failing.outcome.value, "error": failing.error, "boundary_confirmed": confirmed}


def confirm_by_batch_walk(row: pd.Series, device: str = "cpu", *, lead: int = WALK_LEAD) -> dict[str, object]:
    """The row's worst batch run in lockstep, one token a step, every step executed: from ``lead``
    tokens short of the failing length (or of the reachable length, for a row a run does not fail)
    up to the reachable length. Confirmed: a reachable failure is hit where the row says with the
    row's outcome; any other row's batch gets to the cap with every step passing."""
    buffer, g, rule, check = _parts(row)
    batch, reachable_len = int(row.batch), int(row.reachable_len)
    reachable = row.status == "reachable"
    target = int(row.first_failing_seq_len) if reachable else reachable_len
    start = max(1, target - lead)
    hit, outcome = None, "ok"
    for s in range(start, reachable_len + 1):
        result = buffer.probe(g, rule, check, [s] * batch, device)
        if result.outcome.failed:
            hit, outcome = s, result.outcome.value
            break
    confirmed = (hit == target and outcome == row.outcome) if reachable else hit is None
    return {"run_model": f"batch walk: {batch} request{'s' if batch > 1 else ''} in lockstep, {start}-{hit or reachable_len}",
            "run_committed_len": hit if hit is not None else reachable_len, "run_outcome": outcome,
            "run_confirmed": confirmed}


def confirmed_summary_rows(summary: pd.DataFrame, device: str = "cpu") -> pd.DataFrame:
    """The pooled rows of a summary with their boundaries executed (``confirm_boundary``): once per
    distinct execution (``EXECUTED_FROM``: what ``confirm_boundary`` reads of a row), whatever the
    rows' releases, reaches or presets."""
    out = summary.copy()
    out["boundary_confirmed"] = pd.Series([None] * len(out), index=out.index, dtype=object)
    done: dict[tuple[object, ...], dict[str, object]] = {}  # rows executing the same steps: one execution
    found: dict[object, dict[str, object]] = {}
    for index, r in summary.iterrows():
        if backends.is_pooled_backend(str(r.backend)) and r.status != "refused":  # a refused setting: nothing to run
            key = tuple(str(r[name]) for name in EXECUTED_FROM)
            done[key] = done.get(key) or confirm_boundary(r, device)
            found[index] = done[key]
    return set_values(out, found)


def set_values(frame: pd.DataFrame, values: Mapping[object, Mapping[str, object]]) -> pd.DataFrame:
    """``frame`` with each row's ``values`` (by index) set, one column at a time: what setting them
    cell by cell gives (``.loc``), without a pandas assignment per cell (seconds for the atlas's summary)."""
    names = list(dict.fromkeys(name for row in values.values() for name in row))
    for name in names:
        rows = [index for index, row in values.items() if name in row]
        frame.loc[rows, name] = pd.Series([values[i][name] for i in rows], index=rows, dtype=object)
    return frame
