"""``workbench engines learn vllm==X``: one vLLM release's buffers, parser and defaults, from its own code.

``learn_release`` fetches the release (slim: its Python files) into the workbench's cache and
starts one worker process holding it (``learn_worker``), which finds each buffer's code by
what the release defines (``vllm_buffers.locate``) and runs it. Three sections of
``ROOT/vllm/X.json`` are written:

* ``buffers``: for each buffer the vLLM backends model, the rule of the workbench's model that
  agrees with the engine on every point of a grid (``learn_rules.name_rule``), the behaviour of a
  fill at the boundary (the engine's own error text), or ``absent`` with what was searched:
  the v1 block table's alignment (``MultiGroupBlockTable``), the DSA indexer's
  ``expanded_block_table_buffer`` alignment and its variable-length fill
  (``DeepseekV32IndexerMetadataBuilder``), V0's ``graph_block_tables`` width
  (``get_max_block_per_batch``) and each attention backend's row write (``build``);
* ``parser`` and ``launch``: what the launch adapter loaded from the release (its command line,
  its resolution), the parser's options, and what a reference DSA command resolves to;
* ``conformance``: the models against the release's functions, state by state
  (``conformance``: 200 seeded states per function, 1,000 for the newest release).

A release learned before from the same wheel by the same learner is skipped.
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from workbench.backends.vllm import indexer_block_table as indexer_model
from workbench.backends.vllm.v1_block_table import NAME as V1_TABLE
from workbench.backends.vllm.v1_waiting_pad import NAME as WAITING_PAD
from workbench.engines.learning import rules as lr
from workbench.engines.learning.learn import LearnError
from workbench.engines.sandbox.session import Session, SessionDied
from workbench.engines.store import learned, releases, wheels
from workbench.engines.vllm import (
    conformance as conformance_vllm,
)
from workbench.engines.vllm import (
    learn_async as learn_vllm_async,
)
from workbench.engines.vllm import (
    learn_kv as learn_vllm_kv,
)
from workbench.engines.vllm import (
    learn_pad as learn_vllm_pad,
)
from workbench.engines.vllm import (
    learn_v0_stop as learn_vllm_v0_stop,
)
from workbench.engines.vllm import (
    session as vllm_session,
)
from workbench.model.geometry import cdiv

LEARNER = "vllm-buffers 7"  # raise when what is learned or how changes: every release is learned again
SECTIONS = ("buffers", "parser", "launch", "conformance")
INDEXER = "vllm-indexer-block-table"
V0 = "vllm-v0-graph-block-tables"
Progress = Callable[[str], None]

# The DSA reference deployment the fill is classified at: vLLM 46074 (GLM-5.2, 0.23.0).
REFERENCE_46074 = {"max_model_len": 350000, "block_size": 64, "dcp": 1, "rows": 42}
# V0's: vLLM 5563 (capture length 8192, block size 16, 7 lookahead slots, one request at 8186).
REFERENCE_5563 = {"max_seq_len_to_capture": 8192, "block_size": 16, "lookahead": 7, "seq_len": 8186}


def grid(seed: str, count: int, dcp_exists: bool = True) -> list[list[int]]:
    """(max_model_len, block_size, dcp) points: the block sizes vLLM takes, lengths log-spread
    up to 1M tokens and at the alignment's edges, widths kept under 40,000 blocks. Without DCP in
    the release (``dcp_exists`` false) every point has dcp 1: no other is a state it can be in."""
    if not dcp_exists:
        return [[length, block, 1] for length, block, _ in grid(seed, count)]
    rng = random.Random(seed)
    points = [[350000, 64, 1], [300000, 64, 1], [350000, 48, 1], [350000, 256, 1], [131073, 16, 4], [1000, 200, 1],
              [4096, 1, 1], [163840, 64, 2]]
    while len(points) < count:
        block = rng.choice([1, 8, 16, 32, 48, 64, 96, 128, 200, 256])
        dcp = rng.choice([1, 1, 2, 4, 8])
        top = min(1_048_576, 40_000 * block * dcp)
        length = int(10 ** rng.uniform(2, len(str(top)) - 1)) if rng.random() < 0.5 else rng.randint(1, top)
        if rng.random() < 0.3:  # just past or at a multiple of the 128-token alignment
            length = max(1, (length // (128 * dcp)) * 128 * dcp + rng.choice([-1, 0, 1]))
        points.append([min(length, top), block, dcp])
    return points


def _alignment_candidates() -> dict[str, Callable[[Mapping[str, Any]], int]]:
    def rule(name: str) -> Callable[[Mapping[str, Any]], int]:
        align = indexer_model.ALIGNMENTS[name]
        return lambda s: align(cdiv(s["max_model_len"], s["block_size"] * s["dcp"]), s["block_size"])
    return {name: rule(name) for name in indexer_model.ALIGNMENTS}


def _states(points: list[list[int]]) -> list[Mapping[str, Any]]:
    return [{"max_model_len": p[0], "block_size": p[1], "dcp": p[2]} for p in points]


SAMPLES = 8


def with_samples(fact: dict[str, Any], points: list[tuple[Mapping[str, Any], int]]) -> dict[str, Any]:
    """``fact`` with a few of its measured points spread over the grid (state and the engine's
    answer): the offline tests run the named rule on them again."""
    step = max(1, len(points) // SAMPLES)
    fact.setdefault("samples", [{"state": dict(state), "engine": value} for state, value in points[::step][:SAMPLES]])
    return fact


def _measured_points(session: Session, task: str, points: list[list[int]]
                     ) -> tuple[list[tuple[Mapping[str, Any], int]], str | None]:
    answer = session.ask({"name": task, "points": points})
    if "error" in answer:
        return [], answer["error"]
    values = answer["values"]
    errors = [v["error"] for v in values if isinstance(v, dict)]
    if errors:
        return [], errors[0]
    return list(zip(_states(points), values)), None


def learn_table(session: Session, located: dict[str, Any], install: wheels.EngineInstall, say: Progress) -> dict[str, Any]:
    """The v1 block table's alignment, measured over the grid (``MultiGroupBlockTable``); where
    the table takes a width the model runner computes inline, read from that line."""
    found = located["block_table"]
    if found.get("found") is None:
        if found.get("takes") == "max_num_blocks_per_req":
            return _inline_width(install, found)
        return lr.absent_fact("the release has no v1 block table", found["searched"])
    points, error = _measured_points(session, "table_width", grid("table", 80, found.get("dcp", True)))
    if error:
        return lr.measured_fact(None, found["found"], 0, finding=f"the engine's code did not run: {error}")
    fact = with_samples(lr.name_rule(points, _alignment_candidates(), function=found["found"],
                                     keys=("max_model_len", "block_size", "dcp"), found=found["source"]), points)
    if not found.get("dcp", True):
        fact["dcp_exists"] = False  # measured at dcp 1 only: conformance's states are too
    say(f"block table: {fact['value'] or fact.get('finding')} ({len(points)} points)")
    return fact


_INLINE = re.compile(r"max_num_blocks_per_req\s*=\s*(cdiv\(.*\))\s*$")


def _inline_width(install: wheels.EngineInstall, found: dict[str, Any]) -> dict[str, Any]:
    """The model runner's own line computing the table's width (it runs in ``__init__``, which
    allocates on the device): ``none`` where it is the plain ``cdiv`` of the length by the block size."""
    for path in sorted((install.package_dir / "v1" / "worker").glob("*.py")):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            match = _INLINE.search(line)
            if match:
                plain = match.group(1).replace(" ", "") in ("cdiv(self.max_model_len,self.block_size)",
                                                            "cdiv(max_model_len,block_size)")
                return {"value": "none" if plain else None, "how": "read",
                        "source": f"vllm/v1/worker/{path.name}:{number}",
                        "reason": "computed inline in the model runner's __init__, which allocates on the device",
                        **({} if plain else {"finding": f"an expression the model does not know: {match.group(1)}"})}
    return {"value": None, "how": "read", "source": found["source"], "reason": "BlockTable takes the width as given",
            "finding": "no line computing max_num_blocks_per_req with cdiv in vllm/v1/worker"}


# The fit of ``--max-model-len auto`` lowers ``max_model_len`` after the block table is built at
# start-up (vLLM 46787, 46679); the metadata builders are made after it. Start-up lengths this many
# blocks above the final one: more than any alignment step (128 blocks at block size 1), so that a
# table kept at its start-up width is wider than any alignment of the final length.
STARTUP_EXTRA_BLOCKS = 128
REBUILT = ("widths-change", "kv-cache-init")  # rebuilt (or first built) at the final max_model_len


def with_startup_lengths(points: list[list[int]]) -> list[dict[str, int]]:
    """Each grid point twice: with the table built at the final length, and built at a start-up
    length above it (``table_max_model_len``) that the fit then lowered to the point's length."""
    states: list[dict[str, int]] = []
    for length, block, dcp in points:
        state = {"max_model_len": length, "block_size": block, "dcp": dcp}
        startup = (cdiv(length, block * dcp) + STARTUP_EXTRA_BLOCKS) * block * dcp
        states += [{**state, "table_max_model_len": length}, {**state, "table_max_model_len": startup}]
    return states


def _buffer_candidates(table_rule: object, rebuilt: object) -> dict[str, Callable[[Mapping[str, Any]], int]]:
    """The buffer's candidate forms: each alignment of the builder's own ``max_model_len``, and
    ``table``, the width of the block table as the model has it (``indexer_model.table_width``: the
    start-up length's unless the release rebuilds the table at the final length). Where the release
    rebuilds it, ``table`` is the table's alignment of the final length in every state, one form
    under two names: the alignment is left out and ``table`` stands for both."""
    candidates = _alignment_candidates()
    if table_rule not in candidates:
        return candidates
    version = indexer_model.IndexerVersion(str(table_rule), "table", str(rebuilt))

    def table(s: Mapping[str, Any]) -> int:
        case = indexer_model.IndexerCase(component=INDEXER, engine="-", max_model_len=s["max_model_len"],
                                         table_max_model_len=s.get("table_max_model_len"),
                                         block_size=s["block_size"], rows=1, dcp=s["dcp"])
        return indexer_model.table_width(case, version)
    if rebuilt in REBUILT:
        del candidates[str(table_rule)]
    return {**candidates, "table": table}


def learn_indexer(session: Session, located: dict[str, Any], table: dict[str, Any], rebuilt: dict[str, Any],
                  say: Progress) -> dict[str, Any]:
    """The indexer buffer's width form, measured on the grid widened by start-up lengths
    (``with_startup_lengths``). The builder is made as the model runner makes it once the KV cache
    is known (``runner_builder``): from the config's final ``max_model_len``, which is all it is
    given, the table's start-up length being no input of it (0.33.0 passes a width computed from
    the same config length, ``v1/worker/utils.py:308-316``), so the engine's width at a state is
    its width at the state's final length; what tells ``table`` from the alignments is the model's
    table, kept at its start-up width where the release does not rebuild it (0.20.1: ``none`` and
    ``table`` agree at equal lengths and nowhere else)."""
    found = located["indexer"]
    if found.get("found") is None:
        absent = lr.absent_fact("the release has no DSA indexer metadata builder", found["searched"])
        return {"buffer_alignment": absent, "fill": absent}
    grid_points = grid("indexer", 60)
    measured, error = _measured_points(session, "indexer_width", grid_points)
    if error:
        say(f"indexer buffer: the engine's code did not run: {error}")
        failed = lr.measured_fact(None, found["found"], 0, finding=f"the engine's code did not run: {error}")
        return {"buffer_alignment": failed, "fill": failed}
    if all(value is None for _, value in measured):
        say("indexer buffer: the builder allocates no expanded_block_table_buffer in this release")
        absent = lr.absent_fact("the indexer's metadata builder, made as the model runner makes it, allocates no "
                                "expanded_block_table_buffer", f"{found['found']}.__init__")
        return {"buffer_alignment": absent, "fill": absent}
    widths = [value for _, value in measured]
    points: list[tuple[Mapping[str, Any], int]] = [(state, widths[i // 2])
                                                   for i, state in enumerate(with_startup_lengths(grid_points))]
    points = points[::2] + points[1::2]  # the samples kept come from both halves: equal and start-up lengths
    table_rule = table.get("value")
    fact = lr.name_rule(points, _buffer_candidates(table_rule, rebuilt.get("value")),
                        function=f"{found['found']}.__init__",
                        keys=("max_model_len", "table_max_model_len", "block_size", "dcp"), found=found["source"])
    if fact["value"] == "table" and rebuilt.get("value") in REBUILT:
        fact["table_is"] = f"{table_rule} of the final max_model_len (the table is rebuilt: {rebuilt['value']})"
    with_samples(fact, points)
    say(f"indexer buffer: {fact['value'] or fact.get('finding')} ({len(points)} points)")
    return {"buffer_alignment": fact, "fill": _indexer_fill(session, found, table_rule, fact.get("value"), say)}


def _indexer_fill(session: Session, found: dict[str, Any], table_rule: object, buffer_rule: object,
                  say: Progress) -> dict[str, Any]:
    """What ``_prepare_decode_tensors`` does at the 46074 deployment, its widths as learned."""
    function = f"{found['found']}._prepare_decode_tensors[variable]"
    if table_rule is None or buffer_rule is None:
        return lr.measured_fact(None, function, 0, finding="no width rule to build the reference deployment with")
    reference = REFERENCE_46074
    version = indexer_model.IndexerVersion(str(table_rule), str(buffer_rule), "block-sizes-change")
    case = indexer_model.IndexerCase(component=INDEXER, engine="-", max_model_len=reference["max_model_len"],
                                     block_size=reference["block_size"], rows=reference["rows"], dcp=reference["dcp"])
    lens = indexer_model.decode_lens(case.rows, "variable")
    state = {**reference, "decode_lens": lens, "table_width": indexer_model.table_width(case, version)}
    answer = session.ask({"name": "indexer_fill", "states": [state]})
    value = answer["values"][0] if "values" in answer else {"error": answer.get("error")}
    if "buffer_width" not in value:
        return lr.measured_fact(None, function, 0, finding=f"the engine's code did not run: {value.get('error')}")
    outcome = "shape-error" if value["error"] else "ok"
    say(f"indexer fill at 46074's deployment: {outcome}")
    return lr.measured_fact(outcome, function, 1, reference=state, error=value["error"])


def learn_v0(session: Session, located: dict[str, Any], say: Progress) -> dict[str, Any]:
    found = located["v0_width"]
    if found.get("found") is None:
        absent = lr.absent_fact("the release has no V0 model runner (the V1 engine only)", found["searched"])
        return {"graph_width": absent, "row_write": absent}
    points = [[c, b] for c in (1, 100, 255, 256, 257, 1000, 8192, 8193, 32768) for b in (1, 7, 8, 16, 32)]
    answer = session.ask({"name": "v0_width", "points": points})
    values = answer.get("values", [])
    if "error" in answer or any(isinstance(v, dict) for v in values):
        return {"graph_width": lr.measured_fact(None, found["found"], 0, finding=str(answer.get("error") or values)),
                "row_write": lr.measured_fact(None, "build", 0, finding="no graph width")}
    pairs: list[tuple[Mapping[str, Any], int]] = [({"max_seq_len_to_capture": c, "block_size": b}, v)
                                                  for (c, b), v in zip(points, values)]
    width = with_samples(lr.name_rule(pairs, {"cdiv(max_seq_len_to_capture, block_size)":
                                              lambda s: cdiv(s["max_seq_len_to_capture"], s["block_size"])},
                                      function=found["found"], keys=("max_seq_len_to_capture", "block_size"),
                                      found=found["source"]), pairs)
    writes: dict[str, Any] = {}
    for backend, where in located["v0_builders"].items():
        writes[backend] = conformance_vllm.v0_row_write(session, backend, where, REFERENCE_5563)
        say(f"V0 {backend} row write: {writes[backend]['value'] or writes[backend].get('finding')}")
    if not writes:
        return {"graph_width": width, "row_write": lr.absent_fact("no V0 attention metadata builder with build()",
                                                                  "vllm.attention.backends.*MetadataBuilder")}
    return {"graph_width": width, "row_write": {"value": {b: f["value"] for b, f in writes.items()}, "how": "measured",
                                                "function": "; ".join(f["function"] for f in writes.values()),
                                                "states": sum(f["states"] for f in writes.values()),
                                                "per_backend": writes}}


def rebuilt_when(install: wheels.EngineInstall) -> dict[str, Any]:
    """When the model runner rebuilds the block table after start-up, read from the condition of
    its ``may_reinitialize_input_batch`` (it runs once the KV cache is allocated on the device):
    the ``if`` whose body makes a new ``self.input_batch``, found in the method's AST (a condition
    over several lines is one expression there), is ``widths-change`` where it compares the groups'
    block counts (``max_num_blocks``), else ``block-sizes-change`` where it compares block sizes
    (with those of start-up, ``self._init_block_sizes``, or with the configured one, 0.9.1's
    ``[self.cache_config.block_size]``)."""
    relative = "vllm/v1/worker/gpu_model_runner.py"
    path = install.src / relative
    if not path.exists():
        return _built_at_kv_cache_init(install) or lr.absent_fact("the release has no v1 GPU model runner", relative)
    return rebuild_condition(path.read_text(errors="replace"), relative)


def _makes_input_batch(node: ast.AST) -> bool:
    return any(isinstance(sub, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "input_batch"
                                                   for t in sub.targets) for sub in ast.walk(node))


def _compared_names(test: ast.expr) -> set[str]:
    """The names and attribute names of the operands of every ``!=`` in ``test``."""
    found: set[str] = set()
    for compare in (n for n in ast.walk(test) if isinstance(n, ast.Compare)):
        if any(isinstance(op, ast.NotEq) for op in compare.ops):
            for operand in (compare.left, *compare.comparators):
                found |= {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(operand)
                          if isinstance(n, (ast.Name, ast.Attribute))}
    return found


def rebuild_condition(text: str, relative: str) -> dict[str, Any]:
    """The rebuild rule of a model runner's source ``text`` (``rebuilt_when``)."""
    lines = text.splitlines()
    method = next((n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)
                   and n.name == "may_reinitialize_input_batch"), None)
    if method is None:
        return lr.absent_fact("no may_reinitialize_input_batch: the block table is built once, at start-up",
                              f"{relative}: may_reinitialize_input_batch")
    rebuild = next((n for n in ast.walk(method) if isinstance(n, ast.If) and any(_makes_input_batch(b) for b in n.body)),
                   None)
    if rebuild is None:
        return {"value": None, "how": "read", "source": f"{relative}:{method.lineno}",
                "reason": "no if in may_reinitialize_input_batch whose body makes a new input batch",
                "finding": "the rebuild condition is not one the model knows"}
    end = rebuild.test.end_lineno or rebuild.lineno
    last = next((i for i in range(end, len(lines) + 1) if lines[i - 1].rstrip().endswith(":")), end)
    source = f"{relative}:{rebuild.lineno}-{last}" if last != rebuild.lineno else f"{relative}:{last}"
    condition = " ".join((ast.get_source_segment(text, rebuild.test) or "").split())
    names = _compared_names(rebuild.test)
    if any("max_num_blocks" in n for n in names):
        value, what = "widths-change", "the groups' block counts"
    elif any("block_sizes" in n or n == "block_size" for n in names):
        value, what = "block-sizes-change", "block sizes only"
    else:
        return {"value": None, "how": "read", "source": source, "condition": condition,
                "reason": f"the rebuild condition `{condition}` compares neither block counts nor block sizes",
                "finding": "the rebuild condition is not one the model knows"}
    return {"value": value, "how": "read", "source": source, "condition": condition,
            "reason": f"the model runner rebuilds its input batch, once the KV cache is allocated on the device, "
                      f"when `{condition}`: it compares {what}"}


def _built_at_kv_cache_init(install: wheels.EngineInstall) -> dict[str, Any] | None:
    """``kv-cache-init`` where only the second model runner is left (0.34.0 on) and it builds its
    ``BlockTables`` inside ``initialize_kv_cache``: once, from the KV cache's own groups and the
    final ``max_model_len``, so there is no start-up table to rebuild."""
    relative = "vllm/v1/worker/gpu/model_runner.py"
    path = install.src / relative
    if not path.exists():
        return None
    lines = path.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if "def initialize_kv_cache" in line), None)
    if start is None:
        return None
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next((i for i in range(start + 1, len(lines))  # the signature's closing ") -> None:" is not the end
                if lines[i].strip() and not lines[i].lstrip().startswith(")")
                and len(lines[i]) - len(lines[i].lstrip()) <= indent), len(lines))
    built = next((i for i in range(start, end) if "self.block_tables = BlockTables(" in lines[i]), None)
    if built is None:
        return None
    return {"value": "kv-cache-init", "how": "read", "source": f"{relative}:{built + 1}",
            "reason": "the second model runner builds its block tables in initialize_kv_cache, once the KV cache's "
                      "groups are known, from the final max_model_len"}


def _parser_sections(session: Session, say: Progress) -> tuple[dict[str, Any], dict[str, Any]]:
    answer = session.ask({"name": "parser"})
    if "error" in answer:
        failed = lr.measured_fact(None, "the launch adapter's load", 0, finding=answer["error"])
        return {"learner": LEARNER, "status": failed}, {"learner": LEARNER, "status": failed}
    load, facts = answer["load"], answer["parser"]
    entry = (load.get("functions") or ["?"])[0]
    function = f"{entry}: the serve subcommand's parser (make_arg_parser, EngineArgs.add_cli_args)"
    parser: dict[str, Any] = {"learner": LEARNER}
    if load["parser"] == "loaded":
        parser.update({name: lr.measured_fact(facts[name], function, 1)
                       for name in ("options", "aliases", "abbreviations", "option_strings", "choices") if name in facts})
    else:
        parser["options"] = lr.measured_fact(None, "the release's console script (entry_points.txt)", 1,
                                             finding=load["parser"])
    say(f"parser: {load['parser']}" + (f", {facts.get('options')} options" if facts else ""))
    launch: dict[str, Any] = {
        "learner": LEARNER, "parser": lr.measured_fact(load["parser"], entry, 1),
        "resolution": lr.measured_fact(load["resolution"], "EngineArgs.create_engine_config", 1),
        "functions": lr.measured_fact(list(load.get("functions", [])), "the launch adapter's load", 1),
        "gpu": {"value": "h100", "how": "read", "source": "data/gpus.json", "reason": "the stand-in GPU the reference ran on"},
    }
    if load["resolution"] == "loaded":
        launch.update(_reference_defaults(session, say))
    return parser, launch


# What the reference command leaves to the engine (a small Llama: a model every release knows).
DEFAULTS = ("cache_config.block_size", "scheduler_config.max_num_seqs", "scheduler_config.max_num_batched_tokens",
            "model_config.max_model_len", "parallel_config.decode_context_parallel_size")


def _reference_defaults(session: Session, say: Progress) -> dict[str, Any]:
    """``vllm serve <a small Llama> --max-model-len 4096`` on a stand-in H100: its defaults."""
    argv = ["{model}", "--max-model-len", "4096"]
    answer = session.ask({"name": "resolve", "argv": argv, "model": "llama"})
    function = "EngineArgs.create_engine_config (usage_context OPENAI_API_SERVER, stand-in H100)"
    if answer.get("status") != "resolved":
        say(f"reference command: {answer.get('status')}: {answer.get('message', '')[:120]}")
        return {"reference": lr.measured_fact(None, function, 1, finding=f"{answer.get('status')}: {answer.get('message')}")}
    settings = answer["settings"]
    defaults = {name: lr.measured_fact(settings[name]["value"], function, 1, written_by=settings[name]["source"])
                for name in DEFAULTS if name in settings}
    say(f"reference command: resolved, block size {settings.get('cache_config.block_size', {}).get('value')}")
    return {"reference_command": "vllm serve <a two-layer Llama> --max-model-len 4096", "defaults": defaults}


def learn_release(engine: str, *, progress: Progress, root: Path) -> Path:
    say: Progress = lambda line: progress(f"{engine}: {line}")  # noqa: E731
    say("fetching the release (its Python files)")
    try:
        install = wheels.fetch(engine, progress=say)
    except wheels.FetchError as error:
        raise LearnError(str(error)) from None
    wheel = install.wheel
    if learned.is_current(engine, SECTIONS, LEARNER, wheel.get("sha256", ""), root=root):
        say(f"already learned from this wheel by {LEARNER}: skipped")
        _learn_apart(engine, progress, root)
        return learned.shipped_path(engine, root)
    states = 1000 if engine == releases.newest("vllm") else 200
    if wheels.triton_dir() is None:  # recent releases import with it only; the same set-up on every machine
        say("fetching triton (once, shared by every release)")
        try:
            wheels.fetch_triton()
        except wheels.FetchError as error:
            raise LearnError(str(error)) from None
    try:
        opened, located = vllm_session.open_session(install, say)
    except (RuntimeError, SessionDied) as error:
        raise LearnError(str(error)) from None
    try:
        with opened as session:
            parser, launch = _parser_sections(session, say)
            table = learn_table(session, located, install, say)
            rebuilt = rebuilt_when(install)
            indexer = learn_indexer(session, located, table, rebuilt, say)
            v0 = learn_v0(session, located, say)
            buffers = {"learner": LEARNER, "located": located, "backends": {
                INDEXER: {"table_alignment": table, **indexer, "table_rebuilt_when": rebuilt},
                V0: v0}}
            conformance = {"learner": LEARNER, "functions": conformance_vllm.run(session, buffers, states, seed=0, say=say)}
    except SessionDied as error:
        raise LearnError(str(error)) from None
    for name, content in (("buffers", buffers), ("parser", parser), ("launch", launch), ("conformance", conformance)):
        path = learned.write_section(engine, name, content, root=root, wheel=wheel)
    _learn_apart(engine, progress, root)
    return path


def _learn_apart(engine: str, progress: Progress, root: Path) -> None:
    """The sections with learners of their own (added later, so that adding one did not mean
    learning every release's other sections again): the KV cache manager's, the waiting pad's, the
    asynchronous scheduler's, the V0 engine's stop."""
    learn_vllm_kv.learn(engine, progress=progress, root=root)
    learn_vllm_pad.learn(engine, progress=progress, root=root)
    learn_vllm_async.learn(engine, progress=progress, root=root)
    learn_vllm_v0_stop.learn(engine, progress=progress, root=root)


# ---- the table of docs/releases-vllm-table.md -------------------------------------------------------


def _shown(fact: Mapping[str, Any] | None) -> str:
    if not isinstance(fact, Mapping):
        return "-"
    if fact.get("how") == "absent":
        return "absent"
    value = fact.get("value")
    if isinstance(value, dict):
        value = ", ".join(f"{k} {v}" for k, v in value.items())
    if value is None and fact.get("undetermined"):
        return f"undetermined: {' / '.join(map(str, fact['undetermined']))}"
    if value is None:
        return f"no rule: {str(fact.get('finding') or fact.get('reason'))[:60]}"
    return f"{value} ({'measured' if fact.get('how') == 'measured' else 'read'})"


def _stop_shown(facts: Mapping[str, Any]) -> str:
    """Which sequences the V0 engine ends, without and with asynchronous output ("-": never learned)."""
    if not facts:
        return "-"
    plain, asynchronous = facts.get("v0_stop", {}), facts.get("v0_async_stop", {})
    if plain.get("value") is None and plain.get("how") == "absent":
        return "absent"
    return f"{_shown(plain)} / {_shown(asynchronous)}"


def _kv_shown(facts: Mapping[str, Any], asynchronous: Mapping[str, Any]) -> str:
    """The v1 KV cache manager's policy and how the scheduler caps, synchronous and asynchronous
    ("-": never learned)."""
    if not facts:
        return "-"
    shown = f"{_shown(facts.get('slots'))}; scheduler {_shown(facts.get('scheduler_cap'))}"
    return f"{shown}; async {_shown(asynchronous.get('async_cap'))}" if asynchronous else shown


def table(engines: list[str]) -> str:
    """Markdown: per learned vLLM release, what loaded from it, the buffers found and how each was
    obtained, and its conformance (states agreeing of states run)."""
    lines = ["| release | parser (options) | resolution | block table | indexer buffer | indexer fill at 46074 | "
             "V0 graph width | V0 row write | V0 stop (sync / async output) | v1 KV slots and caps | waiting pad | "
             "conformance |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for engine in engines:
        data = learned.load(engine)
        if data is None:
            lines.append(f"| {engine} | not learned | | | | | | | | | | |")
            continue
        sections = data["sections"]
        parser = sections.get("parser", {}).get("options", {})
        shown_parser = str(parser.get("value")) if parser.get("value") is not None else f"not loaded: {parser.get('finding')}"
        resolution = sections.get("launch", {}).get("resolution", {}).get("value")
        backends = sections.get("buffers", {}).get("backends", {})
        indexer, graphs = backends.get(INDEXER, {}), backends.get(V0, {})
        kv = sections.get("kv", {})
        slots = kv.get("backends", {}).get(V1_TABLE, {})
        waiting = sections.get("pad", {})
        asynchronous = sections.get("async", {})
        stop = sections.get("v0-stop", {})
        rows = [*sections.get("conformance", {}).get("functions", []), *kv.get("conformance", []),
                *waiting.get("conformance", []), *asynchronous.get("conformance", []), *stop.get("conformance", [])]
        ran = [r for r in rows if r.get("skipped") is None]
        conformance = (f"{sum(r['agree'] for r in ran)} / {sum(r['states'] for r in ran)} ({len(ran)} functions)"
                       if ran else "-")
        lines.append(" | ".join([f"| {engine}", shown_parser, str(resolution or "-")[:40], _shown(indexer.get("table_alignment")),
                                 _shown(indexer.get("buffer_alignment")), _shown(indexer.get("fill")),
                                 _shown(graphs.get("graph_width")), _shown(graphs.get("row_write")),
                                 _stop_shown(stop.get("backends", {}).get(V0, {})),
                                 _kv_shown(slots, asynchronous.get("backends", {}).get(V1_TABLE, {})),
                                 _shown(waiting.get("backends", {}).get(WAITING_PAD, {}).get("waiting_pad")),
                                 conformance]) + " |")
    return "\n".join(lines)
