"""Failure boundaries: the smallest committed length whose step fails, found by execution.

For one request, every table's failure is monotone in the committed length (the step's reads only
grow), so a bisection over executed probes finds the first failing length in ``log2(bound)``
steps. The two probes that bracket it — the failing step and the passing step one below — are
both executed, so every reported boundary is confirmed, never inferred.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy.typing as npt
import torch

from workbench.cases import TableCase
from workbench.outcome import Outcome, ProbeResult
from workbench.probe import probe_table, table_case_problem


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
        return probe_table(dataclasses.replace(case, seq_lens=(s,)), device)

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


def predict_boundary(case: TableCase, max_seq_len: int | None = None) -> int | None:
    """The closed form's first failing committed length for one case (None: nothing fails)."""
    from workbench.closed_form import NO_FAILURE, first_failing_seq_len

    g = case.geometry
    columns: dict[str, npt.ArrayLike] = {
        "component": [case.component], "rule": [case.rule], "mode": [case.mode.value], "width_gen": [g.width_gen],
        "context_len": [g.context_len], "page_size": [g.page_size], "draft_tokens": [g.draft_tokens],
        "spec_steps": [g.spec_steps], "spec_topk": [g.spec_topk], "draft_has_kv": [g.draft_has_kv],
        "step_id": [case.step_id], "max_seq_len": [search_bound(case, max_seq_len)],
    }
    first = int(first_failing_seq_len(columns)["first_failing_seq_len"][0])
    return None if first == NO_FAILURE else first


def confirm_boundary(
    case: TableCase, predicted: int | None, *, max_seq_len: int | None = None, device: torch.device | str = "cpu"
) -> Boundary:
    """Execute the predicted boundary and the step one below it (or the bound, when none is
    predicted); raise ``PredictionMismatch`` when execution disagrees. Two probes, not ~log2(W)."""
    hi = search_bound(case, max_seq_len)

    def run(s: int) -> ProbeResult:
        return probe_table(dataclasses.replace(case, seq_lens=(s,)), device)

    if predicted is None:
        top = run(hi)
        if top.outcome.failed:
            raise PredictionMismatch(f"predicted no failure up to {hi}, but the step at {hi} gave {top.outcome.value}")
        return Boundary(None, hi, None, top, 1)
    failing = run(predicted)
    passing = run(predicted - 1) if predicted > 1 else None
    boundary = Boundary(predicted, hi, failing, passing, 2 if passing else 1)
    if not boundary.confirmed:
        below = passing.outcome.value if passing else "-"
        raise PredictionMismatch(
            f"predicted first failure at {predicted}, but execution gave {failing.outcome.value} there and {below} below"
        )
    return boundary


def fast_boundary(case: TableCase, *, max_seq_len: int | None = None, device: torch.device | str = "cpu") -> Boundary:
    """The closed form's boundary, confirmed by execution (the sweep's default search)."""
    problem = table_case_problem(dataclasses.replace(case, seq_lens=(1,)))
    if problem:
        raise BoundaryError(problem)
    return confirm_boundary(case, predict_boundary(case, max_seq_len), max_seq_len=max_seq_len, device=device)


def step_by_step_boundary(case: TableCase, *, device: torch.device | str = "cpu") -> int | None:
    """The slow reference search: execute every committed length from ``ctx - D - 2 * ps`` up to
    the bound until one fails. Lengths below the start are not executed: the benchmark compares
    the two searches' cost on the window where boundaries live, and asserts equal answers."""
    g = case.geometry
    hi = search_bound(case)
    start = max(1, g.context_len - g.draft_tokens - 2 * g.page_size)
    for s in range(start, hi + 1):
        if probe_table(dataclasses.replace(case, seq_lens=(s,)), device).outcome.failed:
            return s
    return None
