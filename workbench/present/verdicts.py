"""Sweep frames -> the verdicts a design review reads: no reachable failure, fails loudly at committed
length N, fails silently.

The tables here relabel and select rows of the sweeps (``workbench.analysis.sweep``) and the memory
table (``workbench.analysis.memory``); they compute no outcome of their own. Component and rule names
are data: every table groups by whatever the frames hold. The words and colours are
``workbench.present.words``'s, as in the atlas and the report. A sweep searches committed lengths up
to what a run reaches (``ctx - 1 + overshoot``), so where nothing fails its word is "no reachable
failure", never "safe" (which says that no length the request table holds fails).
"""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]

from workbench.present.words import COLOURS, LOUD, NO_REACHABLE_FAILURE, NOT_APPLICABLE, SAFE, SILENT, outcome_word

FAILS = LOUD
FAILS_SILENTLY = SILENT
VERDICTS = (NO_REACHABLE_FAILURE, LOUD, SILENT, NOT_APPLICABLE)  # the order of every legend and colour bar
VERDICT_COLOURS = {word: COLOURS[word] for word in VERDICTS}


def verdict_of(outcome: str) -> str:
    """An executed outcome within reach as a reviewer's verdict (``words.outcome_word``): ok and
    out-of-memory are no failure, a silent over-read or overwrite fails silently, any raised error
    (shape error, index error, host assert) fails loudly."""
    return outcome_word(outcome)


def backend_label(frame: pd.DataFrame) -> pd.Series:
    """The component, with its replay where a component was swept under more than one."""
    replays = frame.groupby("component")["replay"].transform("nunique")
    return frame["component"].where(replays <= 1, frame["component"] + " (" + frame["replay"] + " replay)")


def with_verdicts(sweep: pd.DataFrame) -> pd.DataFrame:
    """The sweep with ``backend`` and ``verdict`` columns (one row per configuration)."""
    return sweep.assign(backend=backend_label(sweep), verdict=sweep["outcome"].map(verdict_of))


def _cell(group: pd.DataFrame) -> str:
    failing = group[group["verdict"] != NO_REACHABLE_FAILURE]
    if failing.empty:
        return f"{NO_REACHABLE_FAILURE} ({len(group)} of {len(group)})"
    first = failing.sort_values(["failing_offset", "context_len"]).iloc[0]
    how = FAILS_SILENTLY if (failing["verdict"] == FAILS_SILENTLY).all() else FAILS
    return (f"{how} at s = {int(first['first_failing_seq_len']):,} (ctx {int(first['context_len']):,},"
            f" ps {int(first['page_size'])}, D {int(first['draft_tokens'])}, {first['width_gen']});"
            f" {len(failing)} of {len(group)}")


def safety_table(sweep: pd.DataFrame) -> pd.DataFrame:
    """Backend x rule rows, one column per mode: ``no reachable failure (n of n)`` or ``fails loudly at
    s = N (ctx, ps, D, width generation); k of n`` naming the configuration that fails earliest past its
    context, and how many of the configurations fail. A mode the sweep has no configuration for is ``n/a``."""
    frame = with_verdicts(sweep)
    modes = list(dict.fromkeys(frame["mode"]))
    cells = {key: _cell(group) for key, group in frame.groupby(["backend", "rule", "mode"], sort=False)}
    pairs = list(dict.fromkeys((b, r) for b, r, _ in cells))
    backends = list(dict.fromkeys(b for b, _ in pairs))
    index = sorted(pairs, key=lambda pair: backends.index(pair[0]))  # each backend's rules together
    return pd.DataFrame(
        [[cells.get((b, r, m), NOT_APPLICABLE) for m in modes] for b, r in index],
        index=pd.MultiIndex.from_tuples(index, names=["backend", "rule"]), columns=pd.Index(modes, name="mode"),
    )


def safety_categories(table: pd.DataFrame) -> pd.DataFrame:
    """The safety table reduced to its verdict words (``no reachable failure``, ``fails loudly``,
    ``fails silently``, ``n/a``)."""
    def word(cell: str) -> str:
        return next(v for v in (FAILS_SILENTLY, FAILS, NO_REACHABLE_FAILURE, SAFE, NOT_APPLICABLE) if cell.startswith(v))

    return table.apply(lambda column: column.map(word))


def allocator_verdicts(exact_fit: pd.DataFrame) -> pd.DataFrame:
    """One row per gather: its verdict over every batch and free pool of the exact-fit sweep, and where
    it fails (on an exactly full pool, on a short one). Every pool a batch can meet is swept, so a
    gather that never fails is ``safe``."""
    rows = []
    for gather, group in exact_fit.groupby("gather", sort=False):
        verdicts = group["outcome"].map(verdict_of)
        failing = group[verdicts != NO_REACHABLE_FAILURE]
        if failing.empty:
            text = f"{SAFE} ({len(group)} of {len(group)} pools)"
        else:
            how = FAILS_SILENTLY if (verdicts[verdicts != NO_REACHABLE_FAILURE] == FAILS_SILENTLY).all() else FAILS
            exact = (failing["free_pages"] == failing["pages_needed"]).any()
            short = (failing["free_pages"] < failing["pages_needed"]).any()
            where = " and ".join(w for w, hit in (("an exactly full pool", exact), ("a short pool", short)) if hit)
            outcomes = ", ".join(sorted(set(failing["outcome"])))
            text = f"{how} on {where} ({outcomes}); {len(failing)} of {len(group)} pools"
        rows.append({"backend": "allocator (alloc_decode)", "rule": gather, "verdict": text})
    return pd.DataFrame(rows).set_index(["backend", "rule"])


def fix_cost(memory: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """The memory table's rows of every rule but ``baseline`` with the bytes each takes beyond the
    baseline rule of the same preset and component: ``extra_bytes`` and ``extra_ppb`` (parts per
    billion of the preset's KV budget). A zero says the rule is as wide as the baseline there. A
    rule that is nowhere wider than the baseline (an older rule, such as Ascend's ``context-floor``)
    is no fix of it and is left out."""
    key = ["preset", "component"]
    base = memory[memory["rule"] == baseline][[*key, "bytes"]].rename(columns={"bytes": "baseline_bytes"})
    merged = memory[memory["rule"] != baseline].merge(base, on=key, how="inner")
    extra = merged["bytes"] - merged["baseline_bytes"]
    merged = merged.assign(baseline=baseline, extra_bytes=extra, extra_ppb=extra / merged["kv_budget_bytes"] * 1e9)
    wider = merged.groupby(["component", "rule"])["extra_bytes"].transform("max") > 0
    return merged[wider].reset_index(drop=True)
