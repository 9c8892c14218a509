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
#       allocator_max_batch: 3
#       allocator_page_sizes:
#       - 4
#       context_lens:
#       - 60
#       - 100
#       draft_tokens:
#       - 0
#       - 4
#       page_sizes:
#       - 16
# ---

# %% [markdown]
# # 00 · Design review: graph-captured KV metadata
#
# What this answers: **do the three seed failures reproduce on real torch tensors, which sizing
# rules are safe where, and does every fix hold?** One figure per component, a table of the rules'
# safety by mode, and assertions that make this notebook a regression test. Details per component
# are in notebooks 01-03.

# %% tags=["parameters"]
device = "cpu"  # auto, cpu, cuda or npu (the report passes the resolved device)
output_dir = "../reports"  # figures are written to <output_dir>/figures/ as plotly JSON
cache_dir = "../data/cache"  # sweep cache (parquet); None computes everything afresh
progress = False  # a tqdm bar for the sweep

context_lens = [4080, 7919]  # small contexts keep the overview fast; 4080 + 16 is a page multiple
page_sizes = [64, 128]
draft_tokens = [0, 4, 16]
overshoot = 2  # committed tokens past ctx - 1 that the scheduler lets through for one step
allocator_page_sizes = [4, 128]
allocator_max_batch = 6

# %%
from workbench.present import notebook_params as check

device = check.check_device(device)
output_dir = check.check_output_dir(output_dir)

context_lens = check.check_ints("context_lens", context_lens, 2, 1 << 20)
page_sizes = check.check_ints("page_sizes", page_sizes, 1, 4096)
draft_tokens = check.check_ints("draft_tokens", draft_tokens, 0, 1024)
overshoot = check.check_int("overshoot", overshoot, 0, 1024)
allocator_page_sizes = check.check_ints("allocator_page_sizes", allocator_page_sizes, 2, 4096)
allocator_max_batch = check.check_int("allocator_max_batch", allocator_max_batch, 3, 64)

# %%
import pandas as pd
import plotly.io as pio

from workbench.present.report import save_figure

# JupyterLab draws the plotly bundle; the HTML copy lets an executed notebook rendered by nbconvert
# show its figures offline too (plotly.js is inlined once per notebook).
pio.renderers.default = "plotly_mimetype+notebook"

pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 30)


def publish(fig, name):
    """Write the figure for the report, then show it here."""
    save_figure(fig, output_dir, name)
    fig.show()


# %% [markdown]
# ## The seed cases, reproduced

# %%
from workbench.analysis.seeds import SEEDS
from workbench.present.report import seed_rows

seeds = pd.DataFrame(seed_rows(device))
seeds

# %% [markdown]
# ## Sweep: both tables, every rule and mode

# %%
from workbench.analysis.sweep import SweepGrid, allocator_exact_fit_sweep, run_sweep

grid = SweepGrid(context_lens=context_lens, page_sizes=page_sizes, draft_tokens=draft_tokens,
                 modes=("decode", "target-verify", "draft-decode", "draft-extend"), overshoot=overshoot)
sweep = run_sweep(grid, device=device, cache_dir=cache_dir, progress=progress)
exact_fit = allocator_exact_fit_sweep(allocator_page_sizes, allocator_max_batch, device=device)
len(sweep), len(exact_fit)

# %% [markdown]
# ## One figure per component

# %%
from workbench.present.plots import exact_fit_map, failure_map

publish(failure_map(sweep[sweep.component == "npu-block-table"]), "00_npu_block_table_failures")
publish(failure_map(sweep[sweep.component == "dsa-page-table"]), "00_dsa_page_table_failures")
publish(exact_fit_map(exact_fit), "00_allocator_exact_fit")

# %% [markdown]
# ## Which rules are safe where (`fails` = some committed length up to `ctx - 1 + overshoot` fails)

# %%
safety = (
    sweep.assign(fails=sweep.first_failing_seq_len.notna())
    .pivot_table(index=["component", "rule"], columns="mode", values="fails", aggfunc="any")
    .replace({True: "fails", False: "safe"})
    .fillna("n/a")  # a mode the component has no graph for, or that needs drafts
)
safety

# %% [markdown]
# ## Explorer

# %%
from workbench.present.explorer import explorer

explorer("npu-block-table", device=device)

# %% [markdown]
# ## Assertions: this notebook is a regression test

# %%
# The seeds reproduce: torch's exact message before each fix, success after it.
for seed in SEEDS:
    before = seeds[(seeds.seed == seed.name) & (seeds.fix == "before")].iloc[0]
    after = seeds[(seeds.seed == seed.name) & (seeds.fix == "after")].iloc[0]
    assert before.error == seed.expected_error, (seed.name, before.error)
    assert after.outcome == "ok", (seed.name, after.outcome)
boundaries = seeds.set_index(["seed", "fix"]).first_failing_seq_len
assert boundaries["npu-block-table", "before"] == 32753 and boundaries["dsa-page-table", "before"] == 90001
assert pd.isna(boundaries["npu-block-table", "after"]) and pd.isna(boundaries["dsa-page-table", "after"])

# %%
# Every boundary was confirmed by executing the failing step and the passing one below it.
assert sweep.confirmed.all(), sweep[~sweep.confirmed]
# req-to-token never fails; the original context rule fails in target-verify for both tables.
assert not (safety.xs("req-to-token", level="rule") == "fails").any().any()
assert (safety.xs("context", level="rule")["target-verify"] == "fails").all()
# The allocator: the legacy gather breaks on an exactly full pool, the clamped fix never fails.
assert (exact_fit[exact_fit.gather == "npu-legacy"].outcome == "index-error").any()
assert not exact_fit[exact_fit.gather == "npu-clamped"].outcome.isin(["index-error", "silent-overread"]).any()
