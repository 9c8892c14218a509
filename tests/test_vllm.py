"""vLLM's buffers as case backends (issue 13, item 3): the indexer's ``expanded_block_table_buffer``
against the v1 block table, and V0's ``graph_block_tables`` with lookahead slots.

Expected values: the crash reports' exact messages (docs/engine-facts.md#vllm-46074, #vllm-5563), the widths restated
below from vLLM's code in plain integer arithmetic (``block_table.py``, ``indexer.py``,
``model_runner.py``), executed scans, and, where the wheel is cached, vLLM's own functions run on
the CPU (``vllm_released.py``, in a subprocess).
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from workbench.analysis.cases import parse_case
from workbench.analysis.probe import probe
from workbench.analysis.records import boundary_record, probe_record
from workbench.backends import case_backend_of, case_seeds, is_case_backend, is_table_backend
from workbench.backends.vllm.indexer_block_table import IndexerCase, fill_uniform, make_block_table
from workbench.backends.vllm.v0_graph_block_tables import V0GraphCase, write_rows
from workbench.engines.store import wheels

INDEXER = "vllm-indexer-block-table"
V0 = "vllm-v0-graph-block-tables"
SEED_46074 = {"component": INDEXER, "engine": "vllm==0.23.0", "max_model_len": 350000, "block_size": 64, "rows": 42}
SEED_5563 = {"component": V0, "engine": "vllm==0.6.0", "block_size": 16, "lookahead": 7, "seq_lens": [8186]}
MESSAGE_46074 = ("The expanded size of the tensor (5469) must match the existing size (5470) at non-singleton "
                 "dimension 1.  Target sizes: [42, 5469].  Tensor sizes: [42, 5470]")
MESSAGE_5563 = "could not broadcast input array from shape (513,) into shape (512,)"


def expand_message(rows: int, dst: int, src: int) -> str:
    return (f"The expanded size of the tensor ({dst}) must match the existing size ({src}) at non-singleton "
            f"dimension 1.  Target sizes: [{rows}, {dst}].  Tensor sizes: [{rows}, {src}]")


# ---- the widths, restated from vLLM's code ---------------------------------------------------------


def ref_table_width(engine: str, length: int, block_size: int, dcp: int) -> int:
    """block_table.py: 0.23.0 260-265 (multiple of 128 // bs when bs <= 128); 0.33.0 29-41 (gcd)."""
    blocks = -(-length // (block_size * dcp))
    if engine == "vllm==0.23.0":
        step = 128 // block_size if block_size <= 128 else 1
    else:
        step = 128 // math.gcd(128, block_size)
    return -(-blocks // step) * step


def ref_buffer_width(engine: str, length: int, block_size: int, dcp: int) -> int:
    """indexer.py: 0.23.0 307-318 unaligned; 0.33.0 the table's width (utils.py 307-316)."""
    if engine == "vllm==0.23.0":
        return -(-length // (block_size * dcp))
    return ref_table_width(engine, length, block_size, dcp)


def _cli(command: str, cases: list[dict[str, object]]) -> list[dict[str, object]]:
    text = "".join(json.dumps(c) + "\n" for c in cases)
    done = subprocess.run([sys.executable, "-m", "workbench", command, "--cases", "-"], input=text,
                          capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


# ---- seeds ------------------------------------------------------------------------------------------


def test_the_seed_cases_give_the_reports_messages_through_probe_cases() -> None:
    seeds = {s.name: s for s in case_seeds()}
    cases = [SEED_46074, *seeds["vllm-46074"].passing, SEED_5563, *seeds["vllm-5563"].passing]
    out = _cli("probe", cases)
    assert out[0] == {"outcome": "shape-error", "error": MESSAGE_46074, "buffer_width": 5469, "table_width": 5470,
                      "device": "cpu"}
    assert [(r["outcome"], r["buffer_width"], r["table_width"]) for r in out[1:4]] == [
        ("ok", 5470, 5470), ("ok", 4688, 4688), ("ok", 3594, 3594)]  # 0.33.0 at 350000; 300000, 230000
    assert [(c["engine"], c["max_model_len"]) for c in cases[1:4]] == [
        ("vllm==0.33.0", 350000), ("vllm==0.23.0", 300000), ("vllm==0.23.0", 230000)]
    assert out[4] == {"outcome": "shape-error", "error": MESSAGE_5563, "buffer_width": 512, "table_width": 513,
                      "reads": 8186, "device": "cpu"}
    assert [(r["outcome"], r["table_width"]) for r in out[5:]] == [("ok", 512), ("ok", 513)]  # 8185; 0.6.2 truncates
    assert seeds["vllm-46074"].expected_error == MESSAGE_46074 and seeds["vllm-5563"].expected_error == MESSAGE_5563


def test_the_registry_knows_both_kinds_apart() -> None:
    assert is_case_backend(INDEXER) and is_case_backend(V0)
    assert not is_table_backend(INDEXER) and not is_case_backend("dsa-page-table")


# ---- the indexer --------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm==0.23.0", "vllm==0.33.0"])
@pytest.mark.parametrize(("length", "block_size", "dcp"), [
    (350000, 64, 1), (350000, 64, 2), (350000, 48, 1), (350000, 256, 1), (131072, 16, 4), (202752, 1, 1),
    (100001, 96, 2),
])
def test_widths_and_outcomes_follow_the_engine_formulas(engine: str, length: int, block_size: int, dcp: int) -> None:
    case = {"component": INDEXER, "engine": engine, "max_model_len": length, "block_size": block_size, "rows": 42,
            "dcp": dcp}
    result = probe(parse_case(case))
    table, buffer = ref_table_width(engine, length, block_size, dcp), ref_buffer_width(engine, length, block_size, dcp)
    assert (result.table_width, result.buffer_width) == (table, buffer)
    if table == buffer:
        assert (result.outcome.value, result.error) == ("ok", None)
    else:
        assert (result.outcome.value, result.error) == ("shape-error", expand_message(42, buffer, table))


def test_worked_widths() -> None:
    """bs 48 on 0.33.0: 7292 blocks, gcd(128, 48) = 16, so a multiple of 8: 7296. DCP 2 on 0.23.0:
    350000 / 128 = 2734.4 -> 2735 in the buffer, 2736 in the table (a multiple of 2)."""
    r = probe(parse_case({**SEED_46074, "engine": "vllm==0.33.0", "block_size": 48}))
    assert (r.table_width, r.buffer_width, r.outcome.value) == (7296, 7296, "ok")
    r = probe(parse_case({**SEED_46074, "dcp": 2}))
    assert r.error == expand_message(42, 2735, 2736)


def test_a_max_model_len_reduced_after_start_up_leaves_the_023_table_wide() -> None:
    """vLLM 46787 / 46679: the table built for 350000 (5470 blocks), the builder at 300000 (4688)."""
    reduced = {**SEED_46074, "max_model_len": 300000, "table_max_model_len": 350000}
    r = probe(parse_case(reduced))
    assert (r.outcome.value, r.error) == ("shape-error", expand_message(42, 4688, 5470))
    rebuilt = probe(parse_case({**reduced, "engine": "vllm==0.33.0"}))  # 0.33.0 rebuilds on a width change
    assert (rebuilt.outcome.value, rebuilt.table_width, rebuilt.buffer_width) == ("ok", 4688, 4688)


def test_the_uniform_path_truncates_silently_and_keeps_every_block_a_request_holds() -> None:
    r = probe(parse_case({**SEED_46074, "indexer_path": "uniform"}))
    assert (r.outcome.value, r.error, r.table_width, r.buffer_width) == ("ok", None, 5470, 5469)
    table = make_block_table(2, 6, "cpu")  # two requests of 6 blocks, ids 1..12 (+ a spare row)
    buffer = torch.zeros((4, 5), dtype=torch.int32)
    assert fill_uniform(buffer, table, requests=2, next_n=2) == 0
    assert buffer.tolist() == [[1, 2, 3, 4, 5]] * 2 + [[7, 8, 9, 10, 11]] * 2  # each row's first 5


def test_the_uniform_kernel_reads_past_a_narrower_row_into_the_next() -> None:
    table = make_block_table(2, 4, "cpu")  # rows [1..4], [5..8], spare [9..12]
    buffer = torch.zeros((4, 5), dtype=torch.int32)
    assert fill_uniform(buffer, table, requests=2, next_n=2) == 1
    assert buffer.tolist() == [[1, 2, 3, 4, 5]] * 2 + [[5, 6, 7, 8, 9]] * 2


@pytest.mark.parametrize(("change", "reason"), [
    ({"table_max_model_len": 1000}, "table_max_model_len: 1000 is below max_model_len 350000"),
    ({"indexer_path": "uniform", "rows": 41}, "rows: 41 is not a multiple of 2"),
    ({"rows": 2}, "rows: 2 is below 3"),
])
def test_states_the_engine_cannot_be_in_are_invalid(change: dict[str, object], reason: str) -> None:
    r = probe_record({**SEED_46074, **change}, "cpu")
    assert r["outcome"] == "invalid" and str(r["error"]).startswith(reason)


@pytest.mark.parametrize(("change", "reason"), [
    ({"block_size": 0}, "block_size: 0 is out of range (allowed: 1 or more)"),
    ({"indexer_path": "fast"}, "indexer_path: 'fast' is not one of variable, uniform, native"),
    ({"page_size": 64}, "page_size: unknown field (allowed: block_size, component, dcp, engine, indexer_path, "
                        "max_model_len, rows, table_max_model_len)"),
])
def test_bad_fields_give_one_line_reasons(change: dict[str, object], reason: str) -> None:
    assert probe_record({**SEED_46074, **change}, "cpu") == {"outcome": "invalid", "error": reason}


def test_an_engine_without_data_names_the_releases_that_have_it() -> None:
    error = str(probe_record({**SEED_46074, "engine": "vllm==0.9.9"}, "cpu")["error"])
    assert error.startswith("engine: 'vllm==0.9.9' is not one of vllm==") and "vllm==0.23.0" in error
    assert "\n" not in error


@pytest.mark.parametrize("engine", ["vllm==0.23.0", "vllm==0.33.0"])
@pytest.mark.parametrize(("block_size", "dcp", "path"), [(64, 1, "variable"), (48, 1, "variable"), (16, 2, "variable"),
                                                         (200, 1, "variable"), (64, 1, "uniform")])
def test_the_indexer_closed_form_equals_an_executed_scan(engine: str, block_size: int, dcp: int, path: str) -> None:
    backend = case_backend_of(INDEXER)
    case = IndexerCase(component=INDEXER, engine=engine, max_model_len=1000, block_size=block_size, rows=6, dcp=dcp,
                       indexer_path=path)
    low, high = backend.scan_range(case)
    values = np.arange(low, high + 1, dtype=np.int64)
    predicted = backend.fails_grid(case, values)
    assert np.array_equal(predicted, backend.executed_scan(case, values))
    expected = [ref_table_width(engine, int(v), block_size, dcp) != ref_buffer_width(engine, int(v), block_size, dcp)
                and path == "variable" for v in values]
    assert predicted.tolist() == expected
    if engine == "vllm==0.23.0" and path == "variable" and block_size <= 128:
        assert predicted.any() and not predicted.all()  # the scan covers failing and passing lengths


def test_random_indexer_states_probe_as_the_formulas_say() -> None:
    """200 seeded states: the executed probe, the closed form and the restated formulas agree."""
    rng = random.Random(13)
    backend = case_backend_of(INDEXER)
    for _ in range(200):
        engine = rng.choice(["vllm==0.23.0", "vllm==0.33.0"])
        block_size, dcp = rng.choice([1, 16, 32, 48, 64, 96, 128, 200, 256]), rng.choice([1, 2, 4, 8])
        length = rng.randint(1, 1_100_000)
        path = rng.choice(["variable", "uniform"])
        case = IndexerCase(component=INDEXER, engine=engine, max_model_len=length, block_size=block_size, rows=4,
                           dcp=dcp, indexer_path=path)
        table, buffer = ref_table_width(engine, length, block_size, dcp), ref_buffer_width(engine, length, block_size, dcp)
        result = probe(case)
        assert (result.table_width, result.buffer_width) == (table, buffer)
        fails = path == "variable" and table != buffer
        assert result.outcome.value == ("shape-error" if fails else "ok")
        assert bool(backend.fails_grid(case, np.array([length], dtype=np.int64))[0]) == fails


def test_the_indexer_boundary_is_the_next_unaligned_length() -> None:
    """300000 / 64 = 4687.5 -> 4688 blocks (even); 4688 * 64 = 300032, so 300033 needs 4689."""
    case = {**SEED_46074, "max_model_len": 300000}
    record = boundary_record(case, "cpu")
    assert record == {"first_failing_max_model_len": 300033, "scanned": [300000, 300127], "outcome": "shape-error",
                      "error": expand_message(42, 4689, 4690), "confirmed": True, "buffer_width": 4689,
                      "table_width": 4690, "probes_run": 2}
    assert boundary_record({**case, "engine": "vllm==0.33.0"}, "cpu")["first_failing_max_model_len"] is None
    assert boundary_record({**case, "table_max_model_len": 350000}, "cpu")["error"] == (
        "table_max_model_len: not a boundary field (the search chooses the max_model_len)")
    odd = boundary_record({**case, "indexer_path": "uniform", "rows": 41}, "cpu")
    assert odd == {"outcome": "invalid", "error": "rows: 41 is not a multiple of 2 (uniform decode lengths of 2 rows "
                   "each)", "first_failing_max_model_len": None}


# ---- V0 -------------------------------------------------------------------------------------------


def test_v0_batches_eager_steps_and_lookahead_zero() -> None:
    batch = probe(parse_case({**SEED_5563, "seq_lens": [100, 8186]}))
    assert (batch.outcome.value, batch.error) == ("shape-error", MESSAGE_5563)
    eager = probe(parse_case({**SEED_5563, "seq_lens": [8193]}))  # past the capture length: no graph
    assert (eager.outcome.value, eager.path, eager.table_width) == ("ok", "eager", 513)
    assert probe(parse_case({**SEED_5563, "seq_lens": [8192], "lookahead": 0})).outcome.value == "ok"
    xformers = probe(parse_case({**SEED_5563, "engine": "vllm==0.6.2", "attention_backend": "xformers"}))
    assert (xformers.outcome.value, xformers.error) == ("shape-error", MESSAGE_5563)  # PR 8340 skipped it


def test_the_truncating_write_keeps_the_first_blocks() -> None:
    table = np.zeros((2, 4), dtype=np.int32)
    write_rows(table, [[1, 2, 3, 4, 5], [6]], "truncate")
    assert table.tolist() == [[1, 2, 3, 4], [6, 0, 0, 0]]
    with pytest.raises(ValueError, match=r"could not broadcast input array from shape \(5,\) into shape \(4,\)"):
        write_rows(np.zeros((2, 4), dtype=np.int32), [[1, 2, 3, 4, 5], [6]], "assign")


@pytest.mark.parametrize(("engine", "backend"), [("vllm==0.6.0", "flash-attn"), ("vllm==0.6.0", "xformers"),
                                                  ("vllm==0.6.2", "flash-attn"), ("vllm==0.6.2", "flashinfer"),
                                                  ("vllm==0.6.2", "xformers")])
@pytest.mark.parametrize(("capture", "block_size", "lookahead"), [(256, 16, 7), (250, 16, 3), (100, 1, 2), (64, 32, 40)])
def test_the_v0_closed_form_equals_an_executed_scan(engine: str, backend: str, capture: int, block_size: int,
                                                    lookahead: int) -> None:
    runner = case_backend_of(V0)
    case = V0GraphCase(component=V0, engine=engine, max_seq_len_to_capture=capture, block_size=block_size,
                       lookahead=lookahead, seq_lens=(1,), attention_backend=backend)
    low, high = runner.scan_range(case)
    values = np.arange(low, high + 1, dtype=np.int64)
    predicted = runner.fails_grid(case, values)
    assert np.array_equal(predicted, runner.executed_scan(case, values))
    width = -(-capture // block_size)
    truncates = engine == "vllm==0.6.2" and backend != "xformers"
    assert predicted.tolist() == [not truncates and v <= capture and -(-(v + lookahead) // block_size) > width
                                  for v in values]


def test_the_v0_boundary_of_the_seed() -> None:
    case = {k: v for k, v in SEED_5563.items() if k != "seq_lens"}
    out = [boundary_record(c, "cpu") for c in (case, {**case, "engine": "vllm==0.6.2"})]  # what boundary --cases prints
    assert out[0] == {"first_failing_seq_len": 8186, "scanned": [1, 8193], "outcome": "shape-error",
                      "error": MESSAGE_5563, "confirmed": True, "buffer_width": 512, "table_width": 513,
                      "probes_run": 2}
    assert (out[1]["first_failing_seq_len"], out[1]["confirmed"]) == (None, True)


# ---- conformance: vLLM's own code, where the wheel is cached ------------------------------------------

RUNNER = Path(__file__).resolve().parent / "vllm_released.py"
V1_FILES = ("vllm/utils/math_utils.py", "vllm/v1/worker/block_table.py", "vllm/v1/attention/backends/mla/indexer.py",
            "vllm/v1/kv_cache_interface.py")
V0_FILES = tuple(f"vllm/attention/backends/{m}.py" for m in ("flash_attn", "flashinfer", "utils", "xformers"))


def released(version: str, files: tuple[str, ...], tmp: Path, fetch: bool = False) -> Path:
    """The unpacked files of ``vllm==version`` in the workbench's engine cache (``workbench engines
    learn`` or ``workbench check`` fetch it); skips when the release is not cached. ``fetch``: a
    release the suite fetches anyway (the notebooks' and the preflight's 0.23.0) is fetched here
    too, so whether the test runs does not hang on which test came first."""
    found = wheels.cached(f"vllm=={version}")
    if found is None and fetch:
        try:
            found = wheels.fetch(f"vllm=={version}")
        except wheels.FetchError as error:
            pytest.skip(str(error))
    if found is None or not all((found.src / name).is_file() for name in files):
        pytest.skip(f"vllm {version} is not in the workbench's engine cache ({wheels.cache_root()}; "
                    f"workbench engines learn vllm=={version} fetches it)")
    return found.src


def run_released(root: Path, checks: list[dict[str, object]]) -> list[object]:
    done = subprocess.run([sys.executable, str(RUNNER), str(root)], input=json.dumps(checks), capture_output=True,
                          text=True, check=True, timeout=120)
    result: list[object] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("version", ["0.23.0"])  # 0.33.0's builder needs its engine config: conformance_vllm runs it
def test_the_indexer_model_agrees_with_vllms_own_code(version: str, tmp_path: Path) -> None:
    root = released(version, V1_FILES, tmp_path, fetch=True)
    engine = f"vllm=={version}"
    grid = [(350000, 64, 1), (300000, 64, 1), (350000, 48, 1), (350000, 256, 1), (350000, 64, 2), (131073, 16, 4),
            (1000, 200, 1)]
    cases = [IndexerCase(component=INDEXER, engine=engine, max_model_len=n, block_size=b, rows=42, dcp=d)
             for n, b, d in grid]
    results = [probe(c) for c in cases]
    lens = [1] + [2] * 20 + [1]  # the 42 rows the model expands (decode_lens in the module)
    checks: list[dict[str, object]] = [{"check": "table-width", "max_model_len": c.max_model_len,
                                        "block_size": c.block_size, "dcp": c.dcp} for c in cases]
    checks += [{"check": "indexer-variable", "decode_lens": lens, "buffer_width": r.buffer_width,
                "table_width": r.table_width} for r in results]
    out = run_released(root, checks)
    assert out[: len(cases)] == [r.table_width for r in results]  # the engine's MultiGroupBlockTable width
    for r, engine_fill in zip(results, out[len(cases):]):
        assert isinstance(engine_fill, dict)
        assert engine_fill["error"] == r.error  # the engine's _prepare_decode_tensors, same widths
    if version == "0.23.0":
        assert results[0].error == MESSAGE_46074


@pytest.mark.parametrize("version", ["0.6.0", "0.6.2"])
def test_the_v0_model_agrees_with_vllms_own_builders(version: str, tmp_path: Path) -> None:
    root = released(version, V0_FILES, tmp_path)
    builders = {"flash-attn": ("vllm.attention.backends.flash_attn", "FlashAttentionMetadataBuilder"),
                "flashinfer": ("vllm.attention.backends.flashinfer", "FlashInferMetadataBuilder"),
                "xformers": ("vllm.attention.backends.xformers", "XFormersMetadataBuilder")}
    batches = [(8192, 16, 7, [8186]), (8192, 16, 7, [8185, 3]), (64, 16, 9, [10, 60, 33])]
    checks: list[dict[str, object]] = []
    expected = []
    for attention, (module, builder) in builders.items():
        for capture, block_size, lookahead, seq_lens in batches:
            case = V0GraphCase(component=V0, engine=f"vllm=={version}", max_seq_len_to_capture=capture,
                               block_size=block_size, lookahead=lookahead, seq_lens=tuple(seq_lens),
                               attention_backend=attention)
            held = [case.blocks_held(s) for s in seq_lens]
            lists = [list(range(1 + sum(held[:i]), 1 + sum(held[: i + 1]))) for i in range(len(held))]
            checks.append({"check": "v0-graph-rows", "module": module, "builder": builder,
                           "graph_width": case.graph_width, "seq_lens": seq_lens, "block_tables": lists})
            expected.append((probe(case), lists, case.graph_width))
    out = run_released(root, checks)
    for (result, lists, width), engine_build in zip(expected, out):
        assert isinstance(engine_build, dict)
        if result.error is not None:
            assert engine_build["error"] == result.error
        else:  # the build wrote every row (and went on until a stand-in stopped it)
            assert engine_build["error"] is None or str(engine_build["error"]).startswith("after the rows")
            rows = np.zeros((len(lists), width), dtype=np.int32)
            for i, blocks in enumerate(lists):
                rows[i, : min(len(blocks), width)] = blocks[:width]
            assert engine_build["rows"] == rows.tolist()
    assert sum(result.error == MESSAGE_5563 for result, _, _ in expected) == (3 if version == "0.6.0" else 1)


# ---- vllm-ascend ------------------------------------------------------------------------------------

ASCEND = "vllm-ascend-block-table"
SEED_9098 = {"component": ASCEND, "drafter": "no-reset", "max_model_len": 32768, "block_size": 128,
             "num_speculative_tokens": 3, "seq_lens": [32767]}


def test_a_draft_step_past_the_model_length_reads_past_the_row_unless_reset() -> None:
    """32768 / 128 = 256 blocks; 32767 + 2 draft steps = 32769 tokens = 257 blocks (read from the source)."""
    before = probe(parse_case(SEED_9098))
    assert (before.outcome.value, before.error, before.buffer_width, before.reads) == (
        "silent-overread", "silent over-read: request 0 reads 257 blocks but its block_table row holds 256", 256, 32769)
    after = probe(parse_case({**SEED_9098, "drafter": "reset"}))  # PR 10117: seq_len past the length -> 1
    assert (after.outcome.value, after.reads) == ("ok", 1)
    assert probe(parse_case({**SEED_9098, "draft_step": 1})).outcome.value == "ok"  # 32768: exactly the row
    dcp = probe(parse_case({**SEED_9098, "dcp": 2, "max_model_len": 32768}))  # 32768 / 256 = 128 blocks per rank
    assert (dcp.buffer_width, dcp.error) == (128, "silent over-read: request 0 reads 129 blocks but its block_table "
                                                  "row holds 128")
    assert [s.expected_error for s in case_seeds() if s.name == "vllm-ascend-9098"] == [before.error]


@pytest.mark.parametrize(("length", "block_size", "dcp", "k", "drafter"), [
    (300, 16, 1, 3, "no-reset"), (300, 16, 1, 3, "reset"), (256, 16, 2, 4, "no-reset"), (97, 1, 1, 2, "no-reset"),
    (200, 64, 1, 6, "no-reset"),
])
def test_the_ascend_closed_form_equals_an_executed_scan(length: int, block_size: int, dcp: int, k: int,
                                                        drafter: str) -> None:
    runner = case_backend_of(ASCEND)
    case = runner.parse({"component": ASCEND, "max_model_len": length, "block_size": block_size, "dcp": dcp,
                         "num_speculative_tokens": k, "drafter": drafter}, boundary=True)
    values = np.arange(1, length + 1, dtype=np.int64)
    predicted = runner.fails_grid(case, values)
    assert np.array_equal(predicted, runner.executed_scan(case, values))
    span, width = block_size * dcp, -(-length // (block_size * dcp))
    assert predicted.tolist() == [drafter == "no-reset" and -(-(v + k - 1) // span) > width for v in values]


def test_ascend_bad_steps_and_lengths_are_invalid() -> None:
    assert probe_record({**SEED_9098, "draft_step": 3}, "cpu")["error"] == "draft_step: 3 is out of range (allowed: 1 to 2)"
    assert probe_record({**SEED_9098, "seq_lens": [32769]}, "cpu")["error"] == (
        "seq_lens: 32769 is out of range (allowed: 1 to max_model_len 32768)")


def test_single_case_flags_point_case_backends_at_cases(capsys: pytest.CaptureFixture[str]) -> None:
    from workbench.cli import main

    assert main(["probe", V0, "--seq-lens", "5"]) == 2
    assert capsys.readouterr().err == (
        "workbench: error: vllm-v0-graph-block-tables: give its cases as JSON lines with --cases FILE (fields: "
        "attention_backend, block_size, engine, lookahead, max_seq_len_to_capture, seq_lens)\n")




def test_the_uniform_fill_agrees_with_vllms_own_triton_kernel(tmp_path: Path) -> None:
    """0.23.0's ``_prepare_uniform_decode_kernel`` run by triton's interpreter on the CPU: the seed's
    widths (truncation) and a narrower table (the read past each row)."""
    root = released("0.23.0", V1_FILES, tmp_path, fetch=True)
    triton = wheels.triton_dir()
    if triton is None:
        pytest.skip(f"triton is not cached in {wheels.cache_root() / 'triton'} (workbench conformance --triton fetches it)")
    shapes = [(2, 5470, 5469), (2, 4, 5), (3, 6, 6)]  # (requests, table width, buffer width)
    checks: list[dict[str, object]] = [{"check": "indexer-uniform", "requests": r, "next_n": 2, "table_width": t,
                                        "buffer_width": b} for r, t, b in shapes]
    done = subprocess.run([sys.executable, str(RUNNER), str(root), str(triton)], input=json.dumps(checks),
                          capture_output=True, text=True, check=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    for (requests, t, b), engine_rows in zip(shapes, json.loads(done.stdout)):
        buffer = torch.zeros((requests * 2, b), dtype=torch.int32)
        past = fill_uniform(buffer, make_block_table(requests, t, "cpu"), requests=requests, next_n=2)
        assert buffer.tolist() == engine_rows
        assert past == max(0, b - t)
