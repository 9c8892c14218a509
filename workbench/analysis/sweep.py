"""Sweeps: grids of configurations -> tidy DataFrames, one row per configuration.

``run_sweep`` finds, for every valid table configuration of a ``SweepGrid``, the first committed
length whose step fails: the closed form predicts it and two executed probes confirm it (the
failing step and the one below; ``workbench.analysis.boundary.fast_boundaries``, which raises when execution
and formula disagree). Results are
never lost: configurations run in chunks, each finished chunk is written atomically into a
per-grid checkpoint folder, a rerun resumes from the chunks already there, and the finished frame
is cached as one parquet file keyed by the grid. A file that cannot be read back whole is reported,
deleted and recomputed.

``allocator_exact_fit_sweep`` probes ``alloc_decode`` on every batch composition and free-pool size
around the exact fit; ``request_trace`` follows one request up to its table's bound.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import shutil
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]
from tqdm.auto import tqdm  # type: ignore[import-untyped]

import workbench
from workbench import backends
from workbench.analysis import boundary as boundary_module
from workbench.analysis.cases import AllocatorCase, TableCase
from workbench.analysis.exact_fit import batch_compositions, exact_fit_case
from workbench.analysis.executors import Executor, run_chunks
from workbench.analysis.memory import buffer_bytes, min_safe_bytes, rule_width
from workbench.analysis.probe import table_case_problem
from workbench.backends import DEFAULT_COMPONENTS, RULE_NAMES
from workbench.backends.base import TableBackend
from workbench.devices import isolation
from workbench.devices.device import one_torch_thread
from workbench.devices.measured_memory import Measured, allocate_full_size, measure_bytes
from workbench.engines.store.versions import engine_version
from workbench.files import atomic_write_parquet
from workbench.model.allocator import Gather
from workbench.model.cases import Replay
from workbench.model.geometry import (
    MAX_CONTEXT_LEN,
    MAX_DRAFT_TOKENS,
    MAX_GRAPH_BATCH,
    MAX_PAGE_SIZE,
    MAX_SPEC_STEPS,
    MAX_SPEC_TOPK,
    WIDTH_GENERATIONS,
    Mode,
    ServingGeometry,
)

# Short realistic context lengths (4096, 8192: common --context-length settings) and two fixed
# odd ones (a prime and 3 * 4096 + 1), so that no boundary is an artefact of a power of two. The
# default sweep (756 configurations) takes 0.2 s; notebooks pass 32768 ... 1048576 themselves (a
# probe costs time linear in the context length: 4,050 configurations up to 1M take about 3 s).
DEFAULT_CONTEXT_LENS = (4096, 7919, 8192, 12289)
MAX_OVERSHOOT = 1024
MODE_VALUES = tuple(m.value for m in Mode)
REPLAY_VALUES = tuple(r.value for r in Replay)


def _check_choices(name: str, values: tuple[object, ...], allowed: Sequence[object]) -> None:
    if not values:
        raise ValueError(f"{name}: empty (allowed: one or more of {', '.join(map(str, allowed))})")
    for value in values:
        if value not in allowed:
            raise ValueError(f"{name}: {value!r} is not one of {', '.join(map(str, allowed))}")


def _check_ints(name: str, values: tuple[object, ...], low: int, high: int) -> None:
    if not values:
        raise ValueError(f"{name}: empty (allowed: integers {low} to {high})")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name}: {value!r} is out of range (allowed: integers {low} to {high})")


@dataclass(frozen=True, kw_only=True)
class SweepGrid:
    """The axes of a table sweep; every valid combination is one configuration.

    ``overshoot`` is how far a committed length may pass ``ctx - 1`` for a step
    (docs/semantics.md#reach-and-margin:
    multi-token acceptance and the overlap scheduler let a finished request ride one more step).
    ``replays`` apply to DSA rows only; NPU rows use the dynamic replay.
    """

    components: tuple[str, ...] = DEFAULT_COMPONENTS
    context_lens: tuple[int, ...] = DEFAULT_CONTEXT_LENS
    page_sizes: tuple[int, ...] = (1, 64, 128)
    draft_tokens: tuple[int, ...] = (0, 4, 6, 16)
    rules: tuple[str, ...] = RULE_NAMES
    modes: tuple[str, ...] = ("decode", "target-verify")
    width_gens: tuple[str, ...] = ("g1",)
    replays: tuple[str, ...] = REPLAY_VALUES
    overshoot: int = 2
    spec_steps: int = 5
    spec_topk: int = 1
    step_id: int = 0
    draft_has_kv: bool = True
    max_bs: int = 16  # graph rows for the byte counts (the GLM-5.2 recipe); probes use one request
    measure_memory: bool = False  # also allocate every buffer full size and record the bytes it took
    # An engine version (``sglang==0.5.23``): each component's rule, width generation and replay are
    # the version's (data/engines.json) instead of the rules / width_gens / replays axes.
    engine: str | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # lists from widgets or JSON become tuples
            value = getattr(self, f.name)
            if isinstance(value, list):
                object.__setattr__(self, f.name, tuple(value))
        _check_choices("components", self.components, backends.all_names())
        _check_ints("context_lens", self.context_lens, 2, MAX_CONTEXT_LEN)
        _check_ints("page_sizes", self.page_sizes, 1, MAX_PAGE_SIZE)
        _check_ints("draft_tokens", self.draft_tokens, 0, MAX_DRAFT_TOKENS)
        _check_choices("rules", self.rules, RULE_NAMES)
        _check_choices("modes", self.modes, MODE_VALUES)
        _check_choices("width_gens", self.width_gens, WIDTH_GENERATIONS)
        _check_choices("replays", self.replays, REPLAY_VALUES)
        _check_ints("overshoot", (self.overshoot,), 0, MAX_OVERSHOOT)
        _check_ints("spec_steps", (self.spec_steps,), 1, MAX_SPEC_STEPS)
        _check_ints("spec_topk", (self.spec_topk,), 1, MAX_SPEC_TOPK)
        _check_ints("step_id", (self.step_id,), 0, self.spec_steps - 1)
        _check_ints("max_bs", (self.max_bs,), 1, MAX_GRAPH_BATCH)
        if self.engine is not None:
            engine_version(self.engine)  # raises naming the modelled versions
        for name in ("draft_has_kv", "measure_memory"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: {getattr(self, name)!r} is not a boolean (allowed: true, false)")

    def key(self) -> str:
        """A stable hash of the grid and the workbench version: the cache key."""
        payload = json.dumps({"grid": dataclasses.asdict(self), "version": workbench.__version__}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


# ---- configurations -----------------------------------------------------------------------------


def _axes(grid: SweepGrid, backend: TableBackend) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The rules, width generations and replays swept for ``backend``: the grid's, or its engine's."""
    rules = tuple(r for r in grid.rules if r in backend.rules)
    gens, replays = grid.width_gens, tuple(r for r in grid.replays if r in backend.replays) or backend.replays[:1]
    if grid.engine is not None:
        fields = engine_version(grid.engine).case_fields(backend.name)
        rules = (str(fields["rule"]),) if "rule" in fields else rules
        gens = (str(fields["width_gen"]),) if "width_gen" in fields else gens
        replays = (str(fields["replay"]),) if "replay" in fields else replays
    return rules, gens, replays


def _candidates(grid: SweepGrid) -> Iterator[TableCase]:
    for component in grid.components:
        backend = backends.backend_of(component)
        rules, width_gens, replays = _axes(grid, backend)
        for ctx in grid.context_lens:
            for ps in grid.page_sizes:
                for d in grid.draft_tokens:
                    for gen in width_gens:
                        geometry = ServingGeometry(
                            context_len=ctx, page_size=ps, draft_tokens=d, spec_steps=grid.spec_steps,
                            spec_topk=grid.spec_topk, draft_has_kv=grid.draft_has_kv, max_bs=grid.max_bs,
                            width_gen=gen,
                        )
                        for rule in rules:
                            for mode in grid.modes:
                                for replay in replays:
                                    yield TableCase(
                                        component=component, geometry=geometry, rule=rule, mode=Mode(mode),
                                        step_id=grid.step_id, replay=Replay(replay),
                                    )


def table_cases(grid: SweepGrid) -> list[TableCase]:
    """Every valid configuration of ``grid``, in a fixed order (verify without drafts, DSA
    draft-decode and other states the engine cannot be in are skipped)."""
    return [c for c in _candidates(grid) if table_case_problem(dataclasses.replace(c, seq_lens=(1,))) is None]


def search_limit(case: TableCase, overshoot: int) -> int:
    """The largest committed length searched: the table's bound, or ``ctx - 1 + overshoot``."""
    g = case.geometry
    return max(1, min(g.max_committed_len(case.mode, case.step_id), g.context_len - 1 + overshoot))


# ---- one row ------------------------------------------------------------------------------------

# Column -> dtype of the sweep frame; every frame (computed or read back) is cast to it, so a
# resumed sweep and an uninterrupted one compare equal. ``path`` is the read that followed the
# executed steps' copy (graph, eager, or none: CPU searches skip it, see probe.probe_table);
# ``measured_bytes`` and ``measure_method`` are filled only when the grid asks to measure memory.
SWEEP_COLUMNS: dict[str, str] = {
    "component": "object", "rule": "object", "context_len": "int64", "page_size": "int64",
    "draft_tokens": "int64", "mode": "object", "width_gen": "object", "replay": "object",
    "overshoot": "int64", "step_id": "int64", "max_bs": "int64", "request_table_width": "int64",
    "buffer_width": "int64", "buffer_unit": "object", "max_seq_len": "int64",
    "first_failing_seq_len": "Int64", "failing_offset": "Int64", "outcome": "object", "error": "object",
    "confirmed": "bool", "probes_run": "int64", "buffer_bytes": "int64", "min_safe_bytes": "int64",
    "overhead_bytes": "int64", "overhead_ratio": "float64", "device": "object", "path": "object",
    "measured_bytes": "Int64", "measure_method": "object",
}
_IDENTITY = ("component", "rule", "context_len", "page_size", "draft_tokens", "mode", "width_gen", "replay")


def sweep_row(
    case: TableCase, found: boundary_module.Boundary, overshoot: int, device: str = "cpu",
    measured: Measured | None = None,
) -> dict[str, object]:
    """One configuration's row: its boundary ``found``, its buffer's predicted bytes and, when
    ``measured``, the bytes the full-size buffers took on the device."""
    g = case.geometry
    executed = found.failing or found.passing
    first = found.first_failing_seq_len
    failing = found.failing
    size = buffer_bytes(case.component, g, case.rule, case.mode)
    safe = min_safe_bytes(case.component, g, case.mode)
    return {
        "component": case.component, "rule": case.rule, "context_len": g.context_len,
        "page_size": g.page_size, "draft_tokens": g.draft_tokens, "mode": case.mode.value,
        "width_gen": g.width_gen, "replay": case.replay.value, "overshoot": overshoot,
        "step_id": case.step_id, "max_bs": g.max_bs, "request_table_width": g.request_table_width,
        "buffer_width": rule_width(case.component, g, case.rule),
        "buffer_unit": backends.backend_of(case.component).unit,
        "max_seq_len": found.max_seq_len, "first_failing_seq_len": first,
        "failing_offset": None if first is None else first - g.context_len,
        "outcome": failing.outcome.value if failing is not None else "ok",
        "error": failing.error if failing is not None else None,
        "confirmed": found.confirmed, "probes_run": found.probes_run,
        "buffer_bytes": size, "min_safe_bytes": safe, "overhead_bytes": size - safe,
        "overhead_ratio": (size - safe) / safe, "device": device, "path": executed.path if executed else None,
        "measured_bytes": measured.measured_bytes if measured else None,
        "measure_method": measured.method if measured else None,
    }


def typed_frame(rows: list[dict[str, object]] | pd.DataFrame) -> pd.DataFrame:
    """Rows in the sweep schema: fixed column order and dtypes, ``None`` for missing text."""
    frame = pd.DataFrame(rows, columns=list(SWEEP_COLUMNS)) if isinstance(rows, list) else rows
    frame = frame.astype(SWEEP_COLUMNS)
    for column, dtype in SWEEP_COLUMNS.items():
        if dtype == "object":  # pandas reads text back as str with NaN; keep None where the record has None
            frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame.reset_index(drop=True)


# ---- files --------------------------------------------------------------------------------------


Identity = tuple[object, ...]  # the values of the _IDENTITY columns of one configuration


def _identity(case: TableCase) -> Identity:
    g = case.geometry
    return (case.component, case.rule, g.context_len, g.page_size, g.draft_tokens, case.mode.value, g.width_gen,
            case.replay.value)


def _read_checked(path: Path, expected: Sequence[Identity]) -> pd.DataFrame | None:
    """The frame in ``path`` if it is whole and holds exactly the ``expected`` configurations.

    Anything else (a read error, a truncated file, other columns, other rows) is reported with a
    warning naming the file, and the file is deleted so the caller recomputes it.
    """
    frame: pd.DataFrame | None = None
    try:
        frame = pd.read_parquet(path)
        if list(frame.columns) != list(SWEEP_COLUMNS):
            problem: str | None = "wrong columns"
        elif len(frame) != len(expected):
            problem = f"{len(frame)} rows, expected {len(expected)}"
        elif list(frame[list(_IDENTITY)].itertuples(index=False, name=None)) != list(expected):
            problem = "rows for other configurations"
        else:
            problem = None
    except Exception as err:  # any read failure means the file is not usable
        problem = f"unreadable: {type(err).__name__}: {err}"
    if problem is None and frame is not None:
        return typed_frame(frame)
    warnings.warn(f"sweep cache file {path} is corrupt or stale ({problem}); deleting and recomputing it", stacklevel=3)
    path.unlink(missing_ok=True)
    return None


def cache_paths(grid: SweepGrid, cache_dir: str | Path, device: str, chunk_size: int) -> tuple[Path, Path]:
    """The final parquet file and the checkpoint folder of one grid on one device."""
    stem = f"sweep-{grid.key()}-{device}"
    root = Path(cache_dir)
    return root / f"{stem}.parquet", root / f"{stem}.chunks-{chunk_size}"


# ---- the sweep ----------------------------------------------------------------------------------





def chunk_rows(
    cases: Sequence[TableCase], overshoot: int, device: str, measure_memory: bool = False
) -> list[dict[str, object]]:
    """One chunk's rows: a top-level function, so process pools and Ray tasks can run it."""
    with one_torch_thread():
        limits = [search_limit(case, overshoot) for case in cases]
        found = boundary_module.fast_boundaries(cases, max_seq_lens=limits, device=device)
        measured = _measure_chunk(cases, device) if measure_memory else [None] * len(cases)
        return [sweep_row(case, f, overshoot, device, m) for case, f, m in zip(cases, found, measured)]


def _measure_chunk(cases: Sequence[TableCase], device: str) -> list[Measured | None]:
    """Each configuration's full-size buffers, allocated one configuration at a time (a 1M-token
    DSA verify table is a gigabyte) and measured once per distinct set of shapes."""
    seen: dict[tuple[object, ...], Measured] = {}
    out: list[Measured | None] = []
    for case in cases:
        g = case.geometry
        key = (case.component, case.rule, case.mode, g)  # the replay does not change the buffers
        if key not in seen:
            seen[key] = measure_bytes(functools.partial(allocate_full_size, case.component, g, case.rule, case.mode,
                                                        device), device)
        out.append(seen[key])
    return out


def run_sweep(
    grid: SweepGrid,
    *,
    device: str = "cpu",
    cache_dir: str | Path | None = "data/cache",
    progress: bool = True,
    chunk_size: int = 200,
    executor: Executor | None = None,
) -> pd.DataFrame:
    """One row per configuration of ``grid`` (see ``SWEEP_COLUMNS``); cached and resumable.

    ``cache_dir=None`` computes everything and writes nothing. ``executor`` chooses where chunks
    run (default ``Executor()``: every local core for large sweeps, this process for small ones);
    the frame is the same whichever runs it.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: {chunk_size!r} is out of range (allowed: integers 1 or more)")
    cases = table_cases(grid)
    expected = [_identity(c) for c in cases]
    final = chunk_dir = None
    if cache_dir is not None:
        final, chunk_dir = cache_paths(grid, cache_dir, device, chunk_size)
        if final.exists():
            cached = _read_checked(final, expected)
            if cached is not None:
                return cached
        chunk_dir.mkdir(parents=True, exist_ok=True)
    starts = range(0, len(cases), chunk_size)
    frames: dict[int, pd.DataFrame] = {}
    todo: list[int] = []
    for number, start in enumerate(starts):
        path = chunk_dir / f"chunk-{number:05d}.parquet" if chunk_dir else None
        done = _read_checked(path, expected[start : start + chunk_size]) if path is not None and path.exists() else None
        if done is None:
            todo.append(number)
        else:
            frames[number] = done
    args = [(cases[starts[n] : starts[n] + chunk_size], grid.overshoot, device, grid.measure_memory) for n in todo]
    with tqdm(total=len(cases), desc="sweep", unit="config", disable=not progress) as bar:
        bar.update(sum(len(f) for f in frames.values()))
        pending = sum(len(a[0]) for a in args)
        for index, rows in run_chunks(chunk_rows, args, executor or Executor(), device=device, num_configs=pending):
            number = todo[index]
            frames[number] = typed_frame(rows)
            if chunk_dir is not None:  # checkpoint each chunk as it arrives: nothing lost on interruption
                atomic_write_parquet(frames[number], chunk_dir / f"chunk-{number:05d}.parquet")
            bar.update(len(rows))
    frames = {n: frames[n] for n in sorted(frames)}
    frame = typed_frame(pd.concat(list(frames.values()), ignore_index=True)) if frames else typed_frame([])
    if final is not None and chunk_dir is not None:
        atomic_write_parquet(frame, final)
        shutil.rmtree(chunk_dir, ignore_errors=True)  # the final file holds every chunk now
    return frame


# ---- the allocator's exact fit --------------------------------------------------------------------


def allocator_exact_fit_sweep(
    page_sizes: Sequence[int] = (4, 128),
    max_batch: int = 8,
    gathers: Sequence[str] = backends.DEFAULT_GATHERS,
    *,
    device: str = "cpu",
) -> pd.DataFrame:
    """Every gather x page size x batch x free-pool size from 0 to ``pages_needed + 2``."""
    _check_ints("page_sizes", tuple(page_sizes), 2, MAX_PAGE_SIZE)  # ps 1: every row opens a page
    _check_ints("max_batch", (max_batch,), 3, MAX_GRAPH_BATCH)
    parsed = [Gather.parse(g) for g in gathers]
    with one_torch_thread():
        rows = _exact_fit_rows(parsed, page_sizes, max_batch, device)
    return pd.DataFrame(rows)


def _exact_fit_rows(gathers: Sequence[Gather], page_sizes: Sequence[int], max_batch: int, device: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for gather in gathers:
        for ps in page_sizes:
            for name, opens in batch_compositions(max_batch).items():
                needed = sum(opens)
                for num_free in range(needed + 3):
                    record = _isolated_record(exact_fit_case(gather, ps, opens, num_free), device)
                    rows.append({
                        "gather": gather.value, "page_size": ps, "batch": name,
                        "pattern": "".join("o" if o else "." for o in opens), "batch_size": len(opens),
                        "pages_needed": needed, "free_pages": num_free, "outcome": record["outcome"],
                        "error": record["error"], "out_cache_loc": record.get("out_cache_loc"),
                    })
    return rows


def _isolated_record(case: AllocatorCase, device: str) -> dict[str, object]:
    """The probe's record: in-process on the CPU; in a spawned child where an out-of-bounds gather
    is a device-side assert (CUDA) or an AI Core error (NPU) that would poison this process, so the
    sweep records the device's own message and goes on."""
    data = {
        "component": "allocator", "gather": case.gather.value, "page_size": case.page_size,
        "seq_lens": list(case.seq_lens), "last_loc": list(case.last_loc), "free_pages": list(case.free_pages),
    }
    return dict(isolation.isolated_probe(data, device))


# ---- one request over time ------------------------------------------------------------------------


def request_trace(case: TableCase, *, steps: int = 40, device: str = "cpu", last: int | None = None) -> pd.DataFrame:
    """Probe one request at each of its last ``steps`` committed lengths, up to ``last`` (default:
    the largest the table holds in the mode; a longer ``last`` is clamped to it).

    A width generation that reserves room for the drafter's pages (g3) makes the table hold far
    more than a run reaches: a caller tracing the steps a run takes passes the reachable length."""
    _check_ints("steps", (steps,), 1, 1 << 20)
    g = case.geometry
    bound = g.max_committed_len(case.mode, case.step_id)
    if last is not None:
        _check_ints("last", (last,), 1, 1 << 30)
        bound = min(bound, last)
    rows = []
    for s in range(max(1, bound - steps + 1), bound + 1):
        with one_torch_thread():
            result = boundary_module.probe_step(case, s, device)
        if result.outcome.value == "invalid":
            raise ValueError(result.error)
        width = rule_width(case.component, g, case.rule)
        capacity = backends.backend_of(case.component).capacity_tokens(g, width)
        rows.append({
            "seq_len": s, "reads": result.reads, "buffer_width": width, "buffer_capacity_tokens": capacity,
            "request_table_width": g.request_table_width, "outcome": result.outcome.value, "error": result.error,
        })
    return pd.DataFrame(rows)
