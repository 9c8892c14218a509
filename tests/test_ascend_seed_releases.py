"""The seed launches under every SGLang release, read by the release's own start-up code (issue 38).

1. The Ascend seed launch (QwQ-32B, EAGLE (15, 1, 16), page 128, context 32768, on the stand-in
   910B) resolves under the releases from 0.5.1 to 0.5.10: their start-up path reaches
   ``torch.npu.Stream`` (``distributed/parallel_state.py``, 0.5.1-0.5.2) and ``torchair``
   (``get_compiler_backend``, 0.5.3-0.5.10), which the NPU stand-ins answer. Each one FAILS with
   the seed's block-table row: the fix (sgl-project/sglang#22778) came with 0.5.12
   (docs/engine-facts.md#seed-ascend-block-tables).
2. Every cached release is fed launches it accepts (the Ascend seed without a graph-batch flag, whose
   spelling changed in 0.5.14, and the DeepSeek-V3.2 EAGLE DSA launch); a refusal naming a stand-in
   fails the test, and so does any other refusal of them.

By default, where cached, (1) under the releases of both failures the issue names (0.5.1.post3: the
stream; 0.5.7: torchair) and (2) under 0.5.3 (its DSA refusal named a stand-in); ``WORKBENCH_ENGINE_VERSIONS=1``: every
release from 0.5.1 to 0.5.10 (the first of each minor version, fetched when absent, and every cached
one) for (1), every cached release for (2). QwQ-32B's config is not in the test data's Hugging Face
cache: Qwen3-32B's (the same family and attention shape) is given for it, as in
test_finding_launches.py.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.engines.commands import launch_service
from workbench.engines.sandbox.standins import names_stand_in
from workbench.engines.store import releases, wheels
from workbench.preflight import FAILS, PreflightError, check, resolve

pytestmark = pytest.mark.engine  # runs released SGLang's own code (its wheel, fetched once)

HF_CACHE = Path(__file__).parent / "data" / "hf_cache" / "hub"
QWQ_CONFIG = str(next((HF_CACHE / "models--Qwen--Qwen3-32B").glob("snapshots/*/config.json")))
ASCEND_ACCEPTED = ("python -m sglang.launch_server --model-path Qwen/QwQ-32B --context-length 32768 --device npu "
                   "--attention-backend ascend --page-size 128 --speculative-algorithm EAGLE --speculative-draft-model-path "
                   "Qwen/Qwen3-8B --speculative-num-steps 15 --speculative-eagle-topk 1 --speculative-num-draft-tokens 16")
# The seed's graph batch 16, spelled as the releases before 0.5.14 spell it.
ASCEND_SEED = f"{ASCEND_ACCEPTED} --cuda-graph-max-bs 16"
DSA = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 --speculative-algorithm EAGLE "
       "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
ALL_RELEASES = os.environ.get("WORKBENCH_ENGINE_VERSIONS") == "1"
SEED_DEFAULT = ("sglang==0.5.1.post3", "sglang==0.5.7")
ACCEPTED_DEFAULT = ("sglang==0.5.3",)


def _minor(engine: str) -> tuple[int, ...]:
    return releases.version_key(engine.split("==", 1)[1])[0][:3]


def _seed_releases() -> list[str]:
    listed = [e for e in releases.releases("sglang") if (0, 5, 1) <= _minor(e) <= (0, 5, 10)]
    if not ALL_RELEASES:
        return list(SEED_DEFAULT)
    firsts = {_minor(e): e for e in reversed(listed)}  # the first listed of each minor version
    return sorted(set(firsts.values()) | {e for e in listed if wheels.cached(e)}, key=lambda e: releases.version_key(
        e.split("==", 1)[1]))


def _cached_releases() -> list[str]:
    return [e for e in releases.releases("sglang") if ALL_RELEASES or e in ACCEPTED_DEFAULT]


@pytest.fixture(autouse=True)
def _hf_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("HF_HUB_CACHE", str(HF_CACHE))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield
    launch_service.stop_all()  # one release's engine processes at a time: each holds its modules


def _available(engine: str, fetch: bool, how: str) -> None:
    if wheels.cached(engine) is None and not fetch:
        pytest.skip(f"{engine} is not in the workbench's engine cache ({how})")


@pytest.mark.parametrize("engine", _seed_releases())
def test_the_ascend_seed_launch_resolves_and_fails_before_the_fix(engine: str) -> None:
    _available(engine, fetch=ALL_RELEASES, how="WORKBENCH_ENGINE_VERSIONS=1 fetches it")
    result = check(ASCEND_SEED, engine=engine, model_config=QWQ_CONFIG, progress=None)
    assert result.deployment is not None, result.verdict  # read by the release's own start-up, not UNDECIDED
    assert not names_stand_in(result.verdict), result.verdict
    for setting in result.deployment.settings.values():
        if setting.origin in ("engine", "given"):  # what is reported as the engine's or the command's
            assert not names_stand_in(f"{setting.value} {setting.source}"), setting
    assert result.status == FAILS, result.verdict
    assert any(r.backend == "sglang-ascend-block-tables" and r.mode == "target-verify" and r.reachable
               for r in result.rows), result.verdict


@pytest.mark.parametrize("engine", _cached_releases())
@pytest.mark.parametrize("command, model_config", [(ASCEND_ACCEPTED, QWQ_CONFIG), (DSA, None)], ids=["ascend", "dsa"])
def test_no_release_refuses_an_accepted_launch_on_a_stand_in(engine: str, command: str, model_config: str | None,
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _available(engine, fetch=False, how=f"the cached releases are checked; workbench engines fetch {engine} adds it")
    if command == DSA:  # 0.5.3-0.5.10 write a patched config beside DeepSeek-V3.2's: into a copy, not the checkout
        shutil.copytree(HF_CACHE / "models--deepseek-ai--DeepSeek-V3.2", tmp_path / "models--deepseek-ai--DeepSeek-V3.2")
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    try:
        resolve(command, engine=engine, model_config=model_config, progress=None)
    except PreflightError as refused:
        assert not names_stand_in(str(refused)), f"a stand-in reported as the engine's refusal: {refused}"
        pytest.fail(f"{engine} refuses a launch it accepts: {refused}")
