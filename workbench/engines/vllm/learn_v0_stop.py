"""Where a vLLM release's V0 engine stops a request near ``max_model_len``: the reach of a V0
launch, learned by running the release's own scheduler and stop checker on a CPU.

The V0 scheduler gives a running sequence one token a step and never caps it by
``max_model_len``; the sequence ends when the output processor's ``StopChecker`` finishes it, or,
with asynchronous output processing (the V0 default on CUDA), when the scheduler holds back a
sequence that has grown too long, since the next step is scheduled before the last one's output
is checked. Both comparisons changed between releases, so they are measured, not read.

Section ``v0-stop`` of ``data/engines/vllm/X.json``, with a learner of its own (``LEARNER``):

* ``v0_stop`` and ``v0_async_stop`` (measured): the one form of the V0 backend's ``STOPS`` whose model gives, on every
  one of a set of seeded states, whether the release's own ``Scheduler.schedule`` gives a request
  a decode step once its prompt of ``computed`` tokens has been computed and one token sampled
  (``vllm_buffers.v0_decode_step``): with the stop checker run before the next schedule, and with
  an output callback (asynchronous output processing, the check after it). Most states are within
  three tokens of ``max_model_len``. Absent where the release has no V0 engine (0.11.0 on), with
  the engine's message.

The section also holds the conformance rows (the learned forms against the engine on other states),
which ``workbench conformance --engine vllm==X`` runs again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.backends.vllm.v0_graph_block_tables import NAME, STOPS
from workbench.engines.sandbox.session import Session
from workbench.engines.vllm import learn_apart
from workbench.engines.vllm import session as vllm_session

LEARNER = "vllm-v0-stop 1"  # raise when what is learned or how changes
SECTION = "v0-stop"
COMPONENT = NAME  # the V0 backend whose launches take this reach
FUNCTION = "Scheduler.schedule and StopChecker.maybe_stop_sequence (a V0 request near max_model_len)"
TASK = "v0_decode_step"
FACTS = {False: "v0_stop", True: "v0_async_stop"}  # by asynchronous output processing
Progress = Callable[[str], None]
State = dict[str, Any]


def states(count: int, asynchronous: bool, seed: int = 0) -> list[State]:
    """Seeded states ``(max_model_len, block_size, computed)``: three in four within three tokens
    of ``max_model_len`` (a prompt of at most ``max_model_len`` tokens, as the scheduler admits)."""
    rng = random.Random(f"{seed}:{FUNCTION}:{asynchronous}")
    found = []
    for _ in range(count):
        limit = rng.randint(16, 20_000)
        computed = rng.choice([limit - rng.randint(0, 3)] * 3 + [rng.randint(1, limit)])
        found.append({"max_model_len": limit, "block_size": rng.choice([8, 16, 16, 32]), "computed": max(1, computed),
                      "async_output": asynchronous})
    return found


def _model(form: str, state: State) -> dict[str, Any]:
    held = state["computed"] + 1  # the prompt and the sampled token
    return {"stopped": True} if STOPS[form](held, state["max_model_len"]) else {"scheduled": True}


def _asked(session: Session, chosen: Sequence[State]) -> list[Any]:
    return vllm_session.ask_all(session, TASK, "states", chosen)


def conformance_rows(session: Session, facts: dict[str, Any], count: int, seed: int = 0) -> list[dict[str, Any]]:
    """The learned forms' models against the engine on ``count`` states each."""
    return [learn_apart.form_row(facts[name], f"{FUNCTION}{' (asynchronous output)' if asynchronous else ''}",
                                 states(count, asynchronous, seed + 1), lambda c: _asked(session, c), _model)
            for asynchronous, name in FACTS.items() if facts[name]["how"] == "measured"]


def learn_facts(session: Session, say: Progress) -> dict[str, Any]:
    facts = {}
    for asynchronous, name in FACTS.items():
        chosen = states(48, asynchronous)
        facts[name] = learn_apart.name_form(
            chosen, _asked(session, chosen), {form: (lambda s, form=form: _model(form, s)) for form in STOPS},  # type: ignore[misc]
            function=FUNCTION, found="vllm.core.scheduler.Scheduler.schedule",
            searched="vllm.core.scheduler, vllm.engine.output_processor.stop_checker", refused="the release has no V0 engine")
        fact = facts[name]
        say(f"{name}: {fact['value'] or fact.get('finding') or fact.get('reason')}")
    return facts


def section(session: Session, count: int, say: Progress) -> dict[str, Any]:
    facts = learn_facts(session, say)
    rows = conformance_rows(session, facts, count)
    return learn_apart.section_content(LEARNER, COMPONENT, facts, rows, say)


def learn(engine: str, *, progress: Progress, root: Path, count: int = 200) -> Path | None:
    """Section ``v0-stop`` of ``engine``'s learned file (None: already learned from this wheel)."""
    return learn_apart.learn_section(engine, SECTION, LEARNER,
                                     lambda session, located, say: section(session, count, say),
                                     progress=progress, root=root)
