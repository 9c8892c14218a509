"""vLLM v1: the DSA sparse indexer's ``expanded_block_table_buffer`` against the block table it is
filled from (crash report vLLM 46074, fixed by PR 50302;
docs/engine-facts.md#vllm-indexer-block-table).

The worker's block table (``v1/worker/block_table.py``) is ``(max_num_reqs, T)`` int32 with
``T = cdiv(max_model_len, block_size * dcp)`` blocks, aligned up by version:

* before PR 39324: not aligned;
* 0.23.0: to a multiple of ``128 // block_size`` blocks when ``block_size <= 128`` (260-265);
* 0.33.0: to a multiple of ``128 / gcd(128, block_size)`` blocks (``get_block_table_width``, 29-41).

The indexer's metadata builder keeps ``expanded_block_table_buffer``
``(max_num_batched_tokens, B)`` int32, one row per expanded query token (a request verifying k
draft tokens becomes k + 1 rows): 0.23.0 sizes ``B = cdiv(max_model_len, block_size * dcp)``
*unaligned* (indexer.py 307-318); 0.33.0 takes the table's aligned width (``utils.py`` 307-316).

Worked example (46074): ``max_model_len`` 350000, block size 64: 350000 / 64 = 5468.75, so 5469
blocks; 0.23.0 aligns the table to a multiple of 128 // 64 = 2, giving T = 5470, while B = 5469.
300000 gives 4687.5 -> 4688 blocks, already even, so T = B and the run is fine.

The table is built at start-up; a ``max_model_len`` reduced later (vLLM 46787, 46679) leaves it at
the old width in 0.23.0, whose runner rebuilds it only when block sizes change (6967-6969); 0.33.0
rebuilds it whenever a width changes (6867-6872). ``table_max_model_len`` is that start-up length.

DCP: both widths divide by the context-parallel size in the two releases read (0.23.0
``get_total_cp_world_size()`` in both; 0.33.0 ``AttentionSpec.max_num_blocks_per_req``, 610-615, for
both), so the DCP report 48404 (a buffer divided, a table not) is not a state these versions reach:
``dcp`` here divides both.

Three paths through ``_prepare_decode_tensors``:

* variable decode lengths: ``buf[:n] = torch.repeat_interleave(block_table, decode_lens, dim=0)``
  (0.23.0 427-431). The source rows are T wide, the destination B: torch's expand error when T != B.
* uniform decode lengths: a Triton kernel copies, per expanded row, B entries (the destination's
  stride) from the source row start (the source's stride). T > B truncates each row to its first B
  blocks; T < B reads past the row into the next request's. Nothing raises.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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
    reject_unknown,
)
from workbench.engines.store import vllm_releases
from workbench.model.geometry import cdiv
from workbench.model.outcome import Outcome, ProbeResult, invalid

NAME = "vllm-indexer-block-table"
PATHS = ("variable", "uniform", "native")
ALIGN_TOKENS = 128  # the token alignment TRT-LLM's kernels ask of the block table (PR 39324)
MAX_ROWS = 65536  # more expanded rows than any max_num_batched_tokens a probe needs
NEXT_N = 2  # query rows per request on the uniform path: MTP with one draft token (GLM-5.2's recipe)


# ---- widths, by version -------------------------------------------------------------------------


def align_none(blocks: int, block_size: int) -> int:
    """Before PR 39324, and the 0.23.0 indexer buffer: the block count as it is."""
    return blocks


def align_128_div_block_size(blocks: int, block_size: int) -> int:
    """0.23.0's table: up to a multiple of ``128 // block_size``; block sizes past 128 unaligned.

    Worked: 5469 blocks of 64 -> multiple of 2 -> 5470; block size 48 -> multiple of 2 (128 // 48).
    """
    if block_size > ALIGN_TOKENS:
        return blocks
    step = ALIGN_TOKENS // block_size
    return cdiv(blocks, step) * step


def align_128_div_gcd(blocks: int, block_size: int) -> int:
    """0.33.0's table and buffer: up to a multiple of ``128 / gcd(128, block_size)``.

    Worked: block size 48 -> gcd 16 -> multiple of 8 blocks (384 tokens, a multiple of 128).
    """
    step = ALIGN_TOKENS // math.gcd(ALIGN_TOKENS, block_size)
    return cdiv(blocks, step) * step


ALIGNMENTS = {"none": align_none, "128-div-block-size": align_128_div_block_size, "128-div-gcd": align_128_div_gcd}


@dataclass(frozen=True)
class IndexerVersion:
    """What one release does: measured from its own code (its learned file), else read by hand
    (``data/engines.json``, each value with its file and line): ``workbench.engines.store.vllm_releases``."""

    table_alignment: str  # a key of ALIGNMENTS
    buffer_alignment: str  # a key of ALIGNMENTS, or "table": the table's own width
    # "block-sizes-change" (0.23.0), "widths-change" (0.33.0) or "kv-cache-init" (0.34.0: built
    # once the KV cache is known, so from the final length as after a rebuild)
    table_rebuilt_when: str


FIELDS = ("table_alignment", "buffer_alignment", "table_rebuilt_when")


def versions() -> dict[str, IndexerVersion]:
    """Every release with this buffer whose widths are known, by ``vllm==X``, oldest first."""
    return {engine: IndexerVersion(str(v["table_alignment"]), str(v["buffer_alignment"]), str(v["table_rebuilt_when"]))
            for engine, v in vllm_releases.values(NAME, FIELDS).items()}


@dataclass(frozen=True, kw_only=True)
class IndexerCase(BackendCase):
    """One decode step of the sparse indexer's metadata builder."""

    engine: str  # "vllm==0.23.0"
    max_model_len: int  # what the builder sizes the buffer by
    table_max_model_len: int | None = None  # what the block table was built with; None: max_model_len
    block_size: int
    rows: int  # expanded query rows n: buf[:n] is written
    dcp: int = 1  # decode context parallel size: each rank holds 1/dcp of a request's tokens
    indexer_path: str = "variable"

    @property
    def built_len(self) -> int:
        return self.max_model_len if self.table_max_model_len is None else self.table_max_model_len


def table_width(case: IndexerCase, version: IndexerVersion) -> int:
    """The block table's blocks: sized at start-up, and rebuilt in 0.33.0 once a width changes."""
    length = case.max_model_len if version.table_rebuilt_when in ("widths-change", "kv-cache-init") else case.built_len
    return ALIGNMENTS[version.table_alignment](cdiv(length, case.block_size * case.dcp), case.block_size)


def buffer_width(case: IndexerCase, version: IndexerVersion) -> int:
    """The indexer buffer's blocks: from the builder's ``max_model_len``."""
    if version.buffer_alignment == "table":  # 0.33.0: the width shared with the (rebuilt) table
        return table_width(case, version)
    return ALIGNMENTS[version.buffer_alignment](cdiv(case.max_model_len, case.block_size * case.dcp), case.block_size)


def decode_lens(rows: int, path: str) -> list[int]:
    """Query rows per request that expand to ``rows``: whether a fill fails depends on the widths
    and ``rows`` only, so any split does. Uniform: NEXT_N each. Variable: one request whose drafts
    were cut short (1 row) among requests of 2, e.g. 42 -> [1, 2 x 20, 1], 5 -> [1, 2, 2]."""
    if path == "uniform":
        return [NEXT_N] * (rows // NEXT_N)
    if path == "native":
        return [1] * rows
    rest = rows - 1
    return [1] + [2] * (rest // 2) + [1] * (rest % 2)


# ---- the fill, on real tensors -------------------------------------------------------------------


def make_block_table(requests: int, width: int, device: torch.device | str) -> torch.Tensor:
    """The persistent block table: ``(requests + 1, width)`` int32, distinct block ids per entry.

    It has one row more than the batch, as ``max_num_reqs`` exceeds the decodes of a step: a copy
    that runs past the last request's row reads that spare row, not past the storage.
    """
    ids = torch.arange(1, (requests + 1) * width + 1, dtype=torch.int32, device=device)  # block 0 is the null block
    return ids.view(requests + 1, width)


def fill_variable(buffer: torch.Tensor, table: torch.Tensor, lens: list[int]) -> None:
    """The variable-length fill exactly as 0.23.0 writes it; raises torch's expand error."""
    n = sum(lens)
    counts = torch.as_tensor(lens, dtype=torch.int64, device=table.device)
    buffer[:n] = torch.repeat_interleave(table[: len(lens)], counts, dim=0, output_size=n)


def fill_uniform(buffer: torch.Tensor, table: torch.Tensor, requests: int, next_n: int) -> int:
    """The uniform kernel's copy: for expanded row ``idx``, entries ``0 .. B-1`` from the flat
    table at ``(idx // next_n) * T``. Returns the entries each row read past its source row's end.

    Worked: T 4, B 5, request 0: flat entries 0..4, the fifth being request 1's first block.
    """
    width, stride = buffer.shape[1], table.stride(0)
    flat = table.reshape(-1)
    idx = torch.arange(requests * next_n, device=table.device)
    start = (idx // next_n) * stride  # (n,) the source row's first entry
    offsets = start[:, None] + torch.arange(width, device=table.device)[None, :]  # (n, B)
    buffer[: len(idx)] = flat[offsets]
    return max(0, width - stride)


# ---- the backend ---------------------------------------------------------------------------------


SEED_46074 = CaseSeed(
    name="vllm-46074",
    story="GLM-5.2-FP8 on vLLM 0.23.0, block size 64, MTP, 42 expanded rows: the table is aligned, the buffer not",
    failing={"component": NAME, "engine": "vllm==0.23.0", "max_model_len": 350000, "block_size": 64, "rows": 42},
    expected_error=("The expanded size of the tensor (5469) must match the existing size (5470) at non-singleton "
                    "dimension 1.  Target sizes: [42, 5469].  Tensor sizes: [42, 5470]"),
    passing=(
        {"component": NAME, "engine": "vllm==0.33.0", "max_model_len": 350000, "block_size": 64, "rows": 42},
        {"component": NAME, "engine": "vllm==0.23.0", "max_model_len": 300000, "block_size": 64, "rows": 42},
        {"component": NAME, "engine": "vllm==0.23.0", "max_model_len": 230000, "block_size": 64, "rows": 42},
    ),
)


class IndexerBlockTableBackend(CaseBackend[IndexerCase]):
    name = NAME
    engine = "vllm"
    device_family = "cuda"
    buffer_name = "expanded_block_table_buffer"
    fields = frozenset({"component", "engine", "max_model_len", "table_max_model_len", "block_size", "rows", "dcp",
                        "indexer_path"})
    scan_field = "max_model_len"
    scan_is_request_length = False  # another max_model_len is another deployment
    launch_names = ("dsa-indexer",)  # the launch sets it up for a DSA model (preflight's resolve_vllm)
    eager_path = True  # the metadata builder fills it in every build(), graph or not (indexer.py 467 in 0.23.0)

    def launch_case(self, engine: str, max_model_len: int, block_size: int, extra: Mapping[str, object]) -> IndexerCase | None:
        """A decode step of two requests, one with its lookahead's query rows (``1 + k``) and one with
        a single row (the variable-length path, whose decode lengths differ): the widths, not the
        rows, decide the outcome, so the message names ``[2 + k, ...]`` where a report's batch names
        its own row count (46074: 42). Without speculation (no lookahead) every request decodes one
        row: the native path, on which the buffer is not written. A release never learned takes the
        nearest measured release's widths (``vllm_releases.data_release``)."""
        release = vllm_releases.data_release(engine, list(versions()))
        if release is None:
            return None
        engine = release
        lookahead = int(str(extra.get("lookahead", 0)))
        return self.parse({"component": self.name, "engine": engine, "max_model_len": max_model_len,
                           "block_size": block_size, "rows": 2 + lookahead, "dcp": int(str(extra.get("dcp_size", 1))),
                           "indexer_path": "variable" if lookahead else "native"})
    seeds = (SEED_46074,)
    boundary_rejects = ("table_max_model_len",)

    def release_cases(self) -> tuple[dict[str, object], ...]:
        return tuple({**SEED_46074.failing, "engine": engine} for engine in versions())

    def parse(self, data: Mapping[str, object], *, boundary: bool = False) -> IndexerCase:
        reject_unknown(data, self.fields)
        choice_field(data, "engine", tuple(versions()))
        path = choice_field(data, "indexer_path", PATHS, "variable")
        rows = int_field(data, "rows", 1)
        if rows > MAX_ROWS:
            raise ValueError(f"rows: {rows} is out of range (allowed: 1 to {MAX_ROWS})")
        return IndexerCase(
            component=str(data["component"]), engine=str(data["engine"]),
            max_model_len=int_field(data, "max_model_len"),
            table_max_model_len=int_field(data, "table_max_model_len") if "table_max_model_len" in data else None,
            block_size=int_field(data, "block_size"), rows=rows, dcp=int_field(data, "dcp", 1),
            indexer_path=path,
        )

    def case_problem(self, case: IndexerCase) -> str | None:
        if case.built_len < case.max_model_len:
            return (f"table_max_model_len: {case.built_len} is below max_model_len {case.max_model_len} "
                    "(the table is built at start-up; max_model_len is only reduced after it)")
        if case.indexer_path == "uniform" and case.rows % NEXT_N:
            return f"rows: {case.rows} is not a multiple of {NEXT_N} (uniform decode lengths of {NEXT_N} rows each)"
        if case.indexer_path == "variable" and case.rows < 3:
            return f"rows: {case.rows} is below 3 (variable decode lengths need a request of 2 rows and one of 1)"
        return None

    def probe(self, case: IndexerCase, device: torch.device | str = "cpu") -> ProbeResult:
        problem = self.case_problem(case)
        if problem:
            return invalid(problem)
        return self.probe_with(case, versions()[case.engine], device)

    def probe_with(self, case: IndexerCase, version: IndexerVersion, device: torch.device | str = "cpu") -> ProbeResult:
        """The step under the widths of ``version`` (conformance measures a release against it
        before its data is written)."""
        t_width, b_width = table_width(case, version), buffer_width(case, version)
        lens = decode_lens(case.rows, case.indexer_path)
        table = make_block_table(len(lens), t_width, device)  # (requests + 1, T) int32
        buffer = torch.zeros((case.rows, b_width), dtype=torch.int32, device=device)  # (n, B): rows past n change nothing
        result = ProbeResult(Outcome.OK, None, buffer_width=b_width, table_width=t_width,
                             device=str(torch.device(device)), path="eager")
        if case.indexer_path == "native":  # one query row per request: the buffer is not written
            return result
        try:
            if case.indexer_path == "variable":
                fill_variable(buffer, table, lens)
                return result
            past = fill_uniform(buffer, table, len(lens), NEXT_N)
        except RuntimeError as err:
            return ProbeResult(Outcome.SHAPE_ERROR, str(err), buffer_width=b_width, table_width=t_width,
                               device=result.device, path="eager")
        if past:
            message = (f"silent over-read: the uniform expansion copies {b_width} entries per row from "
                       f"block_table rows of {t_width}, {past} past each row's end")
            return ProbeResult(Outcome.SILENT_OVERREAD, message, buffer_width=b_width, table_width=t_width,
                               device=result.device, path="eager")
        # T > B truncates each row to its first B blocks: a request capped at max_model_len holds
        # cdiv(max_model_len, block_size * dcp) <= B of them, so every block the indexer reads is kept.
        return result

    def scan_range(self, case: IndexerCase) -> tuple[int, int]:
        """From the case's ``max_model_len`` over one period of the alignment: ``lcm(128, block_size)
        * dcp`` tokens, after which the widths repeat up to a constant."""
        period = math.lcm(ALIGN_TOKENS, case.block_size) * case.dcp
        return case.max_model_len, case.max_model_len + period - 1

    def fails_grid(self, case: IndexerCase, values: IntArray) -> BoolArray:
        """Closed form, with ``table_max_model_len`` following ``max_model_len``: on the variable path
        a step fails iff the table's aligned width differs from the buffer's; the uniform path never
        fails while the table is at least as wide."""
        version = versions()[case.engine]
        blocks = (values + case.block_size * case.dcp - 1) // (case.block_size * case.dcp)
        t_width = _align_grid(version.table_alignment, blocks, case.block_size)
        b_width = t_width if version.buffer_alignment == "table" else _align_grid(
            version.buffer_alignment, blocks, case.block_size)
        if case.indexer_path == "native":
            return np.zeros(len(values), dtype=bool)
        if case.indexer_path == "uniform":
            return np.asarray(b_width > t_width, dtype=bool)
        return np.asarray(t_width != b_width, dtype=bool)


def _align_grid(alignment: str, blocks: IntArray, block_size: int) -> IntArray:
    """``ALIGNMENTS[alignment]`` over a vector of block counts (the block size is one value)."""
    if alignment == "none" or (alignment == "128-div-block-size" and block_size > ALIGN_TOKENS):
        return blocks
    step = ALIGN_TOKENS // block_size if alignment == "128-div-block-size" else ALIGN_TOKENS // math.gcd(
        ALIGN_TOKENS, block_size)
    out: IntArray = (blocks + step - 1) // step * step
    return out


BACKEND = IndexerBlockTableBackend()
