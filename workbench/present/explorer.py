"""The notebooks' interactive explorer: sliders and dropdowns around one executed probe.

Everything the widgets show comes from ``explore(state)``, a plain function of a frozen
``ExplorerState``: it builds the case, executes the probe and draws the figure with the library's
sweep and plot functions. The widget layer only reads its controls into a state and displays the
returned ``ExplorerView``, so tests exercise exactly what a notebook user sees without a kernel.

Table components: the request runs to its longest committed length, ``ctx - 1 + overshoot``
(clamped to what the request table holds in the mode), and the figure traces its last steps.
Allocator: one of the sweep's named decode batches meets a free list with ``spare_pages`` pages
more than it opens (0 is the exact fit of the third seed case; -1 a real shortage).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from workbench.analysis.cases import AllocatorCase, Case, TableCase
from workbench.analysis.exact_fit import batch_compositions, exact_fit_case
from workbench.analysis.probe import probe
from workbench.analysis.sweep import allocator_exact_fit_sweep, request_trace
from workbench.backends import DEFAULT_COMPONENTS, RULE_NAMES
from workbench.model.allocator import Gather
from workbench.model.geometry import WIDTH_GENERATIONS, Mode, ServingGeometry
from workbench.model.outcome import ProbeResult

PAGE_SIZES = (1, 4, 16, 64, 128, 256)
ALLOCATOR_PAGE_SIZES = (2, 4, 16, 64, 128, 256)  # ps 1 opens a page on every token: no exact-fit question
TRACE_STEPS = 40  # steps of a request's life drawn up to its longest committed length
MAX_EXPLORER_CONTEXT = 1 << 20


@dataclass(frozen=True, kw_only=True)
class ExplorerState:
    """What the controls say. Table fields and allocator fields; each component reads its own."""

    component: str = DEFAULT_COMPONENTS[0]  # the first seed's table
    context_len: int = 32768
    page_size: int = 128
    draft_tokens: int = 16
    overshoot: int = 2  # committed tokens past ctx - 1 the scheduler lets through (spec section 1)
    rule: str = "context"
    mode: str = "target-verify"
    width_gen: str = "g1"
    gather: str = "npu-legacy"
    batch: str = "seed [5, 10, 7]"  # a name of ``workbench.analysis.sweep.batch_compositions``
    max_batch: int = 8
    spare_pages: int = 0  # free pages beyond what the decode batch opens (0: the exact fit)

    def replace(self, **changes: Any) -> ExplorerState:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class ExplorerView:
    """What the explorer shows for one state: the case, its executed probe, a figure, one line."""

    case: Case | None
    result: ProbeResult | None
    figure: Any  # plotly.graph_objects.Figure, or None for a state that is not a valid case
    summary: str


# ---- cases -------------------------------------------------------------------------------------


def geometry_of(state: ExplorerState) -> ServingGeometry:
    # EAGLE with topk 1 forces D = steps + 1; the drafter shape only matters for g2/g3 widths.
    steps = max(1, state.draft_tokens - 1)
    return ServingGeometry(context_len=state.context_len, page_size=state.page_size,
                           draft_tokens=state.draft_tokens, spec_steps=steps, width_gen=state.width_gen)


def longest_seq_len(state: ExplorerState) -> int:
    """``ctx - 1 + overshoot``, clamped to the longest committed length the table holds in the mode."""
    g = geometry_of(state)
    return max(1, min(state.context_len - 1 + state.overshoot, g.max_committed_len(Mode(state.mode))))


def table_case(state: ExplorerState) -> TableCase:
    return TableCase(component=state.component, geometry=geometry_of(state), rule=state.rule,
                     mode=Mode(state.mode), seq_lens=(longest_seq_len(state),))


def allocator_case(state: ExplorerState) -> AllocatorCase:
    """The sweep's exact-fit state for the chosen batch, with ``spare_pages`` more free pages than it opens."""
    opens = batch_compositions(state.max_batch)[state.batch]
    return exact_fit_case(Gather(state.gather), state.page_size, opens, max(0, sum(opens) + state.spare_pages))


def case_of(state: ExplorerState) -> Case:
    return allocator_case(state) if state.component == "allocator" else table_case(state)


# ---- the view ----------------------------------------------------------------------------------


def summary_line(case: Case, result: ProbeResult) -> str:
    """One line: what ran and what it came to (torch's own message when it failed)."""
    if result.outcome.value == "invalid":
        return f"invalid: {result.error}"
    if isinstance(case, AllocatorCase):
        what = f"alloc_decode[{case.gather.value}] ps={case.page_size} seq_lens={list(case.seq_lens)} " \
               f"free_pages={list(case.free_pages)}"
    else:
        what = (f"{case.component} [{case.rule}] {case.mode.value} s={case.seq_lens[0]} "
                f"W={result.request_table_width} buffer={result.buffer_width}")
    detail = result.error or (f"out_cache_loc={result.out_cache_loc}" if result.out_cache_loc is not None else "")
    return f"{result.outcome.value}: {what}" + (f" -- {detail}" if detail else "")


def figure_of(state: ExplorerState, case: Case, device: str) -> Any:
    """The library's figure for the state: a request trace, or the exact-fit map of the page size."""
    if isinstance(case, AllocatorCase):
        from workbench.present.plots import exact_fit_map

        frame = allocator_exact_fit_sweep(page_sizes=[case.page_size], max_batch=state.max_batch,
                                          gathers=[g.value for g in Gather], device=device)
        return exact_fit_map(frame)
    from workbench.present.plots import request_trace_plot

    return request_trace_plot(request_trace(case, steps=TRACE_STEPS, device=device))


def explore(state: ExplorerState, device: str = "cpu", *, with_figure: bool = True) -> ExplorerView:
    """Execute the state's probe (and draw its figure); an impossible state is explained, not raised."""
    try:
        case = case_of(state)
    except ValueError as err:  # a geometry out of range, an unknown mode
        return ExplorerView(None, None, None, f"invalid: {err}")
    result = probe(case, device)
    figure = figure_of(state, case, device) if with_figure and result.outcome.value != "invalid" else None
    return ExplorerView(case, result, figure, summary_line(case, result))


# ---- widgets -----------------------------------------------------------------------------------


class Explorer:
    """The ipywidgets front end: controls -> ``ExplorerState`` -> ``explore`` -> outcome and figure."""

    def __init__(self, state: ExplorerState | None = None, device: str = "cpu") -> None:
        import ipywidgets as w  # type: ignore[import-untyped]

        self.device = device
        start = state or ExplorerState()
        table = start.component != "allocator"
        self.controls: dict[str, Any] = {
            "page_size": w.SelectionSlider(options=PAGE_SIZES if table else ALLOCATOR_PAGE_SIZES,
                                           value=start.page_size, description="page size"),
        }
        if table:
            self.controls.update(
                context_len=w.IntSlider(value=start.context_len, min=16, max=MAX_EXPLORER_CONTEXT, step=1,
                                        description="context len", continuous_update=False),
                draft_tokens=w.IntSlider(value=start.draft_tokens, min=0, max=32, description="draft tokens"),
                overshoot=w.IntSlider(value=start.overshoot, min=0, max=8, description="overshoot"),
                rule=w.Dropdown(options=RULE_NAMES, value=start.rule, description="rule"),
                mode=w.Dropdown(options=[m.value for m in Mode], value=start.mode, description="mode"),
                width_gen=w.Dropdown(options=WIDTH_GENERATIONS, value=start.width_gen, description="width gen"),
            )
        else:
            self.controls.update(
                batch=w.Dropdown(options=list(batch_compositions(start.max_batch)), value=start.batch, description="batch"),
                spare_pages=w.IntSlider(value=start.spare_pages, min=-2, max=4, description="spare pages"),
                gather=w.Dropdown(options=[g.value for g in Gather], value=start.gather, description="gather"),
            )
        self.state = start
        self.outcome = w.HTML()
        self.output = w.Output()
        self.view: ExplorerView | None = None
        for control in self.controls.values():
            control.observe(self._changed, names="value")
        self.widget = w.VBox([w.HBox(list(self.controls.values())[:4]), w.HBox(list(self.controls.values())[4:]),
                              self.outcome, self.output])
        self.redraw()

    def _changed(self, _change: object) -> None:
        self.redraw()

    def redraw(self) -> ExplorerView:
        self.state = self.state.replace(**{name: control.value for name, control in self.controls.items()})
        self.view = explore(self.state, self.device)
        colour = "#b00020" if self.view.result is None or self.view.result.outcome.failed else "#1b5e20"
        self.outcome.value = f'<b style="color:{colour}">{_escape(self.view.summary)}</b>'
        self.output.clear_output(wait=True)
        if self.view.figure is not None and _in_kernel():
            # Outside a kernel (tests, scripts) plotly's default renderer would open a browser.
            self.output.append_display_data(self.view.figure)
        return self.view


def _in_kernel() -> bool:
    from IPython import get_ipython

    return get_ipython() is not None


def _escape(text: str) -> str:
    import html

    return html.escape(text)


def explorer(component: str = DEFAULT_COMPONENTS[0], device: str = "cpu", **state: Any) -> Any:
    """The widget to display in a notebook cell (the last expression of the cell)."""
    return Explorer(ExplorerState(component=component, **state), device).widget
