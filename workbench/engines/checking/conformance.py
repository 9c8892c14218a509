"""``workbench conformance``: each engine version's own functions against the workbench's models.

For every version asked for, the engine's wheel is fetched into the workbench's cache (once), a
worker process of its own loads it (``worker.py``) and runs every check on the same seeded
states as the models, and this module gathers the rows and prints them: a table, or one JSON
object per line. The behaviour each version ships (which sizing rule, replay, gather...) and
where its modules are come from its learned data (``workbench engines learn``, ``behaviour.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import IO, Any

from workbench.analysis.executors import Executor, run_chunks
from workbench.engines.store import wheels

Row = dict[str, Any]
DEFAULT_STATES = 1000


def behaviour(engine: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model settings that stand for ``engine`` and how to load it (``behaviour.py``: from
    the release's learned data)."""
    from workbench.engines.checking.behaviour import behaviour as learned_behaviour

    return learned_behaviour(engine)


def run_version(engine: str, *, states: int = DEFAULT_STATES, seed: int = 0, triton: bool | None = None,
                timeout: float = 3600, only: Sequence[str] = ()) -> list[Row]:
    """Every row for one version (or those whose name holds a part of ``only``); FetchError when
    its wheel can neither be fetched nor found.

    ``triton``: True fetches it (once) and runs the Triton kernels interpreted, None does so when
    it is cached already, False skips those rows (the quick test).
    """
    settings, load = behaviour(engine)
    install = wheels.fetch(load.get("wheel", engine))
    triton_dir = wheels.fetch_triton() if triton else wheels.triton_dir() if triton is None else None
    if load.get("triton"):  # modules that need triton's own decorators to import (0.5.3): never interpreted
        triton_dir = wheels.fetch_triton()
    job = {"engine": engine, "package_dir": str(install.package_dir), "deps": str(install.deps), "seed": seed,
           "states": states, "behaviour": settings, "module_paths": load.get("module_paths", {}),
           "patch": load.get("patch"), "only": list(only), "unlearned": load.get("unlearned", {}),
           "tolerant": load.get("tolerant", False), "names": load.get("names", {}),
           "absent_modules": load.get("absent_modules", {}),
           "triton_dir": str(triton_dir) if triton_dir else None,
           "extra_paths": [str(install.torchvision)] if load.get("torchvision") else [],
           "visible": ["torchvision"] if load.get("torchvision") == "stand-in" else [],
           "triton_interpret": not load.get("triton")}
    return _run_worker(job, timeout)


def _run_worker(job: dict[str, Any], timeout: float) -> list[Row]:
    """The worker's rows. A worker that dies (a segfault in a kernel, a stand-in in C code) is
    started again past the function it was in, which becomes a skipped row saying how it died."""
    # Bytecode is written into the cache folder: the engine's ~2,000 modules compile once, not per run.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    rows: list[Row] = []
    for _ in range(32):  # a bound on restarts: fewer functions than this exist
        job = {**job, "done": [row["function"] for row in rows]}
        done = subprocess.run([sys.executable, "-m", "workbench.engines.checking.worker"], input=json.dumps(job),
                              capture_output=True, text=True, timeout=timeout, env=env)
        started = None
        for line in done.stdout.splitlines():
            if line.startswith("{"):
                item = json.loads(line)
                if "starting" in item:
                    started = item["starting"]
                else:
                    rows.append(item)
                    started = None
        if done.returncode == 0:
            return rows
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        reason = f"the worker stopped (status {done.returncode}) in this function: {last[:300]}"
        rows.append({"engine": job["engine"], "function": started or "(worker)", "states": 0, "agree": 0,
                     "first_disagreement": None, "skipped": reason})
        if started is None:
            return rows
    return rows


def disagrees(row: Row) -> bool:
    return row["skipped"] is None and row["agree"] != row["states"]


def format_table(rows: Sequence[Row]) -> str:
    wide = max([52, *(len(row["function"]) for row in rows)])
    lines = [f"{'engine':<16} {'function':<{wide}} {'states':>6} {'agree':>6}  first disagreement / skipped"]
    for row in rows:
        if row["skipped"]:
            note = f"skipped: {row['skipped']}"
        elif row["first_disagreement"]:
            d = row["first_disagreement"]
            note = (f"at {d['where']}: engine {json.dumps(d['engine'])[:160]} / model {json.dumps(d['model'])[:160]}"
                    f" / state {json.dumps(d['state'])[:200]}")
        else:
            note = ""
        lines.append(f"{row['engine']:<16} {row['function']:<{wide}} {row['states']:>6} {row['agree']:>6}  {note}")
    return "\n".join(lines)


def expand(engines: Sequence[str]) -> list[str]:
    """``NAME==VERSION`` as given; a bare engine name (``sglang``) stands for every release of it
    with learned buffer data, oldest first."""
    from workbench.engines.store.versions import measured_releases

    out: list[str] = []
    for engine in engines:
        out += measured_releases(engine) if "==" not in engine else [engine]
    return out


def summary_table(rows: Sequence[Row]) -> str:
    """One line per release: rows run, states, states agreeing, rows skipped."""
    lines = [f"{'release':<18} {'rows run':>8} {'states':>8} {'agree':>8} {'skipped':>8}  disagreeing rows"]
    for engine in dict.fromkeys(row["engine"] for row in rows):
        mine = [row for row in rows if row["engine"] == engine]
        ran = [row for row in mine if not row["skipped"]]
        bad = [row["function"] for row in ran if row["agree"] != row["states"]]
        lines.append(f"{engine:<18} {len(ran):>8} {sum(r['states'] for r in ran):>8} {sum(r['agree'] for r in ran):>8} "
                     f"{len(mine) - len(ran):>8}  {', '.join(bad) or '-'}")
    return "\n".join(lines)


def release_rows(engine: str, states: int, seed: int, triton: bool | None,
                 only: Sequence[str] = ()) -> tuple[list[Row], str | None]:
    """One release's rows, or no rows and the reason where its wheel or learned data cannot be had.
    A top-level function of plain arguments: the task an executor runs, in this process, a process
    pool or a Ray worker (each release's functions run in a worker process of their own anyway)."""
    try:
        if engine.startswith(("vllm==", "vllm-ascend==")):  # vLLM's functions run in its learn worker
            from workbench.engines.vllm import conformance as conformance_vllm

            found = conformance_vllm.run_version(engine, states=states, seed=seed)
        else:
            found = run_version(engine, states=states, seed=seed, triton=triton, only=only)
    except (wheels.FetchError, ValueError) as error:
        return [], str(error)
    for row in found:
        row.pop("seconds", None)  # the rows of two runs compare equal
    return found, None


def main(engines: Sequence[str], *, as_json: bool, states: int, seed: int, triton: bool | None,
         out: IO[str] | None = None, only: Sequence[str] = (), summary: bool = False,
         executor: Executor | None = None) -> int:
    """The CLI's body: 0 when every row agrees or is skipped, 1 on a disagreement, 2 when a wheel is missing.

    ``executor`` runs the releases (default: one after another here; ``Executor(kind="ray")``: one
    Ray task each, on a local Ray instance or the cluster at its address). Rows come out in the order
    the releases were asked for, whatever order they finish in; a line on stderr as each finishes."""
    out = out or sys.stdout
    releases = expand(engines)
    args = [(engine, states, seed, triton, tuple(only)) for engine in releases]
    finished: dict[int, tuple[list[Row], str | None]] = {}
    rows: list[Row] = []
    shown = 0  # releases whose rows were printed: the finished prefix, in the asked order
    for index, result in run_chunks(release_rows, args, executor or Executor(kind="serial")):
        finished[index] = result
        found, error = result
        ran = [row for row in found if not row["skipped"]]
        if error is None:  # a refusal is said once, below, in its turn
            print(f"workbench conformance: [{len(finished)}/{len(releases)}] {releases[index]}: {len(ran)} rows, "
                  f"{sum(r['agree'] for r in ran)}/{sum(r['states'] for r in ran)} states agree", file=sys.stderr, flush=True)
        while shown in finished:
            found, error = finished[shown]
            if error:
                print(f"workbench conformance: {error}", file=sys.stderr)
                return 2
            if as_json:
                for row in found:
                    print(json.dumps(row), file=out, flush=True)
            rows.extend(found)
            shown += 1
    if not as_json:
        print(summary_table(rows) if summary else format_table(rows), file=out)
    return 1 if any(disagrees(row) for row in rows) else 0
