"""Learn a release's ``reach`` facts by running its own scheduler functions on the CPU.

    python -m workbench.engines.sglang.reach_learn sglang==0.5.23 [sglang==0.5.22 ...]

For each release the wheel is fetched into the workbench's cache (``wheels.fetch``), a worker
process of its own loads the engine's scheduler modules (as conformance does) and measures:

* ``clip_offset``: ``max_req_len - input_len - max_new_tokens`` after ``init_req_max_new_tokens``
  on states where the context bounds the request (one value, or the release is refused);
* ``memory_clip``: whether the same function also clips to an empty pool's room;
* ``finish_by_length``: ``Req.update_finish_state`` (``check_finished``) finishes exactly when
  outputs reach ``max_new_tokens``;
* ``inflight_skip``: ``_reqs_finishing_inflight`` leaves a request out exactly when one more output
  finishes it (absent before 0.5.22);
* ``max_accept``: the verify inputs' ``max_tree_depth`` (EAGLE ``spec_steps + 1``, NGRAM
  ``draft_token_num``) where the release has it.

What cannot run on a CPU (``max_req_len``, the overlap default, the speculative worker, older
releases' accept widths) comes from ``data/engines/reach_read.json``, read in the wheel with file
and line. Both go into the ``reach`` section of ``data/engines/sglang/<version>.json``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from workbench.engines.sglang import scheduler_calls
from workbench.engines.store import learned, wheels

READ_FACTS = Path(__file__).resolve().parents[3] / "data" / "engines" / "reach_read.json"
STATES = 200


def measure(modules: dict[str, Any]) -> dict[str, Any]:
    """The measured facts (worker process only: the engine's modules are loaded)."""
    scheduler = modules["scheduler"].Scheduler
    clip = "Scheduler.init_req_max_new_tokens"
    offsets, tried = set(), 0
    for ctx in (64, 4096, 32768, 131072):
        for input_len in range(1, ctx - 2, max(1, ctx // 40)):
            state = {"context_len": ctx, "pool_tokens": None, "page_size": 1, "input_len": input_len}
            req = scheduler_calls.clipped_req(modules, state)
            offsets.add(scheduler_calls.max_req_len(state) - input_len - int(req.sampling_params.max_new_tokens))
            tried += 1
    if len(offsets) != 1:
        raise RuntimeError(f"{clip}: max_req_len - input - max_new_tokens takes several values {sorted(offsets)}")
    offset = offsets.pop()
    clipped_by_pool = []
    for pool in range(200, 4200, 200):
        state = {"context_len": 1 << 20, "pool_tokens": pool, "page_size": 16, "input_len": 5}
        req = scheduler_calls.clipped_req(modules, state)
        clipped_by_pool.append(int(req.sampling_params.max_new_tokens) < pool - 1 - 5 - offset)
    facts: dict[str, Any] = {
        "clip_offset": {"value": offset, "how": "measured", "function": clip, "states": tried},
        "memory_clip": {"value": all(clipped_by_pool), "how": "measured", "function": clip,
                        "states": len(clipped_by_pool)},
    }
    finish_ok = all(scheduler_calls.finishes(modules, m, o, a) == (o + a >= m)
                    for m in range(1, 33) for o in range(0, 33) for a in (1, 2, 5))
    facts["finish_by_length"] = {"value": finish_ok, "how": "measured", "function": _finish_name(modules),
                                 "states": 32 * 33 * 3}
    facts["inflight_skip"] = _skip_fact(modules, scheduler)
    facts.update(_accept_fact(modules))
    return facts


def _finish_name(modules: dict[str, Any]) -> str:
    req = modules["schedule_batch"].Req
    return "Req.update_finish_state" if hasattr(req, "update_finish_state") else "Req.check_finished"


def _skip_fact(modules: dict[str, Any], scheduler: Any) -> dict[str, Any]:
    if not hasattr(scheduler, "_reqs_finishing_inflight"):
        return {"value": False, "how": "absent", "searched": "Scheduler._reqs_finishing_inflight",
                "reason": "no such method: the overlap loop forms the next batch of every unfinished request"}
    threshold_one = all(scheduler_calls.skipped_in_flight(modules, m, o, True) == (o + 1 >= m)
                        for m in range(1, 40) for o in range(0, 40))
    return {"value": threshold_one, "how": "measured", "function": "Scheduler._reqs_finishing_inflight",
            "states": 39 * 40}


def _accept_fact(modules: dict[str, Any]) -> dict[str, Any]:
    """``max_accept`` from the verify inputs' ``max_tree_depth`` where the release has it."""
    eagle = getattr(modules.get("eagle_info"), "EagleVerifyInput", None)
    ngram = getattr(modules.get("ngram_info"), "NgramVerifyInput", None)
    if eagle is None or ngram is None or not isinstance(getattr(eagle, "max_tree_depth", None), property):
        return {}
    eagle_ok = ngram_ok = True
    for n in range(1, 17):
        e = object.__new__(eagle)
        e.spec_steps = n
        g = object.__new__(ngram)
        g.draft_token_num = n
        eagle_ok &= e.max_tree_depth == n + 1
        ngram_ok &= g.max_tree_depth == n
    if not (eagle_ok and ngram_ok):
        raise RuntimeError("max_tree_depth: not spec_steps + 1 (EAGLE) and draft_token_num (NGRAM)")
    return {"max_accept": {"value": {"EAGLE": "min(steps + 1, draft_tokens)", "NGRAM": "draft_tokens"},
                           "how": "measured", "function": "EagleVerifyInput.max_tree_depth, NgramVerifyInput.max_tree_depth",
                           "states": 32, "note": "the verify tree holds D nodes: an EAGLE chain is at most D long too"}}


def worker_main() -> int:
    job = json.loads(sys.stdin.read())
    from workbench.engines.checking import checks
    from workbench.engines.sandbox import standins

    real = ["triton"] if job.get("triton") else []
    if not real:
        checks.settle_torch_without_triton()
    standins.install(Path(job["package_dir"]), Path(job["deps"]), [Path(p) for p in job["extra"]], real=real,
                     visible=job.get("visible", []))
    modules: dict[str, Any] = checks.import_modules(("schedule_batch", "scheduler", "sampling_params"), {})
    for name in ("eagle_info", "ngram_info"):  # the verify inputs, where the release has these modules
        with contextlib.suppress(ImportError):
            modules[name] = importlib.import_module(f"sglang.srt.speculative.{name}")
    standins.strict()
    print(json.dumps(measure(modules)))
    return 0


def section(engine: str, measured: dict[str, Any], read: dict[str, Any]) -> dict[str, Any]:
    """The ``reach`` section: measured facts, then the read ones each release's entry gives."""
    out = dict(measured)
    for name, entry in read.items():
        if name == "load" or name in out:
            continue
        out[name] = {"value": entry["value"], "how": "read", "source": entry["source"],
                     "reason": "decided at start-up on a device (model, pools, server arguments)"}
    missing = [n for n in ("max_req_len", "overlap_default", "worker_without_overlap", "max_accept") if n not in out]
    if missing:
        raise ValueError(f"{engine}: {READ_FACTS.name} lacks {missing[0]} and it could not be measured")
    return out


def learn(engine: str) -> Path:
    read = json.loads(READ_FACTS.read_text())["releases"].get(engine)
    if read is None:
        raise ValueError(f"{engine}: no entry in {READ_FACTS.name} (read its max_req_len and overlap default first)")
    install = wheels.fetch(engine)
    torchvision = read.get("load", {}).get("torchvision")
    extra = [str(install.torchvision)] if torchvision else []
    # "triton": the release's modules assert at import that their kernels are triton's own JITFunction
    # (0.5.3's CachedKernel): real triton decorates them (never launched; not interpreted)
    if read.get("load", {}).get("triton"):
        extra.append(str(wheels.fetch_triton()))
    job = {"package_dir": str(install.package_dir), "deps": str(install.deps), "extra": extra,
           # "stand-in": the folder gives transformers torchvision's metadata, a stand-in its code
           "visible": ["torchvision"] if torchvision == "stand-in" else [],
           "triton": bool(read.get("load", {}).get("triton"))}
    done = subprocess.run([sys.executable, "-m", "workbench.engines.sglang.reach_learn", "--worker"], input=json.dumps(job),
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{engine}: the worker failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    wheel = sorted((install.src.parent / "wheel").glob("*.whl"))[0]
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return learned.write_section(engine, "reach", section(engine, measured, read),
                                 wheel={"file": wheel.name, "sha256": digest})


def engine_reach(modules: dict[str, Any], case: dict[str, Any]) -> int | None:
    """The largest committed length any request reaches through the engine's functions: every input
    length near the end of the context (each walked over every accept sequence), the longest step.
    ``min_room``: inputs at most ``ctx - min_room`` (7: only the prompts the scheduler admits);
    ``max_room``: at least ``ctx - max_room`` (default ``3 * a_max + 7``)."""
    ctx, accept = case["context_len"], case["max_accept"]
    found = [scheduler_calls.longest_step(modules, {**case, "pool_tokens": case.get("pool_tokens"), "requested": None,
                                                    "page_size": case.get("page_size", 1), "input_len": ctx - room})
             for room in range(case.get("min_room", 3), case.get("max_room", 3 * accept + 7) + 1)]
    steps = [f for f in found if f is not None]
    return max(steps) if steps else None


def reach_main(cases: list[dict[str, Any]], engine: str) -> int:
    """``--reach``: the engine's reach for each case (JSON on stdin), one JSON list on stdout."""
    from workbench.engines.checking import checks
    from workbench.engines.sandbox import standins

    install = wheels.cached(engine)
    if install is None:
        raise SystemExit(f"{engine} is not cached")
    checks.settle_torch_without_triton()
    standins.install(install.package_dir, install.deps, [])
    modules: dict[str, Any] = checks.import_modules(("schedule_batch", "scheduler", "sampling_params"), {})
    standins.strict()
    print(json.dumps([engine_reach(modules, case) for case in cases]))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        return worker_main()
    if argv[:1] == ["--reach"]:
        return reach_main(json.loads(sys.stdin.read()), argv[1])
    for engine in argv:
        print(f"{engine}: {learn(engine)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
