"""What a vLLM release's KV cache manager and scheduler do near ``max_model_len``: the facts of the
v1 block table backend (``backends/vllm/v1_block_table.py``), learned from the release's own code.

Section ``kv`` of ``data/engines/vllm/X.json``, with a learner of its own (``LEARNER``), so that
adding it did not mean learning every release's other sections again:

* ``slots`` (measured): the one candidate policy (``capped``, ``preallocated``) under which the
  model's ``allocation`` gives the blocks, or the assertion, that the release's own
  ``KVCacheManager.allocate_slots`` gives on every one of a set of seeded states, most of them at
  the row's last block;
* ``preallocate_tokens`` (read): the manager's ``num_preallocate_tokens`` default, which the
  scheduler does not pass (0 where the manager takes no such parameter); its reason
  says which, and whether the measurement above agreed with it (``preallocate_reason``);
* ``scheduler_cap`` (measured): the one candidate form of ``CAPS`` (``uncapped``, ``to-limit``,
  ``below-limit``) whose model (``decode_step``) gives, on every one of a set of seeded states,
  what the release's own ``Scheduler.schedule`` gives a running request's step of one sampled token
  and ``k`` drafts at committed length ``c``, after its own ``update_from_output`` handed it the
  prompt's output (and ``check_stop`` may have finished it); most states within ``k + 2`` tokens of
  ``max_model_len``. The statement of ``Scheduler.schedule`` that caps, where the release has one,
  is kept beside it (``line``, read).

The section also holds the conformance rows of ``allocate_slots`` and of the decode step (the model
against the engine on other states), which ``workbench conformance --engine vllm==X`` runs again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.backends.vllm import v1_block_table as v1
from workbench.engines.learning import rules as lr
from workbench.engines.sandbox.session import Session
from workbench.engines.vllm import learn_apart
from workbench.engines.vllm import session as vllm_session
from workbench.model.geometry import cdiv

LEARNER = "vllm-kv 5"  # raise when what is learned or how changes
FUNCTION = "KVCacheManager.allocate_slots (a request's blocks)"
STEP = "Scheduler.schedule (a running request's drafts near max_model_len)"
STEP_TASK = "decode_step"
# Each configuration is one engine config built by the release (seconds each); the lengths vary inside it.
STEP_CONFIGS = 4
Progress = Callable[[str], None]


def states(count: int, seed: int = 0) -> list[dict[str, int]]:
    """Seeded states ``(max_model_len, block_size, computed, new_tokens, lookahead)``: two in three
    with the step ending within a block of the row's last token, the rest anywhere."""
    rng = random.Random(f"{seed}:{FUNCTION}")
    found = []
    for _ in range(count):
        block = rng.choice([1, 8, 16, 16, 32, 64, 128, 256])
        length = rng.choice([rng.randint(block + 2, 40000), cdiv(rng.randint(block + 2, 40000), block) * block])
        new = rng.randint(1, 9)
        lookahead = rng.choice([0, 0, new - 1, rng.randint(0, 8)])
        edge = cdiv(length, block) * block - new  # the last committed length whose step fits the row
        computed = rng.choice([edge + rng.randint(-2, 2), edge + rng.randint(-2, 2), rng.randint(0, length - 2)])
        found.append({"max_model_len": length, "block_size": block, "computed": max(0, min(computed, length - 2)),
                      "new_tokens": new, "lookahead": lookahead})
    return found


def step_states(count: int, seed: int = 0) -> list[dict[str, int]]:
    """Seeded states ``(max_model_len, block_size, k, computed)`` over ``STEP_CONFIGS``
    configurations: three in four within ``k + 2`` tokens of the request's last step."""
    rng = random.Random(f"{seed}:{STEP}")
    configs = [(rng.randint(64, 8192), rng.choice([16, 16, 32, 64]), rng.randint(1, 7)) for _ in range(STEP_CONFIGS)]
    found = []
    for index in range(count):
        length, block, k = configs[index % STEP_CONFIGS]
        near = length - 1 - rng.randint(0, k + 2)
        computed = rng.choice([near, near, near, rng.randint(1, length - 1)])
        found.append({"max_model_len": length, "block_size": block, "k": k, "computed": max(1, computed)})
    return found


def _step_model(cap: str, facts: dict[str, Any], state: dict[str, int]) -> dict[str, Any]:
    """The step ``cap``'s scheduler gives, and the KV cache manager's assertion where the step's
    blocks are past a full row (the learned slots policy: 0.8.2's drafts meet it)."""
    length, computed = state["max_model_len"], state["computed"]
    step = v1.decode_step(cap, length, computed, state["k"])
    if step.get("scheduled") and facts["slots"].get("value") in v1.SLOTS:
        got = v1.allocation(str(facts["slots"]["value"]), int(facts["preallocate_tokens"]["value"] or 0), length,
                            state["block_size"], computed, int(step["scheduled"]), 0)
        if "error" in got:
            return got
    return step


def _steps(session: Session, chosen: Sequence[dict[str, int]]) -> list[Any]:
    return vllm_session.ask_all(session, STEP_TASK, "states", chosen)


def step_row(session: Session, facts: dict[str, Any], count: int, seed: int = 0) -> dict[str, Any]:
    """The learned cap's model against the engine's scheduler on ``count`` states."""
    return learn_apart.form_row(facts["scheduler_cap"], STEP, step_states(count, seed + 1),
                                lambda chosen: _steps(session, chosen), lambda cap, s: _step_model(cap, facts, s))


def _scheduler_cap(session: Session, facts: dict[str, Any], line: dict[str, Any]) -> dict[str, Any]:
    """The measured cap (``facts``: the slots policy measured before it), with the statement read
    beside it (``line``) where the release has one."""
    chosen = step_states(48)
    fact = learn_apart.name_form(
        chosen, _steps(session, chosen),
        {cap: (lambda s, cap=cap: _step_model(cap, facts, s)) for cap in v1.CAPS},  # type: ignore[misc]
        function=STEP, found="vllm.v1.core.sched.scheduler.Scheduler.schedule",
        searched="vllm.v1.core.sched.scheduler.Scheduler.schedule", refused="the release does not run the configuration")
    fact["line"] = ({"text": line["found"], "source": line["source"]} if line.get("found")
                    else {"text": None, "searched": line.get("searched", "Scheduler.schedule")})
    return fact


def _model(policy: str, preallocate: int, state: dict[str, int]) -> dict[str, Any]:
    return v1.allocation(policy, preallocate, state["max_model_len"], state["block_size"], state["computed"],
                         state["new_tokens"], state["lookahead"])


def conformance_row(session: Session, facts: dict[str, Any], count: int, seed: int = 0) -> dict[str, Any]:
    """The learned policy's model against the engine's ``allocate_slots`` on ``count`` states."""
    policy, preallocate = facts["slots"].get("value"), int(facts["preallocate_tokens"]["value"] or 0)
    if policy is None:
        return vllm_session.skipped(FUNCTION, f"no policy agreed with the engine ({facts['slots'].get('finding')})")
    chosen = states(count, seed)
    engine = vllm_session.ask_all(session, "kv_slots", "states", chosen)
    return vllm_session.row(FUNCTION, ((s, e, _model(str(policy), preallocate, s)) for s, e in zip(chosen, engine)))


def preallocate_reason(parameter: object, preallocate: int, slots: dict[str, Any]) -> str:
    """What was read of ``KVCacheManager.__init__`` (``parameter``: whether it takes
    ``num_preallocate_tokens``; None: a locate of an older learner that did not say) and whether the
    slots measured with that many extra tokens agreed with the engine."""
    checked = (f"the slots measured with {preallocate} extra tokens agree with the engine ({slots['value']})"
               if slots.get("value") is not None else "no slots policy agreed with the engine, so it is unchecked")
    if parameter is None:
        raise ValueError("the locate answer does not say whether KVCacheManager takes num_preallocate_tokens")
    if parameter:
        return f"KVCacheManager.__init__ takes num_preallocate_tokens, default {preallocate}; {checked}"
    return f"KVCacheManager.__init__ takes no num_preallocate_tokens: no blocks beyond a step's own (0); {checked}"


def learn_facts(session: Session, located: dict[str, Any], say: Progress) -> dict[str, Any]:
    """The backend's three facts (``absent`` ones where the release has no v1 KV cache manager)."""
    found = located.get("kv_manager") or {}
    if not found.get("found"):
        searched = found.get("searched", "vllm.v1.core.kv_cache_manager")
        return {name: lr.absent_fact("the release has no v1 KV cache manager", searched)
                for name in ("slots", "preallocate_tokens", "scheduler_cap")}
    preallocate = int(found["preallocate_tokens"])
    chosen = states(80)
    engine = vllm_session.ask_all(session, "kv_slots", "states", chosen)
    results = {policy: vllm_session.row(policy, ((s, e, _model(policy, preallocate, s)) for s, e in zip(chosen, engine)))
               for policy in v1.SLOTS}
    slots = lr.name_candidate(results, function=found["found"], found=found["source"])
    facts = {"slots": slots,
             "preallocate_tokens": {"value": preallocate, "how": "read", "source": found["init_source"],
                                    "reason": preallocate_reason(found.get("preallocate_parameter"), preallocate, slots)}}
    facts["scheduler_cap"] = _scheduler_cap(session, facts, found["scheduler_cap"])
    cap = facts["scheduler_cap"]
    say(f"kv slots: {slots['value'] or slots.get('finding')}; "
        f"scheduler cap: {cap['value'] or cap.get('finding') or cap.get('reason')}")
    return facts


def section(session: Session, located: dict[str, Any], count: int, say: Progress) -> dict[str, Any]:
    facts = learn_facts(session, located, say)
    rows = [conformance_row(session, facts, count)] if facts["slots"]["how"] == "measured" else []
    rows += [step_row(session, facts, count)] if facts["scheduler_cap"]["how"] == "measured" else []
    return learn_apart.section_content(LEARNER, v1.NAME, facts, rows, say)


def learn(engine: str, *, progress: Progress, root: Path, count: int = 200) -> Path | None:
    """Section ``kv`` of ``engine``'s learned file (None: already learned from this wheel)."""
    return learn_apart.learn_section(engine, "kv", LEARNER,
                                     lambda session, located, say: section(session, located, count, say),
                                     progress=progress, root=root)
