"""Bytes per buffer by hand, the narrowest safe width against executed boundaries, and presets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from reference import ceil_div, request_table_width

from workbench.analysis.boundary import find_boundary
from workbench.analysis.cases import TableCase
from workbench.analysis.memory import buffer_bytes, load_presets, memory_table, min_safe_width
from workbench.backends import backend_of
from workbench.backends.sglang.dsa_page_table import Replay
from workbench.model.geometry import Mode, ServingGeometry

QWQ = ServingGeometry(context_len=32768, page_size=128, draft_tokens=16, spec_topk=10, draft_has_kv=False, max_bs=32)
GLM = ServingGeometry(context_len=90000, page_size=64, draft_tokens=6, spec_steps=5, max_bs=16)


def test_npu_bytes_of_the_seed() -> None:
    assert buffer_bytes("npu-block-table", QWQ, "context") == 32 * 256 * 4
    assert buffer_bytes("npu-block-table", QWQ, "context-plus-draft") == 32 * 257 * 4
    assert buffer_bytes("npu-block-table", QWQ, "context", hybrid_swa=True) == 2 * 32 * 256 * 4
    assert buffer_bytes("npu-block-table", QWQ, "context", "decode") == 32 * 256 * 4  # one row per request


def test_dsa_bytes_of_the_seed() -> None:
    # verify graph: max_bs * D rows; page_table B tokens plus real_page_table cdiv(B, 64) pages.
    assert buffer_bytes("dsa-page-table", GLM, "context-plus-draft") == 16 * 6 * (90006 + 1407) * 4
    assert buffer_bytes("dsa-page-table", GLM, "req-to-token") == 16 * 6 * (90010 + 1407) * 4
    assert buffer_bytes("dsa-page-table", GLM, "context", "decode") == 16 * (90000 + 1407) * 4
    flat = GLM.replace(page_size=1)
    assert buffer_bytes("dsa-page-table", flat, "context") == 16 * 6 * 90000 * 4  # no page-level table at ps 1


def test_invalid_modes_are_refused() -> None:
    with pytest.raises(ValueError, match="draft tokens"):
        buffer_bytes("npu-block-table", QWQ.replace(draft_tokens=0), "context")
    with pytest.raises(ValueError, match="draft-decode"):
        min_safe_width("dsa-page-table", GLM, "draft-decode")


def test_min_safe_width_by_hand() -> None:
    assert min_safe_width("npu-block-table", QWQ) == ceil_div(32788, 128) == 257
    assert min_safe_width("dsa-page-table", GLM) == 90010
    assert min_safe_width("dsa-page-table", GLM, "decode") == 90009  # s <= W - 1, no lookahead
    assert min_safe_width("npu-block-table", QWQ.replace(draft_tokens=0), "decode") == ceil_div(32767, 128)


GEOMETRIES = [
    ("npu-block-table", ServingGeometry(context_len=70, page_size=8, draft_tokens=5), "target-verify"),
    ("npu-block-table", ServingGeometry(context_len=64, page_size=16, draft_tokens=0), "decode"),
    ("npu-block-table", ServingGeometry(context_len=50, page_size=4, draft_tokens=3, spec_steps=3), "draft-decode"),
    ("npu-block-table", ServingGeometry(context_len=33, page_size=1, draft_tokens=4), "draft-extend"),
    ("dsa-page-table", ServingGeometry(context_len=70, page_size=8, draft_tokens=5), "target-verify"),
    ("dsa-page-table", ServingGeometry(context_len=41, page_size=1, draft_tokens=0), "decode"),
    ("dsa-page-table", ServingGeometry(context_len=41, page_size=4, draft_tokens=6), "draft-extend"),
]


@pytest.mark.parametrize(("component", "geometry", "mode"), GEOMETRIES)
def test_min_safe_width_agrees_with_find_boundary(
    component: str, geometry: ServingGeometry, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = backend_of(component).rules
    context = rules["context"]
    case = TableCase(component=component, geometry=geometry, rule="context", mode=Mode(mode), replay=Replay.DYNAMIC)
    safe = min_safe_width(component, geometry, mode)
    monkeypatch.setitem(rules, "context", dataclasses.replace(context, width=lambda g: safe))
    assert find_boundary(case).first_failing_seq_len is None
    monkeypatch.setitem(rules, "context", dataclasses.replace(context, width=lambda g: safe - 1))
    narrower = find_boundary(case)
    assert narrower.confirmed
    if component == "dsa-page-table":  # one token short: only the longest step fails
        assert narrower.first_failing_seq_len == narrower.max_seq_len
    else:  # one page short: every step reading past (safe - 1) pages fails
        lookahead = {"target-verify": geometry.draft_tokens, "draft-decode": 1}.get(mode, 0)
        assert narrower.first_failing_seq_len == (safe - 1) * geometry.page_size - lookahead + 1


def test_presets_load_with_their_kv_sizes() -> None:
    presets = {p.name: p for p in load_presets()}
    assert {"QwQ-32B", "GLM-5", "GLM-5.2", "DeepSeek-V3.2"} <= set(presets)
    assert all(p.source.strip() for p in presets.values())
    qwq = presets["QwQ-32B"]
    assert qwq.kv_bytes_per_token == 2 * 64 * 8 * 128 * 2
    assert qwq.geometry.request_table_width == request_table_width(32768, 128, 16, topk=10, draft_kv=False)
    assert presets["DeepSeek-V3.2"].kv_bytes_per_token == 61 * (512 + 64) * 2
    assert presets["DeepSeek-V3.2"].context_len == 163840 and presets["DeepSeek-V3.2"].page_size == 64


def _write(tmp_path: Path, presets: object) -> Path:
    path = tmp_path / "presets.json"
    path.write_text(json.dumps(presets))
    return path


def _good() -> dict[str, object]:
    return {"name": "Tiny", "source": "test", "context_len": 1024, "num_layers": 2, "kv_heads": 2, "head_dim": 8,
            "kv_dtype_bytes": 2, "page_size": 16, "draft_tokens": 4, "max_bs": 2}


@pytest.mark.parametrize(("change", "needle"), [
    ({"num_layers": 0}, "preset 'Tiny': num_layers: 0 is not a positive integer"),
    ({"context_len": -5}, "preset 'Tiny': context_len: -5 is out of range"),
    ({"kv_lora_rank": 512, "qk_rope_head_dim": 64}, "preset 'Tiny': kv_heads: set either"),
    ({"colour": "blue"}, "preset 'Tiny': colour: unknown field"),
    ({"max_bs": None}, "preset 'Tiny': max_bs"),
])
def test_bad_presets_name_the_field(tmp_path: Path, change: dict[str, object], needle: str) -> None:
    preset = {**_good(), **change}
    if change.get("max_bs", 1) is None:
        del preset["max_bs"]
    with pytest.raises(ValueError) as err:
        load_presets(_write(tmp_path, [preset]))
    assert needle in str(err.value)


def test_memory_table(tmp_path: Path) -> None:
    tiny = load_presets(_write(tmp_path, [_good()]))
    frame = memory_table(tiny)
    # one row per rule of each default table: the NPU's four (context-floor among them), DSA's three
    assert len(frame) == len(backend_of("npu-block-table").rules) + len(backend_of("dsa-page-table").rules) == 7
    npu = frame[frame.component == "npu-block-table"].set_index("rule")
    # ctx 1024, ps 16, D 4: W = 1032; context rule 64 pages, safe cdiv(1032, 16) = 65 pages, 2 rows.
    assert npu.loc["context", "bytes"] == 2 * 64 * 4 and npu.loc["context", "min_safe_bytes"] == 2 * 65 * 4
    assert npu.loc["context", "overhead_bytes"] == -8
    kv = 2 * 1024 * (2 * 2 * 2 * 8 * 2)
    assert (frame.kv_budget_bytes == kv).all()
    assert npu.loc["req-to-token", "share_of_kv_budget"] == pytest.approx(2 * 65 * 4 / kv)
