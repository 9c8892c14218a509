"""The scheduler rows of conformance: request-length clipping, the length finish, the in-flight skip
and the longest step of a request through both loop orders, engine against the reach model.

The engine's side is ``scheduler_calls.py``; the model's side is ``workbench.analysis.reach`` with
the release's learned facts (``data/engines/sglang/<version>.json``, section ``reach``), which the
conformance parent passes in the job's behaviour (``reach_facts``). States are seeded per row:

* clipping: context 64 .. 1M, a pool absent or near the context, page sizes 1 .. 256, inputs up to
  what the scheduler admits (``max_req_len - 5``), a requested ``max_new_tokens`` or none;
* finish: ``max_new_tokens`` 0 .. 64, outputs and an accept length around it;
* skip: outputs around ``max_new_tokens - 1``;
* longest step: one request whose input leaves ``max_new_tokens`` 0 .. 3 * a_max + 4, decode or
  speculative with a_max 1 .. 16, each loop order; every sequence of accept lengths is walked;
* longest reservation (``[...,reserved]``): the same walk, speculative only, measuring the committed
  length a batch is formed at (what its request-table reservation starts from).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from functools import partial
from types import ModuleType
from typing import Any

from workbench.analysis import reach as model
from workbench.engines.checking.answers import Answer, catching, ok
from workbench.engines.checking.states import State
from workbench.engines.sglang import scheduler_calls as ec

FUNCTIONS = ("Scheduler.init_req_max_new_tokens", "Req.update_finish_state[length]",
             "Scheduler._reqs_finishing_inflight", "longest_step[normal]", "longest_step[overlap]",
             "longest_step[normal,reserved]", "longest_step[overlap,reserved]")
MODULES = ("schedule_batch", "scheduler", "sampling_params")
CONTEXTS = (64, 4096, 32768, 131072, 1048576)

Pair = tuple[State, Any, Any]


def facts_of(behaviour: Mapping[str, Any]) -> model.SchedulerFacts:
    section = behaviour.get("reach_facts")
    if not section:
        raise LookupError("no learned reach facts for this release (python -m workbench.engines.sglang.reach_learn writes them)")
    return model.parse_facts(str(behaviour.get("engine", "?")), section)


# ---- states -----------------------------------------------------------------------------------


def clip_states(rng: random.Random, count: int) -> Iterator[State]:
    for _ in range(count):
        ctx = rng.choice(CONTEXTS) if rng.random() < 0.3 else int(2 ** rng.uniform(6, 20))
        pool = None if rng.random() < 0.4 else max(2, ctx + rng.randint(-ctx // 2, ctx // 4))
        # Inputs the scheduler admits: shorter than max_req_input_len = max_req_len - 5 (tp_worker.py:572);
        # longer ones are aborted before clipping (0.5.10 would clip them to a negative count).
        top = max(1, (ctx if pool is None else min(ctx, pool)) - 1 - 5)
        state = {"context_len": ctx, "pool_tokens": pool, "page_size": rng.choice((1, 1, 16, 64, 128, 256)),
                 "input_len": rng.randint(1, top) if rng.random() < 0.5 else max(1, top - rng.randint(0, 300)),
                 "requested": None if rng.random() < 0.5 else rng.randint(1, 2 * ctx)}
        yield state


def finish_states(rng: random.Random, count: int) -> Iterator[State]:
    for _ in range(count):
        m = rng.randint(1, 64)
        a = rng.randint(1, 16)
        yield {"max_new_tokens": m, "accepted": a, "outputs": max(0, m - a + rng.randint(-3, 2))}


def skip_states(rng: random.Random, count: int) -> Iterator[State]:
    for _ in range(count):
        m = rng.randint(1, 64)
        yield {"max_new_tokens": m, "outputs": max(0, m - 1 + rng.randint(-3, 1))}


def loop_states(rng: random.Random, count: int, order: str, reserved: bool = False) -> Iterator[State]:
    """``reserved``: speculative states only, each measuring the committed length its batches are formed at."""
    for state in _loop_states(rng, count, order, speculative_only=reserved):
        if reserved and state["speculative"]:
            yield {**state, "measure": "reserved"}
        elif not reserved:
            yield state


def _loop_states(rng: random.Random, count: int, order: str, speculative_only: bool = False) -> Iterator[State]:
    """The issue's recipes at ctx 32768 first (NGRAM 16, EAGLE (5, 4, 8), EAGLE (3, 1, 4), decode),
    then seeded ones; every input leaves a small ``max_new_tokens``, so all accept sequences are walked."""
    named = [(32768, None, 16, True), (32768, None, 6, True), (32768, None, 4, True), (32768, None, 1, False)]
    for ctx, pool, accept, speculative in named:
        for room in (3, 4, 20):
            yield {"context_len": ctx, "pool_tokens": pool, "page_size": 1, "input_len": ctx - 2 - room,
                   "requested": None, "speculative": speculative, "max_accept": accept, "order": order}
    for _ in range(count):
        ctx = int(2 ** rng.uniform(7, 20))
        speculative = rng.random() < 0.75 or speculative_only
        accept = rng.randint(1, 16) if speculative else 1
        pool = None if rng.random() < 0.6 else ctx + rng.randint(-ctx // 4, 64)
        top = ctx if pool is None else min(ctx, pool)
        room = rng.randint(0, 3 * accept + 4)
        yield {"context_len": ctx, "pool_tokens": pool, "page_size": rng.choice((1, 1, 16, 64)),
               "input_len": max(1, top - 2 - room), "requested": None if rng.random() < 0.8 else rng.randint(1, 40),
               "speculative": speculative, "max_accept": accept, "order": order}


# ---- the model's side ---------------------------------------------------------------------------


def model_clip(facts: model.SchedulerFacts, state: State) -> Answer:
    m = model.clip(facts, state["context_len"], state.get("pool_tokens"), state["page_size"], state["input_len"],
                   state.get("requested"))
    return ok(max_new_tokens=m, aborted=False)


def model_finish(state: State) -> Answer:
    return ok(finished=state["outputs"] + state["accepted"] >= state["max_new_tokens"])


def model_skip(facts: model.SchedulerFacts, state: State) -> Answer:
    if not facts.inflight_skip:
        raise AssertionError("unreachable: the row is skipped where the release has no in-flight skip")
    return ok(skipped=state["outputs"] + 1 >= state["max_new_tokens"])


def model_longest(facts: model.SchedulerFacts, state: State) -> Answer:
    def run() -> Answer:
        m = model.clip(facts, state["context_len"], state.get("pool_tokens"), state["page_size"], state["input_len"],
                       state.get("requested"))
        if state.get("measure") == "reserved":
            return ok(largest_committed=model.longest_reservation(facts, input_len=state["input_len"], max_new_tokens=m,
                                                                  overlap=state["order"] == "overlap"))
        step = model.longest_step(facts, input_len=state["input_len"], max_new_tokens=m,
                                  speculative=state["speculative"], overlap=state["order"] == "overlap",
                                  max_accept=state["max_accept"])
        return ok(largest_committed=step)
    return catching(run)


# ---- the pairs ----------------------------------------------------------------------------------


def pairs(function: str, m: Mapping[str, ModuleType], behaviour: Mapping[str, Any], rng: random.Random,
          count: int) -> Iterator[Pair]:
    facts = facts_of(behaviour)
    if function == "Scheduler.init_req_max_new_tokens":
        for state in clip_states(rng, count):
            yield state, partial(ec.engine_clip, m, state), partial(model_clip, facts, state)
    elif function == "Req.update_finish_state[length]":
        for state in finish_states(rng, count):
            yield state, partial(ec.engine_finish, m, state), partial(model_finish, state)
    elif function == "Scheduler._reqs_finishing_inflight":
        if not hasattr(m["scheduler"].Scheduler, "_reqs_finishing_inflight"):
            raise LookupError("absent in this release: the overlap loop forms the next batch without it "
                              "(the learned fact inflight_skip is false)")
        for state in skip_states(rng, count):
            yield state, partial(ec.engine_skip, m, state), partial(model_skip, facts, state)
    else:
        order = "normal" if "[normal" in function else "overlap"
        for state in loop_states(rng, max(1, count // 10), order, reserved=function.endswith(",reserved]")):
            yield state, partial(ec.engine_longest_step, m, state), partial(model_longest, facts, state)
