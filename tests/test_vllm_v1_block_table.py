"""vLLM v1's block table against the blocks the KV cache manager gives a request verifying drafts
(``backends/vllm/v1_block_table.py``), and the learned ``kv`` sections it reads.

Expected values: block counts worked by hand below from the arithmetic of ``allocate_slots`` as
each release writes it (0.8.2 ``kv_cache_manager.py:141-254``: ``cdiv(computed + new, block_size)``
blocks, 64 preallocated tokens, never more than ``cdiv(max_model_len, block_size)``, then
``assert num_new_blocks > 0``; 0.9.0.1 on: slots capped at ``max_model_len``), executed scans, and,
where the wheel is cached, the release's own ``allocate_slots`` run on a CPU (the learn worker).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workbench.analysis.probe import probe
from workbench.backends.vllm import v1_block_table as v1
from workbench.engines.store import learned, wheels
from workbench.engines.store.releases import version_key
from workbench.engines.vllm import learn_kv as learn_vllm_kv
from workbench.model.outcome import Outcome

SHIPPED = sorted(learned.SHIPPED.joinpath("vllm").glob("*.json"))
WITH_KV = [p for p in SHIPPED if "kv" in json.loads(p.read_text())["sections"]]
OLD, NEW = "vllm==0.8.2", "vllm==0.23.0"
ROW_LIMITED = "vllm==0.8.5"

pytestmark = pytest.mark.skipif(OLD not in v1.releases() or NEW not in v1.releases(),
                                reason="the kv sections of vllm 0.8.2 and 0.23.0 are not learned")


def case(engine: str, seq_len: int, drafts: int = 3, length: int = 4096, block: int = 16,
         lookahead: int = 0) -> v1.V1StepCase:
    return v1.BACKEND.parse({"component": v1.NAME, "engine": engine, "max_model_len": length, "block_size": block,
                             "drafts": drafts, "lookahead": lookahead, "seq_lens": [seq_len]})


def test_each_release_learned_the_policy_its_code_has() -> None:
    """0.8.2's manager preallocates (64 tokens) and its scheduler has no cap; from 0.9.0.1 both cap:
    0.9.0.1 at ``max_model_len - c`` (scheduler.py:203-205), from 0.11.0 at ``max_model_len - 1 - c``
    (0.11.0 scheduler.py:224-226; 0.23.0 413-416), as the lines the learner read beside them say."""
    found = v1.releases()
    assert found[OLD] == v1.KvRelease("preallocated", 64, "uncapped", "none")
    # 0.23.0's AsyncScheduler caps as its Scheduler does (0.8.2 has no asynchronous scheduling)
    assert found[NEW] == v1.KvRelease("capped", 0, "below-limit", "128-div-block-size", async_cap="below-limit")
    later = {e: r for e, r in found.items() if version_key(e.split("==")[1]) >= version_key("0.9.0")}
    assert all(r.slots == "capped" and r.scheduler_caps for r in later.values())
    if "vllm==0.9.0.1" in found:
        assert found["vllm==0.9.0.1"].scheduler_cap == "to-limit"
    # 0.8.5 (kv_cache_manager.py: no num_preallocate_tokens, num_lookahead_tokens counted, the blocks
    # still limited to max_num_blocks_per_req, then the assertion) and the scheduler.py cap of 0.9.0.1
    if ROW_LIMITED in found:
        assert found[ROW_LIMITED] == v1.KvRelease("row-limited", 0, "to-limit", "none")
    # the statement the learner read beside each measurement says the same
    said = {"uncapped": lambda t: t == "", "to-limit": lambda t: "max_model_len - request.num_computed_tokens" in t,
            "below-limit": lambda t: "- 1 -" in t or "num_sampled_tokens_per_step" in t}
    for engine, release in found.items():
        line = (learned.section(engine, "kv") or {})["backends"][v1.NAME]["scheduler_cap"]["line"]["text"] or ""
        assert said[release.scheduler_cap](" ".join(line.split())), (engine, release.scheduler_cap, line)


def test_the_worked_example_asserts_at_the_257th_block() -> None:
    # seq_len 4094: committed 4093, 1 + 3 new tokens -> cdiv(4097, 16) = 257 blocks > 4096 / 16 = 256
    failing = probe(case(OLD, 4094))
    assert failing.outcome is Outcome.HOST_ASSERT
    assert failing.error == "AssertionError in KVCacheManager.allocate_slots: the step needs 257 blocks, the row holds 256"
    assert probe(case(OLD, 4093)).outcome is Outcome.OK  # cdiv(4096, 16) = 256: the step fits
    assert probe(case(NEW, 4094, lookahead=3)).outcome is Outcome.OK  # 0.23.0 schedules min(4, 4096 - 4093) = 3


@pytest.mark.parametrize("engine", [OLD, NEW, "vllm==0.8.4", ROW_LIMITED])
@pytest.mark.parametrize("length,block,drafts", [(100, 16, 3), (96, 16, 5), (64, 1, 2), (300, 32, 9), (50, 8, 0),
                                                  (70, 1, 9), (4096, 128, 7)])
def test_the_closed_form_equals_an_executed_scan(engine: str, length: int, block: int, drafts: int) -> None:
    if engine not in v1.releases():
        pytest.skip(f"{engine}'s kv section is not learned")
    base = case(engine, 1, drafts, length, block, lookahead=drafts)
    low, high = v1.BACKEND.scan_range(base)
    values = np.arange(low, high + 1)
    executed = [probe(v1.BACKEND.at(base, int(s))).outcome.failed for s in values]
    assert v1.BACKEND.fails_grid(base, values).tolist() == executed
    if engine == OLD and drafts:  # hand: fails once seq_len + drafts passes the row's tokens
        first = next(int(s) for s, bad in zip(values, executed) if bad) if any(executed) else None
        row_tokens = -(-length // block) * block
        assert first == (row_tokens - drafts + 1 if row_tokens - drafts + 1 <= high else None)
    if engine == NEW:
        assert not any(executed)
    if engine == ROW_LIMITED and drafts:  # hand: the prefill fills the last block, then the lookahead passes it
        row_tokens = -(-length // block) * block
        assert [int(s) for s, bad in zip(values, executed) if bad] == [
            s for s in range(low, high + 1) if -(-(s - 1) // block) * block == row_tokens
            and s - 1 + min(1 + drafts, length - (s - 1)) + drafts > row_tokens]


def test_the_allocation_model_in_worked_states() -> None:
    """Hand-worked: 64 preallocated tokens at block 16 are 4 blocks."""
    assert v1.allocation("preallocated", 64, 4096, 16, 0, 1, 0) == {"held": 5}  # 1 block + 4
    assert v1.allocation("preallocated", 64, 4096, 16, 100, 1, 0) == {"held": 11}  # cdiv(100,16)=7 + 4; step fits
    assert v1.allocation("preallocated", 64, 4096, 16, 4094, 4, 3) == {"error": v1.ASSERT_ERROR}
    assert v1.allocation("preallocated", 64, 4096, 16, 4000, 4, 3) == {"held": 254}  # 250 + 4
    assert v1.allocation("capped", 0, 4096, 16, 4094, 4, 3) == {"held": 256}  # min(4101, 4096) / 16
    assert v1.allocation("capped", 0, 4096, 16, 4000, 4, 3) == {"held": 251}  # cdiv(4007, 16)


@pytest.mark.parametrize("path", WITH_KV, ids=[p.stem for p in WITH_KV])
def test_each_kv_section_is_sound_and_its_conformance_agrees(path: Path) -> None:
    data: dict[str, Any] = json.loads(path.read_text())
    assert not learned.validate(data)
    kv = data["sections"]["kv"]
    facts = kv["backends"][v1.NAME]
    if facts["slots"]["how"] == "absent":  # a V0-only release: nothing to run, nothing recorded
        assert facts["slots"]["value"] is None and kv["conformance"] == []
        return
    assert facts["slots"]["how"] == "measured" and facts["slots"]["value"] in v1.SLOTS
    cap = facts["scheduler_cap"]
    assert cap["how"] == "measured" and cap["value"] in v1.CAPS and cap["states"] >= 48
    if cap["line"]["text"] is not None:  # the statement read beside it names the length it caps by
        assert "max_model_len" in cap["line"]["text"] and "min(" in cap["line"]["text"]
    for row in kv["conformance"]:
        assert row["agree"] == row["states"] >= 200, (data["engine"], row["first_disagreement"])
        # the states reach the row's end: the preallocating release asserts on some of them
    assert [r["function"] for r in kv["conformance"]] == [learn_vllm_kv.FUNCTION, learn_vllm_kv.STEP]


@pytest.mark.engine
@pytest.mark.parametrize("engine", [NEW, OLD])
def test_the_allocation_model_agrees_with_the_releases_own_allocate_slots(engine: str) -> None:
    from workbench.engines.vllm import learn_kv as learn_vllm_kv
    from workbench.engines.vllm import session as vllm_session

    install = wheels.cached(engine)
    if install is None and engine == NEW:  # the notebooks' and the preflight's release: fetched anyway
        install = wheels.fetch(engine)
    if install is None:
        pytest.skip(f"{engine} is not in the workbench's engine cache (workbench engines learn {engine})")
    session, located = vllm_session.open_session(install)
    with session:
        # hand-worked states: (length, block, computed, new, lookahead) -> the blocks or the assertion
        states = [{"max_model_len": 4096, "block_size": 16, "computed": c, "new_tokens": n, "lookahead": la}
                  for c, n, la in ((0, 1, 0), (4093, 4, 3), (4092, 4, 3), (4000, 4, 3))]
        answers = vllm_session.ask_all(session, "kv_slots", "states", states)
        facts = learned.section(engine, "kv")["backends"][v1.NAME]  # type: ignore[index]
        row = learn_vllm_kv.conformance_row(session, facts, 200, seed=7)  # states the learner did not see
        steps = vllm_session.ask_all(session, "decode_step", "states", [
            {"max_model_len": 1000, "block_size": 16, "k": 3, "computed": c} for c in STEP_LENGTHS])
        step_row = learn_vllm_kv.step_row(session, facts, 200, seed=7)
    if engine == OLD:
        assert answers == [{"held": 5}, {"error": v1.ASSERT_ERROR}, {"held": 256}, {"held": 254}]
    else:
        assert answers == [{"held": 1}, {"held": 256}, {"held": 256}, {"held": 251}]
    assert row["agree"] == row["states"] == 200, row["first_disagreement"]
    assert steps == [_step(engine, c) for c in STEP_LENGTHS]
    assert step_row["agree"] == step_row["states"] == 200, step_row["first_disagreement"]


# Hand-worked from each scheduler's line (max_model_len 1000, 3 drafts): 0.8.2 gives 1 + 3 at any
# length, 0.23.0 min(4, 1000 - 1 - c); each finishes the request whose sampled token is its 1000th.
STEP_LENGTHS = (5, 994, 995, 996, 997, 998, 999)


def _step(engine: str, computed: int) -> dict[str, Any]:
    if computed + 1 >= 1000:
        return {"stopped": True}
    n = 4 if engine == OLD else min(4, 1000 - 1 - computed)
    return {"scheduled": n, "drafts": n - 1}


@pytest.mark.parametrize("cap", list(v1.CAPS))
def test_the_step_model_is_each_forms_hand_worked_step(cap: str) -> None:
    offset = {"uncapped": None, "to-limit": 0, "below-limit": 1}[cap]
    for computed in STEP_LENGTHS:
        got = v1.decode_step(cap, 1000, computed, 3)
        if computed >= 999:
            assert got == {"stopped": True}
            continue
        n = 4 if offset is None else min(4, 1000 - offset - computed)
        assert got == {"scheduled": n, "drafts": n - 1}
    assert v1.last_step(cap, 1000, 3) == 998  # the stop, not the cap, ends every form's steps


def test_a_release_never_run_takes_its_neighbours_facts_only_where_they_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    found = v1.releases()
    assert v1.bracketing_release(OLD) == OLD
    # 0.8.1 has no measured release below it (0.8.2 is the first with a learned kv section): no answer
    assert "vllm==0.8.1" not in found and v1.bracketing_release("vllm==0.8.1") is None
    if {"vllm==0.14.1", "vllm==0.17.0"} <= set(found) and "vllm==0.15.0" not in found:
        assert found["vllm==0.14.1"] == found["vllm==0.17.0"]
        assert v1.bracketing_release("vllm==0.15.0") == "vllm==0.14.1"
    # two measured neighbours that differ leave the release between them without an answer
    differing = {e: r for e, r in found.items() if e in (OLD, NEW)}
    assert differing[OLD] != differing[NEW]
    monkeypatch.setattr(v1, "releases", lambda: differing)
    assert v1.bracketing_release("vllm==0.15.0") is None


# ---- in a launch check: the release's own resolution, then this row ----------------------------------

HF_CACHE = Path(__file__).parent / "data" / "hf_cache" / "hub"
NGRAM = ("vllm serve facebook/opt-125m --speculative-config "
         "'{\"method\": \"ngram\", \"num_speculative_tokens\": 3, \"prompt_lookup_max\": 4}'")


@pytest.fixture
def hf_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(HF_CACHE))


@pytest.mark.engine
@pytest.mark.usefixtures("hf_cache")
def test_a_v1_launch_gets_the_row_and_its_releases_measured_reach() -> None:
    from workbench.preflight import SAFE, check

    result = check(NGRAM, engine=NEW, progress=None)
    rows = [r for r in result.rows if r.backend == v1.NAME]
    # opt-125m: 2048 positions (its config's max_position_embeddings), block size 16 -> 128 blocks
    assert [(r.width, r.first_failing, r.outcome) for r in rows] == [(128, None, "ok")]
    assert result.status == SAFE
    overshoot = result.deployment.settings["overshoot"]
    assert overshoot.origin == "engine" and overshoot.source.startswith(
        "measured: vllm==0.23.0's Scheduler.schedule and update_from_output")
    assert rows[0].reach == 2048 - 2  # its scheduler caps at 2048 - 1 - c and stops a request holding 2048


@pytest.mark.engine
@pytest.mark.usefixtures("hf_cache")
def test_v1_ngram_under_082_fails_where_the_drafts_pass_the_row() -> None:
    from workbench.preflight import FAILS, check

    if wheels.cached(OLD) is None:
        pytest.skip(f"{OLD} is not in the workbench's engine cache (workbench engines learn {OLD})")
    command = ("VLLM_USE_V1=1 vllm serve facebook/opt-125m --speculative-model '[ngram]' "
               "--num-speculative-tokens 3 --ngram-prompt-lookup-max 4")
    result = check(command, engine=OLD, progress=None)
    row = next(r for r in result.rows if r.backend == v1.NAME)
    # committed c, 1 + 3 new tokens: the first c with c + 4 > 128 * 16 = 2048 is 2045
    assert (row.first_failing, row.outcome, row.reachable) == (2045, "host-assert", True)
    # the release's check_stop finishes a request holding 2048 tokens: its last step runs at 2046
    assert row.reach == 2046 and result.status == FAILS
    assert any("caps no running request's step by max_model_len (measured)" in n for n in result.deployment.notes)
    assert result.deployment.settings["overshoot"].origin == "engine"
    # the assertion is the KV cache manager's: a launch without graphs meets it at the same length
    eager = check(command + " --enforce-eager", engine=OLD, progress=None)
    assert [(r.backend, r.first_failing, r.outcome) for r in eager.rows] == [(v1.NAME, 2045, "host-assert")]
    assert eager.status == FAILS and eager.deployment is not None and not eager.deployment.graphs


def test_a_launch_without_a_case_says_why() -> None:
    extra = {"num_speculative_tokens": 3, "lookahead": 3}
    assert v1.BACKEND.launch_case("vllm==0.8.1", 4096, 16, extra) is None
    assert v1.BACKEND.launch_gap("vllm==0.8.1", extra) == (
        "vllm==0.8.1's KV cache manager was never run (workbench engines learn vllm==0.8.1), and the measured "
        "releases on either side of it differ or are missing")
    assert v1.BACKEND.launch_case(NEW, 4096, 16, {**extra, "dcp_size": 2}) is None
    assert v1.BACKEND.launch_gap(NEW, {**extra, "dcp_size": 2}) == "a context-parallel split (dcp 2, pcp 1) is not modelled"
    assert v1.BACKEND.launch_case(NEW, 4096, 16, {**extra, "pcp_size": 4}) is None


@pytest.mark.engine
@pytest.mark.usefixtures("hf_cache")
def test_a_v1_command_naming_its_attention_backend_is_not_read_as_v0() -> None:
    """vLLM's V1 parser has --attention-backend; V0's backend is what the adapter derives for V0
    alone (``v0_attention_backend``): the flag must not make the launch a V0 one."""
    from workbench.preflight import resolve

    d = resolve("vllm serve facebook/opt-125m --attention-backend FLASH_ATTN", engine=NEW, progress=None)
    assert d is not None and d.launch_names == ("v1-block-table",)
    assert d.settings["attention_backend"].value == "FLASH_ATTN" and d.settings["attention_backend"].origin == "given"


SCHEDULERS = {
    # 0.23.0's form, the statement wrapped over three lines
    "direct": ("        num_new_tokens = min(num_new_tokens, token_budget)\n"
               "        num_new_tokens = min(\n            num_new_tokens,\n"
               "            self.max_model_len - 1 - request.num_computed_tokens\n        )\n",
               "num_new_tokens = min( num_new_tokens, self.max_model_len - 1 - request.num_computed_tokens )", "5-8"),
    # 0.11.1's form: through a variable bounded by max_model_len
    "through": ("        max_total = min(request.num_prompt_tokens + request.max_tokens, self.max_model_len)\n"
                "        num_new_tokens = min(num_new_tokens, max_total - 1 - request.num_computed_tokens)\n",
                "max_total = min(request.num_prompt_tokens + request.max_tokens, self.max_model_len); "
                "num_new_tokens = min(num_new_tokens, max_total - 1 - request.num_computed_tokens)", "4-5"),
    # 0.8.2's: only the token budget
    "none": ("        num_new_tokens = min(num_new_tokens, token_budget)\n", None, None),
}


@pytest.mark.parametrize("form", list(SCHEDULERS))
def test_the_scheduler_cap_is_found_as_written(form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from workbench.engines.vllm import buffers as vllm_buffers

    body, statement, lines = SCHEDULERS[form]
    source = tmp_path / "vllm" / "v1" / "core" / "sched" / "scheduler.py"
    source.parent.mkdir(parents=True)
    source.write_text("class Scheduler:\n    def schedule(self):\n        num_new_tokens = 4\n" + body)
    spec = importlib.util.spec_from_file_location("fake_scheduler", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(vllm_buffers, "_module", lambda name: module if name == vllm_buffers.SCHEDULER else None)
    found = vllm_buffers.scheduler_cap()
    assert found["found"] == statement
    if lines:
        assert found["source"] == f"vllm/v1/core/sched/scheduler.py:{lines}"
    else:
        assert "no num_new_tokens = min(...) bounded by max_model_len" in found["searched"]


def test_a_launch_of_an_unmeasured_release_takes_its_neighbours_reach_and_says_so() -> None:
    from workbench.preflight.resolve_vllm import _measured_reach

    found = v1.releases()
    if not {"vllm==0.14.1", "vllm==0.17.0"} <= set(found) or "vllm==0.15.0" in found:
        pytest.skip("the 0.14.1 / 0.17.0 bracket is not what this machine learned")
    rule = _measured_reach(v1.bracketing_release("vllm==0.15.0") or "", "vllm==0.15.0", 4096, 3, False)
    assert (rule.engine, rule.substituted, rule.cap_offset, rule.overshoot) == ("vllm==0.15.0", "vllm==0.14.1", 2, 0)
    own = _measured_reach(NEW, NEW, 4096, 3, False)
    assert own.substituted is None and own.clamps_reads and own.sources["committed_cap"].endswith("max_model_len - 2")
