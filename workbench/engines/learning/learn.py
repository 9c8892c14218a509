"""``workbench engines learn``: learn a release from its own code, one engine learner per engine.

The framework here is engine-neutral. It names the release (``NAME==VERSION``) or every listed
release of an engine (``data/engines/releases.json``), finds the engine's learner and calls it,
release after release, printing progress on stderr. A learner is the module
``workbench/engines/<name>/learn.py`` (``-`` in the engine's name becomes ``_``: ``sglang.learn``,
``vllm.learn``, ``vllm_ascend.learn``) with one function::

    def learn_release(engine: str, *, progress: Callable[[str], None], root: Path) -> Path

It fetches the release's wheel into the workbench's cache, measures what it can by running the
release's own code, writes its sections of ``root/NAME/VERSION.json`` with
``learned.write_section`` (each value a fact: measured, read or absent) and returns that path.
It says what it does through ``progress`` (one short line per step, per buffer), and it skips a
release whose file already holds its sections from the same wheel and learner version
(``learned.is_current``), so ``--all`` can be run again after an interruption and redoes only
what is missing. A release it cannot learn raises ``LearnError`` with one line saying what
stopped it; ``--all`` records that line and goes on with the next release. After ``--all``, a
learner's optional ``finish_all(*, root, progress) -> list[str]`` runs (SGLang's drops the
``.postN`` files that change no modelled value) and its lines are printed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Protocol, cast

from workbench.engines.store import learned
from workbench.engines.store.releases import ENGINES, releases, split

Progress = Callable[[str], None]


class LearnError(RuntimeError):
    """A release that cannot be learned; the message is one line saying what stopped it."""


class Learner(Protocol):
    def __call__(self, engine: str, *, progress: Progress, root: Path) -> Path: ...


def learner_module(name: str) -> str:
    """The module holding engine ``name``'s learner: ``workbench.engines.vllm_ascend.learn``."""
    return f"workbench.engines.{name.replace('-', '_')}.learn"


def learner(name: str) -> Learner:
    """Engine ``name``'s ``learn_release``; ValueError naming the engines that have one."""
    if name not in ENGINES:
        raise ValueError(f"engine: {name!r} is not one of {', '.join(ENGINES)}")
    try:
        module: ModuleType = importlib.import_module(learner_module(name))
    except ModuleNotFoundError as error:
        wanted = learner_module(name)
        if error.name is None or not (wanted == error.name or wanted.startswith(error.name + ".")):
            raise  # a missing import inside the learner, not the learner
        have = [e for e in ENGINES if _has_learner(e)]
        raise ValueError(f"engine: no learner for {name!r} on this checkout "
                         f"(learners: {', '.join(have) or 'none'})") from None
    return cast(Learner, module.learn_release)


def _has_learner(name: str) -> bool:
    try:
        return importlib.util.find_spec(learner_module(name)) is not None
    except ModuleNotFoundError:  # not even the engine's folder
        return False


@dataclass(frozen=True)
class Outcome:
    engine: str
    path: Path | None  # the learned file, or None when the release could not be learned
    seconds: float
    error: str | None = None  # what stopped it (one line)


def learn_one(engine: str, *, root: Path, progress: Progress) -> Outcome:
    """Learn one release; a ``LearnError`` becomes an outcome with its line (``KeyboardInterrupt``
    and bugs propagate: what was written before stays written)."""
    name, _ = split(engine)
    learn_release = learner(name)
    start = time.perf_counter()
    try:
        path = learn_release(engine, progress=progress, root=root)
    except LearnError as error:
        progress(f"{engine}: not learned: {error}")
        return Outcome(engine, None, time.perf_counter() - start, str(error))
    return Outcome(engine, path, time.perf_counter() - start)


def learn_many(engines: Sequence[str], *, root: Path, progress: Progress) -> list[Outcome]:
    outcomes = []
    for i, engine in enumerate(engines, 1):
        progress(f"[{i}/{len(engines)}] {engine}")
        outcomes.append(learn_one(engine, root=root, progress=progress))
    return outcomes


def finish_all(name: str, *, root: Path, progress: Progress) -> list[str]:
    """After ``--all``: the learner's ``finish_all(root, progress)`` when it has one (SGLang's drops
    the .postN files whose modelled values are their base release's); what it says it did."""
    module = importlib.import_module(learner_module(name))
    finish = getattr(module, "finish_all", None)
    return list(finish(root=root, progress=progress)) if finish is not None else []


def stderr_progress(stream: IO[str] | None = None) -> Progress:
    def say(line: str) -> None:
        print(f"workbench engines learn: {line}", file=stream or sys.stderr, flush=True)
    return say


def main(engine: str | None, all_of: str | None, out: str | None, stdout: IO[str]) -> int:
    """The CLI's body: 0 when every release asked for was learned, 1 when one was not."""
    if (engine is None) == (all_of is None):
        raise ValueError("give one release (NAME==VERSION) or --all NAME")
    root = Path(out) if out else learned.cache_dir()
    engines = list(releases(all_of)) if all_of else [str(engine)]
    if engine is not None:
        split(engine)
    outcomes = learn_many(engines, root=root, progress=stderr_progress())
    notes = finish_all(all_of, root=root, progress=stderr_progress()) if all_of else []
    for outcome in outcomes:
        where = str(outcome.path) if outcome.path else f"not learned: {outcome.error}"
        print(f"{outcome.engine:<28} {outcome.seconds:7.1f} s  {where}", file=stdout)
    for note in notes:
        print(note, file=stdout)
    return 0 if all(o.path is not None for o in outcomes) else 1
