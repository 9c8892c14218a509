"""Conformance for a vLLM release: the vLLM backends' models against the release's own functions.

The release runs in a learn worker (``learn_worker``: its modules loaded once, on a stand-in
GPU; opened and asked through ``session``); the models run here, with the release's learned
data (``buffers``: the widths' alignments, each backend's row write). Every function gets the same
seeded states for every release (``random.Random(f"{seed}:{function}")``), and a state agrees when the engine and the model give
the same answer: the same width, or the same outcome with the same error text (torch's, numpy's)
and, where the step runs, the same rows written.

Functions (each only where the release has it, ``vllm_buffers.locate``):

* ``MultiGroupBlockTable`` width, against the indexer backend's ``table_width``;
* ``DeepseekV32IndexerMetadataBuilder.__init__`` (the ``expanded_block_table_buffer`` width,
  made through the runner's ``AttentionGroup``), against ``buffer_width``;
* ``DeepseekV32IndexerMetadataBuilder._prepare_decode_tensors[variable]`` on a decode batch whose
  lengths differ, against the backend's probe (the expand error, or the rows' checksum);
* ``get_max_block_per_batch`` (V0's graph table width), against ``graph_width``;
* each V0 attention backend's ``build`` writing a decode batch's block lists into the graph
  table, against ``write_rows`` with the backend's learned row write;
* ``KVCacheManager.allocate_slots`` (a request's blocks near ``max_model_len``), against the v1
  block table backend's ``allocation`` with the release's learned policy, and ``Scheduler.schedule``
  against its ``decode_step`` with the learned cap (``learn_kv``; run by ``run_version`` where
  the release's ``kv`` section was learned);
* ``Scheduler.schedule`` on a prompt sent again near ``max_model_len`` (the scheduler's padding of a
  waiting request), against the waiting-pad backend's ``first_step`` with the release's learned form
  (``learn_pad``; where the ``pad`` section was learned);
* ``AsyncScheduler.schedule`` on a request run to its end with the step before in flight, against
  the cap form learned for it (``learn_async``; where the ``async`` section measured one);
* the V0 ``Scheduler.schedule`` and ``StopChecker`` on a request near ``max_model_len``, with and
  without asynchronous output processing, against the stop forms learned for them
  (``learn_v0_stop``; where the ``v0-stop`` section measured them).

``workbench conformance --engine vllm==X`` prints these rows; ``learn`` records them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.backends.vllm import indexer_block_table as ib
from workbench.backends.vllm import v0_graph_block_tables as v0
from workbench.engines.learning import rules as lr
from workbench.engines.sandbox.session import Session
from workbench.engines.store import wheels
from workbench.engines.vllm.session import Progress, Row, ask_all, open_session, row, skipped
from workbench.model.geometry import cdiv

# ---- states ------------------------------------------------------------------------------------------


def width_states(rng: random.Random, count: int) -> list[list[int]]:
    """(max_model_len, block_size, dcp): block sizes vLLM takes, lengths up to 1M tokens and at
    multiples of the 128-token alignment, widths under 40,000 blocks (the buffers are allocated)."""
    points = []
    for _ in range(count):
        block = rng.choice([1, 8, 16, 32, 48, 64, 96, 128, 200, 256])
        dcp = rng.choice([1, 1, 2, 4, 8])
        top = min(1_048_576, 40_000 * block * dcp)
        length = rng.randint(1, top)
        if rng.random() < 0.4:
            length = max(1, min(top, (length // (128 * dcp)) * 128 * dcp + rng.choice([-1, 0, 1])))
        points.append([length, block, dcp])
    return points


def _version(buffers: dict[str, Any]) -> ib.IndexerVersion | None:
    facts = buffers["backends"][ib.NAME]
    table, buffer = facts["table_alignment"].get("value"), facts["buffer_alignment"].get("value")
    if table is None or buffer is None:
        return None
    return ib.IndexerVersion(str(table), str(buffer), str(facts["table_rebuilt_when"].get("value") or "block-sizes-change"))


def _case(state: Sequence[int], rows: int = 4) -> ib.IndexerCase:
    return ib.IndexerCase(component=ib.NAME, engine="-", max_model_len=state[0], block_size=state[1], rows=rows, dcp=state[2])


# ---- the rows ------------------------------------------------------------------------------------------


def tablerow(session: Session, buffers: dict[str, Any], count: int, seed: int) -> Row:
    table = buffers["located"]["block_table"]["found"].rsplit(".", 1)[-1]  # MultiGroupBlockTable; BlockTables from 0.34.0
    function = f"{table} (block table width)"
    fact = buffers["backends"][ib.NAME]["table_alignment"]
    if fact.get("how") != "measured" or fact.get("value") is None:
        return skipped(function, f"no measured table alignment ({fact.get('reason') or fact.get('finding')})")
    rule = ib.ALIGNMENTS[str(fact["value"])]
    points = width_states(random.Random(f"{seed}:{function}"), count)
    if fact.get("dcp_exists") is False:  # a release without DCP runs at dcp 1 only
        points = [[length, block, 1] for length, block, _ in points]
    engine = ask_all(session, "table_width", "points", points)
    return row(function, ((dict(zip(("max_model_len", "block_size", "dcp"), p)), e,
                            rule(cdiv(p[0], p[1] * p[2]), p[1])) for p, e in zip(points, engine)))


def indexer_widthrow(session: Session, buffers: dict[str, Any], count: int, seed: int) -> Row:
    function = "DeepseekV32IndexerMetadataBuilder.__init__ (expanded_block_table_buffer width)"
    version = _version(buffers)
    if version is None:
        return skipped(function, "the release has no indexer buffer, or its widths were not measured")
    points = width_states(random.Random(f"{seed}:{function}"), count)
    engine = ask_all(session, "indexer_width", "points", points)
    return row(function, ((dict(zip(("max_model_len", "block_size", "dcp"), p)), e, ib.buffer_width(_case(p), version))
                           for p, e in zip(points, engine)))


def _model_fill(case: ib.IndexerCase, version: ib.IndexerVersion) -> dict[str, Any]:
    """The backend's variable-length fill: the error, or the checksum of the rows it wrote."""
    import torch

    t_width, b_width = ib.table_width(case, version), ib.buffer_width(case, version)
    lens = ib.decode_lens(case.rows, "variable")
    table = ib.make_block_table(len(lens), t_width, "cpu")
    buffer = torch.zeros((case.rows, b_width), dtype=torch.int32)
    try:
        ib.fill_variable(buffer, table, lens)
    except RuntimeError as error:
        return {"error": str(error), "buffer_width": b_width}
    return {"error": None, "buffer_width": b_width, "rows_checksum": int(buffer.long().sum())}


def indexer_fillrow(session: Session, buffers: dict[str, Any], count: int, seed: int) -> Row:
    function = "DeepseekV32IndexerMetadataBuilder._prepare_decode_tensors[variable]"
    version = _version(buffers)
    if version is None:
        return skipped(function, "the release has no indexer buffer, or its widths were not measured")
    fill = buffers["backends"][ib.NAME].get("fill", {})
    if fill.get("value") is None:  # the release's builder has no such step (0.17.0 to 0.19.1)
        return skipped(function, f"no learned fill ({fill.get('finding') or fill.get('reason') or 'not measured'})")
    rng = random.Random(f"{seed}:{function}")
    cases = [_case(p, rows=rng.randint(3, 96)) for p in width_states(rng, count)]
    states = [{"max_model_len": c.max_model_len, "block_size": c.block_size, "dcp": c.dcp,
               "decode_lens": ib.decode_lens(c.rows, "variable"), "table_width": ib.table_width(c, version)} for c in cases]
    engine = ask_all(session, "indexer_fill", "states", states)
    return row(function, ((s, e, _model_fill(c, version)) for s, c, e in zip(states, cases, engine)))


def v0_widthrow(session: Session, count: int, seed: int) -> Row:
    function = "get_max_block_per_batch (graph_block_tables width)"
    rng = random.Random(f"{seed}:{function}")
    points = [[rng.choice([rng.randint(1, 512), rng.randint(1, 1 << 17), 8192, 8193]), rng.choice([1, 8, 16, 32, 64])]
              for _ in range(count)]
    engine = ask_all(session, "v0_width", "points", points)
    return row(function, (({"max_seq_len_to_capture": c, "block_size": b}, e,
                            v0.V0GraphCase(component=v0.NAME, engine="-", max_seq_len_to_capture=c, block_size=b,
                                           lookahead=0, seq_lens=(1,)).graph_width) for (c, b), e in zip(points, engine)))


def _v0_state(rng: random.Random) -> v0.V0GraphCase:
    capture = rng.choice([rng.randint(8, 600), 8192])
    block = rng.choice([1, 8, 16, 32])
    lookahead = rng.choice([0, 1, 3, 7, rng.randint(0, 40)])
    width = cdiv(capture, block)
    edge = width * block - lookahead  # the longest seq_len whose blocks still fit the row
    lens = tuple(max(1, min(capture, rng.choice([edge, edge + 1, edge - 1, rng.randint(1, capture)])))
                 for _ in range(rng.randint(1, 4)))
    return v0.V0GraphCase(component=v0.NAME, engine="-", max_seq_len_to_capture=capture, block_size=block,
                          lookahead=lookahead, seq_lens=lens)


def _v0_model(case: v0.V0GraphCase, write: str) -> dict[str, Any]:
    held = [case.blocks_held(s) for s in case.seq_lens]
    rows = np.zeros((len(held), case.graph_width), dtype=np.int32)
    try:
        v0.write_rows(rows, v0.block_lists(held), write)
    except ValueError as error:
        return {"error": str(error)}
    return {"error": None, "rows": rows.tolist()}


def _v0_engine(answer: Any) -> dict[str, Any]:
    """The engine's build: its error, or the rows it wrote (a stand-in that stops the build after
    the rows counts as no error: the rows are what it wrote)."""
    if not isinstance(answer, dict) or "rows" not in answer:
        return {"error": f"did not run: {answer}"}
    error = answer["error"]
    if error is None or str(error).startswith("after the rows"):
        return {"error": None, "rows": answer["rows"]}
    return {"error": error}


def _v0_task(case: v0.V0GraphCase, backend: str) -> dict[str, Any]:
    held = [case.blocks_held(s) for s in case.seq_lens]
    return {"backend": backend, "graph_width": case.graph_width, "seq_lens": list(case.seq_lens),
            "block_tables": v0.block_lists(held)}


def v0_rowsrow(session: Session, backend: str, write: str, count: int, seed: int) -> Row:
    function = f"{backend} MetadataBuilder.build (graph_block_tables rows)"
    rng = random.Random(f"{seed}:{function}")
    cases = [c for c in (_v0_state(rng) for _ in range(count * 2)) if c.replays_graph][:count]
    engine = ask_all(session, "v0_rows", "states", [_v0_task(c, backend) for c in cases])
    return row(function, ((_v0_task(c, backend) | {"lookahead": c.lookahead}, _v0_engine(e), _v0_model(c, write))
                           for c, e in zip(cases, engine)))


def v0_row_write(session: Session, backend: str, where: dict[str, Any], reference: dict[str, int]) -> dict[str, Any]:
    """Which row write (``assign`` or ``truncate``) the backend's ``build`` does, named from the
    answers at the boundary of the 5563 deployment and of a short capture length."""
    cases = []
    for capture, block, lookahead in ((reference["max_seq_len_to_capture"], reference["block_size"], reference["lookahead"]),
                                      (64, 16, 9), (100, 8, 3)):
        edge = cdiv(capture, block) * block - lookahead
        for lens in ((edge,), (edge + 1,), (edge + 1, 3), (max(1, edge - 5), edge + 1)):
            cases.append(v0.V0GraphCase(component=v0.NAME, engine="-", max_seq_len_to_capture=capture, block_size=block,
                                        lookahead=lookahead, seq_lens=tuple(min(s, capture) for s in lens)))
    answer = session.ask({"name": "v0_rows", "states": [_v0_task(c, backend) for c in cases]})
    if "error" in answer:
        return lr.measured_fact(None, where["found"], 0, finding=f"the engine's code did not run: {answer['error']}")
    engine = [_v0_engine(a) for a in answer["values"]]
    results = {}
    for write in ("assign", "truncate"):
        results[write] = row(write, ((_v0_task(c, backend), e, _v0_model(c, write)) for c, e in zip(cases, engine)))
    fact = lr.name_candidate(results, function=where["found"], found=where["source"])
    at = next((e["error"] for c, e in zip(cases, engine) if c.seq_lens == (reference["seq_len"],)), None)
    fact["at_reference"] = {"state": reference, "error": at}
    return fact


def run(session: Session, buffers: dict[str, Any], states: int, *, seed: int = 0,
        say: Progress = lambda line: None) -> list[Row]:
    """Every conformance row of the release the session holds, ``states`` states each."""
    located = buffers["located"]
    rows = []
    if located["block_table"].get("found"):
        rows.append(tablerow(session, buffers, states, seed))
    if located["indexer"].get("found"):
        rows.append(indexer_widthrow(session, buffers, states, seed))
        rows.append(indexer_fillrow(session, buffers, states, seed))
    if located["v0_width"].get("found"):
        rows.append(v0_widthrow(session, states, seed))
        writes = buffers["backends"][v0.NAME]["row_write"].get("value") or {}
        for backend in located["v0_builders"]:
            if backend in writes and writes[backend] is not None:
                rows.append(v0_rowsrow(session, backend, str(writes[backend]), states, seed))
            else:
                rows.append(skipped(f"{backend} MetadataBuilder.build", "its row write was not learned"))
    for done in rows:
        say(f"conformance {done['function']}: {done['agree']} of {done['states']} agree"
            + (f" (skipped: {done['skipped']})" if done["skipped"] else ""))
    return rows


def run_version(engine: str, *, states: int, seed: int = 0) -> list[Row]:
    """Every row of ``engine`` (``workbench conformance --engine vllm==X``), against the release's
    learned data (``learned.py``: ``workbench engines learn`` writes it); ValueError when the
    release was never learned, FetchError when it can be neither fetched nor found."""
    from workbench.engines.store import learned

    section = learned.section(engine, "buffers")
    if section is None:
        raise ValueError(f"engine: {engine!r} was never learned (workbench engines learn {engine})")
    if "located" not in section:  # vllm-ascend: its drafter runs on an NPU only, so it was read, not run
        return [{"engine": engine, **skipped("drafter (spec_decode proposers)", "read from its code: it runs on an NPU only")}]
    install = wheels.fetch(engine)
    try:
        session, _ = open_session(install)
    except RuntimeError as error:
        raise ValueError(f"{engine}: {error}") from None
    with session:
        rows = run(session, section, states, seed=seed)
        kv = learned.section(engine, "kv")
        if kv is not None:  # the v1 KV cache manager's facts, learned apart (learn_vllm_kv)
            from workbench.backends.vllm.v1_block_table import NAME
            from workbench.engines.vllm import learn_kv as learn_vllm_kv

            facts = kv["backends"][NAME]
            rows.append(learn_vllm_kv.conformance_row(session, facts, states, seed))
            if facts["scheduler_cap"]["how"] == "measured":
                rows.append(learn_vllm_kv.step_row(session, facts, states, seed))
        waiting = learned.section(engine, "pad")
        if waiting is not None:  # the scheduler's waiting pad, learned apart (learn_vllm_pad)
            from workbench.backends.vllm.v1_waiting_pad import NAME as PAD
            from workbench.engines.vllm import learn_pad as learn_vllm_pad

            rows.append(learn_vllm_pad.conformance_row(session, waiting["backends"][PAD], states, seed))
        asynchronous = learned.section(engine, "async")
        if asynchronous is not None:  # the asynchronous scheduler's cap, learned apart (learn_vllm_async)
            from workbench.backends.vllm.v1_block_table import NAME as TABLE
            from workbench.engines.vllm import learn_async as learn_vllm_async

            facts = asynchronous["backends"][TABLE]
            if facts["async_cap"]["how"] == "measured":
                rows.append(learn_vllm_async.conformance_row(session, facts, states, seed))
        stop = learned.section(engine, "v0-stop")
        if stop is not None:  # where the V0 engine stops a request, learned apart (learn_vllm_v0_stop)
            from workbench.engines.vllm import learn_v0_stop as learn_vllm_v0_stop

            rows += learn_vllm_v0_stop.conformance_rows(session, stop["backends"][learn_vllm_v0_stop.COMPONENT], states, seed)
    return [{"engine": engine, **row} for row in rows]
