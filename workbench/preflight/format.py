"""A check's result as text (the release, settings, rows, fixes, verdict) or as one JSON object."""

from __future__ import annotations

import json
from dataclasses import asdict

from workbench.analysis.verdict_numbers import format_share
from workbench.preflight import BAD_INPUT, CheckResult, LaunchesResult, Refused
from workbench.preflight.rows import Fix, Row


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _fix_line(fix: Fix, unit: str) -> str:
    what = f"rule {fix.rule} [{fix.change}]" if fix.rule else (
        fix.change if unit == "entries" else "a table wider than every rule of the backend")
    share = f", {format_share(fix.share_of_kv_budget)} of the KV budget" if fix.share_of_kv_budget is not None else ""
    if unit == "free pages":
        return f"fix: gather {fix.rule} [{fix.change}]: no bytes"
    return f"fix: {what}: {fix.width} {unit}, {_bytes(fix.bytes)} ({fix.extra_bytes:+d} bytes){share}"


def fix_text(row: Row) -> str | None:
    """A row's fix as the printed check says it (``fix: ...``); None for a row without one."""
    return _fix_line(row.fix, row.unit) if row.fix else None


def _row_lines(row: Row) -> list[str]:
    width = f"{row.width} {row.unit}" if row.width is not None else "-"
    first = str(row.first_failing) if row.first_failing is not None else "none"
    reach = str(row.reach) if row.reach is not None else "-"
    margin = f"{row.margin:+d}" if row.margin is not None else "-"
    if row.kind == "state":  # a step's state fails, whatever the length: no first length, no margin to it
        first, margin = ("any step" if row.first_failing is not None else "none"), "-"
    mode = f"{row.mode} (step {row.step_id})" if row.mode == "draft-decode" else row.mode
    head = (f"  {row.buffer:<13} {row.backend:<28} {mode:<22} {row.rule:<19} {width:>14} {first:>11} "
            f"{row.outcome:<16} {reach:>8} {margin:>7}  {'REACHED' if row.reachable else ''}")
    lines = [head.rstrip()]
    if row.message:
        lines.append(f"      {row.message}")
    if row.fix:
        lines.append(f"      {_fix_line(row.fix, row.unit)}")
    return lines


def _value(value: object) -> str:
    text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def format_text(result: CheckResult) -> str:
    d = result.deployment
    lines = [f"workbench check: {result.choice.line}", f"  launch: {result.command.program} ({result.command.engine})"]
    if result.command.wrappers:
        lines.append(f"  read around it: {', '.join(result.command.wrappers)}")
    if result.command.skipped:
        lines.append(f"  set-up lines skipped: {'; '.join(result.command.skipped)}")
    if d is not None and d.version.pseudo:
        lines.append(f"  {d.version.engine} is a pseudo-version: {d.version.pseudo}")
    if d is not None:
        lines.append(f"model: {d.model.path}: {d.model.architecture}, config from {d.model.found}")
        lines.append("resolved settings (origin: given, engine = the release's own code, read = from its source, workbench):")
        for s in d.settings.values():
            mark = "" if s.modelled else "  [changes no modelled buffer]"
            given = f" (given {_value(s.given)})" if s.given is not None else ""
            lines.append(f"  {s.name:<34} {_value(s.value):<14} {s.origin:<9} {s.source}{given}{mark}")
    if result.notes:
        lines.append("notes:")
        lines.extend(f"  {n}" for n in result.notes)
    if d is not None:
        lines.append("rows:")
        lines.append(f"  {'buffer':<13} {'backend':<28} {'mode':<22} {'rule / gather':<19} {'width':>14} {'first fail':>11} "
                     f"{'outcome':<16} {'reach':>8} {'margin':>7}")
        for row in result.rows:
            lines.extend(_row_lines(row))
        if not result.rows:
            lines.append("  (none)")
    substituted = f"; buffer rules of {result.choice.buffers}" if result.choice.buffers != result.choice.release else ""
    lines.append(f"verdict: {result.verdict} [{result.choice.asked}{substituted}]")
    return "\n".join(lines)


def to_json(result: CheckResult) -> dict[str, object]:
    d = result.deployment
    out: dict[str, object] = {
        "engine": result.choice.asked, "release": result.choice.release, "release_reason": result.choice.reason,
        "buffer_release": result.choice.buffers, "substitutions": list(result.choice.notes),
        "refused_by_newest": result.choice.instead_of or None,
        "command": result.command.text, "program": result.command.program, "wrappers": list(result.command.wrappers),
        "notes": list(result.notes), "status": result.status, "verdict": result.verdict,
    }
    if d is not None:
        out.update({
            "pseudo_version": d.version.pseudo, "model": asdict(d.model),
            "settings": [s.to_dict() for s in d.settings.values()],
            "flags": [asdict(f) for f in d.flags], "request_table_width": d.geometry.request_table_width,
            "launch_names": list(d.launch_names), "extra": dict(d.extra), "rows": [asdict(r) for r in result.rows],
        })
    return out


def format_json(result: CheckResult) -> str:
    return json.dumps(to_json(result))


def error_json(err: Exception) -> dict[str, object]:
    """Input the check did not run, as JSON: status 2 and the one line; for a refusal by the engine
    also the release asked, what refused it (its parser or the engine function) and its own message."""
    out: dict[str, object] = {"status": BAD_INPUT, "error": str(err)}
    if isinstance(err, Refused):
        out.update({"release": err.release, "refused_by": err.by, "message": err.message, "hint": err.hint})
    return out


def format_error_json(err: Exception) -> str:
    return json.dumps(error_json(err))


def format_launches_text(every: LaunchesResult) -> str:
    """Each launch's result under a heading that names it, then the verdict of them all."""
    parts = []
    for launch, result in zip(every.commands, every.results):
        head = f"== launch {launch.position} of {launch.launches}: {launch.text[:160]}"
        parts.append(f"{head}\n{format_text(result)}" if isinstance(result, CheckResult) else f"{head}\nerror: {result}")
    return "\n\n".join([*parts, f"verdict of the text: {every.verdict}"])


def format_launches_json(every: LaunchesResult) -> str:
    launches = [to_json(r) if isinstance(r, CheckResult) else error_json(r) for r in every.results]
    return json.dumps({"status": every.status, "verdict": every.verdict, "launches": launches})
