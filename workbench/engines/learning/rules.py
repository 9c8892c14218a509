"""Naming what was measured: the model rule (or behaviour) that agrees with the engine on every point.

Engine-neutral: a learner measures a number (a buffer's width, a request table's extra columns)
on a grid of settings by running the release's own code, and ``name_rule`` asks each candidate
rule of the workbench's model what it gives on the same points. The one candidate that agrees on
every point is the learned value; none (a finding for a person to read, with the closest
candidate and its first disagreement) is said so, and several (the grid does not tell them apart)
are recorded as ``undetermined`` with every one of them, never one chosen.
Behaviours that are compared answer by answer (a replay, a gather) are named the same way by
``name_candidate`` from each candidate's agreement counts.

Worked example: widths 8 and 9 measured at ``(ctx 1020, ps 128, D 0)`` and ``(ctx 1020, ps 128,
D 16)``: ``cdiv(ctx, ps)`` gives 8 and 8, ``(ctx + ps - 1 + D) // ps`` gives 8 and 9 (1163 // 128),
so the second is named.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

Point = tuple[Mapping[str, Any], int]


def measured_fact(value: object, function: str, states: int, **more: Any) -> dict[str, Any]:
    return {"value": value, "how": "measured", "function": function, "states": states, **more}


def undetermined_fact(forms: Sequence[str], function: str, states: int, *, over: str = "the grid does",
                      **more: Any) -> dict[str, Any]:
    """Several forms agreed with the engine on every state measured: no value (no one of them is
    chosen), the forms under ``undetermined``, for a learner to widen its grid until they differ."""
    finding = f"undetermined: {over} not tell {' and '.join(forms)} apart"
    return measured_fact(None, function, states, undetermined=list(forms), finding=finding, **more)


def absent_fact(reason: str, searched: str) -> dict[str, Any]:
    return {"value": None, "how": "absent", "reason": reason, "searched": searched}


def describe(state: Mapping[str, Any], keys: Sequence[str]) -> str:
    return ", ".join(f"{k} {state[k]}" for k in keys if k in state)


def name_rule(points: Sequence[Point], candidates: Mapping[str, Callable[[Mapping[str, Any]], int]], *,
              function: str, keys: Sequence[str], **more: Any) -> dict[str, Any]:
    """The measured fact naming the one candidate that gives every point's number (``keys``: the
    settings a finding prints)."""
    if not points:
        raise ValueError("no point was measured")
    agree = {name: sum(1 for state, value in points if rule(state) == value) for name, rule in candidates.items()}
    matching = [name for name, count in agree.items() if count == len(points)]
    if len(matching) == 1:
        return measured_fact(matching[0], function, len(points), samples=samples(points), **more)
    if matching:
        return undetermined_fact(matching, function, len(points), **more)
    closest = max(agree, key=lambda name: agree[name])
    state, value = next((s, v) for s, v in points if candidates[closest](s) != v)
    finding = (f"no rule of the model agrees; the closest, {closest}, on {agree[closest]} of {len(points)}: "
               f"at {describe(state, keys)} the engine gives {value}, {closest} {candidates[closest](state)}")
    return measured_fact(None, function, len(points), finding=finding, **more)


SAMPLES = 6


def samples(points: Sequence[Point]) -> list[dict[str, Any]]:
    """A few of the measured points, spread over the grid, with what the engine gave: the offline
    tests run the named rule on them again (``tests/test_learned.py``)."""
    step = max(1, len(points) // SAMPLES)
    return [{"state": dict(state), "engine": value} for state, value in list(points)[::step][:SAMPLES]]


def name_candidate(results: Mapping[str, Mapping[str, Any]], *, function: str, **more: Any) -> dict[str, Any]:
    """The measured fact naming the one candidate behaviour under which the model agreed with the
    engine on every state (``results``: candidate -> ``states``, ``agree``, ``first_disagreement``
    or ``error``)."""
    ran = {name: r for name, r in results.items() if "error" not in r and r.get("states")}
    if not ran:
        errors = "; ".join(f"{name}: {r.get('error', 'no state')}" for name, r in results.items())
        raise ValueError(f"{function}: no candidate ran ({errors})")
    states = max(r["states"] for r in ran.values())
    matching = [name for name, r in ran.items() if r["agree"] == r["states"]]
    if len(matching) == 1:
        return measured_fact(matching[0], function, ran[matching[0]]["states"], **more)
    if matching:
        return undetermined_fact(matching, function, states, over="the states do", **more)
    closest = max(ran, key=lambda name: ran[name]["agree"])
    first = ran[closest]["first_disagreement"]
    finding = (f"no candidate agrees; {closest} agreed longest, on its first {ran[closest]['agree']} states"
               f" (then: engine {str(first['engine'])[:200]}, model {str(first['model'])[:200]})")
    return measured_fact(None, function, states, finding=finding, **more)
