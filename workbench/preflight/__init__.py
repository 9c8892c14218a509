"""Preflight: paste a launch command, learn whether that deployment can crash at its context limit.

``check(command)`` parses the engine's own flags (``command``), resolves what the command leaves
out as the engine version would (``resolve_sglang`` / ``resolve_vllm``, defaults from
``data/launch_defaults.json``), runs every graph buffer and allocator path the deployment sets up
through the library (``rows``) and says whether a run reaches a failure (``verdict``).
``format`` prints it. Bad input raises ``PreflightError`` with one line naming the flag.

Exit statuses (``CheckResult.status``): 0 safe, 1 a failure a run reaches, 2 bad input, 3 not
decidable (graphs disabled, or a buffer the deployment sets up that no backend models).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench import backends
from workbench.backends.base import TableBackend
from workbench.preflight.command import parse_command
from workbench.preflight.deployment import Deployment, launch_data
from workbench.preflight.flags import PreflightError
from workbench.preflight.resolve_sglang import resolve_sglang
from workbench.preflight.resolve_vllm import resolve_vllm
from workbench.preflight.rows import Row, allocator_rows, case_rows, pooled_rows, reservation_rows, table_rows, unmodelled

SAFE, FAILS, BAD_INPUT, UNDECIDED = 0, 1, 2, 3
DEFAULT_GPU = "hopper"


@dataclass(frozen=True)
class CheckResult:
    deployment: Deployment
    rows: tuple[Row, ...]
    notes: tuple[str, ...]
    status: int  # SAFE, FAILS or UNDECIDED
    verdict: str  # one line


def vllm_backends() -> tuple[TableBackend, ...]:
    """The hook the vLLM backends fill: every registered table backend whose engine is vLLM.
    A vLLM deployment's rows come from those among them whose ``launch_names`` its resolution
    names (``"dsa-indexer"`` for a DSA model); none are registered on a branch without them."""
    return backends.engine_backends("vllm")


def resolve(command: str | Sequence[str], *, engine: str | None = None, model_config: str | None = None,
            allow_unknown: bool = False, overshoot: int | None = None, gpu: str = DEFAULT_GPU) -> Deployment:
    """The deployment a command resolves to under ``engine`` (default: the newest modelled version)."""
    data = launch_data()
    if gpu not in data.gpus:
        raise PreflightError(f"--gpu: {gpu!r} is not one of {', '.join(data.gpus)}")
    cmd = parse_command(command, allow_unknown=allow_unknown)
    name = engine or data.newest[cmd.engine]
    try:
        version = data.version(name)
    except ValueError as err:  # LaunchData knows no flags; to a check it is bad input like any other
        raise PreflightError(str(err)) from None
    if version.family != cmd.engine:
        raise PreflightError(f"--engine: {name!r} is a {version.family} version, but the command launches {cmd.engine}")
    resolver = resolve_sglang if cmd.engine == "sglang" else resolve_vllm
    return resolver(cmd, version, model_config=model_config, gpu=gpu, overshoot=overshoot)


def _verdict(deployment: Deployment, rows: Sequence[Row], missing: Sequence[str]) -> tuple[int, str]:
    failing = [r for r in rows if r.reachable]
    if failing:
        first = failing[0]
        where = {"table": f"{first.mode} at committed length {first.first_failing}",
                 "pooled": f"{first.mode} at committed length {first.first_failing} (every request of the batch)",
                 "reservation": f"{first.mode} at committed length {first.first_failing} (one request; its "
                                "neighbour's row takes the spill)"}.get(first.kind, "an exactly full pool")
        return FAILS, (f"FAILS: {len(failing)} of {len(rows)} rows reach a failure; first {first.buffer} ({first.backend}) "
                       f"{first.outcome} in {where}{_conditions(deployment, first, rows)}")
    if not deployment.graphs:
        return UNDECIDED, "UNDECIDED: graphs are disabled: the eager path's tables are not modelled"
    if missing:
        shown = "; the rows shown do not fail" if rows else ""
        return UNDECIDED, (f"UNDECIDED: no backend on this branch models what {deployment.version.engine} sets up for "
                           f"{', '.join(missing)}{shown}")
    if not any(r.kind in ("table", "pooled") for r in rows):
        return UNDECIDED, "UNDECIDED: the deployment sets up no graph buffer the workbench models"
    margins = [(r.margin, r) for r in rows if r.margin is not None]
    if margins:
        margin, row = min(margins, key=lambda m: m[0])
        if margin < 0:  # reached only by a batch the pool cannot hold
            return SAFE, (f"SAFE: no row reaches a failure; {row.buffer} {row.mode} fails at {row.first_failing} only "
                          f"for {row.conditions[-1] if row.conditions else 'a batch the pool cannot hold'}"
                          f"{_assumed(deployment, rows)}")
        return SAFE, (f"SAFE: no row reaches a failure; smallest margin {margin} tokens ({row.buffer} {row.mode}; "
                      f"reach {row.reach}: {row.reach_why}){_assumed(deployment, rows)}")
    return SAFE, "SAFE: no row fails at any committed length the request table holds"


def _conditions(deployment: Deployment, row: Row, rows: Sequence[Row]) -> str:
    """What must happen for the failure: the reach's terms, the batch and the pool it needs."""
    said = "; ".join(c for c in row.conditions if c)
    return f" (needs: {said}; reach {row.reach}: {row.reach_why}){_assumed(deployment, rows)}"


def _assumed(deployment: Deployment, rows: Sequence[Row]) -> str:
    """The assumptions a verdict rests on, said in its line."""
    parts = []
    rule = deployment.reach_rule
    if rule.substituted:
        parts.append(f"reach facts of {rule.substituted} stand in for {deployment.version.engine}")
    if rule.overshoot is not None and rule.scheduler is not None:
        parts.append(f"--overshoot {rule.overshoot} is a what-if, not the scheduler's reach")
    if deployment.pool_estimated and any(r.pool_holds is not None for r in rows):
        parts.append(f"the KV pool ({deployment.pool_tokens} tokens) is an estimate")
    return f" [assumes: {'; '.join(parts)}]" if parts else ""


def check(command: str | Sequence[str], *, engine: str | None = None, model_config: str | None = None,
          allow_unknown: bool = False, overshoot: int | None = None, gpu: str = DEFAULT_GPU,
          device: str = "cpu") -> CheckResult:
    """Resolve ``command`` and run every row; ``device`` is where the probes' tensors live."""
    deployment = resolve(command, engine=engine, model_config=model_config, allow_unknown=allow_unknown,
                         overshoot=overshoot, gpu=gpu)
    rows, notes = table_rows(deployment, device) if deployment.graphs else ([], [])
    rows += case_rows(deployment, device) if deployment.graphs else []
    rows += pooled_rows(deployment, device)
    rows += reservation_rows(deployment, device)
    rows += allocator_rows(deployment, device)
    missing = unmodelled(deployment) if deployment.graphs else []
    status, verdict = _verdict(deployment, rows, missing)
    skipped = [f"{n}: unknown flag skipped (--allow-unknown)" for n in deployment.command.flags.unknown]
    return CheckResult(deployment, tuple(rows), (*deployment.notes, *notes, *skipped), status, verdict)


__all__ = ["BAD_INPUT", "FAILS", "SAFE", "UNDECIDED", "CheckResult", "PreflightError", "check", "resolve", "vllm_backends"]
