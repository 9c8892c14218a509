"""Where vLLM's V0 engine stops a request near ``max_model_len`` (``learn_vllm_v0_stop``): the reach
of a V0 launch, measured by running each release's own scheduler and stop checker.

Expected values: worked by hand from the comparisons each release writes. ``StopChecker`` ends a
sequence whose ``get_len()`` is ``> max_model_len`` in 0.8.2 (``stop_checker.py:84``) and
``>= max_model_len`` in 0.9.2 (``stop_checker.py:85``); with asynchronous output processing the
check runs after the next schedule, and the scheduler holds back a sequence whose ``get_len()`` is
``> max_model_len`` (0.8.2 ``core/scheduler.py:731-732``, the same test in 0.9.2). A request whose
prompt of ``c`` tokens was computed holds ``c + 1`` tokens once one is sampled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from workbench.backends.vllm import v0_graph_block_tables as v0
from workbench.engines.store import learned, wheels
from workbench.engines.vllm import learn_v0_stop as learn_vllm_v0_stop

SHIPPED = sorted(learned.SHIPPED.joinpath("vllm").glob("*.json"))
WITH_STOP = [p for p in SHIPPED if "v0-stop" in json.loads(p.read_text())["sections"]]

# max_model_len 100: (computed, asynchronous output) -> scheduled, per release
HAND_WORKED = {
    "vllm==0.8.2": {(98, False): True, (99, False): True, (100, False): False,
                    (98, True): True, (99, True): True, (100, True): False},
    "vllm==0.9.2": {(98, False): True, (99, False): False, (100, False): False,
                    (98, True): True, (99, True): True, (100, True): False},
}


@pytest.mark.parametrize("path", WITH_STOP, ids=[p.stem for p in WITH_STOP])
def test_each_v0_stop_section_is_sound_and_its_conformance_agrees(path: Path) -> None:
    data: dict[str, Any] = json.loads(path.read_text())
    assert not learned.validate(data)
    section = data["sections"]["v0-stop"]
    facts = section["backends"][learn_vllm_v0_stop.COMPONENT]
    for name in learn_vllm_v0_stop.FACTS.values():
        fact = facts[name]
        if fact["how"] == "absent":  # no V0 engine: the engine's message is kept
            assert fact["value"] is None and "no V0 engine" in fact["reason"]
            continue
        assert fact["how"] == "measured" and fact["value"] in v0.STOPS and fact["states"] >= 48
    for row in section["conformance"]:
        assert row["agree"] == row["states"] >= 200, (data["engine"], row["first_disagreement"])


def test_the_last_step_of_each_form_is_the_hand_worked_one() -> None:
    # at-limit: a sequence of 100 tokens is ended, so the last step runs holding 99 (committed 98);
    # past-limit: one of 100 still runs (committed 99, position 99, the row's last slot)
    assert v0.last_step("at-limit", 100) == 98
    assert v0.last_step("past-limit", 100) == 99


@pytest.mark.engine
@pytest.mark.parametrize("engine", list(HAND_WORKED))
def test_the_releases_own_scheduler_and_stop_checker_give_the_hand_worked_steps(engine: str) -> None:
    from workbench.engines.vllm import session as vllm_session

    install = wheels.cached(engine)
    if install is None:
        pytest.skip(f"{engine} is not in the workbench's engine cache (workbench engines learn {engine})")
    session, _ = vllm_session.open_session(install)
    worked = HAND_WORKED[engine]
    states = [{"max_model_len": 100, "block_size": 16, "computed": c, "async_output": a} for c, a in worked]
    with session:
        answers = vllm_session.ask_all(session, learn_vllm_v0_stop.TASK, "states", states)
    assert answers == [{"scheduled": True} if scheduled else {"stopped": True} for scheduled in worked.values()]


def test_a_v0_launch_takes_the_reach_of_its_output_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.preflight.resolve_vllm import _v0_reach

    monkeypatch.setattr(v0, "stop_forms", lambda: {"vllm==0.9.2": ("at-limit", "past-limit")})
    checked = _v0_reach("vllm==0.9.2", "vllm==0.9.2", 4096, False)
    extra = _v0_reach("vllm==0.9.2", "vllm==0.9.2", 4096, True)  # the extra step of asynchronous output
    assert (checked.cap_offset, extra.cap_offset) == (2, 1)
    assert "StopChecker" in checked.sources["committed_cap"] and "asynchronous output" in extra.sources["committed_cap"]
    stood_in = _v0_reach("vllm==0.9.2", "vllm==0.9.1.post9", 4096, False)
    assert stood_in.substituted == "vllm==0.9.2"
