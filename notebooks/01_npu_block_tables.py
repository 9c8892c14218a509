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
#       measure_memory: true
#       page_sizes:
#       - 16
#       width_gens:
#       - g1
# ---

# %% [markdown]
# # 01 · NPU (Ascend) block tables
#
# What this answers: **for which context lengths, draft counts and modes does each
# `block_tables` sizing rule fail, how does it fail, and what does the safe width cost?**
# `context` is the engine before the first seed's fix, `context-plus-draft` the fix itself,
# `req-to-token` the later tightening (`max(.., cdiv(W, ps))`).
#
# **Words used here** (every word in the [glossary](../docs/glossary.md); the rules in
# [the semantics](../docs/semantics.md)): `ctx` context length; `ps` page
# size (tokens); `D` draft tokens verified per step; `W` the request-to-token table's width
# (`ctx + 4 + D` in width generation g1; g2/g3 are later engine versions that widen it); `s` a
# request's committed length; *[overshoot](../docs/glossary.md#overshoot)* — how far `s` may pass `ctx - 1` for one step;
# `cdiv(a, b)` — `a / b` rounded up; *modes* — `decode`, `target-verify` (the `D` drafts are read
# after `s`), `draft-decode` (a drafter step), `draft-extend`; *[seed](../docs/glossary.md#seed)* — the real crash reproduced here.
#
# **Try in the explorer** (end of the notebook): at the QwQ seed (ctx 32768, ps 128, D 16) switch
# `rule` to `req-to-token`: the crosses go and the line turns green (`buffer=257`); set `mode` to
# `decode` and `rule` back to `context`: a page-multiple context fails there too, by the overshoot.

# %% tags=["parameters"]
device: str = "cpu"  # auto, cpu, cuda or npu (the report passes the resolved device)
output_dir: str = "../reports"  # figures: <output_dir>/figures/ (plotly JSON), data: <output_dir>/results/ (relative: to this folder)
# cache_dir may be None; papermill reads "str | None" as no type, so its type is a type comment.
cache_dir = "../data/cache"  # type: Optional[str] sweep cache (parquet; relative: to this notebook's folder); None computes everything afresh
progress: bool = False  # a tqdm bar for the sweep

context_lens: list[int] = [4080, 7919, 32768]  # 32768: the QwQ seed; 4080 + 16 is a multiple of 128
page_sizes: list[int] = [128]  # Ascend forces 128
draft_tokens: list[int] = [0, 4, 16]  # draft tokens D of the speculative modes
modes: list[str] = ["decode", "target-verify", "draft-decode", "draft-extend"]  # the modes swept
width_gens: list[str] = ["g1", "g3"]  # the width generations swept
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

grid = SweepGrid(components=("npu-block-table",), context_lens=context_lens, page_sizes=page_sizes,
                 draft_tokens=draft_tokens, modes=modes, width_gens=width_gens, replays=("dynamic",),
                 overshoot=overshoot, measure_memory=measure_memory)
sweep = run_sweep(grid, device=device, cache_dir=cache_dir, progress=progress)
sweep.groupby(["rule", "mode"]).first_failing_seq_len.apply(lambda s: f"{s.notna().sum()} of {len(s)} fail")

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

publish(failure_map(sweep), "01_npu_failure_map", sweep,
        failure_map_claims(sweep, "01_npu_failure_map"),
        "Where each block_tables rule first fails within reach (cell: first failing committed length).")
memory = memory_table(load_presets(), components=("npu-block-table",))
display(memory[["preset", "rule", "buffer_width", "min_safe_width", "bytes", "share_of_kv_budget"]])
cost = fix_cost(memory, baseline="context")
publish(fix_cost_plot(cost), "01_npu_fix_cost", cost, fix_cost_claims(cost, "01_npu_fix_cost"),
        "What each fix costs over the context rule, per model preset (bytes, and share of the KV budget).")
seed_case = parse_case(SEEDS[0].before)
seed_trace = request_trace(seed_case, steps=40, device=device)
publish(request_trace_plot(seed_trace), "01_npu_seed_trace", seed_trace,
        trace_claims(seed_trace, "01_npu_seed_trace"),
        "The QwQ seed under the context rule: tokens each verify reads against the pages the table holds.")

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

explorer("npu-block-table", device=device)

# %% [markdown]
# ## Assertions: this notebook is a regression test

# %%
# The QwQ seed reproduces: torch's message before the fix, success after, boundary 32753.
from workbench.analysis.boundary import find_boundary
from workbench.analysis.probe import probe
from workbench.analysis.seeds import boundary_case

seed = SEEDS[0]
assert probe(parse_case(seed.before), device).error == seed.expected_error
assert probe(parse_case(seed.after), device).outcome.value == "ok"
seed_search = parse_case(boundary_case(seed.before), need_seq_lens=False)
assert find_boundary(seed_search, device=device).first_failing_seq_len == 32753

# %%
# Every boundary was confirmed by execution (the failing step and the passing one below it).
assert sweep.confirmed.all(), sweep[~sweep.confirmed]
# Every failure is torch's own copy_ error: the NPU replay never fails silently.
assert set(sweep.outcome) <= {"ok", "shape-error"}

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
# 1. The original rule (cdiv(ctx, ps) pages) fails in target-verify wherever the spare tokens on
#    the context's last page are fewer than the D drafts a verify step reads past s (+ overshoot).
verify = sweep[(sweep["mode"] == "target-verify")]
original = verify[verify.rule == "context"]
reach = original.max_seq_len - (original.context_len - 1)  # the overshoot actually searched
spare = (-original.context_len) % original.page_size
assert (original.first_failing_seq_len.notna() == (spare <= original.draft_tokens + reach - 2)).all()
assert original.first_failing_seq_len.notna().any()
# 2. The first fix (context-plus-draft) fails only past the context (overshoot), and in verify
#    exactly where ctx + D leaves fewer than overshoot - 1 spare tokens on its last page.
fix = verify[verify.rule == "context-plus-draft"]
spare = (-(fix.context_len + fix.draft_tokens)) % fix.page_size
reach = fix.max_seq_len - (fix.context_len - 1)  # the overshoot actually searched (the table may clamp it)
assert (fix.first_failing_seq_len.notna() == (spare <= reach - 2)).all()
assert (fix.dropna(subset=["first_failing_seq_len"]).failing_offset >= 1).all()
# 3. The safe width costs almost nothing next to the KV cache it guards.
safe_cost = memory[memory.rule == "req-to-token"].share_of_kv_budget
assert (safe_cost < 1e-3).all(), safe_cost
