# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: workbench,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   workbench:
#     test_parameters:
#       acceptance_rates:
#       - 0.2
#       - 0.6
#       - 0.95
#       conservativeness_values:
#       - 0.0
#       - 0.5
#       - 1.0
#       context_lens:
#       - 960
#       - 1056
#       - 1152
#       draft_token_values:
#       - 2
#       - 8
#       - 16
#       seeds: 3
# ---

# %% [markdown]
# # 04 · Serving runs: how often a workload reaches the failing step
#
# A boundary (notebook 02, `workbench boundary`) says *whether* a configuration can fail. Here a seeded
# simulation runs a whole serving workload through the core's real objects — `PagedAllocator`,
# `RequestTable`, and the graph buffers of both backends captured once and replayed every step,
# padded to the captured batch bucket — and reports *which step and which request* fail first, and
# *how often* runs fail across seeds as the context length, draft tokens, acceptance rate and
# admission conservativeness move. All logic lives in `workbench.sim.simulate`,
# `workbench.sim.simulate_summary` and `workbench.sim.workload`; this notebook only sets parameters,
# calls them, plots and asserts.
#
# **Words used here** ([README glossary](../README.md#glossary)): *step* — one scheduler iteration
# (a decode or a verify of every running request); *committed length* — tokens a request holds;
# *acceptance* — how many of the `D` drafts a verify accepts (`fixed:K`, or geometric with a rate);
# *conservativeness* — how much of a request's remaining output admission reserves (0: optimistic,
# so pools run exactly full); *exact fit* — a decode step that needs exactly the free pages;
# *seed* — here the random seed of a run (and, in section 1, the QwQ crash of the spec).
#
# **Try in the explorer** (section 4): `qwq` under `context`, then `req-to-token`; `exact-fit`
# under `npu-legacy`, then `npu-clamped`; type another seed.

# %% tags=["parameters"]
seeds = 8  # runs per point of every sweep (seeds 0 .. seeds - 1)
qwq_seed = 0
exact_fit_seed = 1
context_lens = [960, 992, 1024, 1056, 1088, 1120, 1152]  # sweep: small contexts (ps 128); prompts 800 .. 950
draft_token_values = [2, 4, 6, 8, 12, 16]
acceptance_rates = [0.2, 0.4, 0.6, 0.8, 0.95]
conservativeness_values = [0.0, 0.1, 0.25, 0.5, 0.75, 1.0]
device = "cpu"
output_dir = "../reports"  # figures go to <output_dir>/figures/, as in notebooks 00-03


# %%
def _check_parameters() -> None:
    if not isinstance(seeds, int) or not 1 <= seeds <= 1000:
        raise ValueError(f"seeds: {seeds!r} is out of range (allowed: an integer 1 to 1000)")
    for name, values, low, high in (
        ("context_lens", context_lens, 64, 1 << 20), ("draft_token_values", draft_token_values, 1, 64),
        ("acceptance_rates", acceptance_rates, 0.0, 1.0), ("conservativeness_values", conservativeness_values, 0.0, 10.0),
    ):
        if not values or any(not low <= v <= high for v in values):
            raise ValueError(f"{name}: {values!r} must be a non-empty list of values in {low} .. {high}")
    if device not in ("cpu", "cuda", "npu", "auto"):
        raise ValueError(f"device: {device!r} is not one of cpu, cuda, npu, auto")


_check_parameters()

# %%
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import plotly.io as pio

from workbench.analysis.boundary import find_boundary
from workbench.analysis.cases import TableCase
from workbench.devices.device import resolve_device
from workbench.model.geometry import Mode, ServingGeometry
from workbench.present.report import save_figure
from workbench.sim.simulate import simulate
from workbench.sim.simulate_summary import records_frame, requests_frame, sweep
from workbench.sim.workload import Acceptance, LengthDist, SimConfig, Workload, exact_fit_scenario, qwq_scenario

# JupyterLab draws the plotly bundle; the HTML copy lets nbconvert show figures offline too.
pio.renderers.default = "plotly_mimetype+notebook"

device = str(resolve_device(device))


def save(fig: go.Figure, name: str, caption: str) -> go.Figure:
    """Write the figure (and the one line the report prints under it), then hand it back to show."""
    fig.update_layout(width=1100, font={"family": "DejaVu Sans, Arial, sans-serif", "size": 12}, plot_bgcolor="white")
    fig.update_xaxes(gridcolor="#eeeeee")
    fig.update_yaxes(gridcolor="#eeeeee")
    save_figure(fig, output_dir, f"04_{name}", caption)
    return fig


# %% [markdown]
# ## 1. QwQ-32B on Ascend: a run under the `context` rule
#
# ctx 32768, page 128, NGRAM with D = 16, topk 10, no draft KV (spec section 2). Requests start a
# few dozen tokens short of the context, so only their last steps are simulated. First the exact
# statement: with acceptance `fixed:1` (one token committed per verify) the longest request walks
# into the boundary one token at a time.

# %%
qwq_config, _ = qwq_scenario(rule="context", acceptance=Acceptance.parse("fixed:1"), max_bs=4)
qwq_workload = Workload(num_requests=4, prompt=LengthDist(32700, 32745), output=LengthDist(16, 80))
boundary = find_boundary(TableCase(component="npu-block-table", geometry=qwq_config.geometry, rule="context",
                                   mode=Mode.TARGET_VERIFY))
exact_runs = {rule: simulate(qwq_config.replace(rule=rule), qwq_workload, qwq_seed, device=device)
              for rule in ("context", "req-to-token")}
first = exact_runs["context"].first_failure
print("boundary (find_boundary):", boundary.first_failing_seq_len)
print(f"context rule: step {first.step}, request {first.failing_request}, committed {first.committed}")
print("  ", first.error)
print("req-to-token:", exact_runs["req-to-token"].stop_reason, len(exact_runs["req-to-token"].records), "steps")

# %% [markdown]
# The same workload with a geometric acceptance model (rate 0.6): the failing request jumps into the
# failing window rather than walking into it; the first failing step is still the first whose
# longest request is at or past the boundary.

# %%
geo = Acceptance(kind="geometric", rate=0.6)
geo_runs = {rule: simulate(qwq_config.replace(rule=rule, acceptance=geo), qwq_workload, qwq_seed, device=device)
            for rule in ("context", "req-to-token")}
steps = [requests_frame(run).assign(rule=rule) for rule, run in geo_runs.items()]
qwq_steps = pd.concat(steps, ignore_index=True).assign(request=lambda f: "request " + f["req_id"].astype(str))
fig = px.line(qwq_steps, x="step", y="committed", color="request", facet_col="rule", markers=True, height=480,
              labels={"step": "verify step", "committed": "committed length (tokens)", "request": "request"},
              title="QwQ-32B, D=16: committed length per request and verify step (geometric acceptance 0.6)")
fig.for_each_annotation(lambda a: a.update(text="rule " + a.text.split("=")[-1]))
fig.add_hline(y=boundary.first_failing_seq_len, line_dash="dot", annotation_text=f"boundary {boundary.first_failing_seq_len}",
              annotation_position="bottom right")
failed = qwq_steps[qwq_steps["failing"]]
fig.add_scatter(x=failed["step"], y=failed["committed"], mode="markers", marker_symbol="x", marker_size=14,
                marker_color="#c62828", name="first failure (shape-error)", row=1, col=1)
fig.update_yaxes(tickformat=",d")
save(fig, "qwq_run", "Under the context rule the run fails at the first verify whose longest request reaches s = 32753; "
     "under req-to-token the same seed completes.")

# %% [markdown]
# ## 2. The exact-fit pool: `npu-legacy` against `npu-clamped` and `cuda-masked`
#
# A small pool (28 pages of 4 tokens), 8 short requests, 4 running at a time, optimistic admission
# (conservativeness 0): decode batches that need exactly the free pages are common (spec section 4).

# %%
fit_config, fit_workload = exact_fit_scenario()
fit_runs = {g: simulate(fit_config.replace(gather=g), fit_workload, exact_fit_seed, device=device)
            for g in ("npu-legacy", "npu-clamped", "cuda-masked")}
legacy_failure = fit_runs["npu-legacy"].first_failure
print(f"npu-legacy: step {legacy_failure.step}, request {legacy_failure.failing_request}: {legacy_failure.error}")
print(f"  seq_lens {legacy_failure.seq_lens}, free list {legacy_failure.free_list_before}, exact fit {legacy_failure.exact_fit}")
for g in ("npu-clamped", "cuda-masked"):
    print(g, fit_runs[g].stop_reason, len(fit_runs[g].records), "steps,",
          sum(r.exact_fit for r in fit_runs[g].records), "exact-fit steps")
fit_steps = records_frame(fit_runs["npu-clamped"])[["step", "free_pages_before", "new_pages", "exact_fit"]]
pages = fit_steps.rename(columns={"free_pages_before": "free pages before the step", "new_pages": "pages the step opens"})
fig = px.line(pages.melt(id_vars=["step", "exact_fit"], var_name="series", value_name="pages"), x="step", y="pages",
              color="series", height=450, labels={"step": "decode step", "pages": "pages (pages)", "series": "series"},
              title="npu-clamped run: free pages and the pages each step opens")
exact = fit_steps[fit_steps["exact_fit"]]
fig.add_scatter(x=exact["step"], y=exact["new_pages"], mode="markers", marker_size=10, name="exact fit (opens all free pages)")
fig.add_vline(x=legacy_failure.step, line_dash="dot", annotation_text="npu-legacy fails here (index-error)")
fig.update_yaxes(rangemode="tozero")
save(fig, "exact_fit", "Where the two lines meet the pool is exactly full: npu-legacy fails at the first such step, "
     "npu-clamped runs through all of them.")

# %% [markdown]
# ## 3. Share of failing runs, across seeds
#
# Context, draft tokens and acceptance rate: small contexts (page 128, D 16 unless swept, 3 requests
# with prompts 800..950 and outputs 16..200), `context` against `req-to-token`. Conservativeness:
# the exact-fit scenario, `npu-legacy` against `npu-clamped`.

# %%
sweep_geometry = ServingGeometry(context_len=1024, page_size=128, draft_tokens=16, spec_topk=10,
                                 draft_has_kv=False, max_bs=2)
sweep_config = SimConfig(geometry=sweep_geometry, rule="context", acceptance=geo)
sweep_workload = Workload(num_requests=3, prompt=LengthDist(800, 950), output=LengthDist(16, 200))
run_seeds = range(seeds)
rules = ["context", "req-to-token"]
shares = pd.concat([
    sweep(sweep_config, sweep_workload, "context_len", context_lens, run_seeds, rules=rules, device=device),
    sweep(sweep_config, sweep_workload, "draft_tokens", draft_token_values, run_seeds, rules=rules, device=device),
    sweep(sweep_config, sweep_workload, "acceptance_rate", acceptance_rates, run_seeds, rules=rules, device=device),
    sweep(fit_config, fit_workload, "conservativeness", conservativeness_values, run_seeds,
          gathers=["npu-legacy", "npu-clamped"], device=device),
], ignore_index=True)
shares["variant"] = shares["rule"] + " / " + shares["gather"]
shares

# %% [markdown]
# Context length and draft tokens move *whether* a run fails (the failing window is the last
# `D - 1` committed lengths below the cap, and only requests that reach it can fail); the acceptance
# rate mostly moves *when* (bigger jumps reach the window in fewer steps), since jumping over the whole
# window needs nearly every draft accepted. Conservativeness moves the exact-fit failures of
# `npu-legacy`: optimistic admission keeps the pool full.

# %%
params = ["context_len", "draft_tokens", "acceptance_rate", "conservativeness"]
units = {"context_len": "context length (tokens)", "draft_tokens": "draft tokens D (tokens)",
         "acceptance_rate": "acceptance rate (probability)", "conservativeness": "conservativeness (ratio)"}


def per_parameter(column: str, y_title: str, title: str) -> go.Figure:
    """One panel per swept parameter, each with its own x axis and unit."""
    figure = px.line(shares, x="value", y=column, color="variant", facet_col="param", markers=True, height=430,
                     category_orders={"param": params}, labels={column: y_title, "variant": "rule / gather"},
                     title=title, facet_col_spacing=0.09)
    figure.update_xaxes(matches=None, showticklabels=True, nticks=5)
    figure.update_yaxes(ticklabelstandoff=8)  # keeps the y axis' "0" off the first x tick label
    figure.for_each_annotation(lambda a: a.update(text=""))  # the x titles say which parameter
    for i, param in enumerate(params, start=1):
        figure.layout[f"xaxis{'' if i == 1 else i}"].title.text = units[param]
    figure.update_layout(legend={"orientation": "h", "y": -0.3, "yanchor": "top", "x": 0}, margin={"b": 120})
    return figure


fig = per_parameter("share", "share of failing runs (fraction)", f"Share of failing runs out of {seeds} seeds, per swept parameter")
fig.update_yaxes(range=[-0.02, 1.02])
save(fig, "share_sweeps", "Context length and draft tokens move whether a run fails; conservativeness moves npu-legacy's "
     "exact-fit failures; the fixed rule and gather never fail.")
fig = per_parameter("median_first_failing_step", "median first failing step (steps)",
                    f"Median first failing step over the failing runs of {seeds} seeds")
fig.update_yaxes(rangemode="tozero")
save(fig, "first_failing_step", "The acceptance rate mostly moves when a run fails: bigger jumps reach the failing window "
     "in fewer steps.")

# %% [markdown]
# ## 4. Explorer
#
# The explorer wraps `workbench.sim.simulate_summary.explore` (the same function the tests call): a
# scenario, a rule, a gather, a seed, and one parameter changed. The line under the controls
# summarises the run; the figure draws each request's committed length per step, the first failing
# step circled. **Try:** `qwq` with rule `context`, then `req-to-token`; `exact-fit` with gather
# `npu-legacy`, then `npu-clamped`; type another seed and press Enter.

# %%
from workbench.present.run_explorer import run_explorer

run_explorer(device=device)

# %% [markdown]
# ## 5. Assertions

# %%
# QwQ: the context rule fails at a verify step exactly at the core's boundary; req-to-token completes.
assert boundary.first_failing_seq_len == 32753
assert first.mode == "target-verify" and first.outcome == "shape-error"
assert first.committed[first.req_ids.index(first.failing_request)] == max(first.committed) == 32753
assert first.error == "The size of tensor a (256) must match the size of tensor b (257) at non-singleton dimension 1"
assert exact_runs["req-to-token"].completed and not exact_runs["req-to-token"].failures
geo_first = geo_runs["context"].first_failure
assert max(geo_first.committed) >= 32753 and all(max(r.committed) < 32753 for r in geo_runs["context"].records[:-1])
assert geo_runs["req-to-token"].completed and not geo_runs["req-to-token"].failures

# %%
# Exact fit: npu-legacy fails on an exactly full pool; npu-clamped completes with cuda-masked's allocations.
assert legacy_failure.outcome == "index-error" and legacy_failure.exact_fit
assert fit_runs["npu-clamped"].completed and fit_runs["cuda-masked"].completed
assert [r.out_cache_loc for r in fit_runs["npu-clamped"].records] == [r.out_cache_loc for r in fit_runs["cuda-masked"].records]

# %%
# Determinism: the same seed gives the same run.
assert simulate(fit_config, fit_workload, exact_fit_seed, device=device).records == fit_runs["npu-legacy"].records
assert simulate(qwq_config.replace(acceptance=geo), qwq_workload, qwq_seed, device=device).records == geo_runs["context"].records
# The fixed rule and gather never fail in the sweeps.
is_gather_sweep = shares["param"].eq("conservativeness")
fixed = (~is_gather_sweep & shares["rule"].eq("req-to-token")) | (is_gather_sweep & shares["gather"].eq("npu-clamped"))
assert (shares.loc[fixed, "share"] == 0).all()
