"""workbench check on bad input: one line, exit 2, no traceback.

A launch command is refused only by its engine: its parser (argparse's messages) or its start-up
checks (SGLang's messages found in the wheel's source, vLLM's config classes validated by pydantic).
The check's own options are checked by the workbench.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from workbench import cli

SG = "python -m sglang.launch_server --model-path Qwen/Qwen3-32B"
GLM = "python -m sglang.launch_server --model-path zai-org/GLM-5"
VL = "vllm serve Qwen/Qwen3-8B"
MTP = "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'"
E = ["--engine", "sglang==0.5.23"]
V = ["--engine", "vllm==0.33.0"]
REFUSES = "sglang==0.5.23 refuses the command"
REFUSES_V = "vllm==0.33.0 refuses the command"

# (id, argv after "check", substrings the one line must hold). Each engine's come from its own parser
# (Python's argparse messages, vLLM's FlexibleArgumentParser) or its start-up checks (SGLang's text
# checked against the wheel's source in test_sglang_start_up_refusals_are_in_its_source; vLLM's
# config classes validated by pydantic).
CASES = [
    ("unknown-flag", [*E, "--cmd", SG + " --contxt-length 32768"],
     [REFUSES, "its parser", "unrecognized arguments: --contxt-length 32768"]),
    ("context-not-int", [*E, "--cmd", SG + " --context-length lots"], [REFUSES, "argument --context-length", "'lots'"]),
    ("bad-algorithm", [*E, "--cmd", SG + " --speculative-algorithm MEDUSA"], [REFUSES, "Unknown speculative algorithm name: MEDUSA"]),
    ("dflash-without-draft", [*E, "--cmd", SG + " --speculative-algorithm dflash"],
     [REFUSES, "DFLASH speculative decoding requires setting --speculative-draft-model-path."]),
    ("bad-attention-backend", [*E, "--cmd", SG + " --attention-backend flash"],
     [REFUSES, "argument --attention-backend: invalid choice: 'flash'", "'fa3'", "'ascend'"]),
    ("topk-without-steps", [*E, "--cmd", GLM + " --speculative-algorithm EAGLE --speculative-eagle-topk 1"],
     [REFUSES, "_handle_eagle_family", "AssertionError"]),
    ("context-past-the-models", [*E, "--cmd", SG + " --context-length 1000000"],
     [REFUSES, "User-specified context_length (1000000) is greater than the derived context_length (40960)"]),
    ("ambiguous-abbreviation", [*E, "--cmd", SG + " --cuda-graph-max-bs 16"],
     [REFUSES, "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"]),
    ("flag-without-value", [*E, "--cmd", SG + " --page-size"], [REFUSES, "argument --page-size: expected one argument"]),
    ("switch-with-value", [*E, "--cmd", SG + " --disable-cuda-graph=1"],
     [REFUSES, "argument --disable-cuda-graph: ignored explicit argument '1'"]),
    ("missing-model", [*E, "--cmd", "python -m sglang.launch_server --context-length 4096"],
     [REFUSES, "the following arguments are required: --model-path/--model"]),
    ("unknown-vllm-flag", [*V, "--cmd", VL + " --max-model-length 4096"],
     [REFUSES_V, "its parser", "unrecognized arguments: --max-model-length 4096"]),
    ("spec-config-not-json", [*V, "--cmd", VL + " --speculative-config '{\"method\": \"mtp\"'"],
     [REFUSES_V, "argument --speculative-config/-sc", "cannot be converted"]),
    ("spec-config-not-object", [*V, "--cmd", VL + " --speculative-config '[1, 2]'"],
     [REFUSES_V, "create_speculative_config", "'list' object has no attribute 'items'"]),
    ("spec-config-unknown-key", [*V, "--cmd", VL + " --speculative-config '{\"methd\": \"mtp\"}'"],
     [REFUSES_V, "validation error for SpeculativeConfig", "methd", "Unexpected keyword argument"]),
    ("spec-config-bad-method", [*V, "--cmd", VL + " --speculative-config '{\"method\": \"mtpx\", \"num_speculative_tokens\": 1}'"],
     [REFUSES_V, "validation error for SpeculativeConfig", "method", "'ngram'", "'eagle3'"]),
    ("spec-config-zero-tokens", [*V, "--cmd", VL + " --speculative-config '{\"method\": \"eagle\", \"num_speculative_tokens\": 0}'"],
     [REFUSES_V, "num_speculative_tokens", "Input should be greater than 0"]),
    ("max-model-len-past-the-models", [*V, "--cmd", VL + " --max-model-len 2G"],
     [REFUSES_V, "User-specified max_model_len (2147483648) is greater than the derived max_model_len"]),
    ("dcp-does-not-divide-tp", [*V, "--cmd", VL + " -tp 8 -dcp 3"], [REFUSES_V, "tp_size=8 must be divisible by dcp_size=3"]),
    ("unknown-engine-version", ["--engine", "sglang==9.9.9", "--cmd", SG], ["--engine", "'sglang==9.9.9'", "not a listed release",
                                                                          "sglang==0.5.0rc2 to sglang==0.5.23"]),
    ("engine-of-other-family", ["--engine", "vllm==0.23.0", "--cmd", SG], ["--engine", "vllm version", "launches sglang"]),
    ("not-a-launch", ["--cmd", "python train.py --lr 3e-4"], ["command", "no SGLang or vLLM launch", "vllm serve"]),
    ("unclosed-quote", ["--cmd", VL + " --speculative-config '{\"method\": 1"], ["command", "quotes"]),
    ("no-command", [], ["check", "give the launch command once"]),
    ("two-commands", ["--cmd", SG, "--", *SG.split()], ["check", "once"]),
    ("missing-file", ["--from-file", "/nonexistent/launch.sh"], ["--from-file", "cannot read"]),
    ("overshoot-negative", [*E, "--overshoot", "-1", "--cmd", SG], ["--overshoot", "0 to 1024"]),
    ("overshoot-not-int", ["--overshoot", "two", "--cmd", SG], ["--overshoot", "invalid int value"]),
    ("bad-gpu", ["--gpu", "tpu-v5", "--cmd", SG], ["--gpu", "'tpu-v5'", "h100", "910b"]),
    ("allow-unknown-gone", ["--allow-unknown", "--cmd", SG], ["unrecognized arguments: --allow-unknown"]),
    ("config-missing", ["--model-config", "/nonexistent/config.json", "--cmd", SG], ["--model-config", "cannot read"]),
]


@pytest.fixture(autouse=True)
def _hf_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(Path(__file__).parent / "data" / "hf_cache" / "hub"))


def _check(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    out = io.StringIO()
    status = cli.main(["check", *argv], out)
    captured = capsys.readouterr()
    return status, out.getvalue(), captured.err


@pytest.mark.parametrize("argv, expected", [
    pytest.param(a, e, id=name, marks=[pytest.mark.engine] if a[:2] in (E, V) else []) for name, a, e in CASES])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], expected: list[str], capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    if "sglang==9.9.9" in argv:  # a release not listed is asked of the package index: none on this port, no internet
        monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    status, out, err = _check(argv, capsys)
    assert status == 2, out
    assert out == ""  # nothing printed as if it had run
    progress = ("workbench: loading ", "workbench: fetching ")  # a release's first use says so, on stderr
    lines = [line for line in err.strip().splitlines() if not line.startswith(progress) and " loaded in " not in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    for part in expected:
        assert part in lines[0], lines[0]


def test_at_least_twenty_bad_inputs() -> None:
    assert len(CASES) >= 20


@pytest.mark.engine
def test_sglang_start_up_refusals_are_in_its_source() -> None:
    """The start-up messages above are the engine's: each is in the 0.5.23 wheel's own source."""
    from workbench.engines.store import wheels

    source = "\n".join(p.read_text(errors="replace") for p in (wheels.fetch("sglang==0.5.23").package_dir / "srt").rglob("*.py")
                       if p.parent.name in ("arg_groups", "speculative", "configs"))
    for text in ("Unknown speculative algorithm name: ", "is greater than the derived context_length",
                 "DFLASH speculative decoding requires setting --speculative-draft-model-path."):
        assert text in source, text


@pytest.mark.engine
def test_a_model_found_nowhere_is_undecided(capsys: pytest.CaptureFixture[str]) -> None:
    nowhere = ["--engine", "sglang==0.5.23", "--cmd", "python -m sglang.launch_server --model-path acme/Mystery-7B"]
    status, out, _ = _check(nowhere, capsys)
    assert status == 3 and "acme/Mystery-7B" in out and "--model-config" in out


@pytest.mark.engine
def test_a_config_json_gives_the_context_length_as_the_engine_derives_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """YaRN with factor 4 on max_position_embeddings 32768. The engine's rule (get_context_length,
    as read in its source): the first context key times the rope factor, the factor being 1 when
    rope_scaling holds original_max_position_embeddings. Whether it does is up to the transformers
    the release pins (5.19 for 0.5.23 fills it in): asked here of that transformers, run apart."""
    import json
    import subprocess
    import sys

    from workbench.engines.store import wheels

    folder = tmp_path / "QwQ-32B"
    folder.mkdir()
    (folder / "config.json").write_text(
        '{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "max_position_embeddings": 32768, '
        '"rope_scaling": {"type": "yarn", "factor": 4.0}, "num_hidden_layers": 64, "vocab_size": 152064, '
        '"num_key_value_heads": 8, "hidden_size": 5120, "num_attention_heads": 40, "intermediate_size": 27648}')
    deps = wheels.fetch("sglang==0.5.23").deps
    script = (f"import sys; sys.path.insert(0, {str(deps)!r}); from transformers import AutoConfig; "
              f"c = AutoConfig.from_pretrained({str(folder)!r}); print('original_max_position_embeddings' in c.rope_scaling)")
    filled = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300).stdout.split()[-1]
    expected = 32768 if filled == "True" else 32768 * 4
    status, out, err = _check(["--engine", "sglang==0.5.23", "--json", "--model-config", str(folder / "config.json"), "--cmd",
                               "python -m sglang.launch_server --model-path /mnt/models/QwQ-32B --device npu"], capsys)
    assert out, err
    data = json.loads(out)
    context = next(s for s in data["settings"] if s["name"] == "context_len")
    assert status in (0, 1) and context["value"] == expected and context["origin"] == "engine"
    assert "--model-config" in data["model"]["found"]


@pytest.mark.engine
def test_a_check_option_after_the_separator_is_the_engines_to_refuse(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _check(["--", *SG.split(), "--engine", "sglang==0.5.23"], capsys)
    # 0.5.23's argparse takes --engine as an abbreviation of --engine-info-bootstrap-port
    assert status == 2 and "argument --engine-info-bootstrap-port: invalid int value: 'sglang==0.5.23'" in err
    assert "--engine is an option of workbench check: put it before --" in err


def _record(name: str) -> str:
    """A real launch command of the data set (tests/data/launch_commands.jsonl), as published."""
    import json

    path = Path(__file__).parent / "data" / "launch_commands.jsonl"
    found = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    command: str = next(r["command"] for r in found if r["id"] == name)
    return command


@pytest.mark.engine
@pytest.mark.parametrize("name, engine, by, message", [
    # the data set's notes quote each release's own message (parsed with its argparse, or its start-up check)
    ("sglang-docs-spec-eagle2-llama2-7b", "sglang==0.5.23", "parser",
     "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"),
    ("sglang-issue-34260-kimi-k3-hf-snapshot-path-unquoted-json", "sglang==0.5.23", "parser",
     "unrecognized arguments: true,num_threads: 4}"),
    # a start-up check's refusal (the message is in the wheel's source: test_sglang_start_up_refusals_are_in_its_source)
    ("", "sglang==0.5.23", None, "User-specified context_length (1000000) is greater than the derived context_length (40960)"),
])
def test_json_prints_one_object_when_the_engine_refuses(name: str, engine: str, by: str | None, message: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints one JSON object for a refusal too: status 2, the release, what refused the
    command (its parser, or the engine function that raised) and the engine's own message."""
    import json

    command = _record(name) if name else SG + " --context-length 1000000"
    status, out, err = _check(["--engine", engine, "--json", "--cmd", command], capsys)
    assert status == 2 and "Traceback" not in err
    data = json.loads(out)  # one object, nothing else on stdout
    assert data["status"] == 2 and data["release"] == engine and message in data["message"]
    assert data["error"].startswith(f"{engine} refuses the command") and message in data["error"]
    if by is not None:
        assert data["refused_by"] == by
    else:  # a start-up check: the engine function that raised, module.qualname
        assert data["refused_by"] not in ("", "parser") and "." in data["refused_by"]


def test_json_prints_one_object_for_the_checks_own_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    status, out, _ = _check(["--json", "--gpu", "no-such-gpu", "--cmd", SG], capsys)
    data = json.loads(out)
    assert status == 2 and data["status"] == 2 and "no-such-gpu" in data["error"] and "refused_by" not in data
