"""The registry of engine backends: one module per backend, each declaring what the package needs.

Everything outside this package asks the registry (``backend_of``, ``table_backends``,
``is_case_backend``, ``case_backend_of``) and never branches on a backend's name. Adding a backend
is one module plus one line in ``_MODULES`` (``_GATHER_MODULES`` for an allocator's ``alloc_decode``
gathers, ``_CASE_MODULES`` for a backend that brings its own case: ``case_backend.py``,
``_POOLED_MODULES`` for flat buffers pooled across a batch: ``pooled.py``, ``_RESERVATION_MODULES``
for the request table written by a step's reservation: ``sglang/req_to_token.py``).

Holds the registry (this ``__init__``), the pieces every backend shares (``base``, ``case_backend``,
``gather``, ``page_writes``, ``pooled``) and one folder per engine (``sglang``, ``vllm``). The
registry imports every backend module; a backend imports only the shared pieces and ``model``
(vLLM's also ``engines.store.vllm_releases``, its learned data), never the registry. Imported by
analysis, preflight, sim, present, repro, devices, the CLI and the engines' conformance and
learners; ``model`` does not import it (an allocator's gather is handed to it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workbench.backends.base import Seed, SizingRule, TableBackend
from workbench.backends.case_backend import BackendCase, CaseBackend, CaseSeed
from workbench.backends.gather import DecodeGather
from workbench.backends.pooled import PooledBackend, PooledBuffer
from workbench.backends.sglang import (
    aiter_kv_indices as sglang_aiter_kv_indices,
)
from workbench.backends.sglang import (
    aiter_page_table as sglang_aiter_page_table,
)
from workbench.backends.sglang import (
    ascend_block_tables as sglang_ascend_block_tables,
)
from workbench.backends.sglang import (
    cuda_allocator as sglang_cuda_allocator,
)
from workbench.backends.sglang import (
    dsa_page_table as sglang_dsa_page_table,
)
from workbench.backends.sglang import (
    fa3_page_table as sglang_fa3_page_table,
)
from workbench.backends.sglang import (
    flashinfer_kv_indices as sglang_flashinfer_kv_indices,
)
from workbench.backends.sglang import (
    flashinfer_mla_kv_indices as sglang_flashinfer_mla_kv_indices,
)
from workbench.backends.sglang import (
    flashmla_page_table as sglang_flashmla_page_table,
)
from workbench.backends.sglang import (
    npu_allocator as sglang_npu_allocator,
)
from workbench.backends.sglang import (
    req_to_token as sglang_req_to_token,
)
from workbench.backends.sglang import (
    triton_kv_indices as sglang_triton_kv_indices,
)
from workbench.backends.sglang import (
    trtllm_mha_page_table as sglang_trtllm_mha_page_table,
)
from workbench.backends.sglang import (
    trtllm_mla_page_table as sglang_trtllm_mla_page_table,
)
from workbench.backends.sglang import (
    xpu_page_table as sglang_xpu_page_table,
)
from workbench.backends.sglang.req_to_token import ReservationBackend
from workbench.backends.vllm import (
    ascend_block_table as vllm_ascend_block_table,
)
from workbench.backends.vllm import (
    gdn_state_indices as vllm_gdn_state_indices,
)
from workbench.backends.vllm import (
    indexer_block_table as vllm_indexer_block_table,
)
from workbench.backends.vllm import (
    v0_graph_block_tables as vllm_v0_graph_block_tables,
)
from workbench.backends.vllm import (
    v1_block_table as vllm_v1_block_table,
)
from workbench.backends.vllm import (
    v1_waiting_pad as vllm_v1_waiting_pad,
)

_MODULES = (
    sglang_ascend_block_tables, sglang_dsa_page_table, sglang_fa3_page_table, sglang_xpu_page_table,
    sglang_trtllm_mha_page_table, sglang_flashmla_page_table, sglang_trtllm_mla_page_table, sglang_aiter_page_table,
)

_GATHER_MODULES = (sglang_npu_allocator, sglang_cuda_allocator)

_CASE_MODULES = (vllm_indexer_block_table, vllm_v0_graph_block_tables, vllm_v1_block_table, vllm_v1_waiting_pad,
                 vllm_ascend_block_table, vllm_gdn_state_indices)

_POOLED_MODULES = (sglang_flashinfer_kv_indices, sglang_flashinfer_mla_kv_indices, sglang_triton_kv_indices,
                   sglang_aiter_kv_indices)

_RESERVATION_MODULES = (sglang_req_to_token,)

TABLE_BACKENDS: tuple[TableBackend, ...] = tuple(m.BACKEND for m in _MODULES)
_BY_NAME: dict[str, TableBackend] = {
    name: b for b in TABLE_BACKENDS for name in (b.name, *b.aliases)
}
# The names the command line and case files accept: legacy aliases first, as they always were.
TABLE_COMPONENTS: tuple[str, ...] = tuple(b.label for b in TABLE_BACKENDS)
DEFAULT_COMPONENTS: tuple[str, ...] = tuple(b.label for b in TABLE_BACKENDS if b.in_defaults)
RULE_NAMES: tuple[str, ...] = tuple(dict.fromkeys(r for b in TABLE_BACKENDS for r in b.rules))


CASE_BACKENDS: tuple[CaseBackend[Any], ...] = tuple(m.BACKEND for m in _CASE_MODULES)
_CASE_BY_NAME: dict[str, CaseBackend[Any]] = {b.name: b for b in CASE_BACKENDS}
CASE_COMPONENTS: tuple[str, ...] = tuple(_CASE_BY_NAME)


POOLED_BACKENDS: tuple[PooledBackend, ...] = tuple(m.BACKEND for m in _POOLED_MODULES)
_POOLED_BY_NAME: dict[str, PooledBackend] = {b.name: b for b in POOLED_BACKENDS}


RESERVATION_BACKENDS: tuple[ReservationBackend, ...] = tuple(m.BACKEND for m in _RESERVATION_MODULES)
_RESERVATION_BY_NAME: dict[str, ReservationBackend] = {b.name: b for b in RESERVATION_BACKENDS}


def is_reservation_backend(name: str) -> bool:
    """Whether ``name`` is a request table written by a step's reservation (``backends/sglang/req_to_token.py``)."""
    return name in _RESERVATION_BY_NAME


def reservation_backend_of(name: str) -> ReservationBackend:
    try:
        return _RESERVATION_BY_NAME[name]
    except KeyError:
        raise ValueError(f"component: {name!r} is not one of {', '.join(_RESERVATION_BY_NAME)}") from None


def is_pooled_backend(name: str) -> bool:
    """Whether ``name`` is a backend of flat buffers pooled across a batch (``pooled.py``)."""
    return name in _POOLED_BY_NAME


def pooled_backend_of(name: str) -> PooledBackend:
    try:
        return _POOLED_BY_NAME[name]
    except KeyError:
        raise ValueError(f"component: {name!r} is not one of {', '.join(_POOLED_BY_NAME)}") from None


GATHERS: dict[str, DecodeGather] = {g.name: g for m in _GATHER_MODULES for g in m.GATHERS}
GATHER_NAMES: tuple[str, ...] = tuple(GATHERS)
DEFAULT_GATHERS: tuple[str, ...] = tuple(g.name for g in GATHERS.values() if g.in_defaults)


def gather_of(name: str) -> DecodeGather:
    """The ``alloc_decode`` gather called ``name``."""
    try:
        return GATHERS[name]
    except KeyError:
        raise ValueError(f"gather: {name!r} is not one of {', '.join(GATHERS)}") from None


def table_backends() -> tuple[TableBackend, ...]:
    return TABLE_BACKENDS


def is_table_backend(name: str) -> bool:
    return name in _BY_NAME


def is_case_backend(name: str) -> bool:
    """Whether ``name`` is a backend that parses and probes its own cases."""
    return name in _CASE_BY_NAME


def case_backend_of(name: str) -> CaseBackend[Any]:
    try:
        return _CASE_BY_NAME[name]
    except KeyError:
        raise ValueError(f"component: {name!r} is not one of {', '.join(CASE_COMPONENTS)}") from None


def case_seeds() -> tuple[CaseSeed, ...]:
    """The case backends' seed cases (the vLLM crash reports)."""
    return tuple(seed for b in CASE_BACKENDS for seed in b.seeds)


def backend_of(name: str) -> TableBackend:
    """The backend called ``name`` (its registry name or an alias)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"component: {name!r} is not one of {', '.join(TABLE_COMPONENTS)}") from None


def all_names() -> tuple[str, ...]:
    """Every accepted table-backend name: each backend's label, then the other names."""
    return tuple(dict.fromkeys([*TABLE_COMPONENTS, *_BY_NAME]))


def check_rule(backend: TableBackend, rule: str) -> str:
    if rule not in backend.rules:
        if rule in RULE_NAMES:
            raise ValueError(f"rule: {rule!r} is not a rule of {backend.label} (allowed: {', '.join(backend.rules)})")
        raise ValueError(f"rule: {rule!r} is not one of {', '.join(RULE_NAMES)}")
    return rule


def check_rule_name(rule: str) -> str:
    """``rule`` if some backend has a rule of that name."""
    if rule not in RULE_NAMES:
        raise ValueError(f"rule: {rule!r} is not one of {', '.join(RULE_NAMES)}")
    return rule


def engine_backends(engine: str) -> tuple[TableBackend, ...]:
    """The table backends of one engine ("sglang", "vllm"), in registry order."""
    return tuple(b for b in TABLE_BACKENDS if b.engine == engine)


def launched_backends(engine: str, launch_names: Iterable[str], device_family: str) -> tuple[TableBackend, ...]:
    """The tables a deployment sets up: the engine's backends on ``device_family`` whose
    ``launch_names`` meet what the launch resolved to (its attention backend, its features)."""
    names = set(launch_names)
    return tuple(b for b in engine_backends(engine) if b.device_family == device_family and names & set(b.launch_names))


def device_gathers(engine: str, device_family: str) -> tuple[DecodeGather, ...]:
    """The ``alloc_decode`` gathers one engine ships for ``device_family``."""
    return tuple(g for g in GATHERS.values() if g.engine == engine and g.device_family == device_family)


def seeds() -> tuple[Seed, ...]:
    return tuple(seed for b in TABLE_BACKENDS for seed in b.seeds)


def allocator_seeds() -> tuple[Seed, ...]:
    """The allocators' seed cases (the exact fit of the NPU gather)."""
    return tuple(seed for m in _GATHER_MODULES for seed in m.SEEDS)


__all__ = [
    "BackendCase", "CASE_BACKENDS", "CASE_COMPONENTS", "CaseBackend", "CaseSeed", "DEFAULT_COMPONENTS",
    "DEFAULT_GATHERS", "DecodeGather", "GATHERS", "GATHER_NAMES", "POOLED_BACKENDS", "PooledBackend", "PooledBuffer",
    "RESERVATION_BACKENDS", "RULE_NAMES", "ReservationBackend", "Seed", "SizingRule", "TABLE_BACKENDS",
    "TABLE_COMPONENTS", "TableBackend", "all_names", "allocator_seeds", "backend_of", "case_backend_of", "case_seeds",
    "check_rule", "check_rule_name", "device_gathers", "engine_backends", "gather_of", "is_case_backend",
    "is_pooled_backend", "is_reservation_backend", "is_table_backend", "launched_backends", "pooled_backend_of",
    "reservation_backend_of", "seeds",
    "table_backends",
]
