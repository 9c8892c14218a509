"""A check fetches the config files the engine's loader reads from the hub, never a weights file,
into the user's own Hugging Face cache; offline it names what to fetch. The hub here is a stand-in
on 127.0.0.1 (``hub_standin``) serving the data set's cache: no test reaches the internet."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from check_json import check_json, launch_command
from hub_standin import StandInHub

from workbench.engines.sandbox import hub_fetch

DATA = Path(__file__).parent / "data"
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".index.json")


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StandInHub]:
    """The stand-in hub, gating Llama-3.1-8B-Instruct as the real hub does; an empty user cache."""
    with StandInHub(DATA / "hf_cache" / "hub", gated={"meta-llama/Llama-3.1-8B-Instruct"}) as standin:
        monkeypatch.setenv("HF_ENDPOINT", standin.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield standin
    assert not [f for f in standin.asked_files() if f.endswith(WEIGHTS)], standin.requests  # never a weights file


def test_only_config_files_and_code_modules_may_be_fetched() -> None:
    for name in ("model.safetensors", "pytorch_model.bin", "model-00001-of-00163.safetensors", "consolidated.pt",
                 "model.gguf", "model.safetensors.index.json", "tokenizer.model", "../config.json"):
        assert not hub_fetch.allowed(name), name
    for name in ("config.json", "generation_config.json", "hf_quant_config.json", "configuration_deepseek.py"):
        assert hub_fetch.allowed(name), name


@pytest.mark.engine
@pytest.mark.parametrize("name", ["sglang-docs-deterministic-qwen3-8b-fa3", "vllm-docs-decisions-api-qwen3-06b-bare"])
def test_a_hub_model_not_downloaded_is_decided(name: str, hub: StandInHub, tmp_path: Path) -> None:
    status, data = check_json(["--cmd", launch_command(name)])
    assert status in (0, 1), data["verdict"]
    assert "config.json" in hub.asked_files()
    model = data["model"]
    assert isinstance(model, dict) and str(tmp_path / "cache") in model["found"] and "fetched from the hub" in model["found"]
    assert list((tmp_path / "cache").glob("models--*/snapshots/*/config.json"))  # into the user's own cache
    again = len(hub.requests)
    status, _ = check_json(["--cmd", launch_command(name)])
    assert status in (0, 1) and not [p for _, p in hub.requests[again:] if p.endswith("/config.json")]  # cached now


@pytest.mark.engine
def test_offline_it_is_undecided_naming_the_model(hub: StandInHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    status, data = check_json(["--cmd", launch_command("sglang-docs-deterministic-qwen3-8b-fa3")])
    verdict = str(data["verdict"])
    assert status == 3 and "Qwen/Qwen3-8B" in verdict and "hf download Qwen/Qwen3-8B config.json" in verdict
    monkeypatch.delenv("HF_HUB_OFFLINE")
    status, data = check_json(["--offline", "--cmd", launch_command("sglang-docs-deterministic-qwen3-8b-fa3")])
    assert status == 3 and "Qwen/Qwen3-8B" in str(data["verdict"])
    assert hub.asked_files() == []


@pytest.mark.engine
def test_a_gated_model_gets_the_hubs_message_and_what_to_do(hub: StandInHub, monkeypatch: pytest.MonkeyPatch) -> None:
    command = launch_command("sglang-docs-deterministic-llama31-8b-fa3")
    status, data = check_json(["--cmd", command])
    verdict = str(data["verdict"])
    assert status == 3 and "Access to model meta-llama/Llama-3.1-8B-Instruct is restricted" in verdict and "HF_TOKEN" in verdict
    monkeypatch.setenv("HF_TOKEN", "hf_stand_in_token")  # the stand-in lets any token through
    status, data = check_json(["--cmd", command])
    assert status in (0, 1), data["verdict"]


@pytest.mark.engine
def test_a_remote_code_launch_asks_for_the_configuration_module(hub: StandInHub) -> None:
    """Kimi-K2.5's config.json names configuration_kimi_k25.KimiK25Config for AutoConfig; with
    --trust-remote-code it is asked for (the data set holds no copy, so the answer names it)."""
    status, data = check_json(["--cmd", launch_command("sglang-docs-kimi-k25-tp8")])
    assert "configuration_kimi_k25.py" in hub.asked_files()
    assert status == 3 and "configuration_kimi_k25.py" in str(data["verdict"])
