"""vLLM v1's padding of a waiting request to the uniform spec-decode size near ``max_model_len``
(``backends/vllm/v1_waiting_pad.py``), and the learned ``pad`` sections it reads.

Expected values: counts worked by hand below from the scheduler's waiting loop as each release
writes it (0.25.0 ``scheduler.py:812-826``: ``1 + k`` when ``computed + 1 + k <= max_model_len``,
else not scheduled; the running loop's ``min(n, max_model_len - computed - 1)``; 0.34.0
``scheduler.py:1358-1380``: padded only when the sampled token fits too), vLLM PR 53962's account
(the step after a pad onto ``max_model_len`` is scheduled a negative count), executed scans, and,
where the wheel is cached, the release's own ``AsyncScheduler`` run on a CPU (the learn worker).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workbench.analysis.probe import probe
from workbench.backends.vllm import v1_waiting_pad as pad
from workbench.engines.store import learned, wheels
from workbench.model.outcome import Outcome

SHIPPED = sorted(learned.SHIPPED.joinpath("vllm").glob("*.json"))
WITH_PAD = [p for p in SHIPPED if "pad" in json.loads(p.read_text())["sections"]]
PADS, FIXED = "vllm==0.25.0", "vllm==0.34.0"

pytestmark = pytest.mark.skipif(PADS not in pad.releases() or FIXED not in pad.releases(),
                                reason="the pad sections of vllm 0.25.0 and 0.34.0 are not learned")


def case(engine: str, prompt_len: int, drafts: int = 3, length: int = 1012, block: int = 16) -> pad.PadCase:
    return pad.BACKEND.parse({"component": pad.NAME, "engine": engine, "max_model_len": length, "block_size": block,
                              "drafts": drafts, "prompt_lens": [prompt_len]})


def test_each_release_learned_the_form_its_code_has() -> None:
    found = pad.releases()
    assert found[PADS] == "to-limit"  # 0.25.0: pads while computed + 1 + k <= max_model_len
    assert found[FIXED] == "with-room"  # PR 53962: only with room for the sampled token
    for engine, form in found.items():  # no release before the padding pads; none after the fix fails
        version = tuple(int(p) for p in engine.split("==")[1].split(".")[:2])
        if version <= (0, 23):
            assert form == "unpadded", engine
        if version >= (0, 31):
            assert form == "with-room", engine


def test_the_worked_example_schedules_a_negative_count() -> None:
    # 1009 tokens: (1009 - 1) // 16 = 63 blocks, 1008 cached, one left; 1008 + 4 = 1012 = max_model_len
    assert pad.cached_tokens(1009, 16) == 1008
    assert pad.first_step("to-limit", 1012, 16, 3, 1009) == {"scheduled": 4, "negative": True}
    assert pad.first_step("to-limit-clamped", 1012, 16, 3, 1009) == {"scheduled": 4, "negative": False}
    assert pad.first_step("to-limit", 1012, 16, 3, 1008) == {"scheduled": 16, "negative": False}  # 992 cached
    assert pad.first_step("to-limit", 1011, 16, 3, 1009) == {"scheduled": 0, "negative": False}  # 1012 > 1011
    assert pad.first_step("with-room", 1012, 16, 3, 1009) == {"scheduled": 1, "negative": False}  # 1013 > 1012
    assert pad.first_step("with-room", 1013, 16, 3, 1009) == {"scheduled": 4, "negative": False}
    assert pad.first_step("unpadded", 1012, 16, 3, 1009) == {"scheduled": 1, "negative": False}
    failing = probe(case(PADS, 1009))
    assert failing.outcome is Outcome.HOST_ERROR
    assert failing.error == "ValueError: repeats may not contain negative values."  # numpy's own message
    assert probe(case(PADS, 1008)).outcome is Outcome.OK
    assert probe(case(FIXED, 1009)).outcome is Outcome.OK


@pytest.mark.parametrize("engine", [PADS, FIXED])
@pytest.mark.parametrize("length,block,drafts", [(1012, 16, 3), (1013, 16, 3), (100, 16, 3), (134, 32, 5),
                                                 (70, 1, 2), (200, 64, 7), (50, 8, 0)])
def test_the_closed_form_equals_an_executed_scan(engine: str, length: int, block: int, drafts: int) -> None:
    base = case(engine, 1, drafts, length, block)
    low, high = pad.BACKEND.scan_range(base)
    values = np.arange(low, high + 1)
    executed = [probe(pad.BACKEND.at(base, int(s))).outcome.failed for s in values]
    assert pad.BACKEND.fails_grid(base, values).tolist() == executed
    failing = [int(s) for s, bad in zip(values, executed) if bad]
    if engine == PADS and drafts:  # hand: only L = length - k, when L - 1 is whole blocks
        boundary = length - drafts
        assert failing == ([boundary] if (boundary - 1) % block == 0 else [])
    else:
        assert failing == []


@pytest.mark.parametrize("path", WITH_PAD, ids=[p.stem for p in WITH_PAD])
def test_each_pad_section_is_sound_and_its_conformance_agrees(path: Path) -> None:
    data: dict[str, Any] = json.loads(path.read_text())
    assert not learned.validate(data)
    section = data["sections"]["pad"]
    fact = section["backends"][pad.NAME]["waiting_pad"]
    assert "/tmp/" not in json.dumps(fact)  # nothing of the learning machine's folders
    if fact["how"] == "absent":  # the release does not start the configuration: nothing recorded
        assert fact["value"] is None and section["conformance"] == []
        return
    assert fact["how"] == "measured" and fact["value"] in pad.FORMS, fact
    assert section["conformance"], data["engine"]
    for row in section["conformance"]:
        assert row["agree"] == row["states"] >= 200, (data["engine"], row["first_disagreement"])


@pytest.mark.engine
@pytest.mark.parametrize("engine", [PADS, FIXED])
def test_the_model_agrees_with_the_releases_own_scheduler(engine: str) -> None:
    """The release's own ``AsyncScheduler``: at the worked example 0.25.0 schedules -1 tokens for the
    prompt sent again (PR 53962's crash), 0.34.0 schedules it unpadded."""
    from workbench.engines.vllm import learn_pad as learn_vllm_pad
    from workbench.engines.vllm import session as vllm_session

    install = wheels.cached(engine)
    if install is None:
        pytest.skip(f"{engine} is not in the workbench's engine cache (workbench engines learn {engine})")
    session, _ = vllm_session.open_session(install)
    with session:
        states = [{"max_model_len": 1012, "block_size": 16, "k": 3, "prompt_len": length} for length in (1009, 1008)]
        answers = vllm_session.ask_all(session, "waiting_pad", "states", states)
        facts = learned.section(engine, "pad")["backends"][pad.NAME]  # type: ignore[index]
        row = learn_vllm_pad.conformance_row(session, facts, 200, seed=7)  # states the learner did not see
    at_limit, short = answers
    if engine == PADS:
        assert at_limit["scheduled"][:2] == [4, -1] and at_limit["computed"][0] == 1012, at_limit
    else:
        assert at_limit["scheduled"][0] == 1 and min(at_limit["scheduled"]) >= 0, at_limit
    assert short["scheduled"][0] == 16 and min(short["scheduled"]) >= 0, short  # 992 cached, 16 left
    assert row["agree"] == row["states"] == 200, row["first_disagreement"]


# ---- in a launch check: the release's own resolution, then this row ----------------------------------

HF_CACHE = Path(__file__).parent / "data" / "hf_cache" / "hub"
ASYNC_NGRAM = ("vllm serve Qwen/Qwen3-8B --max-model-len 1012 --block-size 16 --async-scheduling --speculative-config "
               "'{\"method\": \"ngram_gpu\", \"num_speculative_tokens\": 3, \"prompt_lookup_max\": 3, "
               "\"prompt_lookup_min\": 1}'")


@pytest.mark.engine
def test_an_async_speculative_launch_under_a_padding_release_fails_at_the_boundary_prompt(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.preflight import FAILS, SAFE, check

    monkeypatch.setenv("HF_HUB_CACHE", str(HF_CACHE))
    if wheels.cached(PADS) is None:
        pytest.skip(f"{PADS} is not in the workbench's engine cache (workbench engines learn {PADS})")
    result = check(ASYNC_NGRAM, engine=PADS, progress=None)
    row = next(r for r in result.rows if r.backend == pad.NAME)
    # the prompt of 1012 - 3 = 1009 tokens (1008 = 63 blocks of 16 cached): committed length 1008
    assert (row.first_failing, row.outcome, row.reachable) == (1008, "host-error", True)
    assert row.conditions and "a prompt of 1009 tokens sent again" in row.conditions[0]
    assert result.status == FAILS and "needs: a prompt of 1009 tokens sent again" in result.verdict
    # the scheduler pads and the runner repeats whether or not a graph was captured
    eager = check(ASYNC_NGRAM + " --enforce-eager", engine=PADS, progress=None)
    (eager_row,) = [r for r in eager.rows if r.backend == pad.NAME]
    assert (eager_row.first_failing, eager_row.outcome) == (1008, "host-error") and eager.status == FAILS
    # without prefix caching no prompt is padded: no row
    plain = check(ASYNC_NGRAM + " --no-enable-prefix-caching", engine=PADS, progress=None)
    assert not [r for r in plain.rows if r.backend == pad.NAME] and plain.status == SAFE
