"""The bug-class atlas: every modelled table, engine version and mode, over realistic settings.

For each backend the registry lists, each engine version of ``data/engines.json`` that says which
rule the backend ships, and each mode the backend captures, the atlas runs the model presets
(``data/presets.json``) at their own context length and at shorter common ``--context-length``
settings, under their own speculative recipe, EAGLE (5, 4, 8), NGRAM (16 drafts, breadth 1) and no
speculation, at the page sizes the backend runs with. A setting a release's own start-up checks refuse
(``startup_learn``: NGRAM's breadth 10 at a page size above 1 off FlashInfer, TRT-LLM MHA with topk
above 1, NGRAM on an NPU, in 0.5.23) is not run: its row says ``refused`` with the engine's message
(``startup_refusal``), so a cell whose every setting the release refuses reads "refused at
start-up", never "not modelled". Per started setting it finds the first failing
committed length over everything the request table holds (closed form, confirmed by executing the
step at it and the one below), the largest committed length a real run reaches (the backend's
``reachable_len``: the scheduler's cap plus ``overshoot``), the margin between them, and the bytes a
safe width costs over the engine's.

    margin = first_failing - reachable - 1     negative: a real run reaches the failure

A setting is ``safe`` (nothing the table holds fails), ``unreachable`` (a failure past what a run
reaches), ``reachable`` (a run gets there) or ``refused`` (the release does not start it).
``summarize`` keeps one row per backend, version and mode: its worst started setting, or, where the
release refuses every setting, a ``refused`` row carrying each distinct refusal.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import pandas as pd  # type: ignore[import-untyped]

from workbench import backends
from workbench.analysis.executors import Executor, run_chunks
from workbench.analysis.memory import ModelPreset, buffer_bytes, load_presets, min_safe_bytes
from workbench.analysis.probe import table_case_problem
from workbench.analysis.verdict_numbers import kv_budget_bytes, kv_share, reached
from workbench.analysis.verdict_numbers import margin as margin_of
from workbench.atlas import pooled as pooled_atlas
from workbench.atlas import reqtable as reqtable_atlas
from workbench.atlas.boundaries import BoundaryStore, Found, execute
from workbench.atlas.reaches import Reaches
from workbench.atlas.releases import content_key, default_versions, distinct, shared_rows, sharing
from workbench.backends.base import TableBackend
from workbench.backends.case_backend import CaseBackend
from workbench.engines.store.startup_section import recipe_key, refusal, row_refusal
from workbench.engines.store.versions import EngineVersion, load_versions
from workbench.model.cases import Replay, TableCase
from workbench.model.geometry import Mode, ServingGeometry
from workbench.model.outcome import ProbeResult

COMMON_CONTEXTS = (32768, 131072)  # --context-length settings run below a model's own
DEFAULT_OVERSHOOT: int | None = None  # None: the scheduler's reach; an integer is a what-if (ctx - 1 + it)
CHUNK = 100  # settings a chunk of rows holds (the rows' order follows it)
CASE_CHUNK = 500  # distinct cases a worker computes at a time
REFUSED = "refused"  # the release's start-up checks refuse the setting: no run, no boundary
STATUS_ORDER = ("reachable", "unreachable", "safe", REFUSED)  # worst first; a refused setting is no run
# What names a setting's row without running it: a refused setting's row holds these, its status and the message
SETTING_COLUMNS = ("engine", "backend", "rule", "width_gen", "replay", "mode", "step_id", "preset", "recipe",
                   "context_len", "page_size", "draft_tokens", "spec_steps", "spec_topk", "draft_has_kv", "max_bs",
                   "request_table_width", "buffer_unit")
# Integers with gaps (a safe row has no first failing length; a refused one has no run at all)
INTEGER_COLUMNS = ("first_failing_seq_len", "margin", "reachable_len", "scheduler_reach", "buffer_width", "engine_bytes",
                   "safe_bytes", "extra_bytes", "kv_budget_bytes")


@dataclass(frozen=True)
class Setting:
    """One launch: a model preset, a context length, a speculative recipe and a page size."""

    preset: ModelPreset
    recipe: str  # "own", "eagle-5-4-8", "ngram-16", "off"
    geometry: ServingGeometry


def _recipes(preset: ModelPreset) -> dict[str, dict[str, object]]:
    return {
        "own": {"draft_tokens": preset.draft_tokens, "spec_steps": preset.spec_steps, "spec_topk": preset.spec_topk,
                "draft_has_kv": preset.draft_has_kv},
        "eagle-5-4-8": {"draft_tokens": 8, "spec_steps": 5, "spec_topk": 4, "draft_has_kv": True},
        # Breadth 1: 0.5.23 refuses NGRAM's default breadth 10 (its topk) at a page size above 1 on
        # every backend but FlashInfer (_handle_ngram, srt/arg_groups/speculative_hook.py:1355-1366);
        # breadth 1 starts on each of them (tests/test_repro.py resolves every finding's command).
        "ngram-16": {"draft_tokens": 16, "spec_steps": 1, "spec_topk": 1, "draft_has_kv": False},
        "off": {"draft_tokens": 0, "spec_steps": 1, "spec_topk": 1, "draft_has_kv": True},
    }


def settings(page_sizes: Sequence[int], width_gen: str, presets: Sequence[ModelPreset]) -> list[Setting]:
    out = []
    for preset in presets:
        contexts = sorted({preset.context_len, *(c for c in COMMON_CONTEXTS if c < preset.context_len)})
        for ctx in contexts:
            for recipe, spec in _recipes(preset).items():
                for ps in page_sizes:
                    g = preset.geometry.replace(context_len=ctx, page_size=ps, width_gen=width_gen, **spec)
                    out.append(Setting(preset, recipe, g))
    return out


def _modes(backend: TableBackend, g: ServingGeometry) -> list[tuple[Mode, int]]:
    """(mode, step_id) pairs the backend captures for ``g``; draft steps at their last step."""
    modes = []
    for mode in backend.modes:
        step_id = g.spec_steps - 1 if mode is Mode.DRAFT_DECODE else 0
        if g.invalid_mode_reason(mode, step_id) is None:
            modes.append((mode, step_id))
    return modes


@dataclass(frozen=True)
class AtlasConfig:
    engine: str
    backend: str  # the backend's label
    setting: Setting
    case: TableCase
    sharers: tuple[str, ...] = ()  # the releases whose data give the same boundary (engine first); () = engine alone
    refused: tuple[tuple[str, str], ...] = ()  # (release, the engine's message): sharers that refuse the setting

    @property
    def started_by(self) -> tuple[str, ...]:
        """The releases that start the setting: each gets a row with the boundary."""
        return self.sharers if self.sharers or self.refused else (self.engine,)


def configurations(engines: Sequence[str] | None = None, presets: Sequence[ModelPreset] | None = None, *,
                   with_refused: bool = False) -> list[AtlasConfig]:
    """Every backend x version (that names the backend's rule) x setting x mode, valid states only.

    Releases whose data give a backend the same rule, replay and width generation have the same
    boundaries: only the first of them is configured, with the releases that share it (``sharers``:
    each gets its own row, at its own reach). Releases whose start-up checks refuse the setting are
    in ``refused``; a setting every sharer refuses is configured only ``with_refused``."""
    versions = load_versions()
    chosen: list[EngineVersion] = [versions[e] for e in engines] if engines else default_versions()
    presets = list(presets) if presets is not None else load_presets()
    # Each release's answer read once: ``refusal`` looks its learned file up on every call
    refused = functools.lru_cache(maxsize=None)(refusal)
    out = []
    for backend in backends.table_backends():
        keys = ("rule", "replay", "width_gen", *backend.case_options)
        for version, sharers in sharing(chosen, backend.name, keys, reach=False):
            fields = version.case_fields(backend.name)
            replay = Replay.parse(str(fields.get("replay", "dynamic")))
            for setting in settings(backend.page_sizes, str(fields.get("width_gen", "g1")), presets):
                g = setting.geometry
                # The releases that start this setting, and those whose own start-up checks refuse it
                said = {e: refused(e, backend.name, recipe_key(g), g.page_size) for e in sharers}
                starting = tuple(e for e, message in said.items() if message is None)
                refusing = tuple((e, message) for e, message in said.items() if message is not None)
                if not starting and not with_refused:
                    continue
                for mode, step_id in _modes(backend, g):
                    case = TableCase(component=backend.label, geometry=g, rule=str(fields["rule"]),
                                     mode=mode, step_id=step_id, replay=replay, seq_lens=(1,),
                                     options=backend.options_of(fields))
                    if table_case_problem(case) is None:
                        out.append(AtlasConfig(version.engine, backend.label, setting, case, starting, refusing))
    return out


def _execute(store: BoundaryStore, cases: Sequence[TableCase], device: str, executor: Executor,
             confirm: bool = False) -> None:
    """The boundaries of ``cases`` executed (``boundaries.execute``), in chunks on the executor's
    cores, and kept in ``store``."""
    args = [(cases[i : i + CASE_CHUNK], device, confirm) for i in range(0, len(cases), CASE_CHUNK)]
    parts: dict[int, list[Found]] = {}
    for index, found in run_chunks(execute, args, executor, device=device, num_configs=len(cases)):
        parts[index] = found
    store.add(cases, [f for i in sorted(parts) for f in parts[i]])


def _rows(configs: Sequence[AtlasConfig], store: BoundaryStore,
          reaches: Reaches) -> list[tuple[dict[str, object], TableCase | None]]:
    """One chunk's rows, each with the state it ran (None: refused): a started setting's with its
    case's boundary, under each release that starts it; a refused one's with the engine's message."""
    rows: list[tuple[dict[str, object], TableCase | None]] = [
        (_row(replace(c, engine=engine), store[c.case].first_failing_seq_len, store[c.case].failing,
              reaches.overshoot, reaches), c.case)
        for c in configs if c.started_by for engine in c.started_by]
    return rows + [(refused_row(_setting_row(replace(c, engine=engine)), message), None)
                   for c in configs for engine, message in c.refused]


def _setting_row(config: AtlasConfig) -> dict[str, object]:
    """What names a table setting's row (``SETTING_COLUMNS``), nothing run."""
    case, g = config.case, config.case.geometry
    return {"engine": config.engine, "backend": config.backend, "rule": case.rule, "width_gen": g.width_gen,
            "replay": case.replay.value, "mode": case.mode.value, "step_id": case.step_id,
            "preset": config.setting.preset.name, "recipe": config.setting.recipe, "context_len": g.context_len,
            "page_size": g.page_size, "draft_tokens": g.draft_tokens, "spec_steps": g.spec_steps,
            "spec_topk": g.spec_topk, "draft_has_kv": g.draft_has_kv, "max_bs": g.max_bs,
            "request_table_width": g.request_table_width, "buffer_unit": backends.backend_of(case.component).unit}


def refused_row(row: dict[str, object], message: str) -> dict[str, object]:
    """A setting's row as one the release refuses at start-up: what names the setting, ``status``
    ``refused`` and the engine's message; no boundary, reach or outcome (nothing ran)."""
    return {**{k: row[k] for k in SETTING_COLUMNS if k in row}, "status": REFUSED, "outcome": None,
            "startup_refusal": message}


def _row(config: AtlasConfig, first: int | None, failing: ProbeResult | None, overshoot: int | None,
         reaches: Reaches | None = None) -> dict[str, object]:
    """A started setting's row; ``reaches``: the atlas's reaches kept (at the same ``overshoot``)."""
    reaches = reaches if reaches is not None and reaches.overshoot == overshoot else Reaches(overshoot)
    case, g = config.case, config.case.geometry
    backend = backends.backend_of(case.component)
    algorithm = "NGRAM" if config.setting.recipe == "ngram-16" or not g.draft_has_kv else None
    # The row's own mode, as the preflight's rows take it (draft-extend: spec v2's s + D).
    where = reaches.at(config.engine, g, case.mode, case.step_id, algorithm)
    # A serving run (``confirm_by_run``: verify steps) cannot be walked past the request table: the
    # row's reach stops at the table's bound in its mode and at a verify's W - D (plus the window a
    # draft-extend replay carries past the batch's committed length).
    window = draft_extend_window(config.engine, g, reaches.overshoot, algorithm, reaches) \
        if case.mode is Mode.DRAFT_EXTEND else 0
    walkable = g.max_committed_len(Mode.TARGET_VERIFY) + window if g.speculative else where.table_bound
    reachable = min(where.largest_committed, where.table_bound, walkable)
    margin = margin_of(first, reachable)
    status = "safe" if first is None else ("reachable" if reached(first, reachable) else "unreachable")
    engine_bytes = buffer_bytes(case.component, g, case.rule, case.mode)
    safe_bytes = min_safe_bytes(case.component, g, case.mode)
    kv_budget = kv_budget_bytes(g.max_bs, g.context_len, config.setting.preset.kv_bytes_per_token)  # this setting's
    return {
        **_setting_row(config), "buffer_width": backend.width(g, case.rule),
        "first_failing_seq_len": first, "outcome": failing.outcome.value if failing is not None else "ok",
        "error": failing.error if failing is not None else None,
        "reachable_len": reachable, "margin": margin, "status": status,
        "engine_bytes": engine_bytes, "safe_bytes": safe_bytes, "extra_bytes": max(0, safe_bytes - engine_bytes),
        "kv_budget_bytes": kv_budget, "extra_share_of_kv": kv_share(safe_bytes - engine_bytes, kv_budget),
        "reach_why": where.why, "scheduler_reach": where.largest_committed,
    }


def draft_extend_window(engine: str, g: ServingGeometry, overshoot: int | None = None,
                        algorithm: str | None = None, reaches: Reaches | None = None) -> int:
    """Tokens a draft-extend step's lengths carry past its batch's committed length: the difference of
    the two reaches (``default_reach``; ``reaches``, at the same overshoot, where one is kept), D
    under spec v2, none under v1's accepted-only extend."""
    memo = reaches if reaches is not None and reaches.overshoot == overshoot else Reaches(overshoot)
    extend = memo.at(engine, g, Mode.DRAFT_EXTEND, 0, algorithm)
    verify = memo.at(engine, g, Mode.TARGET_VERIFY, 0, algorithm)
    return max(0, min(g.draft_tokens, extend.largest_committed - verify.largest_committed))


def full_atlas(engines: Sequence[str] | None = None, **kwargs: object) -> pd.DataFrame:
    """``run_atlas``'s rows and, unless engines are chosen, the case backends' seed deployments."""
    frame = run_atlas(engines, **kwargs)  # type: ignore[arg-type]
    if engines:
        return frame
    return pd.concat([frame, case_backend_rows(str(kwargs.get("device", "cpu")))], ignore_index=True)


def run_atlas(engines: Sequence[str] | None = None, *, overshoot: int | None = DEFAULT_OVERSHOOT, device: str = "cpu",
              executor: Executor | None = None, presets: Sequence[ModelPreset] | None = None) -> pd.DataFrame:
    """One row per backend, version, setting and mode (see the module note)."""
    if overshoot is not None and (isinstance(overshoot, bool) or not isinstance(overshoot, int) or not 0 <= overshoot <= 1024):
        raise ValueError(f"overshoot: {overshoot!r} is out of range (allowed: integers 0 to 1024)")
    versions = load_versions()
    for engine in engines or ():
        if engine not in versions:
            raise ValueError(f"engine: {engine!r} is not a modelled version (allowed: {', '.join(versions)})")
    configs = configurations(engines, presets, with_refused=True)
    # Settings of different presets or recipes can be the same table state: each distinct case is
    # computed and executed once (in chunks, on the executor's cores), its boundary shared by their rows.
    cases = list(dict.fromkeys(c.case for c in configs if c.started_by))
    store = BoundaryStore(device)
    executor = executor or Executor()
    _execute(store, store.missing(cases), device, executor)
    reaches = Reaches(overshoot)
    # Rows in the order they always came in: chunk by chunk of settings, each chunk's started rows
    # before its refused ones, then every release's together (a stable sort)
    chunks = [_rows(configs[i : i + CHUNK], store, reaches) for i in range(0, len(configs), CHUNK)]
    chosen = [versions[e] for e in engines] if engines else default_versions()
    order = {v.engine: i for i, v in enumerate(chosen)}
    pairs = sorted((pair for part in chunks for pair in part), key=lambda p: order.get(str(p[0]["engine"]), len(order)))
    # The states of the rows the summary shows (``summarize``'s worst): the step on the other side of
    # each boundary executed too, so what the summary says is confirmed on both sides
    shown = _worst(pd.DataFrame({k: [r[k] for r, _ in pairs] for k in ("backend", "engine", "mode", "status")})
                   .assign(margin=pd.array([r.get("margin") for r, _ in pairs], dtype="Int64")))
    summary_cases = list(dict.fromkeys(case for i in shown.index if (case := pairs[i][1]) is not None))
    _execute(store, store.missing(summary_cases, confirmed=True), device, executor, confirm=True)
    store.save()
    rows = [r for r, _ in pairs]
    # a pooled buffer's setting the release refuses at start-up: its row says so, as the table rows do
    said: dict[tuple[object, ...], str | None] = {}  # each setting's refusal read once (``row_refusal``)

    def refused(r: dict[str, object]) -> str | None:
        key = tuple(r[k] for k in ("engine", "backend", "draft_tokens", "spec_steps", "spec_topk", "draft_has_kv",
                                   "page_size"))
        if key not in said:
            said[key] = row_refusal(r)
        return said[key]

    rows += [refused_row(r, message) if (message := refused(r)) else r
             for r in _module_rows(pooled_atlas, chosen, presets, reaches)]
    rows += _module_rows(reqtable_atlas, chosen, presets, reaches)
    frame = pd.DataFrame(rows)
    return frame.astype({column: "Int64" for column in INTEGER_COLUMNS if column in frame})


def _module_rows(module: ModuleType, chosen: Sequence[EngineVersion], presets: Sequence[ModelPreset] | None,
                 reaches: Reaches) -> list[dict[str, object]]:
    """The rows of an atlas module that builds its own (``pooled_atlas``: the flat buffers pooled across a
    batch; ``reqtable_atlas``: the request table written by the speculative reservation), every version,
    at the module's page sizes. A module that names ``SHARED_BY`` (its data key and fields) is run once
    per distinct set of those fields, its rows copied to the releases that share them."""
    presets = list(presets) if presets is not None else load_presets()
    shared = getattr(module, "SHARED_BY", None)
    rows = []
    for version in distinct(chosen, *shared) if shared else chosen:
        grid = settings(module.PAGE_SIZES, str(version.common.get("width_gen", "g1")), presets)
        for config in module.configurations([version], [(s.preset, s.recipe, s.geometry) for s in grid]):
            rows.append(module.row(config, reaches.overshoot, reaches))
    return shared_rows(rows, chosen, shared[1], component=shared[0]) if shared else rows


def case_backend_rows(device: str = "cpu") -> pd.DataFrame:
    """The backends that bring their own case (vLLM's), at their seed deployments: the public
    crash reports' launch settings, failing and passing, each at its own engine version, and the
    failing deployment under every release the backend has data for (``release_cases``).

    A case whose scan field is a request's length (V0's ``seq_lens``) is searched over every
    length its graph replays: the first failing one is reachable when it lies in that range. A
    case whose scan field is a launch setting (the indexer's ``max_model_len``) is that deployment
    alone: its own probe says whether every such step fails. Margins are in the scan field's units.
    """
    rows = []
    for backend in backends.CASE_BACKENDS:
        for seed in backend.seeds:
            cases = (seed.failing, *seed.passing)
            cases += tuple(c for c in backend.release_cases() if c not in cases)  # every release with data
            for data in cases:
                case = backend.parse(data)
                own = backend.probe(case, device)
                low, high = backend.scan_range(case)
                if backend.scan_is_request_length:
                    found = backend.boundary(case, device)
                    first, failing, reachable = found.first_failing, found.failing, high
                else:
                    value = scanned_value(backend, case)
                    first, failing, reachable = (value, own, value) if own.outcome.failed else (None, None, value)
                margin = None if first is None else first - reachable - 1
                status = "safe" if first is None else ("reachable" if first <= reachable else "unreachable")
                rows.append({
                    "engine": str(data.get("engine") or backend.engine), "backend": backend.name,
                    "mode": backend.atlas_mode,
                    "rule": seed.name, "scan_field": backend.scan_field, "first_failing_seq_len": first,
                    "reachable_len": reachable, "margin": margin, "status": status,
                    "outcome": failing.outcome.value if failing is not None else "ok",
                    "error": failing.error if failing is not None else None,
                    "preset": seed.story, "recipe": "", "context_len": None, "page_size": None,
                    "case": json.dumps(data, sort_keys=True),  # what ``confirm_by_walk`` runs again
                })
    return pd.DataFrame(rows).astype({"first_failing_seq_len": "Int64", "margin": "Int64"})


def scanned_value(backend: CaseBackend[Any], case: object) -> int:
    """The value of the case's ``scan_field`` that ``backend.at`` varies: the field itself, or where
    the field holds one value per row (the GDN state's ``accepted``), its last row's; checked by
    setting it back (``at`` gives the same case)."""
    field = getattr(case, backend.scan_field)
    value = int(field[-1]) if isinstance(field, (tuple, list)) else int(field)
    if backend.at(case, value) != case:
        raise ValueError(f"{backend.name}: {backend.scan_field} {field!r} is not one value that the scan sets")
    return value


def _worst(frame: pd.DataFrame) -> pd.DataFrame:
    """Each backend, version and mode's worst row (``summarize``), at its index in ``frame``."""
    rank = frame.status.map({s: i for i, s in enumerate(STATUS_ORDER)})
    ordered = frame.assign(_rank=rank, _margin=frame.margin.fillna(1 << 40)).sort_values(["_rank", "_margin"], kind="stable")
    return ordered.groupby(["backend", "engine", "mode"], sort=False).head(1).drop(columns=["_rank", "_margin"])


def summarize(frame: pd.DataFrame, device: str = "cpu") -> pd.DataFrame:
    """One row per backend, version and mode: its worst setting (reachable before unreachable before
    safe; the smallest margin among equals; a refused setting only where the release refuses every
    one, its ``startup_refusal`` then each distinct message, one a line), with the count of settings
    of each status. A pooled buffer's worst setting is executed here (its other settings have the
    closed form only)."""
    keys = ["backend", "engine", "mode"]
    worst = _worst(frame)
    counts = frame.groupby(keys).status.value_counts().unstack(fill_value=0)
    counts = counts.reindex(columns=list(STATUS_ORDER), fill_value=0).add_prefix("settings_").reset_index()
    summary = worst.merge(counts, on=keys).sort_values(keys).reset_index(drop=True)
    if "startup_refusal" in frame:
        said = frame[frame.status == REFUSED].groupby(keys).startup_refusal.agg(lambda m: "\n".join(dict.fromkeys(m)))
        refused = summary.status == REFUSED
        summary.loc[refused, "startup_refusal"] = [said[tuple(k)] for k in summary.loc[refused, keys].to_numpy()]
    summary = pooled_atlas.confirmed_summary_rows(summary, device)
    reservation = {index: reqtable_atlas.confirm_boundary(r, device) for index, r in summary.iterrows()
                   if backends.is_reservation_backend(str(r.backend)) and r.status != REFUSED}
    return pooled_atlas.set_values(summary, reservation)  # the request table's worst setting, executed likewise


def confirm_by_run(row: pd.Series, *, lead: int = 16) -> dict[str, object]:
    """Run one request of the row's setting through a seeded serving run (``workbench.sim``) that
    replays the row's graph every step, from ``lead`` tokens short of the failing length (or, for a
    row a run does not fail, of the reachable length), and say whether the run does what the row says.

    One token is accepted per step up to ``ctx - 2``; the step that crosses the scheduler's cap
    accepts ``overshoot + 1``, so the request rides its last verify at ``ctx - 1 + overshoot``, the
    reachable length. Confirmed, for a reachable failure: the graph's first failing replay is at or
    past the probe's first failing length, and every replay below it passed; for any other row: no
    replay failed and the run got to the reachable length. A step that replays decode without
    speculation carries ``s + 1`` (the length after the new token): its committed length is one
    short of the probe's.
    """
    from workbench.sim.simulate import simulate
    from workbench.sim.workload import Acceptance, Request, SimConfig, Workload

    reachable = row.status == "reachable"
    first = int(row.first_failing_seq_len) if reachable else int(row.reachable_len)  # else: a run to the cap
    backend = backends.backend_of(str(row.backend))
    g = ServingGeometry(context_len=int(row.context_len), page_size=int(row.page_size), draft_tokens=int(row.draft_tokens),
                        spec_steps=int(row.spec_steps), spec_topk=int(row.spec_topk), draft_has_kv=bool(row.draft_has_kv),
                        max_bs=1, width_gen=str(row.width_gen))
    if g.speculative and g.max_committed_len(Mode.TARGET_VERIFY) < g.context_len - 1:
        # g0 (0.5.0rc2: W = ctx + 4): a verify at the scheduler's cap writes its drafts past the request
        # table itself, which a serving run here cannot hold: no run, said so (not counted as confirmed)
        return {"run_model": "none: the request table cannot hold a verify at ctx - 1 (width generation g0)",
                "run_committed_len": None, "run_outcome": None, "run_confirmed": None}
    # A draft-extend row's lengths are the batch's committed length plus its window (spec v2: D):
    # the run walks committed lengths, so it aims that much lower and replays draft-extend with it.
    window = 0
    if str(row["mode"]) == Mode.DRAFT_EXTEND.value:
        window = draft_extend_window(str(row.engine), g, algorithm="NGRAM" if not g.draft_has_kv else None)
    overshoot = max(0, int(row.reachable_len) - window - (g.context_len - 1)) if g.speculative else 0
    expected = first - window if g.speculative else first - 1
    prompt = max(1, min(expected, g.context_len - 2) - lead)
    trace = [1] * max(0, g.context_len - 2 - prompt) + [overshoot + 1] * 4
    version = load_versions().get(str(row.engine))  # the release's case options (its learned fields)
    options = backend.options_of(version.case_fields(backend.name)) if version is not None else ()
    config = SimConfig(geometry=g, rule=str(row.rule), components=(str(row.backend),), modes=(str(row["mode"]),),
                       replay=Replay.parse(str(row.replay)), options=options, overshoot=overshoot, stop_on_failure=False,
                       acceptance=Acceptance(kind="trace", trace=tuple(trace)), conservativeness=0.0,
                       draft_extend_window=window)
    run = simulate(config, Workload(trace=(Request(0, prompt, g.context_len + overshoot - prompt),)), seed=0)
    passed: list[int] = []
    for record in run.records:
        for table in record.tables:
            if table.short != backend.short or (table.mode or config.mode.value) != row["mode"]:
                continue
            if table.outcome == "ok":
                passed.append(record.committed[0])
                continue
            hit = record.committed[0]
            confirmed = reachable and hit >= expected and all(p < expected for p in passed) and table.outcome == row.outcome
            return {"run_committed_len": hit + window, "run_outcome": table.outcome, "run_confirmed": confirmed}
    # No replay failed: a reachable failure was missed; a margin is confirmed when the run got to the cap.
    # Lengths come back in the row's units (a draft-extend row's: the batch's committed length + window).
    return {"run_committed_len": max(passed) + window if passed else None, "run_outcome": "ok",
            "run_confirmed": not reachable and bool(passed) and max(passed) >= expected}


def confirm_by_walk(row: pd.Series, device: str = "cpu") -> dict[str, object]:
    """A case backend's row, run again: a request whose length is the scanned field walks one token
    a step up to the reachable length (``CaseBackend.walk``); a deployment whose scanned field is a
    launch setting (the indexer's ``max_model_len``) replays the same step from its first decode on,
    so its run is that step, executed. Confirmed: a reachable failure is hit where the row says; a
    safe or unreachable row's run gets to the cap with every step passing."""
    backend = backends.case_backend_of(str(row.backend))
    case = backend.parse(json.loads(str(row.case)))
    reachable = row.status == "reachable"
    if backend.scan_is_request_length:
        first = int(row.first_failing_seq_len) if reachable else int(row.reachable_len)
        walked = backend.walk(case, first, int(row.reachable_len), device=device)
        outcome = walked.failing.outcome.value if walked.failing else "ok"
        confirmed = (walked.hit == first and outcome == row.outcome) if reachable else walked.hit is None
        return {"run_model": f"request walk {walked.start}-{walked.stop}",
                "run_committed_len": walked.hit if walked.hit is not None else walked.stop,
                "run_outcome": outcome, "run_confirmed": confirmed}
    step = backend.probe(case, device)
    confirmed = step.outcome.value == row.outcome if reachable else not step.outcome.failed
    return {"run_model": "the deployment's step", "run_committed_len": None, "run_outcome": step.outcome.value,
            "run_confirmed": confirmed}


def confirm_by_runs(summary: pd.DataFrame) -> pd.DataFrame:
    """``summary`` with every row's run beside it: ``run_confirmed`` (a reachable failure hit where
    the row says; a margin or a safe row run to the cap without a failing step), ``run_model`` (which
    run), ``run_committed_len`` and ``run_outcome``. SGLang's tables run through a seeded serving run
    (``confirm_by_run``), the case backends (vLLM's) through a request walk or the deployment's step
    (``confirm_by_walk``). A row the release refuses at start-up has no run (``run_confirmed`` None)."""
    results: list[dict[str, object]] = []
    done: dict[str, dict[str, object]] = {}  # rows of releases with the same data: one run
    for _, row in summary.iterrows():
        key = content_key(row)
        if key not in done:
            if row.status == REFUSED:  # the release does not start it: nothing to run
                done[key] = {"run_model": "none: refused at start-up", "run_committed_len": None, "run_outcome": None,
                             "run_confirmed": None}
            elif backends.is_table_backend(str(row.backend)):
                done[key] = {"run_model": "sglang serving run", **confirm_by_run(row)}
            elif backends.is_pooled_backend(str(row.backend)):
                done[key] = pooled_atlas.confirm_by_batch_walk(row)
            elif backends.is_reservation_backend(str(row.backend)):
                done[key] = reqtable_atlas.confirm_by_step_walk(row)
            else:
                done[key] = confirm_by_walk(row)
        results.append(done[key])
    return pd.concat([summary.reset_index(drop=True), pd.DataFrame(results)], axis=1)


def format_summary(summary: pd.DataFrame) -> str:
    """The summary as a table for a terminal: one line per backend, version and mode."""
    lines = [f"{'backend':<26} {'engine':<16} {'mode':<14} {'rule':<19} {'first fail':>10} {'reach':>8} {'margin':>7}  "
             f"{'status':<12} {'outcome':<16} run   worst setting"]
    for row in summary.itertuples(index=False):
        setting = f"{row.preset} {row.recipe} ctx {row.context_len} ps {row.page_size}"
        if row.status == REFUSED:  # no boundary, reach or run: the engine's message instead
            why = " / ".join(str(row.startup_refusal).splitlines())
            lines.append(f"{row.backend:<26} {row.engine:<16} {row.mode:<14} {row.rule:<19} {'-':>10} {'-':>8} {'':>7}  "
                         f"{'refused at start-up':<29} {'-':<5} {setting}: {why}")
            continue
        first = "none" if pd.isna(row.first_failing_seq_len) else str(int(row.first_failing_seq_len))
        margin = "" if pd.isna(row.margin) else str(int(row.margin))
        confirmed = getattr(row, "run_confirmed", None)
        if confirmed is None or pd.isna(confirmed):
            run = "-"
        elif row.status == "reachable":
            run = "hit" if confirmed else "MISS"  # the run fails where the row says, or it does not
        else:
            run = "cap" if confirmed else "FAIL"  # the run gets to the cap with every step passing, or it fails
        lines.append(f"{row.backend:<26} {row.engine:<16} {row.mode:<14} {row.rule:<19} {first:>10} {row.reachable_len:>8} "
                     f"{margin:>7}  {row.status:<12} {row.outcome:<16} {run:<5} {setting}")
    return "\n".join(lines)
