# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: workbench,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
#   workbench:
#     test_parameters:
#       acceptance_rates:
#       - 0.2
#       - 0.6
#       - 0.95
#       conservativeness_values:
#       - 0
#       - 0.5
#       - 1
#       context_lens:
#       - 960
#       - 1056
#       - 1152
#       draft_token_values:
#       - 2
#       - 8
#       - 16
#       runs: 3
# ---

# %% [markdown]
# # 04 · Serving runs: how often a workload reaches the failing step
#
# A boundary (notebook 02, `workbench boundary`) says *whether* a configuration can fail. Here a
# simulation runs a whole serving workload through the core's real objects — `PagedAllocator`,
# `RequestTable`, and the graph buffers of both backends captured once and replayed every step,
# padded to the captured batch bucket — and reports *which step and which request* fail first, and
# *how often* runs fail across run seeds as the context length, draft tokens, acceptance rate and
# admission conservativeness move. All logic lives in `workbench.sim.simulate`,
# `workbench.sim.simulate_summary` and `workbench.sim.workload`; this notebook only sets parameters,
# calls them, plots and asserts.
#
# **Words used here** (every word in the [glossary](../docs/glossary.md); the scheduler's reach in
# [the semantics](../docs/semantics.md)): *step* — one scheduler iteration
# (a decode or a verify of every running request); *committed length* — tokens a request holds;
# *acceptance* — how many of the `D` drafts a verify accepts (`fixed:K`, or geometric with a rate);
# *conservativeness* — how much of a request's remaining output admission reserves (0: optimistic,
# so pools run exactly full); *exact fit* — a decode step that needs exactly the free pages;
# *[run seed](../docs/glossary.md#run-seed)* — the random seed of a simulated run (a
# *[seed](../docs/glossary.md#seed)* is one of the real crashes; section 1 replays the QwQ one).
#
# **Try in the explorer** (section 4): `qwq` under `context`, then `req-to-token`; `exact-fit`
# under `npu-legacy`, then `npu-clamped`; type another run seed.

# %% tags=["parameters"]
runs: int = 8  # runs per point of every sweep (run seeds 0 .. runs - 1)
qwq_run_seed: int = 0  # the run seed of section 1's QwQ replay
exact_fit_run_seed: int = 1  # the run seed of section 2's exact-fit workload
context_lens: list[int] = [960, 992, 1024, 1056, 1088, 1120, 1152]  # sweep: small contexts (ps 128); prompts 800 .. 950
draft_token_values: list[int] = [2, 4, 6, 8, 12, 16]  # sweep: draft tokens D
acceptance_rates: list[float] = [0.2, 0.4, 0.6, 0.8, 0.95]  # sweep: geometric acceptance rates (probabilities)
conservativeness_values: list[float] = [0.0, 0.1, 0.25, 0.5, 0.75, 1.0]  # sweep: admission conservativeness (0: optimistic)
device: str = "cpu"  # auto, cpu, cuda or npu (the report passes the resolved device)
output_dir: str = "../reports"  # figures: <output_dir>/figures/, their data: <output_dir>/results/ (relative: to this folder)


# %%
def _check_parameters() -> None:
    if not isinstance(runs, int) or not 1 <= runs <= 1000:
        raise ValueError(f"runs: {runs!r} is out of range (allowed: an integer 1 to 1000)")
    for name, values, low, high in (
        ("context_lens", context_lens, 64, 1 << 20), ("draft_token_values", draft_token_values, 1, 64),
        ("acceptance_rates", acceptance_rates, 0.0, 1.0), ("conservativeness_values", conservativeness_values, 0.0, 10.0),
    ):
        if not values or any(not low <= v <= high for v in values):
            raise ValueError(f"{name}: {values!r} must be a non-empty list of values in {low} .. {high}")
    if device not in ("cpu", "cuda", "npu", "auto"):
        raise ValueError(f"device: {device!r} is not one of cpu, cuda, npu, auto")


_check_parameters()
from workbench.present import notebook_params as check

output_dir = check.check_output_dir(output_dir)

# %%
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import plotly.io as pio

from workbench.analysis.boundary import find_boundary
from workbench.analysis.cases import TableCase
from workbench.devices.device import resolve_device
from workbench.model.geometry import Mode, ServingGeometry
from workbench.present.captions import run_claims, share_claims
from workbench.present.claims import caption, claim
from workbench.present.plots import MAX_NOTEBOOK_WIDTH
from workbench.present.report import save_figure, save_results
from workbench.sim.simulate import simulate
from workbench.sim.simulate_summary import records_frame, requests_frame, sweep
from workbench.sim.workload import Acceptance, LengthDist, SimConfig, Workload, exact_fit_scenario, qwq_scenario

# JupyterLab draws the plotly bundle; the HTML copy lets nbconvert show figures offline too.
pio.renderers.default = "plotly_mimetype+notebook"

device = str(resolve_device(device))


def save(fig: go.Figure, name: str, frame: pd.DataFrame, claims, lead: str) -> go.Figure:
    """Write the figure, its data and its caption (a lead, then the claims computed from the data),
    print the caption and hand the figure back to show."""
    fig.update_layout(width=MAX_NOTEBOOK_WIDTH, font={"family": "DejaVu Sans, Arial, sans-serif", "size": 12},
                      plot_bgcolor="white")
    fig.update_xaxes(gridcolor="#eeeeee")
    fig.update_yaxes(gridcolor="#eeeeee")
    save_results(frame, output_dir, f"04_{name}")
    text = caption(claims, lead)
    save_figure(fig, output_dir, f"04_{name}", text, claims)
    print(text)
    return fig


# %% [markdown]
# ## 1. QwQ-32B on Ascend: a run under the `context` rule
#
# ctx 32768, page 128, NGRAM with D = 16, topk 10, no draft KV (the first [seed](../docs/glossary.md#seed)). Requests start a
# few dozen tokens short of the context, so only their last steps are simulated. First the exact
# statement: with acceptance `fixed:1` (one token committed per verify) the longest request walks
# into the boundary one token at a time.

# %%
qwq_config, _ = qwq_scenario(rule="context", acceptance=Acceptance.parse("fixed:1"), max_bs=4)
qwq_workload = Workload(num_requests=4, prompt=LengthDist(32700, 32745), output=LengthDist(16, 80))
boundary = find_boundary(TableCase(component="npu-block-table", geometry=qwq_config.geometry, rule="context",
                                   mode=Mode.TARGET_VERIFY))
exact_runs = {rule: simulate(qwq_config.replace(rule=rule), qwq_workload, qwq_run_seed, device=device)
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
geo_runs = {rule: simulate(qwq_config.replace(rule=rule, acceptance=geo), qwq_workload, qwq_run_seed, device=device)
            for rule in ("context", "req-to-token")}
steps = [requests_frame(run).assign(rule=rule) for rule, run in geo_runs.items()]
qwq_steps = pd.concat(steps, ignore_index=True).assign(request=lambda f: "request " + f["req_id"].astype(str))
fig = px.line(qwq_steps, x="step", y="committed", color="request", facet_col="rule", markers=True, height=480,
              labels={"step": "verify step", "committed": "committed length (tokens)", "request": "request"},
              title="QwQ-32B, D=16: committed length per request and verify step (geometric acceptance 0.6)")
fig.for_each_annotation(lambda a: a.update(text="rule " + a.text.split("=")[-1]))
fig.add_hline(y=boundary.first_failing_seq_len, line_dash="dot", annotation_text=f"boundary {boundary.first_failing_seq_len}",
              annotation_position="top left")  # above the line, left: clear of the requests' lines
failed = qwq_steps[qwq_steps["failing"]]
fig.add_scatter(x=failed["step"], y=failed["committed"], mode="markers", marker_symbol="x", marker_size=14,
                marker_color="#c62828", name="first failure (shape-error)", row=1, col=1)
fig.update_yaxes(tickformat=",d")
save(fig, "qwq_run", qwq_steps, run_claims(qwq_steps, "04_qwq_run", "rule", "context", "req-to-token"),
     "The same workload and run seed under both rules.")

# %% [markdown]
# ## 2. The exact-fit pool: `npu-legacy` against `npu-clamped` and `cuda-masked`
#
# A small pool (28 pages of 4 tokens), 8 short requests, 4 running at a time, optimistic admission
# (conservativeness 0): decode batches that need exactly the free pages are common (the third seed's pool).

# %%
fit_config, fit_workload = exact_fit_scenario()
fit_runs = {g: simulate(fit_config.replace(gather=g), fit_workload, exact_fit_run_seed, device=device)
            for g in ("npu-legacy", "npu-clamped", "cuda-masked")}
legacy_failure = fit_runs["npu-legacy"].first_failure
print(f"npu-legacy: step {legacy_failure.step}, request {legacy_failure.failing_request}: {legacy_failure.error}")
print(f"  seq_lens {legacy_failure.seq_lens}, free list {legacy_failure.free_list_before}, exact fit {legacy_failure.exact_fit}")
for g in ("npu-clamped", "cuda-masked"):
    print(g, fit_runs[g].stop_reason, len(fit_runs[g].records), "steps,",
          sum(r.exact_fit for r in fit_runs[g].records), "exact-fit steps")
fit_steps = pd.concat([records_frame(run).assign(gather=g) for g, run in fit_runs.items()], ignore_index=True)
fit_steps["failing"] = fit_steps["outcome"].ne("ok")
clamped = fit_steps[fit_steps["gather"] == "npu-clamped"]
fig = go.Figure()
fig.add_scatter(x=clamped["step"], y=clamped["free_pages_before"], mode="lines", name="free pages before the step")
fig.add_scatter(x=clamped["step"], y=clamped["new_pages"], mode="lines", name="pages the step opens")
exact = clamped[clamped["exact_fit"]]
fig.add_scatter(x=exact["step"], y=exact["new_pages"], mode="markers", marker={"size": 10, "color": "black"},
                name="exact fit: the step opens every free page")
fig.add_vline(x=legacy_failure.step, line_dash="dot", line_color="#c62828")
fig.add_annotation(x=legacy_failure.step, y=1, yref="paper", xanchor="left", yanchor="top", xshift=6, showarrow=False,
                   text=f"npu-legacy fails here ({legacy_failure.outcome})", font={"color": "#c62828"},
                   bgcolor="rgba(255,255,255,0.85)")
fig.update_layout(title="npu-clamped run: free pages and the pages each step opens", height=450,
                  legend={"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"}, margin={"b": 110})
fig.update_xaxes(title_text="decode step (steps)")
fig.update_yaxes(title_text="pages (count)", rangemode="tozero")
save(fig, "exact_fit", fit_steps, run_claims(fit_steps, "04_exact_fit", "gather", "npu-legacy", "npu-clamped", column="step",
                                             what="decode step") + [
     claim("npu-clamped runs through {values} exact-fit steps", "04_exact_fit", fit_steps, "count", None,
           [["gather", "==", "npu-clamped"], ["exact_fit", "==", True]])],
     "The exact-fit pool under each gather, the same workload and run seed.")

# %% [markdown]
# ## 3. Share of failing runs, across run seeds
#
# Context, draft tokens and acceptance rate: small contexts (page 128, D 16 unless swept, 3 requests
# with prompts 800..950 and outputs 16..200), `context` against `req-to-token`. Conservativeness:
# the exact-fit scenario, `npu-legacy` against `npu-clamped`.

# %%
sweep_geometry = ServingGeometry(context_len=1024, page_size=128, draft_tokens=16, spec_topk=10,
                                 draft_has_kv=False, max_bs=2)
sweep_config = SimConfig(geometry=sweep_geometry, rule="context", acceptance=geo)
sweep_workload = Workload(num_requests=3, prompt=LengthDist(800, 950), output=LengthDist(16, 200))
run_seeds = range(runs)
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
    figure.update_xaxes(matches=None, showticklabels=True, nticks=4, tickangle=0)  # level labels, room for each
    figure.update_yaxes(ticklabelstandoff=8)  # keeps the y axis' "0" off the first x tick label
    figure.for_each_annotation(lambda a: a.update(text=""))  # the x titles say which parameter
    for i, param in enumerate(params, start=1):
        figure.layout[f"xaxis{'' if i == 1 else i}"].title.text = units[param]
    figure.update_layout(legend={"orientation": "h", "y": -0.3, "yanchor": "top", "x": 0}, margin={"b": 120})
    return figure


fixed_variants = ["req-to-token / npu-clamped"]  # the fixed rule with the fixed gather
fig = per_parameter("share", "share of failing runs (fraction)", f"Share of failing runs out of {runs} run seeds, per swept parameter")
fig.update_yaxes(range=[-0.02, 1.02])
save(fig, "share_sweeps", shares, share_claims(shares, "04_share_sweeps", fixed_variants),
     "Per swept parameter, the share of runs that fail, for the legacy and the fixed rule and gather.")
fig = per_parameter("median_first_failing_step", "median first failing step (steps)",
                    f"Median first failing step over the failing runs of {runs} run seeds")
fig.update_yaxes(rangemode="tozero")
save(fig, "first_failing_step", shares, [],
     "When a run fails: the median step of its first failure, per swept parameter.")

# %% [markdown]
# ## 4. Explorer
#
# The explorer wraps `workbench.sim.simulate_summary.explore` (the same function the tests call): a
# scenario, a rule, a gather, a run seed, and one parameter changed. The line under the controls
# summarises the run; the figure draws each request's committed length per step, the first failing
# step circled. **Try:** `qwq` with rule `context`, then `req-to-token`; `exact-fit` with gather
# `npu-legacy`, then `npu-clamped`; type another run seed and press Enter.

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
# Determinism: the same run seed gives the same run.
assert simulate(fit_config, fit_workload, exact_fit_run_seed, device=device).records == fit_runs["npu-legacy"].records
assert simulate(qwq_config.replace(acceptance=geo), qwq_workload, qwq_run_seed, device=device).records == geo_runs["context"].records
# The fixed rule and gather never fail in the sweeps.
is_gather_sweep = shares["param"].eq("conservativeness")
fixed = (~is_gather_sweep & shares["rule"].eq("req-to-token")) | (is_gather_sweep & shares["gather"].eq("npu-clamped"))
assert (shares.loc[fixed, "share"] == 0).all()
