"""Notebook 04's explorer: one seeded serving run, on the same ``LivePanel`` as every explorer.

``run_view(values)`` is a plain function of the controls' values (``workbench.sim.simulate_summary.explore``
underneath): the outcome line summarises the run, the figure draws each request's committed length
per step and circles the first failing step. ``run_explorer()`` is the widget.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go  # type: ignore[import-untyped]

from workbench.backends import RULE_NAMES
from workbench.model.allocator import Gather
from workbench.present.live import Drawn, LivePanel
from workbench.present.plots import FONT, OUTCOME_COLOURS, WIDTH
from workbench.present.words import failure_word, outcome_phrase

SCENARIOS = ("exact-fit", "qwq")
# How a run that meets no failure stops (``workbench.sim.simulate``'s stop reasons), in a reader's words
STOPPED = {
    "completed": "completed: every request finished",
    "out-of-memory": "stopped: the allocator ran out of memory (its designed answer)",
    "max-steps": "stopped at the simulation's step limit",
}
HELP = (
    "<b>Try:</b> <i>scenario</i> <code>qwq</code> with <i>rule</i> <code>context</code>, then <code>req-to-token</code>; "
    "<code>exact-fit</code> with <i>gather</i> <code>npu-legacy</code>, then <code>npu-clamped</code>; change the "
    "<i>run seed</i> (the simulation's random seed: type it and press Enter) or the admission <i>conservativeness</i> "
    "(0: optimistic, pools run full). The line below says where each run fails, if it does."
)


def run_figure(steps: Any, summary: dict[str, object], title: str) -> go.Figure:
    """Committed length per request and step; the first failing step circled."""
    fig = go.Figure()
    for req_id, group in steps.groupby("req_id", sort=True):
        fig.add_trace(go.Scatter(x=group["step"], y=group["committed"], mode="lines+markers", name=f"request {req_id}",
                                 marker={"size": 5}))
    failing = steps[steps["failing"]] if "failing" in steps else steps.iloc[0:0]
    colour = OUTCOME_COLOURS.get(str(summary.get("outcome")), "black")  # the trace is there even when empty
    fig.add_trace(go.Scatter(x=failing["step"], y=failing["committed"], mode="markers", name=f"fails: {summary.get('outcome')}",
                             showlegend=not failing.empty,
                             marker={"symbol": "circle-open", "size": 16, "color": colour, "line": {"width": 2}}))
    fig.update_xaxes(title_text="step (scheduler iterations)", gridcolor="#eeeeee")
    fig.update_yaxes(title_text="committed length (tokens)", tickformat=",d", gridcolor="#eeeeee")
    fig.update_layout(title={"text": title, "x": 0.01}, width=WIDTH, height=470, font=FONT, plot_bgcolor="white",
                      legend={"orientation": "h", "y": -0.2, "yanchor": "top", "x": 0}, margin={"b": 110})
    return fig


def run_line(summary: dict[str, object], rule: str, gather: str) -> str:
    """What happened in a run, as a person reads it: the word and the step, request, committed length
    and buffer of its first failure, else how it stopped; the step count and exact-fit steps last."""
    steps, fits = summary["steps"], summary["exact_fit_steps"]
    after = f"after {steps} steps (exact fits of the pool: {fits})"
    if summary["first_failing_step"] is None:
        return f"{STOPPED.get(str(summary['stop_reason']), str(summary['stop_reason']))} {after}, no step failed"
    outcome = str(summary["outcome"])
    component = summary["failing_component"]
    where = (f"the allocator's decode gather ({gather})" if component == "allocator"
             else f"{component} (rule {rule})" if component else "an unnamed buffer")
    request = summary["failing_request"]
    length = summary["failing_committed_len"]
    who = (f"request {request} at committed length {length:,}" if request is not None and isinstance(length, int)
           else "the batch")
    return (f"{failure_word(outcome)} at step {summary['first_failing_step']}: {who}, in {where}: "
            f"{outcome_phrase(outcome)}; the run stops {after}")


def run_view(values: dict[str, Any], device: str = "cpu") -> Drawn:
    """One run for the controls' values: its summary line and figure."""
    from workbench.sim.simulate_summary import explore

    changes: dict[str, float] = {"conservativeness": float(values["conservativeness"])}
    if values["scenario"] == "qwq":
        changes["acceptance_rate"] = float(values["acceptance_rate"])
    try:
        shown = explore(values["scenario"], rule=values["rule"], gather=values["gather"], seed=int(values["seed"]),
                        changes=changes, device=device)
    except ValueError as err:
        return Drawn(f"invalid: {err}", True, None)
    summary = shown.summary
    failed = summary["first_failing_step"] is not None
    line = run_line(summary, str(values["rule"]), str(values["gather"]))
    title = (f"{values['scenario']} · rule {values['rule']} · gather {values['gather']} · run seed {values['seed']}"
             f"<br><sup>{summary['stop_reason']} after {summary['steps']} steps"
             + (f"; first failure at step {summary['first_failing_step']}: {summary['outcome']}" if failed else "")
             + "</sup>")
    return Drawn(line, failed, run_figure(shown.steps, shown.summary, title), uirevision=str(values["scenario"]))


def run_explorer(device: str = "cpu", scenario: str = "exact-fit", seed: int = 1) -> Any:
    """The widget: scenario, rule, gather, seed, conservativeness and (qwq) acceptance rate."""
    return run_panel(device, scenario, seed).widget


def run_panel(device: str = "cpu", scenario: str = "exact-fit", seed: int = 1) -> LivePanel:
    """The explorer's panel: its ``controls`` by name, and its ``widget``."""
    import ipywidgets as w  # type: ignore[import-untyped]

    controls = {
        "scenario": w.Dropdown(options=SCENARIOS, value=scenario, description="scenario"),
        "rule": w.Dropdown(options=RULE_NAMES, value="context", description="rule"),  # every rule the qwq table has
        "gather": w.Dropdown(options=[g.value for g in Gather], value="npu-legacy", description="gather"),
        "seed": w.BoundedIntText(value=seed, min=0, max=10_000, description="run seed", continuous_update=False),
        "conservativeness": w.FloatSlider(value=0.0, min=0.0, max=1.0, step=0.25, description="conservativeness",
                                          continuous_update=False, style={"description_width": "initial"}),
        "acceptance_rate": w.FloatSlider(value=0.6, min=0.0, max=1.0, step=0.1, description="acceptance (qwq)",
                                         continuous_update=False, style={"description_width": "initial"}),
    }
    rows = [["scenario", "rule", "gather"], ["seed", "conservativeness", "acceptance_rate"]]
    return LivePanel(controls, rows, lambda values: run_view(values, device), HELP)
