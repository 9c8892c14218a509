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
#       dsa_context_lens:
#       - 60
#       - 100
#       dsa_draft_tokens:
#       - 0
#       - 4
#       dsa_page_sizes:
#       - 16
#       npu_context_lens:
#       - 60
#       - 100
#       npu_draft_tokens:
#       - 0
#       - 4
#       npu_page_sizes:
#       - 16
#       npu_width_gens:
#       - g1
# ---

# %% [markdown]
# # 00 · Design review: graph-captured KV metadata
#
# **What this answers:** do the three seed failures reproduce on real torch tensors, and where does
# each sizing rule of each backend fail, within what a run reaches, in which mode? It sweeps the same
# configurations as the detailed notebooks (01: NPU block tables, 02: DSA page table, 03: the
# allocator), so its table cannot contradict them (`tests/test_overview.py` checks that); their
# figures are theirs (this notebook shows its own but the report takes 01-03's). Which rule each
# engine *release* ships, and what a real run of it meets, is the atlas (notebook 05) and the
# report's findings.
#
# **Words used here** (every word in the [glossary](../docs/glossary.md); the rules and modes in
# [the semantics](../docs/semantics.md)): *[seed](../docs/glossary.md#seed)* — one of the three real
# crashes this project reproduces; `ctx` — the context length; `ps` — the KV page size in tokens;
# `D` — draft tokens verified per step; `W` — the request-to-token table's width (`ctx + 4 + D` in
# width generation g1; g2 and g3 are later engines' widths); `s` — a request's committed length;
# *[overshoot](../docs/glossary.md#overshoot)* — how far `s` may pass `ctx - 1` for one step;
# *[reach](../docs/glossary.md#reach)* — the longest committed length a run gets to, `ctx - 1 +
# overshoot`; *modes* — `decode` (one new token), `target-verify` (the `D` drafts are read after
# `s`), `draft-decode` (a drafter step), `draft-extend` (the drafter catches up on accepted tokens);
# *fails loudly at s = N* — the first committed length whose step raises; *fails silently* —
# nothing raises, a kernel would read past the table; *no reachable failure* — nothing fails up to
# the reach (lengths past it are not searched here).
#
# **Try in the explorer** at the end: switch `rule` to `req-to-token` and watch the crosses go;
# type another context length (32768 is the QwQ seed) and press Enter.

# %% tags=["parameters"]
device: str = "cpu"  # auto, cpu, cuda or npu (the report passes the resolved device)
output_dir: str = "../reports"  # the verdict table: <output_dir>/tables/, the sweeps: <output_dir>/results/ (relative: to this folder)
# cache_dir may be None; papermill reads "str | None" as no type, so its type is a type comment.
cache_dir = "../data/cache"  # type: Optional[str] sweep cache (parquet; relative: to this notebook's folder); None computes everything afresh
progress: bool = False  # a tqdm bar for the sweep
overshoot: int = 2  # committed tokens past ctx - 1 that the scheduler lets through for one step

# The grids of notebooks 01 and 02 (their defaults; a superset is fine): page multiples (4096,
# 32768), a context plus D that is one (4080 + 16 = 4096) and an odd context (7919).
npu_context_lens: list[int] = [4080, 7919, 32768]  # notebook 01's context lengths
npu_page_sizes: list[int] = [128]  # notebook 01's page sizes (Ascend forces 128)
npu_draft_tokens: list[int] = [0, 4, 16]  # notebook 01's draft tokens D
npu_modes: list[str] = ["decode", "target-verify", "draft-decode", "draft-extend"]  # notebook 01's modes
npu_width_gens: list[str] = ["g1", "g3"]  # notebook 01's width generations
dsa_context_lens: list[int] = [4096, 7919]  # notebook 02's context lengths
dsa_page_sizes: list[int] = [64]  # notebook 02's page sizes (DSA on CUDA forces 64)
dsa_draft_tokens: list[int] = [0, 4, 6]  # notebook 02's draft tokens D
dsa_modes: list[str] = ["decode", "target-verify", "draft-extend"]  # notebook 02's modes
dsa_replays: list[str] = ["dynamic", "static"]  # notebook 02's graph replays
# The grid of notebook 03.
allocator_page_sizes: list[int] = [4, 64, 128]  # notebook 03's page sizes
allocator_max_batch: int = 8  # notebook 03's largest batch of the named batch compositions

# %%
from workbench.analysis.sweep import MODE_VALUES
from workbench.model.geometry import WIDTH_GENERATIONS
from workbench.present import notebook_params as check

device = check.check_device(device)
output_dir = check.check_output_dir(output_dir)
cache_dir = check.check_cache_dir(cache_dir)
overshoot = check.check_int("overshoot", overshoot, 0, 1024)
npu_context_lens = check.check_ints("npu_context_lens", npu_context_lens, 2, 1 << 20)
npu_page_sizes = check.check_ints("npu_page_sizes", npu_page_sizes, 1, 4096)
npu_draft_tokens = check.check_ints("npu_draft_tokens", npu_draft_tokens, 0, 1024)
npu_modes = check.check_choices("npu_modes", npu_modes, MODE_VALUES)
npu_width_gens = check.check_choices("npu_width_gens", npu_width_gens, WIDTH_GENERATIONS)
dsa_context_lens = check.check_ints("dsa_context_lens", dsa_context_lens, 2, 1 << 20)
dsa_page_sizes = check.check_ints("dsa_page_sizes", dsa_page_sizes, 1, 4096)
dsa_draft_tokens = check.check_ints("dsa_draft_tokens", dsa_draft_tokens, 0, 1024)
dsa_modes = check.check_choices("dsa_modes", dsa_modes, MODE_VALUES)
dsa_replays = check.check_choices("dsa_replays", dsa_replays, ("dynamic", "static"))
allocator_page_sizes = check.check_ints("allocator_page_sizes", allocator_page_sizes, 2, 4096)
allocator_max_batch = check.check_int("allocator_max_batch", allocator_max_batch, 3, 64)

# %%
import pandas as pd
import plotly.io as pio

from workbench.present.report import save_results, save_table

# JupyterLab draws the plotly bundle; the HTML copy lets an executed notebook rendered by nbconvert
# show its figures offline too (plotly.js is inlined once per notebook).
pio.renderers.default = "plotly_mimetype+notebook"

pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 30)
pd.set_option("display.max_colwidth", 90)


# %% [markdown]
# ## The seed cases, reproduced
#
# Each seed before and after its fix: the outcome, torch's own message, and the boundary (the first
# failing committed length found by executed bisection; "none" when no length fails).

# %%
from workbench.analysis.seeds import SEEDS
from workbench.present.report import seed_rows, seed_table_frame

seed_records = seed_rows(device)
seeds = pd.DataFrame(seed_records)
seed_table_frame(seed_records)

# %% [markdown]
# ## Sweeps: the detailed notebooks' grids, every rule and mode

# %%
from workbench.analysis.sweep import SweepGrid, allocator_exact_fit_sweep, run_sweep

npu_grid = SweepGrid(components=("npu-block-table",), context_lens=npu_context_lens, page_sizes=npu_page_sizes,
                     draft_tokens=npu_draft_tokens, modes=npu_modes, width_gens=npu_width_gens, replays=("dynamic",),
                     overshoot=overshoot)
dsa_grid = SweepGrid(components=("dsa-page-table",), context_lens=dsa_context_lens, page_sizes=dsa_page_sizes,
                     draft_tokens=dsa_draft_tokens, modes=dsa_modes, replays=dsa_replays, overshoot=overshoot)
npu_sweep = run_sweep(npu_grid, device=device, cache_dir=cache_dir, progress=progress)
dsa_sweep = run_sweep(dsa_grid, device=device, cache_dir=cache_dir, progress=progress)
sweep = pd.concat([npu_sweep, dsa_sweep], ignore_index=True)
exact_fit = allocator_exact_fit_sweep(allocator_page_sizes, allocator_max_batch, device=device)
for name, frame in (("00_npu_sweep", npu_sweep), ("00_dsa_sweep", dsa_sweep), ("00_exact_fit", exact_fit)):
    save_results(frame, output_dir, name)  # what the report's claims test checks the verdict table against
print(f"{len(npu_sweep)} NPU, {len(dsa_sweep)} DSA table configurations; {len(exact_fit)} allocator pools")

# %% [markdown]
# ## Verdict: where each rule fails within reach
#
# `no reachable failure (n of n)`: no committed length up to `ctx - 1 + overshoot` fails in any
# configuration swept (lengths past it are not searched here). `fails loudly at s = N (ctx, ps, D,
# width generation)`: a step raises; N is the first failing length of the configuration that fails
# earliest past its context, then how many configurations fail. `fails silently`: nothing raises but
# a kernel would read past the table (DSA's static replay; the CUDA allocator on a short pool).
# `safe`: an allocator gather that no pool of the sweep breaks. `n/a`: the backend has no such
# graph in the sweep.

# %%
from workbench.present.verdicts import allocator_verdicts, safety_categories, safety_table

safety = safety_table(sweep)
allocator = allocator_verdicts(exact_fit)
verdict = pd.concat([safety, allocator.rename(columns={"verdict": "decode"})]).fillna("n/a")
save_table(verdict, output_dir, "00_verdict")
verdict

# %% [markdown]
# ## One figure per component
#
# Each cell of a failure map is one configuration: light green has no reachable failure, red fails
# loudly with torch's error, orange fails silently, grey is not a valid configuration; the number is
# the first failing committed length `s`. The same figures, with their captions, are notebooks
# 01-03's in the report.

# %%
from workbench.present.plots import exact_fit_map, failure_map

failure_map(npu_sweep).show()
failure_map(dsa_sweep).show()
exact_fit_map(exact_fit).show()

# %% [markdown]
# ## Explorer: one step, live
#
# The controls set a configuration; the line under them is the executed probe at the longest
# committed length (`ctx - 1 + overshoot`), the figure the request's last steps (crosses: failing
# steps). **Try:** switch `rule` from `context` to `req-to-token`; type a context length into
# *context len* and press Enter, or move *presets* (4k ... 1M); raise *overshoot*.

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
words = safety_categories(safety)
# req-to-token has no reachable failure in any mode of both tables; the original context rule fails in target-verify.
assert (words.xs("req-to-token", level="rule").isin(["no reachable failure", "n/a"])).all().all(), words
assert (words.xs("context", level="rule")["target-verify"] != "safe").all(), words
# The static DSA replay never raises: its failures are silent.
static = [b for b in words.index.get_level_values("backend") if "static" in b]
assert all(v in ("no reachable failure", "fails silently", "n/a") for b in static for v in words.loc[b].to_numpy().ravel())
# The allocator: the legacy gather breaks on an exactly full pool, the clamped fix never fails.
assert (exact_fit[exact_fit.gather == "npu-legacy"].outcome == "index-error").any()
assert not exact_fit[exact_fit.gather == "npu-clamped"].outcome.isin(["index-error", "silent-overread"]).any()
