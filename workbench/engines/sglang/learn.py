"""``workbench engines learn sglang==X``: one SGLang release's buffers, measured from its own code.

``learn_release`` fetches the wheel into the workbench's cache, finds each class and function in
it by name (``locate.py``), starts one worker process that holds the release's modules
(``learn_worker.py``) and asks it, buffer by buffer, what the engine's code gives
(``learn_buffers.py`` says what is measured and how an answer becomes a fact). The section
``buffers`` of ``ROOT/sglang/X.json`` then holds, for each buffer the workbench models, its rule
or behaviour as a fact (measured, with the function and the number of states; or absent), and
``conformance``: where each module conformance imports was found, and whether the release loads
with torchvision. A release learned before from the same wheel by the same learner is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.analysis.seeds import GLM_DSA, QWQ_NPU
from workbench.backends.page_writes import GRID_OPTIONS
from workbench.engines.checking.states import EXTEND_IN_PAGE, SEED_DECODE, State
from workbench.engines.learning import rules as lr
from workbench.engines.learning.learn import LearnError
from workbench.engines.sandbox.locate import Found, Wheel
from workbench.engines.sandbox.session import Session, SessionDied, Sessions
from workbench.engines.sglang import learn_buffers as lb
from workbench.engines.sglang import learn_pooled as lp
from workbench.engines.store import learned, wheels

LEARNER = "sglang-buffers 12"  # raise when what is learned or how changes: every release is learned again
SECTION = "buffers"
WORKER = "workbench.engines.sglang.learn_worker"
Progress = Callable[[str], None]


def _reference(seed_case: dict[str, object], algorithm: str, story: str) -> State:
    """A seed's deployment as a step state (its lengths are set per boundary)."""
    shape = {"spec_steps": 1, "spec_topk": 1, "draft_has_kv": True, "step_id": 0, "hybrid_swa": False,
             "width_gen": "g3", "max_bs": 1, "branch": "mirror"}
    keys = ("context_len", "page_size", "draft_tokens", "spec_steps", "spec_topk", "draft_has_kv", "mode")
    return {**shape, **{k: seed_case[k] for k in keys if k in seed_case}, "algorithm": algorithm, "reference": story}


# The deployments whose first failing step each release's replay is run at: the seeds' own.
REFERENCES: dict[str, tuple[str, State]] = {
    "sglang-ascend-block-tables": ("AscendAttnBackend.replay[mirror]",
                                   _reference(QWQ_NPU.before, "NGRAM", "QwQ-32B NGRAM on Ascend, ctx 32768")),
    "sglang-dsa-page-table": ("DeepseekSparseAttnBackend.replay[target-verify]",
                              _reference(GLM_DSA.before, "EAGLE", "GLM-5.2 EAGLE on DSA, ctx 90000")),
}


def learn_release(engine: str, *, progress: Progress, root: Path) -> Path:
    say: Progress = lambda line: progress(f"{engine}: {line}")  # noqa: E731
    say("fetching the wheel")
    try:
        install = wheels.fetch(engine)
    except wheels.FetchError as error:
        raise LearnError(str(error)) from None
    wheel_file = next((install.src.parent / "wheel").glob("*.whl"), None)
    if wheel_file is None:
        raise LearnError(f"the cached install of {engine} has no wheel file in {install.src.parent / 'wheel'}")
    wheel = learned.wheel_record(wheel_file)
    if learned.is_current(engine, (SECTION,), LEARNER, wheel["sha256"], root=root):
        say(f"already learned from this wheel by {LEARNER}: skipped")
        return learned.shipped_path(engine, root)
    same = _same_as_base(root).get(engine)
    if same and same["sha256"] == wheel["sha256"] and same["learner"] == LEARNER:
        say(f"learned before from this wheel by {LEARNER}: its modelled values are {same['base']}'s: skipped")
        return learned.shipped_path(same["base"], root)
    located = Wheel(install.src, "sglang")
    modules = lb.locate_modules(located)
    with _session(install, modules, say) as (session, loading):
        section = _learn(session, located, modules, say)
    imported = f"import of {_first_module(modules)}"
    section["conformance"]["torchvision"] = lr.measured_fact(
        loading["torchvision"], imported, 1,
        note="whether the release's modules import only with a torchvision present (the transformers it pins)")
    section["conformance"]["tolerant"] = lr.measured_fact(
        loading["tolerant"], imported, 1, skipped=loading["skipped"][:40],
        note="whether its modules import only statement by statement, the statements that cannot run here skipped")
    section["conformance"]["modules_not_imported"] = lr.measured_fact(
        sorted(loading["failed"]), imported, 1, errors=dict(sorted(loading["failed"].items())),
        note="the modules that do not import in the set-up that imports most (their tasks load them statement by statement)")
    return learned.write_section(engine, SECTION, section, root=root, wheel=wheel)


def _first_module(modules: dict[str, Found | None]) -> str:
    return next(f.module for f in modules.values() if f is not None)


class _Opened:
    def __init__(self, install: wheels.EngineInstall, modules: dict[str, Found | None], say: Progress) -> None:
        self.install, self.modules, self.say = install, modules, say
        self.sessions: Sessions | None = None

    def _setup(self, torchvision: bool, triton: bool, tolerant: bool) -> dict[str, Any]:
        triton_dir = wheels.triton_dir() if triton else None
        return {"package_dir": str(self.install.package_dir), "deps": str(self.install.deps),
                "extra_paths": [str(self.install.torchvision)] if torchvision else [],
                "triton_dir": str(triton_dir) if triton_dir else None, "tolerant": tolerant}

    def __enter__(self) -> tuple[Sessions, dict[str, Any]]:
        """A worker holding the release, set up so that the most of its modules import: without
        torchvision, with it (a release whose pinned transformers registers image processors only
        with one), then loading each module statement by statement (``TolerantFinder``: a release
        whose import chain meets a statement this torch cannot run); the first that imports every
        module, else the one that imports most (kept open while the others are tried). LearnError
        if none imports any."""
        names = self.module_names
        best: tuple[int, bool, bool, Session, dict[str, Any]] | None = None
        for tolerant, torchvision in ((False, False), (False, True), (True, False), (True, True)):
            session = Session(WORKER, self._setup(torchvision, False, tolerant))
            try:
                answer = session.ask({"name": "load", "kind": "load", "modules": names})
            except SessionDied as error:
                answer = {"failed": dict.fromkeys(names, str(error))}
            failures = len(answer["failed"])
            if best is None or failures < best[0]:
                if best is not None:
                    best[3].close()
                best = (failures, tolerant, torchvision, session, answer)
            else:
                session.close()
            if failures == 0:
                break
        assert best is not None
        failures, tolerant, torchvision, session, answer = best
        if failures == len(names):
            session.close()
            raise LearnError(f"its modules do not import on a CPU: {next(iter(answer['failed'].values()))}")
        triton = self._setup(torchvision, True, tolerant) if wheels.triton_dir() else None
        self.sessions = Sessions(session, WORKER, triton)
        self.say("loaded" + (" with torchvision" if torchvision else "") + (", statement by statement" if tolerant else "")
                 + (f"; {failures} of {len(names)} modules do not import" if failures else ""))
        return self.sessions, {"torchvision": torchvision, "tolerant": tolerant, "skipped": answer.get("skipped", []),
                               "failed": answer["failed"]}

    @property
    def module_names(self) -> list[str]:
        """Every module a task will import: conformance's, and the ones the probes' classes are in."""
        from workbench.engines.sglang import pooled_widths as spw
        from workbench.engines.sglang import widths as sw

        wheel = Wheel(self.install.src, "sglang")
        probes = (*sw.TABLE_PROBES, *spw.POOLED_PROBES)
        found = [wheel.find_class(p.classes, method=p.method) for p in probes]
        return sorted({f.module for f in (*self.modules.values(), *found) if f is not None})

    def __exit__(self, *exc: object) -> None:
        if self.sessions is not None:
            self.sessions.close()


def _session(install: wheels.EngineInstall, modules: dict[str, Found | None], say: Progress) -> _Opened:
    if all(found is None for found in modules.values()):
        raise LearnError("the wheel has none of the modules the workbench models (searched: "
                         + ", ".join(names[0] for _, names in lb.MODULE_KEYS.values()) + ")")
    return _Opened(install, modules, say)


def _learn(session: Sessions, wheel: Wheel, modules: dict[str, Found | None], say: Progress) -> dict[str, Any]:
    width_gen = lb.learn_width_gen(session, wheel, modules, say)
    backends = lb.learn_table_widths(session, wheel, say)
    _learn_dsa(session, modules, backends, say)
    for component, (function, reference) in REFERENCES.items():
        rule = backends[component]["rule"]["value"]
        if rule is not None:
            backends[component]["on_overflow"] = _on_overflow(session, modules, component, function, rule, reference, say)
    backends["allocator"] = {"gather": _learn_npu_gather(session, modules, say),
                             **_learn_npu_extend(session, modules, say)}
    backends.setdefault("sglang-trtllm-mha-page-table", {}).update(_learn_trtmha_fill(session, modules, backends, say))
    backends.setdefault("sglang-ascend-block-tables", {}).update(_learn_ascend_spec_fill(session, modules, backends, say))
    for component, grid in _learn_mla_grids(session, modules, backends, say).items():
        backends.setdefault(component, {})["grid"] = grid
    backends.update(lp.learn_pooled(session, wheel, say))
    conformance: dict[str, Any] = {"module_paths": {k: {"module": f.module, "name": f.name, "found": f.where}
                                                    for k, f in modules.items() if f is not None}}
    conformance.update(_learn_cuda_allocator(session, modules, say))
    return {"learner": LEARNER, "width_gen": width_gen, "backends": backends, "conformance": conformance}


def _learn_dsa(session: Sessions, modules: dict[str, Found | None], backends: dict[str, Any], say: Progress) -> None:
    dsa = backends["sglang-dsa-page-table"]
    rule = dsa["rule"]["value"]
    if rule is None or modules["dsa"] is None:
        return
    base = {"width_gen": "g3", "dsa_rule": rule}
    dsa["rows"] = lb.learn_behaviour(session, modules, "DeepseekSparseAttnBackend.init_cuda_graph_state", "rows",
                                     {r: {**base, "dsa_rows": r} for r in ("max-num-tokens", "max-bs")}, say,
                                     module_key="dsa")
    if dsa["rows"]["value"] is not None:
        base["dsa_rows"] = dsa["rows"]["value"]
    dsa["replay"] = lb.learn_behaviour(session, modules, "DeepseekSparseAttnBackend.replay[target-verify]", "replay",
                                       {r: {**base, "dsa_replay": r, "dsa_draft_extend_rows": "draft-tokens"}
                                        for r in ("dynamic", "static")}, say, module_key="dsa")
    replay = dsa["replay"]["value"]
    if replay is not None:
        dsa["draft_extend_rows"] = lb.learn_behaviour(
            session, modules, "DeepseekSparseAttnBackend.replay[draft-extend]", "draft_extend_rows",
            {rows: {**base, "dsa_replay": replay, "dsa_draft_extend_rows": rows}
             for rows in ("accept-length", "draft-tokens")}, say, module_key="dsa")


def _on_overflow(session: Sessions, modules: dict[str, Found | None], component: str, function: str, rule: str,
                 reference: State, say: Progress) -> dict[str, Any]:
    states, first = lb.boundary_states(component, rule, reference)
    answer = session.ask({"name": f"{component} at its boundary", "kind": "step", "function": function,
                          "module_paths": lb.module_paths(modules), "states": states})
    if "error" in answer:
        return lr.measured_fact(None, function, 0, finding=f"the engine's code did not run: {answer['error']}")
    at = [{"seq_lens": s["seq_lens"], "outcome": a["outcome"], "error": a.get("error")}
          for s, a in zip(states, answer["answers"])]
    if all(a["outcome"] == "raised" for a in at) and at[0]["error"] == at[1]["error"]:
        # the same error a step below the boundary too: the release refuses the mode, whatever the length
        say(f"{component}: the replay refuses {reference['mode']} at every length ({at[0]['error'][:80]})")
        return lr.measured_fact(None, function, len(states), reference=reference, first_failing=first, at=at,
                                finding=f"the replay refuses {reference['mode']} below the boundary too: {at[0]['error']}")
    outcome = lb.outcome_of(answer["answers"][0], reads_past=first is not None)
    say(f"{component}: {outcome} at {states[0]['seq_lens'][0]} ({reference['reference']})")
    where = modules["ascend" if "Ascend" in function else "dsa"]
    return lr.measured_fact(outcome, function, len(states), reference=reference, first_failing=first, at=at,
                            **({"found": where.where} if where else {}))


def _learn_npu_gather(session: Sessions, modules: dict[str, Found | None], say: Progress) -> dict[str, Any]:
    found = modules["npu_alloc"]
    searched = " or ".join(lb.MODULE_KEYS["npu_alloc"][1])
    if found is None:
        return lr.absent_fact(f"no class {searched} in the wheel", searched)
    fact = lb.learn_behaviour(session, modules, "NPUPagedTokenToKVPoolAllocator.alloc_decode", "gather",
                              {g: {"npu_gather": g} for g in ("npu-legacy", "npu-clamped")}, say, module_key="npu_alloc")
    fact["seed"] = SEED_DECODE["seed"]
    return fact


def _learn_npu_extend(session: Sessions, modules: dict[str, Found | None], say: Progress) -> dict[str, Any]:
    """The NPU allocator's extend: whether it writes a request's tail from a fresh page even when
    the request ends inside its prefix's partial page (``extend_tail``: ``unguarded``) or not
    (``guarded``), and the dtype of the slots it returns (``extend_dtype``: 0.5.3 to 0.5.3.post2
    return int64). Both are named by the one candidate pair under which every state agrees."""
    if modules["npu_alloc"] is None:
        searched = " or ".join(lb.MODULE_KEYS["npu_alloc"][1])
        absent = lr.absent_fact(f"no class {searched} in the wheel", searched)
        return {"extend_tail": absent, "extend_dtype": dict(absent)}
    candidates = {f"{tail}/{dtype}": {"npu_extend_tail": tail, "npu_extend_dtype": dtype}
                  for tail in ("guarded", "unguarded") for dtype in ("int32", "int64")}
    fact = lb.learn_behaviour(session, modules, "NPUPagedTokenToKVPoolAllocator.alloc_extend", "extend tail/dtype",
                              candidates, say, module_key="npu_alloc")
    fact["seed"] = EXTEND_IN_PAGE["seed"]
    tail, dtype = dict(fact), dict(fact)
    if fact["value"] is not None:
        tail["value"], dtype["value"] = str(fact["value"]).split("/")
    return {"extend_tail": tail, "extend_dtype": dtype}


def _learn_trtmha_fill(session: Sessions, modules: dict[str, Found | None], backends: dict[str, Any],
                       say: Progress) -> dict[str, Any]:
    """What TRT-LLM MHA's fused graph kernel stores in a row (``graph_fill``): each request's live
    pages, or every column of the row (0.5.15 and 0.5.16 mask by ``max_seq_pages`` only). Its
    kernel runs interpreted, so only where triton is cached, like the CUDA allocator's."""
    trtmha = "sglang-trtllm-mha-page-table"
    rule = backends.get(trtmha, {}).get("rule", {}).get("value")
    if modules["trtllm_mha_graph"] is None:
        return {"graph_fill": lr.absent_fact("no function update_trtllm_mha_graph_metadata in the wheel",
                                             "update_trtllm_mha_graph_metadata")}
    if rule is None or wheels.triton_dir() is None:
        return {}
    fact = lb.learn_behaviour(session, modules, "trtllm_mha_graph_metadata.update_trtllm_mha_graph_metadata",
                              "graph_fill", {fill: {"trtmha_graph_fill": fill, "backends": {trtmha: {"rule": rule}}}
                                             for fill in ("live-pages", "row-width")},
                              say, triton=True, module_key="trtllm_mha_graph")
    return {"graph_fill": fact}


def _learn_ascend_spec_fill(session: Sessions, modules: dict[str, Found | None], backends: dict[str, Any],
                            say: Progress) -> dict[str, Any]:
    """What the Ascend replay fills in a speculative step (``spec_fill``): what the step reads
    (``step-reads``), the verify's reads but only the committed length in a draft step
    (``verify-reads``: 0.5.4.post2 to 0.5.9), or the committed length in every mode
    (``committed``: to 0.5.4.post1); named by the CPU-mirror replay's states, the grid's
    verify and draft-step boundaries among them."""
    rule = backends.get("sglang-ascend-block-tables", {}).get("rule", {}).get("value")
    if modules["ascend"] is None or rule is None:
        return {}
    fact = lb.learn_behaviour(session, modules, "AscendAttnBackend.replay[mirror]", "spec_fill",
                              {fill: {"ascend_rule": rule, "ascend_spec_fill": fill}
                               for fill in ("step-reads", "verify-reads", "committed")}, say, module_key="ascend")
    return {"spec_fill": fact}


GRID_STATES = 200  # random states of the builder rows when naming the grid (about 7 s a row interpreted)


def _learn_mla_grids(session: Sessions, modules: dict[str, Found | None], backends: dict[str, Any],
                     say: Progress) -> dict[str, Any]:
    """How FlashMLA and TRT-LLM MLA launch ``create_flashmla_kv_indices_triton`` (``grid``): a program
    per request and block of the row (``row-blocks``) or one per request over all its pages
    (``per-request``, to 0.5.12.post1), named by the builder's states; only where triton is cached.
    The two differ only where a read reaches past the grid's last block (FlashMLA: a request table
    much wider than the context), so the row's full 200 states are run, not the usual 30. The rows
    and settings are the conformance builders' that learn a ``grid`` (``checks.BUILDERS``)."""
    from workbench.engines.checking.checks import BUILDERS

    found: dict[str, Any] = {}
    for function, builder in BUILDERS.items():
        setting = builder.learned.get("grid")
        rule = backends.get(builder.component, {}).get("rule", {}).get("value")
        if setting is None or modules[builder.module] is None or rule is None or wheels.triton_dir() is None:
            continue
        found[builder.component] = lb.learn_behaviour(
            session, modules, function, f"{builder.component} grid",
            {grid: {setting: grid, "backends": {builder.component: {"rule": rule}}} for grid in GRID_OPTIONS},
            say, triton=True, module_key=builder.module, count=GRID_STATES)
    return found


def _learn_cuda_allocator(session: Sessions, modules: dict[str, Found | None], say: Progress) -> dict[str, Any]:
    """The CUDA allocator's capacity check (before or after its kernel) and its merge bound: its
    Triton kernels run interpreted, so only where triton is cached (``workbench conformance --triton``)."""
    function = "PagedTokenToKVPoolAllocator.alloc_decode[triton]"
    if modules["paged"] is None:
        return {"cuda_gather": lr.absent_fact("no class PagedTokenToKVPoolAllocator in the wheel",
                                              "PagedTokenToKVPoolAllocator")}
    if wheels.triton_dir() is None:
        return {}
    gather = lb.learn_behaviour(session, modules, function, "cuda_gather",
                                {g: {"cuda_gather": g} for g in ("cuda-masked", "cuda-checked")}, say, triton=True,
                                module_key="paged")
    if gather["value"] is None:
        return {"cuda_gather": gather}
    merge = lb.learn_behaviour(session, modules, "PagedTokenToKVPoolAllocator.alloc_extend[triton]", "cuda_merge_bound",
                               {str(bound).lower(): {"cuda_gather": gather["value"], "cuda_merge_bound": bound}
                                for bound in (True, False)}, say, triton=True, module_key="paged")
    if merge["value"] is not None:
        merge["value"] = merge["value"] == "true"
    return {"cuda_gather": gather, "cuda_merge_bound": merge}


def finish_all(*, root: Path, progress: Progress) -> list[str]:
    """Drop this learner's section from every ``.postN`` whose modelled values (every field a case
    takes, the width generation) are its base release's: a .postN is kept where it changes one."""
    from workbench.engines.store.releases import releases
    from workbench.engines.store.versions import from_learned

    def modelled(engine: str) -> tuple[object, object] | None:
        section = (learned.load_from(engine, root) or {}).get("sections", {}).get(SECTION)
        if section is None:
            return None
        version = from_learned(engine, section, "")
        return version.fields, version.common

    notes = []
    same = _same_as_base(root)
    for engine in releases("sglang"):
        base = engine.split(".post")[0]
        if base == engine or modelled(engine) is None:
            continue
        if modelled(engine) == modelled(base):
            data = learned.load_from(engine, root) or {}
            same[engine] = {"base": base, "sha256": data.get("wheel", {}).get("sha256", ""), "learner": LEARNER}
            learned.drop_section(engine, SECTION, root=root)
            notes.append(f"{engine}: its modelled values are {base}'s: its {SECTION} section is not kept")
            progress(notes[-1])
        else:
            same.pop(engine, None)
            notes.append(f"{engine}: kept, it changes a modelled value of {base}")
    _write_same_as_base(root, same)
    return notes


SAME_AS_BASE = "same_as_base.json"  # under the root: the .postN learned equal to their base release


def _same_as_base(root: Path) -> dict[str, dict[str, str]]:
    path = root / SAME_AS_BASE
    found: dict[str, dict[str, str]] = json.loads(path.read_text()).get("sglang", {}) if path.exists() else {}
    return found


def _write_same_as_base(root: Path, same: dict[str, dict[str, str]]) -> None:
    """Which .postN were learned (from which wheel, by which learner) and found equal to their base:
    a later ``--all`` skips them as it skips a learned release."""
    path = root / SAME_AS_BASE
    data = json.loads(path.read_text()) if path.exists() else {
        "about": "The .postN releases whose learned buffer data equal their base release's: learned (from the "
                 "wheel whose sha256 is given, by the learner named), then not kept (workbench engines learn --all)."}
    data["sglang"] = dict(sorted(same.items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
