"""What a vLLM release's KV cache manager and scheduler do near ``max_model_len``: the facts of the
v1 block table backend (``backends/vllm_v1_block_table.py``), learned from the release's own code.

Section ``kv`` of ``data/engines/vllm/X.json``, with a learner of its own (``LEARNER``), so that
adding it did not mean learning every release's other sections again:

* ``slots`` (measured): the one candidate policy (``capped``, ``preallocated``) under which the
  model's ``allocation`` gives the blocks, or the assertion, that the release's own
  ``KVCacheManager.allocate_slots`` gives on every one of a set of seeded states, most of them at
  the row's last block;
* ``preallocate_tokens`` (read): the manager's ``num_preallocate_tokens`` default, which the
  scheduler does not pass (0 where the release has none); the measurement above checks it;
* ``scheduler_cap`` (read): the statement of ``Scheduler.schedule`` capping a running request's new
  tokens by ``max_model_len``, with its lines; absent (value None) where the release has none.

The section also holds the conformance row of ``allocate_slots`` (the model against the engine on
those states), which ``workbench conformance --engine vllm==X`` runs again.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.backends import vllm_v1_block_table as v1
from workbench.engines import conformance_vllm, learn_apart
from workbench.engines import learn_rules as lr
from workbench.engines.learn_session import Session
from workbench.model.geometry import cdiv

LEARNER = "vllm-kv 2"  # raise when what is learned or how changes
FUNCTION = "KVCacheManager.allocate_slots (a request's blocks)"
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


def _model(policy: str, preallocate: int, state: dict[str, int]) -> dict[str, Any]:
    return v1.allocation(policy, preallocate, state["max_model_len"], state["block_size"], state["computed"],
                         state["new_tokens"], state["lookahead"])


def conformance_row(session: Session, facts: dict[str, Any], count: int, seed: int = 0) -> dict[str, Any]:
    """The learned policy's model against the engine's ``allocate_slots`` on ``count`` states."""
    policy, preallocate = facts["slots"].get("value"), int(facts["preallocate_tokens"]["value"] or 0)
    if policy is None:
        return conformance_vllm.skipped(FUNCTION, f"no policy agreed with the engine ({facts['slots'].get('finding')})")
    chosen = states(count, seed)
    engine = conformance_vllm.ask_all(session, "kv_slots", "states", chosen)
    return conformance_vllm.row(FUNCTION, ((s, e, _model(str(policy), preallocate, s)) for s, e in zip(chosen, engine)))


def learn_facts(session: Session, located: dict[str, Any], say: Progress) -> dict[str, Any]:
    """The backend's three facts (``absent`` ones where the release has no v1 KV cache manager)."""
    found = located.get("kv_manager") or {}
    if not found.get("found"):
        searched = found.get("searched", "vllm.v1.core.kv_cache_manager")
        return {name: lr.absent_fact("the release has no v1 KV cache manager", searched)
                for name in ("slots", "preallocate_tokens", "scheduler_cap")}
    preallocate = int(found["preallocate_tokens"])
    chosen = states(80)
    engine = conformance_vllm.ask_all(session, "kv_slots", "states", chosen)
    results = {policy: conformance_vllm.row(policy, ((s, e, _model(policy, preallocate, s)) for s, e in zip(chosen, engine)))
               for policy in v1.SLOTS}
    slots = lr.name_candidate(results, function=found["found"], found=found["source"])
    cap = found["scheduler_cap"]
    scheduler = ({"value": cap["found"], "how": "read", "source": cap["source"],
                  "reason": "the scheduler steps only on a whole engine's outputs: its line is read"}
                 if cap.get("found") else lr.absent_fact("Scheduler.schedule caps no new tokens by max_model_len",
                                                         cap.get("searched", "Scheduler.schedule")))
    say(f"kv slots: {slots['value'] or slots.get('finding')}; scheduler cap: {cap.get('found') or 'none'}")
    return {"slots": slots, "scheduler_cap": scheduler,
            "preallocate_tokens": {"value": preallocate, "how": "read", "source": found["init_source"],
                                   "reason": "the default of num_preallocate_tokens, which the scheduler leaves as it is"}}


def section(session: Session, located: dict[str, Any], count: int, say: Progress) -> dict[str, Any]:
    facts = learn_facts(session, located, say)
    rows = [conformance_row(session, facts, count)] if facts["slots"]["how"] == "measured" else []
    for r in rows:
        say(f"conformance {r['function']}: {r['agree']} of {r['states']} agree")
    return {"learner": LEARNER, "backends": {v1.NAME: facts}, "conformance": rows}


def learn(engine: str, *, progress: Progress, root: Path, count: int = 200) -> Path | None:
    """Section ``kv`` of ``engine``'s learned file (None: already learned from this wheel)."""
    return learn_apart.learn_section(engine, "kv", LEARNER,
                                     lambda session, located, say: section(session, located, count, say),
                                     progress=progress, root=root)
