"""``workbench bench``: how fast the workbench answers, measured, printed, never asserted.

Each number says what was timed: the vectorized closed form over a large random grid; the fast
verified search (closed form, then the two steps around each boundary executed) over random
configurations of all three components, on every core, worker start-up included; the
step-by-step search against the fast one on a subset (identical answers asserted); the allocator's
``alloc_decode`` at batch 256 per gather; the serving-run simulation; the process's peak RSS.
"""

from __future__ import annotations

import os
import random
import resource
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

import numpy as np
import torch

from workbench import backends
from workbench.analysis.boundary import fast_boundaries, step_by_step_boundary
from workbench.analysis.cases import TableCase
from workbench.analysis.closed_form import first_failing_seq_len
from workbench.analysis.exact_fit import AllocatorConfig, allocator_boundaries
from workbench.analysis.executors import Executor, run_chunks
from workbench.backends import DEFAULT_COMPONENTS, RULE_NAMES
from workbench.devices.device import one_torch_thread
from workbench.model.allocator import Gather, PagedAllocator
from workbench.model.cases import Replay
from workbench.model.geometry import Mode, ServingGeometry

REALISTIC_CONTEXTS = (4096, 32768, 90000, 131072, 163840, 202752, 1048576)
COMPONENTS = (*DEFAULT_COMPONENTS, "allocator")
CHUNK = 100  # configurations per task: small enough that both workers stay busy to the end
BenchConfig = TableCase | AllocatorConfig


def bench_cases(num_configs: int, seed: int = 0) -> list[BenchConfig]:
    """Random valid configurations, a third per component: table configurations of every rule,
    mode and width generation with realistic and random context lengths up to 1M tokens, and
    allocator batches of 1 to 64 rows under every gather."""
    rng = random.Random(seed)
    cases: list[BenchConfig] = []
    while len(cases) < num_configs:
        component = rng.choice(COMPONENTS)
        if component == "allocator":
            opens = tuple(rng.random() < 0.5 for _ in range(rng.randint(1, 64)))
            cases.append(AllocatorConfig(rng.choice(list(Gather)), rng.choice((2, 4, 64, 128, 256)), opens))
            continue
        ctx = rng.choice(REALISTIC_CONTEXTS) if rng.random() < 0.5 else rng.randint(64, 1 << 20)
        d = rng.choice((0, 4, 6, 8, 16))
        g = ServingGeometry(context_len=ctx, page_size=rng.choice((1, 64, 128, 256)), draft_tokens=d,
                            spec_steps=rng.choice((1, 3, 5)), spec_topk=rng.choice((1, 4, 10)),
                            draft_has_kv=rng.random() < 0.7, width_gen=rng.choice(("g1", "g2", "g3")))
        backend = backends.backend_of(component)
        modes = [Mode.DECODE] + ([Mode.TARGET_VERIFY, Mode.DRAFT_EXTEND] if d else [])
        if d and Mode.DRAFT_DECODE in backend.modes:
            modes.append(Mode.DRAFT_DECODE)
        mode = rng.choice(modes)
        replay = rng.choice(list(Replay)) if "replay" in backend.case_fields else Replay.DYNAMIC
        step_id = rng.randrange(g.spec_steps) if mode is Mode.DRAFT_DECODE else 0
        cases.append(TableCase(component=component, geometry=g, rule=rng.choice(list(backend.rules)), mode=mode,
                               step_id=step_id, replay=replay))
    return cases


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def closed_form_rate(num_configs: int = 1_000_000, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    # the rules every default table has (Ascend's context-floor is the NPU's alone)
    shared_rules = [r for r in RULE_NAMES if all(r in backends.backend_of(c).rules for c in DEFAULT_COMPONENTS)]
    columns = {
        "component": rng.choice(list(DEFAULT_COMPONENTS), num_configs),
        "rule": rng.choice(shared_rules, num_configs),
        "mode": rng.choice(["decode", "target-verify", "draft-extend"], num_configs),
        "width_gen": rng.choice(["g1", "g2", "g3"], num_configs),
        "context_len": rng.integers(64, 1 << 20, num_configs),
        "page_size": rng.choice([1, 64, 128, 256], num_configs),
        "draft_tokens": rng.integers(1, 17, num_configs),
        "spec_steps": rng.integers(1, 6, num_configs),
        "spec_topk": rng.integers(1, 11, num_configs),
        "draft_has_kv": rng.random(num_configs) < 0.7,
        "step_id": np.zeros(num_configs, dtype=np.int64),
    }
    return num_configs / _seconds(lambda: first_failing_seq_len(columns))


def alloc_decode_us(gather: Gather, batch: int = 256, page_size: int = 64, repeats: int = 200) -> float:
    """Microseconds per ``alloc_decode`` call on a batch where every 8th row opens a page."""
    seq_lens = [page_size * 3 + (1 if row % 8 == 0 else 5) for row in range(batch)]
    last_loc = [(row + 1) * page_size + (s - 2) % page_size for row, s in zip(range(batch), seq_lens)]
    pages_needed = sum(1 for s in seq_lens if s % page_size == 1)
    seq_t = torch.tensor(seq_lens)
    last_t = torch.tensor(last_loc)
    total = 0.0
    step = backends.gather_of(gather.value)
    for _ in range(repeats):
        alloc = PagedAllocator(page_size, batch + 2 * pages_needed)
        alloc.free_pages = alloc.free_pages[batch:]  # rows hold pages 1..batch
        start = time.perf_counter()
        alloc.alloc_decode(seq_t, last_t, step)
        total += time.perf_counter() - start
    return total / repeats * 1e6


def verify_chunk(cases: list[BenchConfig]) -> list[int | None]:
    """Find and confirm each configuration's boundary: a table's first failing committed length,
    an allocator batch's smallest working free pool (a top-level function: pools and Ray run it)."""
    tables = [c for c in cases if isinstance(c, TableCase)]
    batches = [c for c in cases if isinstance(c, AllocatorConfig)]
    table_answers = iter(b.first_failing_seq_len for b in fast_boundaries(tables))
    batch_answers = iter(b.first_ok_free for b in allocator_boundaries(batches))
    return [next(table_answers) if isinstance(c, TableCase) else next(batch_answers) for c in cases]


def compare_searches(cases: list[TableCase]) -> tuple[float, float]:
    """Seconds of the fast and of the step-by-step search over ``cases``, identical answers asserted.

    One untimed fast pass first, so both searches run on warm buffers (``capture_cache``), as they
    do inside a sweep: otherwise the first one timed would pay for every allocation alone.
    """
    fast_boundaries(cases)
    fast_answers: list[int | None] = []
    slow_answers: list[int | None] = []
    fast_s = _seconds(lambda: fast_answers.extend(b.first_failing_seq_len for b in fast_boundaries(cases)))
    slow_s = _seconds(lambda: slow_answers.extend(step_by_step_boundary(c) for c in cases))
    if fast_answers != slow_answers:
        raise AssertionError("the step-by-step and fast searches disagree: a modelling bug")
    return fast_s, slow_s


def run_bench(num_configs: int = 20_000, step_by_step_configs: int = 200, seed: int = 0,
              executor: Executor | None = None, progress: IO[str] | None = None,
              atlas_engines: Sequence[str] | None = None) -> dict[str, Any]:
    """Every measurement, in order; ``progress`` gets one line as each starts. The atlas is timed over
    ``atlas_engines`` (default: every release with data, which takes minutes)."""

    def say(text: str) -> None:
        if progress is not None:
            progress.write(text + "\n")
            progress.flush()

    cases = bench_cases(num_configs, seed)
    executor = executor or Executor(kind="process")
    chunks = [(cases[i : i + CHUNK],) for i in range(0, len(cases), CHUNK)]
    say(f"bench: verifying {num_configs} configurations ({executor.resolved(num_configs)}, "
        f"{executor.num_workers()} workers)")
    verified = _seconds(lambda: list(run_chunks(verify_chunk, chunks, executor, num_configs=len(cases))))
    sweep_rss = peak_rss_mb(executor.num_workers() if executor.resolved(num_configs) == "process" else 0)
    counts = {name: sum(1 for c in cases if _component(c) == name) for name in COMPONENTS}
    subset = [c for c in cases if isinstance(c, TableCase)][:step_by_step_configs]
    with one_torch_thread():
        say(f"bench: step-by-step against fast search on {len(subset)} table configurations")
        fast_s, slow_s = compare_searches(subset)
        say("bench: closed form, alloc_decode, simulated runs, the atlas")
        results: dict[str, Any] = {
            "machine": f"{sys.platform}, {os.cpu_count()} cores, torch {torch.__version__}",
            "executor": f"{executor.resolved(len(cases))} ({executor.num_workers()} workers)",
            "verified_configs": num_configs,
            "verified_by_component": counts,
            "verified_seconds": round(verified, 3),
            "verified_configs_per_s": round(num_configs / verified, 1),
            "closed_form_configs_per_s": round(closed_form_rate(), 0),
            "step_by_step_configs": len(subset),
            "step_by_step_over_fast": round(slow_s / fast_s, 1),
            "alloc_decode_us_batch_256": {g.value: round(alloc_decode_us(g), 1) for g in Gather},
            "simulated_requests_per_s": _simulated_requests_per_s(),
            "peak_rss_mb": sweep_rss,
            **_atlas_timing(executor, atlas_engines),
        }
    return results


def peak_rss_mb(workers: int) -> float:
    """The verified sweep's peak memory, an upper bound, read as soon as it ends: this process's peak
    RSS plus ``workers`` times the largest finished worker's (Linux reports ru_maxrss in kB, for the
    process and for its largest reaped child)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round((own + workers * child) / 1024, 1)


def _component(config: BenchConfig) -> str:
    return config.component if isinstance(config, TableCase) else "allocator"


def _simulated_requests_per_s(seeds: int = 10) -> float:
    """Requests retired per second by the lifecycle simulation, over seeded runs of both
    scenarios (QwQ verify near the context under req-to-token; exact-fit decode under the fixed gather)."""
    from workbench.sim.simulate import simulate
    from workbench.sim.workload import FIXED_GATHER, exact_fit_scenario, qwq_scenario

    scenarios = [qwq_scenario(rule="req-to-token"), exact_fit_scenario(gather=FIXED_GATHER)]
    requests = 0
    start = time.perf_counter()
    for config, workload in scenarios:
        for seed in range(seeds):
            requests += len(simulate(config, workload, seed).requests)
    return round(requests / (time.perf_counter() - start), 1)


def _atlas_timing(executor: Executor, engines: Sequence[str] | None = None) -> dict[str, Any]:
    """The atlas over its default grid: every table setting's boundary executed, the pooled buffers'
    closed forms and their summary rows executed (``atlas_seconds``); then every summary row run
    again (``atlas_runs_seconds``: serving runs, request walks, batch walks)."""
    from workbench.atlas.rows import confirm_by_runs, full_atlas, summarize

    found: dict[str, Any] = {}

    def atlas() -> None:
        found["frame"] = full_atlas(list(engines) if engines else None, executor=executor)
        found["summary"] = summarize(found["frame"])

    seconds = _seconds(atlas)
    runs = _seconds(lambda: confirm_by_runs(found["summary"]))
    ran = int((found["frame"].status != "refused").sum())  # a setting its release refuses is a row, not run
    return {"atlas_settings": ran, "atlas_rows": len(found["summary"]), "atlas_seconds": round(seconds, 3),
            "atlas_runs_seconds": round(runs, 3)}


def format_bench(results: dict[str, Any]) -> str:
    lines = [f"{key:<28} {value}" for key, value in results.items()]
    return "\n".join(lines)


__all__ = ["bench_cases", "format_bench", "run_bench"]
