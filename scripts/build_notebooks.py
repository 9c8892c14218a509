"""Write the notebooks from the Python source below, without outputs (nbformat).

The notebooks are thin (parameters, checks, sweep, figures, explorer, assertions); keeping their
cells here makes them reviewable as plain Python and regenerable in one command:

    .venv/bin/python scripts/build_notebooks.py          # writes notebooks/0[0-3]_*.ipynb

Each notebook declares small ``test_parameters`` in its metadata (``metadata.workbench``): the
test suite and ``build_report(small=True)`` run it with those.
"""

from __future__ import annotations

import sys
from pathlib import Path
from textwrap import dedent

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent
Cell = tuple[str, str]  # ("md" | "code" | "parameters", source)


def md(text: str) -> Cell:
    return ("md", dedent(text).strip())


def code(text: str) -> Cell:
    return ("code", dedent(text).strip())


def parameters(text: str) -> Cell:
    return ("parameters", dedent(text).strip())


COMMON_PARAMETERS = '''
device = "cpu"  # auto, cpu, cuda or npu (the report passes the resolved device)
output_dir = "../reports"  # figures are written to <output_dir>/figures/ as plotly JSON
cache_dir = "../data/cache"  # sweep cache (parquet); None computes everything afresh
progress = False  # a tqdm bar for the sweep
'''

COMMON_CHECKS = '''
from workbench.present import notebook_params as check

device = check.check_device(device)
output_dir = check.check_output_dir(output_dir)
'''

SETUP = code('''
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
''')


def seed_check(index: int, statement: str, boundary: int) -> Cell:
    """The assertion cell of a table notebook: its seed (``SEEDS[index]``) before and after the fix,
    and the boundary the spec gives for it."""
    return code(f'''
# {statement}, boundary {boundary}.
from workbench.analysis.boundary import find_boundary
from workbench.analysis.probe import probe
from workbench.analysis.seeds import boundary_case

seed = SEEDS[{index}]
assert probe(parse_case(seed.before), device).error == seed.expected_error
assert probe(parse_case(seed.after), device).outcome.value == "ok"
seed_search = parse_case(boundary_case(seed.before), need_seq_lens=False)
assert find_boundary(seed_search, device=device).first_failing_seq_len == {boundary}
''')

# Notebooks 01 and 02 show device-measured bytes next to the prediction where such files exist.
HARDWARE_OVERLAY = code('''
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
''')

# ---- 00: overview -------------------------------------------------------------------------------

OVERVIEW: list[Cell] = [
    md('''
    # 00 · Design review: graph-captured KV metadata

    What this answers: **do the three seed failures reproduce on real torch tensors, which sizing
    rules are safe where, and does every fix hold?** One figure per component, a table of the rules'
    safety by mode, and assertions that make this notebook a regression test. Details per component
    are in notebooks 01-03.
    '''),
    parameters(COMMON_PARAMETERS + '''
context_lens = [4080, 7919]  # small contexts keep the overview fast; 4080 + 16 is a page multiple
page_sizes = [64, 128]
draft_tokens = [0, 4, 16]
overshoot = 2  # committed tokens past ctx - 1 that the scheduler lets through for one step
allocator_page_sizes = [4, 128]
allocator_max_batch = 6
'''),
    code(COMMON_CHECKS + '''
context_lens = check.check_ints("context_lens", context_lens, 2, 1 << 20)
page_sizes = check.check_ints("page_sizes", page_sizes, 1, 4096)
draft_tokens = check.check_ints("draft_tokens", draft_tokens, 0, 1024)
overshoot = check.check_int("overshoot", overshoot, 0, 1024)
allocator_page_sizes = check.check_ints("allocator_page_sizes", allocator_page_sizes, 2, 4096)
allocator_max_batch = check.check_int("allocator_max_batch", allocator_max_batch, 3, 64)
'''),
    SETUP,
    md("## The seed cases, reproduced"),
    code('''
from workbench.present.report import seed_rows
from workbench.analysis.seeds import SEEDS

seeds = pd.DataFrame(seed_rows(device))
seeds
'''),
    md("## Sweep: both tables, every rule and mode"),
    code('''
from workbench.analysis.sweep import SweepGrid, allocator_exact_fit_sweep, run_sweep

grid = SweepGrid(context_lens=context_lens, page_sizes=page_sizes, draft_tokens=draft_tokens,
                 modes=("decode", "target-verify", "draft-decode", "draft-extend"), overshoot=overshoot)
sweep = run_sweep(grid, device=device, cache_dir=cache_dir, progress=progress)
exact_fit = allocator_exact_fit_sweep(allocator_page_sizes, allocator_max_batch, device=device)
len(sweep), len(exact_fit)
'''),
    md("## One figure per component"),
    code('''
from workbench.present.plots import exact_fit_map, failure_map

publish(failure_map(sweep[sweep.component == "npu-block-table"]), "00_npu_block_table_failures")
publish(failure_map(sweep[sweep.component == "dsa-page-table"]), "00_dsa_page_table_failures")
publish(exact_fit_map(exact_fit), "00_allocator_exact_fit")
'''),
    md("## Which rules are safe where (`fails` = some committed length up to `ctx - 1 + overshoot` fails)"),
    code('''
safety = (
    sweep.assign(fails=sweep.first_failing_seq_len.notna())
    .pivot_table(index=["component", "rule"], columns="mode", values="fails", aggfunc="any")
    .replace({True: "fails", False: "safe"})
    .fillna("n/a")  # a mode the component has no graph for, or that needs drafts
)
safety
'''),
    md("## Explorer"),
    code('''
from workbench.present.explorer import explorer

explorer("npu-block-table", device=device)
'''),
    md("## Assertions: this notebook is a regression test"),
    code('''
# The seeds reproduce: torch's exact message before each fix, success after it.
for seed in SEEDS:
    before = seeds[(seeds.seed == seed.name) & (seeds.fix == "before")].iloc[0]
    after = seeds[(seeds.seed == seed.name) & (seeds.fix == "after")].iloc[0]
    assert before.error == seed.expected_error, (seed.name, before.error)
    assert after.outcome == "ok", (seed.name, after.outcome)
boundaries = seeds.set_index(["seed", "fix"]).first_failing_seq_len
assert boundaries["npu-block-table", "before"] == 32753 and boundaries["dsa-page-table", "before"] == 90001
assert pd.isna(boundaries["npu-block-table", "after"]) and pd.isna(boundaries["dsa-page-table", "after"])
'''),
    code('''
# Every boundary was confirmed by executing the failing step and the passing one below it.
assert sweep.confirmed.all(), sweep[~sweep.confirmed]
# req-to-token never fails; the original context rule fails in target-verify for both tables.
assert not (safety.xs("req-to-token", level="rule") == "fails").any().any()
assert (safety.xs("context", level="rule")["target-verify"] == "fails").all()
# The allocator: the legacy gather breaks on an exactly full pool, the clamped fix never fails.
assert (exact_fit[exact_fit.gather == "npu-legacy"].outcome == "index-error").any()
assert not exact_fit[exact_fit.gather == "npu-clamped"].outcome.isin(["index-error", "silent-overread"]).any()
'''),
]


# ---- 01: NPU block tables -----------------------------------------------------------------------

TABLE_CHECKS = '''
from workbench.model.geometry import WIDTH_GENERATIONS
from workbench.backends import RULE_NAMES
from workbench.analysis.sweep import MODE_VALUES

context_lens = check.check_ints("context_lens", context_lens, 2, 1 << 20)
page_sizes = check.check_ints("page_sizes", page_sizes, 1, 4096)
draft_tokens = check.check_ints("draft_tokens", draft_tokens, 0, 1024)
modes = check.check_choices("modes", modes, MODE_VALUES)
width_gens = check.check_choices("width_gens", width_gens, WIDTH_GENERATIONS)
overshoot = check.check_int("overshoot", overshoot, 0, 1024)
safe_rules = check.check_choices("safe_rules", safe_rules, RULE_NAMES)
measure_memory = check.check_bool("measure_memory", measure_memory)
'''

CLOSED_FORM_CHECK = '''
# The legacy rules fail where, and only where, the spec's formula says (executed vs closed form):
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
'''

SAFE_RULES_CHECK = '''
# The rules claimed safe (req-to-token) never fail anywhere in the request table's bounds: the
# search here runs to the largest committed length the table holds, past ctx - 1 + overshoot.
from workbench.analysis.boundary import find_boundary
from workbench.analysis.sweep import table_cases

claimed = [case for case in table_cases(grid) if case.rule in safe_rules]
failing = [(case, b.first_failing_seq_len, b.failing.error) for case in claimed
           if (b := find_boundary(case, device=device)).first_failing_seq_len is not None]
assert claimed and not failing, failing[:3]
assert sweep[sweep.rule.isin(safe_rules)].first_failing_seq_len.isna().all()
'''

NPU: list[Cell] = [
    md('''
    # 01 · NPU (Ascend) block tables

    What this answers: **for which context lengths, draft counts and modes does each
    `block_tables` sizing rule fail, how does it fail, and what does the safe width cost?**
    `context` is the engine before the first seed's fix, `context-plus-draft` the fix itself,
    `req-to-token` the later tightening (`max(.., cdiv(W, ps))`).
    '''),
    parameters(COMMON_PARAMETERS + '''
context_lens = [4080, 7919, 32768]  # 32768: the QwQ seed; 4080 + 16 is a multiple of 128
page_sizes = [128]  # Ascend forces 128
draft_tokens = [0, 4, 16]
modes = ["decode", "target-verify", "draft-decode", "draft-extend"]
width_gens = ["g1", "g3"]
overshoot = 2  # committed tokens past ctx - 1 that the scheduler lets through for one step
safe_rules = ["req-to-token"]  # the rules asserted never to fail within the request table
measure_memory = False  # also allocate each configuration's buffers full size on the device, record the bytes
'''),
    code(COMMON_CHECKS + TABLE_CHECKS),
    SETUP,
    md("## Sweep: executed boundaries"),
    code('''
from workbench.analysis.sweep import SweepGrid, run_sweep

grid = SweepGrid(components=("npu-block-table",), context_lens=context_lens, page_sizes=page_sizes,
                 draft_tokens=draft_tokens, modes=modes, width_gens=width_gens, replays=("dynamic",),
                 overshoot=overshoot, measure_memory=measure_memory)
sweep = run_sweep(grid, device=device, cache_dir=cache_dir, progress=progress)
sweep.groupby(["rule", "mode"]).first_failing_seq_len.apply(lambda s: f"{s.notna().sum()} of {len(s)} fail")
'''),
    md("## Figures"),
    code('''
from workbench.analysis.memory import load_presets, memory_table
from workbench.analysis.cases import parse_case
from workbench.present.plots import failure_map, memory_overhead, request_trace_plot
from workbench.analysis.seeds import SEEDS
from workbench.analysis.sweep import request_trace

publish(failure_map(sweep), "01_npu_failure_map")
publish(memory_overhead(sweep), "01_npu_memory_overhead")
memory = memory_table(load_presets(), components=("npu-block-table",))
display(memory[["preset", "rule", "buffer_width", "min_safe_width", "bytes", "share_of_kv_budget"]])
seed_case = parse_case(SEEDS[0].before)
publish(request_trace_plot(request_trace(seed_case, steps=40, device=device)), "01_npu_seed_trace")
'''),
    HARDWARE_OVERLAY,
    md("## Explorer"),
    code('''
from workbench.present.explorer import explorer

explorer("npu-block-table", device=device)
'''),
    md("## Assertions: this notebook is a regression test"),
    seed_check(0, "The QwQ seed reproduces: torch's message before the fix, success after", 32753),
    code('''
# Every boundary was confirmed by execution (the failing step and the passing one below it).
assert sweep.confirmed.all(), sweep[~sweep.confirmed]
# Every failure is torch's own copy_ error: the NPU replay never fails silently.
assert set(sweep.outcome) <= {"ok", "shape-error"}
'''),
    code(CLOSED_FORM_CHECK),
    code(SAFE_RULES_CHECK),
    code('''
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
'''),
]


# ---- 02: DSA page table -------------------------------------------------------------------------

DSA: list[Cell] = [
    md("""
    # 02 · DSA page table (DeepSeek sparse attention)

    What this answers: **which `page_table` widths fail for which committed lengths, in the
    dynamic and the static replay, and what does the safe width (`W`) cost?** `context` is the
    original backend, `context-plus-draft` the first fix, `req-to-token` the second seed's fix.
    A static replay never raises: its failures are silent over-reads.
    """),
    parameters(COMMON_PARAMETERS + """
context_lens = [4096, 7919]  # the 90000 seed is probed on its own below
page_sizes = [64]  # DSA on CUDA forces 64
draft_tokens = [0, 4, 6]
modes = ["decode", "target-verify", "draft-extend"]
width_gens = ["g1"]
replays = ["dynamic", "static"]
overshoot = 2  # committed tokens past ctx - 1 that the scheduler lets through for one step
safe_rules = ["req-to-token"]  # the rules asserted never to fail within the request table
measure_memory = False  # also allocate each configuration's buffers full size on the device, record the bytes
"""),
    code(COMMON_CHECKS + TABLE_CHECKS + """
replays = check.check_choices("replays", replays, ("dynamic", "static"))
"""),
    SETUP,
    md("## Sweep: executed boundaries"),
    code("""
from workbench.analysis.sweep import SweepGrid, run_sweep

grid = SweepGrid(components=("dsa-page-table",), context_lens=context_lens, page_sizes=page_sizes,
                 draft_tokens=draft_tokens, modes=modes, width_gens=width_gens, replays=replays,
                 overshoot=overshoot, measure_memory=measure_memory)
sweep = run_sweep(grid, device=device, cache_dir=cache_dir, progress=progress)
sweep.groupby(["replay", "rule", "mode"]).outcome.value_counts().unstack(fill_value=0)
"""),
    md("## Figures"),
    code("""
from workbench.analysis.cases import parse_case
from workbench.analysis.memory import load_presets, memory_table
from workbench.present.plots import failure_map, kv_budget_share, request_trace_plot
from workbench.analysis.seeds import SEEDS
from workbench.analysis.sweep import request_trace

publish(failure_map(sweep), "02_dsa_failure_map")
memory = memory_table(load_presets(), components=("dsa-page-table",))
publish(kv_budget_share(memory), "02_dsa_kv_budget_share")
seed_case = parse_case(SEEDS[1].before)
publish(request_trace_plot(request_trace(seed_case, steps=40, device=device)), "02_dsa_seed_trace")
"""),
    HARDWARE_OVERLAY,
    md("## Explorer"),
    code("""
from workbench.present.explorer import explorer

explorer("dsa-page-table", device=device, context_len=90000, page_size=64, draft_tokens=6,
         rule="context-plus-draft")
"""),
    md("## Assertions: this notebook is a regression test"),
    seed_check(1, "The GLM-5.2 seed reproduces: torch's message with the first fix, success with B = W", 90001),
    code("""
# Every boundary was confirmed by execution (the failing step and the passing one below it).
assert sweep.confirmed.all(), sweep[~sweep.confirmed]
# A dynamic replay fails loudly, a static one silently: never the other way round.
assert set(sweep[sweep.replay == "dynamic"].outcome) <= {"ok", "shape-error"}
assert set(sweep[sweep.replay == "static"].outcome) <= {"ok", "silent-overread"}
"""),
    code(CLOSED_FORM_CHECK),
    code(SAFE_RULES_CHECK),
    code("""
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
"""),
]


# ---- 03: allocator ------------------------------------------------------------------------------

ALLOCATOR: list[Cell] = [
    md("""
    # 03 · The paged allocator's exact fit (`alloc_decode`)

    What this answers: **on which batches and free-pool sizes does each gather of `alloc_decode`
    fail, and how?** `npu-legacy` gathers for every row, `npu-clamped` is the third seed's fix,
    `cuda-masked` is the CUDA kernel (only page-opening rows read; capacity checked afterwards).
    """),
    parameters(COMMON_PARAMETERS + """
page_sizes = [4, 64, 128]
max_batch = 8  # the largest batch of the named batch compositions
gathers = ["npu-legacy", "npu-clamped", "cuda-masked"]
safe_gathers = ["npu-clamped"]  # asserted never to fail, whatever the pool holds
"""),
    code(COMMON_CHECKS + """
GATHERS = ("npu-legacy", "npu-clamped", "cuda-masked")
page_sizes = check.check_ints("page_sizes", page_sizes, 2, 4096)
max_batch = check.check_int("max_batch", max_batch, 3, 256)
gathers = check.check_choices("gathers", gathers, GATHERS)
safe_gathers = check.check_choices("safe_gathers", safe_gathers, GATHERS)
"""),
    SETUP,
    md("## Sweep: every batch composition and free-pool size around the exact fit"),
    code("""
from workbench.analysis.sweep import allocator_exact_fit_sweep

exact_fit = allocator_exact_fit_sweep(page_sizes, max_batch, gathers, device=device)
exact_fit.assign(fit=(exact_fit.free_pages - exact_fit.pages_needed).clip(-1, 1).map(
    {-1: "short", 0: "exact", 1: "spare"})).groupby(["gather", "fit"]).outcome.value_counts().unstack(fill_value=0)
"""),
    md("## Figures"),
    code("""
from workbench.present.plots import exact_fit_map

publish(exact_fit_map(exact_fit), "03_allocator_exact_fit")
"""),
    md("## Explorer"),
    code("""
from workbench.present.explorer import explorer

explorer("allocator", device=device, page_size=4, gather="npu-legacy")
"""),
    md("## Assertions: this notebook is a regression test"),
    code("""
# The seed test vector reproduces: IndexError before the fix, [44, 21, 30] after it.
from workbench.analysis.cases import parse_case
from workbench.analysis.probe import probe
from workbench.analysis.seeds import SEEDS

seed = SEEDS[2]
assert probe(parse_case(seed.before), device).error == seed.expected_error
after = probe(parse_case(seed.after), device)
assert after.outcome.value == "ok" and after.out_cache_loc == [44, 21, 30] and after.free_pages_after == []
"""),
    code("""
# Where each gather fails, from the spec (section 4), per row of the sweep:
#   short pool (free < needed): the NPU versions return None first; the CUDA kernel reads past the list.
#   exact fit: the legacy gather reads free_pages[n_new] for a row after the last page-opening row.
short = exact_fit.free_pages < exact_fit.pages_needed
exact = exact_fit.free_pages == exact_fit.pages_needed
row_after_last_opener = exact_fit.pattern.str.contains("o") & exact_fit.pattern.str.endswith(".")
expected = pd.Series("ok", index=exact_fit.index)
npu = exact_fit.gather.str.startswith("npu")
expected[npu & short] = "out-of-memory"
expected[~npu & short] = "silent-overread"
expected[(exact_fit.gather == "npu-legacy") & exact & row_after_last_opener] = "index-error"
wrong = exact_fit[exact_fit.outcome != expected]
assert wrong.empty, wrong
"""),
    code("""
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
"""),
]


NOTEBOOKS: dict[str, tuple[list[Cell], dict[str, object]]] = {
    "00_overview": (OVERVIEW, {
        "context_lens": [60, 100], "page_sizes": [16], "draft_tokens": [0, 4],
        "allocator_page_sizes": [4], "allocator_max_batch": 3,
    }),
    "01_npu_block_tables": (NPU, {
        "context_lens": [60, 100], "page_sizes": [16], "draft_tokens": [0, 4], "width_gens": ["g1"],
        "measure_memory": True,
    }),
    "02_dsa_page_table": (DSA, {
        "context_lens": [60, 100], "page_sizes": [16], "draft_tokens": [0, 4],
    }),
    "03_allocator_exact_fit": (ALLOCATOR, {"page_sizes": [4], "max_batch": 4}),
}


def build(cells: list[Cell], test_parameters: dict[str, object]) -> nbformat.NotebookNode:
    notebook = new_notebook()
    for kind, source in cells:
        if kind == "md":
            notebook.cells.append(new_markdown_cell(source))
        else:
            cell = new_code_cell(source)
            if kind == "parameters":
                cell.metadata["tags"] = ["parameters"]
            notebook.cells.append(cell)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    notebook.metadata["language_info"] = {"name": "python"}
    notebook.metadata["workbench"] = {"test_parameters": test_parameters}
    return notebook


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else ROOT / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    for name, (cells, test_parameters) in NOTEBOOKS.items():
        notebook = build(cells, test_parameters)
        for index, cell in enumerate(notebook.cells):  # stable ids keep diffs small
            cell["id"] = f"{name[:2]}-{index:02d}"
        nbformat.validate(notebook)
        nbformat.write(notebook, str(folder / f"{name}.ipynb"))
        print(f"wrote {folder / name}.ipynb ({len(notebook.cells)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
