"""Conformance for one engine version, in a process of its own: ``python -m workbench.engines.checking.worker``.

The parent (``conformance.py``) passes the engine, the folders of its cached install, the
behaviour the models must stand for and the state counts as one JSON object on stdin; this
process loads the engine's modules (``standins.py`` rewires ``sys.modules`` for good, which is
why it is a process of its own), runs every check and prints one JSON row per engine function.
A module that does not import, a method that is not there, or a stand-in that is called makes a
``skipped`` row with the reason; it never ends the run.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from workbench.engines.checking import checks
from workbench.engines.checking.answers import Answer, first_difference, shown
from workbench.engines.checking.states import State

Row = dict[str, Any]


def compare(engine: str, function: str, pairs: Iterable[tuple[State, Callable[[], Answer], Callable[[], Answer]]]
            ) -> Row:
    """Run every (state, engine side, model side) and count agreements; keep the first disagreement."""
    states = agree = 0
    first = None
    seeds: list[dict[str, Any]] = []
    start = time.perf_counter()
    for state, engine_side, model_side in pairs:
        got, want = engine_side(), model_side()
        states += 1
        if "seed" in state:  # the seed cases: say what the engine's own code gave
            seeds.append({"seed": state["seed"], "outcome": got["outcome"], "error": got.get("error"),
                          "agree": got == want})
        if got == want:
            agree += 1
        elif first is None:
            first = {"state": state, "where": first_difference(got, want), "engine": shown(got),
                     "model": shown(want)}
    return {"engine": engine, "function": function, "states": states, "agree": agree,
            "first_disagreement": first, "skipped": None, "seconds": round(time.perf_counter() - start, 2),
            **({"seeds": seeds} if seeds else {})}


def skipped(engine: str, function: str, reason: str) -> Row:
    return {"engine": engine, "function": function, "states": 0, "agree": 0, "first_disagreement": None,
            "skipped": reason}


def _one_line(error: BaseException) -> str:
    where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    place = f" ({Path(where.filename).name}:{where.lineno})" if where else ""
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}{place}"


def _wanted(job: dict[str, Any], function: str) -> bool:
    """In ``only`` (when given) and not in ``done`` (rows an earlier, crashed worker gave)."""
    if function in job.get("done", ()):
        return False
    return not job.get("only") or any(part in function for part in job["only"])


def _unmodelled(job: dict[str, Any], check: checks.Check, function: str) -> str | None:
    """Why ``function``'s model does not stand for this version, or None: the release has no
    buffer data (only the rows that need none run), a setting its model needs was not learned, or
    its backend is not in the release's learned data (checked before the row's module is imported)."""
    from workbench.engines.checking.behaviour import unlearned_reason

    if job["behaviour"].get("unmodelled") and not check.any_release:
        return str(job["behaviour"]["unmodelled"])
    absent = job.get("absent_modules", {}).get(check.modules[0])
    if absent is not None:  # where a later release keeps it, this one has nothing of the kind
        return f"{job['engine']} has no {absent}: its learner found none in the wheel"
    missing = unlearned_reason(job["engine"], function, job.get("unlearned", {}))
    if missing is not None:
        return missing
    backend = check.backends.get(function)
    listed = job["behaviour"].get("backends")
    if backend is None or listed is None or backend in listed:
        return None
    return (f"{job['engine']}'s learned data does not list {backend}: "
            "its model stands for the releases whose data does")


def _preload(module_paths: dict[str, str]) -> None:
    """Import the release's modules in the order its learner did (sorted by name), each failure
    left to the rows that need the module: the order matters to some releases (0.5.11 to
    0.5.12.post1: their Ascend backend imports, through ``sglang.srt.configs``, a transformers image
    processor that stands as a torchvision-wanting placeholder unless ``sglang.srt.utils`` was imported
    first, as the NPU allocator's module does), and conformance must load a release as the learning
    that named its values did."""
    for name in sorted(set(module_paths.values())):
        with contextlib.suppress(BaseException):  # the check importing it says why, in its rows
            importlib.import_module(name)


def run(job: dict[str, Any], announce: Callable[[str], None] = lambda function: None) -> Iterator[Row]:
    """Every row of ``job``'s version, as each is done; ``announce(function)`` before each starts
    (the parent learns which function a crashed worker was in)."""
    from workbench.engines.sandbox import standins

    engine = job["engine"]
    real = ["triton"] if job.get("triton_dir") else []
    extra = [Path(path) for path in job.get("extra_paths", [])]
    extra += [Path(job["triton_dir"])] if job.get("triton_dir") else []
    if real and job.get("triton_interpret", True):
        os.environ.setdefault("TRITON_INTERPRET", "1")
    else:
        checks.settle_torch_without_triton()
    standins.install(Path(job["package_dir"]), Path(job["deps"]), extra, real=real, visible=job.get("visible", []))
    if job.get("tolerant"):  # the release imports only statement by statement (its learned data says so)
        from workbench.engines.sandbox.tolerant_import import TolerantFinder

        sys.meta_path.insert(0, TolerantFinder(Path(job["package_dir"])))
    if job.get("patch"):
        try:  # the engine's own source patcher, as its pr_fix_toggle uses it
            patcher = importlib.import_module("sglang.srt.debug_utils.source_patcher")
            patcher.apply_patches_from_config(job["patch"])
        except BaseException as error:  # noqa: BLE001 - unpatched results must not pass for patched ones
            reason = f"the one-line patch does not apply: {_one_line(error)}"
            yield from (skipped(engine, f, reason) for check in checks.CHECKS for f in check.functions if _wanted(job, f))
            return
    _preload(job.get("module_paths", {}))
    for check in checks.CHECKS:
        functions = [f for f in check.functions if _wanted(job, f)]
        for function in [f for f in functions if _unmodelled(job, check, f)]:
            yield skipped(engine, function, _unmodelled(job, check, function) or "")
            functions.remove(function)
        if not functions:
            continue
        try:
            modules = checks.import_modules(check.modules, job.get("module_paths", {}))
        except BaseException as error:  # noqa: BLE001 - a module that fails to import skips its rows
            yield from (skipped(engine, f, f"cannot import {check.modules[0]}: {_one_line(error)}") for f in functions)
            continue
        from workbench.engines.sglang import calls_older as sglang_calls_older

        sglang_calls_older.adapt(modules, job.get("names", {}))
        standins.strict()
        for function in functions:
            yield _one_row(job, check, function, modules, real, announce)
        standins.lenient()


def _one_row(job: dict[str, Any], check: checks.Check, function: str, modules: dict[str, ModuleType],
             real: list[str], announce: Callable[[str], None]) -> Row:
    engine = job["engine"]
    if check.needs_triton(function) and not real:
        return skipped(engine, function, "triton is not used in this run (workbench conformance --triton fetches "
                                         "it; the kernel runs under TRITON_INTERPRET=1)")
    announce(function)
    rng = random.Random(f"{job['seed']}:{function}")
    try:
        return compare(engine, function, check.pairs(function, modules, job["behaviour"], rng, job["states"]))
    except BaseException as error:  # noqa: BLE001 - a moved signature or thin stand-in skips the row
        return skipped(engine, function, _one_line(error))


def main() -> int:
    job = json.loads(sys.stdin.read())
    for row in run(job, announce=lambda function: print(json.dumps({"starting": function}), flush=True)):
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
