"""A learned section of a vLLM release with a learner of its own (``kv``, ``pad``): added after the
others, so that adding it did not mean learning every release's other sections again. Both name a
form of the engine's behaviour by running it (``name_form``) and check it on other states (``form_row``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.engines.learning import rules as lr
from workbench.engines.learning.learn import LearnError
from workbench.engines.sandbox.session import Session, SessionDied
from workbench.engines.store import learned, vllm_releases, wheels
from workbench.engines.vllm import session as vllm_session

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
        opened, located = vllm_session.open_session(install, say)
        with opened as session:
            content = build(session, located, say)
    except (RuntimeError, SessionDied) as error:
        raise LearnError(str(error)) from None
    path = learned.write_section(engine, name, content, root=root, wheel=install.wheel)
    vllm_releases.clear()
    return path


State = dict[str, Any]


def name_form(chosen: Sequence[State], answers: Sequence[Any], models: Mapping[str, Callable[[State], Any]], *,
              function: str, found: str, searched: str, refused: str) -> dict[str, Any]:
    """The measured fact naming the one form whose model gives the engine's answer on every one of
    ``chosen``; absent, with the engine's first message, where it refused every state (``refused``
    says what it refused)."""
    errors = [a["error"] for a in answers if isinstance(a, dict) and "error" in a]
    if len(errors) == len(answers):
        return lr.absent_fact(f"{refused}: {errors[0]}", searched)
    results = {name: vllm_session.row(name, ((s, e, model(s)) for s, e in zip(chosen, answers)))
               for name, model in models.items()}
    return lr.name_candidate(results, function=function, found=found)


def form_row(fact: Mapping[str, Any], function: str, chosen: Sequence[State], ask: Callable[[Sequence[State]], list[Any]],
             model: Callable[[str, State], Any]) -> dict[str, Any]:
    """The learned form's model against the engine's answers on ``chosen`` (skipped, saying why,
    where no form was named)."""
    form = fact.get("value")
    if form is None:
        return vllm_session.skipped(function, str(fact.get("finding") or fact.get("reason")))
    answers = ask(chosen)
    return vllm_session.row(function, ((s, e, model(str(form), s)) for s, e in zip(chosen, answers)))


def section_content(learner: str, component: str, facts: dict[str, Any], rows: list[dict[str, Any]],
                    say: Callable[[str], None]) -> dict[str, Any]:
    """A section learned apart: its learner, its backend's facts and its conformance rows (each
    said as it is recorded)."""
    for r in rows:
        say(f"conformance {r['function']}: {r['agree']} of {r['states']} agree")
    return {"learner": learner, "backends": {component: facts}, "conformance": rows}
