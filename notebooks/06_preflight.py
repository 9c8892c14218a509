# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
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
#     cell_timeout_s: 1200
#     engines:
#     - sglang==0.5.23
#     - vllm==0.23.0
#     - vllm==0.33.0
#     test_parameters:
#       engine: sglang==0.5.23+revert-ascend-width
#       hf_cache: ../tests/data/hf_cache/hub
# ---

# %% [markdown]
# # 06 · Preflight: paste a launch command, learn whether it can crash at its context limit
#
# What this answers: **given the command a deployment is started with, can a real run reach a
# failing step of one of its graph buffers or allocator paths, and by how much does it stay clear
# otherwise?** The same library call as `workbench check -- <command>`: the release's own parser
# reads the command and its own resolution fills in what the command leaves out (run in an engine
# process of that release, the model's config from your Hugging Face cache, else the hub's config
# files, or a config file you give), every buffer the
# deployment sets up is sized by the version's rule (`data/engines.json`) and its first failing
# committed length found and executed; `workbench.analysis.reach` says how far a run gets (SGLang:
# `ctx - 1` plus an overshoot of 2 by default; vLLM: `max_model_len - 1`, reads clamped).
#
# Exit statuses as on the command line: 0 safe, 1 a failure a run reaches, 2 bad input, 3 not
# decidable here (a buffer no backend on this branch models). Each row's word is the report's and the
# atlas's: **fails loudly** or **fails silently** (a run reaches it), **fails past reach**, **safe**.
# Every word is in the [glossary](../docs/glossary.md); the defaults' sources are in
# [the engine facts](../docs/engine-facts.md), the reach in [the semantics](../docs/semantics.md).

# %% tags=["parameters"]
device: str = "cpu"  # the report passes the resolved device; probes run there
output_dir: str = "../reports"  # nothing is written: the notebook has no figure (relative: to this notebook's folder)
cache_dir = "../data/cache"  # type: Optional[str] unused; every notebook takes it

command: str = (
    "python -m sglang.launch_server --model-path Qwen/Qwen3-32B --context-length 32768 --device npu "
    "--attention-backend ascend --page-size 128 --speculative-algorithm EAGLE3 "
    "--speculative-draft-model-path Qwen/Qwen3-8B --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4 --cuda-graph-max-bs-decode 16"
)  # the launch command in the text box
engine: str = ""  # the engine version the command is checked under; empty: the default release
hf_cache: str = ""  # where the box looks models up (HF_HUB_CACHE); empty: your own cache (the tests: the test data's)
model_config: str = ""  # the box's model config field (--model-config: a config.json or its folder); empty: none
offline: bool = False  # the box fetches nothing from the hub (--offline)
worked_hf_cache: str = "../tests/data/hf_cache/hub"  # the worked deployments' models: the workbench's test data

# %%
import os

from workbench.engines.commands.release_choice import offered
from workbench.present import notebook_params as check

device = check.check_device(device)
output_dir = check.check_output_dir(output_dir)
if not isinstance(command, str) or not command.strip():
    raise check.ParameterError(f"command: {command!r} is not a launch command (paste the engine's command line)")
versions = offered()
if engine:
    check.check_choices("engine", [engine], versions)
if hf_cache:
    os.environ["HF_HUB_CACHE"] = str(check.resolve_folder(hf_cache))  # relative: to this notebook's folder
offline = check.check_bool("offline", offline)
worked_models = check.resolve_folder(worked_hf_cache)

# %% [markdown]
# ## The text box
#
# Edit the command and press *check* (or click outside the box), or pick another engine version:
# the answer is redrawn. It leads with the verdict's word and the fix in one line, then the release
# hint (another release whose own parser accepts a command this one refuses), one line per row,
# and what `workbench check` prints, folded. The model's config comes from your Hugging Face cache
# (the `hf_cache` parameter, empty: yours), else the hub (its config files only; tick *offline* to
# fetch nothing), or from the *model config* field (a `config.json` or its folder). Above the box,
# the same check printed once, so an executed copy of the notebook shows it without a kernel.

# %%
from workbench.present.preflight_box import check_text, preflight_box

status, text = check_text(command, engine, model_config, offline)
print(f"exit status {status}\n{text}")
preflight_box(command, engine, model_config, offline)

# %% [markdown]
# ## Worked deployments, before and after the fixes
#
# The three seeds' deployments, on models whose real configs sit in the test data's cache
# (`worked_hf_cache`: these checks look models up there, whatever cache the box reads).
# (Qwen3-32B for the QwQ seed: SGLang 0.5.10 and 0.5.23 refuse NGRAM on an NPU at start-up, so the
# Ascend table is shown under EAGLE3, topk 1, 4 draft tokens; GLM-5-FP8, a DSA model like GLM-5.2).
# "Before" is a version with the fix undone: the `+revert-...` entries are *pseudo-versions*
# (0.5.23 with one line reverted, named in `data/engines/pseudo.json`) until the conformance tool
# confirms released versions; vLLM's 0.23.0 and 0.33.0 are releases (the 46074 report on GLM-5.2, fixed by PR
# 50302; here on GLM-5-FP8, the same DSA shape, whose config says 202752 tokens: vLLM's own
# VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lets the report's 350000 through, as it would on a server).

# %%
import pandas as pd

from workbench.preflight import check as run_check
from workbench.present.preflight_answer import config_file, hub_offline, models_from
from workbench.present.preflight_box import row_word

QWQ = ("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --context-length 32768 --device npu "
       "--attention-backend ascend --page-size 128 --speculative-algorithm EAGLE3 "
       "--speculative-draft-model-path Qwen/Qwen3-8B --speculative-num-steps 3 --speculative-eagle-topk 1 "
       "--speculative-num-draft-tokens 4 --cuda-graph-max-bs-decode 16")
GLM = ("python -m sglang.launch_server --model-path zai-org/GLM-5-FP8 --context-length 90000 --tp-size 8 "
       "--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 "
       "--speculative-num-draft-tokens 6 --cuda-graph-max-bs-decode 16")
VLLM = ("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve zai-org/GLM-5-FP8 --max-model-len 350000 --block-size 64 "
        "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'")
WORKED = {  # deployment: (command, version before the fix, version after it)
    "Qwen3-32B EAGLE3 on Ascend": (QWQ, "sglang==0.5.23+revert-ascend-width", "sglang==0.5.23"),
    "GLM-5-FP8 EAGLE with DSA": (GLM, "sglang==0.5.23+revert-dsa-width", "sglang==0.5.23"),
    "vLLM GLM-5 at 350000 (46074)": (VLLM, "vllm==0.23.0", "vllm==0.33.0"),
}

results = {}
rows = []
for name, (cmd, before, after) in WORKED.items():
    for when, version in (("before", before), ("after", after)):
        with models_from(worked_models):
            result = run_check(cmd, engine=version, device=device, progress=None)
        results[name, when] = result
        worst = min((r for r in result.rows if r.kind == "table"), default=None,
                    key=lambda r: r.margin if r.margin is not None else 1 << 30)
        rows.append({  # the verdict first, every cell short: the table fits the notebook's width unwrapped
            "deployment": name, "fix": when, "exit": result.status, "worst row": row_word(worst) if worst else None,
            "engine": version, "mode": worst.mode if worst else None,
            "first failing": worst.first_failing if worst else None, "reach": worst.reach if worst else None,
            "margin": worst.margin if worst else None,
        })
worked = pd.DataFrame(rows).astype({"first failing": "Int64", "reach": "Int64", "margin": "Int64"})
worked.style.hide(axis="index").set_table_styles([{"selector": "td, th", "props": "white-space: nowrap"}])

# %% [markdown]
# ## Assertions (this notebook is also a regression test)
#
# Expected numbers are worked by hand ([the semantics](../docs/semantics.md)): the Ascend verify
# reads `s + D` with D = 4 (topk 1: steps + 1),
# so the 256-page table before the first fix (`cdiv(32768, 128)`) first fails at
# 256 * 128 - 4 + 1 = 32765 (`256` against `257` pages), below the scheduler's cap ctx - 1, so a
# run reaches it; after it, (32768 + 127 + 4) // 128 = 257 pages first fail at 257 * 128 - 4 + 1 =
# 32893, past the reach (the scheduler's, `workbench.analysis.reach`; margin first - reach - 1).
# The GLM verify at 90001 before the second fix (ctx + D = 90006 against 90007); the 46074 report's
# expand error on vLLM 0.23.0 (the indexer's buffer of 5469 blocks against the table's 5470), gone
# on 0.33.0.

# %%
qwq_before, qwq_after = results["Qwen3-32B EAGLE3 on Ascend", "before"], results["Qwen3-32B EAGLE3 on Ascend", "after"]
verify = next(r for r in qwq_before.rows if r.mode == "target-verify")
assert qwq_before.status == 1 and verify.first_failing == 32765 and verify.outcome == "shape-error"
assert verify.message == "The size of tensor a (256) must match the size of tensor b (257) at non-singleton dimension 1"
after_verify = next(r for r in qwq_after.rows if r.mode == "target-verify")
assert qwq_after.status == 0 and after_verify.first_failing == 32893 and after_verify.margin == 32893 - after_verify.reach - 1

glm_before, glm_after = results["GLM-5-FP8 EAGLE with DSA", "before"], results["GLM-5-FP8 EAGLE with DSA", "after"]
glm_verify = next(r for r in glm_before.rows if r.mode == "target-verify")
assert glm_before.status == 1 and glm_verify.first_failing == 90001 and glm_verify.reachable
assert glm_verify.message == "The size of tensor a (90006) must match the size of tensor b (90007) at non-singleton dimension 1"
assert glm_after.status == 0

vllm_before, vllm_after = results["vLLM GLM-5 at 350000 (46074)", "before"], results["vLLM GLM-5 at 350000 (46074)", "after"]
g = vllm_before.deployment.geometry
assert (g.context_len, g.page_size, g.draft_tokens, vllm_before.deployment.extra["lookahead"]) == (350000, 64, 1, 1)
assert -(-g.context_len // g.page_size) == 5469  # the indexer's unaligned width in 0.23.0 (docs/engine-facts.md)
assert (vllm_before.status, vllm_after.status) == (1, 0), (vllm_before.verdict, vllm_after.verdict)
indexer = next(r for r in vllm_before.rows if r.buffer == "expanded_block_table_buffer")
assert indexer.message is not None and "(5469) must match the existing size (5470)" in indexer.message

# The text box's command, checked under the parameter's engine version, agrees with the library call.
with hub_offline(offline):
    assert status == run_check(command, engine=engine or None, model_config=config_file(model_config), device=device,
                               progress=None).status
print("all preflight assertions hold")
