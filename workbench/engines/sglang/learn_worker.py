"""One SGLang release measured in a process of its own: ``python -m workbench.engines.sglang.learn_worker``.

The parent (``learn.py``) has already found where the release keeps each class and
function (``locate.py``); this process loads the release as conformance does (``standins.py``: a
bare package, stand-ins for the accelerator libraries) and answers each task with what the
engine's own code gave:

* ``width``: a ``WidthProbe`` over the measuring grid: ``[state, width]`` per point (or the error);
* ``sizing``: ``get_req_to_token_extra_context_len`` (or the statements that compute the same
  number inline in an older release, ``statements``) over the sizing states;
* ``check``: a conformance row run once per candidate behaviour: which candidates agree on every
  state (the models' side runs here too: both need the release's request tables); a candidate
  stops at its first disagreement;
* ``step``: the engine side of a conformance row at given states (the boundary states), its answers.

It is a session: the first line on stdin names the release's folders, then each line is a task
and each answer one line on stdout, so the release's modules are imported once while the parent
picks its next task from the answers so far (the replay is checked under the width rule just
learned). A task that cannot run answers ``{"error": "..."}`` and the next task runs.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import random
import sys
import textwrap
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from workbench.engines.checking import checks
from workbench.engines.checking import states as st
from workbench.engines.checking.answers import Answer, shown
from workbench.engines.sandbox.tolerant_import import TolerantFinder, import_tolerant
from workbench.engines.sglang import calls as ec
from workbench.engines.sglang import calls_older as older
from workbench.engines.sglang import pooled_widths as spw
from workbench.engines.sglang import widths as sw

Result = dict[str, Any]


def one_line(error: BaseException) -> str:
    where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    place = f" ({Path(where.filename).name}:{where.lineno})" if where else ""
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text[:240]}{place}"


def _width(task: Result) -> Result:
    from workbench.engines.sandbox import standins

    probe = next(p for p in (*sw.TABLE_PROBES, *spw.POOLED_PROBES) if p.name == task["probe"])
    module, skipped = import_tolerant(task["module"])
    cls = getattr(module, task["class"])
    standins.strict()
    points, notes, first_error = [], set(), None
    for state in sw.grid(task["width_gen"], probe.page_sizes):
        try:
            width, note = sw.measure(probe, module, cls, state, task["package_root"])
        except Exception as error:  # noqa: BLE001 - recorded, the grid goes on
            first_error = first_error or {"state": state, "error": one_line(error)}
            continue
        points.append([state, width])
        notes.add(note)
    standins.lenient()
    if skipped:
        notes.add(f"{task['module']} imported with {len(skipped)} top-level statements skipped: {'; '.join(skipped)[:300]}")
    return {"points": points, "notes": sorted(n for n in notes if n), "first_error": first_error}


def _draft_check(task: Result) -> Result:
    """``assert`` or ``none`` per state of the grid (speculative ones with a multi-step drafter)."""
    from workbench.engines.sandbox import standins

    module, _ = import_tolerant(task["module"])
    cls = getattr(module, task["class"])
    standins.strict()
    checks_found: dict[str, int] = {}
    first_error = None
    for state in sw.grid("g3"):
        if state["spec_steps"] < 2:
            continue
        try:
            found = spw.draft_check(module, cls, state)
        except Exception as error:  # noqa: BLE001 - recorded, the grid goes on
            first_error = first_error or one_line(error)
            continue
        checks_found[found] = checks_found.get(found, 0) + 1
    standins.lenient()
    return {"checks": checks_found, "first_error": first_error}


def _sizing(task: Result) -> Result:
    """The engine's extra request-table columns per sizing state: its function, or, in a release
    that computes them inline, the ``max_context_len=`` it builds the request table with."""
    module, _ = import_tolerant(task["module"])
    if task.get("keyword"):
        run = _keyword(module, task["function"], task["owner"], task["callee"], task["keyword"])
    else:
        def run(state: st.State) -> int:
            return int(ec.engine_extra(module, state)["value"])
    rng = random.Random("learn:sizing")
    values = []
    for state in st.sizing_states(rng, task["count"]):
        try:
            values.append([state, run(state)])
        except Exception as error:  # noqa: BLE001 - the first error is the answer
            return {"error": one_line(error), "state": state}
    return {"values": values}


def _keyword(module: ModuleType, function: str, owner: str | None, callee: str, keyword: str) -> Callable[[st.State], int]:
    """For a state, the value of ``keyword=`` in ``function``'s call to ``...callee`` with the model's
    context length 0, after the statements that compute the locals it reads (``extra_max_context_len =
    4; if ...: += D``), all run alone: the function allocates the pools and cannot run here."""
    import inspect

    code = getattr(getattr(module, owner), function) if owner else getattr(module, function)
    tree = ast.parse(textwrap.dedent(inspect.getsource(code)))
    call = next(c for c in ast.walk(tree) if isinstance(c, ast.Call)
                and str(getattr(c.func, "id", None) or getattr(c.func, "attr", "")).endswith(callee)
                and any(k.arg == keyword for k in c.keywords))
    expr = next(k.value for k in call.keywords if k.arg == keyword)
    names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id != "self"}
    body = [stmt for name in sorted(names) if name not in vars(module) for stmt in _block_assigning(tree, name)]
    statements = compile(ast.Module(body=body, type_ignores=[]), f"<{function}>", "exec")
    value = compile(ast.Expression(expr), f"<{function}>", "eval")

    def run(state: st.State) -> int:
        server_args = ec._server_args(state)
        server_args.disaggregation_mode = "null"
        scope: dict[str, Any] = {"self": SimpleNamespace(server_args=server_args,
                                                         model_config=SimpleNamespace(context_len=0))}
        exec(statements, dict(vars(module)), scope)  # noqa: S102 - the engine's own statements
        return int(eval(value, dict(vars(module)), scope))  # noqa: S307 - the engine's own expression
    return run


def _block_assigning(tree: ast.AST, local: str) -> list[ast.stmt]:
    def assigns(node: ast.stmt) -> bool:
        return any(isinstance(n, ast.Name) and n.id == local and isinstance(n.ctx, ast.Store) for n in ast.walk(node))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        hits = [i for i, statement in enumerate(body) if assigns(statement)]
        if hits and isinstance(body[hits[0]], ast.Assign):
            return body[hits[0]: hits[-1] + 1]
    raise LookupError(f"no statement assigns {local}")


def _check(task: Result) -> Result:
    """A conformance row's states, once per candidate behaviour: states and agreements each."""
    check = next(c for c in checks.CHECKS if task["function"] in c.functions)
    modules = checks.import_modules(check.modules, task["module_paths"])
    older.adapt(modules, task.get("names", {}))
    from workbench.engines.sandbox import standins

    standins.strict()
    found: dict[str, Result] = {}
    for name, behaviour in task["candidates"].items():
        rng = random.Random(f"learn:{task['function']}")
        states = agree = 0
        first = None
        try:
            for state, engine_side, model_side in check.pairs(task["function"], modules, behaviour, rng, task["count"]):
                got, want = engine_side(), model_side()
                states += 1
                if got != want:  # this candidate is out: its other states cannot make it agree
                    first = {"state": state, "engine": shown(got), "model": shown(want)}
                    break
                agree += 1
        except Exception as error:  # noqa: BLE001 - a candidate whose states cannot be made
            found[name] = {"error": one_line(error)}
            continue
        found[name] = {"states": states, "agree": agree, "first_disagreement": first}
    standins.lenient()
    return {"candidates": found}


def _step(task: Result) -> Result:
    """The engine side of a conformance row at the given states: its answers."""
    check = next(c for c in checks.CHECKS if task["function"] in c.functions)
    modules = checks.import_modules(check.modules, task["module_paths"])
    from workbench.engines.checking import model_calls as mc
    from workbench.engines.sandbox import standins

    standins.strict()
    answers: list[Answer] = []
    for i, state in enumerate(task["states"]):
        tables = mc.request_tables(state, seed=i)
        if task["function"].startswith("AscendAttnBackend"):
            answers.append(ec.engine_ascend_replay(modules["ascend"], modules["fbi"], state, tables))
        else:
            answers.append(ec.engine_dsa_replay(modules["dsa"], modules["fbi"], state, tables))
    standins.lenient()
    return {"answers": [shown(a) for a in answers]}


TOLERANT: list[TolerantFinder] = []  # the session's statement-by-statement loader, when set up with one


def _load(task: Result) -> Result:
    """Import the modules the other tasks will use, and say which failed (a release whose pinned
    transformers wants torchvision, or must not see it, fails some of them)."""
    failed = {}
    for name in task["modules"]:
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - recorded: the parent picks the set-up that loads most
            failed[name] = one_line(error)
    return {"loaded": len(task["modules"]) - len(failed), "failed": failed,
            "skipped": TOLERANT[0].skipped if TOLERANT else []}


TASKS = {"load": _load, "width": _width, "draft_check": _draft_check, "sizing": _sizing, "check": _check, "step": _step}


def main() -> int:
    """The first line on stdin sets the session up (the release's folders); every further line is
    a task, answered by one line on stdout, until stdin closes."""
    job = json.loads(sys.stdin.readline())
    from workbench.engines.sandbox import standins

    extra = [Path(p) for p in job.get("extra_paths", [])]
    if job.get("triton_dir"):
        os.environ.setdefault("TRITON_INTERPRET", "1")
        extra.append(Path(job["triton_dir"]))
    else:
        checks.settle_torch_without_triton()
    standins.install(Path(job["package_dir"]), Path(job["deps"]), extra, real=["triton"] if job.get("triton_dir") else [])
    if job.get("tolerant"):
        TOLERANT.append(TolerantFinder(Path(job["package_dir"])))
        sys.meta_path.insert(0, TOLERANT[0])
    for line in sys.stdin:
        task = json.loads(line)
        try:
            result = TASKS[task["kind"]](task)
        except BaseException as error:  # noqa: BLE001 - one task's failure is its answer
            result = {"error": one_line(error)}
        print(json.dumps({"task": task["name"], **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
