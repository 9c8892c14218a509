"""A refusal that names a stand-in is never the engine's answer (issue 38): the rule, on its own.

The stand-in texts below are made by the stand-ins themselves (``standins.stand_in``, the runner
stand-in), and the refusals are raised from a file inside a throw-away "engine package", so
``is_refusal`` sees what it sees in an engine process: the innermost frame the engine's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workbench.engines.commands.adapter_common import is_refusal, refusal_naming_stand_in, stand_in_stop
from workbench.engines.commands.adapters import REJECTED, RESOLVED, UNDECIDED, Resolution
from workbench.engines.sandbox.standins import names_stand_in, stand_in, stand_in_named
from workbench.engines.sglang.launch_runner import RunnerStandIn

# What 0.5.3's ModelConfig._verify_quantization put in its message: a stood-in vLLM config's answer.
AQLM = stand_in("vllm.model_executor.layers.quantization.aqlm.AQLMConfig.override_quantization_method")()


def _runner_error() -> AttributeError:
    try:
        RunnerStandIn().attn_backend  # noqa: B018 - the runner stand-in's own error for a field it lacks
    except AttributeError as error:
        return error
    raise AssertionError("the runner stand-in answered a field it does not have")


@pytest.mark.parametrize("text", [
    f"Unknown quantization method: {AQLM}. Must be one of ['fp8', 'awq'].",
    f"{stand_in('torch.npu.Stream')!r} is not a stream",
    str(_runner_error()),
    "StandInCalled: torch_npu.npu_format_cast is a stand-in (the library is not installed)",
    "cannot pickle workbench.engines.sandbox.standins object",
])
def test_a_text_made_of_a_stand_in_names_it(text: str) -> None:
    assert names_stand_in(text), text


@pytest.mark.parametrize("text", [
    "Input length (32762 tokens) exceeds the maximum allowed length (32762 tokens).",
    "2 outstanding requests; notwithstanding the page size, NGRAM is not supported on npu",
    "Unknown quantization method: fp9. Must be one of ['fp8', 'awq'].",
    "",
])
def test_an_engine_message_names_no_stand_in(text: str) -> None:
    assert not names_stand_in(text), text


def _raised_in_engine(package: Path, message: str, cause: BaseException | None = None) -> ValueError:
    """A ValueError raised by a function whose file is inside ``package`` (as the engine's own)."""
    source = "def verify(message, cause):\n    raise ValueError(message) from cause\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, str(package / "srt" / "configs" / "model_config.py"), "exec"), namespace)
    try:
        namespace["verify"](message, cause)
    except ValueError as error:
        return error
    raise AssertionError("verify returned")


def test_an_engine_refusal_naming_a_stand_in_is_not_a_refusal(tmp_path: Path) -> None:
    package = tmp_path / "sglang"
    plain = _raised_in_engine(package, "Unknown quantization method: fp9.")
    assert is_refusal(plain, package)  # the control: the same function, the user's bad value, is a refusal
    assert stand_in_stop(plain, "sglang==0.5.3", "_verify_quantization") is None

    stood_in = _raised_in_engine(package, f"Unknown quantization method: {AQLM}.")
    assert not is_refusal(stood_in, package)
    line = stand_in_stop(stood_in, "sglang==0.5.3", "_verify_quantization (sglang/srt/configs/model_config.py:606)")
    assert line is not None and "not on the command" in line and "_verify_quantization" in line
    assert str(AQLM) in line  # the stand-in is named, so the gap can be found


def test_a_refusal_raised_from_a_stand_in_names_it_through_its_cause(tmp_path: Path) -> None:
    package = tmp_path / "sglang"
    error = _raised_in_engine(package, "invalid attention backend", cause=_runner_error())
    assert "stand-in" not in str(error)
    assert stand_in_named(error) == str(error.__cause__)
    assert not is_refusal(error, package)
    line = stand_in_stop(error, "sglang==0.5.1", "model_specific_adjustment")
    assert line is not None and "raised from" in line and "runner stand-in" in line


def test_a_rejected_resolution_naming_a_stand_in_becomes_undecided() -> None:
    message = f"Unknown quantization method: {AQLM}. Must be one of ['fp8']."
    rejected = Resolution("sglang==0.5.3", REJECTED, message, "ModelConfig._verify_quantization")
    undecided = refusal_naming_stand_in(rejected)
    assert undecided.status == UNDECIDED and undecided.rejected_by == ""
    assert "ModelConfig._verify_quantization" in undecided.message and "not the engine's answer" in undecided.message

    refused = Resolution("sglang==0.5.23", REJECTED, "NGRAM is not supported on npu", "ServerArgs._handle_npu")
    assert refusal_naming_stand_in(refused) is refused  # the engine's own refusal stands
    resolved = Resolution("sglang==0.5.23", RESOLVED, "", notes=(f"a note about {AQLM}",))
    assert refusal_naming_stand_in(resolved) is resolved  # only refusals are re-read
