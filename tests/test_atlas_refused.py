"""The atlas's cells a release refuses to start: "refused at start-up", with the engine's message.

The small atlas (notebook 05's test parameters: 0.5.10 and 0.5.23, the QwQ-32B preset alone, as the
report's small run builds it) is where a cell can hold nothing but refused settings: 0.5.23 refuses
NGRAM on an NPU and EAGLE topk 4 at page size 128 on Ascend, which is every speculative setting of
QwQ-32B on the Ascend block table. The expectations come from 0.5.23's learned ``startup`` section
(the answers its own start-up checks gave, read straight from its file), never from the atlas: every
setting the section refuses is a ``refused`` row carrying the section's message, no setting is lost
to a refusal (0.5.23's settings are 0.5.10's, whose checks were never asked), and every cell whose
settings the section all refuses reads "refused at start-up" in the summary, the figure, its hover,
the caption and ``workbench atlas``'s table, never "not modelled".
"""

from __future__ import annotations

from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import pytest

from workbench import backends
from workbench.analysis.memory import load_presets
from workbench.atlas.rows import format_summary, run_atlas, summarize
from workbench.engines.store import learned, startup_section
from workbench.present.atlas_figure import atlas_caption, atlas_figure

ASKED, NEVER_ASKED = "sglang==0.5.23", "sglang==0.5.10"
SETTING = ["backend", "mode", "preset", "recipe", "context_len", "page_size"]
CELL = ["backend", "engine", "mode"]


@pytest.fixture(scope="module")
def small() -> tuple[pd.DataFrame, pd.DataFrame]:
    qwq = [p for p in load_presets() if p.name == "QwQ-32B"]
    frame = run_atlas([NEVER_ASKED, ASKED], presets=qwq)
    return frame, summarize(frame)


def _answer(row: dict[str, Any]) -> str | None:
    """What the row's release said of its setting when asked (its learned file), or None if never asked."""
    section = learned.section(str(row["engine"]), startup_section.SECTION)
    if section is None:
        return None
    label = str(row["backend"])
    backend = backends.backend_of(label).name if backends.is_table_backend(label) else label
    recipe = startup_section.recipe_word(int(row["draft_tokens"]), int(row["spec_steps"]), int(row["spec_topk"]),
                                       bool(row["draft_has_kv"]))
    said = section["settings"]["value"].get(backend, {}).get(recipe, {}).get(str(int(row["page_size"])))
    return str(said) if said is not None else None


def _refusal(row: dict[str, Any]) -> str | None:
    said = _answer(row)
    return said.removeprefix("refused: ") if said is not None and said.startswith("refused: ") else None


def _all_refused(frame: pd.DataFrame) -> dict[tuple[str, str, str], list[str]]:
    """(backend, engine, mode) -> the section's messages, for each cell whose every setting it refuses."""
    cells: dict[tuple[str, str, str], list[str | None]] = {}
    for row in frame.to_dict("records"):
        cells.setdefault((row["backend"], row["engine"], row["mode"]), []).append(_refusal(row))
    return {cell: list(dict.fromkeys(m for m in said if m)) for cell, said in cells.items() if all(said)}


def test_every_refused_setting_is_a_row_with_the_engines_message(small: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    frame, _ = small
    refused = 0
    for row in frame.to_dict("records"):
        message = _refusal(row)
        if message is None:
            assert row["status"] != "refused", row
            continue
        refused += 1
        assert row["status"] == "refused" and row["startup_refusal"] == message, row
        assert pd.isna(row["first_failing_seq_len"]) and pd.isna(row["reachable_len"]), row  # nothing was run
    assert refused > 0  # the section refuses some of the small atlas's settings (NGRAM on an NPU among them)
    # No setting is lost to a refusal: where both releases model a backend, 0.5.23 (asked) has the
    # settings 0.5.10 (never asked, so nothing of it is refused) has
    old, new = frame[frame.engine == NEVER_ASKED], frame[frame.engine == ASKED]
    both = set(old.backend) & set(new.backend)
    keys = [set(map(tuple, f[f.backend.isin(both)][SETTING].to_numpy().tolist())) for f in (old, new)]
    assert keys[0] == keys[1]


def test_a_cell_whose_every_setting_is_refused_says_refused_at_start_up(small: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    frame, summary = small
    expected = _all_refused(frame)
    # 0.5.23 on the Ascend block table: the section refuses NGRAM on an NPU (both breadths) and EAGLE
    # topk 4 at page size 128, so none of QwQ-32B's speculative settings starts there
    ascend = learned.section(ASKED, startup_section.SECTION)["settings"]["value"]["sglang-ascend-block-tables"]
    assert all(ascend[recipe]["128"].startswith("refused: ") for recipe in ("NGRAM-16-1-1", "EAGLE-8-5-4"))
    assert {("npu-block-table", ASKED, mode) for mode in ("target-verify", "draft-decode", "draft-extend")} <= set(expected)
    rows = summary.set_index(CELL)
    assert set(summary[summary.status == "refused"].set_index(CELL).index) == set(expected)
    for cell, messages in expected.items():
        row = rows.loc[cell]
        assert row.settings_refused == len(frame[(frame[CELL] == list(cell)).all(axis=1)]), cell
        assert sorted(str(row.startup_refusal).splitlines()) == sorted(messages), cell
        assert pd.isna(row.first_failing_seq_len) and pd.isna(row.margin), cell


def test_the_figure_and_the_texts_say_refused_at_start_up_never_not_modelled(
        small: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    frame, summary = small
    expected = _all_refused(frame)
    heat = atlas_figure(summary).data[0]
    modes, labels = list(heat.x), list(heat.y)
    ran = set(map(tuple, frame[CELL].to_numpy().tolist()))
    for (backend, engine, mode), messages in expected.items():
        row = next(i for i, label in enumerate(labels)
                   if label.startswith(backend + "<br>") and engine.partition("==")[2] in label)
        column = modes.index(mode)
        assert heat.text[row][column] == "refused at<br>start-up", (backend, engine, mode)
        hover = heat.customdata[row][column].replace("<br>", " ")
        assert hover.startswith("refused at start-up") and all(m in hover for m in messages), hover
    # "not modelled" only where the atlas has no setting for the cell, refused or run
    for i, label in enumerate(labels):
        backend, releases = label.split("<br>")[0], label.split("<br>")[1].split(" ", 1)[1].split(", ")
        for j, text in enumerate(heat.text[i]):
            if text == "not modelled":
                assert not any((backend, f"sglang=={r}", modes[j]) in ran for r in releases), (label, modes[j])
    # the colour bar names it, in its own colour
    ticks = list(heat.colorbar.ticktext)
    assert "refused at<br>start-up" in ticks and ticks.index("refused at<br>start-up") != ticks.index("n/a")
    bands = {colour for _, colour in heat.colorscale}
    assert len(bands) == len(ticks)  # one colour per word
    assert f"{len(expected)} refused at start-up" in atlas_caption(summary)
    table = format_summary(summary)
    for backend, engine, mode in expected:
        line = next(x for x in table.splitlines() if x.split()[:3] == [backend, engine, mode])
        assert "refused at start-up" in line and "_handle_" in line, line
