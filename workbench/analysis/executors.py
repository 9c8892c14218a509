"""Where a sweep's chunks run: in this process, on every local core, or on a Ray cluster.

A chunk is a list of configurations; a worker turns it into rows with a plain top-level function
(picklable, so the same function runs in a process pool and as a Ray task). The parent keeps the
bookkeeping: results come back tagged with their chunk index, in any order, and the caller writes
each one atomically as it arrives, so an interrupted parallel sweep resumes like a serial one.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

EXECUTORS = ("auto", "serial", "process", "ray")
AUTO_PROCESS_MIN_CONFIGS = 2000  # below this, starting workers (each imports torch) costs more than it saves


@dataclass(frozen=True, kw_only=True)
class Executor:
    """``kind``: auto (a process pool for large sweeps, else serial), serial, process or ray.
    ``workers``: processes or Ray CPUs (default: every local core); ``address``: a Ray cluster
    (``ray://host:10001`` or ``auto``), None to start a local Ray instance."""

    kind: str = "auto"
    workers: int | None = None
    address: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise ValueError(f"executor: {self.kind!r} is not one of {', '.join(EXECUTORS)}")
        if self.workers is not None and (isinstance(self.workers, bool) or not isinstance(self.workers, int)
                                         or self.workers < 1):
            raise ValueError(f"workers: {self.workers!r} is out of range (allowed: integers 1 or more)")
        if self.address is not None and self.kind != "ray":
            raise ValueError(f"address: applies to the ray executor only (executor is {self.kind!r})")

    def resolved(self, num_configs: int) -> str:
        if self.kind != "auto":
            return self.kind
        many = num_configs >= AUTO_PROCESS_MIN_CONFIGS and self.num_workers() > 1
        return "process" if many else "serial"

    def num_workers(self) -> int:
        return self.workers or os.cpu_count() or 1


Task = Callable[..., Any]


def run_chunks(task: Task, args: Sequence[tuple[Any, ...]], executor: Executor, *, device: str = "cpu",
               num_configs: int = 0) -> Iterator[tuple[int, Any]]:
    """Yield ``(index, task(*args[index]))`` for every chunk, as each one finishes."""
    kind = executor.resolved(num_configs)
    if kind == "serial" or not args:
        for index, arguments in enumerate(args):
            yield index, task(*arguments)
    elif kind == "process":
        yield from _process_pool(task, args, executor.num_workers(), device)
    else:
        yield from _ray(task, args, executor, device)


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _process_pool(task: Task, args: Sequence[tuple[Any, ...]], workers: int, device: str) -> Iterator[tuple[int, Any]]:
    # spawn, not fork: a forked child inherits torch's (and CUDA's) state half-initialised
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(args)), mp_context=context, initializer=_one_thread) as pool:
        pending: dict[Future[Any], int] = {pool.submit(task, *a): i for i, a in enumerate(args)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield pending.pop(future), future.result()


def _ray(task: Task, args: Sequence[tuple[Any, ...]], executor: Executor, device: str) -> Iterator[tuple[int, Any]]:
    try:
        import ray  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise ValueError("executor: 'ray' needs the ray extra (pip install -e '.[ray]')") from None
    if not ray.is_initialized():
        if executor.address is None:
            ray.init(num_cpus=executor.num_workers(), include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=executor.address, log_to_driver=False)
    # accelerator hosts are Ray resources: a CUDA sweep asks for a GPU per task, an NPU one an NPU
    resources: dict[str, Any] = {"num_cpus": 1}
    if device.startswith("cuda"):
        resources["num_gpus"] = 1
    elif device.startswith("npu"):
        resources["resources"] = {"NPU": 1}
    remote = ray.remote(**resources)(task)
    pending = {remote.remote(*a): i for i, a in enumerate(args)}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        yield pending.pop(done[0]), ray.get(done[0])
