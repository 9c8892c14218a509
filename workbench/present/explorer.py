"""The notebooks' interactive explorer: controls around one executed probe.

Everything the widgets show comes from ``explore(state)``, a plain function of a frozen
``ExplorerState``: it builds the case, executes the probe and draws the figure with the library's
sweep and plot functions. The widget layer (``Explorer``, a ``workbench.present.live.LivePanel``)
only reads its controls into a state and shows the returned ``ExplorerView``, so tests exercise
exactly what a notebook user sees, with or without a kernel.

Table components: the request runs to its longest committed length, ``ctx - 1 + overshoot``
(clamped to what the request table holds in the mode), and the figure traces its last steps.
Allocator: one of the sweep's named decode batches meets a free list with ``spare_pages`` pages
more than it opens (0 is the exact fit; -1 a real shortage). The batch whose pattern is the third
seed's, at the seed's page size, is the seed's own vector (``seq_lens [5, 10, 7]``).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from workbench.analysis.cases import AllocatorCase, Case, TableCase, parse_case
from workbench.analysis.exact_fit import batch_compositions, exact_fit_case
from workbench.analysis.probe import probe
from workbench.analysis.seeds import EXACT_FIT
from workbench.analysis.sweep import allocator_exact_fit_sweep, request_trace
from workbench.backends import DEFAULT_COMPONENTS, backend_of
from workbench.model.allocator import Gather
from workbench.model.geometry import WIDTH_GENERATIONS, Mode, ServingGeometry
from workbench.model.outcome import ProbeResult
from workbench.present.live import Drawn, LivePanel, length_control

PAGE_SIZES = (1, 4, 16, 64, 128, 256)
ALLOCATOR_PAGE_SIZES = (2, 4, 16, 64, 128, 256)  # ps 1 opens a page on every token: no exact-fit question
TRACE_STEPS = 40  # steps of a request's life drawn up to its longest committed length
MIN_EXPLORER_CONTEXT = 16
MAX_EXPLORER_CONTEXT = 1 << 20
CONTEXT_PRESETS = {"4k": 4096, "8k": 8192, "16k": 16384, "32k": 32768, "64k": 65536, "128k": 131072,
                   "GLM-5 202,752": 202752, "256k": 262144, "512k": 524288, "1M": 1 << 20}
SPARE_PAGES = (-2, 2)  # the exact-fit sweep holds free pools from 0 to pages_needed + 2
# The drafter's shape: what width generations g2 and g3 size the request table for. NGRAM with
# topk 10 and no draft KV is the first seed's launch; EAGLE chains D - 1 steps of one branch each.
DRAFTERS = ("NGRAM topk 10", "EAGLE topk 1")
MODE_LABELS = {
    "decode": "decode (1 new token)", "target-verify": "target-verify (D drafts read)",
    "draft-decode": "draft-decode (a drafter step)", "draft-extend": "draft-extend (accepted tokens)",
}


@dataclass(frozen=True, kw_only=True)
class ExplorerState:
    """What the controls say. Table fields and allocator fields; each component reads its own."""

    component: str = DEFAULT_COMPONENTS[0]  # the first seed's table
    context_len: int = 32768
    page_size: int = 128
    draft_tokens: int = 16
    overshoot: int = 2  # committed tokens past ctx - 1 (docs/semantics.md#reach-and-margin)
    rule: str = "context"
    mode: str = "target-verify"
    width_gen: str = "g1"
    drafter: str = DRAFTERS[0]  # one of ``DRAFTERS``
    gather: str = "npu-legacy"
    batch: str = "seed [5, 10, 7]"  # a name of ``workbench.analysis.exact_fit.batch_compositions``
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
    """The state's launch. The drafter's shape only moves ``W`` under g2 (topk > 1) and g3."""
    if state.drafter not in DRAFTERS:
        raise ValueError(f"drafter: {state.drafter!r} is not one of {', '.join(DRAFTERS)}")
    if state.drafter.startswith("NGRAM"):  # one draft pass of topk 10 branches, no KV of its own
        shape: dict[str, Any] = {"spec_steps": 1, "spec_topk": 10, "draft_has_kv": False}
    else:  # EAGLE with topk 1: D = steps + 1
        shape = {"spec_steps": max(1, state.draft_tokens - 1), "spec_topk": 1, "draft_has_kv": True}
    return ServingGeometry(context_len=state.context_len, page_size=state.page_size,
                           draft_tokens=state.draft_tokens, width_gen=state.width_gen, **shape)


def longest_seq_len(state: ExplorerState) -> int:
    """``ctx - 1 + overshoot``, clamped to the longest committed length the table holds in the mode."""
    g = geometry_of(state)
    return max(1, min(state.context_len - 1 + state.overshoot, g.max_committed_len(Mode(state.mode))))


def table_case(state: ExplorerState) -> TableCase:
    return TableCase(component=state.component, geometry=geometry_of(state), rule=state.rule,
                     mode=Mode(state.mode), seq_lens=(longest_seq_len(state),))


def _seed_case(gather: Gather, spare_pages: int) -> AllocatorCase:
    """The third seed's vector (ps 4, seq_lens [5, 10, 7], one free page) with ``spare_pages`` more."""
    seed = parse_case(EXACT_FIT.after)
    assert isinstance(seed, AllocatorCase)
    count = max(0, len(seed.free_pages) + spare_pages)
    free = tuple(range(seed.free_pages[0], seed.free_pages[0] + count))  # pages 11, 12, ...: owned by no row
    return dataclasses.replace(seed, gather=gather, free_pages=free)


def _is_seed_pattern(page_size: int, opens: tuple[bool, ...]) -> bool:
    seed = parse_case(EXACT_FIT.after)
    assert isinstance(seed, AllocatorCase)
    return page_size == seed.page_size and opens == tuple(s % seed.page_size == 1 for s in seed.seq_lens)


def allocator_case(state: ExplorerState) -> AllocatorCase:
    """The chosen batch with ``spare_pages`` more free pages than it opens: the seed's own vector for
    the seed's pattern at its page size, else the sweep's exact-fit state of that batch."""
    opens = batch_compositions(state.max_batch)[state.batch]
    if _is_seed_pattern(state.page_size, opens):
        return _seed_case(Gather(state.gather), state.spare_pages)
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


def _table_figure(state: ExplorerState, case: TableCase, device: str) -> Any:
    from workbench.present.plots import request_trace_plot

    s = case.seq_lens[0]
    trace = request_trace(case, steps=TRACE_STEPS, device=device, last=s)  # the steps a run takes, up to s
    step = trace[trace["seq_len"] == s].iloc[0]  # the explored step, as the trace executed it
    fig = request_trace_plot(trace, mark_seq_len=s)
    fig.update_layout(title={"font": {"size": 14}, "text": (
        f"{case.component} · rule {case.rule} · {case.mode.value} · ctx {state.context_len:,} · ps {state.page_size}"
        f" · D {state.draft_tokens} · {state.width_gen} · {state.drafter}<br><sup>at s = {s:,}: {step['outcome']}"
        f" (reads {int(step['reads']):,} tokens; buffer {int(step['buffer_capacity_tokens']):,} tokens,"
        f" W {int(step['request_table_width']):,})</sup>")})
    return fig


@functools.lru_cache(maxsize=16)
def _exact_fit_base(page_size: int, max_batch: int, device: str) -> tuple[Any, dict[str, Any]]:
    """The exact-fit sweep of one page size and its map, made once (building the map's plotly objects
    is most of a redraw's time): a gather or spare-pages change only moves the circled state."""
    from workbench.present.plots import exact_fit_map

    frame = allocator_exact_fit_sweep(page_sizes=[page_size], max_batch=max_batch, gathers=[g.value for g in Gather],
                                      device=device)
    return frame, exact_fit_map(frame, mark=frame.iloc[0:0]).to_plotly_json()


def _allocator_figure(state: ExplorerState, case: AllocatorCase, device: str) -> Any:
    import plotly.graph_objects as go  # type: ignore[import-untyped]

    from workbench.present.plots import mark_states

    frame, base = _exact_fit_base(case.page_size, state.max_batch, device)
    free = len(case.free_pages)
    here = frame[(frame["gather"] == state.gather) & (frame["batch"] == state.batch) & (frame["free_pages"] == free)]
    fig = mark_states(go.Figure(base, _validate=False), here)
    outcome = here["outcome"].iloc[0] if not here.empty else "not in the sweep"
    fig.update_layout(title={"text": (
        f"alloc_decode · gather {state.gather} · ps {case.page_size} · batch {state.batch}"
        f"<br><sup>{free} free pages for {int(here['pages_needed'].iloc[0]) if not here.empty else '?'} needed:"
        f" {outcome} (circled)</sup>")})
    return fig


def figure_of(state: ExplorerState, case: Case, device: str) -> Any:
    """The library's figure for the state: a request trace, or the exact-fit map of the page size,
    titled with the configuration and the explored step's outcome."""
    if isinstance(case, AllocatorCase):
        return _allocator_figure(state, case, device)
    return _table_figure(state, case, device)


def explore(state: ExplorerState, device: str = "cpu", *, with_figure: bool = True) -> ExplorerView:
    """Execute the state's probe (and draw its figure); an impossible state is explained, not raised."""
    try:
        case = case_of(state)
    except (ValueError, KeyError) as err:  # a geometry out of range, an unknown mode or batch
        return ExplorerView(None, None, None, f"invalid: {err}")
    result = probe(case, device)
    figure = figure_of(state, case, device) if with_figure and result.outcome.value != "invalid" else None
    return ExplorerView(case, result, figure, summary_line(case, result))


# ---- widgets -----------------------------------------------------------------------------------

TABLE_HELP = (
    "<b>Try:</b> switch <i>rule</i> from <code>context</code> to <code>req-to-token</code>; type a context length "
    "(press Enter) or pick a preset; raise <i>draft tokens</i> or <i>overshoot</i> (tokens a request may pass "
    "<code>ctx - 1</code> for one step); under <i>width gen</i> g2 and g3 the <i>drafter</i> sizes <code>W</code>. "
    "The line below is the executed probe at the longest committed length a run reaches; the figure traces the "
    "request's last steps up to it."
)


def _or_list(names: list[str]) -> str:
    """``a``, ``b`` and ``c`` as HTML code words: every option a dropdown has, named once."""
    words = [f"<code>{name}</code>" for name in names]
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else words[0]


def allocator_help() -> str:
    """The allocator explorer's help line, naming every gather its dropdown offers."""
    return (
        f"<b>Try:</b> switch <i>gather</i> between {_or_list([g.value for g in Gather])}; move <i>spare pages</i> "
        "(free pages beyond what the batch opens: 0 is the exact fit, negative a real shortage); pick a <i>batch</i> "
        "(each row's character: <code>o</code> its new token opens a page, <code>.</code> it does not) or type its "
        "row count."
    )


Controls = tuple[dict[str, Any], dict[str, Any], list[list[str]]]  # controls, shortcuts, rows


def _table_controls(start: ExplorerState) -> Controls:
    import ipywidgets as w  # type: ignore[import-untyped]

    context, presets = length_control(start.context_len, MIN_EXPLORER_CONTEXT, MAX_EXPLORER_CONTEXT,
                                      CONTEXT_PRESETS, "context len")
    backend = backend_of(start.component)  # its own rules and modes: no choice that is invalid by name
    controls = {
        "context_len": context,
        "page_size": w.SelectionSlider(options=PAGE_SIZES, value=start.page_size, description="page size"),
        "draft_tokens": w.IntSlider(value=start.draft_tokens, min=0, max=32, description="draft tokens"),
        "overshoot": w.IntSlider(value=start.overshoot, min=0, max=8, description="overshoot"),
        "rule": w.Dropdown(options=list(backend.rules), value=start.rule, description="rule"),
        "mode": w.Dropdown(options=[(MODE_LABELS.get(m.value, m.value), m.value) for m in backend.modes],
                           value=start.mode, description="mode"),
        "width_gen": w.Dropdown(options=WIDTH_GENERATIONS, value=start.width_gen, description="width gen"),
        "drafter": w.Dropdown(options=DRAFTERS, value=start.drafter, description="drafter"),
    }
    rows = [["context_len", "context_preset", "page_size"], ["draft_tokens", "overshoot", "drafter"],
            ["rule", "mode", "width_gen"]]
    return controls, {"context_preset": presets}, rows


def _allocator_controls(start: ExplorerState) -> Controls:
    import ipywidgets as w

    controls = {
        "gather": w.Dropdown(options=[g.value for g in Gather], value=start.gather, description="gather"),
        "spare_pages": w.IntSlider(value=start.spare_pages, min=SPARE_PAGES[0], max=SPARE_PAGES[1], description="spare pages"),
        "page_size": w.SelectionSlider(options=ALLOCATOR_PAGE_SIZES, value=start.page_size, description="page size"),
        "batch": w.Dropdown(options=list(batch_compositions(start.max_batch)), value=start.batch, description="batch"),
        "max_batch": w.BoundedIntText(value=start.max_batch, min=3, max=64, description="batch rows",
                                      continuous_update=False),
    }
    return controls, {}, [["gather", "spare_pages", "page_size"], ["batch", "max_batch"]]


class Explorer:
    """The ipywidgets front end: controls -> ``ExplorerState`` -> ``explore`` -> outcome and figure."""

    def __init__(self, state: ExplorerState | None = None, device: str = "cpu") -> None:
        self.device = device
        self.state = state or ExplorerState()
        self.view: ExplorerView | None = None
        table = self.state.component != "allocator"
        controls, shortcuts, rows = _table_controls(self.state) if table else _allocator_controls(self.state)
        self.controls = controls
        self.shortcuts = shortcuts
        if not table:  # before the panel's own observer: the batch list is current when it redraws
            controls["max_batch"].observe(self._batches_changed, names="value")
        self.panel = LivePanel(controls, rows, self._draw, TABLE_HELP if table else allocator_help(), shortcuts)
        self.outcome = self.panel.outcome
        self.widget = self.panel.widget

    def _batches_changed(self, change: dict[str, Any]) -> None:
        batch = self.controls["batch"]
        names = list(batch_compositions(change["new"]))
        batch.options = names  # keeps the value where the new batches still have it
        if batch.value not in names:
            batch.value = names[0]

    def _draw(self, values: dict[str, Any]) -> Drawn:
        fields = {k: v for k, v in values.items() if k in {f.name for f in dataclasses.fields(ExplorerState)}}
        self.state = self.state.replace(**fields)
        self.view = explore(self.state, self.device)
        failed = self.view.result is None or self.view.result.outcome.failed
        keep_zoom = "|".join(str(v) for k, v in sorted(fields.items()) if k not in ("rule", "gather"))
        return Drawn(self.view.summary, failed, self.view.figure, keep_zoom)

    def redraw(self) -> ExplorerView:
        self.panel.redraw()
        assert self.view is not None
        return self.view


def explorer(component: str = DEFAULT_COMPONENTS[0], device: str = "cpu", **state: Any) -> Any:
    """The widget to display in a notebook cell (the last expression of the cell)."""
    return Explorer(ExplorerState(component=component, **state), device).widget
