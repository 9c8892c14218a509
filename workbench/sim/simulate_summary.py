"""What seeded serving runs come to: tidy frames, summaries, failure shares over seeds and sweeps,
the notebook's explorer and the ``workbench simulate`` runner. The runs themselves are
``workbench.sim.simulate``; this module only reads their records.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pandas as pd  # type: ignore[import-untyped]

from workbench.backends import check_rule_name as check_rule
from workbench.files import atomic_write_parquet, atomic_write_text
from workbench.model.allocator import Gather
from workbench.sim.simulate import SimRun, StepRecord, simulate
from workbench.sim.workload import (
    FIXED_GATHER,
    SCENARIOS,
    SimConfig,
    Simulation,
    Workload,
    exact_fit_scenario,
    qwq_scenario,
    vary,
)

# ---- frames and summaries -----------------------------------------------------------------------

Job = tuple[str, Gather, int]  # (rule, gather, seed)
Progress = Callable[[Sequence[Job]], Iterable[Job]]


def records_frame(run: SimRun) -> pd.DataFrame:
    """One row per step; tuple fields become lists."""
    rows = [_flat(r) for r in run.records]
    return pd.DataFrame(rows)


def _flat(record: StepRecord) -> dict[str, object]:
    """A record's columns: tuple fields as lists, each table's width and outcome as its own columns."""
    row: dict[str, object] = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if f.name == "tables":
            for table in value:
                row.update(table.columns())
        else:
            row[f.name] = list(value) if isinstance(value, tuple) else value
    return row


def requests_frame(run: SimRun) -> pd.DataFrame:
    """Tidy: one row per step and running request (committed length, reads, the step's outcome)."""
    rows = [
        {"step": r.step, "req_id": rid, "committed": s, "reads": reads, "outcome": r.outcome,
         "failing": rid == r.failing_request}
        for r in run.records for rid, s, reads in zip(r.req_ids, r.committed, r.reads)
    ]
    return pd.DataFrame(rows, columns=["step", "req_id", "committed", "reads", "outcome", "failing"])


def run_summary(run: SimRun) -> dict[str, object]:
    """What a run came to: the first failing step and request, and the counts around it."""
    c, first = run.config, run.first_failure
    failing_committed = None
    if first is not None and first.failing_request is not None:
        failing_committed = first.committed[first.req_ids.index(first.failing_request)]
    return {
        "seed": run.seed, "rule": c.rule, "gather": c.gather.value, "context_len": c.geometry.context_len,
        "page_size": c.geometry.page_size, "draft_tokens": c.geometry.draft_tokens,
        "acceptance": c.acceptance.label(), "conservativeness": c.conservativeness, "overshoot": c.overshoot,
        "num_pages": c.pool_pages, "steps": len(run.records), "completed": run.completed,
        "stop_reason": run.stop_reason, "failed": first is not None, "failures": len(run.failures),
        "first_failing_step": first.step if first else None,
        "failing_component": first.failing_component if first else None,
        "outcome": first.outcome if first else "ok",
        "failing_request": first.failing_request if first else None,
        "failing_committed_len": failing_committed, "error": first.error if first else None,
        "exact_fit_steps": sum(r.exact_fit for r in run.records),
        "retractions": sum(len(r.retracted) for r in run.records),
        "max_committed": max((max(r.committed) for r in run.records), default=0),
    }


def compare(
    config: SimConfig, workload: Workload, seeds: Sequence[int], *, rules: Sequence[str] | None = None,
    gathers: Sequence[Gather | str] | None = None, device: str = "cpu", progress: Progress | None = None,
) -> pd.DataFrame:
    """One summary row per rule, gather and seed (defaults: the config's own rule and gather)."""
    jobs: list[Job] = [
        (check_rule(rule), Gather.parse(gather), seed)
        for rule in (rules or [config.rule]) for gather in (gathers or [config.gather]) for seed in seeds
    ]
    rows = [run_summary(simulate(config.replace(rule=r, gather=g), workload, s, device=device))
            for r, g, s in (progress(jobs) if progress else jobs)]
    frame = pd.DataFrame(rows)
    for column in _NULLABLE_INTS:  # None where a run did not fail: keep integers, not floats
        frame[column] = frame[column].astype("Int64")
    return frame


_NULLABLE_INTS = ("first_failing_step", "failing_request", "failing_committed_len")


def failure_share(summaries: pd.DataFrame, by: Sequence[str] = ("rule", "gather")) -> pd.DataFrame:
    """Share of runs that fail, per group; with the median first failing step of the failing runs."""
    grouped = summaries.groupby(list(by), sort=False)
    return grouped.agg(
        runs=("seed", "size"), failed_runs=("failed", "sum"), share=("failed", "mean"),
        median_first_failing_step=("first_failing_step", "median"),
    ).reset_index()


def sweep(
    config: SimConfig, workload: Workload, param: str, values: Sequence[float], seeds: Sequence[int], *,
    rules: Sequence[str] | None = None, gathers: Sequence[Gather | str] | None = None, device: str = "cpu",
) -> pd.DataFrame:
    """Failure share per value of one parameter: tidy, one row per (value, rule, gather)."""
    frames = []
    for value in values:
        summaries = compare(vary(config, param, value), workload, seeds, rules=rules, gathers=gathers, device=device)
        share = failure_share(summaries)
        share.insert(0, "value", value)
        share.insert(0, "param", param)
        frames.append(share)
    return pd.concat(frames, ignore_index=True)


def write_summary(frame: pd.DataFrame, path: str | Path) -> Path:
    """``.json`` (records, indented) or ``.parquet``; written whole or not at all."""
    path = Path(path)
    if path.suffix == ".json":
        atomic_write_text(path, frame.to_json(orient="records", indent=2) + "\n")
    elif path.suffix == ".parquet":
        atomic_write_parquet(frame, path)
    else:
        raise ValueError(f"out: {str(path)!r} must end in .json or .parquet")
    return path


# ---- the notebook's explorer ------------------------------------------------------

@dataclass(frozen=True)
class Exploration:
    """What the explorer shows for one setting: the run, its summary and its tidy per-request steps."""

    run: SimRun
    summary: dict[str, object]
    steps: pd.DataFrame


def explore(
    scenario: str = "qwq", *, rule: str = "context", gather: str = FIXED_GATHER.value, seed: int = 0,
    changes: dict[str, float] | None = None, device: str = "cpu",
) -> Exploration:
    """One run of a named scenario with some sweep parameters changed (the notebook's widgets)."""
    if scenario == "qwq":
        config, workload = qwq_scenario(rule=rule)
        config = config.replace(gather=Gather.parse(gather))
    elif scenario == "exact-fit":
        config, workload = exact_fit_scenario(gather=gather)
        config = config.replace(rule=check_rule(rule))
    else:
        raise ValueError(f"scenario: {scenario!r} is not one of {', '.join(SCENARIOS)}")
    for param, value in (changes or {}).items():
        config = vary(config, param, value)
    run = simulate(config, workload, seed, device=device)
    return Exploration(run, run_summary(run), requests_frame(run))


# ---- the command line ---------------------------------------------------------------------------


def format_summary(summaries: pd.DataFrame) -> str:
    """One line per rule and gather: failing runs, and the earliest first failure among them."""
    lines = []
    for (rule, gather), group in summaries.groupby(["rule", "gather"], sort=False):
        failed = group[group["failed"]]
        line = f"{rule:<18} {gather:<11} failed {len(failed)}/{len(group)} runs"
        if len(failed):
            first = failed.sort_values(["first_failing_step", "seed"]).iloc[0]
            line += (f"; earliest: seed {first['seed']} step {first['first_failing_step']} request "
                     f"{first['failing_request']} committed {first['failing_committed_len']} "
                     f"{first['failing_component']} {first['outcome']}: {first['error']}")
        lines.append(line)
    return "\n".join(lines)


def run_cli(simulation: Simulation, device: str, out: IO[str]) -> pd.DataFrame:
    """``workbench simulate``: runs with a progress bar on stderr, a summary on ``out``."""
    from tqdm.auto import tqdm  # type: ignore[import-untyped]

    def progress(jobs: Sequence[Job]) -> Iterable[Job]:
        return tqdm(jobs, desc="simulate", unit="run", file=sys.stderr)  # type: ignore[no-any-return]

    s = simulation
    summaries = compare(s.config, s.workload, s.seeds, rules=s.rules, gathers=s.gathers, device=device, progress=progress)
    out.write(format_summary(summaries) + "\n")
    return summaries
