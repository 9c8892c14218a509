"""Every finding is a deployment the engine builds: its launch, read by ``workbench check`` with the
release's own parser, resolution and platform, FAILS with the finding's backend and mode as a
reachable row. The latent rows (no released setting launches their step) are listed apart, and the
same check of their launch finds no such row, which is what makes them latent.

The platform decisions of issue 38 come out as 0.5.23 makes them, its own code run in the engine
process: decode graphs are opt-in on XPU (``_handle_xpu_backends``), AITER reads its 2-D page table in
the verify only on the unified path (``AiterAttnBackend.__init__``'s inputs).

Model configs come from the test data's Hugging Face cache; QwQ-32B's is not in it, so Qwen3-32B's
(the same family and attention shape) is given for it as ``--model-config``, and Qwen3-8B's for the
EAGLE draft model the FlashInfer rows' launch leaves to its user (``DRAFT_MODEL``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.engines.store import wheels
from workbench.preflight import FAILS, UNDECIDED, CheckResult, check
from workbench.repro.conditions import backend_entry, conditions
from workbench.repro.findings import Finding, findings, latent_findings, newest_release

HF_CACHE = Path(__file__).parent / "data" / "hf_cache" / "hub"
STAND_IN_CONFIGS = {"Qwen/QwQ-32B": "models--Qwen--Qwen3-32B", "DRAFT_MODEL": "models--Qwen--Qwen3-8B"}
sglang = pytest.mark.engine  # runs a released SGLang's own code (its wheel, fetched once)


def _config(model: str) -> str | None:
    folder = STAND_IN_CONFIGS.get(model)
    return str(next((HF_CACHE / folder).glob("snapshots/*/config.json"))) if folder else None


@pytest.fixture(scope="module")
def release() -> Iterator[str]:
    engine = newest_release()
    if wheels.cached(engine) is None:
        pytest.skip(f"{engine} is not in the workbench's engine cache (workbench engines fetch {engine})")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_CACHE", str(HF_CACHE))
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield engine


def _check_launch(f: Finding) -> CheckResult:
    command = conditions(f).launch_command
    words = command.split()
    model = words[words.index("--model-path") + 1]
    launch = backend_entry(f.backend)["launch"]
    assert isinstance(launch, dict)
    return check(command, engine=f.release, gpu=str(launch["gpu"]), model_config=_config(model),
                 draft_model_config=_config("DRAFT_MODEL") if "DRAFT_MODEL" in words else None, progress=None)


def _reachable(result: CheckResult, f: Finding) -> bool:
    return any(r.backend == f.backend and r.mode == f.mode and r.reachable for r in result.rows)


@sglang
@pytest.mark.slow  # an engine process per GPU the findings stand on (h100, h200, b200, mi300x, max1550): minutes
def test_every_findings_launch_fails_with_its_backend_and_mode(release: str) -> None:
    found = [f for f in findings(release, with_seeds=False)]
    assert found, release
    for f in found:
        result = _check_launch(f)
        assert result.status == FAILS and _reachable(result, f), (f.id, conditions(f).launch_command, result.verdict,
                                                                   [(r.backend, r.mode, r.reachable) for r in result.rows])


@sglang
@pytest.mark.slow  # an engine process per GPU the findings stand on (h100, h200, b200, mi300x, max1550): minutes
def test_latent_rows_are_apart_say_why_and_their_launch_does_not_reach_them(release: str) -> None:
    latent = latent_findings(release)
    built = {f.id for f in findings(release, with_seeds=False)}
    assert latent and not built & {f.id for f in latent}
    for f in latent:
        assert f.status == "latent" and "what would reach it" in f.latent, f.id
        assert f.latent in conditions(f).caveat, f.id
        result = _check_launch(f)
        assert not _reachable(result, f), (f.id, result.verdict)


# ---- issue 38: the platform's own decisions, with and without the opt-in ----------------------

QWQ = _config("Qwen/QwQ-32B")
NGRAM = ("--context-length 32768 --page-size 64 --speculative-algorithm NGRAM --speculative-num-draft-tokens 16 "
         "--speculative-ngram-max-bfs-breadth 1 --cuda-graph-max-bs-decode 32")
XPU = f"python -m sglang.launch_server --model-path Qwen/QwQ-32B --device xpu --attention-backend intel_xpu {NGRAM}"
AITER = f"python -m sglang.launch_server --model-path Qwen/QwQ-32B --attention-backend aiter {NGRAM}"


@sglang
def test_xpu_decode_graphs_are_off_unless_the_launch_opts_in(release: str) -> None:
    plain = check(XPU, engine=release, gpu="max1550", model_config=QWQ, progress=None)
    assert plain.deployment is not None and plain.status == UNDECIDED and "graphs are disabled" in plain.verdict
    decided = plain.deployment.settings["path.decode_graph_backend"]
    assert decided.value == "disabled" and decided.origin == "engine", decided
    assert "_handle_xpu_backends" in decided.source and "platform_hook.py:" in decided.source, decided
    # the platform is the engine's XPU: intel_xpu keeps XMX (has_fp64), not the triton fallback
    assert plain.deployment.settings["attention_backend"].value == "intel_xpu"

    opted = check(XPU + " --cuda-graph-backend-decode full", engine=release, gpu="max1550", model_config=QWQ, progress=None)
    assert opted.deployment is not None and opted.status == FAILS, opted.verdict
    assert opted.deployment.settings["path.decode_graph_backend"].value == "full"
    assert [(r.backend, r.mode) for r in opted.rows if r.reachable] == [("sglang-xpu-page-table", "target-verify")]


@sglang
def test_aiter_reads_its_page_table_in_the_verify_only_on_the_unified_path(release: str) -> None:
    plain = check(AITER, engine=release, gpu="mi300x", model_config=QWQ, progress=None)
    assert plain.deployment is not None
    path = plain.deployment.settings["path.aiter_verify"]
    assert str(path.value).startswith("not unified") and "SGLANG_USE_AITER_UNIFIED_ATTN: False" in path.source, path
    assert "sliding-window KV pool: False" in path.source and "aiter_backend.py:" in path.source, path
    assert not any(r.backend == "sglang-aiter-page-table" for r in plain.rows), plain.rows

    unified = check("SGLANG_USE_AITER_UNIFIED_ATTN=1 " + AITER, engine=release, gpu="mi300x", model_config=QWQ, progress=None)
    assert unified.deployment is not None and unified.status == FAILS, unified.verdict
    assert str(unified.deployment.settings["path.aiter_verify"].value).startswith("unified")
    assert any(r.backend == "sglang-aiter-page-table" and r.mode == "target-verify" and r.reachable for r in unified.rows)


@sglang
def test_an_mla_model_is_read_as_mla(release: str) -> None:
    """DeepSeek-V3 (MLA, no DSA) on FlashInfer sets up the MLA backend's buffers, not the MHA ones
    (0.5.23's AttentionArch is an IntEnum: read by its member name)."""
    command = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --attention-backend flashinfer "
               "--context-length 32768 --page-size 1 --speculative-algorithm EAGLE --speculative-num-steps 5 "
               "--speculative-eagle-topk 1 --speculative-num-draft-tokens 6 --cuda-graph-max-bs-decode 16")
    result = check(command, engine=release, gpu="h200", progress=None)
    assert result.deployment is not None and result.deployment.model.attention == "mla"
    assert {r.backend for r in result.rows if r.kind == "pooled"} == {"sglang-flashinfer-mla-kv-indices"}
