"""Graph capture and replay of a kernel-like read of the static buffers (issue #7, part 2).

The engine captures its attention kernels once, over static buffers, and per step only ``copy_``s
new metadata into those buffers before ``graph.replay()``. ``CapturedRead`` does the same with a
stand-in kernel, ``gather_kv``: it reads KV slots through a block table or page table, bounded by
each row's sequence length, as the attention kernels do.

    capture:  static table (the engine's buffer), static seq_lens, a fake KV pool, static out
    per step: buffers.replay(...)        host-side copy_ into the table (the shape error is raised
                                         here, before anything is replayed)
              read.run(reads_per_row)    copy_ the lengths, then graph.replay() and synchronize

On CUDA the read is captured with ``torch.cuda.CUDAGraph``; on an Ascend NPU with torch_npu's
``torch.npu.NPUGraph`` (the same API under the ``npu`` name). On the CPU there is no graph: the
same ``gather_kv`` runs eagerly at every step, so the CPU and the devices execute one function.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from workbench.devices.device import accelerator_module, synchronize

GRAPH_PATH = "graph"
EAGER_PATH = "eager"
NO_READ = "none"  # a probe that ran the metadata copy and no read (see probe.probe_table)
PATH_CHOICES = ("auto", GRAPH_PATH, EAGER_PATH)
WARMUP_RUNS = 2  # eager runs on a side stream before capture: lazy initialisation must not be captured


class GraphCaptureError(Exception):
    """Capture failed. Not a RuntimeError on purpose: a probe must not mistake it for a shape error."""


def graph_supported(device: torch.device | str) -> bool:
    """Whether ``device`` has a graph API the workbench drives (CUDA, or an NPU through torch_npu)."""
    module = accelerator_module(device)
    return module is not None and hasattr(module, "graph")


def choose_path(device: torch.device | str, path: str = "auto") -> str:
    """``graph`` where the device can capture, else ``eager``; ``path`` forces one."""
    if path not in PATH_CHOICES:
        raise ValueError(f"path: {path!r} is not one of {', '.join(PATH_CHOICES)}")
    if path == "auto":
        return GRAPH_PATH if graph_supported(device) else EAGER_PATH
    if path == GRAPH_PATH and not graph_supported(device):
        raise ValueError(f"path: 'graph' needs a CUDA or NPU device, not {torch.device(device)}")
    return path


def gather_kv(table: torch.Tensor, seq_lens: torch.Tensor, kv: torch.Tensor, page_size: int) -> torch.Tensor:
    """What an attention kernel reads: (rows,) the sum of the KV values of every live position.

    Position ``t`` of row ``r`` lives in slot ``table[r, t // ps] * ps + t % ps``; it is live when
    ``t < seq_lens[r]``. Worked example: ps 4, a row [3, 7, 0], seq_len 6 -> positions 0..5 read
    slots 12 13 14 15 28 29. Dead positions are masked the way kernels mask their loads (slot 0,
    value dropped), so only live positions can index past ``kv``. Only positions the table covers
    (``B * ps``) are read: a kernel reading past the row is the probe's silent over-read, not this.
    No op here synchronises with the host (no boolean indexing), so the function can be captured.
    """
    rows, width = table.shape
    positions = torch.arange(width * page_size, device=table.device)  # (B * ps,) int64
    slots = table.long()  # (rows, B) int64: slots already when the table is token-granular (ps 1)
    if page_size > 1:  # every page id repeated ps times (expand, not repeat_interleave: no host sync)
        pages = slots.unsqueeze(2).expand(rows, width, page_size).reshape(rows, width * page_size)
        slots = pages * page_size + positions % page_size  # (rows, B * ps) int64
    live = positions[None, :] < seq_lens.long()[:, None]  # (rows, B * ps) bool
    values = kv[torch.where(live, slots, torch.zeros_like(slots))]  # (rows, B * ps)
    return torch.where(live, values, torch.zeros_like(values)).sum(dim=1)


@dataclass
class CapturedRead:
    """A kernel-like read of one static table, captured as a graph where the device can."""

    table: torch.Tensor  # (rows, B) int32: the engine's static buffer, shared with its replay
    seq_lens: torch.Tensor  # (rows,) int32, static: tokens each row's kernel reads this step
    kv: torch.Tensor  # (num_slots,) int64 stand-in KV pool: slot i holds the value i
    out: torch.Tensor  # (rows,) int64, static: what the kernel produced
    page_size: int  # tokens per table entry (1 for the token-granular DSA page_table)
    graph: Any | None  # torch.cuda.CUDAGraph or torch.npu.NPUGraph; None on the eager path

    @property
    def path(self) -> str:
        return GRAPH_PATH if self.graph is not None else EAGER_PATH

    @classmethod
    def capture(cls, table: torch.Tensor, page_size: int, num_slots: int, *, path: str = "auto") -> CapturedRead:
        """Static buffers next to ``table`` and, on the graph path, the captured read."""
        device = table.device
        read = cls(
            table,
            torch.zeros(table.shape[0], dtype=torch.int32, device=device),
            torch.arange(num_slots, dtype=torch.int64, device=device),
            torch.zeros(table.shape[0], dtype=torch.int64, device=device),
            page_size,
            None,
        )
        if choose_path(device, path) == GRAPH_PATH:
            read.graph = _capture(read.kernel, device)
        return read

    def kernel(self) -> None:
        """The captured body: it writes into the static ``out``, as a graph's kernels must."""
        self.out.copy_(gather_kv(self.table, self.seq_lens, self.kv, self.page_size))

    def run(self, reads: Sequence[int]) -> torch.Tensor:
        """Copy this step's per-row reads into the static lengths, replay, wait; returns ``out``."""
        if len(reads) != self.seq_lens.shape[0]:
            raise ValueError(f"reads: {len(reads)} rows for a captured table of {self.seq_lens.shape[0]}")
        self.seq_lens.copy_(torch.as_tensor(list(reads), dtype=torch.int32))
        if self.graph is not None:
            self.graph.replay()
        else:
            self.kernel()
        synchronize(self.table.device)
        return self.out


def _capture(body: Callable[[], None], device: torch.device) -> Any:
    """Capture ``body`` with the device's graph API (torch.cuda / torch.npu, same names).

    As the CUDA Graphs notes ask: warm up on a side stream first, so lazy initialisation (kernel
    loading, workspace allocation) happens outside the capture; then capture under the module's
    ``graph`` context manager, which uses its own capture stream.
    """
    module = accelerator_module(device)
    assert module is not None
    graph_class = module.CUDAGraph if device.type == "cuda" else module.NPUGraph
    try:
        side = module.Stream(device=device)
        side.wait_stream(module.current_stream(device))
        with module.stream(side):
            for _ in range(WARMUP_RUNS):
                body()
        module.current_stream(device).wait_stream(side)
        graph = graph_class()
        with module.graph(graph):
            body()
        module.synchronize(device)
    except RuntimeError as err:
        raise GraphCaptureError(f"graph capture on {device} failed: {err}") from err
    return graph


def median_seconds(step: Callable[[], object], device: torch.device | str, *, repeats: int, warmup: int = 3) -> float:
    """Median wall time of ``step`` followed by a device synchronisation, over ``repeats`` runs."""
    if repeats < 1:
        raise ValueError(f"repeats: {repeats} is out of range (allowed: 1 or more)")
    for _ in range(warmup):
        step()
    synchronize(device)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        synchronize(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
