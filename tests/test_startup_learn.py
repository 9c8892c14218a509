"""The atlas's settings as each release's own start-up checks answer them (``startup_learn``).

The shipped answers are the engine's: a sample of them is asked again of 0.5.23's own resolution
here and must come back the same; the atlas must run no setting the release refuses, and say so in
its row (status ``refused``, the engine's message).
"""

from __future__ import annotations

import shutil

import pandas as pd  # type: ignore[import-untyped]
import pytest

from workbench.engines.commands import startup_learn
from workbench.engines.store import learned, startup_section, wheels
from workbench.model.geometry import ServingGeometry

ENGINE = "sglang==0.5.23"
# (backend, recipe, page size): a refusal and an acceptance of the same backend, and a GPU refusal
SAMPLE = [("sglang-fa3-page-table", "NGRAM-16-1-10", 64), ("sglang-fa3-page-table", "NGRAM-16-1-1", 64),
          ("sglang-trtllm-mha-page-table", "EAGLE-8-5-4", 16), ("sglang-ascend-block-tables", "NGRAM-16-1-1", 128)]


def _shipped() -> dict[str, dict[str, dict[str, str]]]:
    section = learned.section(ENGINE, startup_section.SECTION)
    assert section is not None, f"{ENGINE} has no {startup_section.SECTION} section: workbench engines learn-startup"
    found: dict[str, dict[str, dict[str, str]]] = section["settings"]["value"]
    return found


def test_the_shipped_answers_are_the_releases_own() -> None:
    if wheels.cached(ENGINE) is None:
        pytest.skip(f"{ENGINE} is not in the workbench's engine cache")
    wanted = {(b, r, ps) for b, r, ps in SAMPLE}
    probes = [(label, launch, g) for label, launch, g in startup_learn.probes()
              if (label, startup_section.recipe_key(g), g.page_size) in wanted]
    assert len(probes) == len(SAMPLE)
    install = wheels.fetch(ENGINE)
    folder = startup_learn.probe_model_folder()
    try:
        for label, launch, g in probes:
            said = startup_learn.ask(install, folder, launch, g)
            assert said == _shipped()[label][startup_section.recipe_key(g)][str(g.page_size)], (label, g)
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    # The engine's own words: the refusals name the check that made them
    assert "_handle_ngram" in _shipped()["sglang-fa3-page-table"]["NGRAM-16-1-10"]["64"]
    assert _shipped()["sglang-fa3-page-table"]["NGRAM-16-1-1"]["64"] == "accepted"


def test_refusal_reads_the_learned_answer() -> None:
    ngram10 = ServingGeometry(context_len=32768, page_size=64, draft_tokens=16, spec_steps=1, spec_topk=10,
                              draft_has_kv=False)
    key = startup_section.recipe_key(ngram10)
    assert key == "NGRAM-16-1-10"
    refused = startup_section.refusal(ENGINE, "sglang-fa3-page-table", key, 64)
    assert refused is not None and "flashinfer" in refused
    assert startup_section.refusal(ENGINE, "sglang-fa3-page-table", "NGRAM-16-1-1", 64) is None
    assert startup_section.refusal("sglang==0.5.10", "sglang-fa3-page-table", key, 64) is None  # never asked: kept


def test_the_atlas_runs_no_setting_the_release_refuses() -> None:
    from workbench.atlas.rows import run_atlas

    frame = run_atlas([ENGINE])
    records = frame.to_dict("records")
    refused = [row for row in records if startup_section.started([row])[1]]
    assert refused and all(row["status"] == "refused" and pd.isna(row["first_failing_seq_len"]) for row in refused)
    assert all(row["startup_refusal"] == startup_section.row_refusal(row) for row in refused)
    assert len(frame[frame.status == "refused"]) == len(refused)  # and every row it starts ran
    fa3 = frame[(frame.backend.str.contains("fa3")) & (frame.page_size == 64) & (frame.draft_tokens == 16)]
    ran = fa3[fa3.status != "refused"]
    assert set(ran.spec_topk) == {1}  # NGRAM breadth 10 at page size 64 is refused; breadth 1 starts
    assert set(fa3[fa3.spec_topk == 10].status) == {"refused"}
    said = _shipped()["sglang-fa3-page-table"]["NGRAM-16-1-10"]["64"].removeprefix("refused: ")
    assert set(fa3[fa3.spec_topk == 10].startup_refusal) == {said}
