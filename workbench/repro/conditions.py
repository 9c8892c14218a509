"""What reaches a finding: the launch command, the recipe, the scheduler, the batch and KV pool, the releases.

``conditions(finding)`` is the one place these are derived, from what the repository holds now:
the atlas row's reachable length, its reasons and pool tokens (``workbench.analysis.reach``: the
scheduler's reach for the row's recipe at the release's defaults), the releases whose entries in ``data/engines.json`` give
the buffer the same sizing and check (and ``history`` for the seeds), and the launch flags of
``data/repro.json``. Measured per-release buffers replace the release ranges here without
changing the callers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from workbench.analysis.reach import reach_rule
from workbench.engines.store.launch_defaults import load_launch_data
from workbench.engines.store.versions import load_versions
from workbench.repro.findings import Finding

REPRO_DATA = Path(__file__).resolve().parents[2] / "data" / "repro.json"


def repro_data() -> dict[str, object]:
    data = json.loads(REPRO_DATA.read_text())
    assert isinstance(data, dict)
    return data


def backend_entry(backend: str) -> dict[str, object]:
    entry = repro_data()["backends"]
    assert isinstance(entry, dict)
    if backend not in entry:
        raise ValueError(f"backend: {backend!r} has no reproducer data in {REPRO_DATA.name} "
                         f"(has: {', '.join(sorted(entry))})")
    found = entry[backend]
    assert isinstance(found, dict)
    return found


@dataclass(frozen=True)
class Conditions:
    launch_command: str
    recipe: str
    scheduler: str
    batch: str
    kv_pool: str
    releases: str
    caveat: str = ""  # where the atlas's model preset would not run this backend as the command asks


def model_caveat(finding: Finding) -> str:
    """A DSA model (GLM-5, GLM-5.2, DeepSeek-V3.2) gets the dsa backend and, on CUDA, page size 64
    whatever the command asks (the launch data); a row that puts such a preset on another backend
    stands for a model of the same shape without DSA."""
    preset = str(finding.setting.get("preset", ""))
    launch = backend_entry(finding.backend).get("launch", {})
    assert isinstance(launch, dict)
    if "model" in launch:  # the launch names a model that runs this backend as asked (its own note says why)
        return ""
    for model in load_launch_data().models:
        if model.preset == preset and model.dsa and launch.get("attention_backend") != "dsa":
            return (f"{preset} is a DSA model: {finding.release} runs it on the dsa backend at page size 64 whatever the "
                    f"command asks, so this setting is reached by an MLA model of the same shape without DSA "
                    f"(the atlas's preset stands for its numbers: context, recipe, graph batch)")
    return ""


def _count(setting: dict[str, object], name: str, default: int) -> int:
    value = setting.get(name)
    return int(value) if isinstance(value, int) and value else default


def _recipe(s: dict[str, object]) -> tuple[str, list[str]]:
    """The speculative recipe in words and as launch flags."""
    d, steps, topk = _count(s, "draft_tokens", 0), _count(s, "spec_steps", 1), _count(s, "spec_topk", 1)
    if d == 0:
        return "no speculative decoding", []
    if not s.get("draft_has_kv"):
        flags = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(d)]
        if topk != 10:  # the engine's default breadth (speculative_eagle_topk follows it)
            flags += ["--speculative-ngram-max-bfs-breadth", str(topk)]
        return f"NGRAM ({d} draft tokens, breadth {topk})", flags
    flags = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(steps),
             "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens", str(d)]
    return f"EAGLE ({steps} steps, topk {topk}, {d} draft tokens)", flags


def _model_path(preset: str) -> tuple[str, list[str]]:
    """The model's path and the draft flag its EAGLE recipe needs (an MTP model drafts with its own layer)."""
    for model in load_launch_data().models:
        if model.preset == preset:
            draft = [] if model.num_nextn_predict_layers else ["--speculative-draft-model-path", "DRAFT_MODEL"]
            return model.model_paths[0], draft
    return preset or "MODEL", ["--speculative-draft-model-path", "DRAFT_MODEL"]


def _launch_model(launch: dict[str, object], preset: str) -> tuple[str, list[str], list[str]]:
    """(model path, its draft flags, its parallel flags): the backend's own deployment model where the
    data name one (an MLA model without DSA for an MLA backend), else the atlas preset's model."""
    model = launch.get("model")
    if isinstance(model, dict):
        parallel = [str(x) for x in model.get("parallel", [])] if isinstance(model.get("parallel"), list) else []
        draft = [] if model.get("drafts_itself") else ["--speculative-draft-model-path", "DRAFT_MODEL"]
        return str(model["path"]), draft, parallel
    path, draft = _model_path(preset)
    flags = launch.get("parallel", [])
    return path, draft, [str(x) for x in flags] if isinstance(flags, list) else []


def launch_entry_of(finding: Finding) -> dict[str, object]:
    """The finding's mode entry of ``data/repro.json`` (empty when it has none)."""
    modes = backend_entry(finding.backend).get("modes", {})
    assert isinstance(modes, dict)
    found = modes.get(finding.mode, {})
    assert isinstance(found, dict)
    return found


def launch_command(finding: Finding) -> str:
    """A ``python -m sglang.launch_server`` command that runs the finding's setting (the data's own
    command where the state is not a launch setting, as the allocator's exactly full pool)."""
    s = finding.setting
    launch = backend_entry(finding.backend).get("launch", {})
    assert isinstance(launch, dict)
    if "command" in launch:
        return str(launch["command"])
    model, draft, parallel = _launch_model(launch, str(s.get("preset", "")))
    words, spec = _recipe(s)
    env = launch.get("env", [])  # variables the engine reads at start-up (AITER's unified attention)
    parts = [str(x) for x in env] if isinstance(env, list) else []
    parts += ["python -m sglang.launch_server", "--model-path", model, *parallel]
    parts += [str(x) for x in launch.get("device_flags", [])]
    parts += ["--attention-backend", str(launch["attention_backend"])]
    if s.get("context_len"):
        parts += ["--context-length", str(s["context_len"])]
    if s.get("page_size"):
        parts += ["--page-size", str(s["page_size"])]
    if spec:
        parts += spec + (draft if "EAGLE" in spec else [])
    mode_entry = launch_entry_of(finding)
    flags = mode_entry.get("launch_flags", [])
    assert isinstance(flags, list)
    parts += [str(x) for x in flags]
    if s.get("max_bs") and "--disable-cuda-graph" not in parts:
        parts += [_graph_batch_flag(finding.release), str(s["max_bs"])]
        graph_flags = launch.get("graph_flags", [])  # what turns the platform's graphs on (XPU's opt-in)
        parts += [str(x) for x in graph_flags] if isinstance(graph_flags, list) else []
    return " ".join(parts)


def _graph_batch_flag(engine: str) -> str:
    """The release's own spelling of the decode graphs' batch limit: the first of the spellings that
    its parser's option strings (learned: ``parser.option_strings``) hold exactly (0.5.23's argparse
    finds ``--cuda-graph-max-bs`` ambiguous between the decode and prefill limits)."""
    from workbench.engines.store import learned

    section = learned.section(engine.split("+", 1)[0], "parser") or {}
    options = set(section.get("option_strings", {}).get("value") or ())
    for flag in ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"):
        if flag in options:
            return flag
    return "--cuda-graph-max-bs"


def _scheduler(finding: Finding) -> str:
    ctx = _count(finding.setting, "context_len", 0)
    if not ctx:
        return "any decode step (the allocator's gather; no context limit involved)"
    rule = reach_rule(finding.release if finding.release in load_launch_data().versions else load_launch_data().newest["sglang"])
    cap = ctx - rule.cap_offset
    if finding.first_failing <= cap:
        return (f"within the scheduler's cap: a request that runs to {finding.first_failing} committed tokens "
                f"(the cap is {cap}, {rule.sources.get('committed_cap', '')})")
    past = finding.first_failing - cap
    reach = (f"a run reaches {finding.reachable_len} ({finding.reach_why})" if finding.reachable_len and finding.reach_why
             else f"a run reaches {finding.reachable_len}" if finding.reachable_len else "")
    return (f"past the scheduler's cap ({cap}, {rule.sources.get('committed_cap', '')}): a step must carry the "
            f"request {past} token{'s' if past > 1 else ''} past it; {reach}")


def _batch_and_pool(finding: Finding) -> tuple[str, str]:
    L = finding.first_failing
    entry = launch_entry_of(finding)
    if "batch" in entry and "kv_pool" in entry:
        return str(entry["batch"]), str(entry["kv_pool"])
    params = entry.get("params", {})
    assert isinstance(params, dict)
    path = str(params.get("path", "graph"))
    if finding.pool_tokens is None:
        return (f"one request at committed length {L} (the failure is per request: any batch holding it)",
                f"room for that request's {L} tokens and its step's new ones")
    if finding.batch == 1:
        how = "the eager path: a batch past the graph's largest, or --disable-cuda-graph" if path == "eager" else "one request"
        return f"one request at committed length {L} ({how})", f"{finding.pool_tokens} tokens for that request"
    return (f"a full graph batch: {finding.batch} requests, every one at committed length {L}",
            f"a KV pool that holds {finding.pool_tokens} tokens ({finding.batch} x {L}); a smaller pool never forms that batch")


def release_range(finding: Finding) -> str:
    """The releases that ship the finding's sizing and check: every release whose data (learned from
    its own code, ``versions.load_versions``) give the buffer the same values; for a seed, its
    "before" rule or gather."""
    component = "allocator" if finding.check == "alloc_decode" else finding.backend  # the allocator's gather
    same: list[str] = []
    other: list[str] = []
    for engine, version in load_versions().items():
        if not engine.startswith("sglang==") or "+" in engine:
            continue
        fields = version.case_fields(component)
        value = fields.get(finding.mode) if finding.mode in fields else fields.get("gather" if component == "allocator"
                                                                                     else "rule")
        if isinstance(value, dict):
            value = (value.get("rule"), value.get("check"))
        ours = (finding.rule, finding.check) if isinstance(value, tuple) else finding.rule
        if value is not None:
            (same if value == ours else other).append(engine.split("==")[1])
    if not same:
        return "no learned release"
    text = ", ".join(sorted(same, key=_version_key))
    if other:
        text += f" (of the releases learned: {', '.join(sorted(same + other, key=_version_key))})"
    return text


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def conditions(finding: Finding) -> Conditions:
    words, _ = _recipe(finding.setting) if finding.setting.get("context_len") else ("", [])
    batch, pool = _batch_and_pool(finding)
    command = launch_command(finding)
    return Conditions(launch_command=command, recipe=words, scheduler=_scheduler(finding), batch=batch, kv_pool=pool,
                      releases=release_range(finding),
                      caveat="; ".join(c for c in (model_caveat(finding), recipe_caveat(finding), _launch_note(finding),
                                                   str(launch_entry_of(finding).get("note", ""))) if c))


def _launch_note(finding: Finding) -> str:
    """Why the launch differs from the atlas preset's (another model, a variable, a flag), as the data say."""
    launch = backend_entry(finding.backend).get("launch", {})
    assert isinstance(launch, dict)
    return str(launch.get("note", ""))


def recipe_caveat(finding: Finding) -> str:
    """A latent row (a step no deployment of the recipe runs: ``atlas.findings.latent_reason``) says so."""
    return finding.latent


def needs_torchvision(release: str) -> bool:
    """Whether this release's transformers wants a torchvision present (its learned
    ``conformance.torchvision``)."""
    versions = load_versions()
    if release not in versions:
        return False
    return bool(versions[release].facts.get("conformance", {}).get("torchvision", {}).get("value", False))
