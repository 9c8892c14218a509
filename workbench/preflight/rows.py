"""The check: one row per graph buffer and allocator path a deployment sets up, through the library.

A table row is one backend (asked of the registry by what the launch resolved to) in one mode
the deployment captures a graph for: its width under the version's rule, the first failing
committed length (the closed form, confirmed by two executed probes: ``fast_boundary``), the
outcome and torch's message there, the largest committed length a run reaches
(``analysis.reach``) and the margin between them. A failing row a run reaches gets a fix: the
narrowest of the backend's rules that a run cannot reach a failure of, with its bytes.

A pooled row is one flat ``kv_indices`` buffer shared by a batch (``backends/pooled.py``): its
first failing length is that of its worst batch, every request at one length (a graph's
``max_bs``, one request for a buffer sized per call, which a run meets with or without graphs).

A reservation row is the request table itself (``backends/sglang/req_to_token.py``): a speculative
decode step's reservation written into ``req_to_token``, failing for one request whose committed
length, when its batch is formed (``analysis.reach.reservation_reach``), leaves too little of its row.

An allocator row is ``alloc_decode`` on an exactly full free pool (the scheduler admits one:
``available_size() >= needed``) with the gather the version ships for the device.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from workbench import backends
from workbench.analysis.boundary import Boundary, BoundaryError, PredictionMismatch, fast_boundary, find_boundary, predict_boundary
from workbench.analysis.exact_fit import AllocatorConfig, allocator_boundaries
from workbench.analysis.memory import min_safe_width
from workbench.analysis.reach import Reach, reach, reservation_reach
from workbench.analysis.verdict_numbers import kv_share
from workbench.backends.base import INT32_BYTES, TableBackend
from workbench.backends.sglang import req_to_token as rt
from workbench.model.allocator import Gather
from workbench.model.cases import Replay, TableCase
from workbench.model.geometry import Mode
from workbench.model.outcome import Outcome
from workbench.preflight.deployment import Deployment


@dataclass(frozen=True)
class Fix:
    """A safe sizing (a rule of the backend, or the narrowest safe width) and what it costs."""

    rule: str | None  # None: no rule of the backend is safe; ``width`` is the narrowest safe one
    width: int
    bytes: int
    extra_bytes: int  # over the failing table
    share_of_kv_budget: float | None
    change: str  # the engine change the rule stands for


@dataclass(frozen=True)
class Row:
    kind: str  # "table", "pooled", "reservation", "state" (a step's state, not a length) or "allocator"
    backend: str  # the registry name, or the gather for an allocator row
    buffer: str  # the engine's attribute: "block_tables", "page_table", "alloc_decode"
    mode: str  # a table mode, or "exact-fit"
    step_id: int
    rule: str  # the sizing rule (tables) or gather (allocator) in force
    rule_source: str  # where the version data read it
    width: int | None
    unit: str  # "pages", "tokens", "free pages"
    first_failing: int | None  # committed length; for the allocator the free pages of the failing pool
    outcome: str  # at the first failing length, or "ok"
    message: str | None
    reach: int | None  # the largest committed length a run reaches in this mode
    margin: int | None
    reachable: bool
    bytes: int | None
    fix: Fix | None = None
    replay: str | None = None
    reach_why: str = ""  # which reach, and why: recipe, overlap, worker, pool
    batch: int | None = None  # pooled rows: the requests that must sit at the failing length at once
    pool_needed: int | None = None  # their KV tokens
    pool_tokens: int | None = None  # the deployment's pool (given or estimated)
    pool_holds: bool | None = None  # None: the pool is unknown
    conditions: tuple[str, ...] = ()  # what must happen for a run to meet the failure


def _boundary(case: TableCase, device: str) -> Boundary:
    try:
        return fast_boundary(case, device=device)
    except PredictionMismatch:  # a backend whose closed form is off: the executed search decides
        return find_boundary(case, device=device)


def _case(backend: TableBackend, deployment: Deployment, mode: Mode, step_id: int) -> TableCase | None:
    fields = deployment.version.backend_fields(backend.name)
    rule = fields.get("rule")
    if not isinstance(rule, str) or rule not in backend.rules:
        return None
    replay = Replay.parse(str(fields["replay"])) if "replay" in backend.case_fields and "replay" in fields else Replay.DYNAMIC
    case = TableCase(component=backend.name, geometry=deployment.geometry, rule=rule, mode=mode, step_id=step_id,
                     replay=replay, options=backend.options_of(fields))
    # A case field a backend takes (its case_fields) that the launch resolved (Deployment.extra,
    # e.g. a vLLM backend's "dcp_size") travels into its case, so a new backend needs no edit here.
    known = {f.name for f in dataclasses.fields(TableCase)}
    taken = {k: deployment.extra[k] for k in backend.case_fields if k in known and k in deployment.extra}
    return dataclasses.replace(case, **taken) if taken else case  # type: ignore[arg-type]


def _fix(backend: TableBackend, case: TableCase, where: Reach, failing_bytes: int, budget: int | None) -> Fix:
    g = case.geometry
    safe = []
    for name in backend.rules:
        first = predict_boundary(dataclasses.replace(case, rule=name))
        if not where.reaches(first):
            safe.append((backend.width(g, name), name))
    rule: str | None = None
    if safe:
        width, rule = min(safe)
        change = backend.rules[rule].change
    else:
        width, change = min_safe_width(backend.name, g, case.mode, case.step_id), "no rule of the backend"
    size = backend.table_bytes(g, width, case.mode)
    return Fix(rule, width, size, size - failing_bytes, kv_share(size - failing_bytes, budget), change)


def table_row(backend: TableBackend, deployment: Deployment, mode: Mode, step_id: int, device: str) -> Row | str:
    """The row, or one line saying why there is none (no rule in the version data, no such graph)."""
    if backend.mode_problem(mode) is not None:
        return ""  # the backend captures no graph in this mode: nothing to report
    case = _case(backend, deployment, mode, step_id)
    if case is None:
        return f"{backend.name}: {deployment.version.engine} names no sizing rule for it (data/engines.json)"
    try:
        found = _boundary(case, device)
    except BoundaryError as err:
        return f"{backend.name} {mode.value}: {err}"
    g = deployment.geometry
    width = backend.width(g, case.rule)
    where = reach(deployment.reach_rule, g, mode, step_id, deployment.conditions)
    first = found.first_failing_seq_len
    result = found.failing if first is not None else found.passing
    size = backend.table_bytes(g, width, mode)
    reachable = where.reaches(first)
    fix = _fix(backend, case, where, size, deployment.kv_budget_bytes) if reachable else None
    return Row(
        kind="table", backend=backend.name, buffer=backend.buffer_name, mode=mode.value, step_id=step_id, rule=case.rule,
        rule_source=deployment.version.backend_source(backend.name, "rule"), width=width, unit=backend.unit,
        first_failing=first, outcome=result.outcome.value if result and first is not None else "ok",
        message=result.error if result and first is not None else None, reach=where.largest_committed,
        margin=where.margin(first), reachable=reachable, bytes=size, fix=fix,
        replay=case.replay.value if "replay" in backend.case_fields else None, reach_why=where.why,
        conditions=(*where.conditions, f"one request at {first}") if reachable else (),
    )


def allocator_rows(deployment: Deployment, device: str) -> list[Row]:
    """``alloc_decode`` at an exactly full pool, for a batch whose last row opens no page (the
    seed's shape: a gather that indexes every row reads one past the list). None where the
    version takes an allocator without pages at this page size."""
    gathers = backends.device_gathers(deployment.version.family, deployment.device_family)
    paged = deployment.version.defaults.get("paged_allocator_min_page_size")
    if not gathers or (paged is not None and deployment.geometry.page_size < int(str(paged.value))):
        return []
    named = deployment.version.backend_fields("allocator").get("gather")
    gather = next((g for g in gathers if g.name == named), gathers[0] if len(gathers) == 1 else None)
    if gather is None:
        return []
    source = deployment.version.backend_source("allocator", "gather") if gather.name == named else ""
    ps = deployment.geometry.page_size
    found = allocator_boundaries([AllocatorConfig(Gather(gather.name), ps, (True, False))], device)[0]
    needed = 1  # the batch opens one page
    fails = found.first_ok_free > needed
    failing = found.below if fails else None
    # The scheduler admits a batch when available_size() >= pages needed: an exactly full pool of a
    # batch of two is a state any run with two requests can be in (docs/semantics.md#exact-fit).
    reachable = fails and deployment.geometry.max_bs >= 2
    fix = Fix(gather.fixed_by, 0, 0, 0, 0.0, backends.gather_of(gather.fixed_by).change) if reachable and gather.fixed_by else None
    return [Row(
        kind="allocator", backend=gather.name, buffer="alloc_decode", mode="exact-fit", step_id=0, rule=gather.name,
        rule_source=source, width=None, unit="free pages", first_failing=needed if fails else None,
        outcome=failing.outcome.value if failing else "ok", message=failing.error if failing else None, reach=None,
        margin=None, reachable=reachable, bytes=None, fix=fix,
    )]


def table_rows(deployment: Deployment, device: str) -> tuple[list[Row], list[str]]:
    """Every table row of the deployment, and one line for each table the check could not size."""
    rows: list[Row] = []
    notes: list[str] = []
    launched = backends.launched_backends(deployment.version.family, deployment.launch_names, deployment.device_family)
    for backend in launched:
        for mode, step_id in deployment.modes:
            row = table_row(backend, deployment, mode, step_id, device)
            if isinstance(row, Row):
                rows.append(row)
            elif row:
                notes.append(row)
    return rows, notes


def _launched_case_backends(deployment: Deployment) -> list[backends.CaseBackend[Any]]:
    """The case backends of the engine, or of the platform plugin that resolved the launch
    (vllm-ascend's drafter, for vLLM on an NPU), whose launch names the deployment sets up; with
    graphs disabled, those whose buffer the eager path reads too."""
    names = set(deployment.launch_names)
    plugin = str(deployment.extra.get("platform_plugin") or "").split("==", 1)[0]
    engines = {deployment.version.family, plugin} - {""}
    return [b for b in backends.CASE_BACKENDS if b.engine in engines and (deployment.graphs or b.eager_path)
            and b.device_family == deployment.device_family and names & set(b.launch_names)]


def case_rows(deployment: Deployment, device: str) -> list[Row]:
    """The backends that bring their own case (vLLM's): the step every run of the deployment replays.

    A backend whose failure does not depend on the committed length (the indexer: the widths differ
    from the start) fails at length 1 and every run reaches it: margin ``-reach``. One whose scanned
    field is a request's length (V0's graph tables) is searched for its first failing length
    (``boundary``, two probes executed); a sequence length counts the token being decoded, so the
    committed length is one less. The row's rule names the release whose buffer data it used.
    """
    rows: list[Row] = []
    g = deployment.geometry
    where = reach(deployment.reach_rule, g, Mode.DECODE, 0, deployment.conditions)
    for backend in _launched_case_backends(deployment):
        case = backend.launch_case(deployment.version.engine, g.context_len, g.page_size, deployment.extra)
        if case is None:
            continue
        needs: tuple[str, ...] = ()
        if backend.scan_is_request_length:  # a request's length decides: the first failing one, searched
            found = backend.boundary(case, device)
            if found.first_failing is not None and found.failing is not None:  # seq_len counts the token decoded
                result, first = found.failing, max(1, found.first_failing - 1)
                needs = backend.conditions(case, found.first_failing)
            else:
                result, first = found.passing or backend.probe(case, device), None
        else:
            result = backend.probe(case, device)
            first = 1 if result.outcome.failed else None
            needs = backend.conditions(case, 0) if first else ()  # a step's state, not a length: said in words
        if result.outcome is Outcome.INVALID:
            raise PreflightRowError(f"{backend.name}: the deployment's step is not a state it models: {result.error}")
        record = backend.record(result)
        rows.append(Row(
            kind="state" if backend.step_state else "table", backend=backend.name, buffer=backend.buffer_name,
            mode=backend.atlas_mode if backend.step_state else Mode.DECODE.value, step_id=0,
            rule=str(getattr(case, "engine", "") or deployment.version.engine), rule_source="",
            width=_int_or_none(record.get("buffer_width")),
            unit=backend.width_unit, first_failing=first, outcome=result.outcome.value if first else "ok",
            message=result.error if first else None, reach=where.largest_committed, margin=where.margin(first),
            reachable=where.reaches(first), bytes=None, conditions=needs if where.reaches(first) else (),
        ))
    return rows


def _launched_pooled(deployment: Deployment) -> list[backends.PooledBackend]:
    names = set(deployment.launch_names)
    return [b for b in backends.POOLED_BACKENDS if b.engine == deployment.version.family
            and b.device_family == deployment.device_family and names & set(b.launch_names)]


def pooled_rows(deployment: Deployment, device: str) -> list[Row]:
    """Every pooled buffer the deployment writes: the version's data names its capacity rule and
    check, the buffer is written by the model's attention, and its mode is one the run steps through."""
    g, rows = deployment.geometry, []
    modes = {mode for mode, _ in deployment.modes}
    for backend in _launched_pooled(deployment):
        fields = deployment.version.backend_fields(backend.name)
        for buffer in backend.buffers:
            entry = fields.get(buffer.key)
            if (not isinstance(entry, dict) or buffer.attention not in ("any", deployment.model.attention)
                    or buffer.applies(g) is not None or (not buffer.per_call and (not deployment.graphs or buffer.mode not in modes))):
                continue
            rule, check = str(entry["rule"]), str(entry["check"])
            first = buffer.first_failure(g, rule)
            where = reach(deployment.reach_rule, g, buffer.mode, 0, deployment.conditions)
            batch = buffer.worst_batch(g)
            result = buffer.probe(g, rule, check, [first] * batch, device) if first is not None else None
            size = buffer.graph_bytes(g, rule)
            held = _pool_condition(deployment, batch, first)
            reachable = where.reaches(first) and held[1] is not False
            fix = None
            if reachable:
                safe = buffer.safe_bytes(g, where.largest_committed)
                fix = Fix(None, safe // (INT32_BYTES * buffer.rows(g)), safe, safe - size,
                          kv_share(safe - size, deployment.kv_budget_bytes),
                          f"a buffer that holds {batch} request{'s' if batch > 1 else ''} at the reachable length")
            rows.append(Row(
                kind="pooled", backend=backend.name, buffer="kv_indices", mode=buffer.key,
                step_id=buffer.rows(g) - 1, rule=rule,
                rule_source=deployment.version.backend_source(backend.name, buffer.key),
                width=buffer.capacity(g, rule, batch), unit="entries", first_failing=first,
                outcome=result.outcome.value if result else "ok", message=result.error if result else None,
                reach=where.largest_committed, margin=where.margin(first), reachable=reachable, bytes=size,
                fix=fix, replay=check, reach_why=where.why, batch=batch if first is not None else None,
                pool_needed=batch * first if first is not None else None, pool_tokens=deployment.pool_tokens,
                pool_holds=held[1], conditions=(*where.conditions, held[0]) if where.reaches(first) else (),
            ))
    return rows


def reservation_rows(deployment: Deployment, device: str) -> list[Row]:
    """The request table's own row: the version's reservation rule (data/engines.json) for a
    speculative launch whose algorithm takes the path, graphs or not (the step runs on the host).
    One request at the failing length is enough, so its pool need is that length alone."""
    g, model = deployment.geometry, backends.reservation_backend_of(rt.NAME)
    if model.engine != deployment.version.family or model.device_family != deployment.device_family:
        return []
    entry = deployment.version.backend_fields(rt.NAME).get("reservation")
    algorithm = deployment.conditions.algorithm or ("EAGLE" if g.draft_has_kv else "NGRAM")
    if not isinstance(entry, dict) or model.applies(g) is not None or algorithm not in entry.get("algorithms", ()):
        return []
    top = entry.get("topk_max")
    if top is not None and g.spec_topk > int(str(top)):
        return []
    rule, check = str(entry["rule"]), str(entry["check"])
    first = model.first_failure(g, rule)
    where = reservation_reach(deployment.reach_rule, g, deployment.conditions)
    result = model.probe(g, rule, check, [first], device) if first is not None else None
    rows = g.max_bs + 1
    size = rt.table_bytes(g, rows)
    held = _pool_condition(deployment, 1, first)
    reachable = where.reaches(first) and held[1] is not False
    fix = None
    if reachable:
        extra = rt.safe_extra(g, where.largest_committed, rule)
        safe = rows * (g.context_len + extra) * INT32_BYTES
        fix = Fix(None, g.context_len + extra, safe, safe - size, kv_share(safe - size, deployment.kv_budget_bytes),
                  f"rows of ctx + {extra} (the reservation at the reachable length)")
    return [Row(
        kind="reservation", backend=rt.NAME, buffer="req_to_token", mode="decode-reservation", step_id=0, rule=rule,
        rule_source=deployment.version.backend_source(rt.NAME, "reservation"), width=g.request_table_width,
        unit="entries", first_failing=first, outcome=result.outcome.value if result else "ok",
        message=result.error if result else None, reach=where.largest_committed, margin=where.margin(first),
        reachable=reachable, bytes=size, fix=fix, replay=check, reach_why=where.why,
        batch=1 if first is not None else None, pool_needed=first, pool_tokens=deployment.pool_tokens,
        pool_holds=held[1], conditions=(*where.conditions, held[0]) if where.reaches(first) else (),
    )]


def _pool_condition(deployment: Deployment, batch: int, first: int | None) -> tuple[str, bool | None]:
    """What the worst batch needs of the KV pool, and whether the deployment's pool holds it.

    Worked example: 8 requests at 131069 need 1,048,552 KV tokens; a pool of 434,000 holds at most
    3 of them (434000 // 131069), so the failure needs more than the pool allows."""
    if first is None:
        return "", None
    need = batch * first
    pool = deployment.pool_tokens
    label = " (estimated)" if deployment.pool_estimated else ""
    if pool is None:
        return f"{batch} request{'s' if batch > 1 else ''} at {first} at once: {need} KV tokens (pool unknown)", None
    fits = pool // first
    verdict = "holds them" if need <= pool else f"holds at most {fits}"
    return (f"{batch} request{'s' if batch > 1 else ''} at {first} at once: {need} KV tokens; "
            f"the pool of {pool}{label} {verdict}"), need <= pool


class PreflightRowError(ValueError):
    """A backend could not build the step the deployment replays (a modelling gap, said as one line)."""


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None


def declined(deployment: Deployment) -> list[str]:
    """The case backends the deployment sets up that could build no case for it, each with why."""
    g = deployment.geometry
    return [f"{b.name}: {b.launch_gap(deployment.version.engine, deployment.extra)}"
            for b in _launched_case_backends(deployment)
            if b.launch_case(deployment.version.engine, g.context_len, g.page_size, deployment.extra) is None]


def graph_only(deployment: Deployment) -> list[str]:
    """What a launch with graphs disabled sets up that no backend of the eager path models (its
    captured tables do not exist; what the eager path builds in their place is not modelled)."""
    covered = {n for b in _launched_case_backends(deployment) for n in b.launch_names}
    return [n for n in deployment.launch_names if n not in covered]


def unmodelled(deployment: Deployment) -> list[str]:
    """What the deployment sets up that no registered backend models."""
    launched = backends.launched_backends(deployment.version.family, deployment.launch_names, deployment.device_family)
    covered = ({n for b in launched for n in b.launch_names}
               | {n for b in _launched_case_backends(deployment) for n in b.launch_names}
               | {n for b in _launched_pooled(deployment) for n in b.launch_names})
    return [n for n in deployment.launch_names if n not in covered]
