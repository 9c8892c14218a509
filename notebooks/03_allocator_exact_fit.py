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
#       max_batch: 4
#       page_sizes:
#       - 4
# ---

# %% [markdown]
# # 03 · The paged allocator's exact fit (`alloc_decode`)
#
# What this answers: **on which batches and free-pool sizes does each gather of `alloc_decode`
# fail, and how?** `npu-legacy` gathers for every row, `npu-clamped` is the third seed's fix,
# `cuda-masked` is the CUDA kernel (only page-opening rows read; capacity checked afterwards),
# `cuda-checked` the same kernel with its capacity checked first (SGLang 0.5.23).
#
# **Words used here** (every word in the [glossary](../docs/glossary.md); the allocator in
# [the semantics](../docs/semantics.md)): `ps` page size (tokens);
# *opener* — a row whose new token opens a page (`seq_len % ps == 1`; `o` in a batch pattern, `.`
# for a row that does not); *free pages* — the free list `alloc_decode` takes pages from;
# *exact fit* — a pool holding exactly the pages the batch opens; *spare pages* — free pages beyond
# that (negative: a real shortage); *gather* — how `alloc_decode` reads the free list; *[seed](../docs/glossary.md#seed)* — the
# third real crash's test vector (`ps = 4`, `seq_lens = [5, 10, 7]`, one free page).
#
# **Try in the explorer**: the seed batch under `npu-legacy` raises `IndexError`; switch `gather`
# to `npu-clamped` (`out_cache_loc=[44, 21, 30]`); move *spare pages* to 1 (legacy works again)
# and to -1 (`cuda-masked` over-reads before it returns None); type another *batch rows* count.

# %% tags=["parameters"]
device: str = "cpu"  # auto, cpu, cuda or npu (the report passes the resolved device)
output_dir: str = "../reports"  # figures: <output_dir>/figures/ (plotly JSON), data: <output_dir>/results/ (relative: to this folder)
cache_dir = "../data/cache"  # type: Optional[str] unused here (the exact-fit sweep is not cached); every notebook takes it
progress: bool = False  # a tqdm bar for the sweep

page_sizes: list[int] = [4, 64, 128]  # the KV pool's page sizes swept
max_batch: int = 8  # the largest batch of the named batch compositions
gathers: list[str] = ["npu-legacy", "npu-clamped", "cuda-masked"]  # cuda-checked (0.5.23) is the fourth
safe_gathers: list[str] = ["npu-clamped"]  # asserted never to fail, whatever the pool holds

# %%
from workbench.present import notebook_params as check

device = check.check_device(device)
output_dir = check.check_output_dir(output_dir)

from workbench.model.allocator import Gather

GATHERS = tuple(g.value for g in Gather)
page_sizes = check.check_ints("page_sizes", page_sizes, 2, 4096)
max_batch = check.check_int("max_batch", max_batch, 3, 256)
gathers = check.check_choices("gathers", gathers, GATHERS)
safe_gathers = check.check_choices("safe_gathers", safe_gathers, GATHERS)

# %%
import pandas as pd
import plotly.io as pio

from workbench.present.claims import caption
from workbench.present.report import save_figure, save_results

# JupyterLab draws the plotly bundle; the HTML copy lets an executed notebook rendered by nbconvert
# show its figures offline too (plotly.js is inlined once per notebook).
pio.renderers.default = "plotly_mimetype+notebook"

pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 30)


def publish(fig, name, frame, claims, lead):
    """Write the figure, its data and its caption (a lead, then the claims computed from the data),
    then show it here with the caption under it."""
    save_results(frame, output_dir, name)
    text = caption(claims, lead)
    save_figure(fig, output_dir, name, text, claims)
    fig.show()
    print(text)


# %% [markdown]
# ## Sweep: every batch composition and free-pool size around the exact fit

# %%
from workbench.analysis.sweep import allocator_exact_fit_sweep
from workbench.present.captions import with_fit

exact_fit = with_fit(allocator_exact_fit_sweep(page_sizes, max_batch, gathers, device=device))
exact_fit.groupby(["gather", "fit"]).outcome.value_counts().unstack(fill_value=0)

# %% [markdown]
# ## Figures

# %%
from workbench.present.captions import exact_fit_claims
from workbench.present.plots import exact_fit_map

publish(exact_fit_map(exact_fit), "03_allocator_exact_fit", exact_fit, exact_fit_claims(exact_fit, "03_allocator_exact_fit"),
        "Each gather on every batch and pool around the exact fit (black bar: the pages the batch opens).")

# %% [markdown]
# ## Explorer: one `alloc_decode` call, live
#
# The line under the controls is the executed call (its batch, free list and result); the figure is
# the sweep of the chosen page size with the explored state circled.

# %%
from workbench.present.explorer import explorer

explorer("allocator", device=device, page_size=4, gather="npu-legacy")

# %% [markdown]
# ## Assertions: this notebook is a regression test

# %%
# The seed test vector reproduces: IndexError before the fix, [44, 21, 30] after it.
from workbench.analysis.cases import parse_case
from workbench.analysis.probe import probe
from workbench.analysis.seeds import SEEDS

seed = SEEDS[2]
assert probe(parse_case(seed.before), device).error == seed.expected_error
after = probe(parse_case(seed.after), device)
assert after.outcome.value == "ok" and after.out_cache_loc == [44, 21, 30] and after.free_pages_after == []
# The explorer's seed batch is the seed's own vector.
from workbench.present.explorer import ExplorerState, explore

shown = explore(ExplorerState(component="allocator", page_size=4, gather="npu-clamped"), device, with_figure=False)
assert shown.case.seq_lens == (5, 10, 7) and shown.result.out_cache_loc == [44, 21, 30], shown.summary

# %%
# Where each gather fails, as [the semantics](../docs/semantics.md) state it, per row of the sweep:
#   short pool (free < needed): the NPU versions and cuda-checked return None first; cuda-masked reads past the list.
#   exact fit: the legacy gather reads free_pages[n_new] for a row after the last page-opening row.
short = exact_fit.free_pages < exact_fit.pages_needed
exact = exact_fit.free_pages == exact_fit.pages_needed
row_after_last_opener = exact_fit.pattern.str.contains("o") & exact_fit.pattern.str.endswith(".")
expected = pd.Series("ok", index=exact_fit.index)
npu = exact_fit.gather.str.startswith("npu")
expected[(npu | (exact_fit.gather == "cuda-checked")) & short] = "out-of-memory"  # checked before any read
expected[(exact_fit.gather == "cuda-masked") & short] = "silent-overread"
expected[(exact_fit.gather == "npu-legacy") & exact & row_after_last_opener] = "index-error"
wrong = exact_fit[exact_fit.outcome != expected]
assert wrong.empty, wrong

# %%
# The fix is safe: the claimed-safe gathers never fail, whatever the pool holds.
safe = exact_fit[exact_fit.gather.isin(safe_gathers)]
assert not safe.empty and not safe.outcome.isin(["index-error", "silent-overread"]).any(), safe.outcome.value_counts()
# What the sweep says beyond the fix: the CUDA kernel is safe at the exact fit but reads past
# the free list on a real shortage before its capacity check returns None.
cuda = exact_fit[exact_fit.gather == "cuda-masked"]
if not cuda.empty:
    assert (cuda[cuda.free_pages == cuda.pages_needed].outcome == "ok").all()
    assert (cuda[cuda.free_pages < cuda.pages_needed].outcome == "silent-overread").all()
# Every successful allocation gives each row a distinct slot.
done = exact_fit[exact_fit.outcome == "ok"]
assert all(len(set(slots)) == len(slots) for slots in done.out_cache_loc)
