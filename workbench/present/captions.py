"""Every figure's caption, as claims computed from the frame the figure draws (``claims.claim``).

One function per kind of figure; each takes the frame the notebook saves with
``report.save_results`` under ``source`` and returns the claims whose sentences make the caption.
No sentence here holds a number of its own: the numbers are the frame's.
"""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]

from workbench.analysis.findings import SILENT_OUTCOMES
from workbench.present.claims import Claim, claim
from workbench.present.words import LOUD, PAST_REACH, SAFE, SILENT

NOT_FAILURES = ["ok", "out-of-memory"]


def failure_map_claims(sweep: pd.DataFrame, source: str) -> list[Claim]:
    """Per rule and mode, the context lengths at which some configuration fails within reach, and how
    (loud or silent, by replay where the sweep has more than one); a rule that never fails says so."""
    claims = []
    replays = list(dict.fromkeys(sweep["replay"])) if sweep["replay"].nunique() > 1 else [None]
    for rule in dict.fromkeys(sweep["rule"]):
        for replay in replays:
            scope = [["rule", "==", rule]] + ([["replay", "==", replay]] if replay else [])
            rows = sweep[(sweep["rule"] == rule) & ((sweep["replay"] == replay) if replay else True)]
            name = f"{rule} ({replay} replay)" if replay else rule
            failing = rows[rows["first_failing_seq_len"].notna()]
            if failing.empty:
                claims.append(claim("", source, sweep, "count", None,
                                    scope + [["first_failing_seq_len", "notnull", None]],
                                    empty=f"{name} never fails up to what a run reaches"))
                continue
            for mode in dict.fromkeys(rows["mode"]):
                where = scope + [["mode", "==", mode], ["first_failing_seq_len", "notnull", None]]
                how = SILENT if set(failing[failing["mode"] == mode]["outcome"]) <= set(SILENT_OUTCOMES) else LOUD
                claims.append(claim(f"{name} {how} in {mode} at ctx {{values}}", source,
                                    sweep, "set", "context_len", where, empty=f"{name} never fails in {mode}"))
    return claims


def fix_cost_claims(cost: pd.DataFrame, source: str) -> list[Claim]:
    """Per rule, the most bytes it takes over the baseline rule, over the presets."""
    return [claim(f"{rule} takes at most {{values}} bytes more than {cost['baseline'].iloc[0]}", source, cost, "max",
                  "extra_bytes", [["rule", "==", rule]]) for rule in dict.fromkeys(cost["rule"])]


def trace_claims(trace: pd.DataFrame, source: str) -> list[Claim]:
    """Where the request's trace first fails, and what every failing step comes to."""
    failing = [["outcome", "not in", NOT_FAILURES]]
    return [
        claim("the first failing step is at s = {values}", source, trace, "min", "seq_len", failing,
              empty="no step fails"),
        claim("every step from there fails with {values}", source, trace, "set", "outcome", failing, empty=""),
        claim("{values} steps at or past it pass", source, trace, "count", None,
              [["outcome", "in", NOT_FAILURES], ["seq_len", ">=", _first(trace)]], empty="none past it passes"),
    ]


def _first(trace: pd.DataFrame) -> int:
    failing = trace[~trace["outcome"].isin(NOT_FAILURES)]
    return int(failing["seq_len"].min()) if not failing.empty else int(trace["seq_len"].max()) + 1


def with_fit(exact_fit: pd.DataFrame) -> pd.DataFrame:
    """The exact-fit sweep with ``fit``: ``exact`` (free pages = pages the batch opens), ``short`` or ``spare``."""
    spare = exact_fit["free_pages"] - exact_fit["pages_needed"]
    return exact_fit.assign(fit=spare.map(lambda d: "exact" if d == 0 else ("short" if d < 0 else "spare")))


def exact_fit_claims(exact_fit: pd.DataFrame, source: str) -> list[Claim]:
    """Per gather: that it never fails, or on how many pools of each kind (exact, short, spare) it
    fails and how."""
    claims = []
    for gather in dict.fromkeys(exact_fit["gather"]):
        failing = [["gather", "==", gather], ["outcome", "not in", NOT_FAILURES]]
        claims.append(claim(f"{gather} fails with {{values}}", source, exact_fit, "set", "outcome", failing,
                            empty=f"{gather} never fails"))
        for fit in ("exact", "short", "spare"):
            claims.append(claim(f"on {{values}} {fit} pools", source, exact_fit, "count", None,
                                failing + [["fit", "==", fit]], empty=""))
    return claims


def run_claims(steps: pd.DataFrame, source: str, by: str, failing_label: str, fixed: str, *,
               column: str = "committed", what: str = "committed length") -> list[Claim]:
    """Serving runs, one per ``by`` value (rule or gather): where the ``failing_label`` run first fails
    (the smallest ``column`` of its failing rows: the failing request's committed length, or the
    step), and how many failing rows the ``fixed`` run has (none: it completes)."""
    return [
        claim(f"under {failing_label} the run fails at {what} {{values}}", source, steps, "min", column,
              [[by, "==", failing_label], ["failing", "==", True]], empty=f"under {failing_label} no step fails"),
        claim(f"under {fixed} {{values}} steps fail", source, steps, "count", None, [[by, "==", fixed], ["failing", "==", True]],
              empty=f"under {fixed} the same run completes"),
    ]


def share_claims(shares: pd.DataFrame, source: str, fixed_variants: list[str]) -> list[Claim]:
    """The failing share's range per swept parameter for the legacy variants, and zero for the fixed ones."""
    legacy = [["variant", "not in", fixed_variants]]
    return [
        claim("the legacy rule and gather fail in up to {values} of the runs at a point", source, shares, "max", "share",
              legacy),
        claim("{values} runs of the fixed rule and gather fail", source, shares, "count", None,
              [["variant", "in", fixed_variants], ["share", ">", 0]], empty="the fixed rule and gather never fail"),
    ]


def atlas_claims(summary: pd.DataFrame, source: str) -> list[Claim]:
    """How many backend, release and mode rows a run breaks (loud, silent), how many fail only past
    reach and with which margins, and how many are safe."""
    reachable = [["status", "==", "reachable"]]
    past = [["status", "==", "unreachable"]]
    return [
        claim(f"{{values}} rows {LOUD} in a real run (red)", source, summary, "count", None,
              reachable + [["outcome", "not in", list(SILENT_OUTCOMES)]]),
        claim(f"{{values}} {SILENT} (orange)", source, summary, "count", None,
              reachable + [["outcome", "in", list(SILENT_OUTCOMES)]]),
        claim(f"{{values}} {PAST_REACH} (blue)", source, summary, "count", None, past),
        claim("their margins from +{0} to +{1} tokens", source, summary, "range", "margin", past, empty=""),
        claim(f"{{values}} {SAFE} at every committed length the table holds (green)", source, summary, "count", None,
              [["status", "==", "safe"]]),
    ]
