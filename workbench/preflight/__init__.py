"""Preflight: paste a launch command, learn whether that deployment can crash at its context limit.

``check(command)`` reads the shell around the command (``command``), picks the release
(``engines.commands.release_choice``: ``--engine``, else the one installed here, else the newest) and the
GPU (``--gpu``), and asks the release's own code to read it: its parser and its default
resolution, run in an engine process of that release (``engines.commands.launch_service``, the adapters
of ``engines.commands.adapters``) with the model's config from this machine. The engine's answer
becomes a deployment (``resolve_<engine>.deployment``); every graph buffer and allocator path it
sets up is run through the library (``rows``), and the verdict says whether a run reaches a failure.

A text holding several launches (node 0 and node 1, encoder and language-model servers, prefill
and decode) is checked launch by launch with ``check_launches``; its status is the worst of them
(``combined_status``). ``check`` reads one (``launch``, from 1) and notes the others.

Exit statuses (``CheckResult.status``): 0 safe, 1 a failure a run reaches, 2 bad input (a command
the engine itself refuses, with the engine's message; or a wrong option of the check), 3 not
decidable (a model whose config is not on this machine, a release whose code cannot run on a CPU,
graphs disabled, or a buffer no backend models).

Imported by the CLI and present (the notebooks' preflight box); imports ``engines.commands`` (the
adapters' JSON, the launch service, the release choice), ``engines.store``, the backends,
analysis and ``model``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from workbench import backends
from workbench.backends.base import TableBackend
from workbench.engines.commands import release_choice
from workbench.engines.commands.adapters import ADAPTERS, REJECTED, RESOLVED, UNLOADABLE, LaunchRequest, Resolution, platform_plugin
from workbench.engines.commands.launch_service import STDERR, Stderr, progress_stream
from workbench.engines.store import gpus, releases, wheels
from workbench.engines.store.gpus import Gpu
from workbench.preflight import other_releases, outside
from workbench.preflight.command import LaunchCommand, PreflightError, Refused, parse_commands
from workbench.preflight.deployment import Deployment, NotModelled, ResolveContext
from workbench.preflight.rows import (
    Row,
    allocator_rows,
    case_rows,
    declined,
    graph_only,
    pooled_rows,
    reservation_rows,
    table_rows,
    unmodelled,
)

SAFE, FAILS, BAD_INPUT, UNDECIDED = 0, 1, 2, 3
MESSAGE_CHARS = 1200  # an engine's message past this (a list of every architecture it knows) is cut
# workbench check's own options: in the engine's part of a command they are a misplaced option
CHECK_OPTIONS = ("--engine", "--json", "--model-config", "--draft-model-config",
                 "--overshoot", "--gpu", "--cmd", "--from-file", "--launch", "--offline")
# where the user's Hugging Face cache is, and whether and where its config files may be fetched (model_lookup)
LOOKUP_VARIABLES = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "HF_HUB_OFFLINE",
                    "TRANSFORMERS_OFFLINE", "HF_ENDPOINT", "HF_TOKEN")


@dataclass(frozen=True)
class CheckResult:
    command: LaunchCommand
    choice: release_choice.Choice
    deployment: Deployment | None  # None: the check stopped before the rows (undecided)
    rows: tuple[Row, ...]
    notes: tuple[str, ...]
    status: int  # SAFE, FAILS or UNDECIDED
    verdict: str  # one line


def vllm_backends() -> tuple[TableBackend, ...]:
    """The hook the vLLM backends fill: every registered table backend whose engine is vLLM.
    A vLLM deployment's rows come from those among them whose ``launch_names`` its resolution
    names (``"dsa-indexer"`` for a DSA model); none are registered on a branch without them."""
    return backends.engine_backends("vllm")


def pick_gpu(command: LaunchCommand, name: str | None) -> tuple[Gpu, str]:
    """The GPU given, or the workbench's default for the command's device (an Ascend NPU for
    ``--device npu``, else the data file's default), and the reason."""
    if name:
        try:
            return gpus.gpu(name), "--gpu"
        except ValueError as err:
            raise PreflightError(str(err)) from None
    if _device_hint(command.argv) == "npu":
        return gpus.gpu("910b"), "the workbench's assumption for --device npu (give --gpu to change it)"
    if _device_hint(command.argv) == "xpu":
        return gpus.gpu("max1550"), "the workbench's assumption for --device xpu (give --gpu to change it)"
    ascend = _ascend_variables(command.env)
    if ascend:
        return gpus.gpu("910b"), (f"the workbench's assumption for a command that sets {', '.join(ascend[:3])} (read only "
                                  "on an Ascend NPU; give --gpu to change it)")
    default = gpus.default_name()
    return gpus.gpu(default), f"the workbench's default (give --gpu: {', '.join(gpus.names())})"


def _device_hint(argv: Sequence[str]) -> str | None:
    """The value of ``--device`` (or an abbreviation argparse would take), for the GPU's default only."""
    for i, token in enumerate(argv):
        name, has_value, value = token.partition("=")
        if len(name) >= 5 and "--device".startswith(name):
            return value if has_value else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


# Variables only an Ascend stack reads: its runtime (ASCEND_RT_VISIBLE_DEVICES), its collective
# library (HCCL_*), torch_npu's allocator (PYTORCH_NPU_ALLOC_CONF) and the vllm-ascend plugin's own
# (VLLM_ASCEND_*). A vLLM command names no device: its platform is the installed plugin's.
_ASCEND_PREFIXES = ("ASCEND_", "HCCL_", "PYTORCH_NPU_", "VLLM_ASCEND_")


def _ascend_variables(env: Mapping[str, str]) -> list[str]:
    """The command's own variables that only an Ascend deployment reads."""
    return [name for name in env if name.startswith(_ASCEND_PREFIXES)]


# $i, ${MODEL_PATH}; a script's positional parameters ($2, ${10}, $@); {weights path} (split by the
# shell into "{weights" "path}"); <eagle3_model_name>, also inside a word (<path_to_your_model>/Qwen2.5)
# and as a JSON value
_PLACEHOLDER = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\$\{?[0-9]+\}?|\$[@*]|^\{[a-z][a-z_ -]*\}?$|<[A-Za-z][A-Za-z0-9_-]*>")

# In a JSON word only a bare value is a placeholder ("model": <eagle3_model_name>): a quoted "<think>"
# is a string the engine reads
_JSON_PLACEHOLDER = re.compile(r":\s*<[A-Za-z][A-Za-z0-9_-]*>$")


def unset_variables(command: LaunchCommand) -> list[str]:
    """The shell variables (``$i``, ``${MODEL_PATH}``) and documentation placeholders
    (``{weights path}``, ``<model>``) left in the command's arguments: values only its author knows."""
    found = [m.group(0).strip() for word in command.argv for m in _PLACEHOLDER.finditer(word)
             if not word.lstrip().startswith("{\"") or _JSON_PLACEHOLDER.search(word[:m.end()])]
    return list(dict.fromkeys(found))


def _install(engine: str, progress: IO[str] | None) -> wheels.EngineInstall:
    found = wheels.cached(engine)
    if found is not None:
        return found
    if progress is not None and wheels.fetching_allowed():
        progress.write(f"workbench: fetching {engine}'s wheel and its small dependencies into {wheels.cache_root()} "
                       "(first use of this release)...\n")
        progress.flush()
    return wheels.fetch(engine)


def engine_resolution(command: LaunchCommand, choice: release_choice.Choice, gpu: Gpu, model_config: str | None, *,
                      owner: bool = True, progress: IO[str] | None | Stderr = STDERR,
                      draft_model_config: str | None = None) -> Resolution:
    """The release's own reading of the command, from its engine process; a refusal naming a
    stand-in is undecided, for every engine (``adapter_common.refusal_naming_stand_in``)."""
    from workbench.engines.commands import launch_service
    from workbench.engines.commands.adapter_common import refusal_naming_stand_in

    progress = progress_stream(progress)
    try:
        install = _install(choice.release, progress)
        request = LaunchRequest(choice.release, command.program, command.argv, command.env, gpu, model_config,
                                {k: os.environ[k] for k in LOOKUP_VARIABLES if k in os.environ}, os.getcwd(),
                                draft_model_config)
        return refusal_naming_stand_in(launch_service.resolve(request, install, owner=owner, progress=progress))
    except (wheels.FetchError, launch_service.EngineUnavailable) as err:
        return Resolution(choice.release, "unloadable", str(err))


def _deployment(command: LaunchCommand, choice: release_choice.Choice, resolution: Resolution, gpu: Gpu, gpu_reason: str,
                overshoot: int | None) -> Deployment:
    import importlib

    context = ResolveContext(command, choice, release_choice.launch_version(choice), gpu, gpu_reason, overshoot)
    builder = importlib.import_module(f"workbench.preflight.resolve_{command.engine}")
    made: Deployment = builder.deployment(resolution, context)
    return made


def _verdict(deployment: Deployment, rows: Sequence[Row], missing: Sequence[str],
             gaps: Sequence[str] = ()) -> tuple[int, str]:
    failing = [r for r in rows if r.reachable]
    if failing:
        first = failing[0]
        where = {"table": f"{first.mode} at committed length {first.first_failing}",
                 "pooled": f"{first.mode} at committed length {first.first_failing} (every request of the batch)",
                 "reservation": f"{first.mode} at committed length {first.first_failing} (one request; its "
                                "neighbour's row takes the spill)",
                 "state": f"{first.mode} at any committed length (a step's state)"}.get(first.kind, "an exactly full pool")
        return FAILS, (f"FAILS: {len(failing)} of {len(rows)} rows reach a failure; first {first.buffer} ({first.backend}) "
                       f"{first.outcome} in {where}{_conditions(deployment, first, rows)}")
    if not deployment.graphs and (missing or not rows):
        what = f" ({', '.join(missing)})" if missing else ""
        shown = "; the rows shown do not fail" if rows else ""
        return UNDECIDED, f"UNDECIDED: graphs are disabled: the eager path's tables{what} are not modelled{shown}"
    if missing:
        shown = "; the rows shown do not fail" if rows else ""
        return UNDECIDED, (f"UNDECIDED: no backend on this branch models what {deployment.choice.asked} sets up for "
                           f"{', '.join(missing)}{shown}")
    if not any(r.kind in ("table", "pooled", "state") for r in rows):
        if gaps:  # a buffer it sets up whose backend has no case for it
            return UNDECIDED, f"UNDECIDED: no row could be built: {'; '.join(gaps)}"
        return UNDECIDED, "UNDECIDED: the deployment sets up no graph buffer the workbench models"
    status, verdict = _safe_verdict(deployment, rows)
    if not deployment.graphs:  # every buffer it sets up is one the eager path reads too
        verdict += " [graphs disabled: each row is a buffer the eager path reads too]"
    if gaps:  # a buffer the deployment sets up whose row could not be built: the SAFE says so
        verdict += f" [not checked: {'; '.join(gaps)}]"
    return status, verdict


def _safe_verdict(deployment: Deployment, rows: Sequence[Row]) -> tuple[int, str]:
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
    said = "; ".join(c for c in row.conditions if c) or "any request"  # a width short at every length
    why = f": {row.reach_why}" if row.reach_why else ""
    return f" (needs: {said}; reach {row.reach}{why}){_assumed(deployment, rows)}"


def _assumed(deployment: Deployment, rows: Sequence[Row]) -> str:
    """The assumptions a verdict rests on, said in its line."""
    parts = []
    rule = deployment.reach_rule
    if rule.substituted:
        parts.append(f"reach facts of {rule.substituted} stand in for {deployment.version.engine}")
    if rule.assumed:
        parts.append(rule.assumed)
    if rule.overshoot is not None and rule.scheduler is not None:
        parts.append(f"--overshoot {rule.overshoot} is a what-if, not the scheduler's reach")
    if deployment.pool_estimated and any(r.pool_holds is not None for r in rows):
        parts.append(f"the KV pool ({deployment.pool_tokens} tokens) is an estimate")
    return f" [assumes: {'; '.join(parts)}]" if parts else ""


def _run_rows(deployment: Deployment, device: str) -> tuple[list[Row], list[str], int, str]:
    rows, notes = table_rows(deployment, device) if deployment.graphs else ([], [])
    rows += case_rows(deployment, device)  # graphs disabled: the buffers the eager path reads too
    rows += pooled_rows(deployment, device)
    rows += reservation_rows(deployment, device)
    rows += allocator_rows(deployment, device)
    missing = unmodelled(deployment) if deployment.graphs else graph_only(deployment)
    status, verdict = _verdict(deployment, rows, missing, declined(deployment))
    return rows, notes, status, verdict


def resolve(command: str | Sequence[str], *, engine: str | None = None, model_config: str | None = None,
            overshoot: int | None = None, gpu: str | None = None, owner: bool = True,
            progress: IO[str] | None | Stderr = STDERR, launch: int = 1,
            draft_model_config: str | None = None) -> Deployment | None:
    """The deployment ``command`` resolves to (no rows run); None when the check is undecided
    before the rows (a model not on this machine, a release that cannot run here)."""
    return _check(command, engine=engine, model_config=model_config, overshoot=overshoot, gpu=gpu, device=None,
                  owner=owner, progress=progress, launch=launch, draft_model_config=draft_model_config).deployment


def check(command: str | Sequence[str], *, engine: str | None = None, model_config: str | None = None,
          overshoot: int | None = None, gpu: str | None = None, device: str = "cpu", owner: bool = True,
          progress: IO[str] | None | Stderr = STDERR, suggest: bool = True, launch: int = 1,
          draft_model_config: str | None = None) -> CheckResult:
    """Read ``command`` with its release's own code and run every row; ``device`` is where the
    probes' tensors live. PreflightError: bad input, the engine's refusal included (one line).
    ``launch``: which launch of a text holding several (from 1); a note names the others.

    ``owner``: the release's engine process ends with this process (a notebook, a test session);
    False leaves it running for the next command-line check. ``progress``: where the first use of
    a release says that it is fetching and loading (None: silent). ``suggest``: a refusal by the
    release's parser names another release to try (learned parsers); False for a caller walking the
    releases itself."""
    result = _check(command, engine=engine, model_config=model_config, overshoot=overshoot, gpu=gpu, device=device,
                    owner=owner, progress=progress, suggest=suggest, launch=launch, draft_model_config=draft_model_config)
    parsed = result.command
    if parsed.launches == 1:
        return result
    note = (f"the text holds {parsed.launches} launches; this is launch {parsed.position} (workbench check reads "
            "each; --launch K one)")
    return dataclasses.replace(result, notes=(note, *result.notes))


@dataclass(frozen=True)
class LaunchesResult:
    """Every launch of a text checked: each one's result, or the refusal that stopped it."""

    commands: tuple[LaunchCommand, ...]  # the launches, in the text's order
    results: tuple[CheckResult | PreflightError, ...]  # one per launch
    status: int
    verdict: str


_WORDS = {SAFE: "SAFE", FAILS: "FAILS", BAD_INPUT: "REFUSED", UNDECIDED: "UNDECIDED"}


def combined_status(statuses: Sequence[int]) -> int:
    """The status of several launches: a refused launch stops the deployment as written (bad input),
    else any failure, else any undecided one, else safe."""
    for status in (BAD_INPUT, FAILS, UNDECIDED):
        if status in statuses:
            return status
    return SAFE


def launches_verdict(statuses: Sequence[int]) -> tuple[int, str]:
    """The combined status of several launches, and a line naming each one's."""
    status = combined_status(statuses)
    each = ", ".join(f"launch {i} {_WORDS[s]}" for i, s in enumerate(statuses, 1))
    return status, f"{_WORDS[status]}: {len(statuses)} launches: {each}"


def check_launches(command: str | Sequence[str], **options: object) -> LaunchesResult:
    """``check`` for every launch of ``command``; options as ``check``'s (``launch`` aside)."""
    launches = parse_commands(command)
    results: list[CheckResult | PreflightError] = []
    for position in range(1, len(launches) + 1):
        try:
            results.append(check(command, launch=position, **options))  # type: ignore[arg-type]
        except PreflightError as err:
            results.append(err)
    status, verdict = launches_verdict([r.status if isinstance(r, CheckResult) else BAD_INPUT for r in results])
    return LaunchesResult(tuple(launches), tuple(results), status, verdict)


def _check(command: str | Sequence[str], *, engine: str | None, model_config: str | None, overshoot: int | None,
           gpu: str | None, device: str | None, owner: bool, progress: IO[str] | None | Stderr,
           suggest: bool = True, launch: int = 1, draft_model_config: str | None = None) -> CheckResult:
    """``check``; ``device`` None stops before the rows."""
    found = parse_commands(command)
    if not 1 <= launch <= len(found):
        raise PreflightError(f"--launch: the text holds {len(found)} launch{'es' if len(found) > 1 else ''}; "
                             f"give 1 to {len(found)}, not {launch}")
    parsed = found[launch - 1]
    if model_config is not None and not os.path.isfile(model_config):
        raise PreflightError(f"--model-config: cannot read {model_config!r} (no such file; give the model's config.json)")
    if draft_model_config is not None and not os.path.isfile(draft_model_config):
        raise PreflightError(f"--draft-model-config: cannot read {draft_model_config!r} (no such file; give the draft "
                             "model's config.json)")
    if parsed.engine not in ADAPTERS:
        raise PreflightError(f"command: {parsed.engine} has no launch adapter on this checkout (have: {', '.join(ADAPTERS)})")
    chosen_gpu, gpu_reason = pick_gpu(parsed, gpu)
    try:
        choice = release_choice.choose(parsed.engine, engine, platform_plugin(parsed.engine, chosen_gpu.platform))
    except ValueError as err:
        raise PreflightError(str(err)) from None
    uses = outside.option_words(parsed.argv, unset_variables(parsed))
    resolution = engine_resolution(parsed, choice, chosen_gpu, model_config, owner=owner, progress=progress,
                                   draft_model_config=draft_model_config)
    if resolution.status == REJECTED and outside.in_refusal(uses, resolution.message):  # the value as written refused
        first = next((line.strip() for line in resolution.message.splitlines() if line.strip()), "")
        return CheckResult(parsed, choice, None, (), (f"{choice.release}'s answer to the text as written: {first[:300]}",),
                           UNDECIDED, f"UNDECIDED: {_outside_line([u.text for u in outside.in_refusal(uses, resolution.message)])}"
                           " (the engine refuses the text as written)")
    outside_note = (f"set outside the command: {', '.join(u.text for u in uses)}",) if uses else ()
    if resolution.status == REJECTED and resolution.rejected_by == "parser" and suggest and engine is None \
            and release_choice.installed(parsed.engine) is None and choice.release == releases.newest(parsed.engine):
        # no release named, none installed: the command most likely runs on a release of its day
        older = _under_older_release(command, parsed, choice, resolution, chosen_gpu, model_config=model_config,
                                     draft_model_config=draft_model_config, overshoot=overshoot, gpu=gpu, device=device,
                                     owner=owner, progress=progress, launch=launch)
        if older is not None:
            return older
    if resolution.status == REJECTED:
        by = "its parser" if resolution.rejected_by == "parser" else resolution.rejected_by
        hint = ""
        if resolution.rejected_by == "parser" and suggest:
            hint = _parser_hint(parsed, choice.release, asked=engine is not None,
                                ask=functools.partial(ask_parser, parsed, chosen_gpu, model_config, owner, progress,
                                                      draft_model_config=draft_model_config))
        misplaced = [w for w in parsed.argv if w.split("=", 1)[0] in CHECK_OPTIONS]
        if misplaced:
            hint += f" ({misplaced[0].split('=', 1)[0]} is an option of workbench check: put it before --)"
        if any(release_choice.blank(word) for word in parsed.argv):  # "--tp 1 \   # comment": as a shell reads it
            hint += (" (a backslash followed by spaces escapes a space, not the line's end: the shell passes ' ' as an "
                     "argument and ends the command on that line)")
        entrypoint = next((w for w in parsed.wrappers if "its entrypoint" in w), None)
        if entrypoint:  # what docker would run: say so, or the refusal reads as the workbench's misreading
            hint += f" (read as docker runs it: {entrypoint})"
        message = "; ".join(line.strip() for line in resolution.message.splitlines() if line.strip())  # one line
        message = message if len(message) <= MESSAGE_CHARS else message[:MESSAGE_CHARS] + " [...]"
        if uses:  # a refusal about something else: it stands, and the values are named
            hint += f" (the command also uses {', '.join(u.text for u in uses)}, set outside it)"
        which = f"launch {parsed.position} of {parsed.launches}: " if parsed.launches > 1 else ""
        raise Refused(f"{which}{choice.release} refuses the command ({by}): {message}{hint}", release=choice.release,
                      by=resolution.rejected_by, message=message, hint=hint.strip())
    if resolution.status != RESOLVED:  # no settings to show the GPU among: a note says which and why
        return CheckResult(parsed, choice, None, (),
                           (*resolution.notes, f"gpu: {chosen_gpu.name} ({gpu_reason})", *outside_note),
                           UNDECIDED, f"UNDECIDED: {resolution.message}")
    try:
        deployment = _deployment(parsed, choice, resolution, chosen_gpu, gpu_reason, overshoot)
    except NotModelled as err:
        return CheckResult(parsed, choice, None, (), (*resolution.notes, *outside_note), UNDECIDED, f"UNDECIDED: {err}")
    blocking, passing = outside.reaching(uses, deployment.flags, deployment.settings)
    if blocking:
        return CheckResult(parsed, choice, deployment, (), deployment.notes, UNDECIDED,
                           f"UNDECIDED: {_outside_line(blocking)}")
    passed = (f"set outside the command, changing no modelled buffer (read as written): {', '.join(passing)}",) if passing else ()
    if device is None:
        return CheckResult(parsed, choice, deployment, (), (*deployment.notes, *passed), UNDECIDED,
                           "not checked: resolved only")
    rows, notes, status, verdict = _run_rows(deployment, device)
    if passing:
        verdict += f" [set outside the command, changing no modelled buffer: {', '.join(passing)}]"
    return CheckResult(parsed, choice, deployment, tuple(rows), (*deployment.notes, *notes, *passed), status, verdict)


def _under_older_release(command: str | Sequence[str], parsed: LaunchCommand, choice: release_choice.Choice,
                         resolution: Resolution, chosen_gpu: Gpu, *, model_config: str | None,
                         draft_model_config: str | None, overshoot: int | None, gpu: str | None, device: str | None,
                         owner: bool, progress: IO[str] | None | Stderr, launch: int) -> CheckResult | None:
    """The command answered under the newest older release whose own parser accepts it (its
    parser and resolution, asked in its engine process), the first line saying so and what the
    newest release refuses; None when no release asked accepts it (the newest's refusal stands)."""
    if release_choice.refusal(choice.release, parsed.argv) is None:
        return None  # what the newest refused is out of the learned parsers' sight: no walk on their strength
    ask = functools.partial(ask_parser, parsed, chosen_gpu, model_config, owner, progress,
                            draft_model_config=draft_model_config)
    walk = other_releases.first_accepting(release_choice.older_releases(parsed.engine, parsed.argv, before=choice.release),
                                          ask)
    if walk.release is None:
        return None
    refusal = "; ".join(line.strip() for line in resolution.message.splitlines() if line.strip())[:300]
    answered = _check(command, engine=walk.release, model_config=model_config, overshoot=overshoot, gpu=gpu, device=device,
                      owner=owner, progress=progress, suggest=False, launch=launch, draft_model_config=draft_model_config)
    reason = (f"the newest release whose own parser accepts the command, no release named and none installed here; "
              f"the newest listed, {choice.release}, refuses it: {refusal}")
    return dataclasses.replace(answered, choice=dataclasses.replace(answered.choice, reason=reason,
                                                                    instead_of=f"{choice.release} refuses the command "
                                                                               f"(its parser): {refusal}"))


def _outside_line(values: Sequence[str]) -> str:
    return (f"the command uses {', '.join(values)}, set outside it (a shell variable or a placeholder): give the "
            "values in their place")


def _parser_hint(parsed: LaunchCommand, release: str, *, asked: bool,
                 ask: Callable[[str], other_releases.Asked[Resolution]]) -> str:
    """Which release to try when ``release``'s parser refuses the command: for a release the user
    asked for, the oldest newer one whose own parser accepts it (the command may use an option or
    value added later), else the newest older one; for the default, the newest older one.

    The learned parsers only rule releases out (``other_releases``): a release is named once its own
    parser, asked through ``ask``, has accepted the command. When ``release``'s own learned parser
    takes the command, what its parser refused (a stray word, a field of a JSON value) is out of the
    learned data's sight, and no other release is asked on its strength."""
    if release_choice.refusal(release, parsed.argv) is None:
        return (" (its learned parser takes every option and choice of the command, so the learned parsers cannot "
                "tell which release would take what it refused: a stray word or a field of a JSON value; "
                "workbench check --engine NAME==VERSION asks a release's own parser)")
    walks = []
    if asked:
        walks.append(("the oldest newer release", release_choice.newer_releases(parsed.engine, parsed.argv, after=release)))
    walks.append(("the newest older release", release_choice.older_releases(parsed.engine, parsed.argv, before=release)))
    refusing: list[str] = []
    for which, candidates in walks:
        walk = other_releases.first_accepting(candidates, ask)
        if walk.release is not None:
            return (f" ({which} whose own parser accepts the command: {walk.release}; "
                    f"workbench check --engine {walk.release})")
        refusing += walk.asked
    if refusing:
        return (f" (the releases whose learned parsers take its options refuse it too, by their own parsers: "
                f"{', '.join(refusing)})")
    return ""


def ask_parser(parsed: LaunchCommand, gpu: Gpu, model_config: str | None, owner: bool,
               progress: IO[str] | None | Stderr, release: str, *,
               draft_model_config: str | None = None) -> other_releases.Asked[Resolution]:
    """``release``'s own parser and resolution on the command, from its engine process: accepted
    unless its parser refused it; not asked when its engine process could not start."""
    try:
        choice = release_choice.choose(parsed.engine, release, platform_plugin(parsed.engine, gpu.platform))
    except ValueError as err:
        return other_releases.Asked(False, None, f"{release}: not asked ({err})", asked=False)
    resolution = engine_resolution(parsed, choice, gpu, model_config, owner=owner, progress=progress,
                                   draft_model_config=draft_model_config)
    if resolution.status == UNLOADABLE:
        return other_releases.Asked(False, None, f"{release}: not asked ({resolution.message})", asked=False)
    if resolution.status == REJECTED and resolution.rejected_by == "parser":
        first = next((line.strip() for line in resolution.message.splitlines() if line.strip()), "")
        return other_releases.Asked(False, None, f"{release} refuses it too (its parser): {first[:200]}")
    return other_releases.Asked(True, resolution, "")


__all__ = ["BAD_INPUT", "FAILS", "SAFE", "UNDECIDED", "CheckResult", "LaunchesResult", "PreflightError", "Refused", "check",
           "check_launches", "combined_status", "launches_verdict", "pick_gpu", "resolve", "vllm_backends"]
