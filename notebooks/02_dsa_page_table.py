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
# # 02 · DSA page table (DeepSeek sparse attention)
#
# What this answers: **which `page_table` widths fail for which committed lengths, in the
# dynamic and the static replay, and what does the safe width (`W`) cost?** `context` is the
# original backend, `context-plus-draft` the first fix, `req-to-token` the second seed's fix.
# A static replay never raises: its failures are silent over-reads.
#
# **Words used here** (every word in the [glossary](../docs/glossary.md); the rules in
# [the semantics](../docs/semantics.md)): `ctx` context length; `ps` page
# size (tokens); `D` draft tokens verified per step; `W` the request-to-token table's width
# (`ctx + 4 + D` in width generation g1; g2/g3 are later engine versions that widen it); `s` a
# request's committed length; *[overshoot](../docs/glossary.md#overshoot)* — how far `s` may pass `ctx - 1` for one step;
# `cdiv(a, b)` — `a / b` rounded up; *modes* — `decode`, `target-verify` (the `D` drafts are read
# after `s`), `draft-decode` (a drafter step), `draft-extend`; *[seed](../docs/glossary.md#seed)* — the real crash reproduced here.
# *dynamic replay* — the copy's width follows the step (a mismatch raises); *static replay* —
# every step copies the whole width and the kernel bounds its reads (a too narrow table is read past).
#
# **Try in the explorer**: at the GLM-5.2 seed (ctx 90000, ps 64, D 6, `context-plus-draft`) the
# step at s = 90001 fails; switch `rule` to `req-to-token`; set *overshoot* to 0 and back.

# %% tags=["parameters"]
device: str = "cpu"  # auto, cpu, cuda or npu (the report passes the resolved device)
output_dir: str = "../reports"  # figures: <output_dir>/figures/ (plotly JSON), data: <output_dir>/results/ (relative: to this folder)
# cache_dir may be None; papermill reads "str | None" as no type, so its type is a type comment.
cache_dir = "../data/cache"  # type: Optional[str] sweep cache (parquet; relative: to this notebook's folder); None computes everything afresh
progress: bool = False  # a tqdm bar for the sweep

context_lens: list[int] = [4096, 7919]  # the 90000 seed is probed on its own below
page_sizes: list[int] = [64]  # DSA on CUDA forces 64
draft_tokens: list[int] = [0, 4, 6]  # draft tokens D of the speculative modes
modes: list[str] = ["decode", "target-verify", "draft-extend"]  # the modes swept
width_gens: list[str] = ["g1"]  # the width generations swept
replays: list[str] = ["dynamic", "static"]  # the graph replays swept
overshoot: int = 2  # committed tokens past ctx - 1 that the scheduler lets through for one step
safe_rules: list[str] = ["req-to-token"]  # the rules asserted never to fail within the request table
measure_memory: bool = False  # also allocate each configuration's buffers full size on the device, record the bytes

# %%
from workbench.present import notebook_params as check

device = check.check_device(device)
output_dir = check.check_output_dir(output_dir)
cache_dir = check.check_cache_dir(cache_dir)

from workbench.analysis.sweep import MODE_VALUES
from workbench.backends import RULE_NAMES
from workbench.model.geometry import WIDTH_GENERATIONS

context_lens = check.check_ints("context_lens", context_lens, 2, 1 << 20)
page_sizes = check.check_ints("page_sizes", page_sizes, 1, 4096)
draft_tokens = check.check_ints("draft_tokens", draft_tokens, 0, 1024)
modes = check.check_choices("modes", modes, MODE_VALUES)
width_gens = check.check_choices("width_gens", width_gens, WIDTH_GENERATIONS)
overshoot = check.check_int("overshoot", overshoot, 0, 1024)
safe_rules = check.check_choices("safe_rules", safe_rules, RULE_NAMES)
measure_memory = check.check_bool("measure_memory", measure_memory)

replays = check.check_choices("replays", replays, ("dynamic", "static"))

# %%
import pandas as pd
import plotly.io as pio
from IPython.display import display

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
# ## Sweep: executed boundaries

# %%
from workbench.analysis.sweep import SweepGrid, run_sweep

grid = SweepGrid(components=("dsa-page-table",), context_lens=context_lens, page_sizes=page_sizes,
                 draft_tokens=draft_tokens, modes=modes, width_gens=width_gens, replays=replays,
                 overshoot=overshoot, measure_memory=measure_memory)
sweep = run_sweep(grid, device=device, cache_dir=cache_dir, progress=progress)
sweep.groupby(["replay", "rule", "mode"]).outcome.value_counts().unstack(fill_value=0)

# %% [markdown]
# ## Figures

# %%
from workbench.analysis.cases import parse_case
from workbench.analysis.memory import load_presets, memory_table
from workbench.analysis.seeds import SEEDS
from workbench.analysis.sweep import request_trace
from workbench.present.captions import failure_map_claims, fix_cost_claims, trace_claims
from workbench.present.plots import failure_map, fix_cost_plot, request_trace_plot
from workbench.present.verdicts import fix_cost

publish(failure_map(sweep), "02_dsa_failure_map", sweep,
        failure_map_claims(sweep, "02_dsa_failure_map"),
        "Where each page_table rule first fails within reach, dynamic replay (loud) and static (silent).")
memory = memory_table(load_presets(), components=("dsa-page-table",))
display(memory[["preset", "rule", "buffer_width", "min_safe_width", "bytes", "share_of_kv_budget"]])
cost = fix_cost(memory, baseline="context")
publish(fix_cost_plot(cost), "02_dsa_fix_cost", cost, fix_cost_claims(cost, "02_dsa_fix_cost"),
        "What each fix costs over the context rule, per model preset (bytes, and share of the KV budget).")
seed_case = parse_case(SEEDS[1].before)
seed_trace = request_trace(seed_case, steps=40, device=device)
publish(request_trace_plot(seed_trace), "02_dsa_seed_trace", seed_trace,
        trace_claims(seed_trace, "02_dsa_seed_trace"),
        "The GLM-5.2 seed under the first fix (a table of ctx + D tokens): tokens each verify reads.")

# %%
from workbench.devices.hardware_check import load_hardware_results, memory_overlay

# Bytes measured on real devices (committed files under data/hardware/), next to the prediction.
hardware = load_hardware_results()
if hardware is None:
    print("no hardware results in data/hardware/ yet: predicted bytes only "
          "(run `workbench --device auto hardware-check` on a GPU or NPU to add them)")
else:
    display(memory_overlay(memory, hardware)[["preset", "rule", "device_name", "bytes", "measured_bytes",
                                              "measured_over_predicted"]])

# With measure_memory = True the sweep also allocated every configuration's buffers full size on this
# device: the bytes its allocator took (the storages' bytes on a CPU) next to the prediction.
if measure_memory:
    columns = ["rule", "context_len", "page_size", "draft_tokens", "mode", "buffer_bytes", "measured_bytes"]
    display(sweep[columns].drop_duplicates().head(20))
    print(f"measured with {sweep.measure_method.iloc[0]}: measured - predicted bytes from "
          f"{int((sweep.measured_bytes - sweep.buffer_bytes).min())} to {int((sweep.measured_bytes - sweep.buffer_bytes).max())}")
    # an allocator may round a block up, never hand out less than the tensors need
    assert (sweep.measured_bytes >= sweep.buffer_bytes).all()

# %% [markdown]
# ## Explorer: one step, live
#
# The line under the controls is the executed probe at the longest committed length
# (`ctx - 1 + overshoot`); the figure traces that request's last steps (crosses: failing steps).
# Type a context length and press Enter, or move *presets* (4k ... 1M).

# %%
from workbench.present.explorer import explorer

explorer("dsa-page-table", device=device, context_len=90000, page_size=64, draft_tokens=6,
         rule="context-plus-draft")

# %% [markdown]
# ## Assertions: this notebook is a regression test

# %%
# The GLM-5.2 seed reproduces: torch's message with the first fix, success with B = W, boundary 90001.
from workbench.analysis.boundary import find_boundary
from workbench.analysis.probe import probe
from workbench.analysis.seeds import boundary_case

seed = SEEDS[1]
assert probe(parse_case(seed.before), device).error == seed.expected_error
assert probe(parse_case(seed.after), device).outcome.value == "ok"
seed_search = parse_case(boundary_case(seed.before), need_seq_lens=False)
assert find_boundary(seed_search, device=device).first_failing_seq_len == 90001

# %%
# Every boundary was confirmed by execution (the failing step and the passing one below it).
assert sweep.confirmed.all(), sweep[~sweep.confirmed]
# A dynamic replay fails loudly, a static one silently: never the other way round.
assert set(sweep[sweep.replay == "dynamic"].outcome) <= {"ok", "shape-error"}
assert set(sweep[sweep.replay == "static"].outcome) <= {"ok", "silent-overread"}

# %%
# The legacy rules fail where, and only where, the closed form of [the semantics](../docs/semantics.md) says (executed vs closed form):
# NPU: first s = B * ps - lookahead + 1; DSA: first s = B - lookahead + 1; inside the searched bound.
import numpy as np

from workbench.analysis.closed_form import NO_FAILURE, first_failing_seq_len

columns = {name: sweep[name].to_numpy() for name in
           ("component", "rule", "mode", "width_gen", "context_len", "page_size", "draft_tokens",
            "step_id", "max_seq_len")}
columns.update(spec_steps=np.full(len(sweep), grid.spec_steps), spec_topk=np.full(len(sweep), grid.spec_topk),
               draft_has_kv=np.full(len(sweep), grid.draft_has_kv))
predicted = first_failing_seq_len(columns)["first_failing_seq_len"]
executed = sweep.first_failing_seq_len.fillna(NO_FAILURE).to_numpy(dtype=np.int64)
wrong = sweep[executed != predicted]
assert wrong.empty, wrong[["rule", "context_len", "page_size", "draft_tokens", "mode", "first_failing_seq_len"]]

# %%
# The rules claimed safe (req-to-token) never fail anywhere in the request table's bounds: the
# search here runs to the largest committed length the table holds, past ctx - 1 + overshoot.
from workbench.analysis.boundary import find_boundary
from workbench.analysis.sweep import table_cases

claimed = [case for case in table_cases(grid) if case.rule in safe_rules]
failing = [(case, b.first_failing_seq_len, b.failing.error) for case in claimed
           if (b := find_boundary(case, device=device)).first_failing_seq_len is not None]
assert claimed and not failing, failing[:3]
assert sweep[sweep.rule.isin(safe_rules)].first_failing_seq_len.isna().all()

# %%
# What the sweep says about the fixes themselves.
key = ["rule", "context_len", "page_size", "draft_tokens", "mode", "width_gen"]
paired = sweep[sweep.replay == "dynamic"].merge(sweep[sweep.replay == "static"], on=key, suffixes=("", "_static"))
# 1. The static replay fails at exactly the same committed length as the dynamic one, only silently.
assert (paired.first_failing_seq_len.fillna(-1) == paired.first_failing_seq_len_static.fillna(-1)).all()
# 2. The first fix (ctx + D) holds up to ctx and breaks at exactly ctx + 1 in target-verify when the
#    scheduler lets a request overshoot by 2 (the GLM-5.2 seed), and nowhere else.
fix = sweep[(sweep.rule == "context-plus-draft")]
verify_fix = fix[fix["mode"] == "target-verify"]
expected = (verify_fix.context_len + 1).where(verify_fix.max_seq_len >= verify_fix.context_len + 1)
assert (verify_fix.first_failing_seq_len.fillna(-1) == expected.fillna(-1)).all()
assert fix[fix["mode"] != "target-verify"].first_failing_seq_len.isna().all()
# 3. The original rule (ctx) fails in target-verify D - 1 tokens before the context is reached.
original = sweep[(sweep.rule == "context") & (sweep["mode"] == "target-verify")]
assert (original.first_failing_seq_len == original.context_len - original.draft_tokens + 1).all()
# 4. The safe width costs a tiny share of the KV cache it guards.
assert (memory[memory.rule == "req-to-token"].share_of_kv_budget < 1e-2).all()
