"""Findings: the failing atlas rows of a release, and the three seeds, each with an id.

A finding is one engine state the workbench says fails: a backend, a mode, the first failing
committed length and its outcome, the setting that reaches it (model preset, speculative recipe,
context, page size, graph batch) and, for a pooled buffer, the batch that overflows it. The atlas
(``workbench.atlas.rows``) gives a release's rows, each at its worst setting; the seeds
(``workbench.analysis.seeds``) give the three fixes the project started from, at the version
before each fix (a pseudo-version: the release with the fix's line reverted, or an older release).
``reproducer`` turns a finding into a standalone script.

Ids read ``<version>/<backend>/<mode>`` for atlas rows (``0.5.23/fa3-page-table/target-verify``)
and ``seed/<name>`` for the seeds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]

from workbench import backends
from workbench.analysis.boundary import fast_boundary
from workbench.analysis.cases import parse_case
from workbench.analysis.seeds import SEEDS
from workbench.atlas.findings import latent_reason
from workbench.backends.base import Seed
from workbench.engines.store.launch_defaults import load_launch_data
from workbench.model.cases import AllocatorCase, TableCase


@dataclass(frozen=True)
class Finding:
    """One failing engine state, with what reaches it (see the module note)."""

    id: str
    engine: str  # the version the finding is about: "sglang==0.5.23" or a pseudo-version
    backend: str  # the workbench backend's name
    mode: str
    rule: str  # the version's sizing rule (or gather) for the buffer
    check: str  # the replay or host check in force ("dynamic", "static", "assert", "copy", "none", ...)
    outcome: str
    first_failing: int  # committed length (for the allocator seed: free pages of an exactly full pool)
    reachable_len: int | None
    status: str  # "reachable", "unreachable" or "seed"
    setting: dict[str, object]  # preset, recipe, context_len, page_size, draft_tokens, spec_steps, spec_topk, ...
    batch: int = 1  # requests of the failing state (the worst batch of a pooled buffer)
    pool_tokens: int | None = None  # KV tokens that batch holds
    buffer_width: int | None = None
    safe_bytes: int | None = None
    engine_bytes: int | None = None
    message: str = ""  # the workbench's message for the failing state
    seed: str | None = None  # the seed's name, for the three seeds
    story: str = ""
    extra: dict[str, object] = field(default_factory=dict)  # kind-specific inputs (the allocator's pool)
    reach_why: str = ""  # how the reach was obtained (recipe, overlap, scheduler facts), as the atlas row says
    latent: str = ""  # status "latent": why no released setting launches this step, and what would reach it

    @property
    def version(self) -> str:
        return self.engine.split("==", 1)[1]

    @property
    def release(self) -> str:
        """The released version whose code the script runs (a pseudo-version's base)."""
        return self.engine.split("+", 1)[0]


def _short(backend: str) -> str:
    return backend.removeprefix("sglang-")


def _int(value: object) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    return int(value)  # type: ignore[call-overload,no-any-return]


SETTING_COLUMNS = ("preset", "recipe", "context_len", "page_size", "draft_tokens", "spec_steps", "spec_topk",
                   "draft_has_kv", "max_bs", "request_table_width", "width_gen", "step_id")


def from_atlas_row(row: pd.Series) -> Finding:
    """A summary row of ``workbench.atlas.rows.summarize`` as a finding."""
    setting: dict[str, object] = {}
    for column in SETTING_COLUMNS:
        value = row.get(column)
        if column in ("preset", "recipe", "width_gen"):
            setting[column] = str(value)
        elif column == "draft_has_kv":
            setting[column] = bool(value)
        else:
            setting[column] = _int(value)
    version = str(row.engine).split("==", 1)[1]
    first = _int(row.first_failing_seq_len)
    latent = latent_reason(str(row["mode"]), _int(row.get("draft_tokens")) or 0, bool(setting["draft_has_kv"]))
    status = "latent" if latent and str(row.status) == "reachable" else str(row.status)
    return Finding(
        id=f"{version}/{_short(str(row.backend))}/{row['mode']}", engine=str(row.engine), backend=str(row.backend),
        mode=str(row["mode"]), rule=str(row.rule), check=str(row.replay), outcome=str(row.outcome),
        first_failing=first if first is not None else 0, reachable_len=_int(row.reachable_len), status=status,
        setting=setting, batch=_int(row.get("batch")) or 1, pool_tokens=_int(row.get("pool_tokens")),
        buffer_width=_int(row.get("buffer_width")), safe_bytes=_int(row.get("safe_bytes")),
        engine_bytes=_int(row.get("engine_bytes")), message=str(row.error or ""), reach_why=str(row.get("reach_why") or ""),
        latent=latent)


def atlas_findings(summary: pd.DataFrame, *, include_unreachable: bool = False,
                   include_latent: bool = False) -> list[Finding]:
    """The failing rows of an atlas summary (SGLang's table and pooled backends), reachable first;
    a reachable row whose step no deployment of its recipe runs is "latent" (``atlas.findings.latent_reason``),
    listed apart and only with ``include_latent``."""
    wanted = ("reachable", "latent", "unreachable")
    rows = summary[summary.status.isin(("reachable", "unreachable") if include_unreachable else ("reachable",))
                   & summary.backend.map(_is_sglang_buffer)]
    found = [f for f in (from_atlas_row(r) for _, r in rows.iterrows()) if include_latent or f.status != "latent"]
    return sorted(found, key=lambda f: (wanted.index(f.status), f.backend, f.mode))


def _is_sglang_buffer(name: str) -> bool:
    if backends.is_table_backend(name):
        return backends.backend_of(name).engine == "sglang"
    return backends.is_pooled_backend(name)


# ---- the seeds -------------------------------------------------------------------------------

# Each seed's crash-report model and the version before its fix that its script runs: data, in
# data/repro.json's ``seeds`` (why each version was chosen is said there).
_REPRO_DATA = Path(__file__).resolve().parents[2] / "data" / "repro.json"


def _seed_entry(seed: Seed) -> dict[str, str]:
    entry = json.loads(_REPRO_DATA.read_text())["seeds"][seed.name]
    assert isinstance(entry, dict)
    return entry


def _seed_table(seed: Seed) -> Finding:
    case = parse_case(seed.before)
    assert isinstance(case, TableCase)
    g = case.geometry
    found = fast_boundary(case)
    backend = backends.backend_of(case.component)
    reach = backend.reachable_len(g, case.mode, case.step_id)
    failing = found.failing
    setting: dict[str, object] = {"preset": _seed_entry(seed)["preset"], "recipe": "",
                                  "context_len": g.context_len, "page_size": g.page_size,
                                  "draft_tokens": g.draft_tokens, "spec_steps": g.spec_steps, "spec_topk": g.spec_topk,
                                  "draft_has_kv": g.draft_has_kv, "max_bs": g.max_bs,
                                  "request_table_width": g.request_table_width, "width_gen": g.width_gen,
                                  "step_id": case.step_id}
    return Finding(
        id=f"seed/{seed.name}", engine=_seed_entry(seed)["engine"], backend=backend.name, mode=case.mode.value,
        rule=case.rule, check=case.replay.value, outcome=failing.outcome.value if failing else "ok",
        first_failing=found.first_failing_seq_len or 0, reachable_len=reach, status="seed", setting=setting,
        buffer_width=backend.width(g, case.rule), message=failing.error if failing and failing.error else "",
        seed=seed.name, story=seed.story)


def _seed_allocator(seed: Seed) -> Finding:
    case = parse_case(seed.before)
    assert isinstance(case, AllocatorCase)
    from workbench.analysis.probe import probe

    result = probe(case)
    return Finding(
        id=f"seed/{seed.name}", engine=_seed_entry(seed)["engine"], backend=_seed_entry(seed)["backend"], mode="decode",
        rule=case.gather.value, check="alloc_decode", outcome=result.outcome.value, first_failing=len(case.free_pages),
        reachable_len=None, status="seed",
        setting={"page_size": case.page_size, "seq_lens": list(case.seq_lens), "last_loc": list(case.last_loc),
                 "free_pages": list(case.free_pages)},
        message=result.error or "", seed=seed.name, story=seed.story)


def seed_findings() -> list[Finding]:
    """The three seeds, before their fixes, in the order docs/engine-facts.md#crash-reports-and-fixes lists them."""
    return [_seed_allocator(s) if s.name == "allocator" else _seed_table(s) for s in SEEDS]


# ---- a release's findings ----------------------------------------------------------------------

def newest_release(family: str = "sglang") -> str:
    return str(load_launch_data().newest[family])


def release_summary(engine: str) -> pd.DataFrame:
    """The atlas summary of one release, every row's worst setting with its boundary executed."""
    from workbench.atlas.rows import run_atlas, summarize

    return summarize(run_atlas([engine]))


def findings(engine: str | None = None, *, summary: pd.DataFrame | None = None, include_unreachable: bool = False,
             with_seeds: bool = True, include_latent: bool = False) -> list[Finding]:
    """A release's failing atlas rows whose launches the engine builds (the newest SGLang release by
    default) and the seeds; ``include_latent`` adds the rows no released setting launches."""
    engine = engine or newest_release()
    frame = summary if summary is not None else release_summary(engine)
    out = atlas_findings(frame[frame.engine == engine], include_unreachable=include_unreachable,
                         include_latent=include_latent)
    return out + (seed_findings() if with_seeds else [])


def latent_findings(engine: str | None = None, *, summary: pd.DataFrame | None = None) -> list[Finding]:
    """The release's reachable rows that no released setting launches, each saying what would reach it."""
    return [f for f in findings(engine, summary=summary, with_seeds=False, include_latent=True) if f.status == "latent"]


def by_id(found: Sequence[Finding], wanted: str) -> Finding:
    for f in found:
        if f.id == wanted:
            return f
    raise ValueError(f"finding: {wanted!r} is not one of this release's ({', '.join(f.id for f in found)})")


def with_reach(finding: Finding, reachable_len: int) -> Finding:
    return replace(finding, reachable_len=reachable_len)
