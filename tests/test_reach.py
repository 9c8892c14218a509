"""Reach: the scheduler's reach per release, recipe and overlap, the KV pool's bound, one margin.

Expected reaches come from SGLang 0.5.23's own scheduler functions (``init_req_max_new_tokens``,
``update_finish_state``, ``_reqs_finishing_inflight``) driven through both loop orders by
``workbench.engines.sglang.reach_learn --reach`` in a worker process; those tests are marked ``engine``
and skip without the cached wheel. The others check the constant what-if and vLLM's cap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.analysis import verdict_numbers
from workbench.analysis.reach import reach, reach_rule
from workbench.engines.store import wheels
from workbench.model.geometry import Mode, ServingGeometry
from workbench.preflight import check

# Checks read the command with 0.5.23's own code: the model's config comes from the test data's cache
QWQ_NGRAM = ("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --context-length 32768 --speculative-algorithm NGRAM "
             "--speculative-num-draft-tokens 16 --tp 4 --attention-backend fa3")


@pytest.fixture(autouse=True)
def _hf_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(Path(__file__).parent / "data" / "hf_cache" / "hub"))


@pytest.fixture(scope="module")
def engine_reach() -> dict[tuple[int, str], int | None]:
    """The 0.5.23 scheduler's reach at ctx 32768 for accept lengths 16, 6, 4 (NGRAM 16, EAGLE (5, 4, 8),
    EAGLE (3, 1, 4)), each loop order, from the engine's own functions."""
    if wheels.cached("sglang==0.5.23") is None:
        pytest.skip("sglang 0.5.23 is not cached (workbench conformance --engine sglang==0.5.23 fetches it)")
    cases = [{"context_len": 32768, "max_accept": a, "speculative": True, "order": o}
             for a in (16, 6, 4) for o in ("overlap", "normal")]
    done = subprocess.run([sys.executable, "-m", "workbench.engines.sglang.reach_learn", "--reach", "sglang==0.5.23"],
                          input=json.dumps(cases), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {(c["max_accept"], c["order"]): f for c, f in zip(cases, found)}


@pytest.mark.engine
def test_the_model_reaches_what_the_engine_scheduler_reaches(engine_reach: dict[tuple[int, str], int | None]) -> None:
    rule = reach_rule("sglang==0.5.23")
    recipes = {16: ServingGeometry(context_len=32768, draft_tokens=16, spec_topk=10, draft_has_kv=False),
               6: ServingGeometry(context_len=32768, draft_tokens=8, spec_steps=5, spec_topk=4),
               4: ServingGeometry(context_len=32768, draft_tokens=4, spec_steps=3, spec_topk=1)}
    from workbench.analysis.reach import Conditions
    for (accept, order), expected in engine_reach.items():
        algorithm = "NGRAM" if accept == 16 else "EAGLE"
        got = reach(rule, recipes[accept], Mode.TARGET_VERIFY, 0,
                    Conditions(overlap=order == "overlap", algorithm=algorithm)).largest_committed
        assert got == expected, (accept, order)


@pytest.mark.engine
def test_check_reach_follows_the_overlap_flag(engine_reach: dict[tuple[int, str], int | None]) -> None:
    on = check(QWQ_NGRAM, engine="sglang==0.5.23").rows[0]
    off = check(QWQ_NGRAM + " --disable-overlap-schedule", engine="sglang==0.5.23").rows[0]
    assert on.mode == off.mode == "target-verify"
    assert (on.reach, off.reach) == (engine_reach[(16, "overlap")], engine_reach[(16, "normal")])
    assert on.reach == 32768 + 11 and on.reach != off.reach
    assert "overlap on" in on.reach_why and "overlap off (--disable-overlap-schedule)" in off.reach_why


def _pooled(extra: str) -> list:  # type: ignore[type-arg]
    result = check("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --context-length 32768 "
                   "--speculative-algorithm EAGLE --speculative-draft-model-path Qwen/Qwen3-8B --speculative-num-steps 5 "
                   f"--speculative-eagle-topk 4 --speculative-num-draft-tokens 8 {extra}", engine="sglang==0.5.23")
    return [r for r in result.rows if r.kind == "pooled" and r.mode == "draft-decode"]


def test_a_full_batch_failure_states_the_pool_it_needs() -> None:
    holds = _pooled("--max-total-tokens 10000000")[0]  # 0.5.23 captures 256 requests on an H100
    assert holds.first_failing is not None and holds.batch is not None and holds.batch > 1
    assert holds.pool_needed == holds.batch * holds.first_failing
    assert holds.pool_holds is True and holds.reachable
    assert any("KV tokens" in c and "holds them" in c for c in holds.conditions)
    short = _pooled("--max-total-tokens 200000")[0]
    assert short.pool_holds is False and not short.reachable
    assert any(f"holds at most {200000 // short.first_failing}" in c for c in short.conditions)


def test_one_margin_everywhere() -> None:
    """The preflight's margin and the atlas's are one function: first - reach - 1."""
    from workbench.atlas.rows import _row, configurations

    result = check(QWQ_NGRAM, engine="sglang==0.5.23")
    row = result.rows[0]
    assert row.margin == verdict_numbers.margin(row.first_failing, row.reach)
    assert row.reachable == verdict_numbers.reached(row.first_failing, row.reach) and row.margin is not None
    assert row.margin < 0  # a FAILS row never shows margin 0
    config = next(c for c in configurations(["sglang==0.5.23"]) if c.backend == "sglang-fa3-page-table")
    atlas_row = _row(config, 32753, None, None)
    assert atlas_row["margin"] == verdict_numbers.margin(32753, int(str(atlas_row["reachable_len"])))
    fix = row.fix
    assert fix is not None and fix.share_of_kv_budget == verdict_numbers.kv_share(fix.extra_bytes,
                                                                                  result.deployment.kv_budget_bytes)


def test_overshoot_is_a_what_if() -> None:
    rule = reach_rule("sglang==0.5.23").with_overshoot(2)
    g = ServingGeometry(context_len=32768, page_size=128, draft_tokens=16, spec_topk=10, draft_has_kv=False,
                        width_gen="g3")
    where = reach(rule, g, Mode.TARGET_VERIFY)
    assert (where.cap, where.largest_committed) == (32767, 32769)
    assert "what-if" in where.why


def test_vllm_launches_without_a_measured_scheduler_take_the_constant_read() -> None:
    """V0 and platform-plugin launches: ``max_model_len - 1`` read from the source, no overshoot (V1
    launches take their release's measured scheduler: test_vllm_v1_block_table)."""
    for engine in ("vllm==0.23.0", "vllm==0.33.0"):
        rule = reach_rule(engine)
        assert (rule.cap_offset, rule.overshoot, rule.clamps_reads, rule.scheduler) == (1, 0, True, None)
        g = ServingGeometry(context_len=350000, page_size=64, draft_tokens=1)
        assert reach(rule, g, Mode.TARGET_VERIFY).largest_committed == 349999


@pytest.mark.parametrize("bad", [-1, 1025, True, 2.5])
def test_overshoot_out_of_range(bad: object) -> None:
    with pytest.raises(ValueError, match="--overshoot"):
        reach_rule("sglang==0.5.23").with_overshoot(bad)  # type: ignore[arg-type]


GLM_EAGLE = ("python -m sglang.launch_server --model-path zai-org/GLM-5.2-FP8 --context-length 131072 --tp-size 8 "
             "--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 "
             "--speculative-num-draft-tokens 6")


def test_draft_extend_rows_take_one_reach_in_the_atlas_and_the_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    """A draft-extend row's reach is its own mode's (spec v2: the batch's s + D) in both views: the
    atlas's scheduler reach equals the preflight row's, and its reachable length is that reach where
    the request table holds it."""
    from workbench.atlas.rows import _row, configurations

    monkeypatch.setenv("HF_HUB_CACHE", str(Path(__file__).parent / "data" / "hf_cache" / "hub"))  # the model's config
    result = check(GLM_EAGLE, engine="sglang==0.5.23")
    pre = next(r for r in result.rows if r.mode == "draft-extend")
    g = result.deployment.geometry
    config = next(c for c in configurations(["sglang==0.5.23"])
                  if c.backend == pre.backend.removeprefix("sglang-") and c.case.mode is Mode.DRAFT_EXTEND
                  and c.setting.recipe == "own" and c.case.geometry.context_len == g.context_len
                  and c.case.geometry.page_size == g.page_size and c.setting.preset.name == "GLM-5.2")
    atlas_row = _row(config, pre.first_failing, None, None)
    verify = next(r for r in result.rows if r.mode == "target-verify")
    assert pre.reach == atlas_row["scheduler_reach"] == verify.reach + g.draft_tokens
    assert atlas_row["reachable_len"] == min(pre.reach, g.request_table_width - 1)
    assert atlas_row["margin"] == verdict_numbers.margin(pre.first_failing, int(str(atlas_row["reachable_len"])))
