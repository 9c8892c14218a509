"""vLLM's asynchronous scheduler near ``max_model_len`` (``learn_vllm_async``): the cap its
``AsyncScheduler`` forms steps with, measured by driving the release's own scheduler as the engine
core's batch queue drives it, and the reach an asynchronously scheduled launch takes from it.

Expected values: step sequences worked by hand below from the scheduler's bookkeeping (a step is
formed at the request's ``num_computed_tokens``, which counts the step still in flight; the step
gets ``min(1 + k, max_model_len - 1 - c)`` tokens; an output that accepts ``a`` of its ``d`` drafts
takes ``d - a`` back; the request finishes once it holds ``max_model_len`` tokens), and, where the
wheel is cached, the release's own ``AsyncScheduler`` run on a CPU (the learn worker).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from workbench.backends.vllm import v1_block_table as v1
from workbench.engines.store import learned, wheels
from workbench.engines.vllm import learn_async as learn_vllm_async

SHIPPED = sorted(learned.SHIPPED.joinpath("vllm").glob("*.json"))
WITH_ASYNC = [p for p in SHIPPED if "async" in json.loads(p.read_text())["sections"]]
ENGINE = "vllm==0.23.0"  # the preflight's and the notebooks' vLLM release

# max_model_len 1000, 3 drafts, a prompt of 990 tokens. Two steps are in flight: the step at 990
# is formed before the prompt's output is back, the one at 994 before the 990 step's output.
# All drafts accepted: 990 (+4), 994 (+4), 998 (+1: min(4, 999 - 998)); the outputs bring the
# request to 991, 995, 999 and 1000 tokens, where it finishes.
# None accepted: 990 (+4 -> 994), 994 (+4 -> 998; then the 990 step's 3 drafts come back rejected:
# 995), 995 (+4 -> 999; the 994 step's 3 rejected: 996), 996 (+3 -> 999; 3 rejected: 996),
# 996 (+3; 2 rejected: 997), 997 (+2; 2 rejected: 997), 997 (+2; 1 rejected: 998), 998 (+1;
# 1 rejected: 998), 998 (+1); the tenth output is the request's 1000th token.
HAND_WORKED = {
    3: [[990, 4, 3], [994, 4, 3], [998, 1, 0]],
    0: [[990, 4, 3], [994, 4, 3], [995, 4, 3], [996, 3, 2], [996, 3, 2], [997, 2, 1], [997, 2, 1],
        [998, 1, 0], [998, 1, 0]],
}


@pytest.mark.parametrize("path", WITH_ASYNC, ids=[p.stem for p in WITH_ASYNC])
def test_each_async_section_is_sound_and_its_conformance_agrees(path: Path) -> None:
    data: dict[str, Any] = json.loads(path.read_text())
    assert not learned.validate(data)
    section = data["sections"]["async"]
    fact = section["backends"][v1.NAME]["async_cap"]
    if fact["how"] == "absent":  # no drafter scheduled asynchronously: the engine's refusal is kept
        assert fact["value"] is None and section["conformance"] == []
        assert "schedules no drafter asynchronously" in fact["reason"]
        return
    assert fact["how"] == "measured" and fact["value"] in v1.CAPS and fact["states"] >= 48
    (row,) = section["conformance"]
    assert row["function"] == learn_vllm_async.FUNCTION
    assert row["agree"] == row["states"] >= 200, (data["engine"], row["first_disagreement"])


def test_the_async_model_is_the_cap_at_each_count_the_engine_formed_a_step_at() -> None:
    state = {"max_model_len": 1000, "k": 3, "at": [step[0] for step in HAND_WORKED[0]]}
    assert learn_vllm_async._model("below-limit", state) == {"steps": HAND_WORKED[0], "finished": True}
    assert learn_vllm_async._model("to-limit", state)["steps"][-1] == [998, 2, 1]  # min(4, 1000 - 998)
    assert learn_vllm_async._model("uncapped", state)["steps"][-1] == [998, 4, 3]


@pytest.mark.engine
def test_the_releases_own_async_scheduler_forms_the_hand_worked_steps() -> None:
    from workbench.engines.vllm import session as vllm_session

    install = wheels.cached(ENGINE) or wheels.fetch(ENGINE)
    session, _ = vllm_session.open_session(install)
    states = [{"max_model_len": 1000, "block_size": 16, "k": 3, "computed": 990, "accepted": a} for a in HAND_WORKED]
    with session:
        answers = vllm_session.ask_all(session, "async_steps", "states", states)
        facts = {"async_cap": {"value": "below-limit"}}
        row = learn_vllm_async.conformance_row(session, facts, 200, seed=7)  # states the learner did not see
    assert answers == [{"steps": HAND_WORKED[a], "finished": True} for a in HAND_WORKED]
    assert row["agree"] == row["states"] == 200, row["first_disagreement"]


def test_an_asynchronous_launch_takes_the_async_cap_or_says_it_assumes_the_synchronous_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cap's last step is ``max_model_len - 2`` (the request stops on holding
    ``max_model_len`` tokens): what the async measurement changes is what the reach rests on."""
    from workbench.preflight.resolve_vllm import _measured_reach

    measured = v1.KvRelease("capped", 0, "below-limit", "none", async_cap="below-limit")
    unmeasured = v1.KvRelease("capped", 0, "below-limit", "none")
    monkeypatch.setattr(v1, "releases", lambda: {"vllm==9.0.0": measured, "vllm==9.1.0": unmeasured})
    rule = _measured_reach("vllm==9.0.0", "vllm==9.0.0", 4096, 3, True)
    assert (rule.cap_offset, rule.assumed) == (2, None) and "AsyncScheduler" in rule.sources["committed_cap"]
    plain = _measured_reach("vllm==9.1.0", "vllm==9.1.0", 4096, 3, True)
    assert plain.cap_offset == 2 and "AsyncScheduler was not measured" in str(plain.assumed)
    synchronous = _measured_reach("vllm==9.0.0", "vllm==9.0.0", 4096, 3, False)
    assert synchronous.assumed is None and "AsyncScheduler" not in synchronous.sources["committed_cap"]
