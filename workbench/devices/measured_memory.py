"""Bytes the graph buffers really take on a device, next to the bytes the workbench predicts.

The probes replay narrow tensors (one row per request): whether a copy fails depends on widths
alone. Memory is the exception: ``allocate_full_size`` makes the buffers ``init_cuda_graph_state``
makes, with the engine's true row counts, and ``measure_bytes`` reads what allocating them took
(``hardware-check``'s memory section, and sweeps with ``measure_memory``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from workbench import backends
from workbench.devices.device import accelerator_module, allocated_bytes, synchronize
from workbench.model.geometry import Mode, ServingGeometry


def allocate_full_size(component: str, geometry: ServingGeometry, rule: str, mode: Mode, device: str) -> list[torch.Tensor]:
    """The buffers ``init_cuda_graph_state`` makes, with the engine's row counts (the backend's
    ``graph_rows``: e.g. ``max_bs`` for the NPU block tables, ``max_bs * D`` for a DSA verify)."""
    backend = backends.backend_of(component)
    return backend.full_size(geometry, backend.width(geometry, rule), mode, device=device)


@dataclass(frozen=True)
class Measured:
    measured_bytes: int
    storage_bytes: int  # the tensors' own bytes: rows * columns * 4 for int32 tables
    method: str
    shapes: tuple[tuple[int, ...], ...]


def measure_bytes(make: Callable[[], list[torch.Tensor]], device: str) -> Measured:
    """What allocating ``make()`` took on ``device``, and the tensors' own bytes.

    On a device, measured is the caching allocator's ``memory_allocated`` after minus before (it
    rounds every block up, so it can exceed the tensors' bytes). On the CPU there is no allocator
    statistic: measured is the storages' bytes, and the method column says so.
    """
    module = accelerator_module(device)
    synchronize(device)
    before = allocated_bytes(device)
    tensors = make()
    synchronize(device)
    after = allocated_bytes(device)
    storage = sum(t.untyped_storage().nbytes() for t in tensors)
    shapes = tuple(tuple(t.shape) for t in tensors)
    if module is None or before is None or after is None:
        return Measured(storage, storage, "untyped_storage().nbytes()", shapes)
    return Measured(after - before, storage, f"torch.{torch.device(device).type}.memory_allocated delta", shapes)


__all__ = ["Measured", "allocate_full_size", "measure_bytes"]
