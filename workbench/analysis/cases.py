"""Typed probe cases, and their parsing from the JSON objects of ``workbench probe --cases``.

Every parse error is a ``CaseError`` whose message names the field, the bad value and what is
allowed, in one line, so the command line can print it as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from workbench.backends.rules import check_rule
from workbench.backends.sglang_dsa_page_table import Replay
from workbench.model.allocator import Gather
from workbench.model.geometry import Mode, ServingGeometry

COMPONENTS = ("npu-block-table", "dsa-page-table", "allocator")
TABLE_COMPONENTS = ("npu-block-table", "dsa-page-table")
MAX_BATCH = 4096


class CaseError(ValueError):
    """A case that cannot be run as given."""


@dataclass(frozen=True, kw_only=True)
class TableCase:
    """One replay of a graph-captured table; ``seq_lens`` are the batch's committed lengths."""

    component: str
    geometry: ServingGeometry
    rule: str
    mode: Mode
    seq_lens: tuple[int, ...] = ()
    step_id: int = 0
    replay: Replay = Replay.DYNAMIC  # DSA only
    hybrid_swa: bool = False  # NPU only
    accept_len: int = 1  # DSA draft-extend only: accepted tokens per request


@dataclass(frozen=True, kw_only=True)
class AllocatorCase:
    """One ``alloc_decode`` call on a pool caught mid-run."""

    gather: Gather
    page_size: int
    seq_lens: tuple[int, ...]
    last_loc: tuple[int, ...]
    free_pages: tuple[int, ...]
    parked_pages: tuple[int, ...] = field(default=())
    component: str = "allocator"


Case = TableCase | AllocatorCase

_TABLE_FIELDS = {
    "component", "rule", "context_len", "page_size", "draft_tokens", "seq_lens", "mode", "step_id",
    "width_gen", "spec_steps", "spec_topk", "draft_has_kv", "replay", "hybrid_swa", "accept_len",
    "max_bs", "max_seq_len",
}
_ALLOCATOR_FIELDS = {"component", "gather", "page_size", "seq_lens", "last_loc", "free_pages", "parked_pages"}


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
    if component not in COMPONENTS:
        raise CaseError(f"component: {component!r} is not one of {', '.join(COMPONENTS)}")
    return component


def parse_case(data: object, *, need_seq_lens: bool = True) -> Case:
    """A case from one JSON object; ``need_seq_lens=False`` for boundary searches."""
    if not isinstance(data, dict):
        raise CaseError(f"case: {type(data).__name__} is not a JSON object")
    component = parse_component(data)
    if component == "allocator":
        return parse_allocator_case(data)
    return parse_table_case(data, need_seq_lens=need_seq_lens)


def parse_table_case(data: Mapping[str, object], *, need_seq_lens: bool = True) -> TableCase:
    _reject_unknown(data, _TABLE_FIELDS)
    try:
        geometry = ServingGeometry(
            context_len=_int(data, "context_len"),
            page_size=_int(data, "page_size"),
            draft_tokens=_int(data, "draft_tokens", 0),
            spec_steps=_int(data, "spec_steps", 1),
            spec_topk=_int(data, "spec_topk", 1),
            draft_has_kv=_bool(data, "draft_has_kv", True),
            max_bs=_int(data, "max_bs", 1),
            width_gen=_str(data, "width_gen", "g1"),
        )
        rule = check_rule(_str(data, "rule"))
        mode = Mode.parse(_str(data, "mode"))
        replay = Replay.parse(_str(data, "replay", "dynamic"))
    except CaseError:
        raise
    except ValueError as err:
        raise CaseError(str(err)) from None
    component = str(data["component"])
    if component == "npu-block-table" and "replay" in data:
        raise CaseError("replay: applies to dsa-page-table only")
    if component == "dsa-page-table" and data.get("hybrid_swa"):
        raise CaseError("hybrid_swa: applies to npu-block-table only")
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
    )


def parse_allocator_case(data: Mapping[str, object]) -> AllocatorCase:
    _reject_unknown(data, _ALLOCATOR_FIELDS)
    try:
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
