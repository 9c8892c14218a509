"""Failure boundaries: the smallest committed length whose step fails, found by execution.

For one request, every table's failure is monotone in the committed length (the step's reads only
grow), so a bisection over executed probes finds the first failing length in ``log2(bound)``
steps. The two probes that bracket it — the failing step and the passing step one below — are
both executed, so every reported boundary is confirmed, never inferred.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy.typing as npt
import torch

from workbench.analysis.cases import TableCase
from workbench.analysis.probe import probe_table, table_case_problem
from workbench.model.outcome import Outcome, ProbeResult


@dataclass(frozen=True)
class Boundary:
    """Where a configuration first fails, and the two executed steps that prove it."""

    first_failing_seq_len: int | None  # None: no committed length up to max_seq_len fails
    max_seq_len: int  # the upper end searched
    failing: ProbeResult | None  # the executed step at the boundary
    passing: ProbeResult | None  # the executed step one below it (None when the boundary is 1)
    probes_run: int

    @property
    def confirmed(self) -> bool:
        if self.first_failing_seq_len is None:
            return self.passing is not None and not self.passing.outcome.failed
        below_ok = self.first_failing_seq_len == 1 or (self.passing is not None and self.passing.outcome is Outcome.OK)
        return self.failing is not None and self.failing.outcome.failed and below_ok


class BoundaryError(ValueError):
    """The configuration has no valid committed length to search."""


def search_bound(case: TableCase, max_seq_len: int | None = None) -> int:
    """The largest committed length to search: the table's bound, or ``max_seq_len`` below it."""
    bound = case.geometry.max_committed_len(case.mode, case.step_id)
    if max_seq_len is None:
        return bound
    if not 1 <= max_seq_len <= bound:
        raise BoundaryError(
            f"max_seq_len: {max_seq_len} is out of range (allowed: 1 to {bound}, the largest "
            f"committed length the request table holds in {case.mode.value})"
        )
    return max_seq_len


def find_boundary(
    case: TableCase, *, max_seq_len: int | None = None, device: torch.device | str = "cpu"
) -> Boundary:
    """Bisect over single-request steps ``seq_lens = (s,)`` for ``1 <= s <= bound``."""
    hi = search_bound(case, max_seq_len)
    problem = table_case_problem(dataclasses.replace(case, seq_lens=(1,)))
    if problem:
        raise BoundaryError(problem)
    runs = 0

    def run(s: int) -> ProbeResult:
        nonlocal runs
        runs += 1
        return probe_step(case, s, device)

    top = run(hi)
    if not top.outcome.failed:
        return Boundary(None, hi, None, top, runs)
    bottom = run(1)
    if bottom.outcome.failed:
        return Boundary(1, hi, bottom, None, runs)
    lo, lo_result, hi_result = 1, bottom, top  # invariant: lo passes, hi fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        result = run(mid)
        if result.outcome.failed:
            hi, hi_result = mid, result
        else:
            lo, lo_result = mid, result
    return Boundary(hi, search_bound(case, max_seq_len), hi_result, lo_result, runs)


class PredictionMismatch(AssertionError):
    """Execution disagreed with the closed form: a modelling bug, never a result."""


def probe_step(case: TableCase, seq_len: int, device: torch.device | str = "cpu") -> ProbeResult:
    """One request at committed length ``seq_len``, as every search probes it: the replay's
    ``copy_`` always, the kernel-like read where it runs as a captured graph (``probe_table``)."""
    return probe_table(dataclasses.replace(case, seq_lens=(seq_len,)), device, kernel_read=None)


def predict_boundaries(cases: Sequence[TableCase], max_seq_lens: Sequence[int | None] | None = None) -> list[int | None]:
    """The closed form's first failing committed length of every case (None: nothing fails),
    in one vectorized call."""
    from workbench.analysis.closed_form import NO_FAILURE, first_failing_seq_len

    bounds = [search_bound(c, m) for c, m in zip(cases, max_seq_lens or [None] * len(cases))]
    geometries = [c.geometry for c in cases]
    columns: dict[str, npt.ArrayLike] = {
        "component": [c.component for c in cases], "rule": [c.rule for c in cases],
        "mode": [c.mode.value for c in cases], "width_gen": [g.width_gen for g in geometries],
        "context_len": [g.context_len for g in geometries], "page_size": [g.page_size for g in geometries],
        "draft_tokens": [g.draft_tokens for g in geometries], "spec_steps": [g.spec_steps for g in geometries],
        "spec_topk": [g.spec_topk for g in geometries], "draft_has_kv": [g.draft_has_kv for g in geometries],
        "step_id": [c.step_id for c in cases], "max_seq_len": bounds,
    }
    first = first_failing_seq_len(columns)["first_failing_seq_len"]
    return [None if f == NO_FAILURE else int(f) for f in first]


def predict_boundary(case: TableCase, max_seq_len: int | None = None) -> int | None:
    """The closed form's first failing committed length for one case (None: nothing fails)."""
    return predict_boundaries([case], [max_seq_len])[0]


def confirm_boundary(
    case: TableCase, predicted: int | None, *, max_seq_len: int | None = None, device: torch.device | str = "cpu"
) -> Boundary:
    """Execute the predicted boundary and the step one below it (or the bound, when none is
    predicted); raise ``PredictionMismatch`` when execution disagrees. Two probes, not ~log2(W)."""
    hi = search_bound(case, max_seq_len)
    if predicted is None:
        top = probe_step(case, hi, device)
        if top.outcome.failed:
            raise PredictionMismatch(f"predicted no failure up to {hi}, but the step at {hi} gave {top.outcome.value}")
        return Boundary(None, hi, None, top, 1)
    failing = probe_step(case, predicted, device)
    passing = probe_step(case, predicted - 1, device) if predicted > 1 else None
    boundary = Boundary(predicted, hi, failing, passing, 2 if passing else 1)
    if not boundary.confirmed:
        below = passing.outcome.value if passing else "-"
        raise PredictionMismatch(
            f"predicted first failure at {predicted}, but execution gave {failing.outcome.value} there and {below} below"
        )
    return boundary


def fast_boundaries(
    cases: Sequence[TableCase], *, max_seq_lens: Sequence[int | None] | None = None, device: torch.device | str = "cpu"
) -> list[Boundary]:
    """Every case's closed-form boundary, each confirmed by execution (the sweeps' search)."""
    for case in cases:
        problem = table_case_problem(dataclasses.replace(case, seq_lens=(1,)))
        if problem:
            raise BoundaryError(problem)
    limits = list(max_seq_lens) if max_seq_lens is not None else [None] * len(cases)
    predicted = predict_boundaries(cases, limits)
    return [confirm_boundary(c, p, max_seq_len=m, device=device) for c, p, m in zip(cases, predicted, limits)]


def fast_boundary(case: TableCase, *, max_seq_len: int | None = None, device: torch.device | str = "cpu") -> Boundary:
    """The closed form's boundary, confirmed by execution."""
    return fast_boundaries([case], max_seq_lens=[max_seq_len], device=device)[0]


def step_by_step_boundary(case: TableCase, *, device: torch.device | str = "cpu") -> int | None:
    """The slow reference search: execute every committed length from ``ctx - D - 2 * ps`` up to
    the bound until one fails. Lengths below the start are not executed: the benchmark compares
    the two searches' cost on the window where boundaries live, and asserts equal answers."""
    g = case.geometry
    hi = search_bound(case)
    start = max(1, g.context_len - g.draft_tokens - 2 * g.page_size)
    for s in range(start, hi + 1):
        if probe_step(case, s, device).outcome.failed:
            return s
    return None
