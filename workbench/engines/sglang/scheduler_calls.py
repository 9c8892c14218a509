"""The engine's side of the scheduler rows: SGLang's own request-length functions (worker only).

Three of the scheduler's functions decide how long a request gets, and each runs on a CPU:

* ``Scheduler.init_req_max_new_tokens``: clips a request's ``max_new_tokens`` to
  ``max_req_len - input_len - 1`` (and, from 0.5.14, to what an empty KV pool holds);
* ``Req.update_finish_state`` (``Req.check_finished`` before 0.5.14): a request is finished once it
  has ``max_new_tokens`` outputs;
* ``Scheduler._reqs_finishing_inflight`` (0.5.22 on): the overlap loop leaves out of the next batch
  a request whose in-flight result commits its last output (``Req.next_output_finishes_by_length``).

They are called on the engine's own ``Req`` (with its own ``SamplingParams``) and on a
``Scheduler`` made with ``object.__new__`` holding the attributes these methods read. ``max_req_len``
itself is computed inside ``TpModelWorker`` once the model and its pools exist on a device, so it is
given here as read: ``min(context_len - 1, pool_tokens - 1)`` (0.5.23 ``tp_worker.py:568-571``).

``longest_step`` drives one request through a loop order (``normal``: each batch's result is
processed before the next batch is formed, ``event_loop_normal``; ``overlap``: the next batch is
formed while one is in flight, ``event_loop_overlap``) and returns the largest committed length a
batch runs at, over every sequence of accept lengths up to ``max_accept``. Which batches the request
is in, and when it finishes, is decided by the engine's functions above; the loop order and the
committed length a batch runs at are the driver's, as read in the engine:

    speculative batch (verify, and the drafter's steps): s = input_len + outputs - 1
    decode batch:                                         s = input_len + outputs
    (outputs: those processed, plus those of the batch in flight, which the device already holds)
    a batch's reservation (``measure: reserved``):        s = input_len + max(processed, 1) - 1
    (``kv_committed_len`` when the batch is formed: results not yet processed are not in it)

Worked example (0.5.23, overlap, NGRAM 16, ctx 32768): an input of 32700 tokens gets
``max_new_tokens = 32767 - 32700 - 1 = 66``; with 64 outputs processed the request still runs
(64 + 1 < 66), and with a verify in flight that accepts 16 it runs at 32700 + 64 + 16 - 1 = 32779.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable, Mapping
from types import MethodType, ModuleType, SimpleNamespace
from typing import Any

from workbench.engines.checking.answers import Answer, Moved, catching, ok
from workbench.engines.checking.states import State

MODULE_PATHS = {
    "schedule_batch": "sglang.srt.managers.schedule_batch",
    "scheduler": "sglang.srt.managers.scheduler",
    "sampling_params": "sglang.srt.sampling.sampling_params",
}
TOKEN = 7  # an output token id that is no stop token, inside every vocabulary
VOCAB = 32000
# What ``SamplingParams.normalize`` asks of a tokenizer (stop strings' lengths); none are given.
TOKENIZER = SimpleNamespace(encode=lambda text, add_special_tokens=False: [TOKEN] * len(text))


def max_req_len(state: State) -> int:
    """``min(context_len - 1, pool_tokens - 1)``, as ``TpModelWorker`` computes it (read)."""
    pool = state.get("pool_tokens")
    ctx = int(state["context_len"])
    return ctx - 1 if pool is None else min(ctx - 1, int(pool) - 1)


def new_req(m: Mapping[str, ModuleType], input_len: int, max_new_tokens: int | None) -> Any:
    """The engine's ``Req`` for a prompt of ``input_len`` tokens, with no stop condition but length."""
    params = m["sampling_params"].SamplingParams(max_new_tokens=max_new_tokens)
    params.normalize(TOKENIZER)  # as the tokenizer manager does before the scheduler sees a request
    req_class = m["schedule_batch"].Req
    extra = {"vocab_size": VOCAB} if "vocab_size" in inspect.signature(req_class.__init__).parameters else {}
    return req_class("r0", "", [TOKEN] * input_len, params, **extra)


def _allocator_base(m: Mapping[str, ModuleType]) -> Any:
    """The engine's base KV allocator class, where its module has one (0.5.21 on clips by memory)."""
    from importlib import import_module

    try:
        module = import_module("sglang.srt.mem_cache.allocator.base")
    except ImportError:
        return None
    return getattr(module, "BaseTokenToKVPoolAllocator", None)


def scheduler(m: Mapping[str, ModuleType], state: State) -> Any:
    """A ``Scheduler`` holding only what the request-length methods read."""
    made = object.__new__(m["scheduler"].Scheduler)
    pool = state.get("pool_tokens")
    made.max_req_len = max_req_len(state)
    made.max_new_tokens_limit = None
    made.max_total_num_tokens = pool if pool is not None else 1 << 40
    made.kv_shard_widening = 1
    made.page_size = state["page_size"]
    made.sliding_window_size = None
    made.chunked_prefill_size = 8192
    base = _allocator_base(m)
    if base is not None and hasattr(base, "max_new_tokens_for_memory"):
        # The class is abstract: its own method is bound to a holder of what it reads.
        allocator = SimpleNamespace(page_size=state["page_size"])
        allocator.max_new_tokens_for_memory = MethodType(base.max_new_tokens_for_memory, allocator)
        made.token_to_kv_pool_allocator = allocator
    made.server_args = SimpleNamespace(dcp_size=1)  # 0.5.17 reads the DCP width in the memory clip: off
    made.enable_skip_finishing_decode = True
    made.result_queue = deque()
    return made


def clipped_req(m: Mapping[str, ModuleType], state: State) -> Any:
    req = new_req(m, state["input_len"], state.get("requested"))
    m["scheduler"].Scheduler.init_req_max_new_tokens(scheduler(m, state), req)
    return req


def _finish(req: Any) -> Callable[[int], None]:
    """The release's length-finish check, called after ``accepted`` tokens were appended."""
    check = getattr(req, "update_finish_state", None) or req.check_finished
    if inspect.signature(check).parameters:
        return lambda accepted: check(accepted)  # type: ignore[no-any-return]
    return lambda accepted: check()  # type: ignore[no-any-return]  # up to 0.5.3: one token a step


def finishes(m: Mapping[str, ModuleType], max_new_tokens: int, outputs: int, accepted: int) -> bool:
    """Whether a request with ``outputs`` outputs is finished once ``accepted`` more are appended."""
    req = new_req(m, 8, max_new_tokens)
    req.output_ids.extend([TOKEN] * outputs)
    req.output_ids.extend([TOKEN] * accepted)
    _finish(req)(accepted)
    return bool(req.finished())


def skipped_in_flight(m: Mapping[str, ModuleType], max_new_tokens: int, outputs: int, in_flight: bool) -> bool:
    """Whether the overlap loop leaves the request out of the next batch (0.5.22 on)."""
    if not hasattr(m["scheduler"].Scheduler, "_reqs_finishing_inflight"):
        raise Moved("Scheduler._reqs_finishing_inflight: not in this release")
    req = new_req(m, 8, max_new_tokens)
    req.output_ids.extend([TOKEN] * outputs)
    made = scheduler(m, {"context_len": 1 << 20, "page_size": 1})
    batch = SimpleNamespace(reqs=[req])
    queued = SimpleNamespace(reqs=[req] if in_flight else [])
    made.result_queue = deque([(queued, None)])
    return req in m["scheduler"].Scheduler._reqs_finishing_inflight(made, batch)


# ---- answers --------------------------------------------------------------------------------


def engine_clip(m: Mapping[str, ModuleType], state: State) -> Answer:
    def run() -> Answer:
        req = clipped_req(m, state)
        return ok(max_new_tokens=int(req.sampling_params.max_new_tokens), aborted=bool(req.finished()))
    return catching(run)


def engine_finish(m: Mapping[str, ModuleType], state: State) -> Answer:
    return catching(lambda: ok(finished=finishes(m, state["max_new_tokens"], state["outputs"], state["accepted"])))


def engine_skip(m: Mapping[str, ModuleType], state: State) -> Answer:
    return catching(lambda: ok(skipped=skipped_in_flight(m, state["max_new_tokens"], state["outputs"], True)))


def engine_longest_step(m: Mapping[str, ModuleType], state: State) -> Answer:
    return catching(lambda: ok(largest_committed=longest_step(m, state)))


# ---- the loop orders ------------------------------------------------------------------------


def longest_step(m: Mapping[str, ModuleType], state: State) -> int | None:
    """The largest committed length a batch carrying the request runs at (None: no batch does)."""
    req = clipped_req(m, state)
    budget = int(req.sampling_params.max_new_tokens)
    if req.finished():
        return None
    skips = state["order"] == "overlap" and hasattr(m["scheduler"].Scheduler, "_reqs_finishing_inflight")
    reserved = state.get("measure") == "reserved"
    finished = _memo(lambda o, a: finishes(m, budget, o, a))
    skipped = _memo(lambda o, a: skipped_in_flight(m, budget, o, a > 0))
    offset = state["input_len"] - (1 if state["speculative"] else 0)
    accepts = range(1, state["max_accept"] + 1)
    # A node: (outputs processed, outputs of the request in the batch in flight; 0: none in flight).
    start = (0, 1) if state["order"] == "overlap" else (1, 0)  # overlap: the prefill still in flight
    if state["order"] == "normal" and finished(0, 1):
        return None
    seen, todo, best = {start}, [start], None
    while todo:
        outputs, in_flight = todo.pop()
        runs = not (skips and skipped(outputs, in_flight))
        if runs:
            # ``reserved``: the committed length the batch is formed at (its reservation's start): the
            # processed outputs only, the prefill's token counted at once (allocation.py sets it there)
            step = offset + max(outputs, 1) if reserved else offset + outputs + in_flight
            best = step if best is None else max(best, step)
        done = in_flight > 0 and finished(outputs, in_flight)
        if done or (not runs and in_flight == 0):
            continue
        after = outputs + in_flight
        nxt = [(after, a) for a in accepts] if state["order"] == "overlap" and runs else [(after, 0)]
        if state["order"] == "normal":
            nxt = [(outputs + a, 0) for a in accepts if not finished(outputs, a)]
        for node in nxt:
            if node not in seen:
                seen.add(node)
                todo.append(node)
    return best


def _memo(function: Callable[[int, int], bool]) -> Callable[[int, int], bool]:
    cache: dict[tuple[int, int], bool] = {}

    def call(outputs: int, accepted: int) -> bool:
        key = (outputs, accepted)
        if key not in cache:
            cache[key] = function(outputs, accepted)
        return cache[key]
    return call
