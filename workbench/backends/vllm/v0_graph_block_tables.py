"""vLLM V0: the CUDA graph's ``graph_block_tables`` and the lookahead slots (crash reports vLLM
5563 and 8145, fixed by PR 8340 in 0.6.2; docs/engine-facts.md#vllm-v0-graph-block-tables; each
release's fix measured from its own builders).

``ModelRunner`` keeps one numpy table for every captured graph, ``(max_batchsize_to_capture,
cdiv(max_seq_len_to_capture, block_size))`` int32 (``worker/model_runner.py`` 873-875, 1013-1015).
A decode batch replays a graph while its longest ``seq_len <= max_seq_len_to_capture`` (666-670);
otherwise it runs eagerly with a padded table of its own, which always fits. With multi-step
scheduling or speculative decoding the block manager reserves ``lookahead`` slots past the
sequence, so a request holds ``cdiv(seq_len + lookahead, block_size)`` blocks, and the metadata
builder writes the whole list into the graph's row:

    input_block_tables[i, :len(block_table)] = block_table        # numpy: no clamping on assignment

Worked example (5563 / 8145): capture length 8192, block size 16: rows of 512 blocks. With 7
lookahead slots, ``seq_len`` 8186 still replays the graph (8186 <= 8192) and holds
cdiv(8193, 16) = 513 blocks: ``could not broadcast input array from shape (513,) into shape (512,)``.
``seq_len`` 8185 holds cdiv(8192, 16) = 512 and fits.

The fix writes ``block_table[:max_blocks]`` when the list is longer (0.6.2: ``flash_attn.py``
512-524, ``flashinfer.py`` 605-617); the lookahead blocks it drops hold no token this step reads.
Which builder does which, release by release, is measured by running each release's own ``build``
at the 5563 boundary (``workbench engines learn``, field ``row_write``): flash-attn truncates from
0.6.1, flashinfer from 0.6.1.post1, and ``CommonMetadataBuilder`` (``attention/backends/utils.py``,
used by xformers) assigns the whole list in every V0 release.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from workbench.backends.case_backend import (
    BackendCase,
    BoolArray,
    CaseBackend,
    CaseSeed,
    IntArray,
    choice_field,
    int_field,
    int_list_field,
    reject_unknown,
)
from workbench.engines.store import vllm_releases
from workbench.model.geometry import cdiv
from workbench.model.outcome import Outcome, ProbeResult, invalid

NAME = "vllm-v0-graph-block-tables"
ATTENTION_BACKENDS = ("flash-attn", "flashinfer", "xformers")
DEFAULT_CAPTURE_LEN = 8192  # ModelConfig's max_seq_len_to_capture default
MAX_CAPTURE_LEN = 1 << 22  # a row of 4M tokens: past any model of the V0 era


GRAPH_WIDTH = "cdiv(max_seq_len_to_capture, block_size)"  # the width rule this model has


def row_writes() -> dict[str, Mapping[str, str]]:
    """Per release, per attention backend: ``assign`` (the whole list) or ``truncate`` (PR 8340);
    measured from the release's own builders (its learned file), else read by hand
    (``workbench.engines.store.vllm_releases``). A release whose graph table width is not this model's
    rule is left out (a finding in its learned file)."""
    found: dict[str, Mapping[str, str]] = {}
    for engine, facts in vllm_releases.learned_facts(NAME).items():
        width, writes = facts.get("graph_width", {}).get("value"), facts.get("row_write", {}).get("value")
        if width == GRAPH_WIDTH and isinstance(writes, dict):
            kept = {str(k): str(v) for k, v in writes.items() if v is not None and k in ATTENTION_BACKENDS}
            if kept:
                found[engine] = kept
    for engine, entry in vllm_releases.hand_read(NAME).items():
        if engine not in vllm_releases.learned_facts(NAME) and isinstance(entry.get("row_write"), dict):
            found[engine] = {str(k): str(v) for k, v in entry["row_write"].items()}
    return found


STOP_SECTION = "v0-stop"  # where the V0 engine stops a request (its own learner: ``vllm.learn_v0_stop``)
# Which sequences a V0 engine ends, by the tokens they hold: one holding max_model_len tokens
# (at-limit), or only one holding more (past-limit: a step still runs with max_model_len tokens
# held, on position max_model_len - 1).
STOPS: dict[str, Callable[[int, int], bool]] = {
    "at-limit": lambda held, limit: held >= limit,
    "past-limit": lambda held, limit: held > limit,
}


def last_step(form: str, max_model_len: int) -> int:
    """The largest committed length at which a request of a V0 engine that stops as ``form`` still
    gets a decode step: it holds that many tokens and one sampled, and is not ended."""
    return max(c for c in range(max_model_len - 3, max_model_len + 1) if not STOPS[form](c + 1, max_model_len))


def stop_forms() -> dict[str, tuple[str, str]]:
    """Per release with a V0 engine, which sequences it ends near ``max_model_len`` (``at-limit`` or
    ``past-limit``), without and with asynchronous output processing, measured by running its
    scheduler and stop checker (section ``v0-stop``, ``vllm.learn_v0_stop``)."""
    found: dict[str, tuple[str, str]] = {}
    for engine, facts in vllm_releases.learned_facts(NAME, section_name=STOP_SECTION).items():
        plain, asynchronous = (facts.get(name, {}).get("value") for name in ("v0_stop", "v0_async_stop"))
        if isinstance(plain, str) and isinstance(asynchronous, str):
            found[engine] = (plain, asynchronous)
    return found


@dataclass(frozen=True, kw_only=True)
class V0GraphCase(BackendCase):
    """One decode step that may replay a captured graph."""

    engine: str  # "vllm==0.6.0"
    max_seq_len_to_capture: int = DEFAULT_CAPTURE_LEN
    block_size: int
    lookahead: int  # slots reserved past each sequence (multi-step, speculative decoding)
    seq_lens: tuple[int, ...]  # the batch's sequence lengths, the token being decoded included
    attention_backend: str = "flash-attn"

    @property
    def graph_width(self) -> int:
        """Blocks per row of ``graph_block_tables``."""
        return cdiv(self.max_seq_len_to_capture, self.block_size)

    def blocks_held(self, seq_len: int) -> int:
        """Blocks the block manager has given a request: its tokens and the lookahead slots."""
        return cdiv(seq_len + self.lookahead, self.block_size)

    @property
    def replays_graph(self) -> bool:
        return max(self.seq_lens) <= self.max_seq_len_to_capture


def write_rows(graph_block_tables: np.ndarray, block_tables: list[list[int]], write: str) -> None:
    """The metadata builder's loop over the batch's rows; raises numpy's broadcast error."""
    max_blocks = graph_block_tables.shape[1]
    for i, block_table in enumerate(block_tables):
        if write == "truncate" and len(block_table) > max_blocks:
            graph_block_tables[i, :max_blocks] = block_table[:max_blocks]
        else:
            graph_block_tables[i, : len(block_table)] = block_table


def block_lists(held: list[int]) -> list[list[int]]:
    """The block manager's lists for requests holding ``held`` blocks: distinct physical block
    ids, consecutive, block 0 unused (``[2, 3]`` -> ``[[1, 2], [3, 4, 5]]``)."""
    lists, first = [], 1
    for blocks in held:
        lists.append(list(range(first, first + blocks)))
        first += blocks
    return lists


SEED_5563 = CaseSeed(
    name="vllm-5563",
    story="vLLM 0.6.0, block size 16, capture length 8192, 7 lookahead slots: seq_len 8186 needs a 513th block",
    failing={"component": NAME, "engine": "vllm==0.6.0", "block_size": 16, "lookahead": 7, "seq_lens": [8186]},
    expected_error="could not broadcast input array from shape (513,) into shape (512,)",
    passing=(
        {"component": NAME, "engine": "vllm==0.6.0", "block_size": 16, "lookahead": 7, "seq_lens": [8185]},
        {"component": NAME, "engine": "vllm==0.6.2", "block_size": 16, "lookahead": 7, "seq_lens": [8186]},
    ),
)


class V0GraphBlockTablesBackend(CaseBackend[V0GraphCase]):
    name = NAME
    engine = "vllm"
    device_family = "cuda"
    buffer_name = "graph_block_tables"
    fields = frozenset({"component", "engine", "max_seq_len_to_capture", "block_size", "lookahead", "seq_lens",
                        "attention_backend"})
    scan_field = "seq_lens"
    scan_label = "seq_len"  # the search runs one request
    launch_names = ("v0-graph-block-tables",)  # the V0 engine's model runner (preflight's resolve_vllm)
    seeds = (SEED_5563,)

    def launch_case(self, engine: str, max_model_len: int, block_size: int, extra: Mapping[str, object]) -> V0GraphCase | None:
        """One request decoding through the captured graph, its length searched (``boundary``):
        the capture length, lookahead and attention backend the release resolved."""
        backend, capture = extra.get("attention_backend"), extra.get("max_seq_len_to_capture")
        release = vllm_releases.data_release(engine, list(row_writes()))
        if release is None or backend not in row_writes()[release] or capture is None:
            return None
        engine = release
        return self.parse({"component": self.name, "engine": engine, "max_seq_len_to_capture": int(str(capture)),
                           "block_size": block_size, "lookahead": int(str(extra.get("lookahead", 0))),
                           "attention_backend": str(backend)}, boundary=True)
    boundary_rejects = ("seq_lens",)

    def release_cases(self) -> tuple[dict[str, object], ...]:
        return tuple({**SEED_5563.failing, "engine": engine, **({} if backend == "flash-attn" else {"attention_backend": backend})}
                     for engine, writes in row_writes().items() for backend in writes)

    def parse(self, data: Mapping[str, object], *, boundary: bool = False) -> V0GraphCase:
        reject_unknown(data, self.fields)
        choice_field(data, "engine", tuple(row_writes()))
        capture = int_field(data, "max_seq_len_to_capture", DEFAULT_CAPTURE_LEN)
        if capture > MAX_CAPTURE_LEN:
            raise ValueError(f"max_seq_len_to_capture: {capture} is out of range (allowed: 1 to {MAX_CAPTURE_LEN})")
        return V0GraphCase(
            component=str(data["component"]), engine=str(data["engine"]), max_seq_len_to_capture=capture,
            block_size=int_field(data, "block_size"), lookahead=int_field(data, "lookahead", low=0),
            seq_lens=(1,) if boundary else int_list_field(data, "seq_lens"),  # a boundary sets its own
            attention_backend=choice_field(data, "attention_backend", ATTENTION_BACKENDS, "flash-attn"),
        )

    def case_problem(self, case: V0GraphCase) -> str | None:
        writes = row_writes()[case.engine]
        if case.attention_backend not in writes:
            return (f"attention_backend: {case.attention_backend!r} has no measured row write in {case.engine} "
                    f"(measured: {', '.join(writes)})")
        if min(case.seq_lens) < 1:
            return f"seq_lens: {min(case.seq_lens)} is below 1 (a decoding sequence holds a token)"
        return None

    def probe(self, case: V0GraphCase, device: torch.device | str = "cpu") -> ProbeResult:
        problem = self.case_problem(case)
        if problem:
            return invalid(problem)
        return self.probe_with(case, row_writes()[case.engine][case.attention_backend], device)

    def probe_with(self, case: V0GraphCase, write: str, device: torch.device | str = "cpu") -> ProbeResult:
        """The step with the builder's row write ``write`` (``assign`` or ``truncate``)."""
        held = [case.blocks_held(s) for s in case.seq_lens]
        done = ProbeResult(Outcome.OK, None, buffer_width=case.graph_width, table_width=max(held),
                           reads=max(case.seq_lens), device=str(torch.device(device)), path="graph")
        if not case.replays_graph:  # eager: make_tensor_with_pad sizes the table to the batch
            return dataclasses.replace(done, path="eager")
        # (batch, graph_width) int32: the rows of the runner's table this batch size replays
        graph_block_tables = np.zeros((len(case.seq_lens), case.graph_width), dtype=np.int32)
        try:
            write_rows(graph_block_tables, block_lists(held), write)
        except ValueError as err:
            return dataclasses.replace(done, outcome=Outcome.SHAPE_ERROR, error=str(err))
        # A truncated row lost only lookahead blocks: the step reads seq_len <= the capture length,
        # which the row's cdiv(capture, block_size) blocks cover.
        return done

    def at(self, case: V0GraphCase, value: int) -> V0GraphCase:
        """One request of ``seq_len`` ``value``."""
        return V0GraphCase(component=case.component, engine=case.engine,
                           max_seq_len_to_capture=case.max_seq_len_to_capture, block_size=case.block_size,
                           lookahead=case.lookahead, seq_lens=(value,), attention_backend=case.attention_backend)

    def scan_range(self, case: V0GraphCase) -> tuple[int, int]:
        """Every ``seq_len`` a graph replays, and the first one past it (eager)."""
        return 1, case.max_seq_len_to_capture + 1

    def fails_grid(self, case: V0GraphCase, values: IntArray) -> BoolArray:
        """Closed form: the graph replays (``s <= capture``) and the held blocks pass its row,
        unless the backend truncates. First failure: ``graph_width * block_size - lookahead + 1``."""
        if row_writes()[case.engine][case.attention_backend] == "truncate":
            return np.zeros(len(values), dtype=bool)
        held = (values + case.lookahead + case.block_size - 1) // case.block_size
        return np.asarray((values <= case.max_seq_len_to_capture) & (held > case.graph_width), dtype=bool)


BACKEND = V0GraphBlockTablesBackend()
