"""The NPU block table and the DSA page table: seeds, contents, and boundaries against a scan."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from reference import ceil_div, dsa_width_tokens, npu_width_pages, request_table_width

from workbench.analysis.boundary import find_boundary
from workbench.analysis.cases import TableCase, parse_case
from workbench.analysis.probe import probe_table
from workbench.backends.sglang.ascend_block_tables import NpuBlockTables, lockstep_full_to_swa
from workbench.backends.sglang.dsa_page_table import DsaPageTable, Replay
from workbench.model.geometry import Mode, ServingGeometry
from workbench.model.outcome import Outcome
from workbench.model.request_table import RequestTable

QWQ = dict(component="npu-block-table", context_len=32768, page_size=128, draft_tokens=16, mode="target-verify")
GLM = dict(component="dsa-page-table", context_len=90000, page_size=64, draft_tokens=6, spec_steps=5,
           mode="target-verify")


def _case(**data: object) -> TableCase:
    case = parse_case(data, need_seq_lens=False)
    assert isinstance(case, TableCase)
    return case


@pytest.mark.parametrize("hybrid_swa", [False, True])
def test_qwq_seed_fails_before_the_npu_fix_and_passes_after(hybrid_swa: bool) -> None:
    before = probe_table(_case(**QWQ, rule="context", seq_lens=[32753], hybrid_swa=hybrid_swa))
    assert before.outcome is Outcome.SHAPE_ERROR
    assert before.error == "The size of tensor a (256) must match the size of tensor b (257) at non-singleton dimension 1"
    assert (before.buffer_width, before.request_table_width) == (256, 32788)
    after = probe_table(_case(**QWQ, rule="context-plus-draft", seq_lens=[32753], hybrid_swa=hybrid_swa))
    assert (after.outcome, after.buffer_width) == (Outcome.OK, 257)


def test_glm_seed_fails_before_the_dsa_fix_and_passes_after() -> None:
    before = probe_table(_case(**GLM, rule="context-plus-draft", seq_lens=[90001]))
    assert before.outcome is Outcome.SHAPE_ERROR
    assert before.error == "The size of tensor a (90006) must match the size of tensor b (90007) at non-singleton dimension 1"
    after = probe_table(_case(**GLM, rule="req-to-token", seq_lens=[90001]))
    assert (after.outcome, after.buffer_width, after.request_table_width) == (Outcome.OK, 90010, 90010)


def test_static_replay_reports_the_truncated_row_as_a_silent_overread() -> None:
    result = probe_table(_case(**GLM, rule="context-plus-draft", seq_lens=[90001], replay="static"))
    assert result.outcome is Outcome.SILENT_OVERREAD
    assert result.error == "silent over-read: request 0 reads 90007 tokens but its page_table row covers 90006"
    assert probe_table(_case(**GLM, rule="req-to-token", seq_lens=[90001], replay="static")).outcome is Outcome.OK


def test_seed_boundaries() -> None:
    assert find_boundary(_case(**QWQ, rule="context")).first_failing_seq_len == 32753
    assert find_boundary(_case(**QWQ, rule="req-to-token")).first_failing_seq_len is None
    assert find_boundary(_case(**GLM, rule="context-plus-draft")).first_failing_seq_len == 90001
    assert find_boundary(_case(**GLM, rule="req-to-token")).first_failing_seq_len is None


def test_npu_replay_writes_the_page_ids_of_each_request() -> None:
    g = ServingGeometry(context_len=1000, page_size=16, draft_tokens=4, max_bs=4)
    lengths = [37, 100, 5]  # committed lengths; verify reads 4 more
    table = RequestTable.with_requests([s + 4 for s in lengths], g.request_table_width, 16)
    buffers = NpuBlockTables.allocate(g, "context-plus-draft", hybrid_swa=True)
    full_to_swa = lockstep_full_to_swa(table.allocator.num_pages, 16)
    max_len = buffers.replay(table.req_to_token, [1, 2, 3], lengths, Mode.TARGET_VERIFY, draft_tokens=4,
                             full_to_swa=full_to_swa)
    assert max_len == 104
    pages = ceil_div(104, 16)
    rtt = table.req_to_token.tolist()
    swa = full_to_swa.tolist()
    for row in range(3):
        expected = [rtt[row + 1][k * 16] // 16 for k in range(pages)]
        assert buffers.block_tables[row, :pages].tolist() == expected
        assert buffers.block_tables_swa is not None
        assert buffers.block_tables_swa[row, :pages].tolist() == [swa[rtt[row + 1][k * 16]] // 16 for k in range(pages)]
        assert not buffers.block_tables[row, pages:].any()
    assert not buffers.block_tables[3].any()  # the padded graph row
    # the SWA pool numbers its pages differently, so the two tables must differ where pages exist
    assert not torch.equal(buffers.block_tables[0, :1], buffers.block_tables_swa[0, :1])


def test_dsa_verify_replay_repeats_each_request_row_per_draft_token() -> None:
    g = ServingGeometry(context_len=300, page_size=8, draft_tokens=3)
    table = RequestTable.with_requests([53, 20], g.request_table_width, 8)
    buffers = DsaPageTable.allocate(g, "req-to-token", rows=6)
    lk = buffers.replay(table.req_to_token, [1, 2], [50, 17], Mode.TARGET_VERIFY, draft_tokens=3)
    assert lk == 53
    rtt = table.req_to_token.tolist()
    for q in range(6):
        assert buffers.page_table[q, :53].tolist() == rtt[1 + q // 3][:53]
        assert buffers.real_page_table is not None
        assert buffers.real_page_table[q, :7].tolist() == [rtt[1 + q // 3][k * 8] // 8 for k in range(7)]


def _copy_error(dst_cols: int, src_cols: int, rows: int) -> str:
    """torch's text for ``dst.copy_(src)`` when only the column counts differ."""
    if dst_cols == 1:  # a one-column destination could broadcast; torch words it differently
        return f"output with shape [{rows}, 1] doesn't match the broadcast shape [{rows}, {src_cols}]"
    return f"The size of tensor a ({dst_cols}) must match the size of tensor b ({src_cols}) at non-singleton dimension 1"


def _expected_first_failure(case: TableCase) -> tuple[int | None, str | None]:
    """The closed form of docs/semantics.md#first-failing-length, written from the reference widths:
    first failing s, and its message."""
    g = case.geometry
    w = request_table_width(g.context_len, g.page_size, g.draft_tokens, g.spec_steps, g.spec_topk,
                            g.draft_has_kv, g.width_gen)
    look = {Mode.TARGET_VERIFY: g.draft_tokens, Mode.DRAFT_DECODE: case.step_id + 1}.get(case.mode, 0)
    bound = (w - look if case.mode is not Mode.DECODE and case.mode is not Mode.DRAFT_EXTEND else w - 1) \
        if g.draft_tokens else g.context_len - 1
    ps = g.page_size
    for s in range(1, bound + 1):
        reads = s + look
        if case.component == "npu-block-table":
            b = npu_width_pages(case.rule, g.context_len, ps, g.draft_tokens, w)
            if ceil_div(reads, ps) > b:
                return s, _copy_error(b, ceil_div(reads, ps), rows=1)
        else:
            b = dsa_width_tokens(case.rule, g.context_len, g.draft_tokens, w)
            if reads > b:
                if case.replay is Replay.STATIC:
                    return s, f"silent over-read: request 0 reads {reads} tokens but its page_table row covers {b}"
                rows = g.draft_tokens if case.mode is Mode.TARGET_VERIFY else 1
                return s, _copy_error(b, reads, rows)
    return None, None


def _grid() -> list[TableCase]:
    cases = []
    for component, ctx, ps, d, rule, gen in itertools.product(
        ("npu-block-table", "dsa-page-table"), (61, 200), (1, 4, 64), (0, 3, 6), ("context", "context-plus-draft",
        "req-to-token"), ("g1", "g3"),
    ):
        modes = ["decode"] + (["target-verify", "draft-extend", "draft-decode"] if d else [])
        for mode in modes:
            if component == "dsa-page-table" and mode == "draft-decode":
                continue
            replays = ["dynamic", "static"] if component == "dsa-page-table" else [None]
            for replay in replays:
                data = dict(component=component, context_len=ctx, page_size=ps, draft_tokens=d, rule=rule, mode=mode,
                            width_gen=gen, spec_steps=3, step_id=1 if mode == "draft-decode" else 0)
                if replay:
                    data["replay"] = replay
                cases.append(_case(**data))
    return cases


@pytest.mark.parametrize("case", _grid(), ids=lambda c: f"{c.component}-{c.rule}-{c.geometry.context_len}-"
                         f"{c.geometry.page_size}-{c.geometry.draft_tokens}-{c.mode.value}-{c.replay.value}-"
                         f"{c.geometry.width_gen}")
def test_boundary_equals_a_direct_scan_and_the_spec_closed_form(case: TableCase) -> None:
    bound = case.geometry.max_committed_len(case.mode, case.step_id)
    scanned = None
    for s in range(1, bound + 1):  # execute every committed length
        result = probe_table(dataclasses.replace(case, seq_lens=(s,)))
        if result.outcome.failed:
            scanned = (s, result.error)
            break
    boundary = find_boundary(case)
    expected_s, expected_error = _expected_first_failure(case)
    assert (scanned or (None, None)) == (expected_s, expected_error)
    assert boundary.first_failing_seq_len == expected_s
    assert boundary.confirmed
    if expected_s is not None:
        assert boundary.failing is not None and boundary.failing.error == expected_error
    if case.rule == "req-to-token":
        assert expected_s is None, "the req-to-token rule must never fail inside the request table"


def test_batch_failure_follows_its_longest_request_and_padding_never_raises_it() -> None:
    case = _case(**QWQ, rule="context", max_bs=2)
    assert probe_table(dataclasses.replace(case, seq_lens=(10, 32752))).outcome is Outcome.OK
    assert probe_table(dataclasses.replace(case, seq_lens=(10, 32753))).outcome is Outcome.SHAPE_ERROR


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (dict(QWQ, rule="context", draft_tokens=0, seq_lens=[5]), "target-verify needs draft tokens"),
        (dict(QWQ, rule="context", seq_lens=[32773]), "seq_lens: 32773 is past the largest committed length"),
        (dict(QWQ, rule="context", seq_lens=[0]), "seq_lens: 0 is below 1"),
        (dict(GLM, rule="context", mode="draft-decode", seq_lens=[5]), "the DSA replay has no such mode"),
        (dict(QWQ, rule="context", mode="draft-decode", step_id=3, seq_lens=[5]), "step_id: 3 is out of range"),
    ],
)
def test_states_the_engine_cannot_be_in_are_invalid(data: dict, reason: str) -> None:
    result = probe_table(_case(**data))
    assert result.outcome is Outcome.INVALID
    assert result.error is not None and reason in result.error


def test_fresh_pool_table_equals_the_allocator_filled_table() -> None:
    for ps in (1, 4, 64):
        lengths = [37, 100, 5, 64]
        filled = RequestTable.with_requests(lengths, 300, ps).req_to_token
        assert torch.equal(RequestTable.fresh_pool(lengths, 300, ps), filled)


def test_a_single_request_probe_reads_a_view_of_the_shared_wide_row() -> None:
    from workbench.analysis import capture_cache

    capture_cache.clear()
    for ps, length, width in ((1, 37, 50), (4, 205, 230), (64, 1000, 5000), (64, 300, 310)):
        slots = capture_cache.request_slots([length], width, ps, "cpu")
        fresh = RequestTable.fresh_pool([length], width, ps)
        assert slots.req_to_token.shape == fresh.shape == (2, width)
        assert torch.equal(slots.req_to_token[:, :length], fresh[:, :length])
        assert int(slots.req_to_token.max()) < slots.num_slots  # every entry names a slot of the KV pool
    several = capture_cache.request_slots([37, 100], 300, 4, "cpu")
    assert torch.equal(several.req_to_token, RequestTable.fresh_pool([37, 100], 300, 4))
    assert several.num_slots == (10 + 25 + 1) * 4


def test_narrow_dsa_replay_gives_the_full_replays_outcome_and_message() -> None:
    g = ServingGeometry(context_len=200, page_size=4, draft_tokens=5)
    req_to_token = RequestTable.fresh_pool([205], g.request_table_width, 4)
    messages = []
    for query_rows in (None, 1):
        rows = 5 if query_rows is None else 1
        buffers = DsaPageTable.allocate(g, "context", rows=rows)
        with pytest.raises(RuntimeError) as err:
            buffers.replay(req_to_token, [1], [200], Mode.TARGET_VERIFY, draft_tokens=5, query_rows=query_rows)
        messages.append(str(err.value))
    expected = "The size of tensor a (200) must match the size of tensor b (205) at non-singleton dimension 1"
    assert messages[0] == messages[1] == expected


@pytest.mark.parametrize("case", _grid()[::7], ids=lambda c: f"{c.component}-{c.rule}-{c.mode.value}-{c.geometry.page_size}")
def test_fast_and_step_by_step_searches_agree_with_bisection(case: TableCase) -> None:
    from workbench.analysis.boundary import fast_boundary, step_by_step_boundary

    bisected = find_boundary(case)
    fast = fast_boundary(case)
    assert fast.confirmed
    assert fast.first_failing_seq_len == bisected.first_failing_seq_len
    assert step_by_step_boundary(case) == bisected.first_failing_seq_len
