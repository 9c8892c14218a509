"""The explorer without a kernel: the same functions the notebook widgets call.

Expected outcomes and messages come from the seed cases (docs/semantics.md#replays, #the-paged-allocator) and from
``tests/reference.py``'s independent restatement of the replay and ``alloc_decode``.
"""

from __future__ import annotations

import pytest
import reference

from workbench.model.geometry import Mode
from workbench.present.explorer import Explorer, ExplorerState, allocator_case, explore, longest_seq_len, table_case

NPU_SEED = ExplorerState()  # QwQ-32B: ctx 32768, ps 128, D 16, overshoot 2, context rule, verify
DSA_SEED = ExplorerState(component="dsa-page-table", context_len=90000, page_size=64, draft_tokens=6,
                         rule="context-plus-draft")


def test_longest_seq_len_is_context_minus_one_plus_overshoot_clamped_to_the_table() -> None:
    assert longest_seq_len(NPU_SEED) == 32769
    # W - D = 32768 + 20 - 16 = 32772 caps an overshoot of 8 at 32772.
    assert longest_seq_len(NPU_SEED.replace(overshoot=8)) == 32772
    # Without drafts the scheduler's ctx - 1 is the cap whatever the overshoot.
    assert longest_seq_len(NPU_SEED.replace(draft_tokens=0, mode="decode")) == 32767


@pytest.mark.parametrize(("state", "rule"), [
    (NPU_SEED, "context"), (NPU_SEED, "context-plus-draft"), (NPU_SEED, "req-to-token"),
    (DSA_SEED, "context"), (DSA_SEED, "context-plus-draft"), (DSA_SEED, "req-to-token"),
])
def test_table_outcome_matches_the_spec_replay(state: ExplorerState, rule: str) -> None:
    s = state.replace(rule=rule)
    view = explore(s, with_figure=False)
    g = table_case(s).geometry
    expected = reference.predict_table_probe(
        s.component, rule, s.context_len, s.page_size, s.draft_tokens,
        reference.request_table_width(s.context_len, s.page_size, s.draft_tokens), s.mode, [longest_seq_len(s)],
    )
    assert view.result is not None
    assert (view.result.outcome.value, view.result.error) == expected
    assert view.result.request_table_width == g.request_table_width
    assert view.summary.startswith(expected[0] + ": ")


def test_seed_messages_appear_in_the_summary() -> None:
    npu = explore(NPU_SEED, with_figure=False)
    assert "The size of tensor a (256) must match the size of tensor b (257)" in npu.summary
    dsa = explore(DSA_SEED, with_figure=False)
    assert "The size of tensor a (90006) must match the size of tensor b (90007)" in dsa.summary


@pytest.mark.parametrize(("gather", "spare", "outcome"), [
    ("npu-legacy", 0, "index-error"), ("npu-clamped", 0, "ok"), ("cuda-masked", 0, "ok"),
    ("npu-legacy", 1, "ok"), ("npu-legacy", -1, "out-of-memory"), ("cuda-masked", -1, "silent-overread"),
])
def test_allocator_state_matches_the_reference_gather(gather: str, spare: int, outcome: str) -> None:
    state = ExplorerState(component="allocator", page_size=4, gather=gather, spare_pages=spare)
    case = allocator_case(state)
    view = explore(state, with_figure=False)
    ref_outcome, ref_out, _ = reference.alloc_decode(4, list(case.seq_lens), list(case.last_loc),
                                                     list(case.free_pages), gather)
    assert ref_outcome == outcome
    assert view.result is not None and view.result.outcome.value == outcome
    if outcome == "ok":
        assert view.result.out_cache_loc == ref_out


def test_impossible_states_are_explained_not_raised() -> None:
    view = explore(NPU_SEED.replace(draft_tokens=0), with_figure=False)
    assert view.summary.startswith("invalid: target-verify needs draft tokens")
    view = explore(NPU_SEED.replace(context_len=0), with_figure=False)
    assert view.result is None and view.summary == "invalid: context_len: 0 is out of range (allowed: 1 to 16777216)"


def test_figure_is_the_request_trace_of_the_state() -> None:
    view = explore(ExplorerState(context_len=300, page_size=16, draft_tokens=4))
    assert view.figure is not None and len(view.figure.data) >= 1
    assert table_case(ExplorerState(context_len=300, page_size=16, draft_tokens=4)).mode is Mode.TARGET_VERIFY


def test_widgets_redraw_on_every_control() -> None:
    pytest.importorskip("ipywidgets")
    ui = Explorer(ExplorerState(context_len=300, page_size=16, draft_tokens=4))
    assert ui.view is not None and ui.view.result is not None
    # ctx 300, ps 16, D 4: context gives 19 pages = 304 tokens; s = 301 reads 305: one page short.
    assert ui.view.result.outcome.value == "shape-error"
    assert "shape-error" in ui.outcome.value
    ui.controls["rule"].value = "req-to-token"
    assert ui.state.rule == "req-to-token" and ui.view.result.outcome.value == "ok"
    ui.controls["overshoot"].value = 0
    assert ui.view.case is not None and ui.view.case.seq_lens == (299,)
    ui.controls["page_size"].value = 64
    assert ui.state.page_size == 64 and ui.view.result.buffer_width == ui.view.result.request_table_width // 64 + 1
    assert set(ui.controls) == {"page_size", "context_len", "draft_tokens", "overshoot", "rule", "mode", "width_gen",
                                "drafter"}


@pytest.mark.parametrize("page_size", [64, 128, 256])
def test_width_generation_g3_draws_the_explored_step(page_size: int) -> None:
    """The bug of issue 22: under g3 the table holds far past what a run reaches (W - D = ctx + 143 at
    ps 128, NGRAM D 16), so a trace up to the table's bound missed the explored step and raised
    IndexError. The trace now ends at the explored length, and the figure's title names its step."""
    state = ExplorerState(width_gen="g3", page_size=page_size)
    view = explore(state)
    assert view.figure is not None and view.case is not None
    s = view.case.seq_lens[0]
    assert s == longest_seq_len(state) == 32769
    assert f"at s = {s:,}:" in view.figure.layout.title.text
    assert max(max(trace.x) for trace in view.figure.data if trace.x is not None and len(trace.x)) == s


def test_the_drafter_moves_w_under_g2_and_g3() -> None:
    """Worked widths (NGRAM D 16 topk 10 ps 128; docs/semantics.md): W - ctx is 20 / 32 / 159 under
    g1 / g2 / g3. EAGLE with topk 1 reserves nothing more under g2: 20 there too."""
    extra = {}
    for drafter in ("NGRAM topk 10", "EAGLE topk 1"):
        for gen in ("g1", "g2", "g3"):
            view = explore(ExplorerState(drafter=drafter, width_gen=gen), with_figure=False)
            assert view.result is not None and view.result.request_table_width is not None
            extra[drafter, gen] = view.result.request_table_width - 32768
    assert [extra["NGRAM topk 10", g] for g in ("g1", "g2", "g3")] == [20, 32, 159]
    assert extra["EAGLE topk 1", "g2"] == extra["EAGLE topk 1", "g1"] == 20


def test_an_error_in_an_explorer_shows_as_one_line_in_its_output() -> None:
    pytest.importorskip("ipywidgets")
    from workbench.present.live import LivePanel

    def broken(_: dict[str, object]) -> object:
        raise IndexError("single positional indexer\n is out-of-bounds")

    import ipywidgets as w

    panel = LivePanel({"x": w.IntSlider(value=1)}, [["x"]], broken)  # type: ignore[arg-type]
    assert panel.drawn is not None and panel.drawn.failed
    assert panel.drawn.summary == "error: IndexError: single positional indexer is out-of-bounds"
    assert "error: IndexError" in panel.outcome.value and "\n" not in panel.outcome.value
    panel.controls["x"].value = 2  # later controls still redraw
    assert panel.drawn.summary.startswith("error: IndexError")


def test_allocator_widgets_offer_gather_and_batch() -> None:
    pytest.importorskip("ipywidgets")
    ui = Explorer(ExplorerState(component="allocator", page_size=4, max_batch=4))
    assert ui.view is not None and ui.view.result is not None and ui.view.result.outcome.value == "index-error"
    ui.controls["gather"].value = "npu-clamped"
    assert ui.view.result.outcome.value == "ok"
    ui.controls["batch"].value = "all open"
    assert ui.view.case is not None and ui.view.case.seq_lens == (5, 9, 13, 17)


def _figure_title(ui: Explorer) -> str:
    return str(ui.panel.figure.widget.layout.title.text)


def test_the_figure_widget_is_redrawn_in_place() -> None:
    """The explorer's own figure (a FigureWidget, made once) takes every new state's traces."""
    pytest.importorskip("ipywidgets")
    ui = Explorer(ExplorerState(context_len=300, page_size=16, draft_tokens=4))
    widget = ui.panel.figure.widget
    # ctx 300, ps 16, D 4, s = 301: cdiv(300, 16) = 19 pages = 304 tokens; the verify reads 305.
    assert "rule context" in _figure_title(ui) and "s = 301: shape-error" in _figure_title(ui)
    assert any(t.name == "step fails loudly: shape-error" for t in widget.data)
    ui.controls["rule"].value = "req-to-token"
    assert ui.panel.figure.widget is widget
    # req-to-token: max(cdiv(300 + 15 + 4, 16), cdiv(W = 308, 16)) = 20 pages = 320 tokens.
    assert "rule req-to-token" in _figure_title(ui) and "s = 301: ok" in _figure_title(ui)
    assert not any((t.name or "").startswith("step fails") and len(t.x) for t in widget.data)
    capacity = next(t for t in widget.data if t.name == "buffer capacity")
    assert set(capacity.y) == {320}


def test_a_preset_writes_the_context_length() -> None:
    pytest.importorskip("ipywidgets")
    ui = Explorer(ExplorerState(context_len=90000, component="dsa-page-table", page_size=64, draft_tokens=6))
    presets = ui.shortcuts["context_preset"]
    assert 90000 in [value for _, value in presets.options]  # the start value is one of the stops
    presets.value = 1 << 20
    assert ui.controls["context_len"].value == 1 << 20 and ui.state.context_len == 1 << 20
    assert "ctx 1,048,576" in _figure_title(ui)


def test_the_seed_batch_is_the_seed_vector() -> None:
    """The allocator seed: ps 4, seq_lens [5, 10, 7], last_loc [11, 20, 29], one free page [11]
    (docs/semantics.md#decode-openers-and-the-gather)."""
    legacy = explore(ExplorerState(component="allocator", page_size=4, gather="npu-legacy"), with_figure=False)
    assert legacy.case is not None and legacy.case.seq_lens == (5, 10, 7) and legacy.case.free_pages == (11,)
    assert legacy.result is not None and legacy.result.error == "index 1 is out of bounds for dimension 0 with size 1"
    clamped = explore(ExplorerState(component="allocator", page_size=4, gather="npu-clamped"), with_figure=False)
    assert clamped.result is not None and clamped.result.out_cache_loc == [44, 21, 30]
    assert "seq_lens=[5, 10, 7]" in clamped.summary and "out_cache_loc=[44, 21, 30]" in clamped.summary
    # One spare page: the legacy gather reads free_pages[1] = 12 for the rows that open none, masked out.
    spare = explore(ExplorerState(component="allocator", page_size=4, gather="npu-legacy", spare_pages=1), with_figure=False)
    assert spare.result is not None and spare.result.out_cache_loc == [44, 21, 30]


def test_typing_a_batch_row_count_changes_the_batches() -> None:
    pytest.importorskip("ipywidgets")
    ui = Explorer(ExplorerState(component="allocator", page_size=4, max_batch=4, batch="all open"))
    ui.controls["max_batch"].value = 6
    assert ui.view is not None and ui.view.case is not None and ui.view.case.seq_lens == (5, 9, 13, 17, 21, 25)
    assert "explored state" in [t.name for t in ui.panel.figure.widget.data]


def test_the_rule_and_mode_choices_are_the_backends_own() -> None:
    """FA3 has no context-plus-draft rule (docs/engine-facts.md#sglang-fa3-page-table: blind to the drafts in every release, and the
    proposed fix is the request table's width); DSA has no draft-decode replay (docs/semantics.md#graph-modes)."""
    fa3 = Explorer(ExplorerState(component="sglang-fa3-page-table", page_size=1)).controls
    assert list(fa3["rule"].options) == ["context", "req-to-token"]
    dsa = Explorer(ExplorerState(component="dsa-page-table", context_len=90000, page_size=64, draft_tokens=6)).controls
    assert "draft-decode" not in [value for _, value in dsa["mode"].options]
    assert list(dsa["rule"].options) == ["context", "context-plus-draft", "req-to-token"]


def test_the_run_explorers_line_says_what_happened_in_words() -> None:
    """Notebook 04's line: the first failure's step, request, committed length and buffer, as the
    simulation recorded them; a run without one says how it stopped; never a ``field=None`` dump."""
    from workbench.present.run_explorer import run_view
    from workbench.sim.simulate import simulate
    from workbench.sim.workload import exact_fit_scenario

    values = {"scenario": "exact-fit", "rule": "context", "seed": 1, "conservativeness": 0.0, "acceptance_rate": 0.6}
    config, workload = exact_fit_scenario(gather="npu-legacy")
    run = simulate(config, workload, 1)
    first = run.first_failure
    assert first is not None and first.failing_request is not None and first.outcome == "index-error"
    committed = first.committed[first.req_ids.index(first.failing_request)]
    line = run_view({**values, "gather": "npu-legacy"}).summary
    assert line == (f"fails loudly at step {first.step}: request {first.failing_request} at committed length {committed:,}, "
                    "in the allocator's decode gather (npu-legacy): the step raises an index error (index-error); the "
                    f"run stops after {len(run.records)} steps (exact fits of the pool: "
                    f"{sum(r.exact_fit for r in run.records)})")
    clamped = simulate(exact_fit_scenario(gather="npu-clamped")[0], workload, 1)
    assert clamped.completed
    line = run_view({**values, "gather": "npu-clamped"}).summary
    assert line == (f"completed: every request finished after {len(clamped.records)} steps (exact fits of the pool: "
                    f"{sum(r.exact_fit for r in clamped.records)}), no step failed")
    assert "=" not in line and "None" not in line
