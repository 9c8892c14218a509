"""What a vLLM release's ``AsyncScheduler`` does near ``max_model_len``: whether the cap its
synchronous ``Scheduler`` was measured with (``learn_kv``) also holds for the steps it forms
while the step before is still running, learned by running the release's own scheduler on a CPU.

Asynchronous scheduling forms a request's next step before the last one's output is back: the
scheduler counts the tokens in flight as computed (with placeholders for their drafts) and takes
back the rejected ones when the output comes. From 0.14 it is the default wherever the executor
supports it, so most V1 launches of those releases schedule this way.

Section ``async`` of ``data/engines/vllm/X.json``, with a learner of its own (``LEARNER``):

* ``async_cap`` (measured): the one form of ``CAPS`` whose model (``vllm_v1_block_table.scheduled``)
  gives every step the release's ``AsyncScheduler`` forms for a request run to its end (its tokens
  and drafts at the ``num_computed_tokens`` it formed the step at), the request finishing; driven
  as the engine core's batch queue drives it (``vllm_buffers.async_steps``), on seeded states near
  ``max_model_len`` with 0 to ``k`` drafts accepted a step. The configurations are the reference
  Llama with ``--async-scheduling`` and ``k`` drafts of the first drafter the release schedules
  asynchronously; a release that schedules no drafter asynchronously (before 0.11.1) has the fact
  absent, with the engine's message.

The section also holds the conformance row (the learned form against the engine on other states),
which ``workbench conformance --engine vllm==X`` runs again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.backends.vllm import v1_block_table as v1
from workbench.engines.sandbox.session import Session
from workbench.engines.vllm import learn_apart
from workbench.engines.vllm import session as vllm_session

LEARNER = "vllm-async 1"  # raise when what is learned or how changes
SECTION = "async"
FUNCTION = "AsyncScheduler.schedule (a request's steps formed with the step before in flight)"
TASK = "async_steps"
# Each configuration is one engine config built by the release (seconds each); the lengths vary inside it.
CONFIGS = 4
Progress = Callable[[str], None]
State = dict[str, Any]


def states(count: int, seed: int = 0) -> list[State]:
    """Seeded states ``(max_model_len, block_size, k, computed, accepted)`` over ``CONFIGS``
    configurations: prompts within ``3 (k + 1)`` tokens of ``max_model_len`` (the run to the end
    takes a few dozen steps at most), any number of drafts accepted a step."""
    rng = random.Random(f"{seed}:{FUNCTION}")
    configs = [(rng.randint(64, 8192), rng.choice([16, 16, 32, 64]), rng.randint(1, 7)) for _ in range(CONFIGS)]
    found = []
    for index in range(count):
        length, block, k = configs[index % CONFIGS]
        found.append({"max_model_len": length, "block_size": block, "k": k,
                      "computed": max(1, length - 1 - rng.randint(1, 3 * (k + 1))),
                      "accepted": rng.choice([0, k, rng.randint(0, k)])})
    return found


def _model(cap: str, state: State) -> dict[str, Any]:
    """What a scheduler capping as ``cap`` forms at each ``num_computed_tokens`` the engine formed a
    step at (``at``): the step's tokens and drafts, the request running to its end."""
    length, k = state["max_model_len"], state["k"]
    steps = []
    for computed in state["at"]:
        n = v1.scheduled(cap, length, computed, k)
        steps.append([computed, n, max(0, n - 1)])
    return {"steps": steps, "finished": True}


def _asked(session: Session, chosen: Sequence[State]) -> tuple[list[State], list[Any]]:
    """The engine's runs, and each state with the computed counts its steps were formed at."""
    answers = vllm_session.ask_all(session, TASK, "states", chosen)
    at = [[int(step[0]) for step in a["steps"]] if isinstance(a, dict) and "steps" in a else [] for a in answers]
    return [{**s, "at": a} for s, a in zip(chosen, at)], answers


def conformance_row(session: Session, facts: dict[str, Any], count: int, seed: int = 0) -> dict[str, Any]:
    """The learned form's model against the engine's ``AsyncScheduler`` on ``count`` states."""
    cap = facts["async_cap"].get("value")
    if cap is None:
        fact = facts["async_cap"]
        return vllm_session.skipped(FUNCTION, str(fact.get("finding") or fact.get("reason")))
    chosen, answers = _asked(session, states(count, seed + 1))
    return vllm_session.row(FUNCTION, ((s, e, _model(str(cap), s)) for s, e in zip(chosen, answers)))


def learn_facts(session: Session, say: Progress) -> dict[str, Any]:
    chosen, answers = _asked(session, states(48))
    fact = learn_apart.name_form(
        chosen, answers, {cap: (lambda s, cap=cap: _model(cap, s)) for cap in v1.CAPS},  # type: ignore[misc]
        function=FUNCTION, found="vllm.v1.core.sched.async_scheduler.AsyncScheduler",
        searched="vllm.v1.core.sched.async_scheduler.AsyncScheduler",
        refused="the release schedules no drafter asynchronously")
    say(f"async cap: {fact['value'] or fact.get('finding') or fact.get('reason')}")
    return {"async_cap": fact}


def section(session: Session, count: int, say: Progress) -> dict[str, Any]:
    facts = learn_facts(session, say)
    rows = [conformance_row(session, facts, count)] if facts["async_cap"]["how"] == "measured" else []
    return learn_apart.section_content(LEARNER, v1.NAME, facts, rows, say)


def learn(engine: str, *, progress: Progress, root: Path, count: int = 200) -> Path | None:
    """Section ``async`` of ``engine``'s learned file (None: already learned from this wheel)."""
    return learn_apart.learn_section(engine, SECTION, LEARNER,
                                     lambda session, located, say: section(session, count, say),
                                     progress=progress, root=root)
