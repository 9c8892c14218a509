"""workbench check on bad input: one line naming the flag and what is allowed, exit 2, no traceback.

The allowed values quoted come from the engines' own definitions (SGLang 0.5.23's
``srt/arg_groups/choices.py`` and ``fields/*.py``, vLLM's ``config/speculative.py``) or from the
workbench's documented ranges (``model/geometry.py``), not from the messages themselves.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from workbench import cli

SG = "python -m sglang.launch_server --model-path Qwen/QwQ-32B"
GLM = "python -m sglang.launch_server --model-path zai-org/GLM-5.2"
VL = "vllm serve zai-org/GLM-5.2-FP8"
MTP = "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'"

# (id, argv after "check", substrings the one line must hold)
CASES = [
    ("unknown-flag", ["--cmd", SG + " --contxt-length 32768"], ["--contxt-length", "nearest: --context-length", "--allow-unknown"]),
    ("unknown-vllm-flag", ["--cmd", VL + " --max-model-length 4096"], ["--max-model-length", "nearest: --max-model-len"]),
    ("spec-config-not-json", ["--cmd", VL + " --speculative-config '{\"method\": \"mtp\"'"],
     ["--speculative-config", "not valid JSON"]),
    ("spec-config-not-object", ["--cmd", VL + " --speculative-config '[1, 2]'"], ["--speculative-config", "not a JSON object"]),
    ("spec-config-unknown-key", ["--cmd", VL + " --speculative-config '{\"methd\": \"mtp\"}'"],
     ["--speculative-config", "'methd'", "nearest: method"]),
    ("spec-config-bad-method", ["--cmd", VL + " --speculative-config '{\"method\": \"mtpx\", \"num_speculative_tokens\": 1}'"],
     ["--speculative-config", "'mtpx'", "ngram", "eagle3"]),
    ("spec-config-zero-tokens", ["--cmd", VL + " --speculative-config '{\"method\": \"eagle\", \"num_speculative_tokens\": 0}'"],
     ["num_speculative_tokens", "1 to 1024"]),
    ("unknown-model", ["--cmd", "python -m sglang.launch_server --model-path acme/Mystery-7B"],
     ["--model-path", "'acme/Mystery-7B'", "not a known model", "Qwen/QwQ-32B", "--model-config"]),
    ("unknown-vllm-model", ["--cmd", "vllm serve acme/Mystery-7B"], ["MODEL", "not a known model"]),
    ("missing-model", ["--cmd", "python -m sglang.launch_server --context-length 4096"], ["--model-path", "missing"]),
    ("missing-vllm-model", ["--cmd", "vllm serve --max-model-len 4096"], ["MODEL", "missing"]),
    ("context-not-int", ["--cmd", SG + " --context-length lots"], ["--context-length", "'lots'", "not an integer"]),
    ("context-zero", ["--cmd", SG + " --context-length 0"], ["--context-length", "out of range", "1 to 16777216"]),
    ("max-model-len-too-big", ["--cmd", VL + " --max-model-len 2G"], ["--max-model-len", "out of range"]),
    ("page-size-too-big", ["--cmd", SG + " --page-size 5000"], ["--page-size", "out of range", "1 to 4096"]),
    ("draft-tokens-too-many", ["--cmd", SG + " --speculative-algorithm NGRAM --speculative-num-draft-tokens 2000"],
     ["--speculative-num-draft-tokens", "1 to 1024"]),
    ("graph-bs-zero", ["--cmd", SG + " --cuda-graph-max-bs 0"], ["--cuda-graph-max-bs", "out of range"]),
    ("conservativeness-negative", ["--cmd", SG + " --schedule-conservativeness -1"], ["--schedule-conservativeness", "0.0 or more"]),
    ("bad-algorithm", ["--cmd", SG + " --speculative-algorithm MEDUSA"],
     ["--speculative-algorithm", "'MEDUSA'", "EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO"]),
    ("unmodelled-algorithm", ["--cmd", SG + " --speculative-algorithm dflash"], ["--speculative-algorithm", "DFLASH", "not modelled"]),
    ("bad-device", ["--cmd", SG + " --device tpu"], ["--device", "'tpu'", "cuda, xpu, hpu, npu, cpu, musa"]),
    ("bad-attention-backend", ["--cmd", SG + " --attention-backend flash"], ["--attention-backend", "'flash'", "fa3", "ascend"]),
    ("topk-without-steps", ["--cmd", GLM + " --speculative-algorithm EAGLE --speculative-eagle-topk 1"],
     ["--speculative-eagle-topk", "without --speculative-num-steps"]),
    ("steps-without-topk", ["--cmd", GLM + " --speculative-algorithm EAGLE --speculative-num-steps 3"],
     ["--speculative-eagle-topk", "missing"]),
    ("topk-without-draft-tokens",
     ["--cmd", SG + " --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 4"],
     ["--speculative-num-draft-tokens", "missing"]),
    ("flag-without-value", ["--cmd", SG + " --page-size"], ["--page-size", "expects a value"]),
    ("switch-with-value", ["--cmd", SG + " --disable-cuda-graph=1"], ["--disable-cuda-graph", "takes no value"]),
    ("dcp-does-not-divide-tp", ["--cmd", VL + " -tp 8 -dcp 3"], ["--decode-context-parallel-size", "3", "does not divide"]),
    ("unknown-engine-version", ["--engine", "sglang==9.9.9", "--cmd", SG], ["--engine", "'sglang==9.9.9'", "sglang==0.5.23"]),
    ("engine-of-other-family", ["--engine", "vllm==0.23.0", "--cmd", SG], ["--engine", "vllm version", "launches sglang"]),
    ("not-a-launch", ["--cmd", "python train.py --lr 3e-4"], ["command", "not an SGLang or vLLM launch", "vllm serve"]),
    ("unclosed-quote", ["--cmd", VL + " --speculative-config '{\"method\": 1"], ["command", "quotes"]),
    ("no-command", [], ["check", "give the launch command once"]),
    ("two-commands", ["--cmd", SG, "--", *SG.split()], ["check", "once"]),
    ("missing-file", ["--from-file", "/nonexistent/launch.sh"], ["--from-file", "cannot read"]),
    ("overshoot-negative", ["--overshoot", "-1", "--cmd", SG], ["--overshoot", "0 to 1024"]),
    ("overshoot-not-int", ["--overshoot", "two", "--cmd", SG], ["--overshoot", "invalid int value"]),
    ("bad-gpu", ["--gpu", "tpu-v5", "--cmd", SG], ["--gpu", "'tpu-v5'", "hopper"]),
    ("config-missing", ["--model-config", "/nonexistent/config.json", "--cmd", SG], ["--model-config", "cannot read"]),
]


def _check(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    out = io.StringIO()
    status = cli.main(["check", *argv], out)
    captured = capsys.readouterr()
    return status, out.getvalue(), captured.err


@pytest.mark.parametrize("argv, expected", [(a, e) for _, a, e in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], expected: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _check(argv, capsys)
    assert status == 2, out
    assert out == ""  # nothing printed as if it had run
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for part in expected:
        assert part in lines[0], lines[0]


def test_at_least_twenty_bad_inputs() -> None:
    assert len(CASES) >= 20


def test_config_without_context_length_or_architectures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    no_context = tmp_path / "config.json"
    no_context.write_text('{"architectures": ["MysteryForCausalLM"], "num_hidden_layers": 2}')
    status, _, err = _check(["--model-config", str(no_context), "--cmd",
                             "python -m sglang.launch_server --model-path acme/Mystery"], capsys)
    assert status == 2 and "--context-length: missing" in err and len(err.strip().splitlines()) == 1
    no_arch = tmp_path / "bad.json"
    no_arch.write_text('{"max_position_embeddings": 4096}')
    status, _, err = _check(["--model-config", str(no_arch), "--cmd", "python -m sglang.launch_server --model-path acme/M"], capsys)
    assert status == 2 and "architectures" in err
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    status, _, err = _check(["--model-config", str(broken), "--cmd", "python -m sglang.launch_server --model-path acme/M"], capsys)
    assert status == 2 and "--model-config" in err and "not JSON" in err


def test_a_config_json_gives_the_context_length(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The engine's rule (hf_transformers/common.py 668-694): the first key present, times the
    rope factor; so 32768 * 4 = 131072 for QwQ with YaRN (docs/engine-facts.md#realistic-settings)."""
    config = tmp_path / "config.json"
    config.write_text('{"architectures": ["Qwen2ForCausalLM"], "max_position_embeddings": 32768, '
                      '"rope_scaling": {"type": "yarn", "factor": 4.0}, "num_hidden_layers": 64, '
                      '"num_key_value_heads": 8, "hidden_size": 5120, "num_attention_heads": 40}')
    status, out, _ = _check(["--json", "--model-config", str(config), "--cmd",
                             "python -m sglang.launch_server --model-path Qwen/QwQ-32B --device npu"], capsys)
    import json

    data = json.loads(out)
    context = next(s for s in data["settings"] if s["name"] == "context_length")
    assert status == 0 and context["value"] == 131072 and context["origin"] == "model"


def test_a_check_option_after_the_separator_says_where_it_belongs(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _check(["--", *SG.split(), "--engine", "sglang==0.5.23"], capsys)
    assert status == 2 and "--engine: is an option of workbench check" in err and "before --" in err
