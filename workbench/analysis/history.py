"""The history of the bug class: per backend and mode, release by release, what a reference
deployment meets (``workbench history``).

For every listed release of an engine (``data/engines/releases.json``) the release's learned data
(``workbench engines learn``: the rules, replays and gathers its own code gave) is put to the
models at a reference deployment: the seeds' three (QwQ-32B NGRAM on Ascend, GLM-5.2 EAGLE on
DSA, the NPU allocator's exact-fit decode) and one per other backend (ctx 32768, EAGLE 5/1/6 or,
for the pooled buffers of topk-aware drafters, EAGLE 5/4/8, at the backend's first page size).
Each cell is the first failing committed length (closed form, the step there and one below
executed), its outcome, and whether a run reaches it (``status``: ``reachable``, ``unreachable``,
``safe``), or why there is nothing to say: the release has no such buffer (``absent``), its code
gave widths no rule of the model agrees with (``not modelled``), or it was not learned.

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
from workbench.analysis.records import probe_record
from workbench.analysis.seeds import EXACT_FIT, GLM_DSA, QWQ_NPU
from workbench.engines.releases import releases
from workbench.engines.versions import EngineVersion, load_versions
from workbench.model.cases import Replay, TableCase
from workbench.model.geometry import Mode, ServingGeometry

DEFAULT_OVERSHOOT = 2
STATUSES = ("reachable", "unreachable", "safe", "absent", "not modelled", "not learned")
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
    out = [Reference("QwQ-32B NGRAM on Ascend, ctx 32768 (first seed)", "sglang-ascend-block-tables",
                     "target-verify", qwq),
           Reference("GLM-5.2 EAGLE on DSA, ctx 90000 (second seed)", "sglang-dsa-page-table", "target-verify", glm),
           Reference("exact-fit decode, ps 4 (third seed)", "allocator", "decode",
                     {k: v for k, v in EXACT_FIT.before.items() if k not in ("component", "gather")})]
    for backend in backends.table_backends():
        base = qwq if backend.name == "sglang-ascend-block-tables" else glm if backend.name == "sglang-dsa-page-table" \
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
def _table_cell(component: str, rule: str, replay: str, mode: str, step_id: int, geometry: ServingGeometry,
                overshoot: int) -> dict[str, Any]:
    backend = backends.backend_of(component)
    case = TableCase(component=backend.label, geometry=geometry, rule=rule, mode=Mode.parse(mode), step_id=step_id,
                     replay=Replay.parse(replay), seq_lens=(1,))
    found = fast_boundary(case)
    reach = backend.reachable_len(geometry, case.mode, step_id, overshoot=overshoot)
    first = found.first_failing_seq_len
    return {"first_failing": first, "outcome": found.failing.outcome.value if found.failing else "ok",
            "error": found.failing.error if found.failing else None, "reachable_len": reach,
            "status": "safe" if first is None else "reachable" if first <= reach else "unreachable"}


@functools.lru_cache(maxsize=4096)
def _pooled_cell(component: str, key: str, rule: str, check: str, geometry: ServingGeometry,
                 overshoot: int) -> dict[str, Any]:
    buffer = backends.pooled_backend_of(component).buffer(key)
    first = buffer.first_failure(geometry, rule)
    reach = buffer.reachable_len(geometry, overshoot=overshoot)
    if first is None:
        return {"first_failing": None, "outcome": "ok", "error": None, "reachable_len": reach, "status": "safe"}
    batch = buffer.worst_batch(geometry)
    failing = buffer.probe(geometry, rule, check, [first] * batch)
    below = buffer.probe(geometry, rule, check, [first - 1] * batch)
    if not failing.outcome.failed or below.outcome.failed:
        raise AssertionError(f"{component} {key}: the closed form's boundary {first} did not execute as predicted")
    return {"first_failing": first, "outcome": failing.outcome.value, "error": failing.error, "reachable_len": reach,
            "status": "reachable" if first <= reach else "unreachable"}


def _allocator_cell(reference: Reference, gather: str) -> dict[str, Any]:
    record = probe_record({"component": "allocator", "gather": gather, **reference.settings}, "cpu")
    failed = record["outcome"] != "ok"
    return {"first_failing": None, "outcome": record["outcome"], "error": record.get("error"), "reachable_len": None,
            "status": "reachable" if failed else "safe"}


def _why_not(version: EngineVersion, component: str, name: str) -> str:
    """``absent`` or ``not modelled`` for a field the release's data has no value for."""
    fact = version.facts.get("backends", {}).get(component, {}).get(name)
    return "absent" if isinstance(fact, dict) and fact.get("how") == "absent" else "not modelled"


def cell(version: EngineVersion | None, reference: Reference, overshoot: int = DEFAULT_OVERSHOOT) -> dict[str, Any]:
    if version is None:
        return {"status": "not learned"}
    fields = version.case_fields(reference.component)
    width_gen = str(version.common.get("width_gen", "g1"))
    if reference.component == "allocator":
        gather = fields.get("gather")
        return _allocator_cell(reference, str(gather)) if gather else {"status": _why_not(version, "allocator", "gather")}
    if backends.is_pooled_backend(reference.component):
        entry = fields.get(reference.mode)
        if not isinstance(entry, dict):
            return {"status": _why_not(version, reference.component, reference.mode)}
        return {"rule": entry["rule"], "check": entry["check"],
                **_pooled_cell(reference.component, reference.mode, str(entry["rule"]), str(entry["check"]),
                               _geometry(reference, width_gen), overshoot)}
    rule = fields.get("rule")
    if rule is None:
        return {"status": _why_not(version, reference.component, "rule")}
    if len(backends.backend_of(reference.component).replays) > 1 and "replay" not in fields:
        return {"status": "not modelled"}  # the backend's replay varies by release, and this one's was not learned
    replay = str(fields.get("replay", "dynamic"))
    return {"rule": rule, "replay": replay,
            **_table_cell(reference.component, str(rule), replay, reference.mode, reference.step_id,
                          _geometry(reference, width_gen), overshoot)}


def history(engine: str = "sglang", *, overshoot: int = DEFAULT_OVERSHOOT,
            only: Sequence[str] = ()) -> pd.DataFrame:
    """One row per listed release x reference deployment (``only``: those of these backends)."""
    versions = load_versions()
    rows = []
    for release in releases(engine):
        # a .postN whose learned data equal its base release's ships no file of its own (README)
        base = release.split(".post")[0]
        version = versions.get(release) or (versions.get(base) if base != release else None)
        for reference in references():
            if only and reference.component not in only:
                continue
            rows.append({"release": release, "data_from": version.engine if version else None,
                         "backend": reference.component, "mode": reference.mode, "reference": reference.name,
                         **cell(version, reference, overshoot)})
    return pd.DataFrame(rows)


def _cell_text(row: pd.Series) -> str:
    if row.status in ("absent", "not modelled", "not learned"):
        return str(row.status)
    if row.status == "safe":
        return "safe"
    where = f" at {int(row.first_failing)}" if pd.notna(row.first_failing) else ""
    return f"{row.outcome}{where} ({row.status})"


def format_history(frame: pd.DataFrame) -> str:
    """Per backend and mode, the runs of consecutive releases that meet the same: when an overflow
    appeared, when a fix landed, which releases to avoid (``reachable``)."""
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
    return "\n".join(lines)


def _short(release: str) -> str:
    return release.split("==", 1)[1]
