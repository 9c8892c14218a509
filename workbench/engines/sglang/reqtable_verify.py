"""Does a real SGLang run write past a request-table row? The release's own code answers, release by release.

    python -m workbench.engines.sglang.reqtable_verify sglang==0.5.23 [sglang==0.5.10 ...] [--json]

For each release a worker process loads the engine's modules (``standins.py``, Triton interpreted;
a release whose modules import only with the cache's torchvision gets it on a second try) and, at
context 32768 and page size 1, for the recipes NGRAM 16 (topk 10), EAGLE (5, 4, 8), EAGLE (3, 1, 4)
and an EAGLE chain of 16 drafts:

* the scheduler's admission: ``validate_input_length`` on prompts of ``ctx - 7`` and ``ctx - 6``
  tokens against ``max_req_input_len = max_req_len - 5`` (``max_req_len = ctx - 1`` is read:
  ``tp_worker.py``), and ``Scheduler.init_req_max_new_tokens`` on the admitted one;
* the decode batch the scheduler forms right after that prompt's prefill (committed = allocated =
  the prompt) next to a short request, built on the engine's own objects (``reqtable_calls.py``):
  ``ScheduleBatch.check_decode_mem`` (the allocator's capacity gate, where it runs on these objects),
  then ``ScheduleBatch.prepare_for_decode``;
* the engine's own first spilling length: one batch holding a request at every committed length
  from ``ctx - 48`` up, one to a pool row, run in one step; the first whose reservation stores outside
  its own row (each store attributed by the slot it wrote).

It prints, per recipe, the row width, the engine's reservation, that first length, and at the
longest admitted prompt how many entries landed in the neighbour's row (and past the pool from the
last row). Nothing here is the workbench's model: ``tests/test_req_to_token.py`` compares the model
with these numbers.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from workbench.engines.sglang import reqtable_calls as ec
from workbench.engines.store import wheels

CONTEXT = 32768
RECIPES = (("NGRAM", 1, 10, 16), ("EAGLE", 5, 4, 8), ("EAGLE", 3, 1, 4), ("EAGLE", 15, 1, 16))
SCAN_FROM = 48  # committed lengths scanned from ctx - 48


def _state(recipe: tuple[str, int, int, int], width: int, committed: list[int], rows: list[int]) -> dict[str, Any]:
    algorithm, steps, topk, d = recipe
    pool_rows = max(rows)
    return {"algorithm": algorithm, "spec_steps": steps, "spec_topk": topk, "draft_tokens": d, "page_size": 1,
            "context_len": CONTEXT, "width": width, "pool_rows": pool_rows, "rows": rows, "committed": committed,
            "allocated": list(committed), "input_lens": [min(c, 64) for c in committed], "kv_slots": 8192,
            "free_pages": list(range(1, 8193))}


def _step(m: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """One decode preparation on the engine's objects: the allocator's gate, each request's allocated
    length after, and per request the stores outside its own row (row, column, value), attributed by
    the slot written (the allocator hands each request a consecutive run of the free list, in order)."""
    width, pool_rows = state["width"], state["pool_rows"]
    backing = -(torch.arange((pool_rows + 3) * width, dtype=torch.int32) + 1)
    before = backing.clone()
    batch = ec.build_batch(m, state, width, backing)
    gate: object
    try:
        gate = bool(batch.check_decode_mem())
    except Exception as error:  # noqa: BLE001 - reported, not assumed
        gate = f"did not run here: {type(error).__name__}: {error}"
    m["schedule_batch"].ScheduleBatch.prepare_for_decode(batch)
    allocated = [ec.allocated_len(r) for r in batch.reqs]
    own: set[int] = set()
    offset = 0
    for row, a, n in zip(state["rows"], state["allocated"], allocated):
        own.update(range(row * width + a, row * width + min(n, width)))
        offset += max(0, n - a)
    free_at = {slot: i for i, slot in enumerate(state["free_pages"][:offset])}
    starts = [sum(max(0, n - a) for n, a in zip(allocated[:i], state["allocated"][:i])) for i in range(len(allocated))]
    outside: list[list[tuple[int, int, int]]] = [[] for _ in allocated]
    for i in (int(x) for x in (backing != before).nonzero().flatten()):
        if i in own:
            continue
        value = int(backing[i])
        position = free_at.get(value)
        writer = max((k for k, start in enumerate(starts) if position is not None and start <= position), default=-1)
        outside[writer].append((i // width, i % width, value))
    return {"gate": gate, "allocated": allocated, "outside": outside}


def _admission(m: dict[str, Any]) -> dict[str, Any]:
    from workbench.engines.sglang import scheduler_calls

    ec.install_launch(_state(RECIPES[0], 0, [1], [1]))  # what the clipping reads of the launch (0.5.20: DCP)
    utils = importlib.import_module("sglang.srt.managers.utils")
    max_req_input_len = (CONTEXT - 1) - 5
    out: dict[str, Any] = {"max_req_input_len": max_req_input_len}
    for prompt in (CONTEXT - 7, CONTEXT - 6):
        req = ec.new_req(m, 0, prompt)
        error = utils.validate_input_length(req, max_req_input_len, False)
        out[f"prompt {prompt}"] = "admitted" if error is None else f"refused: {error}"
    clipped = scheduler_calls.clipped_req(m, {"context_len": CONTEXT, "pool_tokens": None, "page_size": 1,
                                              "input_len": CONTEXT - 7})
    out["max_new_tokens"] = int(clipped.sampling_params.max_new_tokens)
    return out


def _recipe(m: dict[str, Any], recipe: tuple[str, int, int, int]) -> dict[str, Any]:
    try:
        return _run_recipe(m, recipe)
    except Exception as error:  # noqa: BLE001 - a release that refuses the recipe says so
        return {"recipe": "{} ({}, {}, {})".format(*recipe), "raised": f"{type(error).__name__}: {error}"[:300]}


def _run_recipe(m: dict[str, Any], recipe: tuple[str, int, int, int]) -> dict[str, Any]:
    algorithm, steps, topk, d = recipe
    probe = _state(recipe, 0, [1], [1])
    extra = ec.width_extra(m, probe)
    width = CONTEXT + (extra if extra is not None else 4 + d)  # 4 + D: _init_pools inline (read) before 0.5.14
    out: dict[str, Any] = {"recipe": f"{algorithm} ({steps}, {topk}, {d})", "width": width,
                           "width_from": "get_req_to_token_extra_context_len" if extra is not None else "read: 4 + D"}
    # Every committed length from ctx - 48 on, one request a row, in one step: a spill lands in the next
    # row's first columns, which its own request (far right in its row) never writes.
    lens = list(range(CONTEXT - SCAN_FROM, CONTEXT - 3))
    scan = _step(m, _state(recipe, width, lens, list(range(1, len(lens) + 1))))
    out["reservation"] = scan["allocated"][0] - lens[0]
    out["engine_first_spill"] = next((c for c, cells in zip(lens, scan["outside"]) if cells), None)
    out["clean_below_first"] = all(not cells for c, cells in zip(lens, scan["outside"])
                                   if out["engine_first_spill"] is None or c < out["engine_first_spill"])
    at = CONTEXT - 7
    neighbour = _step(m, _state(recipe, width, [at, 100], [1, 2]))
    last_row = _step(m, _state(recipe, width, [at, 100], [2, 1]))
    out[f"at {at}, neighbour in row 2"] = {"gate": neighbour["gate"], "entries": len(neighbour["outside"][0]),
                                           "cells": neighbour["outside"][0][:4]}
    out[f"at {at}, in the last pool row"] = {"entries": len(last_row["outside"][0]), "cells": last_row["outside"][0][:4]}
    return out


def worker_main() -> int:
    job = json.loads(sys.stdin.read())
    import os

    os.environ.setdefault("TRITON_INTERPRET", "1")
    from workbench.engines.checking import checks
    from workbench.engines.sandbox import standins

    extra = [Path(p) for p in job["extra"]]
    standins.install(Path(job["package_dir"]), Path(job["deps"]), extra, real=["triton"], visible=job["visible"])
    m: dict[str, Any] = checks.import_modules(tuple(ec.MODULE_PATHS) + ("scheduler",), {})
    from workbench.engines.checking.reqtable_checks import optional_modules

    m.update(optional_modules())
    standins.strict()
    spec = importlib.import_module("sglang.srt.speculative.eagle_utils") if _has("eagle_utils") else None
    found = ("eagle_prepare_for_decode" if spec is not None and hasattr(spec, "eagle_prepare_for_decode")
             else "EagleDraftInputV2Mixin.prepare_for_decode" if _has("eagle_info_v2") else None)
    try:
        admission: dict[str, Any] = _admission(m)
    except Exception as error:  # noqa: BLE001 - the scheduler's set-up differs (0.5.17 reads server_args)
        admission = {"did not run": f"{type(error).__name__}: {error}"[:300]}
    print(json.dumps({"preparation": found, "admission": admission,
                      "recipes": [_recipe(m, r) for r in RECIPES]}))
    return 0


def _has(module: str) -> bool:
    try:
        importlib.import_module(f"sglang.srt.speculative.{module}")
    except ImportError:
        return False
    return True


def verify(engine: str) -> dict[str, Any]:
    """The release's answers (one JSON object), or ``{"error": ...}`` saying what stopped it."""
    install = wheels.fetch(engine)
    triton = wheels.fetch_triton()
    errors = []
    # without torchvision; with the cache's; with its metadata and a stand-in for its code (standins.install)
    for name, extra, visible in (("none", [str(triton)], []), ("cached", [str(triton), str(install.torchvision)], []),
                                 ("stand-in", [str(triton), str(install.torchvision)], ["torchvision"])):
        job = {"package_dir": str(install.package_dir), "deps": str(install.deps), "extra": extra, "visible": visible}
        done = subprocess.run([sys.executable, "-m", "workbench.engines.sglang.reqtable_verify", "--worker"],
                              input=json.dumps(job), capture_output=True, text=True, timeout=3600)
        if done.returncode == 0:
            return {"engine": engine, "torchvision": name, **json.loads(done.stdout.strip().splitlines()[-1])}
        errors.append(f"torchvision {name}: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return {"engine": engine, "error": "; ".join(errors)}


def show(result: dict[str, Any]) -> str:
    if "error" in result:
        return f"{result['engine']}: did not run: {result['error']}"
    lines = [f"{result['engine']}: decode preparation {result['preparation']} (torchvision: {result['torchvision']}); "
             f"admission {result['admission']}"]
    for r in result["recipes"]:
        if "raised" in r:
            lines.append(f"  {r['recipe']:<18} the preparation raised {r['raised']}")
            continue
        lines.append(f"  {r['recipe']:<18} W {r['width']} ({r['width_from']}), reserves committed + {r['reservation']}, "
                     f"first spill at {r['engine_first_spill']} (none below it: {r['clean_below_first']})")
        for key in (k for k in r if k.startswith("at ")):
            lines.append(f"    {key}: {r[key]}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        return worker_main()
    as_json = "--json" in argv
    for engine in [a for a in argv if a != "--json"]:
        result = verify(engine)
        print(json.dumps(result) if as_json else show(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
