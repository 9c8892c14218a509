"""A learned section of a vLLM release with a learner of its own (``kv``, ``pad``): added after the
others, so that adding it did not mean learning every release's other sections again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.engines import conformance_vllm, learned, vllm_releases, wheels
from workbench.engines.learn import LearnError
from workbench.engines.learn_session import Session, SessionDied

Progress = Callable[[str], None]
Build = Callable[[Session, dict[str, Any], Progress], dict[str, Any]]  # (worker, located buffers, say) -> content


def learn_section(engine: str, name: str, learner: str, build: Build, *, progress: Progress, root: Path) -> Path | None:
    """Section ``name`` of ``engine``'s learned file, built by ``build`` in one worker of the
    release (None: already learned from this wheel by ``learner``)."""
    say: Progress = lambda line: progress(f"{engine}: {line}")  # noqa: E731
    try:
        install = wheels.fetch(engine, progress=say)
    except wheels.FetchError as error:
        raise LearnError(str(error)) from None
    if learned.is_current(engine, (name,), learner, install.wheel.get("sha256", ""), root=root):
        say(f"{name}: already learned from this wheel by {learner}: skipped")
        return None
    try:
        opened, located = conformance_vllm.open_session(install, say)
        with opened as session:
            content = build(session, located, say)
    except (RuntimeError, SessionDied) as error:
        raise LearnError(str(error)) from None
    path = learned.write_section(engine, name, content, root=root, wheel=install.wheel)
    vllm_releases.clear()
    return path
