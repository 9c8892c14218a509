"""The failure boundary as a formula, vectorized over whole grids of configurations.

Execution (``workbench.analysis.boundary``) is the ground truth; this module predicts the same boundary
with numpy arithmetic, no Python loop per configuration, so a sweep can screen a million
configurations and then confirm each prediction by executing the step at it and one below it.

For one request with committed length ``s`` and a mode that reads ``look`` tokens past it (the
backend's ``lookahead_grid``), a table whose row covers ``C`` tokens (``capacity_grid``: ``B * ps``
for a table of pages, ``B`` for one of tokens) fails iff ``s + look > C``, so

    first s = C - look + 1

(how it fails, a shape error or a silent over-read, is the backend's and is found by execution).
The first failing length is clamped to 1 and is reported only when it is inside the searched
bound. Each backend gives its widths over the grid (``SizingRule.width_grid``), so this module
knows no backend by name.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from workbench import backends
from workbench.backends.base import MODE_CODES, Grid

IntArray = npt.NDArray[np.int64]

NO_FAILURE = -1  # first_failing_seq_len where no committed length up to the bound fails
GEN_CODES = {"g0": 0, "g1": 1, "g2": 2, "g3": 3, "g2n": 4}


def _cdiv(a: IntArray, b: IntArray) -> IntArray:
    return (a + b - 1) // b


def request_table_width(
    ctx: IntArray, ps: IntArray, d: IntArray, steps: IntArray, topk: IntArray, draft_kv: npt.NDArray[np.bool_],
    gen: IntArray,
) -> IntArray:
    """``W`` for every configuration, every width generation (docs/semantics.md#width-generations)."""
    extra = np.where(gen == 0, 4, 4 + d)
    simple = (ps == 1) | (topk == 1) | (~draft_kv & (gen != 4))
    per_decode = np.where(simple, np.maximum(steps * topk, d), np.maximum(_cdiv(ps - 1 + steps, ps) * ps * topk, d))
    reserve = 2 * per_decode
    paged_spec = (d > 0) & (ps > 1)
    extra = np.where(paged_spec & ((gen == 2) | (gen == 4)) & (topk > 1), np.maximum(extra, reserve), extra)
    extra = np.where(paged_spec & (gen == 3), np.maximum(extra, reserve + ps - 1), extra)
    return ctx + extra


def max_committed_len(ctx: IntArray, d: IntArray, w: IntArray, mode: IntArray, step_id: IntArray) -> IntArray:
    with_spec = np.select([mode == 1, mode == 2], [w - d, w - step_id - 1], w - 1)
    return np.where(d > 0, with_spec, ctx - 1)


def first_failing_seq_len(columns: Mapping[str, npt.ArrayLike]) -> dict[str, IntArray]:
    """Predict, per configuration, ``W``, ``B``, the searched bound and the first failing length.

    ``columns`` holds equal-length arrays: ``component`` (a table backend's name or alias),
    ``rule``, ``mode``, ``width_gen`` (strings) and ``context_len``, ``page_size``,
    ``draft_tokens``, ``spec_steps``, ``spec_topk``, ``draft_has_kv``, ``step_id`` and optionally
    ``max_seq_len`` (numbers). Returns int64 arrays; ``first_failing_seq_len`` is ``NO_FAILURE``
    where nothing fails.
    """
    components = np.asarray(columns["component"])
    rules = np.asarray(columns["rule"])
    mode = _codes(columns["mode"], MODE_CODES)
    gen = _codes(columns["width_gen"], GEN_CODES)
    ctx, ps, d = (np.asarray(columns[k], dtype=np.int64) for k in ("context_len", "page_size", "draft_tokens"))
    steps, topk, step_id = (np.asarray(columns[k], dtype=np.int64) for k in ("spec_steps", "spec_topk", "step_id"))
    draft_kv = np.asarray(columns["draft_has_kv"], dtype=bool)
    w = request_table_width(ctx, ps, d, steps, topk, draft_kv, gen)
    grid = Grid(ctx, ps, d, w, mode, step_id, topk)
    b = np.zeros_like(ctx)
    capacity_tokens = np.zeros_like(ctx)
    look = np.zeros_like(ctx)
    rule_codes, rule_names = _factorize(rules)
    component_codes, component_names = _factorize(components)
    # Whole-grid arithmetic per backend and rule, selected by mask: a few passes over the arrays
    # beat gathering each group's rows out and back.
    rule_masks = [rule_codes == i for i in range(len(rule_names))]
    for code, name in enumerate(component_names):
        backend = backends.backend_of(name)
        rows = component_codes == code
        look = np.where(rows, backend.lookahead_grid(grid), look)
        for rule_name, rule_mask in zip(rule_names, rule_masks):
            mask = rows & rule_mask
            if mask.any():
                b = np.where(mask, backend.rules[backends.check_rule(backend, rule_name)].width_grid(grid), b)
        capacity_tokens = np.where(rows, backend.capacity_grid(b, ps), capacity_tokens)
    bound = max_committed_len(ctx, d, w, mode, step_id)
    if "max_seq_len" in columns:
        bound = np.minimum(bound, np.asarray(columns["max_seq_len"], dtype=np.int64))
    first = np.maximum(capacity_tokens - look + 1, 1)
    first = np.where(first <= bound, first, NO_FAILURE)
    return {"request_table_width": w, "buffer_width": b, "max_seq_len": bound, "first_failing_seq_len": first}


def _factorize(values: npt.NDArray[np.str_]) -> tuple[IntArray, list[str]]:
    """Integer codes of ``values`` and the distinct values, in order of first appearance.

    One string comparison over the array per distinct value present (a sweep holds a handful),
    where sorting a million strings, as ``np.unique`` does, costs ten times as much.
    """
    codes = np.full(values.shape, -1, dtype=np.int64)
    names: list[str] = []
    unknown = codes < 0
    while unknown.any():
        name = str(values[np.argmax(unknown)])
        codes[values == name] = len(names)
        names.append(name)
        unknown = codes < 0
    return codes, names


def _codes(values: npt.ArrayLike, table: Mapping[str, int]) -> IntArray:
    array = np.asarray(values)
    out = np.full(array.shape, -1, dtype=np.int64)
    for name, code in table.items():
        out[array == name] = code
    if (out < 0).any():
        bad = array[out < 0][0]
        raise ValueError(f"{bad!r} is not one of {', '.join(table)}")
    return out
