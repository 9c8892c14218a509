"""The second kind of backend: one that brings its own case, for engines whose buffers do not fit
``TableCase``.

SGLang's tables are all sized from one ``ServingGeometry`` (context length, page size, draft
tokens) and filled from one request-to-token table, so a ``TableBackend`` declares rules over that
geometry. vLLM's buffers speak other quantities (``max_model_len``, ``block_size``, expanded query
rows, the DCP size, lookahead slots) and have no request-to-token table, so a ``CaseBackend``
declares everything itself:

* its case dataclass (a ``BackendCase``) and the JSON fields of ``workbench probe --cases``
  (``parse``: one-line ``ValueError`` naming the field, as every case parser does);
* ``probe``: the engine's step on real tensors (torch's or numpy's own error, never a formatted one);
* a boundary: one case field (``scan_field``) is varied over ``scan_range``; ``fails_grid`` is the
  closed form over a numpy vector of its values; ``boundary`` takes the closed form's first
  failing value and executes it and the value before it (``confirmed`` when both agree), and
  ``executed_scan`` probes every value, which is what tests compare the closed form with;
* seed cases (``CaseSeed``) with the exact messages of the crash reports.

The registry (``workbench.backends``) holds both kinds; probes, case parsing and records ask it
whether a component is a case backend and never branch on a name.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt
import torch

from workbench.model.outcome import Outcome, ProbeResult

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, kw_only=True)
class BackendCase:
    """What every case of a case backend carries: the component that parses and probes it."""

    component: str


C = TypeVar("C", bound=BackendCase)


@dataclass(frozen=True)
class CaseSeed:
    """A crash report as probe cases: the failing case, its exact message, and cases that run."""

    name: str
    story: str
    failing: dict[str, object]
    expected_error: str
    passing: tuple[dict[str, object], ...]


@dataclass(frozen=True)
class CaseBoundary:
    """The first failing value of the scanned field in ``[low, high]``, or None when every value runs."""

    low: int
    high: int
    first_failing: int | None
    failing: ProbeResult | None  # the executed probe at ``first_failing``
    passing: ProbeResult | None  # the executed probe one below it (or at ``high`` when none fails)
    confirmed: bool  # the executed probes agree with the closed form
    probes_run: int


@dataclass(frozen=True)
class RequestWalk:
    """One request of a deployment run step by step: from ``start`` to ``stop`` committed tokens,
    the deployment's step executed at every length; ``hit`` is the first length whose step failed."""

    start: int
    stop: int
    hit: int | None
    failing: ProbeResult | None
    steps: int  # steps executed


class CaseBackend(ABC, Generic[C]):
    """One engine buffer that parses, probes and bounds its own cases (see the module note)."""

    name: str  # kebab case, engine first: "vllm-indexer-block-table"
    engine: str  # "vllm"
    device_family: str  # "cuda"
    buffer_name: str  # the engine's attribute: "expanded_block_table_buffer"
    fields: frozenset[str]  # every JSON field a case may hold, "component" included
    scan_field: str  # the case field a boundary varies
    seeds: tuple[CaseSeed, ...] = ()
    boundary_rejects: tuple[str, ...] = ()  # fields a boundary case may not hold (the search sets them)
    # Whether ``scan_field`` is a request's length (a longer request of the same deployment gets
    # there: a failure anywhere in ``scan_range`` is reachable) or a launch setting (another
    # deployment: only the case's own probe speaks for it). The atlas reads this.
    scan_is_request_length: bool = True
    atlas_mode: str = "decode"  # the graph mode its seed deployments replay
    # A backend whose failure is a step's state (accepted counts, a batch), not a request's length: its
    # preflight row is of kind "state", named by ``atlas_mode``, its width in ``width_unit``.
    step_state: bool = False
    width_unit: str = "blocks"
    launch_names: tuple[str, ...] = ()  # what a resolved launch names when it sets this buffer up (preflight)
    # Whether the eager path reads the buffer too (a scheduler's or a metadata builder's, filled every
    # step with or without a captured graph): a launch with graphs disabled still gets its row.
    eager_path: bool = False

    def launch_case(self, engine: str, max_model_len: int, block_size: int, extra: Mapping[str, object]) -> C | None:
        """The case a deployment launched under ``engine`` replays every step, or None where the
        backend cannot say (the preflight's row). ``extra``: the launch's engine-specific values."""
        return None

    def launch_gap(self, engine: str, extra: Mapping[str, object]) -> str:
        """Why ``launch_case`` gave no case for a launch of ``engine`` (the verdict says it)."""
        return f"no data of {engine} for this launch"

    def conditions(self, case: C, first_failing: int) -> tuple[str, ...]:
        """What a run must do to meet the failure at ``first_failing`` (a value of ``scan_field``)
        beyond reaching that length (the preflight's "needs"); () where reaching it is enough."""
        return ()

    def release_cases(self) -> tuple[dict[str, object], ...]:
        """The first seed's failing deployment under every release the backend has data for (the
        atlas's rows, release by release: where the bug appears and where its fix lands)."""
        return ()

    @property
    def scan_label(self) -> str:
        """The boundary record's key is ``first_failing_<scan_label>``."""
        return self.scan_field

    @abstractmethod
    def parse(self, data: Mapping[str, object], *, boundary: bool = False) -> C:
        """The case of one JSON object; a ``ValueError`` with a one-line reason otherwise.

        ``boundary``: a case for ``boundary`` (without the fields the search sets).
        """

    @abstractmethod
    def probe(self, case: C, device: torch.device | str = "cpu") -> ProbeResult:
        """Run the engine's step on real tensors and classify it."""

    def case_problem(self, case: C) -> str | None:
        """Why ``case`` is not a state the engine can be in (its probe is ``invalid``), or None."""
        return None

    @abstractmethod
    def scan_range(self, case: C) -> tuple[int, int]:
        """The values of ``scan_field`` a boundary searches, both ends included."""

    @abstractmethod
    def fails_grid(self, case: C, values: IntArray) -> BoolArray:
        """The closed form: whether the step fails at each value of ``scan_field``."""

    def at(self, case: C, value: int) -> C:
        """``case`` with ``scan_field`` set to ``value``."""
        changes: dict[str, Any] = {self.scan_field: value}
        return dataclasses.replace(case, **changes)

    def executed_scan(self, case: C, values: IntArray, device: torch.device | str = "cpu") -> BoolArray:
        """Whether the executed probe fails at each value (what the closed form must equal)."""
        return np.array([self.probe(self.at(case, int(v)), device).outcome.failed for v in values], dtype=bool)

    def boundary(self, case: C, device: torch.device | str = "cpu") -> CaseBoundary:
        """The closed form's first failing value, confirmed by executing it and the one below."""
        low, high = self.scan_range(case)
        values = np.arange(low, high + 1, dtype=np.int64)
        fails = self.fails_grid(case, values)
        first = int(values[np.argmax(fails)]) if fails.any() else None
        if first is None:
            last = self.probe(self.at(case, high), device)
            return CaseBoundary(low, high, None, None, last, not last.outcome.failed, 1)
        failing = self.probe(self.at(case, first), device)
        passing: ProbeResult | None = self.probe(self.at(case, first - 1), device) if first > low else None
        confirmed = failing.outcome.failed and (passing is None or passing.outcome is Outcome.OK)
        return CaseBoundary(low, high, first, failing, passing, confirmed,
                            1 if passing is None else 2)

    def walk(self, case: C, first: int, stop: int, *, lead: int = 16, device: torch.device | str = "cpu") -> RequestWalk:
        """The run of one request whose length is ``scan_field``: one token a step from ``lead``
        below ``first`` up to ``stop`` (the longest its scheduler lets it grow), executing the step at
        every length, until one fails. vLLM's scheduler is not modelled beyond that cap: a request
        that reaches ``stop`` passes every length below it, which is what a run that hits a failure
        needs; the walk checks that none of those steps fails first and that the failure lies on the way."""
        start = max(self.scan_range(case)[0], first - lead)
        for steps, value in enumerate(range(start, stop + 1), start=1):
            result = self.probe(self.at(case, value), device)
            if result.outcome.failed:
                return RequestWalk(start, stop, value, result, steps)
        return RequestWalk(start, stop, None, None, max(0, stop - start + 1))

    def record(self, result: ProbeResult) -> dict[str, object]:
        """The JSON record of a probe: outcome, error, the buffer's and the table's widths, and the
        tokens read where a backend counts them. No request-table width (an SGLang notion) and no
        ``path``: these probes run the engine's host-side fill, no kernel-like read after it."""
        data = result.to_dict(self.name)
        keys = ["outcome", "error", "buffer_width", "table_width"] + (["reads"] if result.reads is not None else [])
        return {key: data.get(key) for key in [*keys, "device"]}

    def boundary_record(self, boundary: CaseBoundary) -> dict[str, object]:
        step = boundary.failing or boundary.passing
        return {
            f"first_failing_{self.scan_label}": boundary.first_failing,
            "scanned": [boundary.low, boundary.high],
            "outcome": boundary.failing.outcome.value if boundary.failing else Outcome.OK.value,
            "error": boundary.failing.error if boundary.failing else None,
            "confirmed": boundary.confirmed,
            "buffer_width": step.buffer_width if step else None,
            "table_width": step.table_width if step else None,
            "probes_run": boundary.probes_run,
        }


# ---- field parsing (the same one-line messages as the table cases) ----------------------------


def reject_unknown(data: Mapping[str, object], known: frozenset[str]) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown field (allowed: {', '.join(sorted(known))})")


def int_field(data: Mapping[str, object], name: str, default: int | None = None, low: int = 1,
              high: int | None = None) -> int:
    if name not in data:
        if default is None:
            raise ValueError(f"{name}: missing (required)")
        return default
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: {value!r} is not an integer")
    if value < low:
        raise ValueError(f"{name}: {value} is out of range (allowed: {low} or more)")
    if high is not None and value > high:
        raise ValueError(f"{name}: {value} is out of range (allowed: {low} to {high})")
    return value


def choice_field(data: Mapping[str, object], name: str, allowed: tuple[str, ...], default: str | None = None) -> str:
    value = data.get(name, default)
    if value is None:
        raise ValueError(f"{name}: missing (required, one of {', '.join(allowed)})")
    if value not in allowed:
        raise ValueError(f"{name}: {value!r} is not one of {', '.join(allowed)}")
    assert isinstance(value, str)
    return value


def int_list_field(data: Mapping[str, object], name: str, *, max_len: int = 4096) -> tuple[int, ...]:
    value = data.get(name)
    if value is None:
        raise ValueError(f"{name}: missing (required, a list of integers)")
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise ValueError(f"{name}: {value!r} is not a list of integers")
    if not 1 <= len(value) <= max_len:
        raise ValueError(f"{name}: {len(value)} entries is out of range (allowed: 1 to {max_len})")
    return tuple(value)
