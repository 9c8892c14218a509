"""The request table as a buffer: the speculative decode step's reservation written into ``req_to_token``.

The fast tests check the model against worked cases and against its own executed replay (the closed
form against a scan); the worked numbers at ctx 32768 are the ones SGLang 0.5.23's own code gives
(``python -m workbench.engines.sglang.reqtable_verify sglang==0.5.23``), recomputed here from the row width
``ctx + 4 + D`` and the reservation ``2 * max(steps * topk, D)``. The tests marked ``engine`` run the
engine's code: the conformance row (``ScheduleBatch.prepare_for_decode`` with its Triton writer
interpreted) and the scheduler's loop measuring the committed length a batch is formed at.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.analysis.reach import Conditions, reach_rule, reservation_reach, rule_for
from workbench.backends import is_reservation_backend, reservation_backend_of
from workbench.backends.sglang import req_to_token as rt
from workbench.engines.checking import conformance, reqtable_checks
from workbench.engines.store import wheels
from workbench.model.geometry import ServingGeometry
from workbench.model.outcome import Outcome

NGRAM_16 = ServingGeometry(context_len=32768, draft_tokens=16, spec_steps=1, spec_topk=10, draft_has_kv=False)
EAGLE_548 = ServingGeometry(context_len=32768, draft_tokens=8, spec_steps=5, spec_topk=4)
EAGLE_314 = ServingGeometry(context_len=32768, draft_tokens=4, spec_steps=3, spec_topk=1)


@pytest.mark.parametrize(("g", "expected"), [(NGRAM_16, 32757), (EAGLE_548, 32741), (EAGLE_314, 32769)])
def test_first_failing_length_at_ctx_32768(g: ServingGeometry, expected: int) -> None:
    """W = ctx + 4 + D at page size 1, R = 2 * max(steps * topk, D): the reservation passes the row
    from W - R + 1 (the engine's own first spills, reqtable_verify; EAGLE (3, 1, 4)'s lies past the
    committed lengths a run forms a batch at)."""
    width = 32768 + 4 + g.draft_tokens
    r = 2 * max(g.spec_steps * g.spec_topk, g.draft_tokens)
    assert g.request_table_width == width
    assert rt.first_failure(g, "page-aligned") == width - r + 1 == expected


def test_a_spill_lands_in_the_next_row_worked_case() -> None:
    """ctx 2 with D 2: W = 2 + 4 + 2 = 8, R = 2 * max(1, 2) = 4; a request in row 1 at committed 6
    reserves columns 6..9, the last two being row 2's columns 0 and 1."""
    g = ServingGeometry(context_len=2, draft_tokens=2, spec_steps=1, spec_topk=1)
    assert (g.request_table_width, rt.reserve(g)) == (8, 4)
    table = torch.full((4 * 8,), -1, dtype=torch.int32)
    done = rt.replay(g, "page-aligned", "none", table, 3, [1], [6], [6], torch.tensor([101, 102, 103, 104]))
    assert done.allocated == [10]
    assert table.view(4, 8)[1].tolist() == [-1] * 6 + [101, 102]
    assert table.view(4, 8)[2].tolist() == [103, 104] + [-1] * 6
    assert done.overwrite is not None and (done.overwrite.row, done.overwrite.entries) == (2, 2)


RULES_BY_RELEASE = ("committed-plus-reserve", "at-least-allocated", "page-aligned")


@pytest.mark.parametrize("rule", RULES_BY_RELEASE)
@pytest.mark.parametrize(("ctx", "ps", "d", "steps", "topk", "ngram"), [
    (40, 1, 16, 1, 10, True), (40, 1, 8, 5, 4, False), (40, 1, 4, 3, 1, False), (50, 1, 16, 15, 1, False),
    (64, 16, 8, 5, 4, False), (70, 16, 6, 5, 1, False), (100, 64, 16, 1, 10, True), (33, 4, 3, 2, 2, False),
])
def test_closed_form_is_where_the_executed_step_first_spills(rule: str, ctx: int, ps: int, d: int, steps: int,
                                                             topk: int, ngram: bool) -> None:
    """Every committed length 1 .. W - 1, each executed (a just-prefilled request, allocated =
    committed): the first that stores outside its row is the closed form's, under each width
    generation (they differ at ps > 1)."""
    for gen in ("g1", "g2", "g3"):
        g = ServingGeometry(context_len=ctx, page_size=ps, draft_tokens=d, spec_steps=steps, spec_topk=topk,
                            draft_has_kv=not ngram, width_gen=gen)
        executed = next((s for s in range(1, g.request_table_width)
                         if rt.probe(g, rule, "none", [s]).outcome is Outcome.SILENT_OVERWRITE), None)
        assert executed == rt.first_failure(g, rule), (gen, g)


def test_the_host_check_guards_paged_trees_only() -> None:
    """0.5.13 on: the assert runs at ps > 1 with topk > 1; at page size 1 the stores run unchecked."""
    paged = ServingGeometry(context_len=64, page_size=2, draft_tokens=2, spec_steps=1, spec_topk=2, width_gen="g1")
    first = rt.first_failure(paged, "at-least-allocated")
    assert first == (64 + 4 + 2) - 2 * 2 * 2 + 1  # W 70, R = 2 * (one page of 2 per branch, 2 branches)
    refused = rt.probe(paged, "at-least-allocated", "paged-topk-assert", [first])
    assert refused.outcome is Outcome.HOST_ASSERT and "exceeds req_to_token row width" in (refused.error or "")
    assert rt.probe(paged, "at-least-allocated", "paged-topk-assert", [first - 1]).outcome is Outcome.OK
    flat = ServingGeometry(context_len=64, draft_tokens=8, spec_steps=5, spec_topk=4)
    spilled = rt.probe(flat, "page-aligned", "paged-topk-assert", [rt.first_failure(flat, "page-aligned") or 0])
    assert spilled.outcome is Outcome.SILENT_OVERWRITE


def test_the_registry_knows_the_request_table() -> None:
    assert is_reservation_backend("sglang-req-to-token") and not is_reservation_backend("sglang-fa3-page-table")
    assert reservation_backend_of("sglang-req-to-token").buffer == "req_to_token"
    with pytest.raises(ValueError, match="component: 'nope' is not one of sglang-req-to-token"):
        reservation_backend_of("nope")


def test_conformance_states_reach_the_spill_and_the_rows_past_the_pool() -> None:
    """The row's states (model answers only) put spills into a neighbour's row and past the pool's
    rows, and leave states below the boundary untouched outside their rows."""
    b, _ = conformance.behaviour("sglang==0.5.23")
    entry = reqtable_checks.entry_of(b)
    neighbour = past = clean = 0
    for state in reqtable_checks.states(random.Random("0:t"), 60, entry, str(b["width_gen"])):
        g = reqtable_checks.geometry_of(state)
        nxt = rt.next_lens(g, entry["rule"], state["committed"], state["allocated"])
        for row, n in zip(state["rows"], nxt):
            if n > g.request_table_width:
                if row + 1 in state["rows"]:
                    neighbour += 1
                elif row == state["pool_rows"]:
                    past += 1
            else:
                clean += 1
    assert neighbour and past and clean


def test_reservation_reach_per_release_and_overlap() -> None:
    """The committed length a batch is formed at: ``T - 3`` with 0.5.23's in-flight skip (overlap on),
    ``T - 2`` otherwise (T = ctx - 2); the conformance rows ``longest_step[...,reserved]`` hold it to the
    engine's scheduler functions, and the engine test below to the driver at these recipes."""
    on = reservation_reach(reach_rule("sglang==0.5.23"), NGRAM_16, Conditions(overlap=True))
    off = reservation_reach(reach_rule("sglang==0.5.23"), NGRAM_16, Conditions(overlap=False))
    older = reservation_reach(rule_for("sglang==0.5.18"), NGRAM_16, Conditions(overlap=True))
    assert (on.largest_committed, off.largest_committed, older.largest_committed) == (32763, 32764, 32764)
    for g in (NGRAM_16, EAGLE_548):
        assert on.reaches(rt.first_failure(g, "page-aligned"))
    assert not off.reaches(rt.first_failure(EAGLE_314, "page-aligned"))


@pytest.mark.engine
def test_the_engine_scheduler_forms_batches_at_the_reservation_reach() -> None:
    """SGLang 0.5.23's own functions driving one request (every accept sequence) through both loop
    orders, measuring the committed length each batch is formed at (``reach_learn --reach``)."""
    if wheels.cached("sglang==0.5.23") is None:
        pytest.skip("sglang 0.5.23 is not cached (workbench conformance --engine sglang==0.5.23 fetches it)")
    # prompts the scheduler admits only (at most ctx - 7: reqtable_verify's validate_input_length run)
    cases = [{"context_len": 32768, "max_accept": 16, "speculative": True, "order": o, "measure": "reserved",
              "min_room": 7, "max_room": 20} for o in ("overlap", "normal")]
    done = subprocess.run([sys.executable, "-m", "workbench.engines.sglang.reach_learn", "--reach", "sglang==0.5.23"],
                          input=json.dumps(cases), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    overlap, normal = json.loads(done.stdout.strip().splitlines()[-1])
    rule = reach_rule("sglang==0.5.23")
    assert overlap == reservation_reach(rule, NGRAM_16, Conditions(overlap=True)).largest_committed
    assert normal == reservation_reach(rule, NGRAM_16, Conditions(overlap=False)).largest_committed


@pytest.mark.engine
def test_sglang_0_5_23_decode_preparation_agrees_under_the_interpreter() -> None:
    """``ScheduleBatch.prepare_for_decode`` on the engine's own pool, allocator and batch (its Triton
    writer interpreted) against the model, the whole table compared: the named recipes at ctx 32768
    (one below the first failing length, at it, at the longest prompt the scheduler admits) and 20
    seeded states."""
    try:
        wheels.fetch("sglang==0.5.23")
    except wheels.FetchError as error:
        pytest.skip(str(error))
    if wheels.triton_dir() is None:
        pytest.skip(f"triton is not cached in {wheels.cache_root() / 'triton'} (workbench conformance --triton fetches it)")
    rows = conformance.run_version("sglang==0.5.23", states=20, triton=None, only=reqtable_checks.FUNCTIONS)
    assert [row["function"] for row in rows] == list(reqtable_checks.FUNCTIONS)
    row = rows[0]
    assert row["skipped"] is None, row["skipped"]
    assert row["agree"] == row["states"] == 40, json.dumps(row["first_disagreement"])[:2000]
    assert len(row["seeds"]) == 20 and all(seed["agree"] and seed["outcome"] == "ok" for seed in row["seeds"])


@pytest.mark.engine
@pytest.mark.engine_versions
@pytest.mark.skipif(not os.environ.get("WORKBENCH_ENGINE_VERSIONS"), reason="slow: set WORKBENCH_ENGINE_VERSIONS=1")
@pytest.mark.parametrize("engine", ["sglang==0.5.23", "sglang==0.5.14", "sglang==0.5.10"])
def test_the_engine_spills_where_the_model_says(engine: str) -> None:
    """``reqtable_verify``: the engine's own first spilling length (every length from ctx - 48 run),
    and the entries a prompt of ctx - 7 (the longest the scheduler admits) writes into its neighbour."""
    from workbench.engines.sglang import reqtable_verify

    result = reqtable_verify.verify(engine)
    assert "error" not in result, result
    assert result["admission"]["prompt 32761"] == "admitted" and result["admission"]["max_new_tokens"] >= 2
    entry = reqtable_checks.entry_of(conformance.behaviour(engine)[0])
    for found in result["recipes"]:
        algorithm, shape = found["recipe"].split(" ", 1)
        steps, topk, d = (int(x) for x in shape.strip("()").split(", "))
        if not reqtable_checks.takes_path(entry, algorithm, topk):
            continue
        g = ServingGeometry(context_len=32768, draft_tokens=d, spec_steps=steps, spec_topk=topk,
                            draft_has_kv=algorithm != "NGRAM")
        assert found["width"] == g.request_table_width and found["reservation"] == rt.reserve(g)
        first = rt.first_failure(g, str(entry["rule"]))
        scanned = range(32768 - reqtable_verify.SCAN_FROM, 32768 - 3)  # the committed lengths the engine ran
        assert found["engine_first_spill"] == (first if first in scanned else None), found
        assert found["clean_below_first"], found
        spilled = rt.next_lens(g, str(entry["rule"]), [32761], [32761])[0] - g.request_table_width
        assert found["at 32761, neighbour in row 2"]["entries"] == max(0, spilled)


QWQ = ("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --context-length 32768 --tp 4 --attention-backend fa3 "
       "--speculative-algorithm ")


@pytest.fixture(autouse=True)
def _hf_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The preflight reads the model's config where the engine does: the test data's cache."""
    monkeypatch.setenv("HF_HUB_CACHE", str(Path(__file__).parent / "data" / "hf_cache" / "hub"))


def _reservation(command: str) -> object:
    from workbench.preflight import check

    rows = [r for r in check(command, engine="sglang==0.5.23").rows if r.kind == "reservation"]
    assert len(rows) <= 1
    return rows[0] if rows else None


def test_the_preflight_reports_the_request_table_for_ngram_16() -> None:
    """QwQ-32B, NGRAM 16 (topk 10) at ctx 32768: one request whose batch is formed at 32757 or later
    writes into the next pool row; a run forms batches up to 32763 (overlap on) or 32764 (off)."""
    on = _reservation(QWQ + "NGRAM --speculative-num-draft-tokens 16")
    off = _reservation(QWQ + "NGRAM --speculative-num-draft-tokens 16 --disable-overlap-schedule")
    for row, reach in ((on, 32763), (off, 32764)):
        assert row is not None and (row.first_failing, row.reach, row.reachable) == (32757, reach, True)
        assert row.outcome == "silent-overwrite" and "into row 2" in (row.message or "")
        assert row.margin == 32757 - reach - 1 and row.batch == 1 and row.fix is not None
        assert row.fix.width == 32768 + (reach + 32 - 32768)  # rows wide enough for the reservation at the reach


def test_the_preflight_request_table_row_is_safe_for_a_short_reservation() -> None:
    row = _reservation(QWQ + "EAGLE --speculative-draft-model-path Qwen/Qwen3-8B --speculative-num-steps 3 "
                       "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
    assert row is not None and row.first_failing == 32769 and not row.reachable and row.margin == 32769 - 32763 - 1
    assert _reservation("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --tp 4") is None  # no speculation
