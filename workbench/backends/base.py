"""What every table backend declares, in one place: the interface the rest of the package asks.

A backend is one engine's graph-captured table (the Ascend ``block_tables``, the DSA
``page_table``, FA3's ``page_table``): how ``init_cuda_graph_state`` sizes it (named rules, legacy
and fixed side by side), what one step reads past its committed length (the lookahead), how the
replay fills it on real torch tensors, what happens when a step asks for more than a row holds,
the same boundary as a closed form over whole grids, its bytes, and its seed cases. Probes,
boundaries, sweeps, memory, the simulation and the CLI ask these methods and never branch on a
backend's name.

Units: a backend counts its width in ``pages`` (one entry per page of ``ps`` tokens) or ``tokens``
(one entry per token); ``capacity_tokens`` turns a width into the tokens one row covers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

import numpy as np
import numpy.typing as npt
import torch

from workbench.model.cases import TableCase
from workbench.model.geometry import Mode, ServingGeometry, cdiv
from workbench.model.outcome import Overwrite

IntArray = npt.NDArray[np.int64]
INT32_BYTES = 4  # every table the graphs keep is int32
MODE_CODES = {"decode": 0, "target-verify": 1, "draft-decode": 2, "draft-extend": 3}


@dataclass(frozen=True)
class Grid:
    """Equal-length int64 columns of configurations, for the closed forms.

    ``w`` is the request-table width ``W`` of each row; ``mode`` holds ``MODE_CODES``.
    """

    ctx: IntArray
    ps: IntArray
    d: IntArray
    w: IntArray
    mode: IntArray
    step_id: IntArray
    topk: IntArray  # the speculative topk (a backend may read differently above 1)

    def take(self, mask: npt.NDArray[np.bool_]) -> Grid:
        return Grid(self.ctx[mask], self.ps[mask], self.d[mask], self.w[mask], self.mode[mask], self.step_id[mask],
                    self.topk[mask])


def cdiv_grid(a: IntArray, b: IntArray) -> IntArray:
    return (a + b - 1) // b


@dataclass(frozen=True)
class SizingRule:
    """One way ``init_cuda_graph_state`` sizes the table, as some engine version ships it."""

    name: str  # "context", "context-plus-draft", "req-to-token"
    width: Callable[[ServingGeometry], int]  # B in the backend's unit
    width_grid: Callable[[Grid], IntArray]  # the same over a whole grid
    change: str  # the engine change the rule stands for
    quirk: str  # one line: what it is blind to, or why it is safe


@dataclass(frozen=True)
class Seed:
    """A real fix, as probe cases: the step before it and after it, and torch's message before."""

    name: str
    story: str
    before: dict[str, object]  # the case under the legacy rule or gather
    after: dict[str, object]  # the same step after the fix
    expected_error: str  # the message before the fix
    boundary_case: dict[str, object] | None = None  # without seq_lens, for the boundary search


class Buffers(Protocol):
    """The static buffers one captured graph reads."""

    @property
    def read_table(self) -> torch.Tensor:
        """What the kernels read through: (rows, B) int32."""
        ...

    @property
    def entry_tokens(self) -> int:
        """Tokens each entry of ``read_table`` stands for (``ps`` for a page table of pages)."""
        ...


class TableBackend(ABC):
    """One graph-captured table of one engine backend (see the module note)."""

    name: str  # kebab case, engine first: "sglang-ascend-block-tables"
    aliases: tuple[str, ...] = ()  # older names still accepted ("npu-block-table")
    engine: str  # "sglang"
    device_family: str  # "ascend-npu", "cuda"
    # What in a launch command sets this table up: the engine's attention-backend values (SGLang's
    # ``--attention-backend``), or a feature name the engine's resolution names (vLLM: "dsa-indexer").
    # ``workbench check`` asks the registry for the backends whose names a deployment resolves to.
    launch_names: tuple[str, ...] = ()
    buffer_name: str  # the engine's attribute: "block_tables", "page_table"
    unit: str  # "pages" or "tokens"
    short: str  # a column prefix in simulation frames: "npu", "dsa"
    pad_seq_len: int  # the seq_len a padded graph row replays with (it never raises max(seq_lens))
    rules: Mapping[str, SizingRule]
    modes: tuple[Mode, ...] = tuple(Mode)
    case_fields: frozenset[str] = frozenset()  # optional case fields it takes: "replay", "hybrid_swa", "path"
    # The string-valued fields among ``case_fields`` that ``TableCase.options`` carries: name ->
    # allowed values, the default first (TRT-LLM MHA: "path" -> graph, eager, ragged-verify).
    case_options: Mapping[str, tuple[str, ...]] = MappingProxyType({})
    replays: tuple[str, ...] = ("dynamic",)  # replay variants a sweep tries
    on_overflow: str  # one line: what a step that asks for more than a row holds comes to
    seeds: tuple[Seed, ...] = ()
    page_sizes: tuple[int, ...] = (1,)  # the page sizes deployments run it with (the atlas's settings)
    # One of the three seeds' components (docs/glossary.md#seed): sweeps, memory tables and runs that
    # name no component cover these, so every default frame stays what it was before other backends were added.
    in_defaults: bool = False

    @property
    def label(self) -> str:
        """The name messages use: the oldest alias where one exists, so old messages stay the same."""
        return self.aliases[0] if self.aliases else self.name

    # ---- sizing ---------------------------------------------------------------------------------

    def width(self, geometry: ServingGeometry, rule: str) -> int:
        """``B`` under ``rule``, in the backend's unit."""
        return self.rules[rule].width(geometry)

    def capacity_tokens(self, geometry: ServingGeometry, width: int) -> int:
        """Tokens one row of a ``width``-wide table covers."""
        return width * geometry.page_size if self.unit == "pages" else width

    def capacity_grid(self, width: IntArray, ps: IntArray) -> IntArray:
        return width * ps if self.unit == "pages" else width

    def width_for_tokens(self, geometry: ServingGeometry, tokens: int) -> int:
        """The narrowest width whose rows cover ``tokens``."""
        return cdiv(tokens, geometry.page_size) if self.unit == "pages" else tokens

    # ---- how far a run gets ---------------------------------------------------------------------

    def reachable_len(self, geometry: ServingGeometry, mode: Mode, step_id: int = 0, *, overshoot: int = 2) -> int:
        """The largest committed length a real run replays in ``mode``.

        SGLang's scheduler caps a request at ``ctx - 1`` committed tokens (0.5.23:
        ``max_req_len = context_len - 1`` in ``srt/managers/tp_worker.py:421-424``, and
        ``max_new_tokens`` clamped to ``max_req_len - input_len - 1`` in
        ``srt/managers/scheduler.py:2709-2716``; docs/engine-facts.md#sglang-scheduler-caps); with
        speculation a finished request can ride one more verify and multi-token acceptance can pass
        the cap, by ``overshoot`` tokens (the workbench's own default, docs/semantics.md#reach-and-margin).
        The request table's bound caps it too.
        """
        return reachable_committed_len(geometry, mode, step_id, overshoot=overshoot)

    # ---- one step -------------------------------------------------------------------------------

    def lookahead(self, geometry: ServingGeometry, mode: Mode, step_id: int = 0) -> int:
        """Tokens a step's kernel reads past the committed length (verify: D; draft step i: i + 1)."""
        return geometry.lookahead(mode, step_id)

    def lookahead_grid(self, grid: Grid) -> IntArray:
        out: IntArray = np.select([grid.mode == 1, grid.mode == 2], [grid.d, grid.step_id + 1], 0)
        return out

    def mode_problem(self, mode: Mode) -> str | None:
        """Why this backend has no graph in ``mode``, or None."""
        if mode in self.modes:
            return None
        allowed = ", ".join(m.value for m in self.modes)
        return f"mode: {self.label} has no {mode.value} graph (allowed: {allowed})"

    def case_problem(self, case: TableCase) -> str | None:
        """Backend-specific reasons a case is not a state the engine can replay (beyond the mode)."""
        return None

    def option(self, case: TableCase, name: str) -> str:
        """The case's value of the backend's string field ``name``, or its default."""
        return case.option(name, self.case_options[name][0])

    def options_of(self, fields: Mapping[str, object]) -> tuple[tuple[str, str], ...]:
        """``TableCase.options`` from a release's fields: those of the backend's string fields the
        release has a value for (learned per release, such as Ascend's ``spec_fill``)."""
        return tuple(sorted((name, str(fields[name])) for name in self.case_options if name in fields))

    def probe_rows(self, case: TableCase, width: int) -> int:
        """Rows a probe allocates: whether a copy fails depends on widths only, so one per request."""
        return len(case.seq_lens)

    def read_lengths(self, case: TableCase, reads: Sequence[int]) -> list[int]:
        """Tokens the kernel-like read follows, one entry per row the probe replayed."""
        return list(reads)

    @abstractmethod
    def allocate(
        self, geometry: ServingGeometry, width: int, *, rows: int, case: TableCase, device: torch.device | str
    ) -> Buffers:
        """The buffers ``init_cuda_graph_state`` makes, ``width`` wide and ``rows`` tall."""

    @abstractmethod
    def replay(
        self, buffers: Buffers, req_to_token: torch.Tensor, rows: Sequence[int], seq_lens: Sequence[int],
        case: TableCase, *, num_slots: int, query_rows: int | None = None,
    ) -> Overwrite | None:
        """Fill the buffers for one step as the engine's replay does; raises what torch raises.

        Returns the first write past a row's end (a backend whose builder writes a flat buffer or
        an unbounded row), or None. ``num_slots`` is the KV pool's size (maps of the whole pool are
        built from it); ``query_rows`` overrides the query rows per request where a backend has several.
        """

    def buffer_key(self, case: TableCase) -> tuple[object, ...]:
        """What besides the width makes two probes' buffers different (the capture cache's key)."""
        return ()

    # ---- bytes ----------------------------------------------------------------------------------

    def graph_rows(self, geometry: ServingGeometry, mode: Mode) -> int:
        """Rows ``init_cuda_graph_state`` allocates: one per request of ``max_bs``."""
        return geometry.max_bs

    def full_size(self, geometry: ServingGeometry, width: int, mode: Mode, *, device: torch.device | str,
                  hybrid_swa: bool = False) -> list[torch.Tensor]:
        """The graph's buffers at full size, for measured memory."""
        case = TableCase(component=self.name, geometry=geometry, rule="", mode=mode, hybrid_swa=hybrid_swa)
        return buffer_tensors(self.allocate(geometry, width, rows=self.graph_rows(geometry, mode), case=case,
                                            device=device))

    def table_bytes(self, geometry: ServingGeometry, width: int, mode: Mode, *, hybrid_swa: bool = False) -> int:
        """Bytes of the buffers ``init_cuda_graph_state`` makes for a table ``width`` wide."""
        return self.graph_rows(geometry, mode) * width * INT32_BYTES


def reachable_committed_len(geometry: ServingGeometry, mode: Mode, step_id: int = 0, *, overshoot: int = 2) -> int:
    """SGLang's scheduler cap plus the speculative overshoot, within what the request table holds
    (``TableBackend.reachable_len`` says where each part is read)."""
    cap = geometry.context_len - 1 + (overshoot if geometry.speculative else 0)
    return max(1, min(geometry.max_committed_len(mode, step_id), cap))


def buffer_tensors(buffers: Buffers) -> list[torch.Tensor]:
    """The tables a buffers object holds: its 2-D tensors (per-row vectors such as FA3's
    ``cache_seqlens`` are not tables and are not counted in ``table_bytes``)."""
    return [v for v in vars(buffers).values() if isinstance(v, torch.Tensor) and v.dim() == 2]
