"""A vLLM release's own GDN recurrent kernel on a CPU, under Triton's interpreter (worker process only):
which state slot each speculative row starts its recurrence from.

``python -m workbench.engines.vllm.gdn_kernel`` reads one JSON object on stdin: ``package_dir``,
``deps`` and ``triton`` (the cached release and triton folders), ``states`` (each ``{"drafts": k,
"accepted": [...], "before": int}``) and ``clamp`` (apply PR 48475's bound to the kernel's state
column first: the release's kernel source with that one statement wrapped in ``tl.maximum(..., 0)``).
It prints one JSON list per state: the slot each row read.

How a row's slot is seen: the state pool holds, in every element of slot ``s``, the value ``s``;
``q`` is the first unit vector and ``k``, ``v``, ``g``, ``beta`` are zero, so the recurrence leaves
the state as loaded and every token's final state (written apart, ``inplace_final_state=False``)
equals the slot the row started from. The index buffer is a view inside memory whose other
elements hold ``before``, as ``backends/vllm/gdn_state_indices.py`` lays it out, so a read before a
row shows which element it took. Two adaptations, both of how the kernel is run, not of what it does:
the Triton driver answers that there is no GPU (the release's ``fla`` utilities ask it at import),
and the module-level alias ``exp = tl.exp`` is handed to the interpreter as a jitted function
(the interpreter resolves ``tl`` builtins only through a module).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from workbench.engines.vllm import recurrent_state

MODULES = ("vllm.third_party.flash_linear_attention.ops.fused_recurrent",
           "vllm.model_executor.layers.fla.ops.fused_recurrent")


def _no_gpu_driver() -> None:
    driver = importlib.import_module("triton.runtime.driver").driver

    class NoGpu:
        def get_current_target(self) -> Any:
            raise RuntimeError("no GPU driver here: the kernels run under TRITON_INTERPRET=1")

    driver.set_active(NoGpu())


EXP_SOURCE = "@triton.jit\ndef exp(x):\n    return tl.exp(x)\n"


def _interpretable_exp() -> Any:
    """``tl.exp`` as a jitted function whose globals hold ``tl`` (what the interpreter patches)."""
    where = "<workbench: tl.exp as a jitted function>"
    namespace = {"triton": importlib.import_module("triton"), "tl": importlib.import_module("triton.language")}
    _serve_source(where, EXP_SOURCE)
    exec(compile(EXP_SOURCE, where, "exec"), namespace)  # noqa: S102 - three lines, the interpreter's view of an alias
    return namespace["exp"]


def kernel_module(clamp: bool) -> ModuleType:
    """The release's ``fused_recurrent`` module; with ``clamp``, a copy whose state-column statement is
    bounded at 0 (the change of PR 48475), loaded in the same package so its relative imports hold."""
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        if clamp:
            module = _clamped(module)
        module.exp = _interpretable_exp()  # type: ignore[attr-defined]
        return module
    raise ModuleNotFoundError(f"none of {', '.join(MODULES)} is in this release")


def _clamped(module: ModuleType) -> ModuleType:
    path = Path(str(module.__file__))
    source = path.read_text()
    tree = ast.parse(source)
    found = recurrent_state.accepted_index_form(source, path.name)
    if found is None:
        raise ValueError(f"{path.name}: no state-column statement to clamp")
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and node.lineno == int(found[1].split(":")[1]):
            node.value = ast.parse(f"tl.maximum({ast.unparse(node.value)}, 0)", mode="eval").body
    name = f"{module.__name__}_clamped"
    spec = importlib.util.spec_from_loader(name, loader=None, origin=str(path))
    assert spec is not None
    copy = importlib.util.module_from_spec(spec)
    copy.__package__, copy.__file__ = module.__package__, str(path)
    sys.modules[name] = copy
    text = ast.unparse(tree)
    where = f"{path} (with the clamp of PR 48475)"
    _serve_source(where, text)  # triton's jit reads each kernel's source through inspect, by file name
    exec(compile(text, where, "exec"), copy.__dict__)  # noqa: S102 - the release's module with PR 48475's one change
    return copy


def _serve_source(filename: str, text: str) -> None:
    import linecache

    lines = [line + "\n" for line in text.splitlines()]
    linecache.cache[filename] = (len(text), None, lines, filename)


def starting_slots(module: Any, drafts: int, accepted: list[int], before: int) -> list[int]:
    """The slot each row's recurrence started from, as the release's kernel ran it."""
    import torch

    width, rows = 1 + drafts, len(accepted)
    pool_slots = max(before, rows * width) + 1
    pool = torch.arange(pool_slots, dtype=torch.float32).view(pool_slots, 1, 1, 1).expand(pool_slots, 1, 16, 16).contiguous()
    memory = torch.full((width + rows * width + width,), before, dtype=torch.int32)
    indices = memory[width:width + rows * width].view(rows, width)
    indices.copy_(torch.arange(1, rows * width + 1, dtype=torch.int32).view(rows, width))
    tokens = rows * width
    q = torch.zeros(1, tokens, 1, 16)
    q[..., 0] = 1.0
    zeros_k, zeros_v = torch.zeros(1, tokens, 1, 16), torch.zeros(1, tokens, 1, 16)
    g, beta = torch.zeros(1, tokens, 1), torch.zeros(1, tokens, 1)
    cu = torch.arange(0, tokens + 1, width, dtype=torch.int32)
    counts = torch.tensor(accepted, dtype=torch.int32)
    _, final = module.fused_recurrent_gated_delta_rule_fwd(q, zeros_k, zeros_v, g, beta, 1.0, pool, False, cu, indices,
                                                           counts, False)
    return [int(final[row * width, 0, 0, 0].item()) for row in range(rows)]


# The reproducer's states (``--engine``): PR 48475's (two requests, MTP 6, the second with 0 accepted),
# the first row with 0 accepted, and a step where every row accepted some tokens.
REPRO_STATES = ({"drafts": 6, "accepted": [3, 0]}, {"drafts": 6, "accepted": [0, 4]}, {"drafts": 6, "accepted": [7, 1]})


def reproduce(engine: str) -> int:
    """``python -m workbench.engines.vllm.gdn_kernel --engine vllm==X``: the release's own kernel on
    the reproducer's states, unpatched and with PR 48475's clamp, beside the workbench's model; exit 0
    when a row with 0 accepted tokens reads outside its own row unpatched, none does with the clamp,
    and the model reads the slots the kernel reads in every run."""
    from workbench.backends.vllm import gdn_state_indices as gdn
    from workbench.engines.store import wheels

    install, triton = wheels.cached(engine), wheels.triton_dir()
    if install is None or triton is None:
        print(f"{engine} or triton is not in the workbench's cache (workbench check --engine {engine} fetches the "
              "release; workbench engines fetch --triton the kernels' compiler)", file=sys.stderr)
        return 2
    job = {"package_dir": str(install.package_dir), "deps": str(install.deps), "triton": str(triton),
           "states": [{**s, "before": gdn.BEFORE} for s in REPRO_STATES]}
    held = True
    for clamp in (False, True):
        done = subprocess.run([sys.executable, "-m", "workbench.engines.vllm.gdn_kernel"], input=json.dumps({**job, "clamp": clamp}),
                              capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "1"})
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            return 2
        runs = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{engine}, {'with the clamp of PR 48475' if clamp else 'as released'}:")
        for state, slots in zip(REPRO_STATES, runs):
            width = 1 + int(state["drafts"])  # type: ignore[call-overload]
            accepted = [int(a) for a in state["accepted"]]  # type: ignore[attr-defined]
            case = gdn.BACKEND.parse({"component": gdn.NAME, "rows": len(accepted), "drafts": width - 1,
                                      "accepted": accepted, "index": "clamped" if clamp else "unbounded"})
            model = gdn.starting_slots(case)
            outside = [r for r, slot in enumerate(slots) if not 1 + r * width <= slot <= (r + 1) * width]
            print(f"  accepted {accepted}: the kernel started row by row from slots {slots} (model: {model}); "
                  f"rows reading outside their own slots: {outside or 'none'}")
            zero_rows = [r for r, a in enumerate(accepted) if a == 0]
            held &= model == slots and (outside == [] if clamp else outside == zero_rows)
    print("every claim held" if held else "a claim did not hold")
    return 0 if held else 1


def main() -> int:
    if sys.argv[1:2] == ["--engine"] and len(sys.argv) == 3:
        return reproduce(sys.argv[2])
    job = json.loads(sys.stdin.read())
    os.environ["TRITON_INTERPRET"] = "1"
    from workbench.engines.store.gpus import gpu
    from workbench.engines.vllm import loader as vllm_loader

    vllm_loader.install(Path(job["package_dir"]), Path(job["deps"]), gpu("h100"), (Path(job["triton"]),))
    _no_gpu_driver()
    module = kernel_module(bool(job.get("clamp")))
    answers = [starting_slots(module, int(s["drafts"]), [int(a) for a in s["accepted"]], int(s["before"]))
               for s in job["states"]]
    print(json.dumps(answers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
