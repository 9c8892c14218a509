"""Typed probe cases, and their parsing from the JSON objects of ``workbench probe --cases``.

Every parse error is a ``CaseError`` whose message names the field, the bad value and what is
allowed, in one line, so the command line can print it as it is.
"""

from __future__ import annotations

from collections.abc import Mapping

from workbench import backends
from workbench.backends.case_backend import BackendCase
from workbench.engines.store.versions import apply_engine
from workbench.model.allocator import Gather
from workbench.model.cases import AllocatorCase, Case, Replay, TableCase
from workbench.model.geometry import Mode, ServingGeometry

TABLE_COMPONENTS = backends.TABLE_COMPONENTS
CASE_COMPONENTS = backends.CASE_COMPONENTS  # backends that bring their own case (vLLM's buffers)
COMPONENTS = (*TABLE_COMPONENTS, "allocator", *CASE_COMPONENTS)
MAX_BATCH = 4096


class CaseError(ValueError):
    """A case that cannot be run as given."""


# Each applies to the backends that list it in case_fields ("replay", "hybrid_swa", "path", ...).
_OPTIONAL_FIELDS = tuple(sorted({f for b in backends.table_backends() for f in b.case_fields}))
_TABLE_FIELDS = {
    "component", "rule", "context_len", "page_size", "draft_tokens", "seq_lens", "mode", "step_id",
    "width_gen", "spec_steps", "spec_topk", "draft_has_kv", "accept_len", "max_bs", "max_seq_len", "engine",
    *_OPTIONAL_FIELDS,
}
_ALLOCATOR_FIELDS = {"component", "gather", "page_size", "seq_lens", "last_loc", "free_pages", "parked_pages", "engine"}


def _int(data: Mapping[str, object], name: str, default: int | None = None, low: int | None = None) -> int:
    if name not in data:
        if default is None:
            raise CaseError(f"{name}: missing (required)")
        return default
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise CaseError(f"{name}: {value!r} is not an integer")
    if low is not None and value < low:
        raise CaseError(f"{name}: {value} is out of range (allowed: {low} or more)")
    return value


def _bool(data: Mapping[str, object], name: str, default: bool) -> bool:
    value = data.get(name, default)
    if not isinstance(value, bool):
        raise CaseError(f"{name}: {value!r} is not a boolean (allowed: true, false)")
    return value


def _int_list(data: Mapping[str, object], name: str, *, required: bool = True, min_len: int = 1) -> tuple[int, ...]:
    if name not in data:
        if required:
            raise CaseError(f"{name}: missing (required, a list of integers)")
        return ()
    value = data[name]
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise CaseError(f"{name}: {value!r} is not a list of integers")
    if not min_len <= len(value) <= MAX_BATCH:
        raise CaseError(f"{name}: {len(value)} entries is out of range (allowed: {min_len} to {MAX_BATCH})")
    return tuple(value)


def _str(data: Mapping[str, object], name: str, default: str | None = None) -> str:
    value = data.get(name, default)
    if value is None:
        raise CaseError(f"{name}: missing (required)")
    if not isinstance(value, str):
        raise CaseError(f"{name}: {value!r} is not a string")
    return value


def _reject_unknown(data: Mapping[str, object], known: set[str]) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise CaseError(f"{unknown[0]}: unknown field (allowed: {', '.join(sorted(known))})")


def parse_component(data: Mapping[str, object]) -> str:
    component = _str(data, "component")
    if component != "allocator" and not backends.is_table_backend(component) and not backends.is_case_backend(component):
        raise CaseError(f"component: {component!r} is not one of {', '.join(COMPONENTS)}")
    return component


def parse_case(data: object, *, need_seq_lens: bool = True) -> Case | BackendCase:
    """A case from one JSON object; ``need_seq_lens=False`` for boundary searches."""
    if not isinstance(data, dict):
        raise CaseError(f"case: {type(data).__name__} is not a JSON object")
    component = parse_component(data)
    if component == "allocator":
        return parse_allocator_case(data)
    if backends.is_case_backend(component):
        return parse_backend_case(data, boundary=not need_seq_lens)
    return parse_table_case(data, need_seq_lens=need_seq_lens)


def parse_backend_case(data: Mapping[str, object], *, boundary: bool = False) -> BackendCase:
    """A case of a backend that parses its own fields; its ``ValueError`` becomes a ``CaseError``."""
    backend = backends.case_backend_of(str(data["component"]))
    if boundary:
        given = [name for name in backend.boundary_rejects if name in data]
        if given:
            raise CaseError(f"{given[0]}: not a boundary field (the search chooses the {backend.scan_label})")
    try:
        case: BackendCase = backend.parse(data, boundary=boundary)
    except ValueError as err:
        raise CaseError(str(err)) from None
    return case


def parse_table_case(data: Mapping[str, object], *, need_seq_lens: bool = True) -> TableCase:
    """A table case; ``engine`` fills the version's rule, width generation and replay where the
    case gives none. Without ``max_bs`` the captured graph is taken to hold the batch."""
    _reject_unknown(data, _TABLE_FIELDS)
    component = str(data["component"])
    backend = backends.backend_of(component)
    try:
        data = apply_engine(data, backend.name)
    except ValueError as err:
        raise CaseError(str(err)) from None
    given = data.get("seq_lens")
    batch = len(given) if isinstance(given, list) else 1  # checked below, after the geometry
    try:
        geometry = ServingGeometry(
            context_len=_int(data, "context_len"),
            page_size=_int(data, "page_size"),
            draft_tokens=_int(data, "draft_tokens", 0),
            spec_steps=_int(data, "spec_steps", 1),
            spec_topk=_int(data, "spec_topk", 1),
            draft_has_kv=_bool(data, "draft_has_kv", True),
            max_bs=_int(data, "max_bs", max(1, batch)),
            width_gen=_str(data, "width_gen", "g1"),
        )
        rule = backends.check_rule(backend, _str(data, "rule"))
        mode = Mode.parse(_str(data, "mode"))
        replay = Replay.parse(_str(data, "replay", "dynamic"))
    except CaseError:
        raise
    except ValueError as err:
        raise CaseError(str(err)) from None
    for name in _OPTIONAL_FIELDS:
        given = name in data and data[name] is not False  # a flag set to false is the same as absent
        if given and name not in backend.case_fields:
            takers = [b.label for b in backends.table_backends() if name in b.case_fields]
            raise CaseError(f"{name}: applies to {', '.join(takers)} only")
    options = _options(data, backend.case_options)
    return TableCase(
        component=component,
        geometry=geometry,
        rule=rule,
        mode=mode,
        seq_lens=_int_list(data, "seq_lens", required=need_seq_lens),
        step_id=_int(data, "step_id", 0, low=0),
        replay=replay,
        hybrid_swa=_bool(data, "hybrid_swa", False),
        accept_len=_int(data, "accept_len", 1, low=1),
        options=options,
    )


def _options(data: Mapping[str, object], declared: Mapping[str, tuple[str, ...]]) -> tuple[tuple[str, str], ...]:
    """The backend's string fields the case gives, each checked against its allowed values."""
    chosen = []
    for name, allowed in sorted(declared.items()):
        if name in data:
            value = _str(data, name)
            if value not in allowed:
                raise CaseError(f"{name}: {value!r} is not one of {', '.join(allowed)}")
            chosen.append((name, value))
    return tuple(chosen)


def parse_allocator_case(data: Mapping[str, object]) -> AllocatorCase:
    """An allocator case; ``engine`` fills the release's gather where the case gives none."""
    _reject_unknown(data, _ALLOCATOR_FIELDS)
    try:
        data = apply_engine(data, "allocator")
        gather = Gather.parse(_str(data, "gather"))
    except ValueError as err:
        raise CaseError(str(err)) from None
    return AllocatorCase(
        gather=gather,
        page_size=_int(data, "page_size", low=1),
        seq_lens=_int_list(data, "seq_lens"),
        last_loc=_int_list(data, "last_loc"),
        free_pages=_int_list(data, "free_pages", min_len=0),
        parked_pages=_int_list(data, "parked_pages", required=False, min_len=0),
    )


__all__ = ["CASE_COMPONENTS", "BackendCase", "parse_backend_case",
           "COMPONENTS", "MAX_BATCH", "TABLE_COMPONENTS", "AllocatorCase", "Case", "CaseError", "Replay", "TableCase",
           "parse_allocator_case", "parse_case", "parse_component", "parse_table_case"]
