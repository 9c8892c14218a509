"""The history of the bug class: per backend and mode, release by release, what a reference
deployment meets (``workbench history``).

For every listed release of an engine (``data/engines/releases.json``) the release's learned data
(``workbench engines learn``: the rules, replays and gathers its own code gave) is put to the
models at a reference deployment: the seeds' three (QwQ-32B NGRAM on Ascend, GLM-5.2 EAGLE on
DSA, the NPU allocator's exact-fit decode) and one per other backend (ctx 32768, EAGLE 5/1/6 or,
for the pooled buffers of topk-aware drafters, EAGLE 5/4/8, at the backend's first page size).
Each cell is the first failing committed length (closed form, the step there and one below
executed), its outcome, and whether a run of that release reaches it (its scheduler's reach,
``analysis/reach.py``, or ``ctx - 1 + overshoot`` as a what-if; ``status``: ``reachable``,
``unreachable``, ``safe``), or why there is nothing to say: the release's own start-up checks refuse
the deployment (``refused``, with the engine's message: its learned ``startup`` section,
``engines/commands/startup_learn.py``; no run of it starts), the release has no such buffer (``absent``), its
code gave widths no rule of the model agrees with (``not modelled``), or it was not learned.

Nothing here is typed in per release: a fix shows up where a release's learned rule changes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd  # type: ignore[import-untyped]

from workbench import backends
from workbench.analysis.boundary import fast_boundary
from workbench.analysis.reach import default_reach
from workbench.analysis.records import probe_record
from workbench.analysis.seeds import EXACT_FIT, GLM_DSA, QWQ_NPU
from workbench.analysis.verdict_numbers import reached
from workbench.engines.store.releases import releases
from workbench.engines.store.startup_section import recipe_key, refusal
from workbench.engines.store.versions import EngineVersion, load_versions
from workbench.model.cases import Replay, TableCase
from workbench.model.geometry import Mode, ServingGeometry

STATUSES = ("reachable", "unreachable", "safe", "refused", "absent", "not modelled", "not learned")
NO_RESULT = ("refused", "absent", "not modelled", "not learned")  # a cell with nothing run: its status is its text
REFUSED_TEXT = "refused at start-up"
EAGLE_CHAIN = {"draft_tokens": 6, "spec_steps": 5, "spec_topk": 1, "draft_has_kv": True}
EAGLE_TREE = {"draft_tokens": 8, "spec_steps": 5, "spec_topk": 4, "draft_has_kv": True}


@dataclass(frozen=True)
class Reference:
    """One deployment a row of the history is about."""

    name: str
    component: str  # a table backend, a pooled backend, or "allocator"
    mode: str  # a graph mode, a pooled buffer's key, or "decode" for the allocator
    settings: dict[str, Any] = field(default_factory=dict)  # geometry fields (or the allocator's case)
    step_id: int = 0


def _seed_settings(case: dict[str, object]) -> dict[str, Any]:
    keys = ("context_len", "page_size", "draft_tokens", "spec_steps", "spec_topk", "draft_has_kv")
    return {k: case[k] for k in keys if k in case}


def references() -> list[Reference]:
    """The seeds' deployments in their own mode, then one deployment per other backend and mode."""
    qwq, glm = _seed_settings(QWQ_NPU.before), _seed_settings(GLM_DSA.before)
    # the seeds' backends, as their cases name them
    ascend, dsa = (backends.backend_of(str(seed.before["component"])).name for seed in (QWQ_NPU, GLM_DSA))
    out = [Reference("QwQ-32B NGRAM on Ascend, ctx 32768 (first seed)", ascend, "target-verify", qwq),
           Reference("GLM-5.2 EAGLE on DSA, ctx 90000 (second seed)", dsa, "target-verify", glm),
           Reference("exact-fit decode, ps 4 (third seed)", "allocator", "decode",
                     {k: v for k, v in EXACT_FIT.before.items() if k not in ("component", "gather")})]
    for backend in backends.table_backends():
        base = qwq if backend.name == ascend else glm if backend.name == dsa \
            else {"context_len": 32768, "page_size": backend.page_sizes[0], **EAGLE_CHAIN}
        for mode in backend.modes:
            if (backend.name, mode.value) in {(r.component, r.mode) for r in out}:
                continue
            settings = base if mode is not Mode.DRAFT_DECODE or base.get("draft_has_kv", True) else \
                {**base, **EAGLE_CHAIN}
            step = settings.get("spec_steps", 1) - 1 if mode is Mode.DRAFT_DECODE else 0
            out.append(Reference(f"ctx {settings['context_len']}, ps {settings['page_size']}", backend.name, mode.value,
                                 settings, step))
    for pooled in backends.POOLED_BACKENDS:
        for buffer in pooled.buffers:
            recipe = EAGLE_TREE if buffer.attention != "mla" else EAGLE_CHAIN
            out.append(Reference("ctx 32768, ps 1, max_bs 16", pooled.name, buffer.key,
                                 {"context_len": 32768, "page_size": 1, "max_bs": 16, **recipe}))
    return out


def _geometry(reference: Reference, width_gen: str) -> ServingGeometry:
    return ServingGeometry(**{"max_bs": 1, **reference.settings, "width_gen": width_gen})


@functools.lru_cache(maxsize=4096)
def _table_boundary(component: str, rule: str, replay: str, mode: str, step_id: int,
                    geometry: ServingGeometry, options: tuple[tuple[str, str], ...] = ()) -> tuple[int | None, str, str | None]:
    """The first failing committed length (closed form, executed there and one below), its outcome
    and torch's message: the same for every release with the same rule, replay, options and geometry."""
    backend = backends.backend_of(component)
    case = TableCase(component=backend.label, geometry=geometry, rule=rule, mode=Mode.parse(mode), step_id=step_id,
                     replay=Replay.parse(replay), seq_lens=(1,), options=options)
    found = fast_boundary(case)
    failing = found.failing
    return found.first_failing_seq_len, failing.outcome.value if failing else "ok", failing.error if failing else None


@functools.lru_cache(maxsize=4096)
def _pooled_boundary(component: str, key: str, rule: str, check: str,
                     geometry: ServingGeometry) -> tuple[int | None, str, str | None]:
    """The worst batch's first failing committed length (closed form; the batch executed there and
    one below), its outcome and message."""
    buffer = backends.pooled_backend_of(component).buffer(key)
    first = buffer.first_failure(geometry, rule)
    if first is None:
        return None, "ok", None
    batch = buffer.worst_batch(geometry)
    failing = buffer.probe(geometry, rule, check, [first] * batch)
    below = buffer.probe(geometry, rule, check, [first - 1] * batch)
    if not failing.outcome.failed or below.outcome.failed:
        raise AssertionError(f"{component} {key}: the closed form's boundary {first} did not execute as predicted")
    return first, failing.outcome.value, failing.error


def _reached(release: str, geometry: ServingGeometry, mode: Mode, step_id: int, overshoot: int | None,
             first: int | None, outcome: str, error: str | None, algorithm: str | None) -> dict[str, Any]:
    """The cell: the boundary against the release's own reach (its scheduler's, or ``ctx - 1 +
    overshoot`` as a what-if), capped at what the request table holds in the mode."""
    where = default_reach(release, geometry, Mode.TARGET_VERIFY if mode is Mode.DRAFT_EXTEND else mode, step_id,
                          overshoot=overshoot, algorithm=algorithm)
    reachable = min(where.largest_committed, where.table_bound)
    status = "safe" if first is None else "reachable" if reached(first, reachable) else "unreachable"
    return {"first_failing": first, "outcome": outcome, "error": error, "reachable_len": reachable, "status": status}


def _allocator_cell(reference: Reference, gather: str) -> dict[str, Any]:
    record = probe_record({"component": "allocator", "gather": gather, **reference.settings}, "cpu")
    failed = record["outcome"] != "ok"
    return {"first_failing": None, "outcome": record["outcome"], "error": record.get("error"), "reachable_len": None,
            "status": "reachable" if failed else "safe"}


def _why_not(version: EngineVersion, component: str, name: str) -> str:
    """``absent`` or ``not modelled`` for a field the release's data has no value for."""
    fact = version.facts.get("backends", {}).get(component, {}).get(name)
    return "absent" if isinstance(fact, dict) and fact.get("how") == "absent" else "not modelled"


def cell(release: str, version: EngineVersion | None, reference: Reference,
         overshoot: int | None = None) -> dict[str, Any]:
    if version is None:
        return {"status": "not learned"}
    fields = version.case_fields(reference.component)
    width_gen = str(version.common.get("width_gen", "g1"))
    if reference.component == "allocator":
        gather = fields.get("gather")
        return _allocator_cell(reference, str(gather)) if gather else {"status": _why_not(version, "allocator", "gather")}
    g = _geometry(reference, width_gen)
    refused = refusal(version.engine, reference.component, recipe_key(g), g.page_size)
    if refused is not None:  # the release does not start the deployment: nothing a run of it meets
        return {"status": "refused", "startup_refusal": refused}
    algorithm = "NGRAM" if not g.draft_has_kv else None
    if backends.is_pooled_backend(reference.component):
        entry = fields.get(reference.mode)
        if not isinstance(entry, dict):
            return {"status": _why_not(version, reference.component, reference.mode)}
        buffer = backends.pooled_backend_of(reference.component).buffer(reference.mode)
        found = _pooled_boundary(reference.component, reference.mode, str(entry["rule"]), str(entry["check"]), g)
        return {"rule": entry["rule"], "check": entry["check"],
                **_reached(release, g, buffer.mode, 0, overshoot, *found, algorithm)}
    rule = fields.get("rule")
    if rule is None:
        return {"status": _why_not(version, reference.component, "rule")}
    if len(backends.backend_of(reference.component).replays) > 1 and "replay" not in fields:
        return {"status": "not modelled"}  # the backend's replay varies by release, and this one's was not learned
    replay = str(fields.get("replay", "dynamic"))
    options = backends.backend_of(reference.component).options_of(fields)
    found = _table_boundary(reference.component, str(rule), replay, reference.mode, reference.step_id, g, options)
    return {"rule": rule, "replay": replay,
            **_reached(release, g, Mode.parse(reference.mode), reference.step_id, overshoot, *found, algorithm)}


def history(engine: str = "sglang", *, overshoot: int | None = None, only: Sequence[str] = ()) -> pd.DataFrame:
    """One row per listed release x reference deployment (``only``: those of these backends)."""
    versions = load_versions()
    rows = []
    for release in releases(engine):
        # a .postN whose learned data equal its base release's ships no file of its own (docs/releases.md)
        base = release.split(".post")[0]
        version = versions.get(release) or (versions.get(base) if base != release else None)
        for reference in references():
            if only and reference.component not in only:
                continue
            rows.append({"release": release, "data_from": version.engine if version else None,
                         "backend": reference.component, "mode": reference.mode, "reference": reference.name,
                         **cell(release, version, reference, overshoot)})
    return pd.DataFrame(rows)


def _cell_text(row: pd.Series) -> str:
    if row.status == "refused":
        return REFUSED_TEXT
    if row.status in NO_RESULT:
        return str(row.status)
    if row.status == "safe":
        return "safe"
    where = f" at {int(row.first_failing)}" if pd.notna(row.first_failing) else ""
    return f"{row.outcome}{where} ({row.status})"


def format_history(frame: pd.DataFrame) -> str:
    """Per backend and mode, the runs of consecutive releases that meet the same: when an overflow
    appeared, when a fix landed, which releases to avoid (``reachable``), which refuse the deployment at
    start-up (the engine's message after the runs)."""
    lines = []
    for (backend, mode), rows in frame.groupby(["backend", "mode"], sort=False):
        runs: list[list[str]] = []
        for _, row in rows.iterrows():
            text = _cell_text(row)
            if runs and runs[-1][2] == text:
                runs[-1][1] = str(row.release)
            else:
                runs.append([str(row.release), str(row.release), text])
        spans = "; ".join(f"{_short(a)}{'' if a == b else '-' + _short(b)} {text}" for a, b, text in runs)
        lines.append(f"{backend} {mode} ({rows.iloc[0].reference}):\n    {spans}")
        if "startup_refusal" in rows:
            for release, message in zip(rows.release, rows.startup_refusal):
                if isinstance(message, str):
                    lines.append(f"    {_short(release)} {REFUSED_TEXT}: {message}")
    return "\n".join(lines)


def _short(release: str) -> str:
    return release.split("==", 1)[1]
