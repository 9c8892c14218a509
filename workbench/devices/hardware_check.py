"""``workbench hardware-check``: a fixed suite whose results are data the project ships (issue #7, part 5).

Three sections, one tidy frame, one parquet file per device:

    seed         the seed cases before and after their fixes, through real graph replay on a
                 device (allocator probes in a child process, since they can poison it)
    memory       full-size graph buffers of every preset, rule and table, with the engine's true
                 row counts: measured bytes (allocator statistics before and after allocation;
                 ``untyped_storage().nbytes()`` on the CPU) next to the predicted bytes
    replay-cost  the cost of one replay step per rule, dynamic and static: the metadata ``copy_``
                 alone, and the copy plus the graph replay; the static replay copies the whole width

The file is ``<folder>/<device kind>-<sanitized device name>.parquet``; every row carries the
device name, driver, runtime and torch version. On the CPU the suite runs in eager mode.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pandas as pd  # type: ignore[import-untyped]
import torch

from workbench import __version__, backends
from workbench.analysis.cases import parse_table_case
from workbench.analysis.memory import ModelPreset, buffer_bytes, load_presets
from workbench.analysis.seeds import SEEDS
from workbench.devices.device import DeviceInfo, device_info
from workbench.devices.graph import CapturedRead, median_seconds
from workbench.devices.isolation import isolated_probe
from workbench.devices.measured_memory import allocate_full_size, measure_bytes
from workbench.files import atomic_write_parquet
from workbench.model.cases import Replay, TableCase
from workbench.model.geometry import Mode, ServingGeometry
from workbench.model.request_table import RequestTable

DEFAULT_FOLDER = Path(__file__).resolve().parents[2] / "data" / "hardware"
COLUMNS = (
    "section", "name", "component", "rule", "replay", "mode", "fix", "outcome", "error", "path",
    "batch", "seq_len", "rows", "width", "predicted_bytes", "measured_bytes", "storage_bytes", "measure_method",
    "copy_us", "step_us", "repeats",
    "device", "device_kind", "device_name", "driver", "runtime", "torch_version", "workbench_version", "recorded_at",
)
Row = dict[str, object]


@dataclass(frozen=True, kw_only=True)
class TimingCase:
    """A batch of ``batch`` requests, all at committed length ``seq_len``, replayed in ``mode``."""

    name: str
    component: str
    geometry: ServingGeometry
    seq_len: int
    batch: int
    mode: Mode = Mode.TARGET_VERIFY


@dataclass(frozen=True, kw_only=True)
class Suite:
    presets: tuple[ModelPreset, ...]
    timing: tuple[TimingCase, ...]
    repeats: int
    timeout_s: float = 120.0  # per isolated probe
    components: tuple[str, ...] = backends.TABLE_COMPONENTS  # the tables measured in the memory section


def seed_timing_cases(batch: int = 16) -> tuple[TimingCase, ...]:
    """Every backend's seed geometries (GLM-5.2 as in the DSA seed, QwQ-32B as in the NPU seed, ...)
    at a short committed length (4096) and a long one (eleven twelfths of the context)."""
    cases = []
    for backend in backends.table_backends():
        for seed in backend.seeds:
            step = parse_table_case(seed.before)
            g = step.geometry.replace(max_bs=batch)
            for seq_len in sorted({min(4096, g.context_len // 2), g.context_len * 11 // 12}):
                cases.append(TimingCase(name=f"{seed.name}-seed", component=backend.label, geometry=g, seq_len=seq_len,
                                        batch=batch, mode=step.mode))
    return tuple(cases)


def full_suite(repeats: int = 20) -> Suite:
    """The committed suite: every preset of data/presets.json, the seed geometries short and long."""
    return Suite(presets=tuple(load_presets()), timing=seed_timing_cases(), repeats=repeats)


def quick_suite(repeats: int = 3) -> Suite:
    """A small suite with the same sections, for tests and a first look (seconds on a CPU)."""
    small = ModelPreset(
        name="small-dsa", source="workbench test geometry", context_len=4096, num_layers=2, kv_lora_rank=512,
        qk_rope_head_dim=64, kv_dtype_bytes=2, page_size=64, draft_tokens=6, spec_steps=5, max_bs=4,
    )
    geometry = small.geometry
    # The two seeds' tables only: the quick suite is the full one's shape in seconds, not its breadth.
    components = backends.DEFAULT_COMPONENTS
    timing = tuple(TimingCase(name=f"small-{backends.backend_of(c).short}", component=c, geometry=geometry, seq_len=1000,
                              batch=2) for c in components)
    return Suite(presets=(small,), timing=timing, repeats=repeats, components=components)


# ---- sections ----------------------------------------------------------------------------------


def seed_rows(device: str, timeout_s: float) -> list[Row]:
    """Each seed before and after its fix, probed as ``workbench probe`` does, isolated where needed."""
    rows: list[Row] = []
    for seed in SEEDS:
        for fix, case in (("before", seed.before), ("after", seed.after)):
            record = isolated_probe(case, device, timeout_s=timeout_s)
            rows.append({
                "section": "seed", "name": seed.name, "component": case["component"],
                "rule": case.get("rule", case.get("gather")), "replay": case.get("replay"), "mode": case.get("mode"),
                "fix": fix, "outcome": record["outcome"], "error": record.get("error"),
                "path": record.get("path"), "width": record.get("buffer_width"),
            })
    return rows


def memory_rows(presets: Iterable[ModelPreset], device: str,
                components: Sequence[str] = backends.TABLE_COMPONENTS) -> list[Row]:
    rows: list[Row] = []
    for preset in presets:
        g = preset.geometry
        mode = Mode.TARGET_VERIFY if g.speculative else Mode.DECODE  # the graph with the most rows
        for component in components:
            for rule in backends.backend_of(component).rules:
                got = measure_bytes(functools.partial(allocate_full_size, component, g, rule, mode, device), device)
                rows.append({
                    "section": "memory", "name": preset.name, "component": component, "rule": rule, "mode": mode.value,
                    "batch": g.max_bs, "rows": got.shapes[0][0], "width": got.shapes[0][1],
                    "predicted_bytes": buffer_bytes(component, g, rule, mode), "measured_bytes": got.measured_bytes,
                    "storage_bytes": got.storage_bytes, "measure_method": got.method,
                })
    return rows


def timing_rows(cases: Iterable[TimingCase], device: str, repeats: int) -> list[Row]:
    rows: list[Row] = []
    for case in cases:
        backend = backends.backend_of(case.component)
        replays = tuple(Replay(r) for r in backend.replays) if "replay" in backend.case_fields else (None,)
        for rule in backend.rules:
            for replay in replays:
                rows.append(_time_one(case, rule, replay, device, repeats))
    return rows


def _time_one(case: TimingCase, rule: str, replay: Replay | None, device: str, repeats: int) -> Row:
    """Median time of the metadata copy alone and of copy + replay, for one rule and replay."""
    g = case.geometry
    backend = backends.backend_of(case.component)
    reads = case.seq_len + backend.lookahead(g, case.mode, 0)
    table = RequestTable.with_requests([reads] * case.batch, g.request_table_width, g.page_size, device)
    rows = list(range(1, case.batch + 1))
    seq_lens = [case.seq_len] * case.batch
    num_slots = (table.allocator.num_pages + 1) * g.page_size
    step_case = TableCase(component=case.component, geometry=g, rule=rule, mode=case.mode,
                          replay=replay or Replay.DYNAMIC)
    buffers = backend.allocate(g, backend.width(g, rule), rows=backend.graph_rows(g.replace(max_bs=case.batch), case.mode),
                               case=step_case, device=device)
    read = CapturedRead.capture(buffers.read_table, buffers.entry_tokens, num_slots)
    row_reads = [reads] * buffers.read_table.shape[0]  # a read per query row

    def copy() -> None:
        backend.replay(buffers, table.req_to_token, rows, seq_lens, step_case, num_slots=num_slots)

    def step() -> None:
        copy()
        read.run(row_reads)

    row: Row = {
        "section": "replay-cost", "name": case.name, "component": case.component, "rule": rule,
        "replay": replay.value if replay else None, "mode": case.mode.value, "batch": case.batch,
        "seq_len": case.seq_len, "rows": read.table.shape[0], "width": read.table.shape[1], "path": read.path,
        "repeats": repeats,
    }
    try:
        copy_s = median_seconds(copy, device, repeats=repeats)
        step_s = median_seconds(step, device, repeats=repeats)
    except RuntimeError as err:  # a rule too narrow for this length: the step fails, there is no cost
        return row | {"outcome": "shape-error", "error": str(err)}
    return row | {"outcome": "ok", "copy_us": copy_s * 1e6, "step_us": step_s * 1e6}


# ---- the whole check ---------------------------------------------------------------------------


def run_hardware_check(device: str, suite: Suite, progress: IO[str] | None = None) -> pd.DataFrame:
    """Run every section on ``device``; one tidy frame with the device's facts on every row."""
    info = device_info(device)
    sections: Sequence[tuple[str, Callable[[], list[Row]]]] = (
        ("seed", lambda: seed_rows(device, suite.timeout_s)),
        ("memory", lambda: memory_rows(suite.presets, device, suite.components)),
        ("replay-cost", lambda: timing_rows(suite.timing, device, suite.repeats)),
    )
    rows: list[Row] = []
    for name, run in sections:
        start = datetime.datetime.now()
        found = run()
        rows += found
        if progress is not None:
            seconds = (datetime.datetime.now() - start).total_seconds()
            progress.write(f"{name}: {len(found)} rows in {seconds:.1f} s\n")
    return results_frame(rows, info, device)


def results_frame(rows: list[Row], info: DeviceInfo, device: str) -> pd.DataFrame:
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    facts: Row = {
        "device": str(torch.device(device)), "device_kind": info.kind, "device_name": info.name, "driver": info.driver,
        "runtime": info.runtime, "torch_version": info.torch_version, "workbench_version": __version__,
        "recorded_at": stamp,
    }
    frame = pd.DataFrame([row | facts for row in rows], columns=list(COLUMNS))
    for column in ("batch", "seq_len", "rows", "width", "predicted_bytes", "measured_bytes", "storage_bytes", "repeats"):
        frame[column] = frame[column].astype("Int64")  # integers with gaps, not floats
    for column in ("copy_us", "step_us"):
        frame[column] = frame[column].astype("float64")
    return frame


def results_path(info: DeviceInfo, folder: str | Path = DEFAULT_FOLDER) -> Path:
    """``<folder>/<kind>-<sanitized name>.parquet``, e.g. data/hardware/cuda-nvidia-h200.parquet."""
    return Path(folder) / f"{info.file_stem}.parquet"


def write_results(frame: pd.DataFrame, path: Path) -> Path:
    """Write through a temporary file and a rename, so a reader never sees half a file."""
    return atomic_write_parquet(frame, path)


def load_hardware_results(folder: str | Path = DEFAULT_FOLDER) -> pd.DataFrame | None:
    """Every hardware file in ``folder`` as one frame (for the notebooks' overlays), or None."""
    files = sorted(Path(folder).glob("*.parquet"))
    if not files:
        return None
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)


def memory_overlay(memory: pd.DataFrame, hardware: pd.DataFrame) -> pd.DataFrame:
    """The notebooks' overlay: ``memory_table`` rows next to the bytes a device measured.

    One row per preset x component x rule x device found in both frames, with the measured bytes,
    how they were measured, and ``measured_over_predicted`` (1.0 where the device allocator took
    exactly the predicted bytes).
    """
    measured = hardware[hardware["section"] == "memory"].rename(columns={"name": "preset"})
    keep = ["preset", "component", "rule", "device_name", "measured_bytes", "measure_method"]
    merged = memory.merge(measured[[c for c in keep if c in measured.columns]], on=["preset", "component", "rule"])
    merged["measured_over_predicted"] = merged["measured_bytes"] / merged["bytes"]
    return merged


def summary_lines(frame: pd.DataFrame) -> list[str]:
    """A short text view: seed outcomes, measured against predicted bytes, replay cost per rule."""
    lines = []
    for row in frame[frame.section == "seed"].itertuples():
        lines.append(f"seed {row.name:<16} {row.fix:<7} {row.rule!s:<19} {row.outcome:<12} {row.path or ''}")
    memory = frame[frame.section == "memory"]
    if len(memory):
        over = memory.measured_bytes - memory.predicted_bytes
        lines.append(f"memory: {len(memory)} buffers, measured - predicted: min {int(over.min())} B, max {int(over.max())} B "
                     f"({memory.measure_method.iloc[0]})")
    for row in frame[frame.section == "replay-cost"].itertuples():
        cost = f"copy {row.copy_us:9.1f} us  step {row.step_us:9.1f} us" if row.outcome == "ok" else row.outcome
        replay = "-" if pd.isna(row.replay) else row.replay
        lines.append(f"replay {row.name:<13} s={row.seq_len:<6} {row.rule:<19} {replay:<8} {cost}")
    return lines


def check_and_write(device: str, folder: str | Path, suite: Suite, out: IO[str]) -> Path:
    """The ``workbench hardware-check`` job: run the suite, write the device's file, print a summary."""
    start = datetime.datetime.now()
    frame = run_hardware_check(device, suite, progress=out)
    path = write_results(frame, results_path(device_info(device), folder))
    out.write("\n".join(summary_lines(frame)) + "\n")
    seconds = (datetime.datetime.now() - start).total_seconds()
    out.write(f"\nwrote {path} ({len(frame)} rows, {seconds:.1f} s)\n")
    return path
