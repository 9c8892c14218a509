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

# %% tags=["parameters"]
seeds = 8  # runs per point of every sweep (seeds 0 .. seeds - 1)
qwq_seed = 0
exact_fit_seed = 1
context_lens = [960, 992, 1024, 1056, 1088, 1120, 1152]  # sweep: small contexts (ps 128); prompts 800 .. 950
draft_token_values = [2, 4, 6, 8, 12, 16]
acceptance_rates = [0.2, 0.4, 0.6, 0.8, 0.95]
conservativeness_values = [0.0, 0.1, 0.25, 0.5, 0.75, 1.0]
device = "cpu"
output_dir = "reports"


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
import plotly.express as px
import plotly.graph_objects as go
import plotly.io as pio

from workbench.analysis.boundary import find_boundary
from workbench.analysis.cases import TableCase
from workbench.devices.device import resolve_device
from workbench.model.geometry import Mode, ServingGeometry
from workbench.present.report import save_figure
from workbench.sim.simulate import simulate
from workbench.sim.simulate_summary import explore, records_frame, requests_frame, sweep
from workbench.sim.workload import Acceptance, LengthDist, SimConfig, Workload, exact_fit_scenario, qwq_scenario

# JupyterLab draws the plotly bundle; the HTML copy lets nbconvert show figures offline too.
pio.renderers.default = "plotly_mimetype+notebook"

device = str(resolve_device(device))


def save(fig: go.Figure, name: str) -> go.Figure:
    """Write the figure for the report (as every notebook does), then hand it back to show."""
    save_figure(fig, output_dir, f"04_{name}")
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
import pandas as pd

qwq_steps = pd.concat(steps, ignore_index=True)
fig = px.line(qwq_steps, x="step", y="committed", color="req_id", facet_col="rule", markers=True,
              title="QwQ-32B, D=16: committed length per request and verify step (geometric 0.6)")
fig.add_hline(y=boundary.first_failing_seq_len, line_dash="dot", annotation_text="boundary 32753")
failed = qwq_steps[qwq_steps["failing"]]
fig.add_scatter(x=failed["step"], y=failed["committed"], mode="markers", marker_symbol="x", marker_size=14,
                marker_color="red", name="first failure", row=1, col=1)
save(fig, "qwq_run")

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
fig = px.line(fit_steps.melt(id_vars=["step", "exact_fit"], var_name="pages", value_name="count"),
              x="step", y="count", color="pages", title="npu-clamped run: free pages and pages a step opens")
exact = fit_steps[fit_steps["exact_fit"]]
fig.add_scatter(x=exact["step"], y=exact["new_pages"], mode="markers", marker_size=10, name="exact fit")
fig.add_vline(x=legacy_failure.step, line_dash="dot", annotation_text="npu-legacy index-error")
save(fig, "exact_fit")

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
metrics = shares.melt(id_vars=["param", "value", "variant"], value_vars=["share", "median_first_failing_step"],
                      var_name="metric", value_name="y")
fig = px.line(metrics, x="value", y="y", color="variant", facet_col="param", facet_row="metric", markers=True,
              title=f"Share of failing runs out of {seeds} seeds, and the median first failing step")
fig.update_xaxes(matches=None, showticklabels=True)
fig.update_yaxes(matches=None)
save(fig, "share_sweeps")

# %% [markdown]
# ## 4. Explorer
#
# Widgets wrap `workbench.sim.simulate_summary.explore` (the same function the tests call): a scenario, a rule,
# a gather, a seed, and one parameter changed.

# %%
import ipywidgets as widgets


def show(scenario: str, rule: str, gather: str, seed: int, conservativeness: float, acceptance_rate: float) -> None:
    changes = {"conservativeness": conservativeness}
    if scenario == "qwq":
        changes["acceptance_rate"] = acceptance_rate
    shown = explore(scenario, rule=rule, gather=gather, seed=seed, changes=changes, device=device)
    print({k: shown.summary[k] for k in ("steps", "stop_reason", "first_failing_step", "failing_request",
                                         "failing_committed_len", "outcome", "exact_fit_steps", "retractions")})
    px.line(shown.steps, x="step", y="committed", color="req_id").show()


widgets.interactive(
    show, scenario=["exact-fit", "qwq"], rule=["context", "context-plus-draft", "req-to-token"],
    gather=["npu-legacy", "npu-clamped", "cuda-masked"], seed=widgets.IntSlider(1, 0, 20),
    conservativeness=widgets.FloatSlider(value=0.0, min=0.0, max=1.0, step=0.25),
    acceptance_rate=widgets.FloatSlider(value=0.6, min=0.0, max=1.0, step=0.1),
)

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
