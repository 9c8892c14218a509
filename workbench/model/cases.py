"""Typed engine steps: one replay of a graph-captured table, or one ``alloc_decode`` call.

Parsing them from JSON lives in ``workbench.analysis.cases``; the types sit here, below the
backends, so a backend's replay can take the step it is asked to run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.model.allocator import Gather
from workbench.model.choice import Choice
from workbench.model.geometry import Mode, ServingGeometry


class Replay(Choice):
    """How a replay chooses the columns it copies (backends that have both, such as DSA)."""

    DYNAMIC = "dynamic"  # the columns the step reads
    STATIC = "static"  # the buffer's full width in every mode; kernels bound reads by cache_seqlens



@dataclass(frozen=True, kw_only=True)
class TableCase:
    """One replay of a graph-captured table; ``seq_lens`` are the batch's committed lengths.

    ``component`` is the backend's name as the user wrote it (a registry name or an alias);
    ``workbench.backends.backend_of`` resolves it.
    """

    component: str
    geometry: ServingGeometry
    rule: str
    mode: Mode
    seq_lens: tuple[int, ...] = ()
    step_id: int = 0
    replay: Replay = Replay.DYNAMIC  # backends with a static replay only
    hybrid_swa: bool = False  # backends with a sliding-window table only
    accept_len: int = 1  # draft-extend: accepted tokens per request
    # String fields a backend declares in ``TableBackend.case_options`` (TRT-LLM MHA's "path"),
    # as sorted (name, value) pairs so the case stays hashable; absent ones take the default.
    options: tuple[tuple[str, str], ...] = ()

    def option(self, name: str, default: str) -> str:
        return dict(self.options).get(name, default)


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
