"""The real launch commands of ``tests/data`` through ``workbench check``: every one answered or
refused by its engine, every flag understood, and each refusal shown to be the engine's own by
running its code on the command directly, no adapter on the path: SGLang's parser and
``prepare_server_args`` (``engine_oracle.py``), vLLM's console entry point and
``create_engine_config`` (``engine_oracle_vllm.py``).

Slow (every release a command names starts an engine process): run with
``WORKBENCH_LAUNCH_COMMANDS=1 python -m pytest -q tests/test_launch_commands_real.py``.
``scripts/check_launch_commands.py`` prints the same outcomes as a table, with times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from workbench.engines.commands.adapters import to_json
from workbench.engines.store import gpus, wheels
from workbench.preflight import BAD_INPUT, pick_gpu
from workbench.preflight.batch import Outcome, check_all, source_gpu
from workbench.preflight.command import parse_commands

DATA = Path(__file__).parent / "data"
ORACLE = Path(__file__).parent / "engine_oracle.py"
ORACLE_VLLM = Path(__file__).parent / "engine_oracle_vllm.py"

pytestmark = [pytest.mark.engine, pytest.mark.skipif(os.environ.get("WORKBENCH_LAUNCH_COMMANDS") != "1",
                                                     reason="slow: WORKBENCH_LAUNCH_COMMANDS=1 runs every real command")]


@pytest.fixture(scope="module")
def outcomes() -> list[tuple[dict[str, Any], Outcome]]:
    os.environ["HF_HUB_CACHE"] = str(DATA / "hf_cache" / "hub")
    records = [json.loads(line) for line in (DATA / "launch_commands.jsonl").read_text().splitlines() if line.strip()]
    return list(zip(records, check_all(records)))


def _refused(outcomes: list[tuple[dict[str, Any], Outcome]]) -> list[tuple[dict[str, Any], Outcome]]:
    """Each refused launch: a record's own outcome, or each launch's of a text holding several."""
    return [(record, one) for record, outcome in outcomes for one in (outcome.launches or (outcome,))
            if one.status == BAD_INPUT]


def _oracle(engine: str, record: dict[str, Any], launch: int) -> dict[str, Any]:
    """The engine's own code on the record's command (its ``launch``-th launch), on the accelerator
    the batch checked it on."""
    command = parse_commands(record["command"])[launch - 1]
    gpu = gpus.gpu(source_gpu(str(record.get("engine") or ""), command.engine) or pick_gpu(command, None)[0].name)
    install = wheels.fetch(engine)
    job = {"engine": engine, "package_dir": str(install.package_dir), "deps": str(install.deps),
           "gpu": to_json(gpu), "hf_cache": str(DATA / "hf_cache" / "hub"),
           "cases": [{"program": command.program, "argv": list(command.argv), "env": command.env, "names": []}]}
    oracle = ORACLE_VLLM if engine.startswith("vllm==") else ORACLE
    done = subprocess.run([sys.executable, str(oracle)], input=json.dumps(job), capture_output=True, text=True, timeout=900)
    answer: dict[str, Any] = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    return answer


def test_every_command_is_answered_or_refused_by_its_engine(outcomes: list[tuple[dict[str, Any], Outcome]]) -> None:
    statuses = [o.status for _, o in outcomes]
    assert len(outcomes) >= 40 and set(statuses) <= {0, 1, 2, 3}
    for record, outcome in _refused(outcomes):  # only the engine refuses a command the shell reading found
        assert " refuses the command (" in outcome.verdict, (record["id"], outcome.verdict)


def test_every_flag_of_an_answered_command_is_understood(outcomes: list[tuple[dict[str, Any], Outcome]]) -> None:
    assert [(r["id"], o.unmodelled_flags) for r, o in outcomes if o.unmodelled_flags] == []


def test_each_sglang_refusal_is_sglangs_own(outcomes: list[tuple[dict[str, Any], Outcome]]) -> None:
    refused = [(r, o) for r, o in _refused(outcomes) if o.engine == "sglang"]
    for record, outcome in refused:
        answer = _oracle(outcome.release, record, outcome.launch)
        message = answer.get("parser_error") or answer.get("error")
        assert message, (record["id"], answer)
        assert message.splitlines()[0].strip()[:200] in outcome.verdict, (record["id"], message, outcome.verdict)


def _engine_sentence(message: str) -> str:
    """The engine's own first line: inside a pydantic ``ValidationError`` (vLLM's config classes
    validate on construction), the ``Value error, ...`` it carries, without pydantic's suffix."""
    for line in message.splitlines():
        if "Value error, " in line:
            return line.split("Value error, ", 1)[1].split(" [type=", 1)[0].strip()[:200]
    return message.splitlines()[0].strip()[:200]


def test_each_vllm_refusal_is_vllms_own(outcomes: list[tuple[dict[str, Any], Outcome]]) -> None:
    """vLLM's console entry point and ``create_engine_config``, run on the command without the
    adapter (``engine_oracle_vllm.py``), refuse it with the message the verdict gives."""
    refused = [(r, o) for r, o in _refused(outcomes) if o.release.startswith("vllm==")]
    for record, outcome in refused:
        answer = _oracle(outcome.release, record, outcome.launch)
        message = answer.get("parser_error") or answer.get("error")
        assert message, (record["id"], answer)
        assert _engine_sentence(message) in outcome.verdict, (record["id"], message, outcome.verdict)
