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
#     cell_timeout_s: 1800
#     test_parameters:
#       engines:
#       - sglang==0.5.10
#       - sglang==0.5.23
#       presets:
#       - QwQ-32B
# ---

# %% [markdown]
# # 05 · The bug-class atlas
#
# What this answers: **for every graph-captured table the workbench models, every engine version
# it knows and every graph mode, can a real run fail, where, and how?** Each cell of the figure is
# a backend's worst setting over the model presets (their own context length and shorter common
# ones; their own speculative recipe, EAGLE (5, 4, 8), NGRAM with 16 drafts, and none) at the page
# sizes the backend runs with.
#
# Words (every word in the [glossary](../docs/glossary.md); reach and margin in
# [the semantics](../docs/semantics.md)): the **first failing length** is the smallest committed
# length `s` whose step fails, found by the closed form and confirmed by executing that step and the
# one below on real tensors. The **[reach](../docs/glossary.md#reach)** (reachable length) is the
# largest committed length a run replays: the scheduler's reach for the release, recipe and overlap
# default (`workbench.analysis.reach`: one verify in flight can add the recipe's largest accept
# length), capped at what the request table holds; `overshoot` N >= 0 replaces it by the what-if
# `ctx - 1 + N`. **[Margin](../docs/glossary.md#margin)** = first failing - reachable - 1: negative
# means a real run gets there. The cells' words: **fails loudly**
# (the step raises), **fails silently** (nothing raises: a kernel reads or writes past the buffer),
# **fails past reach** (only past what a run reaches), **safe** (no length the table holds fails),
# **refused at start-up** (the release's own start-up checks, asked by `workbench engines
# learn-startup`, refuse every setting of the cell: no run starts). Every row is then run again
# (`run_confirmed`): a reachable failure by a run that hits it, a margin or a safe row by a run that
# gets to the reachable length with every step passing (SGLang: a seeded serving run; vLLM: a request
# walk, or the deployment's step; `run_model` says which).

# %% tags=["parameters"]
device: str = "cpu"  # auto, cpu, cuda or npu (the report passes the resolved device)
output_dir: str = "../reports"  # the figure: <output_dir>/figures/, the rows: <output_dir>/results/ (relative: to this folder)
engines: list[str] = []  # engine releases (learned: data/engines/NAME/*.json); empty: every release
presets: list[str] = []  # model presets of data/presets.json; empty: every preset
overshoot: int = -1  # -1: the scheduler's reach per release and recipe; N from 0 up: a what-if, ctx - 1 + N
confirm_runs: bool = True  # run every row again (a failure must be hit, a margin run to the cap)

# %%
from workbench.analysis.memory import load_presets
from workbench.engines.store.versions import load_versions
from workbench.present import notebook_params as check

device = check.check_device(device)
output_dir = check.check_output_dir(output_dir)
engines = check.check_choices("engines", engines, load_versions()) if engines else ()
all_presets = {p.name: p for p in load_presets()}
chosen = [all_presets[n] for n in check.check_choices("presets", presets, all_presets)] if presets else list(all_presets.values())
overshoot = check.check_int("overshoot", overshoot, -1, 1024)
confirm_runs = check.check_bool("confirm_runs", confirm_runs)

# %%
import pandas as pd
import plotly.io as pio

from workbench.atlas.releases import collapse_releases
from workbench.atlas.results import atlas_results
from workbench.present.atlas_figure import atlas_figure
from workbench.present.captions import atlas_claims
from workbench.present.claims import caption
from workbench.present.report import report_note, save_figure, save_results

pio.renderers.default = "plotly_mimetype+notebook"
pd.set_option("display.width", 200)

# Computed once per content of its inputs (the code, data/, the releases learned here); a later run with
# nothing changed reuses it, and says so here and in the report's log. With no engines chosen, vLLM's
# buffers are rows too, at the public crash reports' deployments.
note = report_note(output_dir, "05_atlas")
frame, summary = atlas_results(list(engines) or None, presets=None if not presets else chosen,
                               overshoot=None if overshoot < 0 else overshoot, device=device, confirm_runs=confirm_runs,
                               note=note)
save_results(frame, output_dir, "05_atlas_settings")  # every setting's row
save_results(summary, output_dir, "05_atlas_summary")  # the report's findings are these rows
refused = frame.status == "refused"
print(f"{(~refused).sum()} settings, every boundary confirmed by execution; {refused.sum()} refused at start-up by "
      f"their release (not run); {len(summary)} backend x version x mode rows")

# %% [markdown]
# The figure: red cells fail loudly in a real run, orange ones fail silently in a real run, blue
# cells fail only past what a run reaches (a margin, not a crash), green cells never fail at any
# committed length the request table holds, slate cells are settings the release refuses to start
# (hover for the engine's message), grey ones have no row: the backend has no such graph, or the
# release's data do not model it. Each cell names the outcome, the first failing length and the
# margin. Consecutive releases whose cells are all the same share a row.

# %%
fig = atlas_figure(collapse_releases(summary))  # consecutive releases with the same rows: one row
atlas_said = atlas_claims(summary, "05_atlas_summary")
save_figure(fig, output_dir, "05_atlas", caption(atlas_said, "One row per backend and releases, one column per graph mode."),
            atlas_said)
print(caption(atlas_said))
fig

# %%
columns = ["backend", "engine", "mode", "rule", "first_failing_seq_len", "reachable_len", "margin", "status", "outcome",
           "preset", "recipe", "context_len", "page_size", "extra_bytes", "extra_share_of_kv"]
columns += ["startup_refusal"] if "startup_refusal" in summary else []
if confirm_runs:
    columns += ["run_model", "run_confirmed"]
summary[columns]

# %% [markdown]
# ## What the atlas finds
#
# The table is the report's first screen for the newest release (`workbench.atlas.findings`:
# every backend and mode a real run breaks, loud or silent, at which length, under which
# conditions, and the fix with its cost); every number in it is the summary's. Why they fail (the
# mechanisms; [the semantics](../docs/semantics.md), with the engines' file and line in
# [the engine facts](../docs/engine-facts.md)):
#
# - **FA3**'s `page_table` is `cdiv(ctx, ps)` pages in every release, blind to the drafts: the fused
#   kernel stops writing at the width while the attention kernel reads `s + D`. A verify at
#   `ctx - D + 1` reads past the row; with page size 1 that is inside the scheduler's cap. Nothing
#   raises: a **silent over-read**.
# - **Every SGLang table sized by the context alone fails the same way**: XPU writes the extra page
#   into the next request's row (a **silent overwrite**), TRT-LLM MHA/MLA and AITER read past it.
# - **The Ascend block tables** after the first seed's fix fail only past the context, at the
#   latent gap of the fix's formula, beyond what a run reaches; **the DSA page table** sized by `W`
#   does not fail at any length the table holds.
# - **The flat `kv_indices` buffers fail per batch, not per request** (FlashInfer, FlashInfer MLA,
#   Triton, AITER: `draft-decode` is the multi-step EAGLE drafter's graph buffer,
#   `draft-decode-eager` the one it allocates per call). What must fit is the sum over the batch, so
#   a row's first failing length is that of its worst batch, every request at one length (`batch`:
#   the graph's `max_bs`, or one request for a buffer sized per call), and it needs a KV pool of
#   `pool tokens` to form. SGLang 0.5.10 sized FlashInfer's draft buffer without the `topk` factor,
#   so a full bucket writes past it from `ctx / topk - steps + 1` (a **silent overwrite**); 0.5.14
#   added the factor and an `assert`, which stops the server (**host-assert**) instead. The Triton
#   and AITER drafters never check. FlashInfer MLA's verify (0.5.18 on) raises torch's size error
#   for a full bucket at `ctx - D + 1`.
# - **The request table itself is a buffer** (`sglang-req-to-token`, mode `decode-reservation`): a
#   speculative decode batch reserves `2 * max(steps * topk, D)` slots past its committed length
#   when it is formed, while a row is `ctx + 4 + D` wide at page size 1, and the writer masks only by
#   the end offset: past the row the reservation lands in the next pool row (a **silent overwrite**),
#   checked against each release's own `prepare_for_decode` (docs/reach.md, the request table as a buffer).
# - **vLLM's crash reports are rows too** (46074: the DSA indexer's unaligned buffer; 5563: V0's
#   graph block tables with lookahead slots), each run again as a request walking to its cap or,
#   for the indexer, whose scanned field is a launch setting, as the deployment's step; vLLM's
#   scheduler itself is not modelled.

# %%
from workbench.atlas.findings import findings, release_under_review
from workbench.present.findings_page import FINDINGS_COLUMNS, finding_cells

under_review = release_under_review(summary)
print(f"findings of {under_review} (the newest release):")
pd.DataFrame([finding_cells(f) for f in findings(summary, [under_review])], columns=list(FINDINGS_COLUMNS))

# %%
def worst(backend: str, engine: str = "sglang==0.5.23") -> pd.DataFrame:
    return summary[(summary.backend == backend) & (summary.engine == engine)]


fa3 = worst("sglang-fa3-page-table")
assert set(fa3.status) == {"reachable"} and set(fa3.outcome) == {"silent-overread"}, fa3
verify = fa3[fa3["mode"] == "target-verify"].iloc[0]
assert verify.first_failing_seq_len == verify.context_len - verify.draft_tokens + 1
if confirm_runs:  # every row a run can replay is run again (a refused one, or g0's, has none: run_model says why)
    ran = summary[~summary.run_model.str.startswith("none")]
    assert ran.run_confirmed.astype(bool).all(), ran[~ran.run_confirmed.astype(bool)]
npu = worst("npu-block-table")
# 0.5.23 sizes the Ascend table with the drafts: no mode fails where a run gets (decode reads no
# drafts: safe; a verify or draft step fails over 100 tokens past the reach), and it refuses NGRAM
# on an NPU at start-up: where every chosen setting is one it refuses (QwQ-32B's alone), the row says so
assert set(npu.status) <= {"unreachable", "safe", "refused"} and (npu[npu.status == "unreachable"].margin > 100).all(), npu
refused_npu = npu[npu.status == "refused"]
assert refused_npu.empty or refused_npu.startup_refusal.str.contains("_handle_").all(), npu  # the engine's own check
assert set(worst("dsa-page-table").status) == {"safe"}
if not engines:
    assert set(worst("vllm-indexer-block-table", "vllm==0.23.0").status) == {"reachable"}
    assert set(worst("vllm-indexer-block-table", "vllm==0.33.0").status) == {"safe"}
    assert set(worst("vllm-v0-graph-block-tables", "vllm==0.6.0").first_failing_seq_len) == {8186}
    # V1's block table: 0.8.2 neither schedules nor allocates within max_model_len (4096 - 3 + 1 = 4094
    # with 3 drafts at block size 16); 0.23.0 caps both
    assert set(worst("vllm-v1-block-table", "vllm==0.8.2").first_failing_seq_len) == {4094}
    assert set(worst("vllm-v1-block-table", "vllm==0.23.0").status) == {"safe"}
if not engines or "sglang==0.5.10" in engines:  # the flat draft buffer before the topk factor
    old = worst("sglang-flashinfer-kv-indices", "sglang==0.5.10").set_index("mode").loc["draft-decode"]
    assert (old.outcome, old.status) == ("silent-overwrite", "reachable"), old
    assert old.first_failing_seq_len == old.context_len // old.spec_topk - old.spec_steps + 1, old
fixed = worst("sglang-flashinfer-kv-indices").set_index("mode").loc["draft-decode"]
assert (fixed.outcome, fixed.first_failing_seq_len) == ("host-assert", fixed.context_len - fixed.spec_steps + 1), fixed
triton = worst("sglang-triton-kv-indices")
assert set(triton.outcome) == {"silent-overwrite"} and set(triton.status) == {"reachable"}, triton
assert triton.set_index("mode").loc["draft-decode-eager"].batch == 1  # one request is enough
table = worst("sglang-req-to-token")
assert set(table.status) == {"reachable"} and set(table.outcome) == {"silent-overwrite"}, table
reserve = 2 * (table.spec_steps * table.spec_topk).combine(table.draft_tokens, max)  # 2 * max(steps * topk, D)
assert (table.batch == 1).all() and (table.first_failing_seq_len == table.request_table_width - reserve + 1).all(), table



# %% [markdown]
# ## The history of the bug class
#
# Per backend and mode, release by release from 0.5.0rc2 to 0.5.23, what a reference deployment
# meets (`workbench history`): the seeds' three (QwQ-32B NGRAM on Ascend, GLM-5.2 EAGLE on DSA, the
# NPU allocator's exact-fit decode) and one per other backend. Every release's rules, replays and
# gathers are the ones its own code gave when it was learned (`workbench engines learn`); nothing
# is typed in per release, so a fix shows where a release's learned data change: a bar changes
# colour, or its first failing length moves. Red: a failure a run of that release reaches (avoid
# it); amber: one past what a run reaches; green: safe; slate: the release refuses the deployment
# at start-up (0.5.23 and NGRAM on an NPU: hover for the engine's message); grey: no such buffer;
# purple: the release's code gave widths no rule of the model agrees with.

# %%
from workbench.atlas.results import history_results
from workbench.present.history_figure import history_figure

past = history_results("sglang", overshoot=None if overshoot < 0 else overshoot, note=note)
fig = history_figure(past)
save_figure(fig, output_dir, "05_history",
            caption="Release by release, what a reference deployment meets (first failing committed length in the "
                    "bar): red, a failure a run reaches; amber, one past it; green, safe. The seed fixes show where a "
                    "bar turns from red.")
fig


# %%
def fixed_in(backend: str, mode: str) -> tuple[str, str]:
    """The last release whose reference deployment reaches a failure and the first one after it
    that does not: where the learned data changed (found by the measurement, not typed in)."""
    rows = past[(past.backend == backend) & (past["mode"] == mode) & past.status.isin(["reachable", "unreachable", "safe"])]
    failing = rows[rows.status == "reachable"]
    assert len(failing), f"{backend} {mode}: no release reaches a failure"
    last = failing.index[-1]
    after = rows.loc[last:].iloc[1:]
    assert len(after) and not (after.status == "reachable").any(), after
    return str(past.loc[last, "release"]), str(after.iloc[0].release)


for backend, mode, fix in (("sglang-ascend-block-tables", "target-verify", "NPU block table sized with the drafts"),
                           ("sglang-dsa-page-table", "target-verify", "DSA page table as wide as the request table"),
                           ("allocator", "decode", "NPU allocator's clamped gather")):
    before, after = fixed_in(backend, mode)
    print(f"{fix}: reachable failure up to {before}, fixed in {after}")
