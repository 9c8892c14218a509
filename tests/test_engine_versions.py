"""Engine versions as data (issue 11, item 2): a case or sweep naming ``engine`` takes the
version's rule, width generation and replay (learned from the release's code); fields it gives itself win.

Expected values are the worked cases of docs/engine-facts.md for SGLang 0.5.23 (width generations,
Ascend block tables, DSA page table).
"""

from __future__ import annotations

import json
import subprocess
import sys

from workbench.analysis.cases import parse_case
from workbench.analysis.probe import probe
from workbench.analysis.sweep import SweepGrid, run_sweep
from workbench.engines.store.versions import engine_version, load_versions
from workbench.model.cases import Replay, TableCase

QWQ = {"component": "npu-block-table", "context_len": 32768, "page_size": 128, "draft_tokens": 16, "spec_topk": 10,
       "draft_has_kv": False, "mode": "target-verify"}
V0523 = "sglang==0.5.23"


def test_every_value_says_how_it_was_obtained() -> None:
    """Learned: the engine function run, on how many states, and the file and line it was found
    at; read: the file and line (an absence, such as no host check, names the file and what is
    not there); a pseudo-version's own values name the line they revert."""
    for version in load_versions().values():
        assert version.read_from
        for component, fields in version.fields.items():
            for name in fields:
                source = version.sources[component][name]
                if source.startswith("measured: "):
                    assert " on " in source and " states (" in source and ".py:" in source, (version.engine, component, name)
                else:
                    assert ".py:" in source or ".py (" in source, (version.engine, component, name, source)


def test_the_ascend_width_of_0523_leaves_the_latent_gap_of_engines_md() -> None:
    # G3 gives W = 32768 + max(20, 2 * 16 + 127) = 32927; the first fix's width stays 257 pages.
    case = parse_case({**QWQ, "engine": V0523, "seq_lens": [32881]})
    assert isinstance(case, TableCase) and case.geometry.width_gen == "g3" and case.rule == "context-plus-draft"
    result = probe(case)
    assert (result.buffer_width, result.request_table_width) == (257, 32927)
    assert result.error == "The size of tensor a (257) must match the size of tensor b (258) at non-singleton dimension 1"
    assert probe(parse_case({**QWQ, "engine": V0523, "seq_lens": [32753]})).outcome.value == "ok"  # the seed's step


def test_explicit_fields_win_over_the_version() -> None:
    case = parse_case({**QWQ, "engine": V0523, "rule": "context", "width_gen": "g1", "seq_lens": [32753]})
    assert isinstance(case, TableCase) and (case.rule, case.geometry.width_gen) == ("context", "g1")
    assert probe(case).error == "The size of tensor a (256) must match the size of tensor b (257) at non-singleton dimension 1"


def test_the_dsa_table_of_0523_is_w_wide_and_replays_static() -> None:
    glm = {"component": "dsa-page-table", "context_len": 90000, "page_size": 64, "draft_tokens": 6, "spec_steps": 5,
           "mode": "target-verify", "engine": V0523, "seq_lens": [90001]}
    case = parse_case(glm)
    assert isinstance(case, TableCase) and (case.rule, case.replay) == ("req-to-token", Replay.STATIC)
    assert probe(case).buffer_width == 90000 + 75  # G3: extra 75 for the GLM-5.2 recipe (docs/semantics.md#width-generations)
    # docs/engine-facts.md#sglang-dsa-page-table: with B patched back to ctx + D, the static replay is a silent over-read
    patched = probe(parse_case({**glm, "rule": "context-plus-draft"}))
    assert patched.outcome.value == "silent-overread"


def test_an_unknown_version_is_one_line_and_exit_2() -> None:
    line = json.dumps({**QWQ, "engine": "sglang==0.0.1", "seq_lens": [5]})
    out = subprocess.run([sys.executable, "-m", "workbench", "probe", "--cases", "-"], input=line + "\n",
                         capture_output=True, text=True, check=True).stdout
    record = json.loads(out)
    assert record["outcome"] == "invalid"
    sglang = [e for e in load_versions() if e.startswith("sglang==")]
    assert record["error"] == f"engine: 'sglang==0.0.1' is not a modelled version (allowed: {', '.join(sglang)})"
    flags = subprocess.run([sys.executable, "-m", "workbench", "probe", "npu-block-table", "--engine", "vllm==1",
                            "--context-len", "8", "--page-size", "1", "--seq-lens", "2", "--mode", "decode"],
                           capture_output=True, text=True)
    assert flags.returncode == 2 and flags.stderr.count("\n") == 1 and "engine: 'vllm==1'" in flags.stderr


def test_a_sweep_under_a_version_takes_its_rule_generation_and_replay() -> None:
    grid = SweepGrid(components=("npu-block-table", "dsa-page-table"), context_lens=(32768,), page_sizes=(128,),
                     draft_tokens=(16,), spec_topk=10, draft_has_kv=False, engine=V0523)
    frame = run_sweep(grid, cache_dir=None, progress=False)
    version = engine_version(V0523)
    npu = frame[frame.component == "npu-block-table"]
    dsa = frame[frame.component == "dsa-page-table"]
    assert set(npu.rule) == {version.fields["sglang-ascend-block-tables"]["rule"]}
    assert set(dsa.rule) == {"req-to-token"} and set(dsa.replay) == {"static"}
    assert set(frame.width_gen) == {"g3"} and frame.confirmed.all()
    assert frame.first_failing_seq_len.isna().all()  # the scheduler's cap plus 2 tokens stays inside both


def test_an_allocator_case_takes_the_releases_gather() -> None:
    """The exact-fit decode under each release's learned gather: 0.5.10's unclamped gather reads
    past the free list, 0.5.23's clamped one gives the semantics' slots (docs/semantics.md)."""
    seed = {"component": "allocator", "page_size": 4, "seq_lens": [5, 10, 7], "last_loc": [11, 20, 29],
            "free_pages": [11]}
    before = subprocess.run([sys.executable, "-m", "workbench", "probe", "--cases", "-"], capture_output=True, text=True,
                            input="\n".join(json.dumps({**seed, "engine": e}) for e in ("sglang==0.5.10", V0523)) + "\n",
                            check=True).stdout.splitlines()
    old, new = (json.loads(line) for line in before)
    assert old["outcome"] == "index-error" and new["outcome"] == "ok", (old, new)
    assert new["out_cache_loc"] == [44, 21, 30]


def test_a_release_whose_code_gave_no_rule_says_so() -> None:
    """0.5.3's TRT-LLM MLA width is one no rule of the model gives (its learned file holds the
    finding): a case that names the release and no rule is refused with the finding."""
    line = json.dumps({"component": "sglang-trtllm-mla-page-table", "engine": "sglang==0.5.3", "context_len": 8192,
                       "page_size": 64, "draft_tokens": 4, "spec_steps": 3, "seq_lens": [5], "mode": "target-verify"})
    out = subprocess.run([sys.executable, "-m", "workbench", "probe", "--cases", "-"], input=line + "\n",
                         capture_output=True, text=True, check=True).stdout
    record = json.loads(out)
    assert record["outcome"] == "invalid" and "has no rule for sglang-trtllm-mla-page-table (no rule of the model agrees" \
        in record["error"], record
