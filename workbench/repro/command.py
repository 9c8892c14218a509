"""``workbench repro``: list the findings, write their scripts, run them here and record the results."""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from workbench.repro.findings import Finding, by_id, findings, newest_release, seed_findings
from workbench.repro.render import script_name, write
from workbench.repro.runner import ScriptRun, run_script


def select(ids: Sequence[str], *, engine: str | None, every: bool, include_unreachable: bool,
           progress: IO[str], with_latent: bool = False) -> list[Finding]:
    """The findings asked for: every one of the release (and the seeds) with ``every``, else by id.
    The atlas is computed only when an id needs it (seeds alone do not). A latent row (no released
    setting launches it) is found by its id, and with ``every`` only ``with_latent`` (the listing)."""
    seeds = seed_findings()
    if not every and ids and all(i.startswith("seed/") for i in ids):
        return [by_id(seeds, i) for i in ids]
    release = engine or newest_release()
    progress.write(f"workbench repro: computing the atlas of {release} (every setting, boundaries executed) ...\n")
    progress.flush()
    found = findings(release, include_unreachable=include_unreachable, with_seeds=False, include_latent=True) + seeds
    if every or not ids:
        return [f for f in found if with_latent or f.status != "latent"]
    return [by_id(found, i) for i in ids]


def format_list(found: Sequence[Finding]) -> str:
    lines = [f"{'id':<52} {'outcome':<17} {'first fail':>10} {'reach':>7}  {'status':<12} script"]
    for f in found:
        reach = "" if f.reachable_len is None else str(f.reachable_len)
        if f.status != "latent":
            lines.append(f"{f.id:<52} {f.outcome:<17} {f.first_failing:>10} {reach:>7}  {f.status:<12} {script_name(f)}")
    latent = [f for f in found if f.status == "latent"]
    if latent:
        lines += ["", "latent: the engine's code fails in these states, but no released setting launches them "
                      "(each says what would reach it):"]
        lines += [f"{f.id:<52} {f.outcome:<17} {f.first_failing:>10}  {f.latent}" for f in latent]
    return "\n".join(lines)


def _record(run: ScriptRun) -> dict[str, object]:
    summary = run.summary or {}
    steps = [{k: s[k] for k in ("label", "length", "outcome")} for s in run.steps()]
    return {"reproduced": run.reproduced, "seconds": round(run.seconds, 1), "steps": steps,
            "claims": summary.get("claims", []), "where": f"{platform.machine()} CPU, {sys.platform}"}


def write_scripts(found: Sequence[Finding], out_dir: str, *, run: bool, record: str | None, out: IO[str]) -> int:
    """Write each finding's script into ``out_dir``; with ``run``, run each and print its result (exit
    status 1 when one did not reproduce); with ``record``, keep the results in that JSON file."""
    results: dict[str, dict[str, object]] = {}
    failed = 0
    for f in found:
        try:
            path = write(f, out_dir)
        except ValueError as error:
            out.write(f"{f.id}: no reproducer: {error}\n")
            failed += 1
            continue
        if not run:
            out.write(f"wrote {path}\n")
            continue
        out.write(f"{f.id}: running {path.name} ... ")
        out.flush()
        done = run_script(f, path)
        results[f.id] = _record(done)
        failed += not done.reproduced
        first = done.step("first failing length")
        seen = f"{first['length']} {first['outcome']}" if first else "no step"
        out.write(f"{'reproduced' if done.reproduced else 'NOT REPRODUCED'} ({seen}; {done.seconds:.1f} s)\n")
        if not done.reproduced:
            (Path(out_dir) / (path.name + ".log")).write_text(done.output)
    if record and results:
        path = Path(record)
        old = json.loads(path.read_text()).get("results", {}) if path.exists() else {}
        from workbench.files import atomic_write_text

        atomic_write_text(path, json.dumps({"about": "Runs of the reproducers (workbench repro --run --record): "
                                            "the engine's own outcomes, as each script printed them.",
                                            "results": {**old, **results}}, indent=1, sort_keys=True) + "\n")
        out.write(f"recorded {len(results)} run(s) in {path}\n")
    return 1 if failed else 0
