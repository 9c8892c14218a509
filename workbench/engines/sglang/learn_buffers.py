"""What the SGLang learner measures, buffer by buffer, and how each answer becomes a fact.

Everything here is data about the workbench's models (which rules a backend has, which
behaviours conformance can tell apart), never about a release: a release's answers decide.

* ``width_gen``: the request table's extra columns, ``get_req_to_token_extra_context_len`` where
  the release has it, else the ``max_context_len=`` its model runner builds ``ReqToTokenPool``
  with, less the context (run alone with what it reads); named among the width generations
  g1 / g2 / g3 over the sizing states.
* ``backends.<table>.rule``: the width ``init_cuda_graph_state`` gives over the measuring grid
  (``sglang_widths.grid``), named among the backend's sizing rules.
* ``backends.sglang-dsa-page-table.replay`` and ``draft_extend_rows``, ``backends.allocator.gather``,
  the CUDA allocator's order (``conformance``): a conformance row run once per candidate
  behaviour; the candidate under which the model agrees with the engine on every state.
* ``on_overflow``: the engine's replay at the first failing committed length of a reference
  deployment and one below (the seeds' deployments), its answers recorded with the state, and
  the outcome it comes to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from workbench.backends import backend_of
from workbench.engines.checking.states import State, geometry_of
from workbench.engines.learning import rules as lr
from workbench.engines.sandbox.locate import Found, Wheel
from workbench.engines.sandbox.session import Sessions
from workbench.engines.sglang import widths as sw
from workbench.model.geometry import WIDTH_GENERATIONS, Mode

Progress = Callable[[str], None]
Facts = dict[str, Any]

# Where conformance finds each module it imports (checks.MODULE_PATHS' keys), by what the module
# defines: (kind, names). The first name found wins.
MODULE_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sizing": ("def", ("get_req_to_token_extra_context_len",)),
    "ascend": ("class", ("AscendAttnBackend",)),
    "dsa": ("class", ("DeepseekSparseAttnBackend", "NativeSparseAttnBackend")),
    "fbi": ("class", ("ForwardMode",)),
    "npu_alloc": ("class", ("NPUPagedTokenToKVPoolAllocator", "AscendPagedTokenToKVPoolAllocator")),
    "paged": ("class", ("PagedTokenToKVPoolAllocator",)),
    "metadata": ("def", ("normal_decode_set_metadata",)),
    "trtllm_mha_graph": ("def", ("update_trtllm_mha_graph_metadata",)),
    "trtllm_mha_page_table": ("def", ("build_trtllm_mha_page_table",)),
    "kv_indices": ("def", ("create_flashinfer_kv_indices_triton",)),
    "aiter_page_table": ("def", ("scatter_req_to_token_to_page_table_kernel",)),
    "spec_utils": ("def", ("draft_kv_indices_buffer_width",)),
    "attn_utils": ("def", ("assert_buffer_fits",)),
    "cache_locs": ("def", ("generate_draft_decode_kv_indices",)),
}
INLINE_EXTRA = ("ReqToTokenPool", "max_context_len")  # where older releases size the request table inline
GRID_KEYS = ("context_len", "page_size", "draft_tokens", "spec_steps", "spec_topk", "max_bs")
SIZING_KEYS = ("page_size", "algorithm", "draft_tokens", "spec_steps", "spec_topk")
LEARN_STATES = 60  # random states per candidate behaviour (the seeds and grid boundaries come on top)
LEARN_STATES_TRITON = 30  # the same for a row whose engine side is an interpreted Triton kernel (slow)


def locate_modules(wheel: Wheel) -> dict[str, Found | None]:
    found: dict[str, Found | None] = {}
    for key, (kind, names) in MODULE_KEYS.items():
        found[key] = wheel.find_class(names) if kind == "class" else wheel.find_function(names)
    return found


def module_paths(found: Mapping[str, Found | None]) -> dict[str, str]:
    return {key: f.module for key, f in found.items() if f is not None}


def found_names(found: Mapping[str, Found | None]) -> dict[str, str]:
    return {key: f.name for key, f in found.items() if f is not None}


def _function(found: Found, name: str) -> str:
    return f"{found.module}.{found.name}.{name}" if found.name != name else f"{found.module}.{name}"


# ---- the request table's width generation --------------------------------------------------

def _extra(generation: str) -> Callable[[Mapping[str, Any]], int]:
    def extra(state: Mapping[str, Any]) -> int:
        return geometry_of({**state, "context_len": 1, "max_bs": 1, "width_gen": generation}).req_to_token_extra
    return extra


def learn_width_gen(session: Sessions, wheel: Wheel, found: Mapping[str, Found | None], progress: Progress) -> Facts:
    sizing = found["sizing"]
    task: dict[str, Any] = {"name": "width_gen", "kind": "sizing", "count": LEARN_STATES}
    if sizing is not None:
        task.update(module=sizing.module, function=sizing.name)
        function, where = f"{sizing.module}.{sizing.name}", sizing.where
    else:
        inline = wheel.find_keyword(*INLINE_EXTRA)
        if inline is None:
            return lr.absent_fact("neither get_req_to_token_extra_context_len nor a ReqToTokenPool(max_context_len=...) "
                                  "call is in the wheel", "get_req_to_token_extra_context_len, ReqToTokenPool")
        task.update(module=inline.module, function=inline.name, owner=inline.owner, callee=INLINE_EXTRA[0],
                    keyword=INLINE_EXTRA[1])
        function = f"{inline.module}.{inline.owner + '.' if inline.owner else ''}{inline.name}"
        where = (f"{inline.where} (max_context_len= of its ReqToTokenPool, and the statements computing what it "
                 "reads, run alone with the model's context 0: the function builds the pools)")
    answer = session.ask(task)
    if "error" in answer:
        return lr.measured_fact(None, function, 0, found=where, finding=f"the engine's code did not run: {answer['error']}")
    points = [(state, value) for state, value in answer["values"]]
    fact = lr.name_rule(points, {g: _extra(g) for g in WIDTH_GENERATIONS}, function=function, keys=SIZING_KEYS,
                        found=where)
    progress(f"width_gen: {fact['value']} ({len(points)} states)")
    return fact


# ---- graph buffer widths --------------------------------------------------------------------

def _rule_of(component: str, rule: str) -> Callable[[Mapping[str, Any]], int]:
    backend = backend_of(component)
    return lambda state: backend.width(geometry_of(dict(state)), rule)


def learn_table_widths(session: Sessions, wheel: Wheel, progress: Progress) -> dict[str, Facts]:
    facts: dict[str, Facts] = {}
    for probe in sw.TABLE_PROBES:
        found = wheel.find_class(probe.classes, method=probe.method)
        searched = " or ".join(f"{c}.{probe.method}" for c in probe.classes)
        if found is None:
            facts[probe.component] = {"rule": lr.absent_fact(f"no class {searched} in the wheel", searched)}
            progress(f"{probe.component}: absent")
            continue
        answer = ask_width(session, probe.name, found, wheel)
        function = _function(found, probe.method)
        points = [(s, w) for s, w in answer.get("points", [])]
        if not points:
            error = answer.get("error") or (answer.get("first_error") or {}).get("error", "no point measured")
            facts[probe.component] = {"rule": not_made(error, function, found) or lr.measured_fact(
                None, function, 0, found=found.where, finding=f"the engine's code did not run: {error}")}
            progress(f"{probe.component}: not measured ({error[:80]})")
            continue
        more: dict[str, Any] = {"found": found.where}
        if answer.get("notes"):
            more["settings"] = "; ".join(answer["notes"])
        if answer.get("first_error"):
            more["not_run"] = answer["first_error"]["error"]
        rules = {name: _rule_of(probe.component, name) for name in backend_of(probe.component).rules}
        facts[probe.component] = {"rule": lr.name_rule(points, rules, function=function, keys=GRID_KEYS, **more)}
        progress(f"{probe.component}: {facts[probe.component]['rule']['value']} ({len(points)} states)")
    return facts


def not_made(error: str, function: str, found: Found) -> dict[str, Any] | None:
    """The absent fact of a buffer the sizing method ran without making (``WidthProbe.read``'s
    LookupError), or None for any other error."""
    if not error.startswith("LookupError: ") or " made no " not in error:
        return None
    return lr.absent_fact(f"{function} ran and made no such buffer ({error.removeprefix('LookupError: ')[:300]})",
                          f"{function} at {found.where}")


def ask_width(session: Sessions, probe: str, found: Found, wheel: Wheel) -> dict[str, Any]:
    """The width task's answer; where the sizing code called triton (``triton.cdiv``), the triton
    worker's answer instead."""
    task = {"name": probe, "kind": "width", "probe": probe, "module": found.module, "class": found.name,
            "width_gen": "g3", "package_root": str(wheel.src)}
    answer = session.ask(task)
    error = str(answer.get("error") or (answer.get("first_error") or {}).get("error", ""))
    if not answer.get("points") and "triton" in error:
        return session.ask_triton(task) or answer
    return answer


# ---- behaviours named by conformance rows ----------------------------------------------------

def learn_behaviour(session: Sessions, found: Mapping[str, Found | None], function: str, key: str,
                    candidates: Mapping[str, Mapping[str, Any]], progress: Progress, triton: bool = False,
                    module_key: str = "", count: int | None = None) -> Facts:
    """The candidate behaviour under which conformance row ``function`` agrees on every state
    (``triton``: a row whose engine side is a Triton kernel, run by the triton worker; ``count``:
    random states, where the defaults are too few to tell the candidates apart)."""
    default = LEARN_STATES_TRITON if triton else LEARN_STATES
    task = {"name": f"{function} ({key})", "kind": "check", "function": function, "module_paths": module_paths(found),
            "candidates": candidates, "count": default if count is None else count,
            "names": found_names(found)}
    answer = session.ask_triton(task) if triton else session.ask(task)
    if answer is None:
        return lr.measured_fact(None, function, 0, finding=f"its Triton kernel did not run: {session.triton_error}")
    if "error" in answer:
        return lr.measured_fact(None, function, 0, finding=f"the engine's code did not run: {answer['error']}")
    located = found.get(module_key)
    where = {"found": located.where} if located is not None else {}
    try:
        fact = lr.name_candidate(answer["candidates"], function=function, **where)
    except ValueError as error:
        return lr.measured_fact(None, function, 0, finding=str(error), **where)
    progress(f"{key}: {fact['value']} ({fact['states']} states of {function})")
    return fact


def outcome_of(answer: Mapping[str, Any], reads_past: bool) -> str:
    """What an engine's answer at a state comes to: its exception's kind, or, where it raised
    nothing, a silent over-read when the step's reads pass the buffer (ok otherwise)."""
    if answer.get("outcome") == "raised":
        error = str(answer.get("error", ""))
        if error.startswith("AssertionError"):
            return "host-assert"
        if error.startswith("IndexError"):
            return "index-error"
        return "shape-error" if "size" in error else "raised"
    return "silent-overread" if reads_past else "ok"


def boundary_states(component: str, rule: str, reference: State) -> tuple[list[State], int | None]:
    """The reference deployment's first failing committed length under ``rule`` and one below
    (one request each), or the largest the table holds twice when nothing fails; and the first."""
    backend = backend_of(component)
    g = geometry_of(reference)
    mode = Mode.parse(reference["mode"])
    capacity = backend.capacity_tokens(g, backend.width(g, rule))
    first = capacity - g.lookahead(mode, reference["step_id"]) + 1
    top = g.max_committed_len(mode, reference["step_id"])
    at = [first, first - 1] if first <= top else [top, top - 1]
    return [{**reference, "seq_lens": [s]} for s in at], (first if first <= top else None)
