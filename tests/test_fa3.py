"""SGLang's FA3 page table: the backend added as one module (issue 11, item 3).

Expected values come from reading the engine (0.5.23, ``flashattention_backend.py`` 196 and
2432-2447: ``page_table`` is ``(max_bs, cdiv(ctx, ps))``; ``kernels/ops/attention/metadata.py``
246-275: a row's live pages are ``min(cdiv(s + delta, ps), max_seq_pages)`` and
``cache_seqlens = s + delta``), restated below in plain Python, and from executing every committed
length.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from reference import ceil_div, request_table_width

from workbench.analysis.boundary import find_boundary, predict_boundaries, probe_step, search_bound
from workbench.analysis.cases import parse_case
from workbench.analysis.memory import memory_table, rule_width
from workbench.analysis.probe import probe
from workbench.analysis.sweep import SweepGrid, run_sweep
from workbench.backends import backend_of
from workbench.backends.sglang.fa3_page_table import Fa3PageTable
from workbench.model.cases import TableCase
from workbench.model.geometry import Mode, ServingGeometry
from workbench.model.request_table import RequestTable

FA3 = "sglang-fa3-page-table"
SEED = {"component": FA3, "rule": "context", "context_len": 8192, "page_size": 1, "draft_tokens": 4,
        "spec_steps": 3, "spec_topk": 1, "mode": "target-verify"}


def fa3_width_pages(rule: str, ctx: int, ps: int, w: int) -> int:
    return ceil_div(ctx, ps) if rule == "context" else ceil_div(w, ps)


def lookahead(mode: str, d: int, step_id: int, topk: int) -> int:
    """The engine's ``_spec_read_seq_len_delta``: with topk above 1 the drafts are read through a
    separate expand table, so ``page_table`` covers the prefix only."""
    return 0 if topk > 1 else {"target-verify": d, "draft-decode": step_id + 1}.get(mode, 0)


def test_a_verify_at_the_scheduler_cap_reads_past_the_row_silently() -> None:
    before = probe(parse_case({**SEED, "seq_lens": [8191]}))
    assert before.outcome.value == "silent-overread"
    assert before.error == "silent over-read: request 0 reads 8195 tokens but its page_table row covers 8192"
    assert before.buffer_width == 8192
    after = probe(parse_case({**SEED, "rule": "req-to-token", "seq_lens": [8191]}))
    assert (after.outcome.value, after.buffer_width) == ("ok", 8192 + 4 + 4)
    # below ctx - D + 1 the verify still fits: s = 8188 reads exactly 8192
    assert probe(parse_case({**SEED, "seq_lens": [8188]})).outcome.value == "ok"
    assert probe(parse_case({**SEED, "seq_lens": [8189]})).outcome.value == "silent-overread"


def test_the_kernel_writes_live_pages_only_and_stops_at_the_width() -> None:
    ps, width = 16, 4
    table = RequestTable.with_requests([66, 20], 80, ps, "cpu").req_to_token  # rows 1, 2
    buffers = Fa3PageTable.of_width(width, ps, rows=2)
    buffers.page_table.fill_(-7)  # what an earlier replay left: columns past the live pages keep it
    buffers.replay(table, [1, 2], [62, 16], delta=4)
    for row, (r, s) in enumerate(((1, 62), (2, 16))):
        live = min(ceil_div(s + 4, ps), width)
        expected = [int(table[r, k * ps]) // ps for k in range(live)] + [-7] * (width - live)
        assert buffers.page_table[row].tolist() == expected
    assert buffers.cache_seqlens.tolist() == [66, 20]


def test_a_page_size_that_is_not_a_power_of_two_is_invalid() -> None:
    result = probe(parse_case({**SEED, "page_size": 96, "seq_lens": [100]}))
    assert result.outcome.value == "invalid"
    assert result.error == "page_size: 96 is not a power of two (the FA3 page-table kernel asserts one)"


def _small_cases(count: int, seed: int) -> list[TableCase]:
    rng = random.Random(seed)
    cases = []
    while len(cases) < count:
        d = rng.choice((0, 1, 2, 4, 6, 8))
        modes = ["decode"] + (["target-verify", "draft-decode", "draft-extend"] if d else [])
        g = ServingGeometry(context_len=rng.randint(2, 160), page_size=rng.choice((1, 2, 4, 8, 16, 32, 64)),
                            draft_tokens=d, spec_steps=rng.randint(1, 4), spec_topk=rng.choice((1, 2, 4)),
                            draft_has_kv=rng.random() < 0.7, width_gen=rng.choice(("g1", "g2", "g3")))
        mode = rng.choice(modes)
        step_id = rng.randrange(g.spec_steps) if mode == "draft-decode" else 0
        cases.append(TableCase(component=FA3, geometry=g, rule=rng.choice(("context", "req-to-token")),
                               mode=Mode(mode), step_id=step_id))
    return cases


def test_closed_form_equals_an_executed_scan_of_every_committed_length_on_500_configurations() -> None:
    cases = _small_cases(500, seed=11)
    predicted = predict_boundaries(cases)
    failing = 0
    for case, first in zip(cases, predicted):
        g = case.geometry
        w = request_table_width(g.context_len, g.page_size, g.draft_tokens, g.spec_steps, g.spec_topk,
                                g.draft_has_kv, g.width_gen)
        capacity = fa3_width_pages(case.rule, g.context_len, g.page_size, w) * g.page_size
        look = lookahead(case.mode.value, g.draft_tokens, case.step_id, g.spec_topk)
        scanned = None
        for s in range(1, search_bound(case) + 1):
            result = probe_step(case, s)
            assert result.outcome.value in ("ok", "silent-overread"), result  # writes stop at the width: never a raise
            assert result.outcome.value == ("silent-overread" if s + look > capacity else "ok"), (case, s)
            if scanned is None and result.outcome.failed:
                scanned = s
        assert first == scanned, case
        failing += scanned is not None
    assert 100 < failing < 500  # both kinds of configuration are in the sample


def test_bisection_and_command_line_agree_with_the_closed_form() -> None:
    case = parse_case(dict(SEED), need_seq_lens=False)
    assert isinstance(case, TableCase)
    found = find_boundary(case)
    assert (found.first_failing_seq_len, found.confirmed) == (8189, True)
    assert found.failing is not None and found.failing.outcome.value == "silent-overread"
    out = subprocess.run([sys.executable, "-m", "workbench", "boundary", "--cases", "-"], input=json.dumps(SEED) + "\n",
                         capture_output=True, text=True, check=True).stdout
    record = json.loads(out)
    assert (record["first_failing_seq_len"], record["outcome"], record["buffer_width"]) == (8189, "silent-overread", 8192)


def test_sweeps_and_memory_take_the_backend_without_edits_elsewhere() -> None:
    grid = SweepGrid(components=(FA3,), context_lens=(4096, 8192), page_sizes=(1, 64), draft_tokens=(0, 4))
    frame = run_sweep(grid, cache_dir=None, progress=False)
    assert set(frame.rule) == {"context", "req-to-token"} and frame.confirmed.all()
    assert set(frame.buffer_unit) == {"pages"}
    verify = frame[(frame["mode"] == "target-verify") & (frame.rule == "context")]
    # s + D > cdiv(ctx, ps) * ps first at ctx - D + 1 (ps divides ctx here): inside ctx - 1 + overshoot 2
    assert (verify.first_failing_seq_len == verify.context_len - 4 + 1).all()
    assert frame[frame.rule == "req-to-token"].first_failing_seq_len.isna().all()
    from workbench.analysis.memory import load_presets

    table = memory_table(load_presets()[:1], components=(FA3,))
    assert set(table.rule) == {"context", "req-to-token"}
    g = load_presets()[0].geometry
    row = table[table.rule == "context"].iloc[0]
    assert row.buffer_bytes == g.max_bs * ceil_div(g.context_len, g.page_size) * 4
    assert rule_width(FA3, g, "req-to-token") == ceil_div(g.request_table_width, g.page_size)


def test_the_backend_declares_what_the_package_asks() -> None:
    backend = backend_of(FA3)
    assert (backend.unit, backend.buffer_name, backend.engine) == ("pages", "page_table", "sglang")
    assert "silent-overread" in backend.on_overflow
    for seed in backend.seeds:
        result = probe(parse_case(seed.before))
        assert result.error == seed.expected_error
        assert probe(parse_case(seed.after)).outcome.value == "ok"


@pytest.mark.parametrize("mode", ["decode", "draft-decode", "draft-extend"])
def test_other_modes_read_their_own_lookahead(mode: str) -> None:
    g = ServingGeometry(context_len=64, page_size=16, draft_tokens=4, spec_steps=3)
    case = TableCase(component=FA3, geometry=g, rule="context", mode=Mode(mode), step_id=1)
    look = lookahead(mode, 4, 1, g.spec_topk)
    first = 64 - look + 1
    if first > search_bound(case):
        assert predict_boundaries([case]) == [None]
    else:
        assert probe_step(case, first).outcome.value == "silent-overread"
        assert probe_step(case, first - 1).outcome.value == "ok"


def test_the_hardware_checks_full_suite_measures_the_fa3_table() -> None:
    from workbench.devices.hardware_check import full_suite, memory_rows, quick_suite

    suite = full_suite()
    assert FA3 in suite.components and FA3 in {c.component for c in suite.timing}
    preset = quick_suite().presets[0]  # ctx 4096, ps 64, D 6, max_bs 4
    rows = [r for r in memory_rows([preset], "cpu", (FA3,))]
    assert {r["rule"]: (r["rows"], r["width"], r["measured_bytes"]) for r in rows} == {
        "context": (4, ceil_div(4096, 64), 4 * ceil_div(4096, 64) * 4),
        "req-to-token": (4, ceil_div(4096 + 4 + 6, 64), 4 * ceil_div(4096 + 4 + 6, 64) * 4),
    }


def test_with_topk_above_one_the_table_holds_the_prefix_only() -> None:
    """EAGLE (5, 4, 8): the verify and the draft steps read their drafts through the expand table
    (``_spec_read_seq_len_delta`` is 0), so ``page_table`` first fails past the context, at ctx + 1."""
    g = ServingGeometry(context_len=4096, page_size=1, draft_tokens=8, spec_steps=5, spec_topk=4)
    for mode, step_id in ((Mode.TARGET_VERIFY, 0), (Mode.DRAFT_DECODE, 4)):
        case = TableCase(component=FA3, geometry=g, rule="context", mode=mode, step_id=step_id)
        assert probe_step(case, 4096).outcome.value == "ok"
        bound = search_bound(case)
        assert predict_boundaries([case]) == ([4097] if bound >= 4097 else [None])
