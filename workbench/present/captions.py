"""Every figure's caption, as claims computed from the frame the figure draws (``claims.claim``).

One function per kind of figure; each takes the frame the notebook saves with
``report.save_results`` under ``source`` and returns the claims whose sentences make the caption.
No sentence here holds a number of its own: the numbers are the frame's.
"""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]

from workbench.atlas.findings import SILENT_OUTCOMES
from workbench.present.claims import Claim, claim
from workbench.present.words import LOUD, PAST_REACH, REFUSED, SAFE, SILENT

NOT_FAILURES = ["ok", "out-of-memory"]


def failure_map_claims(sweep: pd.DataFrame, source: str) -> list[Claim]:
    """Per rule (and replay, where the sweep has more than one), the context lengths at which some
    configuration fails within reach, for the modes that fail at the same ones, and how (loud or
    silent); the modes where nothing fails; a rule that never fails says so once."""
    claims = []
    replays = list(dict.fromkeys(sweep["replay"])) if sweep["replay"].nunique() > 1 else [None]
    for rule in dict.fromkeys(sweep["rule"]):
        for replay in replays:
            scope = [["rule", "==", rule]] + ([["replay", "==", replay]] if replay else [])
            rows = sweep[(sweep["rule"] == rule) & ((sweep["replay"] == replay) if replay else True)]
            name = f"{rule} ({replay} replay)" if replay else rule
            failing = rows[rows["first_failing_seq_len"].notna()]
            groups: dict[tuple[int, ...], list[str]] = {}  # the failing contexts -> the modes failing there
            for mode in dict.fromkeys(rows["mode"]):
                contexts = tuple(sorted(int(c) for c in set(failing[failing["mode"] == mode]["context_len"])))
                groups.setdefault(contexts, []).append(mode)
            for contexts, modes in groups.items():
                where = scope + [["mode", "in", modes], ["first_failing_seq_len", "notnull", None]]
                if not contexts:
                    never = "never fails up to what a run reaches" if len(groups) == 1 else f"never in {_and(modes)}"
                    claims.append(claim("", source, sweep, "count", None, where, empty=f"{name} {never}"))
                    continue
                outcomes = set(failing[failing["mode"].isin(modes)]["outcome"])
                how = SILENT if outcomes <= set(SILENT_OUTCOMES) else LOUD
                claims.append(claim(f"{name} {how} at ctx {{values}} in {_and(modes)}", source, sweep, "set", "context_len",
                                    where))
    return claims


def _and(words: list[str]) -> str:
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else words[0]


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
    """Per gather: that it never fails, or how it fails and on how many pools of each kind (exact,
    short, spare)."""
    claims = []
    for gather in dict.fromkeys(exact_fit["gather"]):
        failing = [["gather", "==", gather], ["outcome", "not in", NOT_FAILURES]]
        claims.append(claim(f"{gather} fails with {{values}}", source, exact_fit, "set", "outcome", failing,
                            empty=f"{gather} never fails"))
        for fit, pools in (("exact", "exact-fit"), ("short", "short"), ("spare", "spare")):
            claims.append(claim(f"{gather} fails on {{values}} {pools} pools", source, exact_fit, "count", None,
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
        claim("at most {values} runs of the legacy rule or gather fail at one point", source, shares, "max", "failed_runs",
              legacy),
        claim("{values} runs of the fixed rule and gather fail", source, shares, "count", None,
              [["variant", "in", fixed_variants], ["share", ">", 0]], empty="the fixed rule and gather never fail"),
    ]


def atlas_claims(summary: pd.DataFrame, source: str) -> list[Claim]:
    """How many backend, release and mode rows a run breaks (loud, silent), how many fail only past
    reach and with which margins, how many are safe, and how many the release refuses at start-up
    (said only where there are any)."""
    reachable = [["status", "==", "reachable"]]
    past = [["status", "==", "unreachable"]]
    return [
        claim(f"{LOUD} in a real run: {{values}} rows (red)", source, summary, "count", None,
              reachable + [["outcome", "not in", list(SILENT_OUTCOMES)]]),
        claim(f"{SILENT}: {{values}} (orange)", source, summary, "count", None,
              reachable + [["outcome", "in", list(SILENT_OUTCOMES)]]),
        claim(f"{PAST_REACH}: {{values}} (blue)", source, summary, "count", None, past),
        claim("margins past reach from +{0} to +{1} tokens", source, summary, "range", "margin", past, empty=""),
        claim(f"{SAFE} at every committed length the table holds: {{values}} (green)", source, summary, "count", None,
              [["status", "==", "safe"]]),
        claim(f"{REFUSED}, every setting refused by the release's own checks: {{values}} (slate)", source, summary,
              "count", None, [["status", "==", "refused"]], empty=""),
    ]
