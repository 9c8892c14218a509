"""The atlas over every release: releases whose data give a backend the same fields, and whose
scheduler reaches the same lengths, share its rows.

Forty-odd SGLang releases carry a handful of distinct rules per backend (FA3's is ``context`` in
every one of them), so the atlas configures, executes and runs each backend's rows once per
distinct set of fields (``distinct``: the first release that has it stands for the others) and
copies those rows to every release with the same fields (``shared_rows``: the same computation,
under each release's name). A row of a release is therefore confirmed by the execution of the
same state as any other release's with identical data.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

import pandas as pd  # type: ignore[import-untyped]

from workbench import backends
from workbench.engines.store.versions import EngineVersion, load_versions

POOLED = "*pooled*"  # the key of every pooled backend's fields together


def default_versions() -> list[EngineVersion]:
    """Every release with data (learned, or an entry of ``data/engines.json``); pseudo-versions
    (``+revert-...``) only when asked for by name."""
    return [v for v in load_versions().values() if v.pseudo is None and "+" not in v.engine]


@functools.lru_cache(maxsize=256)
def reach_key(engine: str) -> str:
    """What a release's reach rests on (its scheduler's facts, or the constant standing in for
    them), without its name: releases with the same key reach the same committed lengths."""
    import dataclasses

    from workbench.analysis.reach import rule_for

    try:
        rule = dataclasses.asdict(rule_for(engine))
    except (KeyError, ValueError) as error:  # no launch data at all: the rows say so when they are made
        return f"unknown: {error}"
    rule.pop("engine", None)
    rule.pop("sources", None)
    if rule.get("scheduler"):
        rule["scheduler"].pop("sources", None)
    return json.dumps(rule, sort_keys=True, default=str)


def _key(version: EngineVersion, component: str, keys: Sequence[str], reach: bool = True) -> str:
    fields: dict[str, object]
    if component == POOLED:
        fields = {b.name: dict(version.fields.get(b.name, {})) for b in backends.POOLED_BACKENDS}
    else:
        fields = {k: v for k, v in version.fields.get(component, {}).items() if k in keys}
    return json.dumps([fields, version.common.get("width_gen"), reach_key(version.engine) if reach else ""], sort_keys=True)


def _has(version: EngineVersion, component: str) -> bool:
    if component == POOLED:
        return any(isinstance(v, dict) for b in backends.POOLED_BACKENDS for v in version.fields.get(b.name, {}).values())
    fields = version.fields.get(component, {})
    # a backend whose replay varies by release needs the release's own (no default stands in for it)
    return "rule" in fields and (len(backends.backend_of(component).replays) == 1 or "replay" in fields)


def distinct(versions: Sequence[EngineVersion], component: str, keys: Sequence[str]) -> list[EngineVersion]:
    """The first of ``versions`` with each distinct set of ``component``'s fields (``keys``),
    width generation and reach; versions without data for it are left out (no row rather than a guess)."""
    return [first for first, _ in sharing(versions, component, keys)]


def sharing(versions: Sequence[EngineVersion], component: str, keys: Sequence[str],
            reach: bool = True) -> list[tuple[EngineVersion, list[str]]]:
    """The first of ``versions`` with each distinct set of ``component``'s fields (``keys``) and width
    generation (and reach, unless ``reach`` is False: boundaries do not depend on it), each with
    every version that shares them, in the order of ``versions``."""
    groups: dict[str, tuple[EngineVersion, list[str]]] = {}
    for version in versions:
        if _has(version, component):
            groups.setdefault(_key(version, component, keys, reach), (version, []))[1].append(version.engine)
    return list(groups.values())


def shared_rows(rows: list[dict[str, object]], versions: Sequence[EngineVersion], keys: Sequence[str],
                component: str | None = None) -> list[dict[str, object]]:
    """``rows`` (made for the ``distinct`` representatives) copied to every version with the same
    fields, each copy under that version's name, in the order of ``versions``."""
    by_backend: dict[str, dict[str, list[str]]] = {}  # backend -> representative -> its sharers

    def sharers(backend: str) -> dict[str, list[str]]:
        if backend not in by_backend:
            groups: dict[str, list[str]] = {}
            first: dict[str, str] = {}
            for version in versions:
                if _has(version, backend):
                    key = _key(version, backend, keys)
                    groups.setdefault(first.setdefault(key, version.engine), []).append(version.engine)
            by_backend[backend] = groups
        return by_backend[backend]
    out = []
    for row in rows:
        backend = component or backends.backend_of(str(row["backend"])).name
        for engine in sharers(backend).get(str(row["engine"]), [str(row["engine"])]):
            out.append({**row, "engine": engine})
    order = {v.engine: i for i, v in enumerate(versions)}
    return sorted(out, key=lambda r: order.get(str(r["engine"]), len(order)))


def content_key(row: object) -> str:
    """A summary row's content without the release's name: rows of releases with the same data
    have the same key, and one execution (a run, a boundary) confirms all of them."""
    items = row.items() if hasattr(row, "items") else []
    return json.dumps({str(k): str(v) for k, v in items if k != "engine"}, sort_keys=True)


def collapse_releases(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with consecutive releases whose rows for a backend are the same (every mode:
    status, outcome, first failing length, margin, rule) merged into one row named by their span
    (``sglang==0.5.16 … 0.5.23``), so forty releases draw as the handful of distinct ones. Rows the
    releases refuse at start-up are the same only with the same messages."""
    same = ["mode", "rule", "status", "outcome", "first_failing_seq_len", "margin"]
    same += ["startup_refusal"] if "startup_refusal" in summary else []
    order = {v.engine: i for i, v in enumerate(load_versions().values())}
    parts = []
    for _, rows in summary.groupby("backend", sort=False):
        spans: list[tuple[list[str], pd.DataFrame]] = []
        for engine in sorted(set(rows.engine), key=lambda e: order.get(e, len(order))):
            mine = rows[rows.engine == engine].sort_values("mode")
            content = mine[same].astype(str).to_numpy().tolist()
            if spans and spans[-1][1][same].astype(str).to_numpy().tolist() == content \
                    and engine.split("==")[0] == spans[-1][0][0].split("==")[0]:
                spans[-1][0].append(engine)
            else:
                spans.append(([engine], mine))
        for engines, mine in spans:
            label = engines[0] if len(engines) == 1 else f"{engines[0]} … {engines[-1].split('==', 1)[1]}"
            parts.append(mine.assign(engine=label))
    return pd.concat(parts, ignore_index=True) if parts else summary
