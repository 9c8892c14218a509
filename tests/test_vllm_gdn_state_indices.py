"""The GDN layers' speculative state indices of vLLM (``backends/vllm/gdn_state_indices.py``), the
reading of each release's kernel (``engines/vllm/recurrent_state.py``), and the release's own kernel
run under Triton's interpreter (``engines/vllm/gdn_kernel.py``).

Expected values: the kernel's flat index worked by hand (row ``r`` with ``a`` accepted tokens reads
element ``r * (1 + k) + a - 1`` of the buffer: with ``a = 0`` the element before its row), the slots
the release's own kernel started each row from (the interpreter run), and the crash reports'
deployments (vLLM issue 40756, PR 48475) read by the release's own parser and builder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.backends.vllm import gdn_state_indices as gdn
from workbench.engines.store import wheels
from workbench.engines.vllm import recurrent_state
from workbench.model.outcome import Outcome

HF_CACHE = Path(__file__).parent / "data" / "hf_cache" / "hub"


def case(accepted: list[int], drafts: int = 6, rows: int = 28, index: str = "unbounded", path: str = "graph") -> gdn.StateCase:
    return gdn.BACKEND.parse({"component": gdn.NAME, "rows": rows, "drafts": drafts, "accepted": accepted, "index": index,
                              "path": path})


def test_a_row_with_zero_accepted_reads_the_last_slot_of_the_row_before() -> None:
    # k = 6: rows of 7 slots; row 1 with 0 accepted reads flat element 1 * 7 - 1 = 6, row 0's last column,
    # whose slot here is 1 + 6 = 7 (slot_of numbers live slots from 1, row by row)
    result = gdn.BACKEND.probe(case([3, 0]))
    assert result.outcome is Outcome.SILENT_OVERREAD
    assert result.error == gdn.SEED_48475.expected_error
    assert "[0][6] (state slot 7," in str(result.error)
    assert gdn.starting_slots(case([3, 0])) == [1 + 2, 7]  # row 0: its column 3 - 1 = 2


def test_the_first_row_reads_before_the_buffer_and_the_clamp_keeps_each_row_in_its_own() -> None:
    first = gdn.BACKEND.probe(case([0, 2], drafts=2, rows=4))
    assert first.outcome is Outcome.SILENT_OVERREAD and "int32 before spec_state_indices_tensor" in str(first.error)
    assert gdn.starting_slots(case([0, 2], drafts=2, rows=4)) == [gdn.BEFORE, 1 + 3 + 1]
    clamped = case([0, 0, 3], drafts=2, rows=4, index="clamped")
    assert gdn.BACKEND.probe(clamped).outcome is Outcome.OK
    assert gdn.starting_slots(clamped) == [1, 4, 9]  # each row's own first slot, and row 2's last (3 - 1 = 2)


def test_the_seeds_pass_and_fail_as_their_story_says() -> None:
    seed = gdn.SEED_48475
    assert gdn.BACKEND.probe(gdn.BACKEND.parse(seed.failing)).error == seed.expected_error
    for passing in seed.passing:
        assert gdn.BACKEND.probe(gdn.BACKEND.parse(passing)).outcome is Outcome.OK


@pytest.mark.parametrize(("drafts", "prefix", "index", "path"), [
    (1, [], "unbounded", "graph"), (5, [6, 1], "unbounded", "graph"), (6, [0], "unbounded", "eager"),
    (3, [2, 2, 2], "clamped", "graph"), (13, [14], "unbounded", "eager"),
])
def test_the_closed_form_equals_an_executed_scan(drafts: int, prefix: list[int], index: str, path: str) -> None:
    c = case([*prefix, 1], drafts=drafts, rows=8, index=index, path=path)
    low, high = gdn.BACKEND.scan_range(c)
    values = np.arange(low, high + 1)
    executed = gdn.BACKEND.executed_scan(c, values)
    assert (gdn.BACKEND.fails_grid(c, values) == executed).all()
    assert executed.any() == (index == "unbounded")


def test_states_the_engine_cannot_be_in_are_refused() -> None:
    assert gdn.BACKEND.probe(case([8, 1], drafts=6)).outcome is Outcome.INVALID  # at most 1 + k accepted
    assert gdn.BACKEND.probe(case([1, 1, 1], rows=2)).outcome is Outcome.INVALID  # build runs it eagerly
    with pytest.raises(ValueError, match="index: 'bounded' is not one of unbounded, clamped"):
        gdn.BACKEND.parse({"component": gdn.NAME, "rows": 4, "drafts": 2, "accepted": [1], "index": "bounded"})


UNBOUNDED = "i_t = tl.load(num_accepted_tokens + i_n).to(tl.int64) - 1\n"
SPLIT = "def k():\n    i_t = (\n        tl.load(num_accepted_tokens + i_n).to(tl.int64)\n        - 1\n    )\n"
CLAMPED = "i_t = tl.maximum(tl.load(num_accepted_tokens + i_n).to(tl.int64) - 1, 0)\n"


def test_the_kernels_state_column_is_read_whatever_its_line_layout() -> None:
    assert recurrent_state.accepted_index_form(UNBOUNDED, "f.py") == ("unbounded", f"f.py:1: {UNBOUNDED.strip()}")
    form, where = recurrent_state.accepted_index_form(SPLIT, "f.py") or ("", "")
    assert form == "unbounded" and where.startswith("f.py:2: i_t = ")  # the statement spans lines 2 to 5
    assert recurrent_state.accepted_index_form(CLAMPED, "f.py") == ("clamped", f"f.py:1: {CLAMPED.strip()}")
    assert recurrent_state.accepted_index_form("i_t = 0\nx = num_accepted_tokens + 1\n", "f.py") is None


def _cached_kernels() -> list[tuple[str, Path]]:
    found = []
    for folder in sorted(wheels.cache_root().glob("vllm-0.*")):
        install = wheels.cached(f"vllm=={folder.name.split('-', 1)[1]}")
        if install is not None and recurrent_state.gdn_accepted_index(install.package_dir) is not None:
            found.append((install.engine, install.package_dir))
    return found


def test_every_cached_release_kernel_reads_the_column_unbounded() -> None:
    """Every release up to the newest the project knows (0.34.0) loads ``num_accepted_tokens - 1``
    unbounded (PR 48475 is not merged in any of them): found at the line a plain text search finds."""
    kernels = _cached_kernels()
    if not kernels:
        pytest.skip(f"no vLLM release with a GDN kernel is in {wheels.cache_root()}")
    for engine, package_dir in kernels:
        form, where = recurrent_state.gdn_accepted_index(package_dir) or ("", "")
        path, line = where.split(":")[0], int(where.split(":")[1])
        text = (package_dir.parent / path).read_text().splitlines()
        hits = [n for n, t in enumerate(text, 1) if "num_accepted_tokens + i_n" in t and "- 1" in t]
        assert form == "unbounded" and hits and hits[0] == line, engine


STATES = [{"drafts": 2, "accepted": [1, 0, 3]}, {"drafts": 2, "accepted": [0, 2]}, {"drafts": 6, "accepted": [3, 0]},
          {"drafts": 5, "accepted": [6, 1, 0, 0]}]


def _kernel_run(engine: str, clamp: bool) -> list[list[int]]:
    install = wheels.cached(engine)
    triton = wheels.triton_dir()
    if install is None or triton is None:
        pytest.skip(f"{engine} or triton is not cached in {wheels.cache_root()} (workbench engines fetch --triton)")
    job = {"package_dir": str(install.package_dir), "deps": str(install.deps), "triton": str(triton), "clamp": clamp,
           "states": [{**s, "before": gdn.BEFORE} for s in STATES]}
    done = subprocess.run([sys.executable, "-m", "workbench.engines.vllm.gdn_kernel"], input=json.dumps(job),
                          capture_output=True, text=True, timeout=600, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    answer: list[list[int]] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@pytest.mark.parametrize("engine", ["vllm==0.25.0", "vllm==0.34.0"])
def test_the_model_reads_the_slots_the_releases_own_kernel_reads(engine: str) -> None:
    """Conformance, state by state: the release's ``fused_recurrent_gated_delta_rule_fwd`` under the
    interpreter starts each row from the slot the model says, unpatched and with PR 48475's clamp."""
    for clamp in (False, True):
        engine_slots = _kernel_run(engine, clamp)
        index = "clamped" if clamp else "unbounded"
        model_slots = [gdn.starting_slots(case(s["accepted"], drafts=s["drafts"], rows=8, index=index))  # type: ignore[arg-type]
                       for s in STATES]
        assert engine_slots == model_slots, (engine, clamp)


# The crash reports' deployments, as their reports give them (vLLM issue 40756: Qwen3.6-27B, MTP with 5
# tokens, TP 4, max-model-len 262144, prefix caching and chunked prefill, on 0.20.2; PR 48475: Qwen3.6-27B
# NVFP4, MTP 6, fp8 KV cache, chunked prefill with 4128 batched tokens, prefix caching, max_num_seqs 4, on
# 0.25.1). The model is the published config of nvidia/Qwen3.6-27B-NVFP4 (tests/data/hf_cache): issue
# 40756's FP8 checkpoint has no config in the test data; both are Qwen3.6-27B's 48 GDN + 16 attention layers.
ISSUE_40756 = ("vllm serve nvidia/Qwen3.6-27B-NVFP4 --tensor-parallel-size 4 --max-model-len 262144 --enable-prefix-caching "
               "--enable-chunked-prefill --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 5}'")
PR_48475 = ("vllm serve nvidia/Qwen3.6-27B-NVFP4 --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 6}' "
            "--kv-cache-dtype fp8_e4m3 --enable-chunked-prefill --max-num-batched-tokens 4128 --enable-prefix-caching "
            "--max-num-seqs 4")


def _checked(command: str, engine: str, monkeypatch: pytest.MonkeyPatch) -> object:
    from workbench import preflight

    if wheels.cached(engine) is None and os.environ.get("WORKBENCH_ENGINE_VERSIONS") != "1":
        pytest.skip(f"{engine} is not in {wheels.cache_root()} (WORKBENCH_ENGINE_VERSIONS=1 fetches it)")
    monkeypatch.setenv("HF_HUB_CACHE", str(HF_CACHE))
    return preflight.check(command, engine=engine, gpu="b200", progress=None)


@pytest.mark.parametrize(("command", "engine", "shape"), [(ISSUE_40756, "vllm==0.20.2", None), (PR_48475, "vllm==0.25.1", [28, 7])])
def test_the_crash_reports_deployments_fail_on_a_row_with_zero_accepted(command: str, engine: str, shape: list[int] | None,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Both deployments were answered SAFE before the state layers were looked at. The buffer is the
    one the release's builder allocated: PR 48475's max_num_seqs 4 x (1 + 6) = 28 rows of 7 slots."""
    from workbench.preflight import FAILS

    result = _checked(command, engine, monkeypatch)
    assert result.status == FAILS, result.verdict  # type: ignore[attr-defined]
    (row,) = [r for r in result.rows if r.backend == gdn.NAME]  # type: ignore[attr-defined]
    assert row.reachable and row.outcome == "silent-overread" and row.kind == "state"
    assert any("0 accepted tokens" in c for c in row.conditions)
    built = result.deployment.settings["recurrent_state.buffers"]  # type: ignore[attr-defined]
    assert built.origin == "engine" and "GDNAttentionMetadataBuilder" in built.source
    if shape is not None:
        assert built.value["spec_state_indices_tensor"] == shape


def test_a_hybrid_launch_without_drafts_names_its_state_layers_instead_of_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.preflight import UNDECIDED

    result = _checked("vllm serve nvidia/Qwen3.6-27B-NVFP4 --max-num-seqs 4", "vllm==0.25.1", monkeypatch)
    assert result.status == UNDECIDED and "linear-attention state (GDN_ATTN)" in result.verdict  # type: ignore[attr-defined]
    assert not [r for r in result.rows if r.backend == gdn.NAME]  # type: ignore[attr-defined]


def test_a_model_without_state_layers_gets_no_state_row(monkeypatch: pytest.MonkeyPatch) -> None:
    result = _checked("vllm serve Qwen/Qwen3-8B --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3, "
                      "\"prompt_lookup_max\": 4}'", "vllm==0.25.1", monkeypatch)
    assert "recurrent_state" not in result.deployment.settings  # type: ignore[attr-defined]
    assert not [r for r in result.rows if r.backend == gdn.NAME]  # type: ignore[attr-defined]
    assert "linear-attention" not in result.verdict  # type: ignore[attr-defined]


@pytest.mark.parametrize("engine", ["sglang==0.5.23", "sglang==0.5.9"])
def test_an_sglang_hybrid_launch_is_not_safe_about_its_state_layers(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's hybrid state (GDN pool, verify scratch rows) is not modelled: the release's own
    ``mambaish_config`` (a function from 0.5.17, a ModelRunner property before) says the model has
    it, and the verdict names it instead of SAFE; a model without it gets no such part."""
    from workbench import preflight
    from workbench.preflight import UNDECIDED

    if wheels.cached(engine) is None:
        pytest.skip(f"{engine} is not in {wheels.cache_root()}")
    monkeypatch.setenv("HF_HUB_CACHE", str(HF_CACHE))
    hybrid = preflight.check("sglang serve --model-path Qwen/Qwen3.5-397B-A17B --tp 8", engine=engine, progress=None)
    assert hybrid.status == UNDECIDED and "linear-attention state (Qwen3_5MoeTextConfig)" in hybrid.verdict
    assert hybrid.deployment is not None and hybrid.deployment.settings["recurrent_state"].origin == "engine"
    plain = preflight.check("sglang serve --model-path Qwen/Qwen3-8B", engine=engine, progress=None)
    assert "linear-attention" not in plain.verdict and "recurrent_state" not in plain.deployment.settings  # type: ignore[union-attr]
