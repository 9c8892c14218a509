"""workbench check reads SGLang commands with the release's own code: compared with the engine's code run
directly (``engine_oracle.py``, no adapter on its path), release by release.

The models are the real configs of ``tests/data/hf_cache`` (``HF_HUB_CACHE`` points there). One
engine process per release and GPU serves the whole session (``conftest._engine_processes``);
the oracle loads each release once, in a process of its own, for every case of this file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from workbench.engines.commands import launch_service, release_choice
from workbench.engines.commands.adapters import to_json
from workbench.engines.store import gpus, wheels
from workbench.preflight import UNDECIDED, CheckResult, PreflightError, check

pytestmark = pytest.mark.engine

DATA = Path(__file__).parent / "data"
HF_CACHE = DATA / "hf_cache" / "hub"
ORACLE = Path(__file__).parent / "engine_oracle.py"
LAUNCH = ["python", "-m", "sglang.launch_server"]
NAMES = ["attention_backend", "page_size", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
         "disable_overlap_schedule", "cuda_graph_max_bs", "cuda_graph_config", "device", "tp_size", "mem_fraction_static"]

EAGLE = ["--model-path", "Qwen/Qwen3-32B", "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path",
         "Qwen/Qwen3-8B", "--speculative-num-steps", "5", "--speculative-eagle-topk", "4",
         "--speculative-num-draft-tokens", "8", "--tensor-parallel-size", "4", "--mem-fraction-static", "0.8",
         "--trust-remote-code"]
# The same command as people abbreviate it (argparse takes unique prefixes; --tp is an alias).
EAGLE_SHORT = ["--model", "Qwen/Qwen3-32B", "--speculative-algo", "EAGLE", "--speculative-draft-model-path", "Qwen/Qwen3-8B",
               "--speculative-num-steps", "5", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8",
               "--tp", "4", "--mem-fraction", "0.8", "--trust-remote"]
EAGLE_TOPK1 = ["--model-path", "Qwen/Qwen3-32B", "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path",
               "Qwen/Qwen3-8B", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
               "--speculative-num-draft-tokens", "4"]
NGRAM = ["--model-path", "Qwen/Qwen3-32B", "--speculative-algorithm", "NGRAM"]
DSA = ["--model-path", "deepseek-ai/DeepSeek-V3.2", "--tp", "8", "--speculative-algorithm", "EAGLE",
       "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
TOO_LONG = ["--model-path", "Qwen/Qwen3-32B", "--context-length", "1000000"]
AMBIGUOUS = ["--model-path", "Qwen/Qwen3-32B", "--cuda-graph-max-bs", "16"]
CASES = {"eagle": (EAGLE, {}), "eagle_short": (EAGLE_SHORT, {}), "ngram": (NGRAM, {}), "dsa": (DSA, {}),
         "too_long": (TOO_LONG, {}), "ambiguous": (AMBIGUOUS, {}),
         "topk1": (EAGLE_TOPK1, {}), "topk1_spec_v2": (EAGLE_TOPK1, {"SGLANG_ENABLE_SPEC_V2": "True"})}
RELEASES = ("sglang==0.5.23", "sglang==0.5.10")


@pytest.fixture(autouse=True)
def _hf_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(HF_CACHE))


@pytest.fixture(scope="module")
def oracle() -> dict[str, dict[str, dict[str, Any]]]:
    """The engine's own answer for every case, per release (one oracle process per release)."""
    answers: dict[str, dict[str, dict[str, Any]]] = {}
    for engine in RELEASES:
        install = wheels.fetch(engine)
        job = {"engine": engine, "package_dir": str(install.package_dir), "deps": str(install.deps),
               "gpu": to_json(gpus.gpu("h100")), "hf_cache": str(HF_CACHE),
               "cases": [{"argv": argv, "env": env, "names": NAMES} for argv, env in CASES.values()]}
        done = subprocess.run([sys.executable, str(ORACLE)], input=json.dumps(job), capture_output=True, text=True,
                              timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        assert len(lines) == len(CASES), done.stderr[-2000:]
        answers[engine] = {name: json.loads(line) for name, line in zip(CASES, lines)}
    return answers


def _check(argv: list[str], engine: str, env: dict[str, str] | None = None, **options: Any) -> CheckResult:
    exports = "".join(f"export {k}={v}\n" for k, v in (env or {}).items())
    return check(exports + " ".join([*LAUNCH, *argv]), engine=engine, gpu=options.pop("gpu", "h100"), progress=None,
                 **options)


def _graph_max_bs(answer: dict[str, Any]) -> Any:
    config = answer.get("cuda_graph_config")
    return config["decode"]["max_bs"] if isinstance(config, dict) else answer["cuda_graph_max_bs"]


@pytest.mark.parametrize("engine", RELEASES)
@pytest.mark.parametrize("case", ["eagle", "ngram", "dsa", "topk1", "topk1_spec_v2"])
def test_the_resolved_settings_are_the_engines(oracle: dict[str, Any], engine: str, case: str) -> None:
    answer = oracle[engine][case]
    assert "error" not in answer and "parser_error" not in answer, answer
    argv, env = CASES[case]
    deployment = _check(argv, engine, env).deployment
    assert deployment is not None
    settings = deployment.settings
    for name in ("attention_backend", "page_size", "speculative_num_steps", "speculative_eagle_topk",
                 "speculative_num_draft_tokens", "disable_overlap_schedule", "device"):
        assert settings[name].value == answer[name], name
    assert settings["cuda_graph_max_bs"].value == _graph_max_bs(answer)
    assert settings["context_len"].value == deployment.geometry.context_len == answer["context_len"]
    assert settings["attention_backend"].origin == "engine" and "(" in settings["attention_backend"].source


@pytest.mark.parametrize("engine", RELEASES)
def test_abbreviations_and_aliases_give_the_full_spellings_verdict(oracle: dict[str, Any], engine: str) -> None:
    full, short = _check(EAGLE, engine), _check(EAGLE_SHORT, engine)
    assert (short.status, short.verdict) == (full.status, full.verdict)
    assert full.deployment is not None and short.deployment is not None
    assert {n: s.value for n, s in short.deployment.settings.items() if n != "model_path"} == \
           {n: s.value for n, s in full.deployment.settings.items() if n != "model_path"}
    assert oracle[engine]["eagle_short"] == oracle[engine]["eagle"]
    spelled = {f.spelled: f.dest for f in short.deployment.flags}
    assert spelled["--speculative-algo"] == "speculative_algorithm" and spelled["--tp"] == "tp_size"
    assert spelled["--mem-fraction"] == "mem_fraction_static" and spelled["--trust-remote"] == "trust_remote_code"


def test_every_flag_of_the_command_is_among_the_settings() -> None:
    result = _check(EAGLE_SHORT, "sglang==0.5.23")
    assert result.deployment is not None
    for flag in result.deployment.flags:
        assert flag.dest in result.deployment.settings, flag
    assert result.deployment.settings["trust_remote_code"].modelled is False  # changes no buffer
    assert result.deployment.settings["mem_fraction_static"].modelled is True  # sizes the KV pool estimate
    assert result.deployment.settings["speculative_num_steps"].modelled is True


def test_an_environment_variable_the_engine_reads_changes_its_answer(oracle: dict[str, Any]) -> None:
    # 0.5.10 turns the overlap scheduler off for EAGLE unless SGLANG_ENABLE_SPEC_V2 is set
    without, with_v2 = oracle["sglang==0.5.10"]["topk1"], oracle["sglang==0.5.10"]["topk1_spec_v2"]
    assert without["disable_overlap_schedule"] != with_v2["disable_overlap_schedule"]
    checked = [_check(EAGLE_TOPK1, "sglang==0.5.10", env).deployment for env in ({}, {"SGLANG_ENABLE_SPEC_V2": "True"})]
    assert [d.settings["disable_overlap_schedule"].value for d in checked if d] == \
           [without["disable_overlap_schedule"], with_v2["disable_overlap_schedule"]]


@pytest.mark.parametrize("engine", RELEASES)
def test_a_command_the_engine_refuses_gets_the_engines_message(oracle: dict[str, Any], engine: str) -> None:
    refused = oracle[engine]["too_long"]["error"]
    with pytest.raises(PreflightError) as info:
        _check(TOO_LONG, engine)
    assert refused.splitlines()[0] in str(info.value) and f"{engine} refuses the command" in str(info.value)


def test_a_command_the_parser_refuses_gets_argparses_message(oracle: dict[str, Any]) -> None:
    message = oracle["sglang==0.5.23"]["ambiguous"]["parser_error"]
    assert "ambiguous option" in message
    with pytest.raises(PreflightError, match="its parser") as info:
        _check(AMBIGUOUS, "sglang==0.5.23")
    assert message in str(info.value)
    assert "error" not in oracle["sglang==0.5.10"]["ambiguous"] and "parser_error" not in oracle["sglang==0.5.10"]["ambiguous"]


def test_a_model_that_is_nowhere_is_undecided_naming_what_to_give() -> None:
    result = _check(["--model-path", "/mnt/models/QwQ-32B/"], "sglang==0.5.23")
    assert result.status == UNDECIDED and result.deployment is None
    assert "/mnt/models/QwQ-32B/" in result.verdict and "--model-config" in result.verdict
    missing = _check(["--model-path", "org/not-in-the-cache"], "sglang==0.5.23")
    assert missing.status == UNDECIDED and str(HF_CACHE) in missing.verdict


def test_model_config_and_a_local_directory_are_read_by_the_engine(tmp_path: Path) -> None:
    source = next((HF_CACHE / "models--Qwen--Qwen3-32B" / "snapshots").iterdir()) / "config.json"
    by_config = _check(["--model-path", "/mnt/models/Qwen3-32B"], "sglang==0.5.23", model_config=str(source))
    local = tmp_path / "Qwen3-32B"
    local.mkdir()
    shutil.copyfile(source, local / "config.json")
    by_directory = _check(["--model-path", str(local)], "sglang==0.5.23")
    from_cache = _check(["--model-path", "Qwen/Qwen3-32B"], "sglang==0.5.23")
    assert by_config.deployment and by_directory.deployment and from_cache.deployment
    contexts = {r.deployment.geometry.context_len for r in (by_config, by_directory, from_cache) if r.deployment}
    assert contexts == {json.loads(source.read_text())["max_position_embeddings"]}  # no rope scaling in this config
    assert "--model-config" in by_config.deployment.model.found and "local directory" in by_directory.deployment.model.found


def test_the_verdict_names_the_release_and_why() -> None:
    given = _check(NGRAM, "sglang==0.5.23")
    assert given.choice.line.startswith("sglang==0.5.23 (--engine)") and given.verdict
    default = check(" ".join([*LAUNCH, *NGRAM]), gpu="h100", progress=None)
    assert default.choice.release == release_choice.choose("sglang", None).release
    assert default.choice.reason in ("installed in this environment", "the newest listed release; no sglang installed here")


def test_no_engine_process_outlives_a_stop() -> None:
    _check(NGRAM, "sglang==0.5.23")
    running = launch_service.running()
    assert running
    pids = [int(path.with_suffix(".pid").read_text()) for path in running]
    launch_service.stop_all()
    assert not launch_service.running()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_new_engine_process_past_the_limit_stops_the_least_recently_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """Walking a version dropdown starts one process per release; only the most recent ones stay."""
    launch_service.stop_all()
    monkeypatch.setenv("WORKBENCH_ENGINE_PROCESSES", "1")
    _check(NGRAM, "sglang==0.5.23")
    first = launch_service.running()
    _check(NGRAM, "sglang==0.5.10")
    now = launch_service.running()
    assert len(first) == 1 and len(now) == 1 and now != first and "0.5.10" in now[0].name
    launch_service.stop_all()


@pytest.mark.parametrize("gpu, model, flags, env, buffer, pages", [
    ("b200", "Qwen/Qwen3-32B", ["--attention-backend", "trtllm_mha", "--page-size", "16"], {}, "page_table", 32768 // 16),
    ("b200", "deepseek-ai/DeepSeek-V3", ["--tp", "8", "--attention-backend", "trtllm_mla", "--page-size", "32"], {},
     "decode_cuda_graph_kv_indices", 32768 // 32),
    # AITER reads the 2-D table in the verify only on its unified path (an MHA model: the variable)
    ("mi300x", "Qwen/Qwen3-32B", ["--attention-backend", "aiter", "--page-size", "1"],
     {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"}, "cuda_graph_page_table", 32768),
])
def test_every_modelled_page_table_backend_gets_its_row_from_a_launch(gpu: str, model: str, flags: list[str],
                                                                     env: dict[str, str], buffer: str, pages: int) -> None:
    """A launch naming the backend (on a GPU the engine starts it on, with a model it runs there: an
    MLA one for TRT-LLM MLA) gets that backend's table row: cdiv(ctx, ps) pages, blind to the 16 draft
    tokens, so a verify first reads past it at ctx - D + 1 = 32753, below the scheduler's reach (the row is reached)."""
    result = _check(["--model-path", model, "--context-length", "32768", *flags, "--speculative-algorithm",
                     "NGRAM", "--speculative-num-draft-tokens", "16", "--speculative-ngram-max-bfs-breadth", "1"],
                    "sglang==0.5.23", env=env, gpu=gpu)
    row = next(r for r in result.rows if r.buffer == buffer and r.mode == "target-verify")
    assert row.width == pages and row.first_failing == 32768 - 16 + 1 and row.reachable, row
