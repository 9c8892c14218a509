"""What a vLLM release's scheduler does with a waiting request it pads to the uniform spec-decode
size near ``max_model_len``: the fact of the waiting-pad backend (``backends/vllm/v1_waiting_pad.py``),
learned by running the release's own scheduler on a CPU.

Section ``pad`` of ``data/engines/vllm/X.json``, with a learner of its own (``LEARNER``):

* ``waiting_pad`` (measured): the one candidate form (``unpadded``, ``to-limit``,
  ``to-limit-clamped``, ``with-room``) whose model (``first_step``) gives, on every one of a set of
  seeded states, the tokens the release's own ``Scheduler`` (``AsyncScheduler`` under asynchronous
  scheduling) schedules for a prompt sent again beside a running decode, and whether a later step
  gets a negative count (``vllm_buffers.waiting_pad``). The configurations are the reference
  Llama served with ``--enable-prefix-caching --async-scheduling`` and ``k`` tokens of the
  ``ngram_gpu`` drafter; a release that has neither (asynchronous scheduling with speculative
  decoding came in later) has the fact absent, with the engine's message.

The section also holds the conformance row (the learned form's model against the engine on other
states), which ``workbench conformance --engine vllm==X`` runs again.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.backends.vllm import v1_waiting_pad as pad
from workbench.engines.sandbox.session import Session
from workbench.engines.vllm import learn_apart
from workbench.engines.vllm import session as vllm_session

LEARNER = "vllm-pad 1"  # raise when what is learned or how changes
FUNCTION = "Scheduler.schedule (a prompt sent again, padded to 1 + k)"
TASK = "waiting_pad"
Progress = Callable[[str], None]
# Each configuration is one engine config built by the release (seconds each); the prompts vary inside it.
CONFIGS = 4


def states(count: int, seed: int = 0) -> list[dict[str, int]]:
    """Seeded states ``(max_model_len, block_size, k, prompt_len)`` over ``CONFIGS`` configurations:
    half of the prompts leave one token after the cache, most of those near ``max_model_len``."""
    rng = random.Random(f"{seed}:{FUNCTION}")
    configs = []
    for _ in range(CONFIGS):
        block = rng.choice([16, 16, 32, 64])
        k = rng.randint(1, 7)
        # a length whose boundary prompt (max_model_len - k, one token past whole blocks) exists, or not
        blocks = rng.randint(8, 200)
        length = blocks * block + 1 + k + rng.choice([0, 0, rng.randint(1, block - 1)])
        configs.append((length, block, k))
    found = []
    for index in range(count):
        length, block, k = configs[index % CONFIGS]
        one_left = (rng.randint(max(2, (length - 3 * block) // block), (length - 2) // block)) * block + 1
        near = length - k + rng.randint(-2, 1)
        prompt = rng.choice([one_left, near, near, rng.randint(block + 2, length - 1)])
        found.append({"max_model_len": length, "block_size": block, "k": k,
                      "prompt_len": max(block + 2, min(prompt, length - 1))})
    return found


def _engine(answer: Any) -> Any:
    """The engine's answer in the model's terms: the admitting step's count and whether any later
    step's is negative (an error stays as it is)."""
    if not isinstance(answer, dict) or "scheduled" not in answer:
        return answer
    counts = [int(c) for c in answer["scheduled"]]
    admitted = next((c for c in counts if c != 0), 0)
    later = counts[counts.index(admitted) + 1:] if admitted else []
    return {"scheduled": admitted, "negative": any(c < 0 for c in later)}


def _model(form: str, state: dict[str, int]) -> dict[str, Any]:
    step = pad.first_step(form, state["max_model_len"], state["block_size"], state["k"], state["prompt_len"])
    return step if step["scheduled"] else {"scheduled": 0, "negative": False}


def _asked(session: Session, chosen: list[dict[str, int]]) -> list[Any]:
    return [_engine(a) for a in vllm_session.ask_all(session, TASK, "states", chosen)]


def conformance_row(session: Session, facts: dict[str, Any], count: int, seed: int = 0) -> dict[str, Any]:
    """The learned form's model against the engine's scheduler on ``count`` states."""
    return learn_apart.form_row(facts["waiting_pad"], FUNCTION, states(count, seed + 1),
                                lambda chosen: _asked(session, list(chosen)), _model)


def learn_facts(session: Session, say: Progress) -> dict[str, Any]:
    chosen = states(48)
    fact = learn_apart.name_form(
        chosen, _asked(session, chosen), {form: (lambda s, form=form: _model(form, s)) for form in pad.FORMS},  # type: ignore[misc]
        function=FUNCTION, found="vllm.v1.core.sched.scheduler.Scheduler.schedule",
        searched="vllm.v1.core.sched.scheduler.Scheduler", refused="the release does not start the configuration")
    say(f"waiting pad: {fact['value'] or fact.get('finding') or fact.get('reason')}")
    return {"waiting_pad": fact}


def section(session: Session, count: int, say: Progress) -> dict[str, Any]:
    facts = learn_facts(session, say)
    rows = [conformance_row(session, facts, count)] if facts["waiting_pad"]["how"] == "measured" else []
    return learn_apart.section_content(LEARNER, pad.NAME, facts, rows, say)


def learn(engine: str, *, progress: Progress, root: Path, count: int = 200) -> Path | None:
    """Section ``pad`` of ``engine``'s learned file (None: already learned from this wheel)."""
    return learn_apart.learn_section(engine, "pad", LEARNER,
                                     lambda session, located, say: section(session, count, say),
                                     progress=progress, root=root)
