"""The engine states conformance tries: seed cases, sweep boundaries, and seeded random states.

Every state is a plain dict (JSON-able, so a disagreement can be printed and replayed), built from
``random.Random(seed)`` alone: the same seed gives the same states on every machine and for every
engine version, so two versions are compared on exactly the same inputs.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from workbench.model.geometry import ServingGeometry, cdiv

State = dict[str, Any]

MODES = ("decode", "target-verify", "draft-decode", "draft-extend")
CONTEXTS = (4096, 8192, 32768, 65536, 90000, 131072, 202752, 1048576)  # docs/engine-facts.md#realistic-settings
PAGE_SIZES = (1, 2, 16, 64, 128, 256)


def _spec_shape(rng: random.Random) -> dict[str, Any]:
    """A speculative-decoding shape: off, EAGLE (topk 1 forces D = steps + 1, or a tree), NGRAM."""
    kind = rng.choice(("off", "eagle", "eagle-tree", "ngram"))
    if kind == "off":
        return {"algorithm": None, "draft_tokens": 0, "spec_steps": 1, "spec_topk": 1, "draft_has_kv": True}
    if kind == "eagle":
        steps = rng.randint(1, 7)
        return {"algorithm": "EAGLE", "draft_tokens": steps + 1, "spec_steps": steps, "spec_topk": 1,
                "draft_has_kv": True}
    if kind == "eagle-tree":
        return {"algorithm": "EAGLE", "draft_tokens": rng.randint(2, 16), "spec_steps": rng.randint(1, 6),
                "spec_topk": rng.randint(2, 8), "draft_has_kv": True}
    return {"algorithm": "NGRAM", "draft_tokens": rng.randint(2, 16), "spec_steps": 1,
            "spec_topk": rng.randint(1, 10), "draft_has_kv": False}


def _context(rng: random.Random, low: int = 64) -> int:
    if rng.random() < 0.3:
        return rng.choice(CONTEXTS)
    return int(2 ** rng.uniform(6, 20))  # log-uniform 64 .. 1M, so most states stay cheap


def geometry_of(state: State) -> ServingGeometry:
    return ServingGeometry(context_len=state["context_len"], page_size=state["page_size"],
                           draft_tokens=state["draft_tokens"], spec_steps=state["spec_steps"],
                           spec_topk=state["spec_topk"], draft_has_kv=state["draft_has_kv"],
                           max_bs=state["max_bs"], width_gen=state["width_gen"])


# ---- sizing ------------------------------------------------------------------------------

def sizing_states(rng: random.Random, count: int) -> Iterator[State]:
    """Speculation shapes over page sizes 1 .. 256, the worked cases of docs/semantics.md#width-generations first."""
    yield from (
        {"page_size": 64, "algorithm": "EAGLE", "draft_tokens": 6, "spec_steps": 5, "spec_topk": 1, "draft_has_kv": True},
        {"page_size": 128, "algorithm": "NGRAM", "draft_tokens": 16, "spec_steps": 1, "spec_topk": 10,
         "draft_has_kv": False},
        {"page_size": 64, "algorithm": "EAGLE", "draft_tokens": 8, "spec_steps": 5, "spec_topk": 4, "draft_has_kv": True},
    )
    for _ in range(count):
        yield {"page_size": rng.randint(1, 256) if rng.random() < 0.5 else rng.choice(PAGE_SIZES), **_spec_shape(rng)}


# ---- tables (Ascend block tables, DSA page table) -----------------------------------------

def table_state(rng: random.Random, *, modes: tuple[str, ...] = MODES, max_rows: int = 4) -> State:
    shape = _spec_shape(rng)
    while not shape["draft_tokens"] and "decode" not in modes:  # verify and draft modes need drafts
        shape = _spec_shape(rng)
    mode = rng.choice([m for m in modes if shape["draft_tokens"] or m == "decode"])
    ctx = _context(rng)
    state: State = {"context_len": ctx, "page_size": rng.choice(PAGE_SIZES), **shape,
                    "width_gen": rng.choice(("g1", "g2", "g3")), "mode": mode,
                    "step_id": rng.randrange(shape["spec_steps"]), "hybrid_swa": rng.random() < 0.3}
    bs = rng.randint(1, max_rows if ctx < 200_000 else 2)
    state["max_bs"] = bs + rng.randint(0, 2)
    state["seq_lens"] = [_near_end_len(rng, state) for _ in range(bs)]
    return state


def _near_end_len(rng: random.Random, state: State) -> int:
    """A committed length, most of them near the end of the table where widths matter."""
    g = geometry_of({**state, "max_bs": 1})
    top = g.max_committed_len(_mode(state["mode"]), state["step_id"])
    if rng.random() < 0.7:
        return max(1, top - rng.randint(0, 2 * g.page_size + g.draft_tokens + 4))
    return rng.randint(1, max(1, top))


def _mode(name: str) -> Any:
    from workbench.model.geometry import Mode

    return Mode.parse(name)


def boundary_states(state: State, first_failing: int) -> Iterator[State]:
    """The committed length at a boundary and one below, as one-request states."""
    for seq_len in (first_failing, first_failing - 1):
        if seq_len >= 1:
            yield {**state, "seq_lens": [seq_len], "max_bs": max(1, state.get("max_bs", 1))}


# ---- allocator ----------------------------------------------------------------------------

def decode_state(rng: random.Random) -> State:
    """A decode batch mid-run: consistent last_loc, a free list exactly fitting, short or ample.

    Page size 1 is left out: the engine's paged allocator is not the one it runs at page size 1,
    and its page test ``seq_len % ps == 1`` never holds there.
    """
    ps = rng.choice((2, 4, 16, 64, 128, 256)) if rng.random() < 0.7 else rng.randint(2, 256)
    bs = rng.randint(1, 16)
    seq_lens = [rng.choice((1, 2, rng.randint(1, 4 * ps))) + ps * rng.randint(0, 8) for _ in range(bs)]
    seq_lens = [s if s > 1 else 2 for s in seq_lens]
    pages = _page_pool(rng, bs * 10 + 16)
    last_loc, cursor = [], 0
    for s in seq_lens:  # the slot of token s - 2 (the last one before the new token)
        page = pages[cursor]
        cursor += 1
        last_loc.append(page * ps + (s - 2) % ps)
    need = sum(1 for s in seq_lens if s % ps == 1)
    free = pages[cursor:cursor + _pool_size(rng, need)]
    parked = pages[cursor + len(free):cursor + len(free) + rng.choice((0, 0, 1, need))]
    return {"page_size": ps, "seq_lens": seq_lens, "last_loc": last_loc, "free_pages": free,
            "parked_pages": parked}


def extend_state(rng: random.Random, *, min_new_pages: int = 0, short: bool = False, pow2: bool = False) -> State:
    """A prefill (or speculative verify) batch: prefix and new lengths, last_loc, a free list.

    ``pow2``: page sizes that are powers of two only. The CUDA allocator's Triton ``alloc_extend``
    kernel spans a page with ``tl.arange(0, page_size)``, which Triton allows for powers of two
    alone (at 255 it raises "arange's range must be a power of 2"), so other sizes are not states
    that allocator can be in.
    """
    if pow2:
        ps = 2 ** rng.randint(1, 8)
    elif min_new_pages:  # 200 pages and more: small pages, or a state would be 50k tokens
        ps = rng.choice((2, 4, 8, 16))
    else:
        ps = rng.choice((2, 4, 16, 64, 128, 256)) if rng.random() < 0.7 else rng.randint(2, 256)
    bs = rng.randint(1, 8)
    prefix = [rng.choice((0, rng.randint(0, 6 * ps))) for _ in range(bs)]
    extra = [rng.randint(0, 4 * ps) for _ in range(bs)]
    if min_new_pages or short:  # make the batch long enough to open that many pages (one at least)
        extra[0] += max(1, min_new_pages) * ps
    seq = [p + e for p, e in zip(prefix, extra)]
    need = sum(cdiv(s, ps) - cdiv(p, ps) for p, s in zip(prefix, seq))
    pages = _page_pool(rng, bs + need + 8)
    last_loc = [pages[i] * ps + (p - 1) % ps if p else -1 for i, p in enumerate(prefix)]
    free = pages[bs:bs + (rng.randint(0, need - 1) if short and need else _pool_size(rng, need))]
    parked = [] if short else pages[bs + len(free):bs + len(free) + rng.choice((0, 0, 1, need))]
    return {"page_size": ps, "prefix_lens": prefix, "seq_lens": seq, "last_loc": last_loc,
            "free_pages": free, "parked_pages": parked}


def _page_pool(rng: random.Random, count: int) -> list[int]:
    """Distinct page ids >= 1 in a shuffled order, as a free list looks after some frees."""
    pages = list(range(1, count + 1))
    rng.shuffle(pages)
    return pages


def _pool_size(rng: random.Random, need: int) -> int:
    """Exactly the pages needed, one short, or more: the exact fit is the interesting one."""
    return max(0, rng.choice((need, need, need - 1, need + 1, need + rng.randint(2, 8), 0)))


SEED_DECODE: State = {"page_size": 4, "seq_lens": [5, 10, 7], "last_loc": [11, 20, 29], "free_pages": [11],
                      "parked_pages": [], "seed": "exact-fit decode, ps 4 (the NPU allocator seed)"}  # the seed vector
# A prefill whose second request ends inside its prefix's partial page (prefix 9, seq 11, ps 4:
# two tokens on page 2, no page opened) after a first request opening 201 pages (the NPU
# allocator's torch path). Every release writes those two tokens after last_loc; 0.5.0rc2 to 0.5.6
# also write 11 % 4 = 3 slots of the first request's last new page over positions 799..801.
EXTEND_IN_PAGE: State = {"page_size": 4, "prefix_lens": [8, 9], "seq_lens": [810, 11], "last_loc": [7, 8],
                         "free_pages": list(range(3, 3 + 205)), "parked_pages": [],
                         "seed": "an extend ending inside its prefix's page, ps 4"}
