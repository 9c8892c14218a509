"""A vLLM release held by a learn worker, and the rows its answers make: what every vLLM learner asks with.

``open_session(install)`` starts the release's learn worker (``learn_worker``: its modules
loaded once, on a stand-in GPU) with the first set-up that imports it; ``ask_all`` sends it a task's
states ``BATCH`` at a time; ``row`` / ``skipped`` are a conformance row in the form every learner
and ``conformance`` report. Imported by the vLLM learners and ``conformance``; imports
only the release store (``wheels``) and the worker session (``sandbox.session``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from workbench.engines.sandbox.session import Session
from workbench.engines.store import wheels

Row = dict[str, Any]
Progress = Callable[[str], None]
WORKER = "workbench.engines.vllm.learn_worker"
BATCH = 64  # states per task sent to the worker


# A triton of the early releases' day (the one torch 2.5 pinned): their modules import parts of
# triton that its current release no longer has, and parts they define only with a triton present.
EARLY_TRITON = "3.1.0"


def setups(install: wheels.EngineInstall, gpu: str = "h100") -> list[dict[str, Any]]:
    """The worker's set-ups to try, in order: the release with the current triton where it is
    cached (the modules of recent releases build their kernel tables at import, as on a GPU
    machine), without triton, and with the triton of the early releases (fetched when the first
    two fail). Releases that still have a triton cache manager try the last two first."""
    base = {"package_dir": str(install.package_dir), "deps": str(install.deps), "gpu": gpu, "extra_paths": []}
    triton = wheels.triton_dir()
    current = [{**base, "extra_paths": [str(triton)]}] if triton else []
    early = [{**base, "extra_paths": [EARLY_TRITON]}]  # resolved to its folder when tried (open_session)
    if (install.package_dir / "triton_utils" / "custom_cache_manager.py").exists():
        return [base, *early, *current]
    return [*current, base, *early]


def open_session(install: wheels.EngineInstall, say: Progress = lambda line: None) -> tuple[Session, dict[str, Any]]:
    """A worker holding the release and what it located; RuntimeError when no set-up imports it."""
    errors = []
    for setup in setups(install):
        if setup["extra_paths"] == [EARLY_TRITON]:
            try:
                setup = {**setup, "extra_paths": [str(wheels.fetch_triton_release(EARLY_TRITON))]}
            except wheels.FetchError as error:
                errors.append(str(error))
                continue
        session = Session(WORKER, setup)
        located = session.ask({"name": "locate"})
        if "error" not in located:
            triton = Path(setup["extra_paths"][0]).parent.name if setup["extra_paths"] else None
            say(f"loaded with {triton}" if triton else "loaded without triton")
            located["triton"] = triton is not None
            if triton and triton != "triton":
                located["triton_release"] = triton.split("-", 1)[1]
            return session, located
        session.close()
        errors.append(located["error"])
    raise RuntimeError(f"its modules do not import on a CPU: {'; '.join(dict.fromkeys(errors))}")


def row(function: str, pairs: Iterable[tuple[dict[str, Any], Any, Any]]) -> Row:
    states = agree = 0
    first = None
    for state, engine, model in pairs:
        states += 1
        if engine == model:
            agree += 1
        elif first is None:
            first = {"state": state, "engine": engine, "model": model}
    return {"function": function, "states": states, "agree": agree, "first_disagreement": first, "skipped": None}


def skipped(function: str, reason: str) -> Row:
    return {"function": function, "states": 0, "agree": 0, "first_disagreement": None, "skipped": reason}


def ask_all(session: Session, name: str, key: str, items: Sequence[Any]) -> list[Any]:
    """The worker's answers for every item, asked ``BATCH`` at a time; an error answers each item."""
    values: list[Any] = []
    for start in range(0, len(items), BATCH):
        answer = session.ask({"name": name, key: list(items[start:start + BATCH])})
        chunk = answer.get("values") or [{"error": answer.get("error")}] * len(items[start:start + BATCH])
        values.extend(chunk)
    return values
