"""Every plot returns a labelled figure with the traces and panels its frame calls for."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.analysis.cases import TableCase
from workbench.analysis.memory import load_presets, memory_table
from workbench.analysis.sweep import SweepGrid, allocator_exact_fit_sweep, request_trace, run_sweep
from workbench.model.geometry import Mode, ServingGeometry
from workbench.present.plots import exact_fit_map, failure_map, fix_cost_plot, request_trace_plot
from workbench.present.verdicts import VERDICTS, fix_cost


@pytest.fixture(scope="module")
def sweep() -> pd.DataFrame:
    grid = SweepGrid(context_lens=(40, 67), page_sizes=(1, 16), draft_tokens=(0, 3))
    return run_sweep(grid, cache_dir=None, progress=False)


def _labelled(fig: object) -> None:
    layout = fig.layout.to_plotly_json()  # type: ignore[attr-defined]
    assert layout["title"]["text"]
    for axis in ("xaxis", "yaxis"):
        titles = [v.get("title", {}).get("text") for k, v in layout.items() if k.startswith(axis)]
        assert any(titles), f"no {axis} title"


def test_failure_map_has_one_heatmap_per_mode_and_page_size(sweep: pd.DataFrame) -> None:
    fig = failure_map(sweep)
    assert [t.type for t in fig.data] == ["heatmap"] * 4  # 2 modes x 2 page sizes
    assert {a.text for a in fig.layout.annotations} == {
        f"{m} · page size {p}" for m in ("decode", "target-verify") for p in (1, 16)}
    _labelled(fig)
    verify_ps16 = next(t for t in fig.data if t.name == "target-verify, ps=16")
    assert list(verify_ps16.x) == ["40", "67"]
    # Every panel has the same rows in the same order.
    assert len({tuple(t.y) for t in fig.data}) == 1
    # ctx 40, ps 1, D 3, context rule: cdiv(40, 1) = 40 tokens; a verify at s reads s + 3, so s = 38
    # is the first failing committed length (within ctx - 1 + overshoot 2 = 41): the cell says 38, red.
    verify_ps1 = next(t for t in fig.data if t.name == "target-verify, ps=1")
    labels = list(verify_ps1.y)
    for backend in ("npu-block-table", "dsa-page-table (dynamic replay)"):
        row = labels.index(f"{backend} · context · D=3")
        assert verify_ps1.text[row][0] == "38" and verify_ps1.z[row][0] == VERDICTS.index("fails loudly")
        # req-to-token is W = 40 + 4 + 3 = 47 tokens wide: no committed length up to 41 fails.
        safe = labels.index(f"{backend} · req-to-token · D=3")
        assert verify_ps1.text[safe][0] == "" and verify_ps1.z[safe][0] == VERDICTS.index("no reachable failure")
    # The static DSA replay fails at the same length, silently.
    row = labels.index("dsa-page-table (static replay) · context · D=3")
    assert verify_ps1.text[row][0] == "38" and verify_ps1.z[row][0] == VERDICTS.index("fails silently")
    # D = 0 has no verify graph: grey, "n/a".
    assert verify_ps1.text[labels.index("npu-block-table · context · D=0")][0] == "n/a"


def test_fix_cost_plot_starts_bars_at_zero_and_names_coinciding_rules() -> None:
    memory = memory_table(load_presets(), components=("npu-block-table",))
    fig = fix_cost_plot(fix_cost(memory, baseline="context"))
    assert {t.type for t in fig.data} == {"bar"} and {t.name for t in fig.data} == {"context-plus-draft", "req-to-token"}
    assert fig.layout.yaxis.rangemode == "tozero" and fig.layout.yaxis2.rangemode == "tozero"
    # QwQ-32B (ctx 32768, ps 128, D 16): (32768 + 127 + 16) // 128 = 257 pages against cdiv(32768, 128) = 256.
    bytes_trace = fig.data[0]
    qwq = list(bytes_trace.x).index("QwQ-32B")
    assert bytes_trace.y[qwq] % 4 == 0 and bytes_trace.y[qwq] > 0
    assert "context-plus-draft and req-to-token take the same bytes" in fig.layout.title.text
    _labelled(fig)


def test_exact_fit_map_facets_per_gather() -> None:
    frame = allocator_exact_fit_sweep(page_sizes=(4,), max_batch=3)
    fig = exact_fit_map(frame)
    outcomes_per_gather = frame.groupby("gather").outcome.nunique().sum()
    drawn = [t for t in fig.data if len(t.x)]
    assert len(drawn) == outcomes_per_gather + 3  # one pages-needed trace per panel
    # each outcome under its word (ok and out-of-memory are no failure, a raised error fails loudly)
    words = {o: "no reachable failure" if o in ("ok", "out-of-memory") else
             "fails silently" if o.startswith("silent-") else "fails loudly" for o in set(frame.outcome)}
    assert {t.name for t in fig.data if t.showlegend is not False} == \
        {f"{words[o]}: {o}" for o in set(frame.outcome)} | {"pages the batch opens (exact fit)"}
    # The gathers name the columns, the page size the row's y title.
    assert {a.text for a in fig.layout.annotations} == {"npu-legacy", "npu-clamped", "cuda-masked"}
    assert fig.layout.yaxis.title.text == "batch (page size 4)"
    # The same batch order on every panel's y axis, each batch named with its rows' pattern.
    layout = fig.layout.to_plotly_json()
    orders = {tuple(axis["categoryarray"]) for name, axis in layout.items() if name.startswith("yaxis")}
    assert len(orders) == 1 and len(next(iter(orders))) == frame.pattern.nunique()
    assert all(label.endswith("  " + pattern) for label, pattern in zip(next(iter(orders)), frame.pattern.unique()))
    assert fig.layout.width <= 940  # JupyterLab's output area at a 1400 px window
    _labelled(fig)


def test_request_trace_plot_marks_failing_steps() -> None:
    geometry = ServingGeometry(context_len=256, page_size=64, draft_tokens=16)
    trace = request_trace(TableCase(component="npu-block-table", geometry=geometry, rule="context",
                                    mode=Mode.TARGET_VERIFY), steps=30)
    fig = request_trace_plot(trace)
    drawn = [t for t in fig.data if len(t.x)]
    assert [t.name for t in drawn][-1] == "step fails loudly: shape-error"
    # cdiv(256, 64) = 4 pages = 256 tokens; a verify at s reads s + 16 > 256 from s = 241 to the bound W - D = 260.
    assert len(drawn) == 4 and list(drawn[-1].x) == list(range(241, 261))
    assert [t.name for t in fig.data if t.showlegend is not False][-1] == "step fails loudly: shape-error"
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
