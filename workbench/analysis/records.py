"""The JSON records of ``workbench probe`` and ``workbench boundary``, shared by the command line
and the report: one case in (a parsed JSON object), one flat record out; a bad case is a record
with ``outcome: invalid`` and the reason, never an exception."""

from __future__ import annotations

from workbench import backends
from workbench.analysis.boundary import Boundary, BoundaryError, find_boundary
from workbench.analysis.cases import (
    TABLE_COMPONENTS,
    CaseError,
    TableCase,
    parse_backend_case,
    parse_case,
    parse_component,
)
from workbench.analysis.probe import probe
from workbench.model.outcome import Outcome, ProbeResult


def probe_record(data: object, device: str) -> dict[str, object]:
    """One ``probe --cases`` result; a bad case becomes ``outcome: invalid``."""
    try:
        case = parse_case(data)
    except CaseError as err:
        return {"outcome": Outcome.INVALID.value, "error": str(err)}
    if backends.is_case_backend(case.component):  # its record drops what only SGLang's tables have
        return backends.case_backend_of(case.component).record(probe(case, device))
    return probe(case, device).to_dict(case.component)


def boundary_record(data: object, device: str) -> dict[str, object]:
    if isinstance(data, dict) and isinstance(data.get("component"), str) and backends.is_case_backend(data["component"]):
        return case_boundary_record(data, device)
    try:
        if isinstance(data, dict) and parse_component(data) not in TABLE_COMPONENTS:
            raise CaseError(f"component: boundaries are searched for the tables ({', '.join(TABLE_COMPONENTS)})")
        case = parse_case(_without(data, "max_seq_len"), need_seq_lens=False)
        assert isinstance(case, TableCase)
        if case.seq_lens:
            raise CaseError("seq_lens: not a boundary field (the search chooses the committed length)")
        max_seq_len = data.get("max_seq_len") if isinstance(data, dict) else None
        if max_seq_len is not None and (isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int)):
            raise CaseError(f"max_seq_len: {max_seq_len!r} is not an integer")
        boundary = find_boundary(case, max_seq_len=max_seq_len, device=device)
    except (CaseError, BoundaryError) as err:
        return {"outcome": Outcome.INVALID.value, "error": str(err), "first_failing_seq_len": None}
    return boundary_to_dict(boundary)


def case_boundary_record(data: dict[str, object], device: str) -> dict[str, object]:
    """The boundary of a backend that brings its own case: its closed form, executed twice."""
    backend = backends.case_backend_of(str(data["component"]))
    try:
        case = parse_backend_case(data, boundary=True)
        low, _ = backend.scan_range(case)
        problem = backend.case_problem(backend.at(case, low))  # one that the scanned value does not cause
        if problem:
            raise CaseError(problem)
    except CaseError as err:
        return {"outcome": Outcome.INVALID.value, "error": str(err), f"first_failing_{backend.scan_label}": None}
    return backend.boundary_record(backend.boundary(case, device))


def _without(data: object, key: str) -> object:
    return {k: v for k, v in data.items() if k != key} if isinstance(data, dict) else data


def boundary_to_dict(boundary: Boundary) -> dict[str, object]:
    step: ProbeResult | None = boundary.failing or boundary.passing
    return {
        "first_failing_seq_len": boundary.first_failing_seq_len,
        "max_seq_len": boundary.max_seq_len,
        "outcome": boundary.failing.outcome.value if boundary.failing else Outcome.OK.value,
        "error": boundary.failing.error if boundary.failing else None,
        "confirmed": boundary.confirmed,
        "buffer_width": step.buffer_width if step else None,
        "request_table_width": step.request_table_width if step else None,
        "probes_run": boundary.probes_run,
    }
