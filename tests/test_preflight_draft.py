"""The draft model's config is found and named as the target's is: a local folder, the Hugging Face
cache, or the check's ``--draft-model-config``; a draft found nowhere is said to be the draft's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from check_json import check_json, launch_command

DATA = Path(__file__).parent / "data"
HUB = DATA / "hf_cache" / "hub"


@pytest.mark.engine
def test_a_draft_found_nowhere_is_the_drafts_not_the_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cookbook's Kimi-K2.5 EAGLE3 launch: the data set's cache holds the target's config, not the
    draft's; the answer names the draft and the options that give it."""
    monkeypatch.setenv("HF_HUB_CACHE", str(HUB))
    command = launch_command("sgl-cookbook-nvidia-kimi-k25-nvfp4-specv2-eagle3-fp8-kv")
    status, data = check_json(["--engine", "sglang==0.5.23", "--cmd", command])
    verdict = str(data["verdict"])
    assert status == 3 and verdict.startswith("UNDECIDED: --speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3")
    assert "--draft-model-config" in verdict and "generation_config" not in verdict


@pytest.mark.engine
def test_the_draft_config_flag_gives_the_drafts_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs' STANDALONE launch (Qwen2.5-7B with Qwen2.5-1.5B as its draft) under 0.5.19, whose
    parser takes --cuda-graph-max-bs: with a cache holding only the target, the draft is what is
    missing; --draft-model-config gives its config.json and the check decides, naming where the
    draft's config came from."""
    shutil.copytree(HUB / "models--Qwen--Qwen2.5-7B-Instruct", tmp_path / "models--Qwen--Qwen2.5-7B-Instruct")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    command = launch_command("sglang-docs-spec-standalone-qwen25-7b")
    status, data = check_json(["--engine", "sglang==0.5.19", "--cmd", command])
    assert status == 3 and str(data["verdict"]).startswith("UNDECIDED: --speculative-draft-model-path Qwen/Qwen2.5-1.5B-Instruct")
    draft_config = next((HUB / "models--Qwen--Qwen2.5-1.5B-Instruct" / "snapshots").glob("*/config.json"))
    status, data = check_json(["--engine", "sglang==0.5.19", "--draft-model-config", str(draft_config), "--cmd", command])
    assert status in (0, 1), data["verdict"]
    assert f"draft model: Qwen/Qwen2.5-1.5B-Instruct, config from --draft-model-config {draft_config}" in data["notes"]  # type: ignore[operator]
    status, data = check_json(["--engine", "sglang==0.5.19", "--draft-model-config", str(tmp_path / "none.json"), "--cmd", command])
    assert status == 2 and "--draft-model-config" in str(data["error"])
