"""Notebook 00's summary agrees with the detailed notebooks 01-03.

The overview's verdict table is computed from its own sweeps; a summary that contradicts the
notebook it summarises is worse than none. Here every notebook's default parameters are read from
its ``parameters`` cell (the jupytext source), the sweeps are run as each notebook runs them, and
00's verdict for every backend, rule and mode that 01-03 also sweep must be theirs. 00's grids must
hold the detailed grids (a superset), so a configuration where a rule fails cannot be left out.
"""

from __future__ import annotations

import ast
from typing import Any

import pandas as pd
import pytest

from workbench.analysis.sweep import SweepGrid, allocator_exact_fit_sweep, run_sweep
from workbench.present.report import NOTEBOOKS_DIR
from workbench.present.verdicts import allocator_verdicts, safety_categories, safety_table


def parameters_of(stem: str) -> dict[str, Any]:
    """The literal assignments of a notebook's ``parameters`` cell, read from its .py source."""
    text = (NOTEBOOKS_DIR / f"{stem}.py").read_text()
    cell = text.split('# %% tags=["parameters"]\n', 1)[1].split("\n# %%", 1)[0]
    values: dict[str, Any] = {}
    for node in ast.parse(cell).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = ast.literal_eval(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            values[node.target.id] = ast.literal_eval(node.value)  # annotated: papermill shows the type
    return values


OVERVIEW = parameters_of("00_overview")
NPU = parameters_of("01_npu_block_tables")
DSA = parameters_of("02_dsa_page_table")
ALLOCATOR = parameters_of("03_allocator_exact_fit")


def _npu_grid(p: dict[str, Any], prefix: str = "") -> SweepGrid:
    return SweepGrid(components=("npu-block-table",), context_lens=p[prefix + "context_lens"],
                     page_sizes=p[prefix + "page_sizes"], draft_tokens=p[prefix + "draft_tokens"],
                     modes=p[prefix + "modes"], width_gens=p[prefix + "width_gens"], replays=("dynamic",),
                     overshoot=p["overshoot"])


def _dsa_grid(p: dict[str, Any], prefix: str = "") -> SweepGrid:
    return SweepGrid(components=("dsa-page-table",), context_lens=p[prefix + "context_lens"],
                     page_sizes=p[prefix + "page_sizes"], draft_tokens=p[prefix + "draft_tokens"],
                     modes=p[prefix + "modes"], width_gens=p.get(prefix + "width_gens", ("g1",)),
                     replays=p[prefix + "replays"], overshoot=p["overshoot"])


def _words(grid: SweepGrid) -> pd.DataFrame:
    return safety_categories(safety_table(run_sweep(grid, cache_dir=None, progress=False)))


def test_the_parameters_are_read_from_the_notebooks() -> None:
    assert NPU["page_sizes"] == [128] and DSA["page_sizes"] == [64]
    assert OVERVIEW["overshoot"] == NPU["overshoot"] == DSA["overshoot"]


@pytest.mark.parametrize(("detail", "prefix", "axes"), [
    (NPU, "npu_", ("context_lens", "page_sizes", "draft_tokens", "modes", "width_gens")),
    (DSA, "dsa_", ("context_lens", "page_sizes", "draft_tokens", "modes", "replays")),
    (ALLOCATOR, "allocator_", ("page_sizes",)),
], ids=["01", "02", "03"])
def test_overview_grids_hold_the_detailed_grids(detail: dict[str, Any], prefix: str, axes: tuple[str, ...]) -> None:
    for axis in axes:
        assert set(detail[axis]) <= set(OVERVIEW[prefix + axis]), (axis, detail[axis], OVERVIEW[prefix + axis])
    if prefix == "allocator_":
        assert OVERVIEW["allocator_max_batch"] >= detail["max_batch"]


@pytest.mark.parametrize(("stem", "make"), [("01", _npu_grid), ("02", _dsa_grid)], ids=["01", "02"])
def test_overview_verdicts_are_the_detailed_notebooks(stem: str, make: Any) -> None:
    detail = NPU if stem == "01" else DSA
    prefix = "npu_" if stem == "01" else "dsa_"
    overview, detailed = _words(make(OVERVIEW, prefix)), _words(make(detail))
    shared = overview.index.intersection(detailed.index)
    columns = overview.columns.intersection(detailed.columns)
    assert len(shared) == len(detailed.index) and list(columns) == list(detailed.columns)
    assert overview.loc[shared, columns].equals(detailed.loc[shared, columns]), (
        overview.loc[shared, columns], detailed.loc[shared, columns])


def test_overview_says_what_the_spec_says_of_the_npu_context_rule_in_decode() -> None:
    """At ctx 32768 (a page multiple) with D = 4, cdiv(ctx, 128) = 256 pages hold 32768 tokens, and a
    decode at s = ctx - 1 + overshoot 2 = 32769 reads 32769 of them: the context rule fails in decode."""
    assert 32768 in OVERVIEW["npu_context_lens"] and 4 in OVERVIEW["npu_draft_tokens"] and OVERVIEW["overshoot"] >= 2
    words = _words(_npu_grid(OVERVIEW, "npu_"))
    assert words.loc[("npu-block-table", "context"), "decode"] == "fails loudly"
    assert (words.xs("req-to-token", level="rule") == "no reachable failure").all().all()


def test_overview_allocator_verdicts_are_notebook_03s() -> None:
    overview = allocator_exact_fit_sweep(OVERVIEW["allocator_page_sizes"], OVERVIEW["allocator_max_batch"])
    detailed = allocator_exact_fit_sweep(ALLOCATOR["page_sizes"], ALLOCATOR["max_batch"], ALLOCATOR["gathers"])
    verdict = r"^(safe|fails silently|fails loudly)"
    ours = allocator_verdicts(overview)["verdict"].str.extract(verdict)[0]
    theirs = allocator_verdicts(detailed)["verdict"].str.extract(verdict)[0]
    assert ours.loc[theirs.index].equals(theirs)
    # docs/semantics.md#exact-fit: the legacy gather fails on an exact fit, the clamped one never does.
    assert theirs.loc[("allocator (alloc_decode)", "npu-legacy")] == "fails loudly"
    assert theirs.loc[("allocator (alloc_decode)", "npu-clamped")] == "safe"
    assert theirs.loc[("allocator (alloc_decode)", "cuda-masked")] == "fails silently"
