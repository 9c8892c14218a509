"""Conformance of the models with SGLang 0.5.23's own code (and, marked slower, older versions).

The expected values are the engine's: each row compares the engine's function with the model on
the same states, so agreement is the test. The wheel is fetched once into the workbench's cache
(``WORKBENCH_CACHE``); without the package index and without a cached copy the test is skipped
with the reason. Deselect it offline with ``-m 'not engine'``.
"""

from __future__ import annotations

import json
import os
import random
from functools import partial

import pytest

from workbench.backends import backend_of
from workbench.engines.checking import checks, conformance, worker
from workbench.engines.checking import model_calls as mc
from workbench.engines.checking.answers import UNWRITTEN
from workbench.engines.store import wheels

ENGINE = "sglang==0.5.23"
TRITON_ROWS = {f for check in checks.CHECKS for f in check.triton}  # may be skipped where triton is absent
BUILDER_ROWS = tuple(checks.BUILDERS)
POOLED_HOST_ROWS = ("spec_utils.draft_kv_indices_buffer_width", "utils.assert_buffer_fits[draft-decode]",
                    "utils.assert_buffer_fits[aiter-target-verify]")
POOLED_KERNEL_ROWS = ("cache_locs.generate_draft_decode_kv_indices",
                      "kv_indices.create_flashinfer_kv_indices_triton[target-verify]")


def _fetch_or_skip(engine: str) -> None:
    try:
        wheels.fetch(engine)
    except wheels.FetchError as error:
        pytest.skip(str(error))


STATES = 300


@pytest.mark.engine
def test_sglang_0_5_23_agrees_on_every_function() -> None:
    _fetch_or_skip(ENGINE)
    # 300 random states a function here (about a third of the old 1,000's time in CI); make releases runs
    # 0.5.23 at 1,000 (workbench conformance --engine sglang==0.5.23 --states 1000)
    rows = conformance.run_version(ENGINE, states=STATES, triton=False)  # the interpreted kernels: slow test below
    by_function = {row["function"]: row for row in rows}
    for function, row in by_function.items():
        if row["skipped"]:
            assert function in TRITON_ROWS, f"{function} skipped: {row['skipped']}"
            continue
        # the loop rows walk every accept sequence of a request: a tenth of the states (plus the named ones)
        wanted = STATES // 10 if function.startswith("longest_step") else STATES
        assert row["states"] >= wanted, f"{function}: only {row['states']} states"
        assert row["agree"] == row["states"], f"{function}: {json.dumps(row['first_disagreement'])[:2000]}"
    assert len([r for r in rows if not r["skipped"]]) >= 16
    for function in POOLED_HOST_ROWS:  # pure Python: they run without triton
        row = by_function[function]
        assert row["skipped"] is None and all(seed["agree"] for seed in row.get("seeds", ())), row
    outcomes = {seed["outcome"] for function in POOLED_HOST_ROWS for seed in by_function[function].get("seeds", ())}
    assert outcomes == {"ok", "raised"}  # each check's worked cases: one past the capacity, one at it


BUILDER_STATES = 200  # random states per row: about 7 s a row under the interpreter (38 s for XPU at 1000)


@pytest.mark.engine
def test_sglang_0_5_23_page_builders_agree_under_the_interpreter() -> None:
    """The engine's Triton page-table builders (XPU, TRT-LLM MHA graph and eager, FlashMLA, TRT-LLM
    MLA, AITER) against the backends' replays, spill included, on the worked cases and 200 states."""
    _fetch_or_skip(ENGINE)
    if wheels.triton_dir() is None:
        pytest.skip(f"triton is not cached in {wheels.cache_root() / 'triton'} (workbench conformance --triton fetches it)")
    rows = conformance.run_version(ENGINE, states=BUILDER_STATES, triton=None, only=BUILDER_ROWS)
    assert [row["function"] for row in rows] == list(BUILDER_ROWS)
    seeds = 0
    for row in rows:
        assert row["skipped"] is None, f"{row['function']} skipped: {row['skipped']}"
        assert row["states"] >= BUILDER_STATES + 2, f"{row['function']}: only {row['states']} states"
        assert row["agree"] == row["states"], f"{row['function']}: {json.dumps(row['first_disagreement'])[:2000]}"
        assert all(seed["agree"] and seed["outcome"] == "ok" for seed in row["seeds"]), row["seeds"]
        seeds += len(row["seeds"])
    assert seeds == 2 * len(checks.BUILDER_SEEDS) == 20  # the ten worked cases, each also reversed


POOLED_KERNEL_STATES = 60  # random states per row: the draft kernel takes some 20 s for them interpreted


def _triton_or_skip() -> None:
    if wheels.triton_dir() is None:
        pytest.skip(f"triton is not cached in {wheels.cache_root() / 'triton'} (workbench conformance --triton fetches it)")


@pytest.mark.engine
def test_sglang_0_5_23_pooled_kernels_agree_under_the_interpreter() -> None:
    """``generate_draft_decode_kv_indices`` and ``create_flashinfer_kv_indices_triton`` filling the
    pooled buffers (spare space after them) against ``PooledBuffer.replay``, entry for entry."""
    _fetch_or_skip(ENGINE)
    _triton_or_skip()
    rows = conformance.run_version(ENGINE, states=POOLED_KERNEL_STATES, triton=None, only=POOLED_KERNEL_ROWS)
    assert [row["function"] for row in rows] == list(POOLED_KERNEL_ROWS)
    for row in rows:
        assert row["skipped"] is None, f"{row['function']} skipped: {row['skipped']}"
        assert row["states"] >= POOLED_KERNEL_STATES + 2, f"{row['function']}: only {row['states']} states"
        assert row["agree"] == row["states"], f"{row['function']}: {json.dumps(row['first_disagreement'])[:2000]}"
        assert row["seeds"] and all(seed["agree"] and seed["outcome"] == "ok" for seed in row["seeds"]), row["seeds"]


@pytest.mark.engine
@pytest.mark.engine_versions
@pytest.mark.skipif(not os.environ.get("WORKBENCH_ENGINE_VERSIONS"),
                    reason="an older release's conformance (make releases): set WORKBENCH_ENGINE_VERSIONS=1")
def test_sglang_0_5_10_has_no_pooled_helpers_but_runs_the_kernels() -> None:
    """0.5.10 has no draft_kv_indices_* helpers and no assert_buffer_fits: those rows are skipped
    saying so. Its kernels take the same positional arguments (``pool_len`` a constexpr where 0.5.23
    has a runtime ``row_stride``): they run against 0.5.10's buffers, FlashInfer's without the topk
    factor among them (its worked case spills every row)."""
    _fetch_or_skip("sglang==0.5.10")
    rows = conformance.run_version("sglang==0.5.10", states=20, triton=None, only=POOLED_HOST_ROWS + POOLED_KERNEL_ROWS)
    by_function = {row["function"]: row for row in rows}
    assert list(by_function) == [*POOLED_HOST_ROWS, *POOLED_KERNEL_ROWS]
    for function in POOLED_HOST_ROWS:  # the learner found no such helper in its wheel
        assert by_function[function]["skipped"] == ("sglang==0.5.10 has no draft_kv_indices_buffer_width: "
                                                    "its learner found none in the wheel"), by_function[function]
    if wheels.triton_dir() is None:
        assert all("triton is not used" in by_function[f]["skipped"] for f in POOLED_KERNEL_ROWS)
        pytest.skip(f"triton is not cached in {wheels.cache_root() / 'triton'}: the kernel rows were not run")
    for function in POOLED_KERNEL_ROWS:
        row = by_function[function]
        assert row["skipped"] is None and row["agree"] == row["states"] >= 22, row
    stories = [seed["seed"] for seed in by_function[POOLED_KERNEL_ROWS[0]]["seeds"]]
    assert any(story.startswith("0.5.10's FlashInfer row") for story in stories)


@pytest.mark.parametrize("engine", [ENGINE, "sglang==0.5.10"])
@pytest.mark.parametrize("function", POOLED_KERNEL_ROWS)
def test_pooled_kernel_states_store_past_the_rows(engine: str, function: str) -> None:
    """The kernel rows' states reach the buffers' ends: some store into the spare space after the
    buffer (where a kernel's stores past it are seen), draft rows spill into the next step's row,
    and the token-block launch is tried (the model's answers only: no engine needed)."""
    b, _ = conformance.behaviour(engine)
    states = list(checks.kernel_states(function, b, random.Random(f"0:{function}"), 60))
    past = spill = blocks = 0
    for state, tables in states:
        out = mc.model_pooled_writes(state, tables)["kv_indices"].value
        steps = state["spec_steps"] if state["mode"] == "draft-decode" else 1
        past += bool((out[steps * state["width"]:] != UNWRITTEN).any())
        spill += any(used > state["width"] for used in checks._row_uses(state)[:-1])
        blocks += state.get("launch") == "token-blocks" or state["token_blocks"] > 1
        assert (out[-checks.SPARE:] == UNWRITTEN).all()  # the margin past the model's furthest store
    assert past > 0 and blocks > 0
    assert spill > 0 if function.startswith("cache_locs") else spill == 0


@pytest.mark.engine
def test_rows_of_a_backend_skip_releases_whose_data_do_not_list_it() -> None:
    """0.5.10 has no XPU backend (its learned data say it is absent): XPU's builder row says so,
    before any import."""
    _fetch_or_skip("sglang==0.5.10")
    function = "metadata.normal_decode_set_metadata[xpu]"
    rows = conformance.run_version("sglang==0.5.10", states=1, triton=None, only=(function,))
    assert [row["function"] for row in rows] == [function]
    assert rows[0]["skipped"] == ("sglang==0.5.10's learned data does not list sglang-xpu-page-table: "
                                  "its model stands for the releases whose data does")


def _builder_answers(function: str, count: int) -> list[tuple[checks.st.State, dict, dict]]:
    b, _ = conformance.behaviour(ENGINE)
    states = list(checks._builder_states(function, b, random.Random(f"0:{function}"), count))
    tables = [mc.request_tables(state, seed=i) for i, state in enumerate(states)]
    return [(state, t, mc.model_page_builder(state, t, cache_seqlens=True)) for state, t in zip(states, tables)]


def test_a_replay_that_does_not_spill_is_counted_as_a_disagreement(monkeypatch: pytest.MonkeyPatch) -> None:
    """XPU's replay made to stop at the row's end, compared with the real one's answers (standing
    in for the engine's): the worked case with its lengths reversed is the first to part, at the
    row below the batch, where the long request's fifth page lands."""
    function = "metadata.normal_decode_set_metadata[xpu]"
    answers = _builder_answers(function, 30)
    monkeypatch.setattr(type(backend_of(checks.XPU)), "write_limit", lambda self, case, width: width)
    pairs = [(state, lambda a=answer: a, partial(mc.model_page_builder, state, t, cache_seqlens=True))
             for state, t, answer in answers]
    row = worker.compare(ENGINE, function, pairs)
    assert 0 < row["agree"] < row["states"] == len(answers)
    first = row["first_disagreement"]
    assert first["state"]["seq_lens"] == [20, 62] and first["where"].startswith("page_table at [2, 0]: ")
    assert first["where"].endswith(" vs -7")


# Which wrong replays each row's states tell from the right one: a replay stopping at the row's
# end ("no spill") and one storing every live page ("spill all"), where the row's own is neither.
TELLS = {
    "metadata.normal_decode_set_metadata[xpu]": {"no spill"},
    "trtllm_mha_graph_metadata.update_trtllm_mha_graph_metadata": {"spill all"},
    "trtllm_mha_page_table.build_trtllm_mha_page_table": {"no spill", "spill all"},
    "kv_indices.create_flashmla_kv_indices_triton[flashmla]": {"no spill", "spill all"},
    "kv_indices.create_flashmla_kv_indices_triton[trtllm-mla]": {"spill all"},
    "aiter_unified_page_table.scatter_req_to_token_to_page_table_kernel": {"no spill", "spill all"},
}


@pytest.mark.parametrize("function", BUILDER_ROWS)
def test_page_builder_states_tell_a_wrong_bound_apart(function: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows' states reach the row's end: some of them part a replay with the wrong bound on
    its stores from the backend's own (in the table compared, spill included)."""
    answers = _builder_answers(function, 150)
    backend = type(backend_of(checks.BUILDERS[function].component))
    told = set()
    for name, limit in (("no spill", lambda self, case, width: width), ("spill all", lambda self, case, width: None)):
        with monkeypatch.context() as patch:
            patch.setattr(backend, "write_limit", limit)
            if any(mc.model_page_builder(state, t, cache_seqlens=True) != answer for state, t, answer in answers):
                told.add(name)
    assert told == TELLS[function]


def _modelled_versions() -> list[str]:
    """Every learned release and the pseudo-versions over them that carry a patch (the others'
    change is in no code conformance can run)."""
    from workbench.engines.store.versions import load_versions

    return [e for e, v in load_versions().items() if e.startswith("sglang==")
            and (v.pseudo is None or v.facts.get("pseudo", {}).get("patch"))]


@pytest.mark.engine
@pytest.mark.engine_versions
@pytest.mark.skipif(not os.environ.get("WORKBENCH_ENGINE_VERSIONS"), reason="slow: set WORKBENCH_ENGINE_VERSIONS=1")
@pytest.mark.parametrize("engine", _modelled_versions())
def test_every_modelled_version_agrees(engine: str) -> None:
    """Every learned release at 200 states a row (the newest at 1,000 runs in every CI run above)."""
    _fetch_or_skip(engine)
    rows = conformance.run_version(engine, states=200, triton=None)
    assert not [row for row in rows if conformance.disagrees(row)], conformance.format_table(rows)


def test_missing_wheel_is_one_line_and_exit_2(tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A version that is not cached and cannot be fetched: one line on stderr, status 2."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))

    def no_index(engine: str) -> wheels.EngineInstall:
        raise wheels.FetchError(f"cannot fetch {engine} and it is not cached in {tmp_path}: no index")

    monkeypatch.setattr(wheels, "fetch", no_index)
    status = conformance.main([ENGINE], as_json=True, states=1, seed=0, triton=False)
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and "cannot fetch sglang==0.5.23" in err


def test_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError, match="is not a modelled version"):
        conformance.behaviour("sglang==0.0.1")


def test_a_vllm_version_is_refused_with_where_its_check_runs() -> None:
    """The worker loads SGLang's functions: a vLLM version used to print a table of skipped rows."""
    with pytest.raises(ValueError, match="'vllm==0.23.0' is not an SGLang version.*tests/test_vllm.py"):
        conformance.behaviour("vllm==0.23.0")
