"""Captions as claims: each sentence a reviewer reads under a figure states a fact of a results file.

A ``Claim`` is one sentence and the fact it states, as a query over a frame the notebook saved with
``report.save_results``: the rows that match ``where`` (a list of ``[column, op, value]``), then one
aggregate of one column (``set``: its distinct values, sorted; ``min``; ``max``; ``range``: the
minimum and the maximum; ``count``: the rows).
``claim(...)`` computes the values from the frame and writes them into the sentence, so a caption
cannot say a number its data does not hold; ``tests/test_claims.py`` evaluates every claim of the
report again, with code of its own, against the saved results, and checks that every number in a
sentence is one of its values.

Worked example: ``claim("context fails in target-verify at ctx {values}", "01_npu_sweep", sweep,
"set", "context_len", [["rule", "==", "context"], ["mode", "==", "target-verify"],
["first_failing_seq_len", "notnull", None]])`` -> "context fails in target-verify at ctx 4,080 and
32,768" with values ``[4080, 32768]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd  # type: ignore[import-untyped]

AGGREGATES = ("set", "min", "max", "range", "count")
OPS = ("==", "!=", "in", "not in", "<", "<=", ">", ">=", "null", "notnull")
Condition = list[Any]  # [column, op, value]


@dataclass(frozen=True)
class Claim:
    """One sentence and the fact it states (see the module note)."""

    text: str
    source: str  # the results file: ``<out>/results/SOURCE.json``
    aggregate: str  # one of AGGREGATES
    column: str | None  # None for ``count``
    where: list[Condition]
    values: list[Any]  # ``set``: the sorted distinct values; else one number

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _test(data: pd.Series, op: str, value: Any) -> pd.Series:
    """The rows of one column that pass ``[column, op, value]``."""
    if op == "==":
        return data == value
    if op == "!=":
        return data != value
    if op == "in":
        return data.isin(value)
    if op == "not in":
        return ~data.isin(value)
    if op == "null":
        return data.isna()
    if op == "notnull":
        return data.notna()
    comparisons = {"<": data.lt, "<=": data.le, ">": data.gt, ">=": data.ge}
    if op not in comparisons:
        raise ValueError(f"where: {op!r} is not one of {', '.join(OPS)}")
    return comparisons[op](value)


def _mask(frame: pd.DataFrame, where: Sequence[Condition]) -> pd.Series:
    mask = pd.Series(True, index=frame.index)
    for column, op, value in where:
        mask &= _test(frame[column], op, value).fillna(False).astype(bool)
    return mask


def evaluate(frame: pd.DataFrame, aggregate: str, column: str | None, where: Sequence[Condition]) -> list[Any]:
    """The claim's values: the aggregate of ``column`` over the rows matching ``where``."""
    rows = frame[_mask(frame, where)]
    if aggregate == "count":
        return [len(rows)]
    if column is None:
        raise ValueError(f"{aggregate}: a column is needed")
    values = rows[column].dropna()
    if aggregate == "set":
        return sorted({_plain(v) for v in values})
    if aggregate in ("min", "max", "range"):
        if values.empty:
            return []
        low, high = _plain(values.min()), _plain(values.max())
        return {"min": [low], "max": [high], "range": [low, high]}[aggregate]
    raise ValueError(f"aggregate: {aggregate!r} is not one of {', '.join(AGGREGATES)}")


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def number(value: Any) -> str:
    """A value as a caption writes it: integers with thousands separators, the rest as they are."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float) and value.is_integer():
        return f"{int(value):,}"
    return str(value)


def listed(values: Sequence[Any]) -> str:
    """``[4080, 7919, 32768]`` -> "4,080, 7,919 and 32,768"."""
    words = [number(v) for v in values]
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else "".join(words)


def claim(template: str, source: str, frame: pd.DataFrame, aggregate: str, column: str | None = None,
          where: Sequence[Condition] = (), *, empty: str | None = None) -> Claim:
    """A claim whose values are computed from ``frame``: ``{values}`` in ``template`` becomes them
    (``listed``), ``{0}``, ``{1}`` each one; ``empty`` is the sentence when there are none (e.g.
    "req-to-token never fails"; "" leaves the claim out of the caption's text)."""
    conditions = [list(c) for c in where]
    values = evaluate(frame, aggregate, column, conditions)
    if (not values or values == [0]) and empty is not None:
        text = empty
    else:
        text = template.format(*(number(v) for v in values), values=listed(values))
    return Claim(text, source, aggregate, column, conditions, values)


def caption(claims: Sequence[Claim], lead: str = "") -> str:
    """The caption: a lead sentence without numbers, then the claims' sentences."""
    said = "; ".join(c.text for c in claims if c.text)
    return " ".join(part for part in (lead, said + "." if said else "") if part)
