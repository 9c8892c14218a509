"""The request-table row of conformance: SGLang's decode preparation writing its reservation into
``req_to_token``, engine against ``backends/sglang/req_to_token.py``.

The engine's side is ``reqtable_calls.py`` (``ScheduleBatch.prepare_for_decode`` on the engine's own
pool, allocator and batch, the Triton writer interpreted); the model's side replays the version's
reservation rule (``data/engines.json``, backend ``sglang-req-to-token``) on the same table. Both
start from the same table (every entry a distinct negative marker, so any store shows) and the same
allocator free list, and compare the whole table after the step, spare rows past the pool included,
and each request's allocated length.

States (page size 1, where the release's writer runs unchecked): the issue's recipes at ctx 32768
first (NGRAM 16, EAGLE (5, 4, 8) at their first failing length, one below and at the longest prompt
the scheduler admits, ``ctx - 7``; EAGLE (3, 1, 4) at the scheduler's reach), then seeded ones:
EAGLE chains and trees and NGRAM, contexts 64 .. 4096, 1-4 requests on shuffled pool rows with free
rows between, two thirds of them at the first failing length (-3 .. +2), allocated lengths either
just prefilled (allocated = committed) or the previous step's reservation.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Iterator, Mapping
from functools import partial
from types import ModuleType
from typing import Any

import torch

from workbench.backends.sglang import req_to_token as model
from workbench.engines.checking.answers import Answer, catching, ok, tensor
from workbench.engines.checking.states import State, geometry_of
from workbench.engines.sglang import reqtable_calls as ec
from workbench.model.geometry import cdiv

FUNCTION = "ScheduleBatch.prepare_for_decode[req_to_token]"
FUNCTIONS = (FUNCTION,)
MODULES = tuple(ec.MODULE_PATHS)
BACKEND = model.NAME

Pair = tuple[State, Any, Any]

# (algorithm, steps, topk, D): the recipes (NGRAM: topk is the BFS breadth, steps D // topk),
# and an EAGLE chain of 16 drafts (the recipe a release whose spec v2 takes topk 1 only can run)
NAMED = (("NGRAM", 1, 10, 16), ("EAGLE", 5, 4, 8), ("EAGLE", 3, 1, 4), ("EAGLE", 15, 1, 16))


def entry_of(behaviour: Mapping[str, Any]) -> dict[str, Any]:
    """The version's ``sglang-req-to-token`` entry: rule, check, and the launches that take the path
    (``algorithms``; ``topk_max`` where spec v2 refuses wider trees)."""
    fields = behaviour.get("backends", {}).get(BACKEND, {})
    entry = fields.get("reservation")
    if not isinstance(entry, dict):
        raise LookupError(f"this version's entry in data/engines.json names no {BACKEND} reservation")
    return entry


def takes_path(entry: Mapping[str, Any], algorithm: str, topk: int) -> bool:
    """Whether a launch with this recipe runs the reservation in the version (the others never reach it:
    the engine refuses them at start-up or runs them on spec v1)."""
    top = entry.get("topk_max")
    return algorithm in entry.get("algorithms", ()) and (top is None or topk <= int(top))


# ---- the starting point both sides share ------------------------------------------------------


def initial_table(state: State) -> torch.Tensor:
    """The flat table: every entry ``-(index + 1)``, which no store writes (slots are positive)."""
    return -(torch.arange(state["table_entries"], dtype=torch.int32) + 1)


def free_pages(state: State) -> list[int]:
    """The allocator's free slots in the order it hands them out: a seeded shuffle of 1 .. kv_slots."""
    gen = torch.Generator().manual_seed(int(state["free_seed"]))
    return (torch.randperm(int(state["kv_slots"]), generator=gen) + 1).tolist()  # type: ignore[no-any-return]


def _shape(algorithm: str, steps: int, topk: int, d: int) -> dict[str, Any]:
    return {"algorithm": algorithm, "spec_steps": steps, "spec_topk": topk, "draft_tokens": d,
            "draft_has_kv": algorithm != "NGRAM"}


def _recipe(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(("chain", "tree", "ngram"))
    if kind == "chain":
        steps = rng.randint(1, 15)
        return _shape("EAGLE", steps, 1, steps + 1)
    if kind == "tree":
        return _shape("EAGLE", rng.randint(1, 6), rng.randint(2, 8), rng.randint(2, 16))
    topk, d = rng.randint(1, 10), rng.randint(2, 16)
    return _shape("NGRAM", max(1, d // topk), topk, d)


def _finish(rng: random.Random, state: State, committed: list[int], fresh: list[bool], rule: str,
            rows: list[int] | None = None) -> State:
    """Rows (given, or shuffled over a pool with up to two free rows), allocated lengths, the table's
    size and the free list, for the batch's committed lengths."""
    g = geometry_of(state)
    width, r = g.request_table_width, model.reserve(g)
    bs = len(committed)
    pool_rows = max(rows) if rows else bs + rng.randint(0, 2)
    rows = rows or rng.sample(range(1, pool_rows + 1), bs)
    allocated = []
    for c, new in zip(committed, fresh):
        if new:
            allocated.append(c)
        else:  # the previous step's reservation, a few accepted tokens ago
            before = max(1, c - rng.randint(1, max(1, g.draft_tokens)))
            allocated.append(min(model.RULES[rule].next_len(g, before, before), c + r))
    nxt = model.next_lens(g, rule, committed, allocated)
    spare = cdiv(max(0, max(nxt) - width), width) + 1
    state = {**state, "width": width, "pool_rows": pool_rows, "rows": rows, "committed": committed,
             "allocated": allocated, "input_lens": [min(c, 64) for c in committed],
             "table_entries": (pool_rows + 1 + spare) * width}
    needed = sum(max(0, n - a) for n, a in zip(nxt, allocated))
    return {**state, "kv_slots": needed + rng.randint(0, 64), "free_seed": rng.randrange(1 << 30)}


def states(rng: random.Random, count: int, entry: Mapping[str, Any], width_gen: str = "g1") -> Iterator[State]:
    """The named recipes at ctx 32768 (the long request in pool row 1, its neighbour in row 2; and the
    long request in the last row, where its spill passes the pool), then ``count`` seeded states."""
    rule = str(entry["rule"])
    for algorithm, steps, topk, d in NAMED:
        if not takes_path(entry, algorithm, topk):
            continue
        base = {"context_len": 32768, "page_size": 1, "max_bs": 1, "width_gen": width_gen, **_shape(algorithm, steps, topk, d)}
        g = geometry_of(base)
        first = model.first_failure(g, rule)
        lens = [first - 1, first, 32768 - 7] if first is not None and first < 32768 - 4 else [32764]
        for c in lens:
            for rows in ([1, 2], [2, 1]):
                where = "row 1 before its neighbour" if rows == [1, 2] else "the last pool row"
                yield {**_finish(rng, base, [c, 100], [True, True], rule, rows),
                       "seed": f"{algorithm} ({steps}, {topk}, {d}) at {c}, {where}"}
    made = 0
    while made < count:
        base = {"context_len": rng.randint(64, 4096), "page_size": 1, "max_bs": 1, "width_gen": width_gen, **_recipe(rng)}
        if not takes_path(entry, base["algorithm"], base["spec_topk"]):
            continue
        i, made = made, made + 1
        g = geometry_of(base)
        first = model.first_failure(g, rule)
        bs = rng.randint(1, 4)
        top = g.request_table_width - 1
        if first is not None and i % 3:
            committed = [max(1, min(top, first + rng.randint(-3, 2))) for _ in range(bs)]
        else:
            committed = [rng.randint(1, top) for _ in range(bs)]
        yield _finish(rng, base, committed, [rng.random() < 0.5 for _ in range(bs)], rule)


# ---- the model's side ---------------------------------------------------------------------------


def model_reservation(state: State, rule: str, check: str) -> Answer:
    g = geometry_of(state)
    table = initial_table(state)
    slots = torch.tensor(free_pages(state), dtype=torch.int32)

    def run() -> Answer:
        done = model.replay(g, rule, check, table, state["pool_rows"] + 1, state["rows"], state["committed"],
                            state["allocated"], slots)
        return ok(table=tensor(table), allocated=done.allocated)
    return catching(run)


# ---- the engine's side, with its width ------------------------------------------------------------


def engine_reservation(m: Mapping[str, ModuleType], state: State) -> Answer:
    """The engine's step on the state's table, after its own width is checked against the state's."""
    extra = ec.width_extra(m, state)
    if extra is not None and state["context_len"] + extra != state["width"]:
        return ok(width=state["context_len"] + extra)  # the model's answer has no such field: a disagreement
    return ec.engine_reservation(m, state, initial_table(state), free_pages(state))


def optional_modules() -> dict[str, ModuleType]:
    """The modules some releases lack: NGRAM's verify input, and the width function, looked for by
    name where the releases keep it (``allocation_sizing`` from 0.5.16, ``common`` in 0.5.14; none
    before: the width is then the one the version data reads)."""
    found = {}
    for key, paths in ec.OPTIONAL_PATHS.items():
        for path in paths:
            try:
                module = importlib.import_module(path)
            except ImportError:
                continue
            if key != "sizing" or hasattr(module, "get_req_to_token_extra_context_len"):
                found[key] = module
                break
    return found


def pairs(function: str, m: Mapping[str, ModuleType], behaviour: Mapping[str, Any], rng: random.Random,
          count: int) -> Iterator[Pair]:
    entry = entry_of(behaviour)
    rule, check = str(entry["rule"]), str(entry["check"])
    modules = {**m, **optional_modules()}
    for state in states(rng, count, entry, str(behaviour.get("width_gen", "g1"))):
        yield state, partial(engine_reservation, modules, state), partial(model_reservation, state, rule, check)
