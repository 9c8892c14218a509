"""workbench check: launch commands resolved as the engine would, rows and verdicts of the seeds.

Expected values come from the worked cases of docs/semantics.md, docs/engine-facts.md (what 0.5.23
does, what vLLM 0.23.0 / 0.33.0 do) and the engines' source as quoted there, never from the code
under test.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from workbench import cli
from workbench.preflight import FAILS, SAFE, UNDECIDED, PreflightError, check, resolve, vllm_backends
from workbench.preflight.format import format_text, to_json

QWQ = ("python -m sglang.launch_server --model-path Qwen/QwQ-32B --context-length 32768 --device npu "
       "--attention-backend ascend --page-size 128 --speculative-algorithm NGRAM --speculative-num-draft-tokens 16 "
       "--cuda-graph-max-bs 16")
GLM = ("python -m sglang.launch_server --model-path zai-org/GLM-5.2-NVFP4 --context-length 90000 --tp-size 8 "
       "--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 "
       "--speculative-num-draft-tokens 6 --cuda-graph-max-bs 16")
VLLM_46074 = ("vllm serve zai-org/GLM-5.2-FP8 --max-model-len 350000 --block-size 64 "
              "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'")
PRE_ASCEND = "sglang==0.5.23+revert-ascend-width"
QWQ_ERROR = "The size of tensor a (256) must match the size of tensor b (257) at non-singleton dimension 1"
GLM_ERROR = "The size of tensor a (90006) must match the size of tensor b (90007) at non-singleton dimension 1"


def _run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return cli.main(argv, out), out.getvalue()


def _setting(result_or_deployment: object, name: str) -> object:
    deployment = getattr(result_or_deployment, "deployment", result_or_deployment)
    return next(s for s in deployment.settings if s.name == name)


# ---- the Done-when commands -----------------------------------------------------------------------


def test_qwq_before_the_fix_fails_in_verify_at_32753_and_exits_1() -> None:
    status, text = _run(["check", "--engine", PRE_ASCEND, "--", *QWQ.split()])
    assert status == 1
    assert QWQ_ERROR in text  # the Ascend seed's message
    row = next(line for line in text.splitlines() if line.strip().startswith("block_tables"))
    assert "target-verify" in row and "32753" in row and "shape-error" in row and "REACHED" in row
    assert "fix: rule context-plus-draft" in text and "257 pages" in text  # the first seed's fix


def test_qwq_under_0_5_23_exits_0_with_the_margin() -> None:
    result = check(QWQ, engine="sglang==0.5.23")
    assert result.status == SAFE
    (row,) = [r for r in result.rows if r.kind == "table"]
    # docs/engine-facts.md#sglang-ascend-block-tables: B = 257 pages under G3 (W 32927) first fails at s = 32881; a run reaches 32779,
    # what 0.5.23's own scheduler functions give NGRAM 16 with overlap on (tests/test_reach.py runs
    # them); margin = first - reach - 1
    assert (row.width, row.first_failing, row.reach, row.margin) == (257, 32881, 32779, 101)
    assert not row.reachable and "margin 101" in result.verdict
    status, text = _run(["check", "--engine", "sglang==0.5.23", "--", *QWQ.split()])
    assert status == 0 and "+101" in text


def test_qwq_ngram_defaults_come_from_the_source_and_the_npu_refusal_is_said() -> None:
    result = check(QWQ.replace(" --speculative-num-draft-tokens 16", ""), engine="sglang==0.5.23")
    d = result.deployment
    # speculative_hook.py 1308-1330: topk = BFS breadth 10 (fields/spec.py 256-259), D 12, steps D // topk
    assert (d.geometry.draft_tokens, d.geometry.spec_topk, d.geometry.spec_steps, d.geometry.draft_has_kv) == (12, 10, 1, False)
    assert _setting(d, "speculative_num_draft_tokens").source.endswith("speculative_hook.py:1314-1323")
    assert any("Ngram speculative decoding only supports CUDA, CPU, or XPU devices." in n for n in result.notes)


def test_glm_eagle_dsa_before_and_after_the_second_fix() -> None:
    before = check(GLM, engine="sglang==0.5.23+revert-dsa-width")
    assert before.status == FAILS
    verify = next(r for r in before.rows if r.mode == "target-verify")
    # docs/semantics.md#dynamic-and-static-replay-the-dsa-page-table: B = ctx + D = 90006, a verify at
    # s = 90001 (reached: EAGLE (5, 1, 6) with overlap,
    # ctx - 5 + 6, as the scheduler's functions give for an accept length of 6 in tests/test_reach.py) raises
    assert (verify.width, verify.first_failing, verify.message, verify.reach) == (90006, 90001, GLM_ERROR, 90001)
    assert verify.fix is not None and verify.fix.rule == "req-to-token" and verify.fix.width == 90075  # W under G3
    after = check(GLM, engine="sglang==0.5.23")
    assert after.status == SAFE and all(not r.reachable for r in after.rows)


def test_glm_resolves_dsa_with_its_forced_page_size_and_eagle_topk_one_rule() -> None:
    d = resolve(GLM.replace("--speculative-num-draft-tokens 6", "--speculative-num-draft-tokens 9 --page-size 128"))
    assert d.launch_names == ("dsa",)  # deepseek_v2.py 99-104: DSA models default to the dsa backend
    assert d.geometry.page_size == 64 and _setting(d, "page_size").origin == "forced"  # 64 * index_kpool on CUDA
    assert d.geometry.draft_tokens == 6 and _setting(d, "speculative_num_draft_tokens").origin == "forced"  # steps + 1
    modes = [m.value for m, _ in d.modes]
    assert modes == ["target-verify", "draft-decode", "draft-extend"] and d.modes[1][1] == 4  # the drafter's last step


def test_eagle_without_steps_takes_the_engines_auto_parameters() -> None:
    d = resolve("python -m sglang.launch_server --model-path zai-org/GLM-5.2 --speculative-algorithm NEXTN")
    # speculative_hook.py 109-116 (NEXTN is EAGLE), 1430-1470: (3, 1, 4) for GlmMoeDsaForCausalLM
    g = d.geometry
    assert (g.spec_steps, g.spec_topk, g.draft_tokens) == (3, 1, 4)
    assert g.context_len == 1048576  # the GLM-5.2 preset (docs/engine-facts.md#realistic-settings)


def test_npu_forces_ascend_and_page_128() -> None:
    d = resolve("python -m sglang.launch_server --model-path Qwen/QwQ-32B --device npu --attention-backend fa3")
    assert d.launch_names == ("ascend",) and _setting(d, "attention_backend").origin == "forced"
    assert d.geometry.page_size == 128 and d.geometry.context_len == 32768  # npu/utils.py 96-101; the preset


def test_cuda_mha_default_backend_by_gpu() -> None:
    base = "python -m sglang.launch_server --model-path Qwen/QwQ-32B"
    assert resolve(base).launch_names == ("fa3",)  # hopper without speculation: model_override_base.py 303-311
    assert resolve(base, gpu="other").launch_names == ("flashinfer",)
    assert resolve(base).geometry.page_size == 1  # overrides.py 1340-1363
    topk = resolve(base + " --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 4 "
                   "--speculative-num-draft-tokens 8")
    assert topk.launch_names == ("flashinfer",)  # fa3 only with topk 1 on hopper


def test_fa3_deployment_reaches_its_silent_overread() -> None:
    # docs/engine-facts.md#sglang-fa3-page-table: cdiv(ctx, ps) wide, a verify at the cap reads s + D past it
    result = check("python -m sglang.launch_server --model-path Qwen/QwQ-32B --context-length 8192 "
                   "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1")
    verify = next(r for r in result.rows if r.mode == "target-verify")
    assert result.status == FAILS and verify.outcome == "silent-overread"
    assert verify.first_failing == 8192 - 4 + 1  # the first s with s + D > 8192


def test_an_unmodelled_backend_is_undecided_not_safe() -> None:
    command = "python -m sglang.launch_server --model-path Qwen/QwQ-32B --attention-backend torch_native"
    result = check(command)
    assert result.status == UNDECIDED and "torch_native" in result.verdict
    assert _run(["check", "--cmd", command])[0] == 3
    # FlashInfer without speculation: its flat buffers cannot overflow and are not rows; still not SAFE
    plain = check("python -m sglang.launch_server --model-path Qwen/QwQ-32B", gpu="other")
    assert plain.status == UNDECIDED and not plain.rows


EAGLE_TOPK4 = ("python -m sglang.launch_server --model-path Qwen/QwQ-32B --speculative-algorithm EAGLE "
               "--speculative-draft-model-path d --speculative-num-steps 5 --speculative-eagle-topk 4 "
               "--speculative-num-draft-tokens 8")


def test_flashinfer_eagle_draft_buffers_assert_within_steps_of_the_context_end() -> None:
    """FlashInfer (topk 4 on hopper), 0.5.23: the draft buffer is max_bs * topk * ctx entries and the
    step row written last needs topk * (s + steps) per request, checked by assert_buffer_fits: a full
    bucket (32) fails from s = 32768 - 5 + 1, inside the reach ctx - 1 + 2; the eager buffer, sized
    per call, for one request at the same length."""
    result = check(EAGLE_TOPK4 + " --max-total-tokens 2000000")  # a pool that holds the full bucket
    rows = {r.mode: r for r in result.rows if r.kind == "pooled"}
    assert result.status == FAILS and set(rows) == {"draft-decode", "draft-decode-eager", "target-verify"}
    graph, eager = rows["draft-decode"], rows["draft-decode-eager"]
    assert (graph.width, graph.first_failing, graph.outcome, graph.reach) == (32 * 4 * 32768, 32764, "host-assert", 32769)
    assert graph.message == ("AssertionError: EAGLE draft kv_indices row (size max_bs * topk * max_context_len): "
                             f"used {32 * 4 * (32764 + 5)} > capacity {32 * 4 * 32768} "
                             f"(bs={32 * 4}, seq_lens_sum={32 * 32764})")
    assert (eager.width, eager.first_failing, eager.outcome) == (4 * 32768, 32764, "host-assert")
    assert rows["target-verify"].first_failing is None  # D * ctx of room per request
    assert graph.fix is not None and graph.fix.extra_bytes == 32 * 4 * (32769 + 5 - 32768) * 5 * 4


def test_triton_draft_buffers_are_never_checked_and_run_eagerly_too() -> None:
    """Triton writes the same rows without a check (a silent overwrite past the buffer); with graphs
    disabled only the per-call buffer is a row, and it still fails (ctx - steps + 1, GLM-5 EAGLE 3/1/4)."""
    command = "python -m sglang.launch_server --model-path zai-org/GLM-5 --attention-backend triton --speculative-algorithm EAGLE"
    result = check(command)
    graph = next(r for r in result.rows if r.mode == "draft-decode")
    assert (graph.outcome, graph.first_failing, graph.reachable) == ("silent-overwrite", 202752 - 3 + 1, True)
    eager = check(command + " --disable-cuda-graph")
    assert [r.mode for r in eager.rows if r.kind == "pooled"] == ["draft-decode-eager"] and eager.status == FAILS


def test_allocator_before_the_third_fix_reaches_the_exact_fit() -> None:
    result = check(QWQ, engine="sglang==0.5.23+revert-npu-clamp")
    row = next(r for r in result.rows if r.kind == "allocator")
    assert (row.rule, row.outcome, row.reachable) == ("npu-legacy", "index-error", True)
    assert row.message == "index 1 is out of bounds for dimension 0 with size 1"  # the allocator seed
    assert row.fix is not None and row.fix.rule == "npu-clamped"
    assert result.status == FAILS


# ---- vLLM -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine, cap_source", [("vllm==0.23.0", "scheduler.py:413-416"),
                                                ("vllm==0.33.0", "scheduler.py:851-857")])
def test_the_46074_command_is_parsed_and_resolved(engine: str, cap_source: str) -> None:
    d = resolve(VLLM_46074, engine=engine)
    g = d.geometry
    assert (d.model_path, g.context_len, g.page_size, g.draft_tokens) == ("zai-org/GLM-5.2-FP8", 350000, 64, 1)
    assert d.extra["method"] == "mtp" and d.extra["lookahead"] == 1  # k for MTP (docs/engine-facts.md#vllm-limits-near-max-model-len)
    assert d.extra["dcp_size"] == 1 and d.extra["max_num_batched_tokens"] == 8192  # the server default, >= 70 GiB
    assert d.launch_names == ("dsa-indexer",)
    assert d.reach_rule.cap_offset == 1 and d.reach_rule.overshoot == 0 and d.reach_rule.clamps_reads
    assert d.reach_rule.sources["committed_cap"].endswith(cap_source)
    # the expand error's numbers (docs/engine-facts.md#vllm-46074): the aligned table and the unaligned buffer
    assert -(-g.context_len // g.page_size) == 5469


def test_vllm_mtp_tokens_default_to_the_models_mtp_layers() -> None:
    d = resolve("vllm serve zai-org/GLM-5.2-FP8 --speculative-config '{\"method\": \"mtp\"}'", engine="vllm==0.23.0")
    assert d.geometry.draft_tokens == 1 and d.geometry.context_len == 1048576 and d.geometry.page_size == 16


def test_the_46074_report_fails_on_0230_and_runs_on_0330() -> None:
    """The issue's second Done-when: the indexer's expand error, 5469 against 5470 blocks."""
    before = check(VLLM_46074, engine="vllm==0.23.0")
    (row,) = [r for r in before.rows if r.backend == "vllm-indexer-block-table"]
    assert before.status == FAILS and row.reachable and row.outcome == "shape-error"
    assert row.message is not None and row.message.startswith(
        "The expanded size of the tensor (5469) must match the existing size (5470) at non-singleton dimension 1.  ")
    after = check(VLLM_46074, engine="vllm==0.33.0")
    assert after.status == SAFE and [r.width for r in after.rows if r.backend == row.backend] == [5470]
    status, _ = _run(["check", "--engine", "vllm==0.23.0", "--cmd", VLLM_46074])
    assert status == 1


# ---- input forms, output forms, speed ---------------------------------------------------------------


def test_cmd_from_file_and_remainder_agree(tmp_path: Path) -> None:
    path = tmp_path / "launch.sh"
    path.write_text("CUDA_VISIBLE_DEVICES=0,1 " + QWQ.replace(" --context-length", " \\\n  --context-length") + "\n")
    outs = [_run(["check", "--engine", PRE_ASCEND, *form]) for form in
            (["--", *QWQ.split()], ["--cmd", QWQ], ["--from-file", str(path)])]
    assert [status for status, _ in outs] == [1, 1, 1]
    assert len({text.split("\n", 1)[1] for _, text in outs}) == 1


def test_json_output_is_one_object_with_the_rows() -> None:
    status, text = _run(["check", "--json", "--engine", PRE_ASCEND, "--cmd", QWQ])
    data = json.loads(text)
    assert status == 1 and data["status"] == 1 and data["engine"] == PRE_ASCEND
    table = next(r for r in data["rows"] if r["kind"] == "table")
    assert table["first_failing"] == 32753 and table["message"] == QWQ_ERROR and table["mode"] == "target-verify"
    assert any(s["name"] == "speculative_eagle_topk" and s["origin"] == "default" for s in data["settings"])


def test_overshoot_flag_moves_the_reach() -> None:
    result = check(GLM, engine="sglang==0.5.23+revert-dsa-width", overshoot=1)
    verify = next(r for r in result.rows if r.mode == "target-verify")
    assert verify.reach == 90000 and not verify.reachable and verify.margin == 0  # first - reach - 1: 90001 is next
    assert "overshoot" in format_text(result) and to_json(result)["status"] == 0


def test_unknown_flags_are_skipped_with_allow_unknown() -> None:
    result = check(QWQ + " --frobnicate 3", engine=PRE_ASCEND, allow_unknown=True)
    assert result.status == FAILS and any("--frobnicate" in n for n in result.notes)


def test_one_check_takes_under_a_second_after_import() -> None:
    check(QWQ, engine=PRE_ASCEND)  # first call: data files and the capture cache
    start = time.perf_counter()
    check(QWQ, engine=PRE_ASCEND)
    assert time.perf_counter() - start < 1.0


# ---- the notebook's box ---------------------------------------------------------------------------


def test_the_preflight_box_redraws_on_change() -> None:
    from workbench.present.preflight_box import check_text, preflight_box

    assert check_text(QWQ, PRE_ASCEND)[0] == 1
    status, line = check_text(QWQ + " --page-size 0")
    assert status == 2 and line.startswith("error: --page-size: 0 is out of range")
    box = preflight_box(QWQ, PRE_ASCEND)
    text, (version, button), out = box.children[1], box.children[2].children, box.children[-1]
    assert "exit status 1" in out.outputs[0]["text"] and "32753" in out.outputs[0]["text"]
    version.value = "sglang==0.5.23"
    assert "exit status 0" in out.outputs[-1]["text"] and "+101" in out.outputs[-1]["text"]
    text.value = "vllm serve"
    assert "exit status 2" in out.outputs[-1]["text"]
    text.value = QWQ
    version.value = ""  # the newest modelled version, 0.5.23
    out.outputs = ()
    button.click()  # the button checks the command as it stands
    assert "exit status 0" in out.outputs[-1]["text"]
    with pytest.raises(PreflightError, match="'sglang==0.0.0' is not a modelled version"):
        preflight_box(QWQ, "sglang==0.0.0")
    assert check_text(QWQ, "sglang==0.0.0")[1].startswith("error: --engine: 'sglang==0.0.0' is not a modelled version")


def test_notebook_06_pair_agrees() -> None:
    jupytext = pytest.importorskip("jupytext")
    import nbformat

    root = Path(__file__).resolve().parent.parent / "notebooks"
    paired = jupytext.read(root / "06_preflight.py")
    committed = nbformat.read(str(root / "06_preflight.ipynb"), as_version=4)
    assert [c.source for c in paired.cells] == [c.source for c in committed.cells]
    assert committed.metadata["workbench"]["test_parameters"] == paired.metadata["workbench"]["test_parameters"]


def test_a_vllm_backend_plugs_in_without_edits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in vLLM backend in the registry and a rule in the version data are all a vLLM row
    needs: the registry query picks it by ``launch_names``, the rule comes from data/engines.json."""
    from workbench import backends
    from workbench.backends.sglang_fa3_page_table import Fa3PageTableBackend
    from workbench.engines import launch
    from workbench.engines.versions import EngineVersion

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
    assert (row.backend, row.width, row.reach, row.rule_source) == (stand_in.name, 5469, 349999, "x:1")


def test_disabled_graphs_are_undecided_but_keep_the_allocator_row() -> None:
    result = check(QWQ + " --disable-cuda-graph", engine="sglang==0.5.23+revert-npu-clamp")
    assert [r.kind for r in result.rows] == ["allocator"] and result.status == FAILS  # the allocator runs eagerly too
    result = check(QWQ + " --disable-cuda-graph", engine=PRE_ASCEND)
    assert result.status == UNDECIDED and "graphs are disabled" in result.verdict
    assert resolve(VLLM_46074 + " --enforce-eager", engine="vllm==0.23.0").graphs is False


def test_every_launch_default_names_where_it_was_read() -> None:
    import re

    from workbench.analysis.memory import load_presets
    from workbench.engines.launch import load_launch_data

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


@pytest.mark.parametrize("config, k, lookahead", [
    ('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}', 4, 0),  # 0 for ngram
    ('{"method": "eagle3", "num_speculative_tokens": 3, "model": "x/y"}', 3, 3),  # k for EAGLE
    ('{"method": "dflash", "num_speculative_tokens": 8, "model": "x/y"}', 8, 9),  # k + 1 for DFlash
])
def test_vllm_lookahead_by_method(config: str, k: int, lookahead: int) -> None:
    d = resolve(f"vllm serve zai-org/GLM-5.2-FP8 --max-model-len 4096 -sc '{config}'", engine="vllm==0.33.0")
    assert (d.geometry.draft_tokens, d.extra["lookahead"]) == (k, lookahead)
    assert d.geometry.context_len == 4096 and d.modes[0][0].value == "target-verify"
