"""``workbench conformance``: each engine version's own functions against the workbench's models.

For every version asked for, the engine's wheel is fetched into the workbench's cache (once), a
worker process of its own loads it (``worker.py``) and runs every check on the same seeded
states as the models, and this module gathers the rows and prints them: a table, or one JSON
object per line. The behaviour each version ships (which sizing rule, replay, gather...) is read
from ``data/engines.json``; its ``conformance`` entries hold what only conformance needs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from workbench.engines import learned, releases, wheels
from workbench.engines.versions import DEFAULT_VERSIONS

Row = dict[str, Any]
DEFAULT_STATES = 1000


SPECIAL = ("module_paths", "patch", "wheel", "torchvision")  # conformance entries that are not model settings


def behaviour(engine: str, path: Path = DEFAULT_VERSIONS) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model settings that stand for ``engine``, and how to load it.

    The first also holds ``backends``: the backends the version's entry lists, each with its
    settings (``{"sglang-xpu-page-table": {"rule": "context"}, ...}``); a row whose model is one
    of the backends runs only for the versions that list it (``Check.backends``).

    The second dict holds ``module_paths`` (modules that moved in this version), ``wheel`` (the
    released version whose code is loaded; a patched variant such as
    ``sglang==0.5.14+dsa-width-w`` names its base) and ``patch`` (a one-line edit in the
    engine's own source-patcher format, for a behaviour no release carries).
    """
    data = json.loads(path.read_text())
    if not engine.startswith("sglang=="):  # the worker loads SGLang's functions; vLLM's run elsewhere
        raise ValueError(f"engine: {engine!r} is not an SGLang version: this command runs SGLang's functions; "
                         "vLLM's own code is checked by tests/test_vllm.py (tests/vllm_released.py, cached wheels)")
    reach = {"engine": engine, "reach_facts": learned.section(engine.split("+", 1)[0], "reach")}
    for version in data.get("versions", []):
        if version.get("engine") == engine:
            entries = version.get("conformance", {})
            settings = {name: entry["value"] for name, entry in entries.items() if name not in SPECIAL}
            settings["backends"] = {backend: {name: entry["value"] for name, entry in fields.items()}
                                    for backend, fields in version.get("backends", {}).items()}
            load = {name: entries[name]["value"] for name in SPECIAL if name in entries}
            return {**settings, **reach}, load
    if releases.is_listed(engine):  # a listed release without buffer data: the scheduler rows still run
        return {**reach, "backends": {}, "unmodelled": f"{engine} has no entry in data/engines.json "
                "(only the rows whose model needs none run)"}, _read_load(engine)
    known = ", ".join(v.get("engine", "?") for v in data.get("versions", []))
    raise ValueError(f"engine: {engine!r} is neither a modelled version ({known}) nor a release listed in "
                     "data/engines/releases.json")


def _read_load(engine: str) -> dict[str, Any]:
    """How a release without an entry here loads, as its reach facts were learned (``reach_read.json``:
    ``torchvision`` true, or ``"stand-in"``: metadata from the cache's folder, code stood in;
    ``triton``: triton's own decorators at import, its kernels never interpreted, so never run)."""
    from workbench.engines.reach_learn import READ_FACTS

    read = json.loads(READ_FACTS.read_text())["releases"].get(engine, {})
    return dict(read.get("load", {}))


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
           "patch": load.get("patch"), "only": list(only),
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
        done = subprocess.run([sys.executable, "-m", "workbench.engines.worker"], input=json.dumps(job),
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


def main(engines: Sequence[str], *, as_json: bool, states: int, seed: int, triton: bool | None,
         out: IO[str] | None = None, only: Sequence[str] = ()) -> int:
    """The CLI's body: 0 when every row agrees or is skipped, 1 on a disagreement, 2 when a wheel is missing."""
    out = out or sys.stdout
    rows: list[Row] = []
    for engine in engines:
        try:
            found = run_version(engine, states=states, seed=seed, triton=triton, only=only)
        except (wheels.FetchError, ValueError) as error:
            print(f"workbench conformance: {error}", file=sys.stderr)
            return 2
        for row in found:
            row.pop("seconds", None)
            if as_json:
                print(json.dumps(row), file=out, flush=True)
        rows.extend(found)
    if not as_json:
        print(format_table(rows), file=out)
    return 1 if any(disagrees(row) for row in rows) else 0
