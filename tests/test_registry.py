"""The registry is the only place a backend is named (issue 11, items 1 and 4).

A backend defined here, in a test and nowhere in the package, is registered for the test's
duration; probes, the closed form, bisection, sweeps and memory then take it with no edit
elsewhere. Its table is a plain ``copy_`` of ``ctx // 2`` tokens: an arbitrary rule, so nothing
it answers can come from a rule the package already knows. And no module outside ``backends/``
spells a backend's name or class.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from workbench import backends
from workbench.analysis.boundary import fast_boundary, find_boundary
from workbench.analysis.cases import parse_case
from workbench.analysis.memory import buffer_bytes, min_safe_width
from workbench.analysis.probe import probe
from workbench.analysis.sweep import SweepGrid, run_sweep
from workbench.backends.base import Buffers, SizingRule, TableBackend
from workbench.model.cases import TableCase
from workbench.model.geometry import ServingGeometry

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"


@dataclass
class HalfTable:
    table: torch.Tensor  # (rows, ctx // 2) int32, tokens

    @property
    def read_table(self) -> torch.Tensor:
        return self.table

    @property
    def entry_tokens(self) -> int:
        return 1


class HalfBackend(TableBackend):
    name = "test-half-table"
    engine = "test"
    device_family = "cpu"
    buffer_name = "half_table"
    unit = "tokens"
    short = "half"
    pad_seq_len = 1
    on_overflow = "shape-error: the copy_ of the step's reads into a table half the context wide"
    rules = {"context": SizingRule("context", lambda g: g.context_len // 2, lambda x: x.ctx // 2,
                                   change="none: a test's table", quirk="half the context")}

    def allocate(self, geometry: ServingGeometry, width: int, *, rows: int, case: TableCase,
                 device: torch.device | str) -> HalfTable:
        return HalfTable(torch.zeros((rows, width), dtype=torch.int32, device=device))

    def replay(self, buffers: Buffers, req_to_token: torch.Tensor, rows: Sequence[int], seq_lens: Sequence[int],
               case: TableCase, *, num_slots: int, query_rows: int | None = None) -> None:
        assert isinstance(buffers, HalfTable)
        reads = max(seq_lens) + self.lookahead(case.geometry, case.mode, case.step_id)
        index = torch.as_tensor(list(rows), dtype=torch.int64)
        buffers.table[: len(rows), :reads].copy_(req_to_token[index, :reads])


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[HalfBackend]:
    backend = HalfBackend()
    monkeypatch.setattr(backends, "TABLE_BACKENDS", (*backends.TABLE_BACKENDS, backend))
    monkeypatch.setitem(backends._BY_NAME, backend.name, backend)
    monkeypatch.setattr(backends, "TABLE_COMPONENTS", (*backends.TABLE_COMPONENTS, backend.name))
    yield backend


CASE = {"component": "test-half-table", "rule": "context", "context_len": 1000, "page_size": 1, "draft_tokens": 4,
        "mode": "target-verify"}


def test_a_backend_registered_from_outside_is_probed_searched_swept_and_sized(registered: HalfBackend) -> None:
    # copy_ of s + 4 columns into 500: torch's message, first failing at s = 497
    result = probe(parse_case({**CASE, "seq_lens": [497]}))
    assert result.outcome.value == "shape-error" and result.buffer_width == 500
    assert result.error == "The size of tensor a (500) must match the size of tensor b (501) at non-singleton dimension 1"
    assert probe(parse_case({**CASE, "seq_lens": [496]})).outcome.value == "ok"
    case = parse_case(CASE, need_seq_lens=False)
    assert isinstance(case, TableCase)
    assert find_boundary(case).first_failing_seq_len == fast_boundary(case).first_failing_seq_len == 497
    frame = run_sweep(SweepGrid(components=("test-half-table",), context_lens=(1000, 4096), page_sizes=(1,),
                                draft_tokens=(0, 4), rules=("context",)), cache_dir=None, progress=False)
    # first failing s = ctx // 2 - lookahead + 1: 501 in decode, 497 in a verify of 4 drafts (ctx 1000)
    got = sorted(zip(frame.context_len, frame.draft_tokens, frame["mode"], frame.first_failing_seq_len))
    assert got == [(1000, 0, "decode", 501), (1000, 4, "decode", 501), (1000, 4, "target-verify", 497),
                   (4096, 0, "decode", 2049), (4096, 4, "decode", 2049), (4096, 4, "target-verify", 2045)]
    assert frame.confirmed.all() and set(frame.buffer_unit) == {"tokens"}
    g = case.geometry
    assert buffer_bytes("test-half-table", g, "context") == g.max_bs * 500 * 4
    assert min_safe_width("test-half-table", g) == g.max_committed_len(case.mode) + 4


def test_no_module_outside_backends_and_engine_adapters_spells_a_backend_name_or_class() -> None:
    names = {n for b in backends.table_backends() for n in (b.name, *b.aliases)}
    classes = {type(b).__name__ for b in backends.table_backends()}
    pattern = re.compile("|".join(re.escape(n) for n in sorted(names | classes, key=len, reverse=True)))
    found = []
    for path in PACKAGE.rglob("*.py"):
        # backends/ declares them; engines/ pairs each engine function with the model of it, by name
        # (the conformance adapters: an engine's code is per backend by nature).
        if {"backends", "engines"} & set(path.relative_to(PACKAGE).parts):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if pattern.search(line):
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert found == []
