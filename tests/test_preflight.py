"""workbench check: launch commands read by the release's own code, rows and verdicts of the seeds.

SGLang commands go through the release's parser and resolution (an engine process per release,
shared by the session); the models are the real configs of ``tests/data/hf_cache``. Expected values
come from worked cases (the closed forms, worked by hand in each test), the engines' source as
quoted, or the engine's own answer (``test_launch_engine.py`` compares the settings with the engine's
code run directly), never from the code under test.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from workbench import cli
from workbench.engines.store import wheels
from workbench.preflight import FAILS, SAFE, UNDECIDED, PreflightError, check, resolve, vllm_backends
from workbench.preflight.format import format_text, to_json

HF_CACHE = Path(__file__).parent / "data" / "hf_cache" / "hub"
# The first seed's Ascend table, under EAGLE3 (SGLang refuses NGRAM on an NPU): D = steps + 1 = 4
ASCEND = ("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --context-length 32768 --device npu "
          "--attention-backend ascend --page-size 128 --speculative-algorithm EAGLE3 --speculative-draft-model-path "
          "Qwen/Qwen3-8B --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
          "--cuda-graph-max-bs-decode 16")
GLM = ("python -m sglang.launch_server --model-path zai-org/GLM-5-FP8 --context-length 90000 --tp-size 8 "
       "--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 "
       "--speculative-num-draft-tokens 6 --cuda-graph-max-bs-decode 16")
# vLLM 46074's deployment (GLM-5.2 at 350000 tokens, block size 64, MTP with one draft token) on the
# GLM-5-FP8 config of the test data, whose 202752 positions vLLM extends only when told to (its own
# VLLM_ALLOW_LONG_MAX_MODEL_LEN, read by the release at start-up).
VLLM_46074 = ("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve zai-org/GLM-5-FP8 --max-model-len 350000 --block-size 64 "
              "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'")
vllm = pytest.mark.engine  # runs a released vLLM's own parser and create_engine_config (its wheel, fetched once)
PRE_ASCEND = "sglang==0.5.23+revert-ascend-width"
ASCEND_ERROR = "The size of tensor a (256) must match the size of tensor b (257) at non-singleton dimension 1"
GLM_ERROR = "The size of tensor a (90006) must match the size of tensor b (90007) at non-singleton dimension 1"
sglang = pytest.mark.engine  # runs a released SGLang's own code (its wheel, fetched once)


@pytest.fixture(autouse=True)
def _hf_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(HF_CACHE))


def _run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return cli.main(argv, out), out.getvalue()


def _check(command: str, engine: str | None = "sglang==0.5.23", **options: object) -> object:
    return check(command, engine=engine, progress=None, **options)  # type: ignore[arg-type]


# ---- the seeds ------------------------------------------------------------------------------------


@sglang
def test_ascend_before_the_fix_fails_in_verify_at_32765_and_exits_1() -> None:
    status, text = _run(["check", "--engine", PRE_ASCEND, "--", *ASCEND.split()])
    assert status == 1
    assert ASCEND_ERROR in text  # 256 pages against the 257 a verify at 32765 + 4 needs
    row = next(line for line in text.splitlines() if line.strip().startswith("block_tables"))
    # cdiv(32768, 128) = 256 pages: the first s with s + 4 > 256 * 128 is 32765, below the cap ctx - 1
    assert "target-verify" in row and "32765" in row and "shape-error" in row and "REACHED" in row
    assert "fix: rule context-plus-draft" in text and "257 pages" in text  # the first seed's fix


@sglang
def test_ascend_under_0_5_23_exits_0_with_the_margin() -> None:
    result = _check(ASCEND)
    assert result.status == SAFE
    verify = next(r for r in result.rows if r.kind == "table" and r.mode == "target-verify")
    # (32768 + 127 + 4) // 128 = 257 pages: the first s with s + 4 > 257 * 128 is 32893; the reach is the
    # scheduler's (tests/test_reach.py), the margin first - reach - 1
    assert (verify.width, verify.first_failing) == (257, 32893) and verify.reach is not None
    assert verify.margin == 32893 - verify.reach - 1 > 0 and f"margin {verify.margin}" in result.verdict


@sglang
def test_ngram_on_an_npu_is_the_engines_own_refusal() -> None:
    """0.5.23 refuses NGRAM on an NPU at start-up; the message is the one in its source."""
    source = (wheels.fetch("sglang==0.5.23").package_dir / "srt" / "arg_groups" / "speculative_hook.py").read_text()
    message = "Ngram speculative decoding only supports CUDA, CPU, or XPU devices."
    assert message in source
    command = "python -m sglang.launch_server --model-path Qwen/Qwen3-32B --device npu --speculative-algorithm NGRAM"
    with pytest.raises(PreflightError, match="sglang==0.5.23 refuses the command") as info:
        _check(command)
    assert message in str(info.value) and "speculative_hook.py" in str(info.value)
    assert _run(["check", "--engine", "sglang==0.5.23", "--cmd", command])[0] == 2


@sglang
def test_glm_eagle_dsa_before_and_after_the_second_fix() -> None:
    before = _check(GLM, engine="sglang==0.5.23+revert-dsa-width")
    assert before.status == FAILS
    verify = next(r for r in before.rows if r.mode == "target-verify")
    # B = ctx + D = 90006 tokens; a verify at s = 90001 (reached: ctx - 1 + 2) reads 90007
    assert (verify.width, verify.first_failing, verify.message, verify.reach) == (90006, 90001, GLM_ERROR, 90001)
    assert verify.fix is not None and verify.fix.rule == "req-to-token" and verify.fix.width == 90075  # W under G3
    after = _check(GLM)
    assert after.status == SAFE and all(not r.reachable for r in after.rows)


@sglang
def test_the_engine_forces_dsas_page_size_and_eagles_topk_one_rule() -> None:
    d = resolve(GLM.replace("--speculative-num-draft-tokens 6", "--speculative-num-draft-tokens 9 --page-size 128"),
                engine="sglang==0.5.23", progress=None)
    assert d is not None and d.launch_names == ("dsa",)
    page, draft = d.settings["page_size"], d.settings["speculative_num_draft_tokens"]
    assert (page.value, page.given, page.origin) == (64, 128, "engine") and "deepseek_v2.py" in page.source
    assert (draft.value, draft.given, draft.origin) == (6, 9, "engine")  # topk 1: steps + 1
    modes = [m.value for m, _ in d.modes]
    assert modes == ["target-verify", "draft-decode", "draft-extend"] and d.modes[1][1] == 4  # the drafter's last step


@sglang
def test_eagle_without_steps_takes_the_engines_auto_parameters() -> None:
    d = resolve("python -m sglang.launch_server --model-path zai-org/GLM-5 --speculative-algorithm NEXTN",
                engine="sglang==0.5.23", progress=None)
    assert d is not None
    g = d.geometry
    assert (g.spec_steps, g.spec_topk, g.draft_tokens) == (3, 1, 4)  # speculative_hook.py: (3, 1, 4) for GLM
    assert d.settings["speculative_num_steps"].origin == "engine"
    assert g.context_len == json.loads(next((HF_CACHE / "models--zai-org--GLM-5" / "snapshots").iterdir())
                                       .joinpath("config.json").read_text())["max_position_embeddings"]


@sglang
def test_npu_makes_the_engine_take_ascend_and_page_128() -> None:
    d = resolve("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --device npu --attention-backend fa3",
                engine="sglang==0.5.23", progress=None)
    assert d is not None and d.launch_names == ("ascend",) and d.settings["attention_backend"].given == "fa3"
    assert d.geometry.page_size == 128 and d.settings["gpu"].value.startswith("910b")


@sglang
def test_an_ascend_only_variable_puts_the_command_on_an_npu_and_the_engine_picks_its_backend() -> None:
    """No --device: SGLang picks the device it finds. A command that sets ASCEND_RT_VISIBLE_DEVICES
    runs where the Ascend runtime is, so the check stands in a 910B, and SGLang 0.5.23's own code
    then takes the ascend backend and page 128 (as with --device npu above); --gpu still wins."""
    command = "export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3\npython -m sglang.launch_server --model-path Qwen/Qwen3-32B --tp 4"
    d = resolve(command, engine="sglang==0.5.23", progress=None)
    assert d is not None and d.launch_names == ("ascend",) and d.geometry.page_size == 128
    assert d.settings["gpu"].value.startswith("910b") and "ASCEND_RT_VISIBLE_DEVICES" in d.settings["gpu"].source
    given = resolve(command, engine="sglang==0.5.23", gpu="h100", progress=None)
    assert given is not None and given.launch_names == ("fa3",)


# vllm-ascend issue 9290's deployment (Qwen3.5-122B, MTP with 13 draft tokens) at 32768 tokens, TP 16
# as on an Atlas 800 A3 node: the HCCL variable puts it on an NPU.
ASCEND_MTP = ("export HCCL_BUFFSIZE=200\nvllm serve Qwen/Qwen3.5-122B-A10B --max-model-len 32768 "
              "--tensor-parallel-size 16 --speculative-config '{\"num_speculative_tokens\": 13, \"method\": \"mtp\"}'")


@vllm
def test_vllm_on_an_npu_is_read_by_the_vllm_ascend_plugins_platform() -> None:
    """vLLM names no device: on Ascend its platform is the vllm-ascend plugin's. The check loads
    the plugin's release of the same version beside vLLM's, picks the newest vLLM it has one for,
    and its platform resolves the command: an Ascend attention backend's block size (128), no
    refusal of a world of 16 (a GPU node's check), and the drafter's table row. vllm-ascend 0.23.0
    resets a draft step's seq_len past max_model_len (PR 10117): ok."""
    result = _check(ASCEND_MTP, engine=None)
    d = result.deployment  # type: ignore[attr-defined]
    assert d is not None, result.verdict  # type: ignore[attr-defined]
    assert result.choice.release == "vllm==0.23.0" and "vllm-ascend" in result.choice.reason  # type: ignore[attr-defined]
    assert d.settings["platform_plugin"].value == "vllm-ascend==0.23.0"
    assert "NPUPlatform" in d.settings["platform_plugin"].source
    block = d.settings["cache_config.block_size"]
    assert block.value == 128 and block.source.startswith("Ascend")  # the plugin's backend chose it
    assert [(r.backend, r.outcome, r.width) for r in result.rows] == [("vllm-ascend-block-table", "ok", 256)]  # type: ignore[attr-defined]
    # Qwen3.5 is hybrid (the release's ModelConfig.is_hybrid): its GDN state on the plugin's platform is
    # not modelled, so the verdict names it instead of SAFE
    assert result.status == UNDECIDED, result.verdict  # type: ignore[attr-defined]
    assert "linear-attention state (GDN_ATTN) on vllm-ascend==0.23.0's platform" in result.verdict  # type: ignore[attr-defined]


@vllm
def test_vllm_ascend_before_the_reset_reads_past_the_row_at_the_worked_length() -> None:
    """vllm-ascend 0.18.0's drafter keeps advancing seq_len (issue 9098's state). Worked by hand:
    rows of cdiv(32768, 128) = 256 blocks; the last of the 12 further draft steps attends s + 12
    tokens, 257 blocks once s + 12 > 32768, so from seq_len 32757, committed length 32756."""
    result = _check(ASCEND_MTP, engine="vllm==0.18.0")
    assert result.status == FAILS  # type: ignore[attr-defined]
    (row,) = result.rows  # type: ignore[attr-defined]
    assert (row.backend, row.rule, row.width, row.first_failing, row.outcome) == (
        "vllm-ascend-block-table", "vllm-ascend==0.18.0", 256, 32756, "silent-overread")


@vllm
def test_a_plugin_drafter_that_runs_no_model_sets_up_no_draft_step_table() -> None:
    """Whether the drafter runs a model over its drafts is the release's own answer (the KV slots its
    scheduler reserves for them, from its speculative config's predicates), not a list of method
    names: vllm-ascend 0.18.0's MTP drafter steps its 13 draft tokens through the plugin's graph (the
    row that fails at 32756 above); the same launch with the ngram drafter, which matches text, sets
    up no draft-step table."""
    mtp = _check(ASCEND_MTP, engine="vllm==0.18.0")
    ngram = _check(ASCEND_MTP.replace('"method": "mtp"', '"method": "ngram", "prompt_lookup_max": 4'),
                   engine="vllm==0.18.0")
    lookahead = [r.deployment.settings["num_lookahead_tokens"] for r in (mtp, ngram)]  # type: ignore[attr-defined]
    assert [s.value for s in lookahead] == [13, 0]
    assert [r.backend for r in mtp.rows] == ["vllm-ascend-block-table"]  # type: ignore[attr-defined]
    assert ngram.rows == () and ngram.status == UNDECIDED  # type: ignore[attr-defined]


@vllm
def test_vllm_ascend_with_only_a_release_candidate_reads_the_command_through_it() -> None:
    """vllm-ascend has no final 0.21.0, only 0.21.0rc1: it is the plugin vLLM 0.21.0 runs with on an
    NPU, and its drafter (learned from its code: the reset of PR 10117) keeps the row safe."""
    result = _check(ASCEND_MTP, engine="vllm==0.21.0")
    assert result.deployment.settings["platform_plugin"].value == "vllm-ascend==0.21.0rc1"  # type: ignore[attr-defined]
    (row,) = result.rows  # type: ignore[attr-defined]
    assert (row.backend, row.rule, row.first_failing) == ("vllm-ascend-block-table", "vllm-ascend==0.21.0rc1", None)
    # the row is safe; Qwen3.5's GDN state on the plugin's platform is not modelled: undecided, not SAFE
    assert result.status == UNDECIDED and "linear-attention state (GDN_ATTN)" in result.verdict  # type: ignore[attr-defined]


@vllm
def test_a_plugin_release_published_only_as_source_is_read_from_its_sdist() -> None:
    """vllm-ascend 0.30.0rc2 has no wheel, only vllm_ascend-0.30.0rc2.tar.gz: its Python files and
    egg-info (the vllm.platform_plugins entry point) are unpacked from it, and vLLM 0.30.0 resolves the
    command through it; its drafter resets seq_len (llm_base_proposer.py:2078, the learned fact)."""
    for engine in ("vllm==0.30.0", "vllm-ascend==0.30.0rc2"):
        if wheels.cached(engine) is None:
            pytest.skip(f"{engine} is not in the workbench's engine cache (workbench engines fetch {engine})")
    assert wheels.cached("vllm-ascend==0.30.0rc2").wheel["file"] == "vllm_ascend-0.30.0rc2.tar.gz"  # type: ignore[union-attr]
    # (0.30.0 loads Qwen3.5's tokenizer, which the test cache does not hold: DeepSeek-V3's MTP instead)
    command = ("export HCCL_BUFFSIZE=200\nvllm serve deepseek-ai/DeepSeek-V3 --max-model-len 32768 "
               "--tensor-parallel-size 16 --speculative-config '{\"num_speculative_tokens\": 3, \"method\": \"mtp\"}'")
    result = _check(command, engine="vllm==0.30.0")
    assert result.deployment.settings["platform_plugin"].value == "vllm-ascend==0.30.0rc2"  # type: ignore[attr-defined]
    (row,) = result.rows  # type: ignore[attr-defined]
    assert (row.backend, row.rule, row.first_failing) == ("vllm-ascend-block-table", "vllm-ascend==0.30.0rc2", None)
    assert result.status == SAFE  # type: ignore[attr-defined]


@vllm
def test_vllm_on_an_npu_without_a_plugin_release_is_undecided_naming_those_with_one() -> None:
    result = _check("vllm serve Qwen/Qwen3-32B", engine="vllm==0.34.0", gpu="910b")
    assert result.status == UNDECIDED and "vllm-ascend has no release 0.34.0" in result.verdict  # type: ignore[attr-defined]
    assert "give --engine vllm==0.23.0" in result.verdict  # type: ignore[attr-defined]


@sglang
def test_a_model_whose_remote_code_is_not_cached_is_undecided_naming_the_file() -> None:
    """The test cache holds DeepSeek-R1's config.json only; with --trust-remote-code the engine
    loads the module its config's auto_map names, and the answer names that file."""
    snapshot = next((HF_CACHE / "models--deepseek-ai--DeepSeek-R1" / "snapshots").iterdir())
    module = json.loads((snapshot / "config.json").read_text())["auto_map"]["AutoConfig"].split(".")[0] + ".py"
    result = _check("python3 -m sglang.launch_server --tp 8 --model deepseek-ai/DeepSeek-R1 --trust-remote-code")
    assert result.status == UNDECIDED  # type: ignore[attr-defined]
    assert f"the engine asked for {module}" in result.verdict  # type: ignore[attr-defined]
    assert f"hf download deepseek-ai/DeepSeek-R1 {module}" in result.verdict  # type: ignore[attr-defined]


@sglang
def test_the_gpu_given_picks_the_engines_default_backend() -> None:
    base = "python -m sglang.launch_server --model-path Qwen/Qwen3-32B"
    hopper = resolve(base, engine="sglang==0.5.23", gpu="h100", progress=None)
    ampere = resolve(base, engine="sglang==0.5.23", gpu="a100", progress=None)
    assert hopper is not None and ampere is not None
    assert hopper.launch_names == ("fa3",) and ampere.launch_names == ("flashinfer",)  # fa3 on Hopper only
    topk = resolve(base + " --speculative-algorithm EAGLE --speculative-draft-model-path Qwen/Qwen3-8B "
                   "--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8",
                   engine="sglang==0.5.23", progress=None)
    assert topk is not None and topk.launch_names == ("flashinfer",)  # fa3 only with topk 1 on Hopper


@sglang
def test_fa3_deployment_reaches_its_silent_overread() -> None:
    # FA3's page_table is cdiv(ctx, ps) wide, a verify at the cap reads s + D past it
    result = _check("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --context-length 8192 "
                    "--speculative-algorithm EAGLE --speculative-draft-model-path Qwen/Qwen3-8B "
                    "--speculative-num-steps 3 --speculative-eagle-topk 1")
    verify = next(r for r in result.rows if r.mode == "target-verify")
    assert result.status == FAILS and verify.outcome == "silent-overread" and verify.backend == "sglang-fa3-page-table"
    assert verify.first_failing == 8192 - 4 + 1  # the first s with s + D > 8192


@sglang
def test_what_the_engine_runs_without_graphs_is_undecided() -> None:
    # 0.5.23 turns decode graphs off for torch_native (its own resolution); the check says so
    command = "python -m sglang.launch_server --model-path Qwen/Qwen3-32B --attention-backend torch_native"
    result = _check(command)
    assert result.status == UNDECIDED and "graphs are disabled" in result.verdict
    assert _run(["check", "--engine", "sglang==0.5.23", "--cmd", command])[0] == 3


EAGLE_TOPK4 = ("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --speculative-algorithm EAGLE "
               "--speculative-draft-model-path Qwen/Qwen3-8B --speculative-num-steps 5 --speculative-eagle-topk 4 "
               "--speculative-num-draft-tokens 8")


@sglang
def test_flashinfer_eagle_draft_buffers_assert_within_steps_of_the_context_end() -> None:
    """FlashInfer (topk 4 on Hopper): the draft buffer is max_bs * topk * ctx entries and the step
    row written last needs topk * (s + steps) per request, checked by assert_buffer_fits: a full
    bucket fails from s = ctx - 5 + 1, inside the reach ctx - 1 + 2; the eager buffer, sized per
    call, for one request at the same length. ctx is the config's 40960, max_bs the engine's."""
    result = _check(EAGLE_TOPK4 + " --max-total-tokens 30000000")  # a pool that holds the full bucket
    assert result.deployment is not None
    ctx, bs = 40960, result.deployment.geometry.max_bs
    assert result.deployment.settings["cuda_graph_max_bs"].origin == "engine"
    rows = {r.mode: r for r in result.rows if r.kind == "pooled"}
    assert result.status == FAILS and set(rows) == {"draft-decode", "draft-decode-eager", "target-verify"}
    graph, eager = rows["draft-decode"], rows["draft-decode-eager"]
    assert (graph.width, graph.first_failing, graph.outcome, graph.reachable) == (bs * 4 * ctx, ctx - 4, "host-assert", True)
    assert graph.message == ("AssertionError: EAGLE draft kv_indices row (size max_bs * topk * max_context_len): "
                             f"used {bs * 4 * (ctx - 4 + 5)} > capacity {bs * 4 * ctx} "
                             f"(bs={bs * 4}, seq_lens_sum={bs * (ctx - 4)})")
    assert (eager.width, eager.first_failing, eager.outcome) == (4 * ctx, ctx - 4, "host-assert")
    assert rows["target-verify"].first_failing is None  # D * ctx of room per request


@sglang
def test_triton_draft_buffers_are_never_checked_and_run_eagerly_too() -> None:
    """Triton writes the same rows without a check (a silent overwrite past the buffer); with graphs
    disabled only the per-call buffer is a row, and it still fails (ctx - steps + 1, GLM-5 EAGLE 3/1/4)."""
    command = "python -m sglang.launch_server --model-path zai-org/GLM-5 --attention-backend triton --speculative-algorithm EAGLE"
    result = _check(command)
    graph = next(r for r in result.rows if r.mode == "draft-decode")
    assert (graph.outcome, graph.first_failing, graph.reachable) == ("silent-overwrite", 202752 - 3 + 1, True)
    eager = _check(command + " --disable-cuda-graph")
    assert [r.mode for r in eager.rows if r.kind == "pooled"] == ["draft-decode-eager"] and eager.status == FAILS


@sglang
def test_allocator_before_the_third_fix_reaches_the_exact_fit() -> None:
    result = _check(ASCEND, engine="sglang==0.5.23+revert-npu-clamp")
    row = next(r for r in result.rows if r.kind == "allocator")
    assert (row.rule, row.outcome, row.reachable) == ("npu-legacy", "index-error", True)
    assert row.message == "index 1 is out of bounds for dimension 0 with size 1"
    assert row.fix is not None and row.fix.rule == "npu-clamped"
    assert result.status == FAILS


@sglang
def test_disabled_graphs_are_undecided_but_keep_the_allocator_row() -> None:
    result = _check(ASCEND + " --disable-cuda-graph", engine="sglang==0.5.23+revert-npu-clamp")
    assert [r.kind for r in result.rows] == ["allocator"] and result.status == FAILS  # the allocator runs eagerly too
    result = _check(ASCEND + " --disable-cuda-graph", engine=PRE_ASCEND)
    assert result.status == UNDECIDED and "graphs are disabled" in result.verdict
    assert resolve(VLLM_46074 + " --enforce-eager", engine="vllm==0.23.0").graphs is False  # type: ignore[union-attr]


# ---- vLLM -----------------------------------------------------------------------------------------


@vllm
@pytest.mark.parametrize("engine", ["vllm==0.23.0", "vllm==0.33.0"])
def test_the_46074_command_is_parsed_and_resolved(engine: str) -> None:
    d = resolve(VLLM_46074, engine=engine)
    assert d is not None
    g = d.geometry
    assert (d.model_path, g.context_len, g.page_size, g.draft_tokens) == ("zai-org/GLM-5-FP8", 350000, 64, 1)
    assert d.extra["method"] == "mtp" and d.extra["lookahead"] == 1  # the scheduler's k for MTP
    assert d.extra["dcp_size"] == 1 and d.extra["max_num_batched_tokens"] == 8192  # the server default, >= 70 GiB
    # the release turns asynchronous scheduling and prefix caching on by itself: the waiting pad's row too
    assert d.settings["scheduler_config.async_scheduling"].value is True
    assert d.settings["cache_config.enable_prefix_caching"].value is True
    assert d.launch_names == ("dsa-indexer", "v1-block-table", "v1-waiting-pad")
    # the reach is the release's measured scheduler: a request holding max_model_len tokens stops, so
    # its last step runs at max_model_len - 2, carrying no committed token past its cap
    assert d.reach_rule.cap_offset == 2 and d.reach_rule.overshoot == 0 and d.reach_rule.clamps_reads
    # scheduled asynchronously (the release's default here): the cap measured on its AsyncScheduler
    assert d.reach_rule.sources["committed_cap"].startswith(f"measured: {engine}'s AsyncScheduler")
    assert d.settings["max_model_len"].origin == "given" and d.settings["model_config.max_model_len"].value == 350000
    # the expand error's numbers: the aligned table and the unaligned buffer
    assert -(-g.context_len // g.page_size) == 5469


@vllm
def test_vllm_defaults_come_from_the_release() -> None:
    """The context is the config's max_position_embeddings and the block size FlashMLA sparse's (64,
    the only one its kernel takes) as the release's attention selector picks it for a DSA model on
    an H100. MTP without a token count is refused by the release itself: its SpeculativeConfig sets
    the draft model (and so the MTP layers' count) only when num_speculative_tokens is given."""
    config = json.loads(next(HF_CACHE.glob("models--deepseek-ai--DeepSeek-V3.2/snapshots/*/config.json")).read_text())
    spec = "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 2}'"
    d = resolve(f"vllm serve deepseek-ai/DeepSeek-V3.2 {spec}", engine="vllm==0.23.0")
    assert d is not None
    assert (d.geometry.draft_tokens, d.geometry.context_len) == (2, config["max_position_embeddings"])
    assert d.geometry.page_size == 64 and "FlashMLASparse" in d.settings["cache_config.block_size"].source
    with pytest.raises(PreflightError, match=r"refuses the command \(_verify_args .*\): num_speculative_tokens must be "
                                             "provided with speculative model"):
        resolve("vllm serve deepseek-ai/DeepSeek-V3.2 --speculative-config '{\"method\": \"mtp\"}'", engine="vllm==0.23.0")


@vllm
def test_the_46074_report_fails_on_0230_and_runs_on_0330() -> None:
    """The indexer's expand error, 5469 against 5470 blocks, under 0.23.0; 0.33.0 aligns both."""
    before = check(VLLM_46074, engine="vllm==0.23.0")
    (row,) = [r for r in before.rows if r.backend == "vllm-indexer-block-table"]
    assert before.status == FAILS and row.reachable and row.outcome == "shape-error"
    assert row.message is not None and row.message.startswith(
        "The expanded size of the tensor (5469) must match the existing size (5470) at non-singleton dimension 1.  ")
    after = check(VLLM_46074, engine="vllm==0.33.0")
    assert after.status == SAFE and [r.width for r in after.rows if r.backend == row.backend] == [5470]
    status, _ = _run(["check", "--engine", "vllm==0.23.0", "--cmd", VLLM_46074])
    assert status == 1


@vllm
def test_an_eager_launch_keeps_the_rows_of_buffers_the_eager_path_reads() -> None:
    """--enforce-eager captures no graph, but the indexer's metadata builder fills its buffer in
    every build() and the scheduler and KV cache manager step alike: the same rows, the same
    failure, and a SAFE that says the rows are all eager-path buffers."""
    graphs, eager = (check(VLLM_46074 + extra, engine="vllm==0.23.0") for extra in ("", " --enforce-eager"))
    assert eager.deployment is not None and eager.deployment.graphs is False
    seen = [(r.backend, r.first_failing, r.outcome, r.message) for r in eager.rows]
    assert seen == [(r.backend, r.first_failing, r.outcome, r.message) for r in graphs.rows] and eager.status == FAILS
    after = check(VLLM_46074 + " --enforce-eager", engine="vllm==0.33.0")
    assert after.status == SAFE and after.verdict.endswith("[graphs disabled: each row is a buffer the eager path reads too]")
    assert {r.backend for r in after.rows} == {"vllm-indexer-block-table", "vllm-v1-block-table", "vllm-v1-waiting-pad"}


# ---- input forms, output forms ---------------------------------------------------------------------


@sglang
def test_cmd_from_file_and_remainder_agree(tmp_path: Path) -> None:
    path = tmp_path / "launch.sh"
    path.write_text("export HF_HUB_OFFLINE=1\nASCEND_RT_VISIBLE_DEVICES=0,1 " +
                    ASCEND.replace(" --context-length", " \\\n  --context-length") + "\n")
    outs = [_run(["check", "--engine", PRE_ASCEND, *form]) for form in
            (["--", *ASCEND.split()], ["--cmd", ASCEND], ["--from-file", str(path)])]
    assert [status for status, _ in outs] == [1, 1, 1]
    assert len({text.split("model:", 1)[1] for _, text in outs}) == 1


@sglang
def test_json_output_is_one_object_with_the_rows() -> None:
    status, text = _run(["check", "--json", "--engine", PRE_ASCEND, "--cmd", ASCEND])
    data = json.loads(text)
    assert status == 1 and data["status"] == 1 and data["engine"] == PRE_ASCEND and data["release"] == "sglang==0.5.23"
    table = next(r for r in data["rows"] if r["kind"] == "table")
    assert table["first_failing"] == 32765 and table["message"] == ASCEND_ERROR and table["mode"] == "target-verify"
    assert any(s["name"] == "speculative_eagle_topk" and s["origin"] == "given" for s in data["settings"])
    assert {f["spelled"] for f in data["flags"]} >= {"--model-path", "--speculative-algorithm", "--cuda-graph-max-bs-decode"}


@sglang
def test_each_launch_of_a_text_is_checked_and_the_worst_status_returned(capsys: pytest.CaptureFixture[str]) -> None:
    """Two launches in one text: the first seed's deployment (exit 1 before the fix, the worked case
    above), and the same command with a value its parser refuses (SGLang's own argparse message)."""
    text = f"# node 0\n{ASCEND}\n# node 1\n{ASCEND} --speculative-num-steps three"
    status, out = _run(["check", "--engine", PRE_ASCEND, "--cmd", text])
    assert status == 2 and f"== launch 1 of 2: {ASCEND[:160]}\n" in out
    assert "== launch 2 of 2: python -m sglang.launch_server --model-path Qwen/Qwen3-32B" in out  # refused: named too
    assert out.rstrip().endswith("verdict of the text: REFUSED: 2 launches: launch 1 FAILS, launch 2 REFUSED")
    assert "error: launch 2 of 2: sglang==0.5.23 refuses the command (its parser): argument --speculative-num-steps: " \
           "invalid int value: 'three'" in out
    status, out = _run(["check", "--json", "--engine", PRE_ASCEND, "--cmd", text])
    data = json.loads(out)
    assert (status, data["status"], [x["status"] for x in data["launches"]]) == (2, 2, [1, 2])
    assert next(r for r in data["launches"][0]["rows"] if r["kind"] == "table")["first_failing"] == 32765
    status, out = _run(["check", "--launch", "1", "--engine", PRE_ASCEND, "--cmd", text])
    assert status == 1 and "the text holds 2 launches; this is launch 1" in out
    status, _ = _run(["check", "--launch", "3", "--engine", PRE_ASCEND, "--cmd", text])
    assert status == 2 and "--launch: the text holds 2 launches; give 1 to 2, not 3" in capsys.readouterr().err
    from workbench.present.preflight_box import check_text  # the notebook's box checks each launch too

    status, shown = check_text(text, PRE_ASCEND)
    assert status == 2 and shown.endswith("verdict of the text: REFUSED: 2 launches: launch 1 FAILS, launch 2 REFUSED")


@sglang
def test_overshoot_flag_moves_the_reach() -> None:
    result = _check(GLM, engine="sglang==0.5.23+revert-dsa-width", overshoot=1)
    verify = next(r for r in result.rows if r.mode == "target-verify")
    assert verify.reach == 90000 and not verify.reachable and verify.margin == 0  # first - reach - 1: 90001 is next
    assert "overshoot" in format_text(result) and to_json(result)["status"] == 0


def test_allow_unknown_is_gone() -> None:
    status, _ = _run(["check", "--allow-unknown", "--cmd", "python -m sglang.launch_server --model-path m"])
    assert status == 2


# ---- the notebook's box (its redraws and answer: test_preflight_box.py) -----------------------------


def test_notebook_06_pair_agrees() -> None:
    jupytext = pytest.importorskip("jupytext")
    import nbformat

    root = Path(__file__).resolve().parent.parent / "notebooks"
    paired = jupytext.read(root / "06_preflight.py")
    committed = nbformat.read(str(root / "06_preflight.ipynb"), as_version=4)
    assert [c.source for c in paired.cells] == [c.source for c in committed.cells]
    assert committed.metadata["workbench"]["test_parameters"] == paired.metadata["workbench"]["test_parameters"]


@vllm
def test_a_vllm_backend_plugs_in_without_edits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in vLLM backend in the registry and a rule in the version data are all a vLLM row
    needs: the registry query picks it by ``launch_names``, the rule comes from data/engines.json."""
    from workbench import backends
    from workbench.backends.sglang.fa3_page_table import Fa3PageTableBackend
    from workbench.engines.store import launch_defaults as launch
    from workbench.engines.store.versions import EngineVersion

    class StandIn(Fa3PageTableBackend):  # FA3's cdiv(ctx, ps) width: the indexer's unaligned 0.23.0 width
        name = "vllm-stand-in-indexer"
        engine = "vllm"
        launch_names = ("dsa-indexer",)

    stand_in = StandIn()
    monkeypatch.setattr(backends, "CASE_BACKENDS", ())  # the real indexer module aside: the stand-in alone
    monkeypatch.setattr(backends, "TABLE_BACKENDS", (*backends.TABLE_BACKENDS, stand_in))
    monkeypatch.setitem(backends._BY_NAME, stand_in.name, stand_in)
    assert vllm_backends() == (stand_in,)
    without_rule = check(VLLM_46074, engine="vllm==0.23.0")
    assert without_rule.status == UNDECIDED and any("names no sizing rule" in n for n in without_rule.notes)
    version = EngineVersion("vllm==0.23.0", "test", {stand_in.name: {"rule": "context"}}, {stand_in.name: {"rule": "x:1"}}, {})
    monkeypatch.setattr(launch, "load_versions", lambda: {"vllm==0.23.0": version})
    (row,) = check(VLLM_46074, engine="vllm==0.23.0").rows
    # the reach is 0.23.0's measured scheduler's: a request stops holding 350000 tokens, its last step at 349998
    assert (row.backend, row.width, row.reach, row.rule_source) == (stand_in.name, 5469, 349998, "x:1")


def test_every_launch_default_names_where_it_was_read() -> None:
    import re

    from workbench.analysis.memory import load_presets
    from workbench.engines.store.launch_defaults import load_launch_data

    data = load_launch_data()
    read = re.compile(r"(sglang|vllm)/[\w/]+\.py:\d+")
    for version in data.versions.values():
        entries = [*version.defaults.items(), *version.reach.items(),
                   *((f"{c}.{k}", v) for c, fields in version.backends.items() for k, v in fields.items())]
        for name, entry in entries:
            assert read.search(entry.source) or entry.source.startswith("workbench"), (version.engine, name, entry.source)
        assert version.pseudo is None or version.base is not None  # a pseudo-version names its release
    presets = {p.name for p in load_presets()}
    assert all(m.preset in presets for m in data.models)
    assert set(data.newest.values()) <= set(data.versions)


@vllm
@pytest.mark.parametrize("config, k, lookahead", [
    ('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}', 4, 0),  # no KV past the request
    ('{"method": "mtp", "num_speculative_tokens": 3}', 3, 3),  # k for the EAGLE family (MTP is one)
])
def test_vllm_lookahead_by_method(config: str, k: int, lookahead: int) -> None:
    """The scheduler's lookahead as the release computes it (VllmConfig.num_lookahead_tokens)."""
    d = resolve(f"vllm serve zai-org/GLM-5-FP8 --max-model-len 4096 -sc '{config}'", engine="vllm==0.33.0")
    assert d is not None
    assert (d.geometry.draft_tokens, d.extra["lookahead"]) == (k, lookahead)
    assert d.geometry.context_len == 4096 and d.modes[0][0].value == "target-verify"
